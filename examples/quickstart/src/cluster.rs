//! What the quick start does inside the control plane: install the webhook configurations the
//! operator printed, wait until the apiserver calls the webhooks, apply the sample Template and
//! read back what the operator made of it.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

/// The Template's API group.
pub const GROUP: &str = "reconciler.example.kubeapp.dev";
/// The label the example's mutator puts on every Template.
pub const OPERATOR_LABEL: &str = "reconciler.example.kubeapp.dev/operator";
/// The field manager of what the quick start applies.
const FIELD_MANAGER: &str = "kubeapp-quickstart";
/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(200);

/// Polls `probe` until it returns `Ok(Some(_))`; an `Err` ends the wait at once.
///
/// # Errors
///
/// The probe's error, or a timeout naming `what`.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The Templates of `ns` in `version`.
pub fn templates(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Template");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "templates");
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Applies the Validating- and MutatingWebhookConfigurations in `yaml` (what `manifests
/// --webhook-url` prints); returns `Kind name` of each.
///
/// # Errors
///
/// When the YAML holds anything else, or the apiserver refuses one.
pub async fn apply_webhook_configurations(
    client: &kube::Client,
    yaml: &str,
) -> anyhow::Result<Vec<String>> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).context("reading the webhook configurations")?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut applied = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = match kind.as_str() {
            "ValidatingWebhookConfiguration" => {
                let config: ValidatingWebhookConfiguration =
                    serde_json::from_value(doc).context("reading the validating configuration")?;
                Api::<ValidatingWebhookConfiguration>::all(client.clone())
                    .patch(&config.name_any(), &params, &Patch::Apply(&config))
                    .await
                    .context("applying the ValidatingWebhookConfiguration")?
                    .name_any()
            }
            "MutatingWebhookConfiguration" => {
                let config: MutatingWebhookConfiguration =
                    serde_json::from_value(doc).context("reading the mutating configuration")?;
                Api::<MutatingWebhookConfiguration>::all(client.clone())
                    .patch(&config.name_any(), &params, &Patch::Apply(&config))
                    .await
                    .context("applying the MutatingWebhookConfiguration")?
                    .name_any()
            }
            other => bail!("unexpected {other:?} in the operator's webhook configurations"),
        };
        applied.push(format!("{kind} {name}"));
    }
    Ok(applied)
}

/// Waits until the apiserver calls the webhooks: a dry-run create of a valid `v2` Template in
/// `ns` comes back labelled by the mutator (conversion and mutation are live), and one without
/// data is refused by the validator, whose message is returned. The apiserver picks
/// configurations up asynchronously, so the first attempts may pass unchecked.
///
/// # Errors
///
/// On timeout.
pub async fn wait_for_webhooks(
    client: &kube::Client,
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe = |version: &str, spec: serde_json::Value| -> anyhow::Result<DynamicObject> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{GROUP}/{version}"),
            "kind": "Template",
            "metadata": {"name": "quickstart-probe"},
            "spec": spec,
        }))
        .context("building a probe Template")
    };
    let v2 = templates(client, ns, "v2");
    let valid = probe(
        "v2",
        serde_json::json!({"entries": [{"key": "k", "value": "v"}]}),
    )?;
    poll(
        "a v2 Template is converted and mutated",
        timeout,
        || async {
            Ok(v2
                .create(&dry, &valid)
                .await
                .ok()
                .filter(|created| created.labels().contains_key(OPERATOR_LABEL))
                .map(drop))
        },
    )
    .await?;
    let v1 = templates(client, ns, "v1");
    let empty = probe("v1", serde_json::json!({"data": {}}))?;
    poll(
        "a Template without data is refused by the validator",
        timeout,
        || async {
            Ok(match v1.create(&dry, &empty).await {
                Err(kube::Error::Api(status)) if status.message.contains("validate.templates") => {
                    Some(status.message)
                }
                _ => None,
            })
        },
    )
    .await
}

/// A Template from YAML: its namespace (`default` when it names none) and the object.
///
/// # Errors
///
/// When the YAML is not a Template of the example's group with a name.
pub fn parse_sample(yaml: &str, origin: &str) -> anyhow::Result<(String, DynamicObject)> {
    let object: DynamicObject =
        serde_saphyr::from_str(yaml).with_context(|| format!("reading the sample {origin}"))?;
    let types = object.types.clone().unwrap_or_default();
    if types.kind != "Template" || !types.api_version.starts_with(&format!("{GROUP}/")) {
        bail!(
            "the sample {origin} is a {} {}, not a Template of {GROUP}",
            types.api_version,
            types.kind
        );
    }
    if object.metadata.name.is_none() {
        bail!("the sample {origin} has no metadata.name");
    }
    let ns = object
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    Ok((ns, object))
}

/// Applies `sample` in `ns` with server-side apply, in its own version.
///
/// # Errors
///
/// When the apiserver (or a webhook) refuses it.
pub async fn apply_sample(
    client: &kube::Client,
    ns: &str,
    sample: &DynamicObject,
) -> anyhow::Result<()> {
    let api_version = sample
        .types
        .as_ref()
        .map(|t| t.api_version.as_str())
        .unwrap_or_default();
    let version = api_version.rsplit('/').next().unwrap_or_default();
    let name = sample.name_any();
    templates(client, ns, version)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(sample),
        )
        .await
        .with_context(|| format!("applying Template {ns}/{name}"))?;
    Ok(())
}

/// Whether the Template's status reports its current generation and `Ready=True`.
pub fn reconciled(template: &DynamicObject) -> bool {
    let status = &template.data["status"];
    let generation = template.metadata.generation;
    generation.is_some()
        && status["observedGeneration"].as_i64() == generation
        && ready_condition(template).is_some_and(|c| c["status"] == "True")
}

fn ready_condition(template: &DynamicObject) -> Option<&serde_json::Value> {
    template.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// One line describing a Template's status.
pub fn status_line(template: &DynamicObject) -> String {
    let status = &template.data["status"];
    let observed = status["observedGeneration"]
        .as_i64()
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    let ready = ready_condition(template).map_or_else(
        || "Ready=<none>".to_string(),
        |c| {
            format!(
                "Ready={} ({}: {})",
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        },
    );
    format!(
        "generation={} observedGeneration={observed} {ready}",
        template.metadata.generation.unwrap_or_default()
    )
}

/// The ConfigMap `ns/name`, once it exists.
///
/// # Errors
///
/// When it cannot be read.
pub async fn config_map(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<ConfigMap>> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading ConfigMap {ns}/{name}"))
}

/// The `spec` of a Template read as `v2`, as one line of `key=value` entries.
pub fn entries_line(template: &DynamicObject) -> String {
    template.data["spec"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}={}",
                e["key"].as_str().unwrap_or_default(),
                e["value"].as_str().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_sample_parses_and_other_kinds_are_refused() {
        let (ns, object) = parse_sample(crate::SAMPLE, "built in").expect("the sample");
        assert_eq!(
            (ns.as_str(), object.name_any().as_str()),
            ("default", "greeting")
        );
        let err = parse_sample(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "x.yaml",
        )
        .expect_err("not a Template");
        assert!(err.to_string().contains("not a Template"), "{err}");
    }

    #[test]
    fn status_lines_name_the_generation_and_the_ready_condition() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "reconciler.example.kubeapp.dev/v1", "kind": "Template",
            "metadata": {"name": "t", "generation": 2},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "Ready", "status": "True", "reason": "ConfigMapApplied", "message": "ok"}
            ]}
        }))
        .expect("object");
        assert!(reconciled(&object));
        assert_eq!(
            status_line(&object),
            "generation=2 observedGeneration=2 Ready=True (ConfigMapApplied: ok)"
        );
    }
}
