//! The [`SimpleApp`] built from an [`AppConfig`] (re-exported here from [`crate::config`]).
//!
//! # What `SimpleApp::new` builds
//!
//! One [`InformerController`] with, per kind, one [`KindHandle<K>`](kubeapp_operator::KindHandle)
//! (its informer the shared one of the app's [`Informers`](kubeapp_operator::Informers), so apps
//! built with one registry watch a kind once), the kind's one handler, wrapped in
//! [`OpinionatedWatcher`](kubeapp_operator::OpinionatedWatcher) /
//! [`OpinionatedReconciler`](kubeapp_operator::OpinionatedReconciler) when the kind is opinionated
//! (managed kinds by default, unmanaged kinds on request), and its triggers (`owns`, `watches`). Opinionated kinds use the finalizers
//! `{group}/{app}-{plural}-{version}` and `{group}/{app}-{plural}-{version}-wip` (the core group
//! stands as `core.kubeapp.dev`; [`OpinionatedOptions::app_name`](kubeapp_operator::OpinionatedOptions::app_name),
//! scheme in [`finalizer`](kubeapp_operator::opinionated::finalizer#names)) unless the kind sets
//! its own finalizer or the config its own in-progress finalizer. Objects still carrying the
//! names of earlier releases (`{app}-{plural}-finalizer`, `{app}-wip`) count as carrying these,
//! and the wrappers replace the old names.
//!
//! # Guarantees and defaults
//!
//! - [`SimpleApp::new`] validates first (see [`crate::validate`]) and fails with every problem found.
//! - Handlers' [`Context`](kubeapp_operator::Context) applies and writes status as the field
//!   manager named after the app, and reports Events as the app, unless
//!   [`AppConfig::controller`](crate::AppConfig::controller) names the controller otherwise.
//! - Kinds are registered while the app is built: inside a Tokio runtime their (shared)
//!   informers start filling their caches at once; handlers are called only once the app runs.
//! - [`SimpleApp::run`](kubeapp_sdk::app::App::run) runs the controller until the stop token is cancelled
//!   (then in-flight handler calls finish, bounded by the controller's shutdown grace). Calls still
//!   running when the grace ran out are dropped, and `run` then returns
//!   [`AppError::Abandoned`] with their number, so the process exits with a status that says so.
//!   Only the stop's own abandoned calls count: calls dropped earlier, when a leadership or shard
//!   term ended, were handed over (another replica handles those objects).
//!   An app runs once: a second `run` fails.
//! - [`SimpleApp::health_checks`](kubeapp_sdk::app::App::health_checks) has one check,
//!   `informers-synced`, which passes only when every informer has delivered its first complete
//!   list, and otherwise names the kinds that have not; with
//!   [`AppConfig::ready_requires_writes`](crate::AppConfig::ready_requires_writes) also
//!   `writes-permitted`, which fails after that many forbidden handler calls of a kind in a row.
//! - The controller and the opinionated wrappers count into the
//!   [`MetricsRegistry`](kubeapp_operator::MetricsRegistry) of
//!   [`AppConfig::metrics`](crate::AppConfig::metrics) (a Runner's: its one prefix, and every app
//!   given it sums into the same series), else into private collectors of the app's own.
//!   [`SimpleApp::metric_collectors`](kubeapp_sdk::app::App::metric_collectors) hands out those
//!   collectors and the app's own ones (a Runner registers them; those it already holds are
//!   accepted).
//! - `validate`, `mutate` and `convert` route by group and kind to the managed kind's validator,
//!   mutator or converter; a kind without one (or an unknown kind) answers the sdk's
//!   `NotImplemented`.
//! - [`SimpleApp::declared_webhooks`](kubeapp_sdk::app::App::declared_webhooks) lists the webhooks of
//!   the manifest, so a Runner without a webhook server refuses to start the app.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::core::admission::AdmissionRequest;
use kubeapp_ha::RunInTerms as _;
use kubeapp_operator::opinionated::FinalizerMetrics;
use kubeapp_operator::{ControllerConfig, ControllerMetrics, InformerController, SyncedFlag};
use kubeapp_sdk::app::{AdmissionError, AppError, ConversionError, HealthCheck};
use kubeapp_sdk::manifest::ManifestData;
use tokio_util::sync::CancellationToken;

pub use crate::config::{AppConfig, AppConfigError};
use crate::kinds::KindSpec;

/// The name of the health check of [`SimpleApp`].
pub const INFORMERS_SYNCED_CHECK: &str = "informers-synced";

/// Handlers for admission and conversion of one managed kind.
struct Hooks {
    group: String,
    kind: String,
    spec: KindSpec,
}

/// An operator app from an [`AppConfig`]; see the [module docs](self).
///
/// Without the `Operator` command line (feature `cli`), a [`Runner`](kubeapp_runner::Runner)
/// runs it: `/metrics`, `/livez`, `/readyz` (ready once the app's informers synced), webhooks,
/// a graceful stop on SIGTERM.
///
/// ```no_run
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// # #[kube(group = "shop.example.com", version = "v1", kind = "Widget", namespaced)]
/// # pub struct WidgetSpec { size: i32 }
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use kubeapp_operator::ReconcileResult;
/// use kubeapp_runner::{Runner, RunnerConfig};
/// use kubeapp_simple::{AppConfig, ManagedKind, SimpleApp};
///
/// let config = AppConfig::new("shop").managed_kind(
///     ManagedKind::<Widget>::new().reconcile_fn(|request, _ctx| async move {
///         tracing::info!(size = request.object.spec.size, "reconciled");
///         Ok(ReconcileResult::done())
///     }),
/// );
/// let app = SimpleApp::new(config, kube::Client::try_default().await?)?;
/// Runner::new(RunnerConfig::default())?.app(app).run().await?;
/// # Ok(())
/// # }
/// ```
pub struct SimpleApp {
    name: String,
    managed: Vec<ApiResource>,
    hooks: Vec<Hooks>,
    controller: InformerController,
    synced: Vec<(String, SyncedFlag)>,
    controller_metrics: ControllerMetrics,
    finalizer_metrics: FinalizerMetrics,
    own_collectors: Vec<crate::config::CollectorFactory>,
    declared_webhooks: Vec<String>,
    leadership: Option<kubeapp_ha::election::Leadership>,
    sharding: Option<kubeapp_ha::sharding::Membership>,
    ready_only_when_leading: bool,
    ready_requires_writes: Option<u64>,
}

impl SimpleApp {
    /// Validates `config` and registers the app's kinds, handlers and triggers with `client`.
    /// Handlers run only once the app [runs](kubeapp_sdk::app::App::run); informers start
    /// listing when registered inside a Tokio runtime (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// Every validation problem, or an invalid finalizer name.
    pub fn new(config: AppConfig, client: Client) -> Result<Self, AppConfigError> {
        config.validate()?;
        let metrics_error = |source| AppConfigError::Metrics {
            app: config.name.clone(),
            source,
        };
        let (controller_metrics, finalizer_metrics) = match &config.metrics {
            Some(metrics) => (metrics.controller(), metrics.finalizer()),
            None => (
                ControllerMetrics::unregistered(None).map_err(metrics_error)?,
                FinalizerMetrics::unregistered(None).map_err(metrics_error)?,
            ),
        };
        let mut controller_config = config
            .controller
            .clone()
            .metrics(controller_metrics.clone());
        if controller_config.controller_name() == ControllerConfig::default().controller_name() {
            // The field manager of `Context::apply` and the reporter of Events: the app's name
            // unless the controller config names something else.
            controller_config = controller_config.name(config.name.clone());
        }
        if let Some(informers) = &config.informers {
            controller_config = controller_config.informers(informers.clone());
        }
        let controller = InformerController::new(controller_config);
        if config.sharding.is_some() {
            // Before the kinds register: their informers list in shard scopes, which a sharded
            // term narrows to the replica's share where the apiserver filters by shard.
            controller
                .informers()
                .list_in(kubeapp_ha::sharding::shard_scopes());
        }
        let mut managed = Vec::new();
        let mut hooks = Vec::new();
        let mut config = config;
        let mut kinds = std::mem::take(&mut config.kinds);
        for spec in &mut kinds {
            add_kind(&config, &controller, &client, spec, &finalizer_metrics)?;
        }
        config.kinds = kinds;
        let synced = controller.synced_flags();
        for spec in config.kinds {
            if spec.managed {
                managed.push(spec.resource.clone());
                hooks.push(Hooks {
                    group: spec.resource.group.clone(),
                    kind: spec.resource.kind.clone(),
                    spec,
                });
            }
        }
        Ok(Self {
            declared_webhooks: config
                .manifest
                .as_ref()
                .map(ManifestData::declared_webhooks)
                .unwrap_or_default(),
            name: config.name,
            managed,
            hooks,
            controller,
            synced,
            controller_metrics,
            finalizer_metrics,
            own_collectors: config.collectors,
            leadership: config.leadership,
            sharding: config.sharding,
            ready_only_when_leading: config.ready_only_when_leading,
            ready_requires_writes: config.ready_requires_writes,
        })
    }

    /// The controller running the app's informers and handlers (to add more, or to inspect).
    pub fn controller(&self) -> &InformerController {
        &self.controller
    }

    fn hooks(&self, group: &str, kind: &str) -> Option<&KindSpec> {
        self.hooks
            .iter()
            .find(|hooks| hooks.group == group && hooks.kind == kind)
            .map(|hooks| &hooks.spec)
    }
}

/// Registers the kind with the controller (its shared informer), its (possibly wrapped) handler
/// and its triggers.
fn add_kind(
    config: &AppConfig,
    controller: &InformerController,
    client: &Client,
    spec: &mut KindSpec,
    finalizer_metrics: &FinalizerMetrics,
) -> Result<(), AppConfigError> {
    let opinionated = spec.opinionated.then(|| {
        config
            .opinionated_for(spec)
            .metrics(finalizer_metrics.clone())
    });
    if let Some(register) = spec.register.take() {
        register(controller, client, opinionated, config.namespace.as_deref()).map_err(
            |source| AppConfigError::Finalizer {
                app: config.name.clone(),
                kind: spec.display_name(),
                source,
            },
        )?;
    }
    tracing::debug!(
        kind = %spec.display_name(),
        opinionated = spec.opinionated,
        managed = spec.managed,
        "kind added"
    );
    Ok(())
}

impl fmt::Debug for SimpleApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimpleApp")
            .field("name", &self.name)
            .field("managed", &self.managed)
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

/// Passes when every informer of the app has synced.
struct InformersSynced {
    synced: Vec<(String, SyncedFlag)>,
}

#[async_trait]
impl HealthCheck for InformersSynced {
    fn name(&self) -> String {
        INFORMERS_SYNCED_CHECK.to_string()
    }

    async fn check(&self) -> Result<(), String> {
        let unsynced: Vec<&str> = self
            .synced
            .iter()
            .filter(|(_, flag)| !flag.is_synced())
            .map(|(kind, _)| kind.as_str())
            .collect();
        if unsynced.is_empty() {
            Ok(())
        } else {
            Err(format!("informers not synced: {}", unsynced.join(", ")))
        }
    }
}

/// `(group, kind)` of a JSON object, from its `apiVersion` and `kind`.
fn group_kind(object: &serde_json::Value) -> (String, String) {
    let field = |name: &str| {
        object
            .get(name)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    };
    let group = field("apiVersion")
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default();
    (group.to_string(), field("kind").to_string())
}

#[async_trait]
impl kubeapp_sdk::app::App for SimpleApp {
    fn diagnostics(&self) -> kubeapp_sdk::diagnostics::AppDiagnostics {
        let mut report = kubeapp_sdk::diagnostics::AppDiagnostics::named(self.name());
        report.leader = self
            .leadership
            .as_ref()
            .map(kubeapp_ha::election::Leadership::diagnostics);
        report.shard = self
            .sharding
            .as_ref()
            .map(kubeapp_ha::sharding::Membership::diagnostics);
        report
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn managed_kinds(&self) -> Vec<ApiResource> {
        self.managed.clone()
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        tracing::info!(app = %self.name, kinds = self.synced.len(), "app starting");
        let running = async {
            match (&self.sharding, &self.leadership) {
                (Some(membership), _) => {
                    self.controller
                        .run_sharded(stop.clone(), membership.clone())
                        .await
                }
                (None, Some(leadership)) => {
                    self.controller
                        .run_while_leading(stop.clone(), leadership.clone())
                        .await
                }
                (None, None) => self.controller.run(stop.clone()).await,
            }
        };
        // Calls dropped when a leadership or shard term ended (handed over: another replica
        // takes the objects) are not this stop's abandoned work: count from the stop on.
        let abandoned_at_stop = async {
            stop.cancelled().await;
            self.controller.abandoned_calls()
        };
        tokio::pin!(running, abandoned_at_stop);
        let mut before_stop = None;
        let run = loop {
            tokio::select! {
                biased;
                calls = &mut abandoned_at_stop, if before_stop.is_none() => {
                    before_stop = Some(calls);
                }
                run = &mut running => break run,
            }
        };
        run.map_err(|source| AppError::Run {
            app: self.name.clone(),
            source: Box::new(source),
        })?;
        let calls = self
            .controller
            .abandoned_calls()
            .saturating_sub(before_stop.unwrap_or(0));
        if calls > 0 {
            return Err(AppError::Abandoned {
                app: self.name.clone(),
                calls,
            });
        }
        tracing::info!(app = %self.name, "app stopped");
        Ok(())
    }

    fn health_checks(&self) -> Vec<Arc<dyn HealthCheck>> {
        let mut checks: Vec<Arc<dyn HealthCheck>> = vec![Arc::new(InformersSynced {
            synced: self.synced.clone(),
        })];
        if let Some(leadership) = &self.leadership
            && self.ready_only_when_leading
        {
            checks.push(Arc::new(kubeapp_ha::election::LeadershipReady(
                leadership.clone(),
            )));
        }
        if let Some(threshold) = self.ready_requires_writes {
            checks.push(Arc::new(self.controller.forbidden_writes_check(threshold)));
        }
        checks
    }

    fn declared_webhooks(&self) -> Vec<String> {
        self.declared_webhooks.clone()
    }

    fn metric_collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut collectors = self.controller_metrics.collectors();
        collectors.extend(self.finalizer_metrics.collectors());
        collectors.extend(self.own_collectors.iter().map(|make| make()));
        collectors
    }

    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        match self
            .hooks(&request.kind.group, &request.kind.kind)
            .and_then(|spec| spec.validator.as_ref())
        {
            Some(validator) => validator.validate(request).await,
            None => Err(AdmissionError::NotImplemented {
                hook: "validation",
                kind: request.kind.kind.clone(),
                operation: request.operation.clone(),
            }),
        }
    }

    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        match self
            .hooks(&request.kind.group, &request.kind.kind)
            .and_then(|spec| spec.mutator.as_ref())
        {
            Some(mutator) => mutator.mutate(request).await,
            None => Err(AdmissionError::NotImplemented {
                hook: "mutation",
                kind: request.kind.kind.clone(),
                operation: request.operation.clone(),
            }),
        }
    }

    async fn convert(
        &self,
        object: serde_json::Value,
        desired_api_version: &str,
    ) -> Result<serde_json::Value, ConversionError> {
        let (group, kind) = group_kind(&object);
        match self
            .hooks(&group, &kind)
            .and_then(|spec| spec.converter.as_ref())
        {
            Some(converter) => converter.convert(object, desired_api_version).await,
            None => Err(ConversionError::NotImplemented {
                kind,
                desired_api_version: desired_api_version.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::admission::AdmissionReview;
    use kubeapp_operator::{ReconcileResult, WatcherFns};
    use kubeapp_sdk::app::App as _;

    use super::*;
    use crate::kinds::{ManagedKind, UnmanagedKind};

    /// A client for an address nothing listens on: building the app never calls it.
    fn offline_client() -> Client {
        let url = "http://127.0.0.1:9".parse().expect("url");
        Client::try_from(kube::Config::new(url)).expect("client")
    }

    fn request(kind: &str, group: &str) -> AdmissionRequest<DynamicObject> {
        let api_version = if group.is_empty() {
            "v1".to_string()
        } else {
            format!("{group}/v1")
        };
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": "configmaps"},
                "operation": "CREATE",
                "namespace": "ns",
                "name": "cm",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": api_version, "kind": kind,
                           "metadata": {"name": "cm", "namespace": "ns"}},
                "dryRun": false
            }
        });
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_value(review).expect("review");
        review.try_into().expect("request")
    }

    fn app() -> SimpleApp {
        let configmaps = ManagedKind::<ConfigMap>::new()
            .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) })
            .validate_fn(|request| async move {
                match request.username.as_deref() {
                    Some("alice") => Err(AdmissionError::denied("not alice")),
                    _ => Ok(()),
                }
            })
            .mutate_fn(|request| async move {
                let mut cm = request.object.unwrap_or_default();
                cm.data = Some([("mutated".to_string(), "yes".to_string())].into());
                Ok(cm)
            });
        let config = AppConfig::new("shop")
            .managed_kind(configmaps)
            .unmanaged_kind(
                UnmanagedKind::<k8s_openapi::api::core::v1::Secret>::new()
                    .watcher(WatcherFns::new()),
            );
        SimpleApp::new(config, offline_client()).expect("valid")
    }

    /// A kind of the manifest's group, for apps checked against a manifest.
    #[derive(
        kube::CustomResource,
        Clone,
        Debug,
        serde::Deserialize,
        serde::Serialize,
        schemars::JsonSchema,
    )]
    #[kube(group = "shop.example.com", version = "v1", kind = "Page", namespaced)]
    struct PageSpec {
        title: String,
    }

    #[tokio::test]
    async fn the_manifests_webhooks_are_declared_to_the_runner() {
        assert!(app().declared_webhooks().is_empty(), "no manifest, none");
        let manifest = ManifestData::from_yaml(
            "appName: shop\ngroup: shop.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Page\n        admission:\n          validation: {operations: [CREATE]}\n          mutation: {operations: [CREATE]}\n",
        )
        .expect("manifest");
        let pages = ManagedKind::<Page>::new()
            .reconcile_fn(|_request, _ctx| async { Ok(ReconcileResult::done()) })
            .validate_fn(|_request| async { Ok(()) })
            .mutate_fn(|request| async move {
                request
                    .object
                    .ok_or_else(|| AdmissionError::denied("no object"))
            });
        let app = SimpleApp::new(
            AppConfig::new("shop")
                .manifest(manifest)
                .managed_kind(pages),
            offline_client(),
        )
        .expect("valid against its manifest");
        assert_eq!(app.declared_webhooks(), ["Page: validation, mutation"]);
    }

    #[tokio::test]
    async fn admission_routes_to_the_kinds_handlers_by_group_and_kind() {
        let app = app();
        let err = app
            .validate(&request("ConfigMap", ""))
            .await
            .expect_err("alice is denied");
        assert_eq!(err.to_string(), "denied: not alice");
        let mutated = app
            .mutate(&request("ConfigMap", ""))
            .await
            .expect("mutated");
        assert_eq!(mutated.data["data"]["mutated"], "yes");
        // Same kind name in another group: not ours.
        let err = app
            .validate(&request("ConfigMap", "other.example.com"))
            .await
            .expect_err("not implemented");
        assert!(
            matches!(
                err,
                AdmissionError::NotImplemented {
                    hook: "validation",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn kinds_without_a_handler_answer_not_implemented() {
        let app = app();
        let err = app
            .mutate(&request("Secret", ""))
            .await
            .expect_err("unmanaged kinds have no mutator");
        assert!(
            matches!(
                err,
                AdmissionError::NotImplemented {
                    hook: "mutation",
                    ..
                }
            ),
            "{err}"
        );
        let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let err = app.convert(object, "v2").await.expect_err("no converter");
        assert_eq!(
            err.to_string(),
            "conversion of ConfigMap to v2 is not implemented"
        );
    }

    #[tokio::test]
    async fn the_app_reports_managed_kinds_health_and_collectors() {
        let app = app();
        assert_eq!(app.name(), "shop");
        let managed: Vec<String> = app.managed_kinds().into_iter().map(|r| r.kind).collect();
        assert_eq!(managed, ["ConfigMap"]);
        let checks = app.health_checks();
        let err = checks[0]
            .check()
            .await
            .expect_err("not running, not synced");
        assert_eq!(err, "informers not synced: configmaps, secrets");
        let names: Vec<String> = app
            .metric_collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        for name in [
            "informer_events_total",
            "opinionated_finalizer_patches_total",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
    }

    #[tokio::test]
    async fn the_apps_own_collectors_are_handed_out_with_their_live_values() {
        let orders = prometheus::IntCounter::new("shop_orders_total", "Orders.").expect("counter");
        let config = AppConfig::new("shop")
            .managed_kind(ManagedKind::<ConfigMap>::new().watcher(WatcherFns::new()))
            .metric_collector(orders.clone());
        let app = SimpleApp::new(config, offline_client()).expect("a valid app");
        orders.inc_by(3);
        let registry = prometheus::Registry::new();
        for collector in app.metric_collectors() {
            registry.register(collector).expect("register");
        }
        let family = registry
            .gather()
            .into_iter()
            .find(|f| f.name() == "shop_orders_total")
            .expect("the app's own counter is among its collectors");
        assert_eq!(family.get_metric()[0].get_counter().get_value(), 3.0);
        // Asked again (a second Runner, say): the same counter, already registered, is harmless.
        for collector in app.metric_collectors() {
            assert!(matches!(
                registry.register(collector),
                Ok(()) | Err(prometheus::Error::AlreadyReg)
            ));
        }
    }

    #[tokio::test]
    async fn an_invalid_finalizer_name_fails_the_build_naming_the_kind() {
        let configmaps = ManagedKind::<ConfigMap>::new()
            .watcher(WatcherFns::new())
            .finalizer("f".repeat(64));
        let err = SimpleApp::new(
            AppConfig::new("shop").managed_kind(configmaps),
            offline_client(),
        )
        .expect_err("too long");
        assert!(
            matches!(&err, AppConfigError::Finalizer { kind, .. } if kind == "ConfigMap"),
            "{err}"
        );
        // The name of earlier releases' defaults is not qualified: refused, and named.
        let configmaps = ManagedKind::<ConfigMap>::new()
            .watcher(WatcherFns::new())
            .finalizer("shop-configmaps-finalizer");
        let err = SimpleApp::new(
            AppConfig::new("shop").managed_kind(configmaps),
            offline_client(),
        )
        .expect_err("unqualified");
        // The name is in the cause (the chain), not repeated in the app's own message.
        let chain = kubeapp_sdk::error::error_chain(&err);
        assert!(chain.contains("shop-configmaps-finalizer"), "{chain}");
    }
}
