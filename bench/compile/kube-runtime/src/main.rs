//! `examples/minimal` on raw kube-runtime: each `Greeting` is rendered into a ConfigMap it owns
//! (server-side apply, an owner reference), under a finalizer whose cleanup has nothing to undo.
//! `crd` prints the CRD; anything else runs the controller until SIGTERM or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event, finalizer};
use kube::runtime::watcher;
use kube::{Client, CustomResource, CustomResourceExt as _, Resource as _, ResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A message to publish in a ConfigMap.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "minimal.kubeapp.dev", version = "v1", kind = "Greeting", namespaced)]
pub struct GreetingSpec {
    /// What the ConfigMap says.
    pub message: String,
}

const FINALIZER: &str = "minimal.kubeapp.dev/finalizer";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("the object has no namespace")]
    NoNamespace,
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

async fn reconcile(
    greeting: Arc<Greeting>,
    client: Arc<Client>,
) -> Result<Action, finalizer::Error<Error>> {
    let namespace = greeting.namespace().unwrap_or_default();
    let greetings: Api<Greeting> = Api::namespaced(client.as_ref().clone(), &namespace);
    finalizer(&greetings, FINALIZER, greeting, |event| async {
        match event {
            Event::Apply(greeting) => apply(&greeting, &client).await,
            Event::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
}

async fn apply(greeting: &Greeting, client: &Client) -> Result<Action, Error> {
    let namespace = greeting.namespace().ok_or(Error::NoNamespace)?;
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(greeting.name_any()),
            namespace: Some(namespace.clone()),
            owner_references: greeting.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some([("message".into(), greeting.spec.message.clone())].into()),
        ..ConfigMap::default()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    config_maps
        .patch(
            &greeting.name_any(),
            &PatchParams::apply("greeter").force(),
            &Patch::Apply(&config_map),
        )
        .await?;
    Ok(Action::await_change())
}

fn error_policy(greeting: Arc<Greeting>, error: &finalizer::Error<Error>, _: Arc<Client>) -> Action {
    tracing::warn!(name = %greeting.name_any(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        println!("{}", serde_json::to_string_pretty(&Greeting::crd())?);
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let client = Client::try_default().await?;
    Controller::new(Api::<Greeting>::all(client.clone()), watcher::Config::default())
        .owns(Api::<ConfigMap>::all(client.clone()), watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile, error_policy, Arc::new(client))
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::warn!(%error, "reconcile failed");
            }
        })
        .await;
    Ok(())
}
