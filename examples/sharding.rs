//! A controller run sharded across replicas: start two or three copies, each reconciles its own
//! share of the objects, and the shares move when a copy starts or stops.
//!
//! What it shows: `kubeapp::ha::sharding` through the facade. A `ShardRing` keeps one Lease
//! per copy (`sharding-example-IDENTITY`, labelled with the ring) and reads the others';
//! objects are split by the hash of their `uid` into 256 slots, shared out among the live
//! members the same way on every copy. `controller.run_sharded(stop, membership)` runs one
//! controller term per membership: a copy starts on a slot only after its previous owner
//! stopped (or its Lease expired), and then gets the slot's cached objects as `Created`.
//! `Informers::list_in(shard_scopes())`, before the kinds are registered, lets each copy ask
//! the apiserver for its share only where the apiserver can filter by shard (else it caches
//! everything and filters itself).
//!
//! Run it against the cluster of the current kubeconfig (its default namespace; no CRD needed,
//! it reconciles ConfigMaps labelled `examples.kubeapp.dev/sharding`):
//!
//! ```sh
//! for i in 1 2 3 4 5 6; do kubectl create configmap shard-$i; done
//! kubectl label configmap shard-1 shard-2 shard-3 shard-4 shard-5 shard-6 examples.kubeapp.dev/sharding=yes
//! cargo run --example sharding -- one      # terminal 1
//! cargo run --example sharding -- two      # terminal 2
//! kubectl get leases -l sharding.kubeapp.dev/ring=sharding-example
//! ```
//!
//! What to look at: `one: members ["one"]` and `one reconciles shard-N (Created)` for all six;
//! when `two` joins, both print `members ["one", "two"]`, and each reconciles only its share
//! from then on (touch them: `kubectl annotate configmap -l examples.kubeapp.dev/sharding
//! touched=1 --overwrite`). Ctrl-C one copy: its Lease is deleted and the other takes the
//! whole ring back at once.

use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::ha::sharding::{ShardRing, ShardingConfig, shard_scopes};
use kubeapp::prelude::*;

/// The ring's name: the prefix of its Leases and the value of their label.
const RING: &str = "sharding-example";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    // Each copy needs its own identity (in a Deployment: the pod name).
    let identity = std::env::args()
        .nth(1)
        .ok_or("usage: cargo run --example sharding -- IDENTITY")?;
    let client = Client::try_default().await?;
    let namespace = client.default_namespace().to_string();

    let controller = InformerController::new(
        ControllerConfig::default()
            .name("sharding-example")
            .instance(&identity),
    );
    // Before the kinds: their informers then list in shard scopes.
    controller.informers().list_in(shard_scopes());
    let config_maps = controller.kind(
        Api::<ConfigMap>::namespaced(client.clone(), &namespace),
        watcher::Config::default().labels("examples.kubeapp.dev/sharding"),
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

    let ring = ShardRing::new(client, ShardingConfig::new(&namespace, RING, &identity))?;
    let membership = ring.membership();
    tokio::spawn({
        let (mut membership, me) = (membership.clone(), identity.clone());
        async move {
            let mut last = Vec::new();
            loop {
                membership.changed().await;
                let members = membership.state().members;
                if members != last {
                    println!("{me}: members {members:?}");
                    last = members;
                }
            }
        }
    });
    let ring_stop = CancellationToken::new();
    let ring_task = tokio::spawn(ring.run(ring_stop.clone()));

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    controller.run_sharded(stop, membership).await?;
    // The handlers stopped: now delete this copy's Lease, so the others take its share at once.
    ring_stop.cancel();
    ring_task.await?;
    Ok(())
}
