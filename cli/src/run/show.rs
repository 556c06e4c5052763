//! What `kubeapp run` shows of the samples once the operator is up: the refusals of the
//! samples the webhooks must refuse, and for every applied sample what the operator made of it.
//!
//! Nothing here knows the project's kinds: it reads what any kubeapp operator reports.
//!
//! - `samples/refused/*.yaml`: objects the admission webhooks must refuse. Each is applied by
//!   server-side dry run until the apiserver refuses it (the webhook configurations take a
//!   moment to be called): `refused: Kind ns/name from FILE: MESSAGE`. One still accepted at the
//!   deadline is a `warning:` on stderr. A refusal also proves the webhooks are live before the
//!   samples are applied.
//! - every applied sample: its status once reconciled (`status.observedGeneration` equal to
//!   `metadata.generation` and no `Ready` condition other than `True`, or a `Ready=True`
//!   condition where the kind reports no generation), waited for up to `--sample-timeout`;
//!   the labels the stored object has and the sample did not set (a mutating webhook's or the
//!   operator's); the object read in every other served version of its CRD (through the
//!   conversion webhook when there is one); and the objects it owns (owner reference to its
//!   uid, found through discovery, with a ConfigMap's data, a Secret's keys and a Deployment's
//!   rollout). A sample not reconciled in time gets a `status:` line saying so (a new project's
//!   handler stub returns "not implemented yet", and the operator's log (stderr) says it), and
//!   the rest as for any sample: what the operator did make is shown.
//! - in the cluster mode (controllers and nodes run), an owned Deployment is shown once its
//!   rollout is settled (ready or failed by the built-in readiness rules of
//!   `kubeapp::components::readiness`, e.g. `Available=True` and the new ReplicaSet available),
//!   waited for up to `--sample-timeout`, so that what is shown is the rollout's outcome, not
//!   the moment it was looked at (a components project whose first component is still the stub
//!   has its `web` Deployment shown available). In the plain mode nothing rolls out: it is shown
//!   at once.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kubeapp::components::{Readiness, readiness};
use serde_json::Value;

use super::RunError;
use crate::objects::{self, Applied, ObjectsError};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(200);

/// Applies every object of the files in `refused` by server-side dry run until the apiserver
/// refuses it, and prints each refusal.
///
/// # Errors
///
/// A file that cannot be read or parsed, a document without kind or name.
pub async fn refused_samples(
    client: &kube::Client,
    files: &[std::path::PathBuf],
    timeout: Duration,
) -> Result<(), RunError> {
    for path in files {
        let origin = path.display().to_string();
        let yaml = std::fs::read_to_string(path).map_err(|source| RunError::Sample {
            path: path.clone(),
            source,
        })?;
        for (index, doc) in objects::parse_documents(&yaml, &origin)?.iter().enumerate() {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                match objects::apply(client, doc, &origin, index + 1, true).await {
                    Err(ObjectsError::Apply {
                        kind, name, source, ..
                    }) if matches!(*source, kube::Error::Api(_)) => {
                        let message = match *source {
                            kube::Error::Api(status) => status.message,
                            other => other.to_string(),
                        };
                        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
                        println!("refused: {kind} {ns}/{name} from {origin}: {message}");
                        break;
                    }
                    Err(other) => return Err(other.into()),
                    Ok(line) if tokio::time::Instant::now() >= deadline => {
                        eprintln!(
                            "warning: {line} from {origin} was accepted for {timeout:?}; \
                             samples/refused/ holds objects the webhooks must refuse"
                        );
                        break;
                    }
                    Ok(_) => tokio::time::sleep(POLL).await,
                }
            }
        }
    }
    Ok(())
}

/// What `show` needs of the cluster, found once per run.
pub struct Cluster<'a> {
    /// The control plane's client.
    pub client: &'a kube::Client,
    /// The CRDs `run` installed.
    pub crds: &'a [CustomResourceDefinition],
    /// Every namespaced resource that can be listed (for owned objects); `None` until needed.
    listable: Option<Vec<ApiResource>>,
    /// Whether controllers roll Deployments out (the cluster mode): owned ones are then shown
    /// once their rollout is settled.
    rollouts: bool,
}

impl<'a> Cluster<'a> {
    /// A view of the cluster of `client` with the installed `crds`; `rollouts` when controllers
    /// roll Deployments out (the cluster mode).
    pub fn new(
        client: &'a kube::Client,
        crds: &'a [CustomResourceDefinition],
        rollouts: bool,
    ) -> Self {
        Self {
            client,
            crds,
            listable: None,
            rollouts,
        }
    }

    /// Prints what the operator made of `applied` (see the module docs); waits up to `timeout`
    /// for it to be reconciled, then up to `timeout` for its owned Deployments' rollouts.
    ///
    /// # Errors
    ///
    /// When the apiserver cannot be read.
    pub async fn show(&mut self, applied: &Applied, timeout: Duration) -> Result<(), RunError> {
        let api = self.api(applied, &applied.resource);
        let name = applied.object.name_any();
        let read_failed =
            |e: kube::Error| RunError::System(format!("reading {}: {e}", applied.line));
        let deadline = tokio::time::Instant::now() + timeout;
        let object = loop {
            let object = api.get(&name).await.map_err(read_failed)?;
            if reconciled(&object) {
                println!("status: {} {}", applied.line, status_line(&object));
                break object;
            }
            if tokio::time::Instant::now() >= deadline {
                println!(
                    "status: {} not reconciled within {timeout:?} ({}); the operator's log \
                     (stderr) says why",
                    applied.line,
                    status_line(&object)
                );
                break object;
            }
            tokio::time::sleep(POLL).await;
        };

        let added: Vec<String> = object
            .labels()
            .iter()
            .filter(|(key, value)| applied.sent_labels.get(*key) != Some(*value))
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        if !added.is_empty() {
            println!(
                "labels: {} {} (not in the sample: set by a mutating webhook or the operator)",
                applied.line,
                added.join(",")
            );
        }

        for (version, converted) in self.other_versions(applied) {
            let as_version = self
                .api(applied, &converted)
                .get(&name)
                .await
                .map_err(|e| {
                    RunError::System(format!("reading {} as {version}: {e}", applied.line))
                })?;
            let how = if converted_by_webhook(self.crds, &applied.resource) {
                " (converted by the conversion webhook)"
            } else {
                ""
            };
            println!(
                "{version}: {} spec {}{how}",
                applied.line, as_version.data["spec"]
            );
        }

        let uid = object.uid().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + timeout;
        for resource in self.listable().await? {
            let api: Api<DynamicObject> = match object.namespace().filter(|_| applied.namespaced) {
                Some(ns) => Api::namespaced_with(self.client.clone(), &ns, &resource),
                None => Api::all_with(self.client.clone(), &resource),
            };
            // A resource the apiserver lists but cannot serve right now is not worth failing
            // the run for: the owned objects are a courtesy.
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for owned in list
                .items
                .into_iter()
                .filter(|o| o.owner_references().iter().any(|r| r.uid == uid))
            {
                println!(
                    "owned: {} {}/{}",
                    resource.kind,
                    owned.namespace().unwrap_or_default(),
                    owned.name_any()
                );
                let owned = if self.rollouts && resource.kind == "Deployment" {
                    settled(&api, &resource, owned, deadline).await
                } else {
                    owned
                };
                for line in data_lines(&resource.kind, &owned.data) {
                    println!("  {line}");
                }
            }
        }
        Ok(())
    }

    fn api(&self, applied: &Applied, resource: &ApiResource) -> Api<DynamicObject> {
        match applied.object.namespace().filter(|_| applied.namespaced) {
            Some(ns) => Api::namespaced_with(self.client.clone(), &ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// The sample's resource in every other served version of its CRD.
    fn other_versions(&self, applied: &Applied) -> Vec<(String, ApiResource)> {
        let resource = &applied.resource;
        self.crds
            .iter()
            .filter(|crd| crd.spec.group == resource.group && crd.spec.names.kind == resource.kind)
            .flat_map(|crd| crd.spec.versions.iter())
            .filter(|version| version.served && version.name != resource.version)
            .map(|version| {
                let mut other = resource.clone();
                other.version.clone_from(&version.name);
                other.api_version = format!("{}/{}", resource.group, version.name);
                (version.name.clone(), other)
            })
            .collect()
    }

    /// Every namespaced resource that supports list (events left out: they are about objects,
    /// not owned by them), from discovery, once.
    async fn listable(&mut self) -> Result<Vec<ApiResource>, RunError> {
        if let Some(listable) = &self.listable {
            return Ok(listable.clone());
        }
        let discovery = Discovery::new(self.client.clone())
            .run()
            .await
            .map_err(|e| RunError::System(format!("API discovery: {e}")))?;
        let listable: Vec<ApiResource> = discovery
            .groups()
            .flat_map(|group| group.recommended_resources())
            .filter(|(resource, capabilities)| {
                matches!(capabilities.scope, Scope::Namespaced)
                    && capabilities.supports_operation(verbs::LIST)
                    && resource.kind != "Event"
            })
            .map(|(resource, _)| resource)
            .collect();
        self.listable = Some(listable.clone());
        Ok(listable)
    }
}

/// `deployment` once its rollout is settled (ready or failed, see the module docs), or as it is
/// at `deadline`, or as last read if it cannot be read again (the owned objects are a
/// courtesy).
async fn settled(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    deployment: DynamicObject,
    deadline: tokio::time::Instant,
) -> DynamicObject {
    let name = deployment.name_any();
    let mut deployment = deployment;
    loop {
        // A list's items come without apiVersion and kind: the readiness rules need them.
        let mut as_json = serde_json::to_value(&deployment).unwrap_or_default();
        as_json["apiVersion"] = resource.api_version.clone().into();
        as_json["kind"] = resource.kind.clone().into();
        if !matches!(readiness(&as_json), Readiness::NotReady(_))
            || tokio::time::Instant::now() >= deadline
        {
            return deployment;
        }
        tokio::time::sleep(POLL).await;
        match api.get(&name).await {
            Ok(again) => deployment = again,
            Err(_) => return deployment,
        }
    }
}

/// The files of `samples/refused/` (YAML), sorted.
pub fn refused_files(project: &Path) -> Vec<std::path::PathBuf> {
    super::child::yaml_files(&project.join("samples").join("refused"))
}

/// Whether the CRD of `resource` converts through a webhook.
fn converted_by_webhook(crds: &[CustomResourceDefinition], resource: &ApiResource) -> bool {
    crds.iter()
        .filter(|crd| crd.spec.group == resource.group && crd.spec.names.kind == resource.kind)
        .filter_map(|crd| crd.spec.conversion.as_ref())
        .any(|conversion| conversion.strategy == "Webhook")
}

/// The object's `Ready` condition, if it reports one.
fn ready_condition(object: &DynamicObject) -> Option<&Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == "Ready")
}

/// Whether the operator reported the object's current generation (see the module docs).
pub fn reconciled(object: &DynamicObject) -> bool {
    let ready = ready_condition(object).map(|condition| condition["status"] == "True");
    match (
        object.metadata.generation,
        object.data["status"]["observedGeneration"].as_i64(),
    ) {
        (Some(generation), Some(observed)) => observed == generation && ready != Some(false),
        (None, _) => ready == Some(true),
        (Some(_), None) => false,
    }
}

/// One line: generation, observed generation and the `Ready` condition.
pub fn status_line(object: &DynamicObject) -> String {
    let observed = object.data["status"]["observedGeneration"]
        .as_i64()
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    let ready = ready_condition(object).map_or_else(
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
    let generation = object
        .metadata
        .generation
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    format!("generation={generation} observedGeneration={observed} {ready}")
}

/// The lines shown under an owned object: a ConfigMap's data (`key: value`), a Secret's keys
/// (values are not printed), a Deployment's rollout (see [`deployment_line`]).
fn data_lines(kind: &str, data: &Value) -> Vec<String> {
    if kind == "Deployment" {
        return vec![deployment_line(data)];
    }
    let Some(entries) = data["data"].as_object() else {
        return Vec::new();
    };
    match kind {
        "ConfigMap" => entries
            .iter()
            .map(|(key, value)| format!("{key}: {}", value.as_str().unwrap_or_default()))
            .collect(),
        "Secret" => entries
            .keys()
            .map(|key| format!("{key}: (hidden)"))
            .collect(),
        _ => Vec::new(),
    }
}

/// A Deployment's rollout as its controller reports it: `Available` (with its reason) and the
/// ready replicas, e.g. `Available=True (MinimumReplicasAvailable), 1/1 replicas ready` (in the
/// cluster mode the real controllers write it; in the plain mode nothing does).
fn deployment_line(data: &Value) -> String {
    let status = &data["status"];
    let available = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .map_or_else(
            || "Available unknown (no controller has reported)".to_string(),
            |c| {
                format!(
                    "Available={} ({})",
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("")
                )
            },
        );
    format!(
        "{available}, {}/{} replicas ready",
        status["readyReplicas"].as_i64().unwrap_or(0),
        data["spec"]["replicas"].as_i64().unwrap_or(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("an object")
    }

    #[test]
    fn reconciled_means_the_current_generation_was_observed_and_not_unready() {
        let with = |generation: Value, status: Value| {
            object(serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "generation": generation}, "status": status
            }))
        };
        let ready = |s: &str| serde_json::json!({"type": "Ready", "status": s, "reason": "R", "message": "m"});
        let done = with(
            2.into(),
            serde_json::json!({"observedGeneration": 2, "conditions": [ready("True")]}),
        );
        assert!(reconciled(&done));
        assert_eq!(
            status_line(&done),
            "generation=2 observedGeneration=2 Ready=True (R: m)"
        );
        assert!(reconciled(&with(
            2.into(),
            serde_json::json!({"observedGeneration": 2})
        )));
        assert!(!reconciled(&with(
            3.into(),
            serde_json::json!({"observedGeneration": 2})
        )));
        assert!(!reconciled(&with(
            2.into(),
            serde_json::json!({"observedGeneration": 2, "conditions": [ready("False")]})
        )));
        assert!(!reconciled(&with(2.into(), Value::Null)));
        assert!(reconciled(&with(
            Value::Null,
            serde_json::json!({"conditions": [ready("True")]})
        )));
        assert!(!reconciled(&with(Value::Null, Value::Null)));
    }

    #[test]
    fn config_maps_show_their_data_and_secrets_only_their_keys() {
        let data = serde_json::json!({"data": {"a": "1", "b": "2"}});
        assert_eq!(data_lines("ConfigMap", &data), ["a: 1", "b: 2"]);
        assert_eq!(data_lines("Secret", &data), ["a: (hidden)", "b: (hidden)"]);
        let rolled_out = serde_json::json!({"spec": {"replicas": 2}, "status": {
            "readyReplicas": 2,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
        }});
        assert_eq!(
            data_lines("Deployment", &rolled_out),
            ["Available=True (MinimumReplicasAvailable), 2/2 replicas ready"]
        );
        assert_eq!(
            data_lines("Deployment", &data),
            ["Available unknown (no controller has reported), 0/1 replicas ready"]
        );
    }
}
