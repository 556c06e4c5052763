//! A reconciler that owns a child kind and reads the children from the cache `owns` gives.
//!
//! What it shows: each `Notice` is rendered into a ConfigMap it owns. `KindHandle::owns` does
//! two things: a change to (or the deletion of) an owned ConfigMap reconciles its Notice at once
//! (no periodic requeue), and its handle's `store()` is a `Store<ConfigMap>` of the children,
//! which the reconciler reads instead of asking the apiserver. The reconciler applies the child
//! only when the cached one differs (`ctx.apply(..).owned_by(..)`, server-side apply), records
//! an Event when it does (`ctx.recorder()`), and writes a `Ready` condition and
//! `observedGeneration` (`conditions`, `ctx.status()`, which writes only when the status
//! changed). An `InformerController` runs it directly, without an App.
//!
//! Run it against the cluster of the current kubeconfig:
//!
//! ```sh
//! cargo run --example owns_store -- crd | kubectl apply -f -   # the Notice CRD
//! cargo run --example owns_store                               # Ctrl-C stops it
//! # in another terminal:
//! kubectl apply -f - <<<'{"apiVersion": "examples.kubeapp.dev/v1", "kind": "Notice",
//!   "metadata": {"name": "a"}, "spec": {"message": "hi"}}'
//! kubectl patch configmap a --type merge -p '{"data": {"message": "tampered"}}'
//! kubectl delete configmap a
//! ```
//!
//! What to look at: `a (its own event): ConfigMap created`; after the patch `a (owned
//! ConfigMap default/a changed): ConfigMap restored` (then `up to date`: an update of a
//! child triggers, also the one its own apply made); after the delete `ConfigMap created` again.
//! `kubectl get notice a -o yaml` shows `Ready=True`, `kubectl get events` the `Rendered` Event
//! (repeats count in its series).

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kubeapp::prelude::*;

/// A message to publish in a ConfigMap.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.kubeapp.dev",
    version = "v1",
    kind = "Notice",
    namespaced,
    status = "NoticeStatus"
)]
pub struct NoticeSpec {
    /// What the ConfigMap says.
    pub message: String,
}

/// What the reconciler reports.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoticeStatus {
    /// The generation the conditions describe.
    pub observed_generation: Option<i64>,
    /// `Ready`; a list keyed by type, so other writers' conditions are kept.
    #[serde(default)]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// The label on the children: `owns` caches only the ConfigMaps that carry it.
const LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "owns-store-example");

fn child_of(notice: &Notice) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(notice.name_any()),
            namespace: notice.namespace(),
            labels: Some([(LABEL.0.into(), LABEL.1.into())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("message".into(), notice.spec.message.clone())].into()),
        ..ConfigMap::default()
    }
}

async fn reconcile(
    request: ReconcileRequest<Notice>,
    ctx: Context,
    children: Store<ConfigMap>,
) -> Result<ReconcileResult, ReconcileError> {
    let notice = request.object.as_ref();
    if request.action == ReconcileAction::Deleted {
        return Ok(ReconcileResult::done()); // the garbage collector deletes the owned child
    }
    let why = request
        .cause
        .map_or("its own event".into(), |c| c.to_string());
    let key = notice.name_any();
    // The child as the cache has it (an edit or a delete of it is what triggered us, perhaps).
    let cached = children.get_named(notice.namespace().as_deref(), &key);
    let wanted = child_of(notice);
    if cached.as_ref().map(|c| &c.data) != Some(&wanted.data) {
        ctx.apply(wanted).owned_by(notice)?.send().await?;
        let done = cached.map_or("created", |_| "restored");
        println!("{key} ({why}): ConfigMap {done}");
        let note = format!("ConfigMap {done}");
        ctx.recorder().normal(notice, "Rendered", note).await?;
    } else {
        println!(
            "{key} ({why}): ConfigMap up to date, {} cached",
            children.len()
        );
    }
    let mut status = notice.status.clone().unwrap_or_default();
    let ready = conditions::ready(true, "Rendered", "the ConfigMap holds the message");
    conditions::set(&mut status.conditions, ready, notice.metadata.generation);
    status.observed_generation = notice.metadata.generation;
    ctx.status(notice).write(status).await?;
    Ok(ReconcileResult::done())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    if std::env::args().nth(1).as_deref() == Some("crd") {
        print!("{}", kubeapp::sdk::crd::to_yaml(&[Notice::crd()])?);
        return Ok(());
    }
    let client = Client::try_default().await?;
    // The name is the field manager of the applies and the reporter of the Events.
    let controller =
        InformerController::new(ControllerConfig::default().name("owns-store-example"));
    let notices = controller.kind(
        Api::<Notice>::all(client.clone()),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let owns = notices.owns(
        Api::<ConfigMap>::all(client),
        watcher::Config::default().labels(&format!("{}={}", LABEL.0, LABEL.1)),
    );
    let children = owns.store().clone();
    let _reconciler =
        notices.reconcile_fn(move |request, ctx| reconcile(request, ctx, children.clone()));

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    controller.run(stop).await?;
    Ok(())
}
