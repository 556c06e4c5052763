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
//!   arrives as `Resynced`): apply the rendered ConfigMap ([`render_config_map`]) with field
//!   manager [`FIELD_MANAGER`] (`Context::apply`: forced on a conflict), then write `status`
//!   ([`ready_status`]) through the status subresource when it changed (`Context::status`).
//! - `Deleted`: delete the ConfigMap (a missing one is fine).

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ObjectMeta};
use kube::{Resource, ResourceExt};
use kubeapp::operator::{
    Context, ReconcileAction, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler,
};

use crate::kind::{READY, Template, TemplateCondition, TemplateStatus};

/// The field manager of the server-side apply of rendered ConfigMaps.
pub const FIELD_MANAGER: &str = "kubeapp-example-reconciler";

/// The label put on rendered ConfigMaps, naming the `Template` they come from.
pub const TEMPLATE_LABEL: &str = "reconciler.example.kubeapp.dev/template";

/// Why a `Template` could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The object has no name, namespace or uid (it was not read from an apiserver).
    #[error("the Template has no metadata.{0}")]
    MissingMetadata(&'static str),
}

/// The ConfigMap a `Template` renders to: same name and namespace, the spec's data, a label
/// naming the template and an owner reference to it (so the garbage collector also removes it
/// in clusters that run one).
///
/// # Errors
///
/// [`RenderError::MissingMetadata`] when the object has no name, namespace or uid.
pub fn render_config_map(template: &Template) -> Result<ConfigMap, RenderError> {
    let name = template
        .metadata
        .name
        .clone()
        .ok_or(RenderError::MissingMetadata("name"))?;
    let namespace = template
        .metadata
        .namespace
        .clone()
        .ok_or(RenderError::MissingMetadata("namespace"))?;
    let uid = template
        .metadata
        .uid
        .clone()
        .ok_or(RenderError::MissingMetadata("uid"))?;
    let owner = OwnerReference {
        api_version: Template::api_version(&()).into_owned(),
        kind: Template::kind(&()).into_owned(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    };
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            labels: Some([(TEMPLATE_LABEL.to_string(), name)].into()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(template.spec.data.clone()),
        ..ConfigMap::default()
    })
}

/// The status after a successful reconcile of `template`: `observedGeneration` is its
/// generation and `Ready` is `True`. The transition time of an earlier `Ready=True` is kept, so
/// reconciling an unchanged object yields an unchanged status (and no write).
pub fn ready_status(template: &Template, now: &str) -> TemplateStatus {
    let generation = template.metadata.generation;
    let previous = template.status.as_ref().and_then(|s| s.condition(READY));
    let last_transition_time = match previous {
        Some(c) if c.status == "True" => c.last_transition_time.clone(),
        _ => now.to_string(),
    };
    let mut conditions: Vec<TemplateCondition> = template
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .filter(|c| c.type_ != READY)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conditions.push(TemplateCondition {
        type_: READY.to_string(),
        status: "True".to_string(),
        reason: "ConfigMapApplied".to_string(),
        message: format!(
            "ConfigMap {} is up to date",
            template.metadata.name.as_deref().unwrap_or_default()
        ),
        last_transition_time,
        observed_generation: generation,
    });
    TemplateStatus {
        observed_generation: generation,
        conditions,
    }
}

/// The reconciler of `Template`s; see the [module docs](self). It holds nothing: the client, the
/// apply and the status helpers come with each call's [`Context`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TemplateReconciler;

impl TemplateReconciler {
    async fn apply(&self, template: &Template, ctx: &Context) -> Result<(), ReconcileError> {
        let namespace = template.namespace().unwrap_or_default();
        let name = template.name_any();
        let desired = render_config_map(template).map_err(ReconcileError::new)?;
        ctx.apply(desired)
            .field_manager(FIELD_MANAGER)
            .send()
            .await
            .map_err(ReconcileError::new)?;
        let written = ctx
            .status(template)
            .write(ready_status(template, &now()))
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

/// Now, as Kubernetes writes timestamps (RFC 3339, seconds).
fn now() -> String {
    let time = Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::to_value(time)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn the_config_map_has_the_spec_data_name_namespace_and_owner() {
        let cm = render_config_map(&template()).expect("rendered");
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
        assert_eq!(
            cm.metadata.labels.as_ref().expect("labels")[TEMPLATE_LABEL],
            "greeting"
        );
    }

    #[test]
    fn an_object_without_uid_does_not_render() {
        let mut t = template();
        t.metadata.uid = None;
        let err = render_config_map(&t).expect_err("no uid");
        assert_eq!(err.to_string(), "the Template has no metadata.uid");
    }

    #[test]
    fn status_reports_the_generation_and_ready_and_is_stable() {
        let mut t = template();
        let status = ready_status(&t, "2026-01-01T00:00:00Z");
        assert_eq!(status.observed_generation, Some(3));
        let ready = status.condition(READY).expect("Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time, "2026-01-01T00:00:00Z");
        // Unchanged object, later: same status (no write, no event loop).
        t.status = Some(status.clone());
        assert_eq!(ready_status(&t, "2026-01-02T00:00:00Z"), status);
        // New generation: observedGeneration follows, the transition time stays.
        t.metadata.generation = Some(4);
        let next = ready_status(&t, "2026-01-02T00:00:00Z");
        assert_eq!(next.observed_generation, Some(4));
        assert_eq!(
            next.condition(READY).expect("Ready").last_transition_time,
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn now_is_rfc3339_seconds() {
        let now = now();
        assert!(now.ends_with('Z') && now.len() == 20, "{now}");
    }
}
