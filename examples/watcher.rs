//! A watcher only: every `add`, `update`, `delete` and `sync` of a `Memo` is printed; no
//! reconciler.
//!
//! What it shows: the `Watcher` trait (one method per event) on a custom kind, in a simple App
//! (`AppConfig`, `ManagedKind`) run by the `Runner` (`/metrics`, `/livez`, `/readyz` on
//! 127.0.0.1:9090, a graceful stop on Ctrl-C). A managed kind's watcher runs inside the
//! opinionated wrapper: it puts a finalizer on every Memo, so a Memo deleted while the example
//! was stopped still reaches `delete` at the next start, and Memos it had already seen arrive as
//! `sync` (they may have changed meanwhile) instead of a second `add`.
//!
//! Run it against the cluster of the current kubeconfig:
//!
//! ```sh
//! cargo run --example watcher -- crd | kubectl apply -f -   # the Memo CRD
//! cargo run --example watcher                               # Ctrl-C stops it
//! # in another terminal:
//! kubectl apply -f - <<<'{"apiVersion": "examples.kubeapp.dev/v1", "kind": "Memo",
//!   "metadata": {"name": "a"}, "spec": {"text": "hi"}}'
//! kubectl patch memo a --type merge -p '{"spec": {"text": "hello"}}'
//! ```
//!
//! What to look at: `add default/a: "hi"`, then `update default/a: "hi" -> "hello"`. Stop the
//! example, `kubectl delete memo a --wait=false` (the finalizer holds the Memo), start it again:
//! `delete default/a`, and `sync` for every other Memo. `kubectl get memo a -o yaml` shows the
//! finalizer while the Memo lives.

use kubeapp::prelude::*;

/// A note to watch.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.kubeapp.dev",
    version = "v1",
    kind = "Memo",
    namespaced
)]
pub struct MemoSpec {
    /// What the memo says.
    pub text: String,
}

/// Prints what happens to Memos. A returned error would be retried by the controller.
struct MemoWatcher;

fn key(memo: &Memo) -> String {
    format!(
        "{}/{}",
        memo.namespace().unwrap_or_default(),
        memo.name_any()
    )
}

impl Watcher<Memo> for MemoWatcher {
    async fn add(&self, memo: Arc<Memo>, _ctx: &Context) -> Result<(), BoxError> {
        println!("add    {}: {:?}", key(&memo), memo.spec.text);
        Ok(())
    }

    async fn update(&self, old: Arc<Memo>, new: Arc<Memo>, _ctx: &Context) -> Result<(), BoxError> {
        println!(
            "update {}: {:?} -> {:?}",
            key(&new),
            old.spec.text,
            new.spec.text
        );
        Ok(())
    }

    async fn delete(&self, memo: Arc<Memo>, _ctx: &Context) -> Result<(), BoxError> {
        println!("delete {}: last text {:?}", key(&memo), memo.spec.text);
        Ok(())
    }

    async fn sync(&self, memo: Arc<Memo>, _ctx: &Context) -> Result<(), BoxError> {
        println!("sync   {}: {:?}", key(&memo), memo.spec.text);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    if std::env::args().nth(1).as_deref() == Some("crd") {
        print!("{}", kubeapp::sdk::crd::to_yaml(&[Memo::crd()])?);
        return Ok(());
    }
    let client = Client::try_default().await?;
    let runner = Runner::new(RunnerConfig::default().metrics_addr(([127, 0, 0, 1], 9090).into()))?;
    let app = AppConfig::new("memo-watcher")
        .metrics(runner.metrics().clone())
        .managed_kind(ManagedKind::<Memo>::new().watcher(MemoWatcher));
    runner.app(SimpleApp::new(app, client)?).run().await?;
    Ok(())
}
