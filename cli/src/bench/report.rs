//! The report of `kubeapp bench`: a text summary, or JSON (`-o json`) whose shape is stable for
//! CI regression gates (docs/cli.md documents it; `schema` names its version, which changes
//! only when a field is removed or changes meaning; new fields may be added).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kubeapp::sdk::benchmark::latency::Percentiles;

/// The version of the JSON report.
pub const SCHEMA: &str = "kubeapp.dev/bench/v1";

/// Everything `kubeapp bench` measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The project's package name.
    pub project: String,
    /// `release` or `debug`: how the operator was built.
    pub profile: &'static str,
    /// The kinds of the objects created (`Kind.group`).
    pub kinds: Vec<String>,
    /// Objects created.
    pub objects: usize,
    /// What counted as handled: `observed-generation` or `condition`.
    pub ready: &'static str,
    /// The creates.
    pub create: Phase,
    /// The churn updates, when `--churn` was given.
    pub churn: Option<Churn>,
    /// Objects found handled at their last generation by a final list.
    pub reconciled: usize,
    /// The operator's handler calls (reconciler and watcher) from the first create until it
    /// went quiet; `None` when its `/metrics` has no handler histogram.
    pub reconciles: Option<u64>,
    /// `reconciles / objects`.
    pub reconciles_per_object: Option<f64>,
    /// The operator's API requests from the first create until it went quiet (audit log).
    pub requests: Requests,
    /// `requests.total / objects`.
    pub requests_per_object: f64,
    /// The operator process.
    pub operator: Operator,
}

/// One phase of writes (the creates, or the churn updates).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Phase {
    /// Writes sent in the phase.
    pub writes: usize,
    /// From the phase's first write until its last was answered, in seconds.
    pub write_seconds: f64,
    /// From the phase's first write until every write of it was handled, in seconds.
    pub seconds_to_all_reconciled: f64,
    /// Writes superseded by a newer write of the same object before they were handled (no
    /// latency sample).
    pub superseded: usize,
    /// Write-to-handled latencies of the handled writes; `None` when there were none.
    pub latency: Option<Percentiles>,
}

/// The churn settings and their phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Churn {
    /// Updates per second asked for.
    pub rate_per_second: f64,
    /// Updates per second sent (lower when the apiserver could not keep up).
    pub achieved_per_second: f64,
    /// How long updates were sent, in seconds.
    pub duration_seconds: f64,
    /// The updates.
    #[serde(flatten)]
    pub phase: Phase,
}

/// The operator's requests.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Requests {
    /// Distinct requests.
    pub total: u64,
    /// Answered 409 Conflict.
    pub conflicts: u64,
    /// Answered with another code >= 400.
    pub errors: u64,
    /// By `verb resource[/subresource] code`.
    pub by_kind: BTreeMap<String, u64>,
}

/// The operator process.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Operator {
    /// Its peak resident set size (`VmHWM`), in bytes, over its whole life.
    pub peak_rss_bytes: u64,
    /// CPU seconds (user + system) from the first create until it went quiet.
    pub cpu_seconds: f64,
}

fn latency_line(latency: Option<&Percentiles>) -> String {
    latency.map_or_else(
        || "no latency samples".to_string(),
        |p| {
            format!(
                "latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} writes)",
                p.p50_ms, p.p99_ms, p.max_ms, p.count
            )
        },
    )
}

impl BenchReport {
    /// The report as text, one fact a line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let per = |value: Option<f64>| value.map_or("n/a".to_string(), |v| format!("{v:.2}"));
        // Writing into a String cannot fail.
        let _ = writeln!(
            out,
            "kubeapp bench: {} ({} build), {} objects of {} (handled: {})",
            self.project,
            self.profile,
            self.objects,
            self.kinds.join(", "),
            self.ready
        );
        let _ = writeln!(
            out,
            "creates:     all reconciled in {:.2} s (creates sent in {:.2} s); {}",
            self.create.seconds_to_all_reconciled,
            self.create.write_seconds,
            latency_line(self.create.latency.as_ref())
        );
        if let Some(churn) = &self.churn {
            let _ = writeln!(
                out,
                "churn:       {} updates in {:.1} s ({:.1}/s of {:.1}/s asked), all reconciled \
                 {:.2} s after the first; {}; {} superseded",
                churn.phase.writes,
                churn.duration_seconds,
                churn.achieved_per_second,
                churn.rate_per_second,
                churn.phase.seconds_to_all_reconciled,
                latency_line(churn.phase.latency.as_ref()),
                churn.phase.superseded
            );
        }
        let _ = writeln!(
            out,
            "reconciled:  {} of {} objects at their last generation",
            self.reconciled, self.objects
        );
        let _ = writeln!(
            out,
            "reconciles:  {} per object ({} handler calls)",
            per(self.reconciles_per_object),
            self.reconciles.map_or("n/a".to_string(), |r| r.to_string())
        );
        let _ = writeln!(
            out,
            "requests:    {:.2} per object ({} requests, {} conflicts, {} errors)",
            self.requests_per_object,
            self.requests.total,
            self.requests.conflicts,
            self.requests.errors
        );
        for (kind, count) in &self.requests.by_kind {
            let _ = writeln!(out, "  {count:>8}  {kind}");
        }
        let _ = writeln!(
            out,
            "operator:    peak RSS {:.1} MiB, CPU {:.2} s",
            self.operator.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            self.operator.cpu_seconds
        );
        out
    }
}
