//! An operator binary for the end-to-end tests of issue #33 ("the first hour",
//! `simple/tests/operator_first_hour.rs`): one kind, `Widget` (`first-hour.kubeapp.dev/v1`),
//! whose reconciler applies a ConfigMap it owns, behind the opinionated finalizer.
//!
//! Two variables make it misbehave the way the tests need:
//!
//! - `FIRST_HOUR_MANIFEST`: a manifest file to use instead of the built-in one (to check
//!   manifests that disagree with the Rust type);
//! - `FIRST_HOUR_WORK`: how long each reconcile works before it applies (e.g. `60s`), ignoring
//!   cancellation (to check handler calls abandoned at shutdown).
//!
//! Build it with `cargo build -p kubeapp-simple --all-features --example first_hour` (a full
//! `cargo test` builds it).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::{CustomResource, ResourceExt as _};
use kubeapp_operator::{Context, ReconcileError, ReconcileResult};
use kubeapp_simple::operator::Operator;
use kubeapp_simple::{AppConfig, ManagedKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Something to publish in a ConfigMap.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "first-hour.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    plural = "widgets",
    namespaced
)]
pub struct WidgetSpec {
    /// What the ConfigMap says.
    pub message: String,
}

/// The built-in manifest: it agrees with [`Widget`].
const MANIFEST: &str = "appName: first-hour
group: first-hour.kubeapp.dev
versions:
  - name: v1
    kinds:
      - kind: Widget
        plural: widgets
";

/// `FIRST_HOUR_WORK` as a duration (`60s`, `500ms` or seconds).
fn work() -> Option<Duration> {
    let text = std::env::var("FIRST_HOUR_WORK").ok()?;
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    text.trim_end_matches('s')
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// Works for `FIRST_HOUR_WORK`, then applies the Widget's ConfigMap.
async fn apply(widget: Arc<Widget>, ctx: Context) -> Result<ReconcileResult, ReconcileError> {
    if let Some(work) = work() {
        tracing::info!(widget = %widget.name_any(), ?work, "working");
        tokio::time::sleep(work).await;
    }
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: widget.metadata.name.clone(),
            namespace: widget.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        data: Some([("message".into(), widget.spec.message.clone())].into()),
        ..ConfigMap::default()
    };
    ctx.apply(config_map)
        .owned_by(widget.as_ref())?
        .send()
        .await?;
    Ok(ReconcileResult::done())
}

/// Nothing to undo: the owned ConfigMap is garbage-collected.
async fn cleanup(_: Arc<Widget>, _: Context) -> Result<ReconcileResult, ReconcileError> {
    Ok(ReconcileResult::done())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let operator = match std::env::var("FIRST_HOUR_MANIFEST") {
        Ok(path) => match std::fs::read_to_string(&path) {
            Ok(text) => Operator::new(&text).manifest_file(path),
            Err(error) => {
                eprintln!("error: reading {path}: {error}");
                return std::process::ExitCode::FAILURE;
            }
        },
        Err(_) => Operator::new(MANIFEST),
    };
    operator
        .crd::<Widget>()
        .app(|manifest| {
            AppConfig::from_manifest(manifest).managed_kind(
                ManagedKind::<Widget>::new()
                    .apply_cleanup_fn(apply, cleanup)
                    .owns::<ConfigMap>(kube::runtime::watcher::Config::default()),
            )
        })
        .main()
        .await
}
