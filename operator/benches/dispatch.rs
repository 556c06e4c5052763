//! Dispatch throughput (events per second) of kubeapp's `InformerController` next to
//! kube-runtime's `Controller`, on one core (a current-thread tokio runtime), on the same synthetic
//! ConfigMap stream (see `support/scenario.rs`).
//!
//! ```sh
//! cargo bench -p kubeapp-operator --bench dispatch            # everything, then a ratio table
//! cargo bench -p kubeapp-operator --bench dispatch -- noop    # only the no-op group
//! ```
//!
//! Cases, each at 1, 10 and 100 workers (kube-runtime: `concurrency`):
//!
//! - kubeapp with 1 watcher (`1w`), 1 reconciler (`1r`), 3 watchers + 2 reconcilers (`3w+2r`),
//!   each twice: through the erased path (`kubeapp`: `add_informer` and closures over erased
//!   objects) and through the typed one (`kubeapp-typed`: `kind_from_stream`, a
//!   `KindHandle<ConfigMap>`, the shared informer's cache and fan-out, `Watcher<ConfigMap>`).
//!   The third kubeapp case of earlier reports, `kubeapp-typed-before` (`add_informer` with the
//!   `typed_watcher` adapters), went with those adapters (issue #39, one generation of the API);
//! - kube-runtime's `Controller::for_stream` with its one reconciler (`1r`), its store filled by
//!   hand with every object.
//!
//! Sizes: the no-op group (`dispatch-noop`) runs 1,000 objects x 10 events = 10,000 events per
//! iteration; the 1 ms group (`dispatch-1ms`, every handler call awaits a 1 ms tokio sleep) runs
//! `10 x workers` objects x 2 events (20, 200 and 2,000 events), so each iteration takes about
//! 20 handler calls per worker. Reconcilers see fewer calls than there are events: waiting requests
//! of one object merge, in both systems.
//!
//! The informer group (`dispatch-informer`) runs the no-op group's stream as raw watch events
//! through `Informer::from_watch_stream` (per-object decode, the informer's cache and diff), as a
//! real watch delivers them, through both kubeapp paths only: there the typed path's shared cache
//! is measured against an informer that also caches, as in an operator.
//!
//! After Criterion's own report, a table prints each case's median rate over all iterations and
//! kubeapp's rate relative to kube-runtime's for the same worker count (`1r` rows).

#[path = "support/scenario.rs"]
mod scenario;

use std::sync::Mutex;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use scenario::Scenario;

const WORKERS: [usize; 3] = [1, 10, 100];
/// (watchers, reconcilers) of the kubeapp cases.
const HANDLERS: [(usize, usize); 3] = [(1, 0), (0, 1), (3, 2)];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum System {
    /// The erased path: `add_informer` + `DynWatcherFns` / `DynReconcilerFn` by kind name.
    Kubeapp,
    /// The typed path: `kind_from_stream` -> `KindHandle<ConfigMap>` + `Watcher<ConfigMap>` /
    /// `reconcile_fn`, through the shared informer's cache and fan-out.
    KubeappTyped,
    KubeRuntime,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            Self::Kubeapp => "kubeapp",
            Self::KubeappTyped => "kubeapp-typed",
            Self::KubeRuntime => "kube-runtime",
        }
    }
}

/// One timed iteration of one case.
struct Record {
    group: &'static str,
    system: System,
    scenario: Scenario,
    elapsed: Duration,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

fn record(group: &'static str, system: System, scenario: Scenario, elapsed: Duration) {
    if let Ok(mut records) = RECORDS.lock() {
        records.push(Record {
            group,
            system,
            scenario,
            elapsed,
        });
    }
}

fn one_core() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("cannot start a current-thread tokio runtime: {error}"),
    }
}

/// Ready-made events, or raw watch events for the `dispatch-informer` group.
fn input_of(group: &str, s: &Scenario) -> scenario::Input {
    if group == INFORMER_GROUP {
        scenario::Input::Watch(scenario::watch_input(s))
    } else {
        scenario::Input::Events(scenario::kubeapp_input(s))
    }
}

/// The group whose input goes through the informer (decode, cache, diff) as a real watch does.
const INFORMER_GROUP: &str = "dispatch-informer";

fn bench_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group_name: &'static str,
    system: System,
    s: Scenario,
) {
    let runtime = one_core();
    let events = u64::try_from(s.events()).unwrap_or(u64::MAX);
    group.throughput(Throughput::Elements(events));
    let label = match system {
        System::Kubeapp | System::KubeappTyped => {
            format!("{}/{}", system.name(), s.handlers_label())
        }
        System::KubeRuntime => format!("{}/1r", system.name()),
    };
    group.bench_with_input(BenchmarkId::new(label, s.workers), &s, |b, s| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let elapsed = match system {
                    System::Kubeapp => {
                        let input = input_of(group_name, s);
                        runtime.block_on(scenario::run_kubeapp(s, input))
                    }
                    System::KubeappTyped => {
                        let input = input_of(group_name, s);
                        runtime.block_on(scenario::run_kubeapp_typed(s, input))
                    }
                    System::KubeRuntime => {
                        let input = scenario::kube_runtime_input(s);
                        runtime.block_on(scenario::run_kube_runtime(s, input)).0
                    }
                };
                record(group_name, system, *s, elapsed);
                total += elapsed;
            }
            total
        });
    });
}

fn run_group(c: &mut Criterion, name: &'static str, size: impl Fn(usize) -> (usize, usize)) {
    let delay = (name == "dispatch-1ms").then(|| Duration::from_millis(1));
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for workers in WORKERS {
        let (objects, per_object) = size(workers);
        let base = Scenario {
            watchers: 0,
            reconcilers: 1,
            workers,
            objects,
            per_object,
            delay,
        };
        for (watchers, reconcilers) in HANDLERS {
            let s = Scenario {
                watchers,
                reconcilers,
                ..base
            };
            bench_case(&mut group, name, System::Kubeapp, s);
            bench_case(&mut group, name, System::KubeappTyped, s);
        }
        if name != INFORMER_GROUP {
            bench_case(&mut group, name, System::KubeRuntime, base);
        }
    }
    group.finish();
}

fn median_rate(records: &[&Record]) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    let mut rates: Vec<f64> = records
        .iter()
        .map(|r| r.scenario.events() as f64 / r.elapsed.as_secs_f64())
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied()
}

fn print_table() {
    let Ok(records) = RECORDS.lock() else {
        return;
    };
    if records.is_empty() {
        return;
    }
    println!();
    println!(
        "Dispatch on one core: median events/s over all iterations (Criterion's warm-up included)"
    );
    println!(
        "| group | handlers | workers | events/iter | kubeapp ev/s | typed ev/s | typed / erased | kube-runtime 1r ev/s | kubeapp / kube-runtime |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut cases: Vec<(&'static str, Scenario)> = records
        .iter()
        .filter(|r| r.system == System::Kubeapp)
        .map(|r| (r.group, r.scenario))
        .collect();
    cases.dedup();
    for (group, s) in cases {
        let ours: Vec<&Record> = records
            .iter()
            .filter(|r| r.group == group && r.system == System::Kubeapp && r.scenario == s)
            .collect();
        let Some(ours) = median_rate(&ours) else {
            continue;
        };
        let typed: Vec<&Record> = records
            .iter()
            .filter(|r| r.group == group && r.system == System::KubeappTyped && r.scenario == s)
            .collect();
        let (typed_text, typed_ratio) = match median_rate(&typed) {
            Some(typed) => (format!("{typed:.0}"), format!("{:.2}x", typed / ours)),
            None => ("-".to_string(), "-".to_string()),
        };
        let theirs: Vec<&Record> = records
            .iter()
            .filter(|r| {
                r.group == group
                    && r.system == System::KubeRuntime
                    && r.scenario.workers == s.workers
            })
            .collect();
        let (theirs_text, ratio) = match (s.watchers, median_rate(&theirs)) {
            (0, Some(theirs)) => (format!("{theirs:.0}"), format!("{:.2}x", ours / theirs)),
            (_, Some(theirs)) => (format!("({theirs:.0})"), "-".to_string()),
            (_, None) => ("-".to_string(), "-".to_string()),
        };
        println!(
            "| {group} | {} | {} | {} | {ours:.0} | {typed_text} | {typed_ratio} | {theirs_text} | {ratio} |",
            s.handlers_label(),
            s.workers,
            s.events(),
        );
    }
    println!(
        "(kube-runtime has reconcilers only; its rate is compared with kubeapp's 1r row and shown in \
         parentheses elsewhere.)"
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    run_group(&mut c, "dispatch-noop", |_| (1_000, 10));
    run_group(&mut c, "dispatch-1ms", |workers| (10 * workers, 2));
    run_group(&mut c, INFORMER_GROUP, |_| (1_000, 10));
    c.final_summary();
    print_table();
}
