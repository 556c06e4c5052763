//! One dispatch scenario, run through kubeapp's `InformerController` or through kube-runtime's
//! `Controller`, on the same synthetic object stream.
//!
//! The stream: `objects` ConfigMaps, each changed `per_object` times, interleaved across objects
//! (object 0 step 0, object 1 step 0, ..., object 0 step 1, ...) as a busy informer produces them.
//! Step 0 is an Add, later steps are Updates; step `s` carries `generation = s + 1`.
//!
//! A run is complete when every watcher saw every event and every reconciler saw the last state
//! of every object (waiting reconcile requests merge, so reconcilers run fewer times than there
//! are events; the last state is delivered exactly once per reconciler and object). kube-runtime's
//! run is complete when its `Controller::run` stream ends, which it does once the trigger stream
//! ended and every queued reconcile ran.
//!
//! Shared by `benches/dispatch.rs` and `examples/dispatch_throughput.rs` (through `#[path]`).

// Each includer uses a different part of this module.
#![allow(dead_code)]

use kube::core::GroupVersionKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_runtime::controller::{Action, Config as KubeConfig, Controller};
use kube_runtime::reflector::{self, store::Writer};
use kube_runtime::watcher;
use kubeapp_operator::erased::DynReconcilerFn;
use kubeapp_operator::erased::DynWatcherFns;
use kubeapp_operator::object::{SharedObject, share};
use kubeapp_operator::{
    BoxError, CancellationToken, Context, ControllerConfig, Informer, InformerController,
    InformerEvent, ReconcileError, ReconcileRequest, ReconcileResult, Reconciler, Watcher,
};
use tokio::time::Instant;

/// What runs: handler counts, workers, stream size and how long each handler call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Watchers registered for the kind.
    pub watchers: usize,
    /// Reconcilers registered for the kind.
    pub reconcilers: usize,
    /// `max_concurrent_workers` (kubeapp) or `concurrency` (kube-runtime).
    pub workers: usize,
    /// Distinct objects in the stream.
    pub objects: usize,
    /// Events per object.
    pub per_object: usize,
    /// Each handler call awaits this long (`None`: returns at once).
    pub delay: Option<Duration>,
}

impl Scenario {
    /// Events in the stream.
    pub fn events(&self) -> usize {
        self.objects * self.per_object
    }

    /// A short label of the handler set, e.g. `3w+2r`.
    pub fn handlers_label(&self) -> String {
        match (self.watchers, self.reconcilers) {
            (w, 0) => format!("{w}w"),
            (0, r) => format!("{r}r"),
            (w, r) => format!("{w}w+{r}r"),
        }
    }
}

/// The ConfigMap of `object` at `step`.
fn config_map(object: usize, step: usize) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!("object-{object}"));
    cm.metadata.namespace = Some("bench".into());
    cm.metadata.uid = Some(format!("uid-{object}"));
    cm.metadata.resource_version = Some((step * 1_000_000 + object).to_string());
    cm.metadata.generation = Some(i64::try_from(step + 1).unwrap_or(i64::MAX));
    cm
}

/// The stream as kubeapp informer events (objects shared, as an informer shares them).
pub fn kubeapp_input(s: &Scenario) -> Vec<InformerEvent> {
    let mut last: Vec<SharedObject> = Vec::with_capacity(s.objects);
    let mut events = Vec::with_capacity(s.events());
    for step in 0..s.per_object {
        for object in 0..s.objects {
            let new = share(config_map(object, step));
            if step == 0 {
                events.push(InformerEvent::Add(new.clone()));
                last.push(new);
            } else {
                let old = std::mem::replace(&mut last[object], new.clone());
                events.push(InformerEvent::Update { old, new });
            }
        }
    }
    events
}

/// The same stream as raw watch events (an initial empty list, then one `Apply` per step), for
/// runs through the informer's decode, cache and diff, as a real watch takes.
pub fn watch_input(s: &Scenario) -> Vec<watcher::Event<kube::api::DynamicObject>> {
    let mut events = Vec::with_capacity(s.events() + 2);
    events.push(watcher::Event::Init);
    events.push(watcher::Event::InitDone);
    for step in 0..s.per_object {
        for object in 0..s.objects {
            let mut value = match serde_json::to_value(config_map(object, step)) {
                Ok(value) => value,
                Err(error) => panic!("a ConfigMap serializes: {error}"),
            };
            value["apiVersion"] = "v1".into();
            value["kind"] = "ConfigMap".into();
            match serde_json::from_value(value) {
                Ok(object) => events.push(watcher::Event::Apply(object)),
                Err(error) => panic!("a ConfigMap is a DynamicObject: {error}"),
            }
        }
    }
    events
}

/// What a run reads: ready-made informer events, or raw watch events through an informer.
pub enum Input {
    /// `Informer::from_stream`: no decode, no informer cache.
    Events(Vec<InformerEvent>),
    /// `Informer::from_watch_stream::<ConfigMap>`: decode, cache and diff as in a real watch.
    Watch(Vec<watcher::Event<kube::api::DynamicObject>>),
}

impl Input {
    fn informer(self) -> Informer {
        match self {
            Self::Events(events) => Informer::from_stream(
                GroupVersionKind::gvk("", "v1", "Test"),
                futures::stream::iter(events),
            ),
            Self::Watch(events) => Informer::from_watch_stream::<ConfigMap>(
                GroupVersionKind::gvk("", "v1", "Test"),
                futures::stream::iter(events.into_iter().map(Ok)),
                kubeapp_operator::list_watch::ListWatchOptions::default(),
            ),
        }
    }
}

/// Runs `controller` until `done` fires; returns the time from `run` to then.
async fn time_until_done(
    controller: &InformerController,
    done: tokio::sync::oneshot::Receiver<()>,
) -> Duration {
    let stop = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    let _ = done.await;
    let elapsed = started.elapsed();
    stop.cancel();
    let _ = running.await;
    elapsed
}

/// Counts down to zero and then signals once.
struct Progress {
    remaining: AtomicUsize,
    done: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Progress {
    fn new(count: usize) -> (Arc<Self>, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let progress = Arc::new(Self {
            remaining: AtomicUsize::new(count),
            done: Mutex::new(Some(tx)),
        });
        (progress, rx)
    }

    fn tick(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(tx) = self.done.lock().ok().and_then(|mut tx| tx.take())
        {
            let _ = tx.send(());
        }
    }
}

async fn handler_delay(delay: Option<Duration>) {
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
}

fn tick_watcher(progress: &Arc<Progress>, delay: Option<Duration>) -> DynWatcherFns<ConfigMap> {
    let (on_add, on_update, on_delete) = (progress.clone(), progress.clone(), progress.clone());
    DynWatcherFns::new()
        .on_add(move |_, _| {
            let progress = on_add.clone();
            async move {
                handler_delay(delay).await;
                progress.tick();
                Ok(())
            }
        })
        .on_update(move |_, _, _| {
            let progress = on_update.clone();
            async move {
                handler_delay(delay).await;
                progress.tick();
                Ok(())
            }
        })
        .on_delete(move |_, _| {
            let progress = on_delete.clone();
            async move {
                handler_delay(delay).await;
                progress.tick();
                Ok(())
            }
        })
}

/// Runs `events` through a fresh `InformerController` on the current runtime; returns the time
/// from `run` to completion.
pub async fn run_kubeapp(s: &Scenario, input: Input) -> Duration {
    let (progress, done) = Progress::new(s.events() * s.watchers + s.objects * s.reconcilers);
    let controller =
        InformerController::new(ControllerConfig::default().max_concurrent_workers(s.workers));
    controller
        .erased()
        .add_informer("configmaps", input.informer());
    for _ in 0..s.watchers {
        controller
            .erased()
            .add_watcher("configmaps", tick_watcher(&progress, s.delay));
    }
    let last_generation = i64::try_from(s.per_object).unwrap_or(i64::MAX);
    for _ in 0..s.reconcilers {
        let progress = progress.clone();
        let delay = s.delay;
        controller.erased().add_reconciler(
            "configmaps",
            DynReconcilerFn::<ConfigMap, _>::new(move |request, _| {
                let last = request.object.metadata.generation == Some(last_generation);
                let progress = progress.clone();
                async move {
                    handler_delay(delay).await;
                    if last {
                        progress.tick();
                    }
                    Ok(ReconcileResult::done())
                }
            }),
        );
    }
    time_until_done(&controller, done).await
}

/// A typed [`Watcher`] counting every call.
struct TickWatcher {
    progress: Arc<Progress>,
    delay: Option<Duration>,
}

impl TickWatcher {
    async fn tick(&self) -> Result<(), BoxError> {
        handler_delay(self.delay).await;
        self.progress.tick();
        Ok(())
    }
}

impl Watcher<ConfigMap> for TickWatcher {
    async fn add(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.tick().await
    }
    async fn update(
        &self,
        _old: Arc<ConfigMap>,
        _new: Arc<ConfigMap>,
        _ctx: &Context,
    ) -> Result<(), BoxError> {
        self.tick().await
    }
    async fn delete(&self, _object: Arc<ConfigMap>, _ctx: &Context) -> Result<(), BoxError> {
        self.tick().await
    }
}

/// A typed [`Reconciler`] counting the calls that saw the last generation.
struct TickReconciler {
    progress: Arc<Progress>,
    delay: Option<Duration>,
    last_generation: i64,
}

impl Reconciler<ConfigMap> for TickReconciler {
    async fn reconcile(
        &self,
        request: ReconcileRequest<ConfigMap>,
        _ctx: &Context,
    ) -> Result<ReconcileResult, ReconcileError> {
        handler_delay(self.delay).await;
        if request.object.metadata.generation == Some(self.last_generation) {
            self.progress.tick();
        }
        Ok(ReconcileResult::done())
    }
}

/// A client for an address nothing listens on: the typed handlers' context needs one, the
/// benchmark's handlers never call it.
fn offline_client() -> kube::Client {
    let url = match "http://127.0.0.1:9".parse() {
        Ok(url) => url,
        Err(error) => panic!("a static URL: {error}"),
    };
    match kube::Client::try_from(kube::Config::new(url)) {
        Ok(client) => client,
        Err(error) => panic!("an offline client: {error}"),
    }
}

/// The same run as [`run_kubeapp`] through the typed API: a `KindHandle<ConfigMap>` over the
/// stream (`kind_from_stream`: the shared informer's cache and fan-out), typed watchers and
/// reconcilers with a `Context`.
pub async fn run_kubeapp_typed(s: &Scenario, input: Input) -> Duration {
    let (progress, done) = Progress::new(s.events() * s.watchers + s.objects * s.reconcilers);
    let controller =
        InformerController::new(ControllerConfig::default().max_concurrent_workers(s.workers));
    let config_maps = controller.kind_from_stream::<ConfigMap>(input.informer(), offline_client());
    let mut handles = Vec::new();
    for _ in 0..s.watchers {
        handles.push(config_maps.watch(TickWatcher {
            progress: progress.clone(),
            delay: s.delay,
        }));
    }
    let last_generation = i64::try_from(s.per_object).unwrap_or(i64::MAX);
    for _ in 0..s.reconcilers {
        handles.push(config_maps.reconcile(TickReconciler {
            progress: progress.clone(),
            delay: s.delay,
            last_generation,
        }));
    }
    let elapsed = time_until_done(&controller, done).await;
    drop(handles);
    elapsed
}

/// kube-runtime's input: a store holding every object, and the trigger objects in stream order.
pub struct KubeRuntimeInput {
    store: reflector::Store<ConfigMap>,
    _writer: Writer<ConfigMap>,
    triggers: Vec<(usize, ConfigMap)>,
}

/// The stream for kube-runtime: the trigger objects (with their object index), and a store filled
/// by hand with every object's last state (a reconcile reads its object from the store).
pub fn kube_runtime_input(s: &Scenario) -> KubeRuntimeInput {
    let (store, mut writer) = reflector::store::<ConfigMap>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in 0..s.objects {
        let last = config_map(object, s.per_object.saturating_sub(1));
        writer.apply_watcher_event(&watcher::Event::InitApply(last));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let mut triggers = Vec::with_capacity(s.events());
    for step in 0..s.per_object {
        for object in 0..s.objects {
            triggers.push((object, config_map(object, step)));
        }
    }
    KubeRuntimeInput {
        store,
        _writer: writer,
        triggers,
    }
}

/// The error type kube-runtime's reconciler signature asks for; never produced.
#[derive(Debug, thiserror::Error)]
#[error("never")]
pub struct Never;

/// The object index of a scenario ConfigMap (`object-{index}`).
fn object_index(cm: &ConfigMap) -> usize {
    cm.metadata
        .name
        .as_deref()
        .and_then(|name| name.strip_prefix("object-"))
        .and_then(|index| index.parse().ok())
        .unwrap_or(usize::MAX)
}

/// What kube-runtime's reconciler shares: triggers pulled per object, calls made, completion.
struct KubeRuntimeProgress {
    pulled: Vec<AtomicUsize>,
    per_object: usize,
    calls: AtomicUsize,
    progress: Arc<Progress>,
}

/// Runs the stream through `kube_runtime::Controller::for_stream` with a reconciler (the one
/// handler kube-runtime has) on the current runtime; returns the time from `run` to completion,
/// and the reconcile calls made.
///
/// kube-runtime's scheduler ends (dropping queued work) as soon as its trigger stream ends, so the
/// stream stays open after the last trigger, and completion is detected instead: a reconcile that
/// starts after an object's last trigger was pulled covers every trigger of that object (a
/// trigger for a running object is held until it finished, one for a queued object merges into
/// it), so the run is complete when each object had one such reconcile.
pub async fn run_kube_runtime(s: &Scenario, input: KubeRuntimeInput) -> (Duration, usize) {
    let KubeRuntimeInput {
        store,
        _writer,
        triggers,
    } = input;
    let (progress, done) = Progress::new(s.objects);
    let shared = Arc::new(KubeRuntimeProgress {
        pulled: (0..s.objects).map(|_| AtomicUsize::new(0)).collect(),
        per_object: s.per_object,
        calls: AtomicUsize::new(0),
        progress,
    });
    let concurrency = u16::try_from(s.workers).unwrap_or(u16::MAX);
    let delay = s.delay;
    let counted = shared.clone();
    let trigger = futures::stream::iter(triggers)
        .map(move |(index, cm)| {
            counted.pulled[index].fetch_add(1, Ordering::AcqRel);
            Ok(cm)
        })
        .chain(futures::stream::pending());
    let started = Instant::now();
    let run = Controller::for_stream(trigger, store)
        .with_config(KubeConfig::default().concurrency(concurrency))
        .run(
            move |object, shared: Arc<KubeRuntimeProgress>| {
                // Called when the reconcile starts: which triggers of the object it covers.
                let index = object_index(&object);
                let covered = shared
                    .pulled
                    .get(index)
                    .map_or(0, |pulled| pulled.load(Ordering::Acquire));
                async move {
                    handler_delay(delay).await;
                    shared.calls.fetch_add(1, Ordering::Relaxed);
                    if covered == shared.per_object {
                        shared.progress.tick();
                    }
                    Ok::<_, Never>(Action::await_change())
                }
            },
            |_, _, _| Action::await_change(),
            shared.clone(),
        )
        .for_each(|result| {
            if let Err(error) = result {
                eprintln!("kube-runtime: {error:?}");
            }
            std::future::ready(())
        });
    tokio::select! {
        () = run => {}
        _ = done => {}
    }
    (started.elapsed(), shared.calls.load(Ordering::Relaxed))
}
