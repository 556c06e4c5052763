//! [`AppConfig`]: what an [`SimpleApp`](crate::SimpleApp) is built from, and [`AppConfigError`], why it
//! could not be.

use kubeapp_ha::election::Leadership;
use std::fmt;
use std::sync::Arc;

use kubeapp_operator::apply::KindScope;
use kubeapp_operator::metrics::MetricsError;
use kubeapp_operator::opinionated::FinalizerNameError;
use kubeapp_operator::{ControllerConfig, Informers, MetricsRegistry, OpinionatedOptions};
use kubeapp_sdk::app::AppError;
use kubeapp_sdk::manifest::ManifestData;
use kubeapp_sdk::rbac::RbacBuilder;
use prometheus::core::Collector;

use crate::kinds::{KindSpec, ManagedKind, UnmanagedKind};
use crate::validate::{self, AppProblem};
use kubeapp_operator::Kind;

/// How to build an [`SimpleApp`](crate::SimpleApp): a plain struct with chained setters.
///
/// The Kubernetes client is not part of it but an argument of [`SimpleApp::new`](crate::SimpleApp::new), so that a config can
/// be built and [validated](Self::validate) without a cluster (and handed to an
/// `AppProvider`-style factory that gets its client later).
pub struct AppConfig {
    pub(crate) name: String,
    pub(crate) manifest: Option<ManifestData>,
    pub(crate) kinds: Vec<KindSpec>,
    pub(crate) controller: ControllerConfig,
    pub(crate) opinionated: OpinionatedOptions,
    pub(crate) in_progress_finalizer: Option<String>,
    pub(crate) metrics: Option<MetricsRegistry>,
    pub(crate) collectors: Vec<CollectorFactory>,
    pub(crate) informers: Option<Informers>,
    pub(crate) namespace: Option<String>,
    pub(crate) leadership: Option<Leadership>,
    pub(crate) sharding: Option<kubeapp_ha::sharding::Membership>,
    pub(crate) ready_only_when_leading: bool,
    pub(crate) ready_requires_writes: Option<u64>,
}

/// Hands out a fresh box of one of the app's own collectors (they are cheap handles to shared
/// state), as often as [`SimpleApp::metric_collectors`](kubeapp_sdk::app::App::metric_collectors) asks.
pub(crate) type CollectorFactory = Arc<dyn Fn() -> Box<dyn Collector> + Send + Sync>;

impl AppConfig {
    /// An app checked against `manifest` and named by its `appName`, so the two cannot disagree.
    pub fn from_manifest(manifest: ManifestData) -> Self {
        Self::new(manifest.app_name.clone()).manifest(manifest)
    }

    /// An app called `name` (the manifest's `appName`; it names the finalizers), without
    /// manifest or kinds, with the controller's defaults.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            manifest: None,
            kinds: Vec::new(),
            controller: ControllerConfig::default(),
            opinionated: OpinionatedOptions::default(),
            in_progress_finalizer: None,
            metrics: None,
            collectors: Vec::new(),
            informers: None,
            namespace: None,
            leadership: None,
            sharding: None,
            ready_only_when_leading: false,
            ready_requires_writes: None,
        }
    }

    /// Opt-in: `/readyz` fails (a check named `writes-permitted`) while the last `threshold` or
    /// more handler calls of some kind failed with 403 Forbidden: the operator's role lacks a
    /// permission its handlers need, so it does nothing useful until RBAC is fixed. Off by
    /// default, because readiness is about serving (webhooks, synced caches); the failures are
    /// counted in `handler_failures_total{cause="forbidden"}` and logged either way (see
    /// [`kubeapp_operator::failures`]). The `cli` feature's `--ready-requires-writes` sets it.
    #[must_use]
    pub fn ready_requires_writes(mut self, threshold: u64) -> Self {
        self.ready_requires_writes = Some(threshold.max(1));
        self
    }

    /// With [`leadership`](Self::leadership): `/readyz` fails while this replica does not lead
    /// (a check named `leader`). Off by default: a follower serves webhooks and keeps its caches
    /// warm, so it is ready.
    #[must_use]
    #[cfg(feature = "cli")] // The `Operator`'s `--leader-ready` is its one caller.
    pub(crate) fn ready_only_when_leading(mut self) -> Self {
        self.ready_only_when_leading = true;
        self
    }

    /// Runs the app's handlers only while `leadership` says this process leads (see
    /// [`RunInTerms::run_while_leading`](kubeapp_ha::RunInTerms::run_while_leading)):
    /// the informers keep their caches warm meanwhile, and a new term starts with every cached
    /// object delivered as an Add. The `cli` feature's `--leader-elect` sets it.
    #[must_use]
    pub fn leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = Some(leadership);
        self
    }

    /// Runs the app's handlers only on this replica's share of a shard ring's objects (see
    /// [`RunInTerms::run_sharded`](kubeapp_ha::RunInTerms::run_sharded) and
    /// [`sharding`](kubeapp_ha::sharding)); the ring itself runs beside the app. The app's
    /// informers are made with [`shard_scopes`](kubeapp_ha::sharding::shard_scopes), so where
    /// the apiserver can filter by shard they cache only this replica's share (on a registry
    /// given with [`informers`](Self::informers), every informer made after the app's
    /// construction gets them). The `cli` feature's `--shard` sets it. Not together with
    /// [`leadership`](Self::leadership) (sharding wins).
    #[must_use]
    pub fn sharding(mut self, membership: kubeapp_ha::sharding::Membership) -> Self {
        self.sharding = Some(membership);
        self
    }

    /// The manifest the app is checked against (see [`crate::validate`]).
    #[must_use]
    pub fn manifest(mut self, manifest: ManifestData) -> Self {
        self.manifest = Some(manifest);
        self
    }

    /// Adds a kind the app owns.
    #[must_use]
    pub fn managed_kind<K: Kind, C: Send + Sync + 'static>(
        mut self,
        kind: ManagedKind<K, C>,
    ) -> Self
    where
        K::Scope: KindScope,
    {
        self.kinds.push(kind.into_spec());
        self
    }

    /// Adds a kind the app only watches.
    #[must_use]
    pub fn unmanaged_kind<K: Kind, C: Send + Sync + 'static>(
        mut self,
        kind: UnmanagedKind<K, C>,
    ) -> Self
    where
        K::Scope: KindScope,
    {
        self.kinds.push(kind.into_spec());
        self
    }

    /// The controller's settings: retry policy, dequeue policy, workers, event timeout, shutdown
    /// grace. Its metrics are replaced by the app's (see [`metrics`](Self::metrics)).
    #[must_use]
    pub fn controller(mut self, config: ControllerConfig) -> Self {
        self.controller = config;
        self
    }

    /// Watches only `namespace`: every namespaced kind that does not name its own namespace
    /// (cluster-scoped kinds are unaffected), and the children of its `owns` and `watches`.
    /// `None` (the default) watches all namespaces. The `--namespace` flag of the `cli`
    /// feature's operator goes here.
    #[must_use]
    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// The registry of shared informers the app's kinds are watched through (default: one of
    /// the app's own). Apps built with the same registry, e.g. every app of a
    /// [`Runner`](kubeapp_runner::Runner) given [`Runner::informers`](kubeapp_runner::Runner::informers),
    /// open one watch per kind, namespace and selectors between them.
    #[must_use]
    pub fn informers(mut self, informers: Informers) -> Self {
        self.informers = Some(informers);
        self
    }

    /// Settings of the opinionated wrappers (conflict retries); its finalizer names and metrics
    /// are replaced by the app's.
    #[must_use]
    pub fn opinionated_options(mut self, options: OpinionatedOptions) -> Self {
        self.opinionated = options;
        self
    }

    /// The in-progress finalizer of opinionated watchers, instead of
    /// `{group}/{app}-{plural}-{version}-wip`. Must be a qualified name `prefix/name`.
    #[must_use]
    pub fn in_progress_finalizer(mut self, name: impl Into<String>) -> Self {
        self.in_progress_finalizer = Some(name.into());
        self
    }

    /// The metrics the app's controller and opinionated wrappers count into (default: private
    /// collectors of the app's own, handed out by
    /// [`SimpleApp::metric_collectors`](kubeapp_sdk::app::App::metric_collectors)). Apps given the same
    /// handle, e.g. every app of a [`Runner`](kubeapp_runner::Runner) given
    /// [`Runner::metrics`](kubeapp_runner::Runner::metrics), count into one series per kind,
    /// named with that handle's one prefix.
    #[must_use]
    pub fn metrics(mut self, metrics: MetricsRegistry) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Adds a collector of the app's own (a custom counter, say) to the ones the app hands to the
    /// Runner, so that it is served on `/metrics` next to the SDK's metrics. Prometheus
    /// collectors are handles to shared state: keep a clone to update it.
    ///
    /// ```
    /// let steps = prometheus::IntCounterVec::new(
    ///     prometheus::Opts::new("shop_orders_total", "Orders seen, by state."),
    ///     &["state"],
    /// )?;
    /// let config = kubeapp_simple::AppConfig::new("shop").metric_collector(steps.clone());
    /// steps.with_label_values(&["paid"]).inc();
    /// # drop(config);
    /// # Ok::<(), prometheus::Error>(())
    /// ```
    #[must_use]
    pub fn metric_collector<C: Collector + Clone + 'static>(mut self, collector: C) -> Self {
        self.collectors.push(Arc::new(move || {
            Box::new(collector.clone()) as Box<dyn Collector>
        }));
        self
    }

    /// Adds what the app's kinds need beyond the manifest to `builder`: watching its unmanaged
    /// kinds (with finalizers when opinionated), watching what `watches` maps from, and
    /// creating, updating and deleting what `owns` declares as children.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// use kube::runtime::watcher;
    /// use kubeapp_operator::WatcherFns;
    /// use kubeapp_sdk::manifest::ManifestData;
    /// use kubeapp_sdk::rbac::RbacBuilder;
    /// use kubeapp_simple::{AppConfig, UnmanagedKind};
    ///
    /// let manifest = ManifestData::from_yaml("appName: audit\ngroup: audit.example.com\nversions:\n  - name: v1\n    kinds: []\n")?;
    /// let app = AppConfig::from_manifest(manifest.clone()).unmanaged_kind(
    ///     UnmanagedKind::<ConfigMap>::new()
    ///         .watcher(WatcherFns::<ConfigMap>::new())
    ///         .owns::<Secret>(watcher::Config::default()),
    /// );
    /// let rules = app.rbac(RbacBuilder::new(&manifest)).rules()?;
    /// let resources: Vec<_> = rules.iter().map(|r| (r.resources.clone(), r.verbs.len())).collect();
    /// assert_eq!(resources[0], (Some(vec!["configmaps".to_string()]), 3)); // get, list, watch
    /// assert_eq!(resources[1], (Some(vec!["secrets".to_string()]), 7)); // and create .. delete
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rbac<'m>(&self, builder: RbacBuilder<'m>) -> RbacBuilder<'m> {
        self.kinds
            .iter()
            .fold(builder, |builder, spec| spec.rbac(builder))
    }

    /// Checks the kinds against each other and against the manifest; see [`crate::validate`].
    ///
    /// # Errors
    ///
    /// [`AppConfigError::Invalid`] with every problem found.
    pub fn validate(&self) -> Result<(), AppConfigError> {
        let problems = validate::problems(&self.kinds, self.manifest.as_ref());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(AppConfigError::Invalid {
                app: self.name.clone(),
                problems,
            })
        }
    }

    pub(crate) fn opinionated_for(&self, spec: &KindSpec) -> OpinionatedOptions {
        let mut options = self
            .opinionated
            .clone()
            .app_name(&self.name)
            .event_reporter(&self.name);
        if let Some(finalizer) = &spec.finalizer {
            options = options.finalizer(finalizer.clone());
        }
        if let Some(in_progress) = &self.in_progress_finalizer {
            options = options.in_progress_finalizer(in_progress.clone());
        }
        options
    }
}

impl fmt::Debug for AppConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppConfig")
            .field("name", &self.name)
            .field("manifest", &self.manifest.as_ref().map(|m| &m.app_name))
            .field("kinds", &self.kinds)
            .field("controller", &self.controller)
            .field("metrics", &self.metrics)
            .field("collectors", &self.collectors.len())
            .finish_non_exhaustive()
    }
}

/// Why an [`SimpleApp`](crate::SimpleApp) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppConfigError {
    /// The config is inconsistent; every problem is listed.
    #[error("app {app} is invalid:{}", list(problems))]
    Invalid {
        /// The app's name.
        app: String,
        /// Every problem found.
        problems: Vec<AppProblem>,
    },
    /// A finalizer name is invalid (not a qualified name `prefix/name`, a name part past 63
    /// characters, or both names the same).
    #[error("app {app}: kind {kind}")]
    Finalizer {
        /// The app's name.
        app: String,
        /// The kind.
        kind: String,
        /// What is wrong with the name.
        source: FinalizerNameError,
    },
    /// The app's private metric collectors could not be created.
    #[error("app {app}")]
    Metrics {
        /// The app's name.
        app: String,
        /// The cause.
        source: MetricsError,
    },
}

fn list(problems: &[AppProblem]) -> String {
    problems.iter().map(|p| format!("\n  - {p}")).collect()
}

impl From<AppConfigError> for AppError {
    fn from(error: AppConfigError) -> Self {
        let app = match &error {
            AppConfigError::Invalid { app, .. }
            | AppConfigError::Finalizer { app, .. }
            | AppConfigError::Metrics { app, .. } => app.clone(),
        };
        AppError::Build {
            app,
            message: kubeapp_sdk::error::error_chain(&error),
        }
    }
}
