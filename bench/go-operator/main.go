// The grafana-app-sdk contender of kubeapp's end-to-end benchmark (bench/, `kubeapp-bench`).
//
// A simple.App with one managed kind, BenchObject (defined by hand, no codegen), whose reconciler
// runs behind the SDK's opinionated wrapper (the default for managed kinds: it adds the finalizer
// `bench.kubeapp.dev/finalizer` after the first successful reconcile; the name is domain-qualified,
// as in every contender, because kube-apiserver answers the default name with a warning that
// client-go logs). The reconciler's logic is
// the benchmark's: when status.observedGeneration differs from metadata.generation, patch the
// status subresource so that they are equal; otherwise do nothing.
//
// The client has no rate limit (client-go's defaults would be 5 QPS / 10 burst, the SDK's runner
// defaults 50 / 300), so that it matches the Rust contenders, whose clients have none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/grafana/grafana-app-sdk/app"
	"github.com/grafana/grafana-app-sdk/k8s"
	"github.com/grafana/grafana-app-sdk/logging"
	"github.com/grafana/grafana-app-sdk/operator"
	"github.com/grafana/grafana-app-sdk/resource"
	"github.com/grafana/grafana-app-sdk/simple"
)

// The bench kind; kubeapp-bench installs the CRD (group, version, kind and plural must match).
const (
	group     = "bench.kubeapp.dev"
	version   = "v1"
	kindID    = "BenchObject"
	plural    = "benchobjects"
	appName   = "bench"
	finalizer = "bench.kubeapp.dev/finalizer"
)

// BenchSpec is the spec of a BenchObject: a payload the operator does not read.
type BenchSpec struct {
	Payload string `json:"payload,omitempty"`
}

// BenchStatus is what the operator writes.
type BenchStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// BenchObject is the typed object.
type BenchObject = resource.TypedSpecStatusObject[BenchSpec, BenchStatus]

var (
	schema = resource.NewSimpleSchema(group, version, &BenchObject{},
		&resource.TypedList[*BenchObject]{}, resource.WithKind(kindID), resource.WithPlural(plural))
	kind = resource.Kind{
		Schema: schema,
		Codecs: map[resource.KindEncoding]resource.Codec{resource.KindEncodingJSON: resource.NewJSONCodec()},
	}
	manifest = app.NewEmbeddedManifest(app.ManifestData{
		AppName: appName,
		Group:   group,
		Versions: []app.ManifestVersion{{
			Name:  version,
			Kinds: []app.ManifestVersionKind{{Kind: kindID, Plural: plural, Scope: string(resource.NamespacedScope)}},
		}},
	})
)

// reconcileErrors counts failed status patches; printed at exit.
var reconcileErrors atomic.Int64

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", "", "the namespace to watch (all when empty)")
	workers := flag.Int("workers", 10, "objects handled at once (InformerOptions.MaxConcurrentWorkers)")
	metricsPort := flag.Int("metrics-port", 9090, "port of the runner's metrics and health server")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *workers, *metricsPort); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, workers, metricsPort int) error {
	if kubeconfig == "" {
		return errors.New("--kubeconfig (or KUBECONFIG) is required")
	}
	logging.DefaultLogger = logging.NewSLogLogger(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var cfg operator.RestConfig
	if err := operator.LoadOperatorRestConfig(kubeconfig, operator.RestConfigOptions{NoLimit: true}, &cfg); err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	runner, err := operator.NewRunner(operator.RunnerConfig{
		KubeConfig: cfg,
		MetricsConfig: operator.RunnerMetricsConfig{
			MetricsServerConfig: operator.MetricsServerConfig{Port: metricsPort, HealthCheckInterval: time.Minute},
			Enabled:             true,
		},
	})
	if err != nil {
		return fmt.Errorf("creating the runner: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	provider := simple.NewAppProvider(manifest, nil, func(config app.Config) (app.App, error) {
		return newApp(config, namespace, workers)
	})
	err = runner.Run(ctx, provider)
	fmt.Fprintf(os.Stderr, "reconcile errors: %d\n", reconcileErrors.Load())
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("running the operator: %w", err)
	}
	return nil
}

func newApp(config app.Config, namespace string, workers int) (app.App, error) {
	clients := k8s.NewClientRegistry(config.KubeConfig, k8s.DefaultClientConfig())
	client, err := clients.ClientFor(kind)
	if err != nil {
		return nil, fmt.Errorf("a client for %s: %w", kindID, err)
	}
	reconciler := &operator.TypedReconciler[*BenchObject]{
		ReconcileFunc: func(ctx context.Context, req operator.TypedReconcileRequest[*BenchObject]) (operator.ReconcileResult, error) {
			if req.Action == operator.ReconcileActionDeleted {
				return operator.ReconcileResult{}, nil
			}
			object := req.Object
			if object.Status.ObservedGeneration == object.Generation {
				return operator.ReconcileResult{}, nil
			}
			patch := resource.PatchRequest{Operations: []resource.PatchOperation{{
				Operation: resource.PatchOpAdd,
				Path:      "/status",
				Value:     map[string]any{"observedGeneration": object.Generation},
			}}}
			// Into the request's object, as grafana-app-sdk code usually does: the wrapper's
			// finalizer patch then starts from the fresh resourceVersion.
			err := client.PatchInto(ctx, object.GetStaticMetadata().Identifier(), patch,
				resource.PatchOptions{Subresource: "status"}, object)
			if err != nil {
				reconcileErrors.Add(1)
				return operator.ReconcileResult{}, fmt.Errorf("patching the status of %s/%s: %w", object.Namespace, object.Name, err)
			}
			return operator.ReconcileResult{}, nil
		},
	}
	return simple.NewApp(simple.AppConfig{
		Name:            appName,
		KubeConfig:      config.KubeConfig,
		ClientGenerator: clients,
		InformerConfig: simple.AppInformerConfig{
			InformerOptions:   operator.InformerOptions{MaxConcurrentWorkers: uint64(workers)},
			FinalizerSupplier: func(resource.Schema) string { return finalizer },
		},
		ManagedKinds: []simple.AppManagedKind{{
			Kind:             kind,
			Reconciler:       reconciler,
			ReconcileOptions: simple.BasicReconcileOptions{Namespace: namespace},
		}},
	})
}
