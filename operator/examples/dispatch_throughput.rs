//! Dispatch throughput of the `InformerController` on a synthetic event stream: how many informer
//! events per second go through per-object lanes to the handlers (no-op by default), optionally
//! next to kube-runtime's `Controller` on the same stream. One run of one scenario, so that it can
//! be profiled (`valgrind --tool=callgrind`); the Criterion suite is `benches/dispatch.rs`.
//!
//! ```sh
//! cargo run --release -p kubeapp-operator --example dispatch_throughput -- \
//!     [objects] [events-per-object] [workers] \
//!     [--threads N] [--watchers N] [--reconcilers N] [--delay-ms N] \
//!     [--kube-runtime | --typed] [--informer]
//! ```
//!
//! `--typed` runs the typed path (`KindHandle<ConfigMap>` over the stream: the shared informer's
//! cache and fan-out, typed handlers); see `benches/dispatch.rs`.
//! `--informer` feeds kubeapp the stream as raw watch events through the informer (decode, cache,
//! diff), as the bench's `dispatch-informer` group does.
//!
//! Defaults: 10000 objects x 20 events, 10 workers, 1 watcher and 1 reconciler, no delay, a
//! multi-threaded runtime with one thread per core (`--threads 1` runs on one thread).

#[path = "../benches/support/scenario.rs"]
mod scenario;

use scenario::Scenario;

/// Which system one run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum System {
    Erased,
    Typed,
    KubeRuntime,
}

struct Args {
    scenario: Scenario,
    threads: Option<usize>,
    system: System,
    informer: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut scenario = Scenario {
        watchers: 1,
        reconcilers: 1,
        workers: 10,
        objects: 10_000,
        per_object: 20,
        delay: None,
    };
    let mut threads = None;
    let mut system = System::Erased;
    let mut informer = false;
    let mut positional = 0;
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a number"))?;
        value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => threads = Some(number(&arg, args.next())?),
            "--watchers" => scenario.watchers = number(&arg, args.next())?,
            "--reconcilers" => scenario.reconcilers = number(&arg, args.next())?,
            "--delay-ms" => {
                let ms = number(&arg, args.next())?;
                scenario.delay = (ms > 0).then(|| std::time::Duration::from_millis(ms as u64));
            }
            "--kube-runtime" => system = System::KubeRuntime,
            "--typed" => system = System::Typed,
            "--informer" => informer = true,
            _ => {
                let value = number(&format!("argument {}", positional + 1), Some(arg))?;
                match positional {
                    0 => scenario.objects = value,
                    1 => scenario.per_object = value,
                    2 => scenario.workers = value,
                    _ => return Err("at most 3 positional arguments".into()),
                }
                positional += 1;
            }
        }
    }
    Ok(Args {
        scenario,
        threads,
        system,
        informer,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("dispatch_throughput: {error}");
            std::process::exit(2);
        }
    };
    let runtime = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(threads) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dispatch_throughput: cannot start the tokio runtime: {error}");
            std::process::exit(1);
        }
    };
    let s = args.scenario;
    let input = || {
        if args.informer {
            scenario::Input::Watch(scenario::watch_input(&s))
        } else {
            scenario::Input::Events(scenario::kubeapp_input(&s))
        }
    };
    let threads = args
        .threads
        .map_or_else(|| "one per core".to_string(), |t| t.to_string());
    let (system, elapsed, calls) = match args.system {
        System::KubeRuntime => {
            let input = scenario::kube_runtime_input(&s);
            let (elapsed, calls) = runtime.block_on(scenario::run_kube_runtime(&s, input));
            (
                "kube-runtime Controller, 1 reconciler",
                elapsed,
                Some(calls),
            )
        }
        System::Erased => {
            let input = input();
            let elapsed = runtime.block_on(scenario::run_kubeapp(&s, input));
            ("kubeapp InformerController (erased)", elapsed, None)
        }
        System::Typed => {
            let input = input();
            let elapsed = runtime.block_on(scenario::run_kubeapp_typed(&s, input));
            ("kubeapp KindHandle (typed)", elapsed, None)
        }
    };
    #[allow(clippy::cast_precision_loss)]
    let rate = s.events() as f64 / elapsed.as_secs_f64();
    let calls = calls.map_or_else(String::new, |calls| {
        format!("; reconcile calls {calls} (waiting requests merge)")
    });
    println!(
        "{system}: {} events ({} objects x {}), {} handlers, {} workers, delay {:?}, threads {threads}: \
         {:.3} s, {rate:.0} events/s{calls}",
        s.events(),
        s.objects,
        s.per_object,
        s.handlers_label(),
        s.workers,
        s.delay.unwrap_or_default(),
        elapsed.as_secs_f64(),
    );
}
