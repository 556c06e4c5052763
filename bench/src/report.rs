//! The results: per contender the median of its runs, ratios of kubeapp to each other
//! contender, a table for the terminal and a JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::identity::IdentityKind;
use crate::run::RunResult;

/// The machine the benchmark ran on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the tool.
    pub cpus: usize,
    /// Total memory in GiB (`/proc/meminfo`).
    pub memory_gib: f64,
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// The kernel release.
    pub kernel: String,
}

impl Machine {
    /// This machine, from `/proc` (unknown fields are empty or zero).
    pub fn detect() -> Self {
        let read = |path| std::fs::read_to_string(path).unwrap_or_default();
        let meminfo = read("/proc/meminfo");
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default();
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_gib: mem_kib / (1024.0 * 1024.0),
            cpu_model,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        }
    }
}

/// The settings a report was made with.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Objects per run.
    pub objects: usize,
    /// Objects each contender handles at once.
    pub workers: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// Runs per contender.
    pub rounds: usize,
    /// Who the contenders connected as.
    pub identity: IdentityKind,
    /// Whether etcd ran with fsync on.
    pub etcd_fsync: bool,
}

impl Settings {
    /// True for the "real cluster" figures: a ServiceAccount identity (API priority and fairness
    /// applies) or etcd with fsync on.
    pub fn real_cluster(&self) -> bool {
        self.identity == IdentityKind::ServiceAccount || self.etcd_fsync
    }
}

/// One contender's figures: the median of each figure over its runs.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The contender.
    pub contender: String,
    /// Median seconds from the first create until everything was done.
    pub seconds: f64,
    /// Median seconds the creates took (the floor under every time).
    pub create_seconds: f64,
    /// Median watch events per second.
    pub events_per_second: f64,
    /// Median objects per second.
    pub objects_per_second: f64,
    /// Median peak RSS in MiB.
    pub peak_rss_mib: f64,
    /// Median CPU seconds the contender used (user + system).
    pub cpu_seconds: f64,
    /// Median API requests per object.
    pub requests_per_object: f64,
    /// Median 409 conflicts per object.
    pub conflicts_per_object: f64,
    /// Median reconcile calls per object (`None` when a run had no count).
    pub reconciles_per_object: Option<f64>,
    /// Every run.
    pub runs: Vec<RunResult>,
}

/// kubeapp's figures divided by another contender's.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// `kubeapp / <peer>`.
    pub name: String,
    /// Time ratio (below 1: kubeapp is faster).
    pub time: f64,
    /// Events per second ratio (above 1: kubeapp handles more).
    pub events_per_second: f64,
    /// Peak RSS ratio (below 1: kubeapp uses less).
    pub peak_rss: f64,
    /// CPU time ratio (below 1: kubeapp uses less).
    pub cpu: f64,
    /// Requests per object ratio (below 1: kubeapp sends fewer).
    pub requests_per_object: f64,
    /// Reconciles per object ratio (below 1: kubeapp reconciles less); `None` without counts.
    pub reconciles_per_object: Option<f64>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// With what.
    pub settings: Settings,
    /// Per contender.
    pub contenders: Vec<Summary>,
    /// kubeapp against each other contender (empty without kubeapp).
    pub ratios: Vec<Ratio>,
}

/// The median of `values` (with an even count, the mean of the middle two; NaN for none).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

impl Summary {
    /// The medians of `runs` (all of one contender).
    pub fn of(contender: &str, runs: Vec<RunResult>) -> Self {
        let pick = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
        Self {
            contender: contender.to_string(),
            seconds: pick(|r| r.seconds),
            create_seconds: pick(|r| r.create_seconds),
            events_per_second: pick(|r| r.events_per_second),
            objects_per_second: pick(|r| r.objects_per_second),
            peak_rss_mib: pick(|r| r.peak_rss_mib),
            cpu_seconds: pick(|r| r.cpu_seconds),
            requests_per_object: pick(|r| r.requests_per_object),
            conflicts_per_object: pick(|r| r.requests.conflicts as f64 / r.objects as f64),
            reconciles_per_object: runs
                .iter()
                .map(|r| r.reconciles_per_object)
                .collect::<Option<Vec<f64>>>()
                .map(median),
            runs,
        }
    }
}

impl Report {
    /// A report of `contenders`, with kubeapp's ratios to each other one.
    pub fn new(machine: Machine, settings: Settings, contenders: Vec<Summary>) -> Self {
        let ratios = match contenders.iter().find(|s| s.contender == "kubeapp") {
            Some(ours) => contenders
                .iter()
                .filter(|s| s.contender != "kubeapp")
                .map(|peer| Ratio {
                    name: format!("kubeapp / {}", peer.contender),
                    time: ours.seconds / peer.seconds,
                    events_per_second: ours.events_per_second / peer.events_per_second,
                    peak_rss: ours.peak_rss_mib / peer.peak_rss_mib,
                    cpu: ours.cpu_seconds / peer.cpu_seconds,
                    requests_per_object: ours.requests_per_object / peer.requests_per_object,
                    reconciles_per_object: ours
                        .reconciles_per_object
                        .zip(peer.reconciles_per_object)
                        .map(|(ours, peer)| ours / peer),
                })
                .collect(),
            None => Vec::new(),
        };
        Self {
            machine,
            settings,
            contenders,
            ratios,
        }
    }

    /// The report as Markdown tables.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        if s.real_cluster() {
            let _ = writeln!(
                out,
                "**Real cluster figures** (identity: {}, etcd fsync: {}; not comparable with the \
                 default runs: admin is exempt from API priority and fairness, and etcd skips fsync)\n",
                match s.identity {
                    IdentityKind::Admin => "admin",
                    IdentityKind::ServiceAccount => "ServiceAccount with a Role, token",
                },
                if s.etcd_fsync { "on" } else { "off" }
            );
        }
        let _ = writeln!(
            out,
            "{} objects, {} workers, {} creates in flight, median of {} run(s); {} CPUs, {:.0} GiB\n",
            s.objects,
            s.workers,
            s.create_concurrency,
            s.rounds,
            self.machine.cpus,
            self.machine.memory_gib
        );
        let _ = writeln!(
            out,
            "| contender | time (s) | creates (s) | events/s | objects/s | peak RSS (MiB) | CPU (s) | requests/object | 409s/object | reconciles/object |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for c in &self.contenders {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {} |",
                c.contender,
                c.seconds,
                c.create_seconds,
                c.events_per_second,
                c.objects_per_second,
                c.peak_rss_mib,
                c.cpu_seconds,
                c.requests_per_object,
                c.conflicts_per_object,
                optional(c.reconciles_per_object, "")
            );
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(
                out,
                "\n| ratio | time | events/s | peak RSS | CPU | requests/object | reconciles/object |\n|---|---:|---:|---:|---:|---:|---:|"
            );
            for r in &self.ratios {
                let _ = writeln!(
                    out,
                    "| {} | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {} |",
                    r.name,
                    r.time,
                    r.events_per_second,
                    r.peak_rss,
                    r.cpu,
                    r.requests_per_object,
                    optional(r.reconciles_per_object, "x")
                );
            }
        }
        out
    }
}

/// `value` with two decimals and `unit`, or "n/a".
fn optional(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v:.2}{unit}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeapp::sdk::benchmark::audit::RequestCounts;

    fn run(contender: &str, seconds: f64, rss: f64, requests: u64) -> RunResult {
        RunResult {
            contender: contender.to_string(),
            objects: 10,
            seconds,
            create_seconds: seconds / 2.0,
            events: 30,
            events_per_second: 30.0 / seconds,
            objects_per_second: 10.0 / seconds,
            peak_rss_mib: rss,
            cpu_seconds: seconds / 4.0,
            requests: RequestCounts {
                total: requests,
                ..RequestCounts::default()
            },
            requests_per_object: requests as f64 / 10.0,
            reconciles: Some(requests / 2),
            reconciles_per_object: Some(requests as f64 / 20.0),
            user: "admin".to_string(),
            reconciled: 10,
            with_finalizer: 10,
        }
    }

    #[test]
    fn medians_and_ratios() {
        let ours = Summary::of(
            "kubeapp",
            vec![
                run("kubeapp", 2.0, 10.0, 40),
                run("kubeapp", 4.0, 30.0, 40),
                run("kubeapp", 3.0, 20.0, 40),
            ],
        );
        assert_eq!(ours.seconds, 3.0);
        assert_eq!(ours.peak_rss_mib, 20.0);
        assert_eq!(ours.cpu_seconds, 0.75);
        let floor = Summary::of("floor", vec![run("floor", 1.5, 5.0, 20)]);
        let settings = Settings {
            objects: 10,
            workers: 1,
            create_concurrency: 1,
            rounds: 3,
            identity: IdentityKind::Admin,
            etcd_fsync: false,
        };
        let machine = Machine::detect();
        let report = Report::new(machine, settings, vec![ours, floor]);
        assert_eq!(report.ratios.len(), 1);
        assert_eq!(report.ratios[0].name, "kubeapp / floor");
        assert_eq!(report.ratios[0].time, 2.0);
        assert_eq!(report.ratios[0].peak_rss, 4.0);
        assert_eq!(report.ratios[0].cpu, 2.0);
        assert_eq!(report.ratios[0].requests_per_object, 2.0);
        let table = report.table();
        // CPU seconds: 0.75 for kubeapp (3.0 / 4), 0.38 for the floor, ratio 2.
        assert!(table.contains("| 20.0 | 0.8 | 4.00 |"), "{table}");
        assert!(table.contains("| 4.00x | 2.00x | 2.00x |"), "{table}");
        assert!(table.contains("| kubeapp / floor | 2.00x |"), "{table}");
        // Reconciles per object: 2.00 for kubeapp (40 / 20), 1.00 for the floor, ratio 2.
        assert!(table.contains("| 0.00 | 2.00 |\n| floor"), "{table}");
        assert!(table.contains("| 2.00x | 2.00x |"), "{table}");
        assert_eq!(report.ratios[0].reconciles_per_object, Some(2.0));
        assert!(!table.contains("Real cluster"), "{table}");
    }

    #[test]
    fn a_contender_without_a_reconcile_count_shows_n_a_and_real_cluster_runs_say_so() {
        let mut go = run("grafana-app-sdk", 2.0, 10.0, 30);
        go.reconciles = None;
        go.reconciles_per_object = None;
        let summary = Summary::of("grafana-app-sdk", vec![go]);
        assert_eq!(summary.reconciles_per_object, None);
        let ours = Summary::of("kubeapp", vec![run("kubeapp", 2.0, 10.0, 40)]);
        let settings = Settings {
            objects: 10,
            workers: 1,
            create_concurrency: 1,
            rounds: 1,
            identity: IdentityKind::ServiceAccount,
            etcd_fsync: true,
        };
        let report = Report::new(Machine::detect(), settings, vec![ours, summary]);
        let table = report.table();
        assert!(table.contains("| n/a |"), "{table}");
        assert_eq!(report.ratios[0].reconciles_per_object, None);
        assert!(table.starts_with("**Real cluster figures**"), "{table}");
    }
}
