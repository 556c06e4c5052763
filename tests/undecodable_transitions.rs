//! End-to-end tests of objects that pass through an undecodable state (kubeapp issue #32,
//! defect 1) against a real kube-apiserver + etcd: a typed handler's view of an object is the
//! sequence of its decodable states, and every transition of that view is delivered.
//!
//! Per namespace 30 good objects, 5 objects handled as `add` then patched so that they no longer
//! decode and deleted, and 5 objects created undecodable and then fixed. The deletes must reach
//! the handlers with the last decodable state, and the fixed objects must arrive as `add` /
//! `Created`, for a plain typed watcher and reconciler and for the opinionated ones (whose
//! finalizers must be released, not held).

mod call_log;

use call_log::{CallLog, WAIT, logs};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
use kubeapp::operator::opinionated::FinalizerMetrics;
use kubeapp::operator::{
    BoxError, CancellationToken, Context, ControllerConfig, InformerController, InformerOptions,
    OpinionatedOptions, ReconcileRequest, ReconcileResult, Watcher, reconciler_fn,
};
use kubeapp::sdk::testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The Rust type wants an integer; the stored schema accepts anything in `spec`
/// (`TestEnv::install_crd_with_open_spec`).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "transitions.kubeapp.dev",
    version = "v1",
    kind = "Dial",
    namespaced
)]
struct DialSpec {
    count: i64,
}

const GOOD: usize = 30;
const FLIPPED: usize = 5;
const FIXED: usize = 5;

/// Logs every watcher call as `{prefix}{call} {name} {count}` (`update` logs both counts).
struct Logging {
    log: CallLog,
    prefix: &'static str,
}

impl Logging {
    fn push(&self, call: &str, dial: &Dial, extra: &str) {
        self.log.push(format!(
            "{}{call} {} {}{extra}",
            self.prefix,
            dial.name_any(),
            dial.spec.count
        ));
    }
}

impl Watcher<Dial> for Logging {
    async fn add(&self, dial: Arc<Dial>, _: &Context) -> Result<(), BoxError> {
        self.push("add", &dial, "");
        Ok(())
    }
    async fn update(&self, old: Arc<Dial>, new: Arc<Dial>, _: &Context) -> Result<(), BoxError> {
        self.push("update", &new, &format!(" from {}", old.spec.count));
        Ok(())
    }
    async fn delete(&self, dial: Arc<Dial>, _: &Context) -> Result<(), BoxError> {
        self.push("delete", &dial, "");
        Ok(())
    }
    async fn sync(&self, dial: Arc<Dial>, _: &Context) -> Result<(), BoxError> {
        self.push("sync", &dial, "");
        Ok(())
    }
}

/// The handlers under test in one namespace.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Handlers {
    /// A `Watcher<Dial>` and a `reconciler_fn` on a `KindHandle<Dial>`.
    Plain,
    /// The same wrapped in `OpinionatedWatcher` and `OpinionatedReconciler` (default options:
    /// no hook, no release).
    Opinionated,
}

fn register(
    controller: &InformerController,
    client: &kube::Client,
    ns: &str,
    handlers: Handlers,
    log: &CallLog,
    metrics: &FinalizerMetrics,
) {
    let dials = controller.kind(
        Api::<Dial>::namespaced(client.clone(), ns),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let watcher = Logging {
        log: log.clone(),
        prefix: "w ",
    };
    let reconcile_log = log.clone();
    let reconciler = reconciler_fn(move |request: ReconcileRequest<Dial>, _ctx: Context| {
        reconcile_log.push(format!(
            "r {} {} {}",
            request.action,
            request.object.name_any(),
            request.object.spec.count
        ));
        async { Ok(ReconcileResult::done()) }
    });
    match handlers {
        Handlers::Plain => {
            let _watcher = dials.watch(watcher);
            let _reconciler = dials.reconcile(reconciler);
        }
        Handlers::Opinionated => {
            let options = |finalizer: &str| {
                OpinionatedOptions::default()
                    .metrics(metrics.clone())
                    .finalizer(finalizer)
            };
            let _watcher = dials
                .watch_opinionated(watcher, options("transitions.kubeapp.dev/watcher"))
                .expect("valid names");
            let _reconciler = dials
                .reconcile_opinionated(reconciler, options("transitions.kubeapp.dev/reconciler"))
                .expect("valid names");
        }
    }
}

fn dial(name: &str, count: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "transitions.kubeapp.dev/v1",
        "kind": "Dial",
        "metadata": { "name": name },
        "spec": { "count": count },
    }))
    .expect("a Dial")
}

fn good(i: usize) -> String {
    format!("good-{i:02}")
}
fn flipped(i: usize) -> String {
    format!("flipped-{i}")
}
fn fixed(i: usize) -> String {
    format!("fixed-{i}")
}

#[tokio::test]
async fn deletes_of_undecodable_objects_and_first_decodable_states_reach_typed_handlers() {
    logs();
    let env = TestEnv::start().await.expect("control plane");
    env.install_crd_with_open_spec::<Dial>().await.expect("CRD");
    let client = env.client();
    let controller = InformerController::new(ControllerConfig::default());
    let metrics = FinalizerMetrics::unregistered(None).expect("metrics");
    let mut scenarios = Vec::new();
    for handlers in [Handlers::Plain, Handlers::Opinionated] {
        let ns = env
            .create_namespace(&format!("{handlers:?}").to_lowercase())
            .await
            .expect("namespace");
        let log = CallLog::new();
        register(&controller, &client, &ns, handlers, &log, &metrics);
        scenarios.push((handlers, ns, log));
    }
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await.expect("the controller runs") }
    });
    let resource = ApiResource::erase::<Dial>(&());
    let patch = |count: serde_json::Value| serde_json::json!({ "spec": { "count": count } });
    for (_, ns, log) in &scenarios {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let create = |name: String, count: serde_json::Value| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &dial(&name, count))
                    .await
                    .expect("create")
            }
        };
        for i in 0..GOOD {
            create(good(i), i.into()).await;
        }
        for i in 0..FLIPPED {
            create(flipped(i), (100 + i).into()).await;
        }
        // The flipped objects were handled as `add` (and `Created`) before they stop decoding.
        for i in 0..FLIPPED {
            log.wait_contains(&format!("w add {} {}", flipped(i), 100 + i))
                .await;
            log.wait_contains(&format!("r Created {} {}", flipped(i), 100 + i))
                .await;
        }
        for i in 0..FIXED {
            create(fixed(i), "not a number yet".into()).await;
        }
        for i in 0..FLIPPED {
            api.patch(
                &flipped(i),
                &PatchParams::default(),
                &Patch::Merge(&patch("many".into())),
            )
            .await
            .expect("a string where the type wants an integer");
            api.delete(&flipped(i), &DeleteParams::default())
                .await
                .expect("delete");
        }
        for i in 0..FIXED {
            api.patch(
                &fixed(i),
                &PatchParams::default(),
                &Patch::Merge(&patch((200 + i).into())),
            )
            .await
            .expect("fixed");
        }
    }

    for (handlers, ns, log) in &scenarios {
        // Every delete reaches the watcher and the reconciler, with the last decodable state.
        for i in 0..FLIPPED {
            log.wait_contains(&format!("w delete {} {}", flipped(i), 100 + i))
                .await;
            log.wait_contains(&format!("r Deleted {} {}", flipped(i), 100 + i))
                .await;
        }
        // Every fixed object reaches `add` and `Created` with its first decodable state.
        for i in 0..FIXED {
            log.wait_contains(&format!("w add {} {}", fixed(i), 200 + i))
                .await;
            log.wait_contains(&format!("r Created {} {}", fixed(i), 200 + i))
                .await;
        }
        // The opinionated wrappers released their finalizers: the flipped objects are gone.
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        for i in 0..FLIPPED {
            let gone = tokio::time::timeout(
                WAIT,
                kube::runtime::wait::await_condition(
                    api.clone(),
                    &flipped(i),
                    kube::runtime::conditions::is_deleted(""),
                ),
            )
            .await;
            assert!(
                matches!(gone, Ok(Ok(_))),
                "{handlers:?}: {} still there",
                flipped(i)
            );
        }
        let entries = log.entries();
        // Once each, and nothing else: no sync, no update of a flipped or fixed object (their
        // undecodable states changed nothing in the view), no delete of a good one.
        for i in 0..FLIPPED {
            assert_eq!(
                log.count(&format!("w delete {} {}", flipped(i), 100 + i)),
                1,
                "{handlers:?}: {entries:#?}"
            );
        }
        for i in 0..FIXED {
            assert_eq!(
                log.count(&format!("w add {} {}", fixed(i), 200 + i)),
                1,
                "{handlers:?}: {entries:#?}"
            );
        }
        for entry in &entries {
            let call = entry.split(' ').nth(1).unwrap_or_default();
            let name = entry.split(' ').nth(2).unwrap_or_default();
            assert!(
                !(call == "sync"
                    || (call == "update" && !name.starts_with("good-"))
                    || (call == "delete" && name.starts_with("good-"))),
                "{handlers:?}: unexpected {entry:?} in {entries:#?}"
            );
        }
        let added = entries.iter().filter(|e| e.starts_with("w add ")).count();
        assert_eq!(added, GOOD + FLIPPED + FIXED, "{handlers:?}: {entries:#?}");
    }
    // The opinionated watcher reported each flipped object's undecodable state as kept at its
    // last decodable state, and each fixed one's first state as ignored (no decodable state yet;
    // both before the calls awaited above, in the same object's order); nothing was held.
    assert!(metrics.undecodable("Dial", "kept") >= FLIPPED as u64);
    assert!(metrics.undecodable("Dial", "ignored") >= FIXED as u64);
    for outcome in ["held", "released", "handled", "gone"] {
        assert_eq!(metrics.undecodable("Dial", outcome), 0, "{outcome}");
    }
    stop.cancel();
    tokio::time::timeout(WAIT, running)
        .await
        .expect("the controller stops in time")
        .expect("the controller task does not panic");
}
