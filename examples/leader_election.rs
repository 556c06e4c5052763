//! A controller that runs its handlers only while it leads: start two or three copies, one
//! reconciles, the others stand by with warm caches and take over when it stops.
//!
//! What it shows: `kubeapp::ha::election` through the facade. A `LeaderElector` competes for
//! the Lease `leader-election-example` (client-go's rules and timings: 15 s lease, 10 s renew
//! deadline, 2 s retry) and `controller.run_while_leading(stop, leadership)` runs one controller
//! term per period of leadership: at the start of a term every cached object is delivered
//! again (as `Created`), and a term ends the moment leadership is lost. The elector is stopped
//! after the controller, so the Lease is released only once no handler runs any more.
//!
//! Run it against the cluster of the current kubeconfig (its default namespace; no CRD needed,
//! it reconciles ConfigMaps labelled `examples.kubeapp.dev/leader-election`):
//!
//! ```sh
//! cargo run --example leader_election -- one      # terminal 1
//! cargo run --example leader_election -- two      # terminal 2
//! kubectl create configmap demo && kubectl label configmap demo examples.kubeapp.dev/leader-election=yes
//! kubectl get lease leader-election-example -o yaml   # holderIdentity
//! ```
//!
//! What to look at: one copy prints `one: leading` and `one reconciles demo (Created)`, the
//! other `two: following`. Ctrl-C the leader: it releases the Lease, and the other, which
//! watches it, prints `two: leading` at once and reconciles `demo` again. (After a `kill -9`
//! instead, the other waits for the Lease to expire: about 15 s.)

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::ha::election::{ElectionConfig, LeaderElector};
use kubeapp::prelude::*;

/// The Lease the copies compete for (in the kubeconfig's default namespace).
const LEASE: &str = "leader-election-example";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    // Each copy needs its own identity (in a Deployment: the pod name).
    let identity = std::env::args()
        .nth(1)
        .ok_or("usage: cargo run --example leader_election -- IDENTITY")?;
    let client = Client::try_default().await?;
    let namespace = client.default_namespace().to_string();

    let controller = InformerController::new(
        ControllerConfig::default()
            .name("leader-election-example")
            .instance(&identity),
    );
    let config_maps = controller.kind(
        Api::<ConfigMap>::namespaced(client.clone(), &namespace),
        watcher::Config::default().labels("examples.kubeapp.dev/leader-election"),
        InformerOptions::default(),
    );
    let me = identity.clone();
    let _reconciler = config_maps.reconcile_fn(move |request, _ctx| {
        println!(
            "{me} reconciles {} ({})",
            request.object.name_any(),
            request.action
        );
        async { Ok(ReconcileResult::done()) }
    });

    let elector = LeaderElector::new(client, ElectionConfig::new(&namespace, LEASE, &identity))?;
    let leadership = elector.leadership();
    tokio::spawn({
        let (mut leadership, me) = (leadership.clone(), identity.clone());
        async move {
            loop {
                let state = if leadership.is_leader() {
                    "leading"
                } else {
                    "following"
                };
                println!("{me}: {state}");
                leadership.changed().await;
            }
        }
    });
    let elector_stop = CancellationToken::new();
    let elector_task = tokio::spawn(elector.run(elector_stop.clone()));

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    controller.run_while_leading(stop, leadership).await?;
    // The handlers stopped: now release the Lease, so another copy takes over at once.
    elector_stop.cancel();
    elector_task.await?;
    Ok(())
}
