//! The `crd`, `rbac` and `manifests` commands of [`Operator`] without a cluster, and its errors.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::watcher;

use super::commands::{CrdArgs, ManifestArgs, MonitoringArgs, RbacArgs, WebhookTargetArgs};
use super::parse::{self, Chosen};
use super::*;
use crate::kinds::UnmanagedKind;
use kubeapp_operator::WatcherFns;

const WEBHOOK_MANIFEST: &str = "
appName: shop
group: shop.example.com
versions:
  - name: v1
    kinds:
      - kind: Order
        admission: { validation: { operations: [CREATE] } }
";

fn ca_file(dir: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kubeapp-operator-tests-{dir}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("ca.crt");
    std::fs::write(
        &path,
        "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n",
    )
    .expect("write CA");
    path
}

fn manifest_args(webhook: WebhookTargetArgs) -> ManifestArgs {
    ManifestArgs {
        namespace: "shop-system".into(),
        image: Some("shop:1".into()),
        replicas: 1,
        shard: false,
        webhook,
        metrics_prefix: None,
        metrics_auth: false,
        monitoring: MonitoringArgs::default(),
    }
}

#[test]
fn webhooks_of_the_manifest_need_a_ca_and_are_deployed_with_their_configuration() {
    let operator = Operator::new(WEBHOOK_MANIFEST);
    let error = operator
        .manifests_yaml(&manifest_args(WebhookTargetArgs::default()), &NoArgs)
        .expect_err("no CA");
    let message = error.to_string();
    assert!(
        message.contains("--webhook-ca-file") && message.contains("Order: validation"),
        "{message}"
    );
    let yaml = operator
        .manifests_yaml(
            &manifest_args(WebhookTargetArgs {
                webhook_ca_file: Some(ca_file("manifests")),
                webhook_url: None,
            }),
            &NoArgs,
        )
        .expect("manifests");
    for needle in [
        "kind: Deployment",
        "--webhook-cert-file",
        "secretName: shop-operator-webhook-tls",
        "kind: ValidatingWebhookConfiguration",
        "name: shop-operator-webhook",
        "namespace: shop-system",
    ] {
        assert!(yaml.contains(needle), "{needle} missing:\n{yaml}");
    }
    let error = operator
        .manifests_yaml(
            &manifest_args(WebhookTargetArgs {
                webhook_ca_file: Some(ca_file("url")),
                webhook_url: Some("http://127.0.0.1:8443".into()),
            }),
            &NoArgs,
        )
        .expect_err("not https");
    assert!(error.to_string().contains("not an https:// URL"), "{error}");
}

#[test]
fn run_refuses_a_webhook_manifest_without_a_server_certificate() {
    let manifest = ManifestData::from_yaml(WEBHOOK_MANIFEST).expect("manifest");
    let args = <crate::cli::OperatorArgs as clap::FromArgMatches>::from_arg_matches(
        &<commands::OperatorCommand as clap::CommandFactory>::command()
            .try_get_matches_from(["op", "run"])
            .expect("parses")
            .subcommand_matches("run")
            .expect("run")
            .clone(),
    )
    .expect("args");
    let error = webhooks::require_server(&manifest, &args).expect_err("no certificate");
    assert!(
        error
            .to_string()
            .contains("--webhook-cert-file and --webhook-key-file"),
        "{error}"
    );
}

#[test]
fn rbac_comes_from_the_manifest_and_the_apps_kinds_and_can_be_namespaced() {
    let operator = Operator::new(WEBHOOK_MANIFEST).app(|manifest| {
        AppConfig::from_manifest(manifest).unmanaged_kind(
            UnmanagedKind::<ConfigMap>::new()
                .watcher(WatcherFns::<ConfigMap>::new())
                .owns::<Secret>(watcher::Config::default()),
        )
    });
    let yaml = operator
        .rbac_yaml(
            &RbacArgs {
                namespace: "shop-system".into(),
                watch_namespace: Some("shop".into()),
                gate_users: false,
            },
            &NoArgs,
        )
        .expect("rbac");
    for needle in [
        "kind: Role\n",
        "kind: RoleBinding",
        "- configmaps",
        "- secrets",
        "- orders",
    ] {
        assert!(yaml.contains(needle), "{needle} missing:\n{yaml}");
    }
}

#[test]
fn an_invalid_manifest_is_reported_by_every_command() {
    let operator = Operator::new("appName: [unclosed");
    let crd = operator
        .crd_yaml(&CrdArgs {
            namespace: "default".into(),
            webhook: WebhookTargetArgs::default(),
        })
        .expect_err("invalid manifest");
    assert!(
        crd.to_string().starts_with("the operator's manifest:"),
        "{crd}"
    );
    assert!(operator.check_manifest().is_err());
    assert!(
        operator
            .manifests_yaml(&manifest_args(WebhookTargetArgs::default()), &NoArgs)
            .is_err()
    );
}

#[tokio::test]
async fn dry_run_calls_the_operators_rendering_and_says_when_there_is_none() {
    let args = super::dry_run::DryRunArgs {
        object: PathBuf::from("app.yaml"),
        existing: None,
        out: PathBuf::from("out"),
        check: false,
    };
    let without = Operator::new(WEBHOOK_MANIFEST);
    let error = without
        .execute(Command::DryRun(args.clone()), &NoArgs)
        .await
        .expect_err("no dry run given");
    assert!(error.to_string().contains("has no dry run"), "{error}");

    let failing = Operator::new(WEBHOOK_MANIFEST)
        .dry_run(|args| async move { Err(format!("{}: not found", args.object.display()).into()) });
    let error = failing
        .execute(Command::DryRun(args.clone()), &NoArgs)
        .await
        .expect_err("the rendering failed");
    assert_eq!(error.to_string(), "dry run: app.yaml: not found");

    let rendering = Operator::new(WEBHOOK_MANIFEST)
        .dry_run(|args| async move { Ok(format!("rendered into {}", args.out.display())) });
    rendering
        .execute(Command::DryRun(args), &NoArgs)
        .await
        .expect("the rendering's summary is printed");
}

/// The Deployment's container args and whether a role grants `list`, `watch` and `delete` on
/// Leases (the base rules grant only `get`, `create` and `update`), for `args`.
fn run_args_and_lease_grant(args: &ManifestArgs) -> (Vec<String>, bool) {
    let yaml = Operator::new(WEBHOOK_MANIFEST)
        .manifests_yaml(args, &NoArgs)
        .expect("manifests");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let container = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["containers"][0].clone())
        .expect("a Deployment");
    let run_args = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let leases = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            let has = |field: &str, value: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x == value))
            };
            rule["apiGroups"][0] == "coordination.k8s.io"
                && has("resources", "leases")
                && ["list", "watch", "delete"]
                    .iter()
                    .all(|verb| has("verbs", verb))
        });
    (run_args, leases)
}

#[test]
fn sharded_replicas_run_with_shard_and_the_lease_permissions_at_any_count() {
    for replicas in [1, 3] {
        let args = ManifestArgs {
            replicas,
            shard: true,
            ..manifest_args(WebhookTargetArgs {
                webhook_ca_file: Some(ca_file("shard")),
                webhook_url: None,
            })
        };
        let (run_args, leases) = run_args_and_lease_grant(&args);
        assert!(run_args.iter().any(|a| a == "--shard"), "{run_args:?}");
        assert!(
            !run_args.iter().any(|a| a == "--leader-elect"),
            "{run_args:?}"
        );
        assert!(
            leases,
            "{replicas} sharded replicas: the role grants Leases"
        );
    }
    let single = manifest_args(WebhookTargetArgs {
        webhook_ca_file: Some(ca_file("single")),
        webhook_url: None,
    });
    let (run_args, leases) = run_args_and_lease_grant(&single);
    assert!(
        !run_args
            .iter()
            .any(|a| a.starts_with("--shard") || a == "--leader-elect")
    );
    assert!(
        !leases,
        "one unsharded replica needs only the base Lease rules"
    );
}

#[test]
fn several_replicas_run_leader_elected_with_the_lease_permissions() {
    let operator = Operator::new(WEBHOOK_MANIFEST);
    let args = ManifestArgs {
        replicas: 3,
        ..manifest_args(WebhookTargetArgs {
            webhook_ca_file: Some(ca_file("replicas")),
            webhook_url: None,
        })
    };
    let yaml = operator.manifests_yaml(&args, &NoArgs).expect("manifests");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a == "--leader-elect"),
        "{container}"
    );
    assert!(
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "POD_NAMESPACE"),
        "{container}"
    );
    let leases = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            rule["apiGroups"][0] == "coordination.k8s.io"
                && rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x == "leases"))
        });
    assert!(leases, "the role grants the Lease");
}

/// An operator's own flags, for the tests below.
#[derive(Debug, clap::Args)]
struct ShopFlags {
    /// Where the shop's prices come from.
    #[arg(long, value_name = "URL")]
    price_url: Option<String>,
    /// Also watch ConfigMaps (and need the RBAC for them).
    #[arg(long)]
    with_config_maps: bool,
}

/// An operator's own subcommands, for the tests below.
#[derive(Debug, clap::Subcommand)]
enum ShopTools {
    /// Print the price list.
    Prices {
        /// Only this item.
        #[arg(long)]
        item: Option<String>,
    },
    /// Fail on purpose.
    Broken,
}

fn shop_operator(
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> Operator<ShopFlags, ShopTools> {
    Operator::new(WEBHOOK_MANIFEST)
        .args::<ShopFlags>()
        .commands(move |tool: ShopTools, context| {
            let seen = std::sync::Arc::clone(&seen);
            async move {
                match tool {
                    ShopTools::Prices { item } => {
                        seen.lock().expect("seen").push(format!(
                            "prices {item:?} from {:?} of {}",
                            context.args.price_url, context.manifest.app_name
                        ));
                        Ok(())
                    }
                    ShopTools::Broken => Err("the price list is gone".into()),
                }
            }
        })
}

#[tokio::test]
async fn own_flags_and_subcommands_are_parsed_listed_and_dispatched_with_the_operators_exit_codes()
{
    let seen = std::sync::Arc::default();
    let operator = shop_operator(std::sync::Arc::clone(&seen));
    assert!(parse::clashes::<ShopFlags, ShopTools>().is_empty());
    let help = operator.command().render_help().to_string();
    for needle in [
        "The shop operator (group shop.example.com)",
        "--price-url <URL>",
        "prices",
        "Print the price list",
        "run",
    ] {
        assert!(help.contains(needle), "{needle} missing from\n{help}");
    }
    let mut built = operator.command();
    built.build();
    let run_help = built
        .find_subcommand_mut("run")
        .expect("run")
        .render_help()
        .to_string();
    assert!(run_help.contains("--price-url"), "{run_help}");

    // The flag is global: after the subcommand too.
    let invocation = parse::parse::<ShopFlags, ShopTools>(
        operator.command(),
        [
            "shop",
            "run",
            "--price-url",
            "http://prices",
            "--instance",
            "a",
        ],
    )
    .expect("parses");
    assert_eq!(invocation.args.price_url.as_deref(), Some("http://prices"));
    assert!(
        matches!(&invocation.command, Chosen::Builtin(Command::Run(run)) if run.instance.as_deref() == Some("a")),
        "{:?}",
        invocation.command
    );

    let invocation = parse::parse::<ShopFlags, ShopTools>(
        operator.command(),
        ["shop", "--price-url", "http://p", "prices", "--item", "tea"],
    )
    .expect("parses");
    operator.dispatch(invocation).await.expect("prices");
    assert_eq!(
        *seen.lock().expect("seen"),
        ["prices Some(\"tea\") from Some(\"http://p\") of shop"]
    );

    let broken = parse::parse::<ShopFlags, ShopTools>(operator.command(), ["shop", "broken"])
        .expect("parses");
    let error = operator.dispatch(broken).await.expect_err("broken");
    assert_eq!(error_chain(&error), "broken: the price list is gone");
    assert_eq!(error.exit_code(), 1);

    let unknown = parse::parse::<ShopFlags, ShopTools>(
        operator.command(),
        ["shop", "run", "--price-urll", "x"],
    )
    .expect_err("unknown flag");
    assert_eq!(unknown.kind(), clap::error::ErrorKind::UnknownArgument);
    assert_eq!(unknown.exit_code(), 2, "clap's usage exit code");
    let message = unknown.render().to_string();
    assert!(
        message.contains("unexpected argument '--price-urll'") && message.contains("--price-url"),
        "names the flag and suggests the right one: {message}"
    );
}

#[test]
fn own_flags_and_subcommands_that_take_a_common_name_are_refused() {
    #[derive(Debug, clap::Args)]
    struct Clashing {
        /// Clashes with run's --namespace.
        #[arg(long)]
        namespace: Option<String>,
    }
    #[derive(Debug, clap::Subcommand)]
    enum ClashingTools {
        /// Clashes with the common `crd`.
        Crd,
    }
    let clashes = parse::clashes::<Clashing, ClashingTools>();
    assert_eq!(
        clashes,
        [
            "the operator's own subcommand `crd` has the name of a common one",
            "the operator's own flag --namespace is a flag of `crd`",
        ]
    );
    let error = OperatorError::CommandLine(clashes);
    assert_eq!(error.exit_code(), 1);
}

#[test]
fn the_app_builder_gets_the_own_flags_a_registry_and_runs_defaults_in_commands_that_do_not_run() {
    let registries = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&registries);
    let operator = shop_operator(std::sync::Arc::default()).app_with_context(move |context| {
        // A set of the registry given, as every app's metric set is made.
        context
            .metrics
            .set::<kubeapp_operator::ControllerMetrics>()?;
        seen.lock().expect("seen").push((
            context.metrics.prefix().map(str::to_string),
            context.operator.metrics_prefix.clone(),
        ));
        let config = AppConfig::from_manifest(context.manifest);
        Ok(if context.args.with_config_maps {
            config.unmanaged_kind(
                UnmanagedKind::<ConfigMap>::new().watcher(WatcherFns::<ConfigMap>::new()),
            )
        } else {
            config
        })
    });
    let rbac = |with_config_maps| {
        operator
            .rbac_yaml(
                &RbacArgs {
                    namespace: "shop-system".into(),
                    watch_namespace: None,
                    gate_users: false,
                },
                &ShopFlags {
                    price_url: None,
                    with_config_maps,
                },
            )
            .expect("rbac")
    };
    assert!(!rbac(false).contains("configmaps"));
    assert!(rbac(true).contains("configmaps"), "{}", rbac(true));
    assert_eq!(
        *registries.lock().expect("seen"),
        [(None, None), (None, None)],
        "a registry of its own and run's defaults each time"
    );

    let failing = Operator::new(WEBHOOK_MANIFEST).app_with_context(|_| Err("no price list".into()));
    let error = failing
        .rbac_yaml(
            &RbacArgs {
                namespace: "shop-system".into(),
                watch_namespace: None,
                gate_users: false,
            },
            &NoArgs,
        )
        .expect_err("the builder failed");
    assert_eq!(error.to_string(), "building the app: no price list");

    // `rbac --gate-users` prints only the gate users' ClusterRole, without building the app
    // (the failing builder above is not asked).
    let gates = failing
        .rbac_yaml(
            &RbacArgs {
                namespace: "shop-system".into(),
                watch_namespace: None,
                gate_users: true,
            },
            &NoArgs,
        )
        .expect("the gate users' role");
    assert!(gates.contains("kind: ClusterRole"), "{gates}");
    assert!(gates.contains("-gates"), "{gates}");
    assert!(gates.contains("patch"), "{gates}");
    assert!(!gates.contains("ServiceAccount"), "{gates}");
}

#[test]
fn metrics_auth_runs_the_flag_grants_the_reviews_and_adds_a_reader_role() {
    let manifests = |metrics_auth: bool| {
        let args = ManifestArgs {
            metrics_auth,
            ..manifest_args(WebhookTargetArgs {
                webhook_ca_file: Some(ca_file("metrics-auth")),
                webhook_url: None,
            })
        };
        let yaml = Operator::new(WEBHOOK_MANIFEST)
            .manifests_yaml(&args, &NoArgs)
            .expect("manifests");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
        docs
    };
    let grants = |docs: &[serde_json::Value], group: &str, resource: &str| {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole")
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .any(|rule| {
                rule["apiGroups"][0] == group
                    && rule["resources"][0] == resource
                    && rule["verbs"] == serde_json::json!(["create"])
            })
    };
    let args_of = |docs: &[serde_json::Value]| {
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
            .expect("a Deployment")
    };
    let on = manifests(true);
    assert!(
        args_of(&on)
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--metrics-auth")),
        "{on:?}"
    );
    assert!(grants(&on, "authentication.k8s.io", "tokenreviews"));
    assert!(grants(&on, "authorization.k8s.io", "subjectaccessreviews"));
    let reader = on
        .iter()
        .find(|d| d["metadata"]["name"] == "shop-operator-metrics-reader")
        .unwrap_or_else(|| panic!("a reader ClusterRole: {on:?}"));
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics", "/debug/kubeapp"], "verbs": ["get"]}])
    );

    let off = manifests(false);
    assert!(!grants(&off, "authentication.k8s.io", "tokenreviews"));
    assert!(
        !args_of(&off)
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--metrics-auth"))
    );
    assert!(
        !off.iter()
            .any(|d| d["metadata"]["name"] == "shop-operator-metrics-reader")
    );
}
