//! The reconciler: renders a ConfigMap from each `Template` with server-side apply, reports
//! status, and deletes the ConfigMap when the `Template` goes. Drift needs no polling: the app
//! `owns` the rendered ConfigMaps, so editing or deleting one reconciles its `Template` at once.
//!
//! The simple App wraps it in the opinionated reconciler (the default for managed kinds), which
//! puts a finalizer on every `Template`: deleting one therefore reaches [`TemplateReconciler`]
//! as `Deleted` before the object disappears, even if the operator was down at the time.
//!
//! What it does per action:
//!
//! - `Created`, `Updated`, `Resynced` (a triggered reconcile of an owned ConfigMap's change
//!   arrives as `Resynced`): apply the rendered ConfigMap ([`render_config_map`]), owned by the
//!   `Template`, with field manager [`FIELD_MANAGER`] (`Context::apply(..).owned_by(..)`: forced
//!   on a conflict), then write `status` ([`ready_status`]) through the status subresource when it
//!   changed (`Context::status`).
//! - `Deleted`: delete the ConfigMap (a missing one is fine).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta};
use kubeapp::operator::apply::conditions;
use kubeapp::operator::{
    Context, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler,
};

use crate::kind::{Template, TemplateStatus};

/// The field manager of the server-side apply of rendered ConfigMaps.
pub const FIELD_MANAGER: &str = "kubeapp-example-reconciler";

/// The label put on rendered ConfigMaps, naming the `Template` they come from.
pub const TEMPLATE_LABEL: &str = "reconciler.example.kubeapp.dev/template";

/// The ConfigMap a `Template` renders to: same name and namespace, the spec's data and a label
/// naming the template. The reconciler applies it owned by the template (`owned_by`), so the
/// app's `owns` maps its changes back, and the garbage collector also removes it in clusters
/// that run one.
pub fn render_config_map(template: &Template) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: template.metadata.name.clone(),
            namespace: template.metadata.namespace.clone(),
            labels: Some([(TEMPLATE_LABEL.to_string(), template.name_any())].into()),
            ..ObjectMeta::default()
        },
        data: Some(template.spec.data.clone()),
        ..ConfigMap::default()
    }
}

/// The status after a successful reconcile of `template`: `observedGeneration` is its
/// generation and `Ready` is `True` (`conditions::set` keeps the transition time of an earlier
/// `Ready=True`, so reconciling an unchanged object yields an unchanged status, and no write);
/// other conditions are kept.
pub fn ready_status(template: &Template) -> TemplateStatus {
    let generation = template.metadata.generation;
    let mut status = template.status.clone().unwrap_or_default();
    let message = format!("ConfigMap {} is up to date", template.name_any());
    let ready = conditions::ready(true, "ConfigMapApplied", message);
    conditions::set(&mut status.conditions, ready, generation);
    status.observed_generation = generation;
    status
}

/// The reconciler of `Template`s; see the [module docs](self). It holds nothing: the client, the
/// apply and the status helpers come with each call's [`Context`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TemplateReconciler;

impl TemplateReconciler {
    async fn apply(&self, template: &Template, ctx: &Context) -> Result<(), ReconcileError> {
        let namespace = template.namespace().unwrap_or_default();
        let name = template.name_any();
        ctx.apply(render_config_map(template))
            .owned_by(template)
            .map_err(ReconcileError::new)?
            .field_manager(FIELD_MANAGER)
            .send()
            .await
            .map_err(ReconcileError::new)?;
        let written = ctx
            .status(template)
            .write(ready_status(template))
            .await
            .map_err(ReconcileError::new)?;
        tracing::info!(
            %namespace,
            %name,
            keys = template.spec.data.len(),
            status_written = written.is_written(),
            "ConfigMap applied"
        );
        Ok(())
    }

    async fn clean_up(&self, template: &Template, ctx: &Context) -> Result<(), ReconcileError> {
        let namespace = template.namespace().unwrap_or_default();
        let name = template.name_any();
        let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client().clone(), &namespace);
        match configmaps.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(%namespace, %name, "ConfigMap deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::debug!(%namespace, %name, "ConfigMap already gone");
            }
            Err(e) => {
                return Err(ReconcileError::new(format!(
                    "deleting ConfigMap {namespace}/{name}: {e}"
                )));
            }
        }
        Ok(())
    }
}

impl Reconciler<Template> for TemplateReconciler {
    async fn reconcile(
        &self,
        request: ReconcileRequest<Template>,
        ctx: &Context,
    ) -> Result<ReconcileResult, ReconcileError> {
        match request.action {
            ReconcileAction::Deleted => self.clean_up(&request.object, ctx).await?,
            ReconcileAction::Created | ReconcileAction::Updated | ReconcileAction::Resynced => {
                self.apply(&request.object, ctx).await?;
            }
        }
        // No requeue: a change to the Template or to its ConfigMap (the app `owns` it) calls
        // again.
        Ok(ReconcileResult::done())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kubeapp::operator::apply::Applier;

    use super::*;
    use crate::kind::TemplateSpec;

    fn template() -> Template {
        let mut t = Template::new(
            "greeting",
            TemplateSpec {
                data: [("greeting".to_string(), "hello".to_string())].into(),
            },
        );
        t.metadata.namespace = Some("demo".into());
        t.metadata.uid = Some("uid-1".into());
        t.metadata.generation = Some(3);
        t
    }

    /// An applier over a client for an address nothing listens on: `owned_by` sends nothing.
    fn offline_applier() -> Applier {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Applier::new(
            kube::Client::try_from(config).expect("client"),
            FIELD_MANAGER,
        )
    }

    #[tokio::test]
    async fn the_config_map_has_the_spec_data_name_namespace_and_owner() {
        let t = template();
        let apply = offline_applier()
            .apply(render_config_map(&t))
            .owned_by(&t)
            .expect("owned");
        let cm = apply.object();
        assert_eq!(cm.metadata.name.as_deref(), Some("greeting"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("demo"));
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("greeting"))
                .map(String::as_str),
            Some("hello")
        );
        let owner = &cm.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(owner.kind, "Template");
        assert_eq!(owner.api_version, "reconciler.example.kubeapp.dev/v1");
        assert_eq!(owner.uid, "uid-1");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            cm.metadata.labels.as_ref().expect("labels")[TEMPLATE_LABEL],
            "greeting"
        );
    }

    #[tokio::test]
    async fn an_object_without_uid_is_not_applied() {
        let mut t = template();
        t.metadata.uid = None;
        let err = offline_applier()
            .apply(render_config_map(&t))
            .owned_by(&t)
            .err()
            .expect("no uid");
        assert!(err.to_string().contains("uid"), "{err}");
    }

    #[test]
    fn status_reports_the_generation_and_ready_and_is_stable() {
        let mut t = template();
        let status = ready_status(&t);
        assert_eq!(status.observed_generation, Some(3));
        let ready = conditions::find(&status.conditions, conditions::READY).expect("Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.observed_generation, Some(3));
        // An earlier transition, read back from the apiserver.
        let earlier: Time =
            serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).expect("a time");
        let mut stored = status.clone();
        stored.conditions[0].last_transition_time = earlier.clone();
        // Unchanged object, later: same status (no write, no event loop).
        t.status = Some(stored.clone());
        assert_eq!(ready_status(&t), stored);
        // New generation: observedGeneration follows, the transition time stays.
        t.metadata.generation = Some(4);
        let next = ready_status(&t);
        assert_eq!(next.observed_generation, Some(4));
        let ready = conditions::find(&next.conditions, conditions::READY).expect("Ready");
        assert_eq!(ready.last_transition_time, earlier);
        assert_eq!(ready.observed_generation, Some(4));
    }
}
