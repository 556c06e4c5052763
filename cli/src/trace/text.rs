//! The human form of a [`Trace`]: a header with the verdict, then the tree (components and
//! their objects, or the phase, its history and analysis), failures, Events, and the owner.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::model::{ChildView, OperatorView, Trace, Verdict};

/// `trace` as text, ages relative to `now`.
pub fn render(trace: &Trace, now: Timestamp) -> String {
    let mut out = String::new();
    let o = &trace.object;
    let place = o
        .namespace
        .as_ref()
        .map_or_else(String::new, |ns| format!(" in {ns}"));
    let verdict = match trace.verdict {
        Verdict::Ready => "READY",
        Verdict::NotReady => "NOT READY",
        Verdict::Failed => "FAILED",
    };
    let _ = writeln!(
        out,
        "{}/{}{place}: {verdict}: {}",
        o.kind.to_lowercase(),
        o.name,
        trace.why
    );
    let generation = |g: Option<i64>| g.map_or_else(|| "-".to_string(), |g| g.to_string());
    let _ = writeln!(
        out,
        "  generation {}, status observed {}; last status write: {}",
        generation(o.generation),
        generation(o.observed_generation),
        trace.last_status_write.as_ref().map_or_else(
            || "none".to_string(),
            |w| format!("{} by {}", ago(Some(w.time), now), w.manager)
        )
    );
    if let Some(finalizers) = &o.deleting {
        let _ = writeln!(
            out,
            "  being deleted; finalizers: {}",
            finalizers.join(", ")
        );
    }
    for c in &trace.conditions {
        let _ = writeln!(
            out,
            "  {}={} {} {}{}",
            c.type_,
            c.status,
            c.reason,
            c.message,
            c.last_transition_time
                .map_or_else(String::new, |t| format!(" (since {})", ago(Some(t), now)))
        );
    }
    if let Some(phases) = &trace.phases {
        let _ = writeln!(out, "phase: {}", phases.phase);
        for t in &phases.history {
            let _ = writeln!(out, "  {:>10}  {}", ago(t.time, now), t.change);
        }
        if let Some(analysis) = &phases.analysis {
            let _ = writeln!(out, "analysis: {}", analysis_line(analysis));
            for m in analysis["measurements"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "  {:>10}  {} {}",
                    ago(m["time"].as_str().and_then(|t| t.parse().ok()), now),
                    m["value"],
                    m["result"].as_str().unwrap_or("")
                );
            }
        }
        if !phases.outputs.is_empty() {
            let _ = writeln!(out, "outputs:");
            for child in &phases.outputs {
                child_line(&mut out, child);
            }
        }
    }
    if !trace.components.is_empty() {
        let _ = writeln!(out, "components:");
        for component in &trace.components {
            let _ = writeln!(out, "  {} ({})", component.name, component.state);
            for child in &component.children {
                child_line(&mut out, child);
            }
        }
    }
    if !trace.failures.is_empty() {
        let _ = writeln!(out, "handler failures:");
        for e in &trace.failures {
            let _ = writeln!(
                out,
                "  {:>10}  {} x{}: {}",
                ago(e.time, now),
                e.reason,
                e.count,
                e.note
            );
        }
    }
    if !trace.events.is_empty() {
        let _ = writeln!(out, "events (newest first):");
        for e in &trace.events {
            let _ = writeln!(
                out,
                "  {:>10}  {} {} {}: {} [{}]",
                ago(e.time, now),
                e.type_,
                e.reason,
                e.action,
                e.note,
                e.reporter
            );
        }
    }
    let owner = &trace.owner;
    let _ = writeln!(
        out,
        "owner: last reported by {}",
        owner
            .last_reported_by
            .as_deref()
            .unwrap_or("nobody (no Event)")
    );
    for shard in &owner.shards {
        let _ = writeln!(
            out,
            "  shard ring {}/{}: slot {} is {}'s ({} live: {})",
            shard.namespace,
            shard.ring,
            shard.slot,
            shard.owner.as_deref().unwrap_or("no one"),
            shard.members.len(),
            shard.members.join(", ")
        );
    }
    for leader in &owner.leaders {
        let _ = writeln!(
            out,
            "  leader Lease {}: {}",
            leader.lease,
            leader.holder.as_deref().map_or_else(
                || "no current holder".to_string(),
                |h| format!("held by {h}")
            )
        );
    }
    if let Some(operator) = &trace.operator {
        operator_lines(&mut out, operator);
    }
    for what in &trace.unreadable {
        let _ = writeln!(out, "unreadable: {what}");
    }
    out
}

/// What the operator process reports (`--diagnostics`).
fn operator_lines(out: &mut String, operator: &OperatorView) {
    let _ = writeln!(out, "operator ({}):", operator.url);
    match &operator.informer {
        Some(i) => {
            let _ = writeln!(
                out,
                "  informer: {}, {} cached (checksum {}), last event {}, {} re-lists, {} failed requests",
                if i.synced { "synced" } else { "NOT synced" },
                i.objects,
                i.checksum,
                i.last_event_age_seconds
                    .map_or_else(|| "never".to_string(), |age| format!("{age:.1}s ago")),
                i.relists,
                i.watch_errors
            );
        }
        None => {
            let _ = writeln!(out, "  informer: none for this kind in that process");
        }
    }
    if let Some(k) = &operator.kind {
        let _ = writeln!(
            out,
            "  queue: {} queued{}, {} retries pending, {} objects failing{}, {} given up",
            k.queue_depth,
            k.oldest_queued_age_seconds
                .map_or_else(String::new, |age| format!(" (oldest waiting {age:.1}s)")),
            k.retries_pending,
            k.objects_failing,
            k.oldest_failure_age_seconds
                .map_or_else(String::new, |age| format!(" (oldest {age:.0}s)")),
            k.retries_given_up
        );
    }
    for app in &operator.apps {
        if let Some(l) = &app.leader {
            let _ = writeln!(
                out,
                "  {}: {} {} Lease {}/{} (term {}{})",
                app.app,
                l.identity,
                if l.leading {
                    "leads with"
                } else {
                    "stands by for"
                },
                l.lease_namespace,
                l.lease_name,
                l.term,
                match (&l.holder, l.leading) {
                    (Some(holder), false) => format!(", held by {holder}"),
                    (None, false) => ", no holder seen".to_string(),
                    (_, true) => String::new(),
                }
            );
        }
        if let Some(s) = &app.shard {
            let _ = writeln!(
                out,
                "  {}: {} is {} of {} members, owns {} slots, acts on {}",
                app.app,
                s.identity,
                if s.member { "one" } else { "NOT one" },
                s.members.len(),
                s.owned_slots.len(),
                s.active_slots.len()
            );
        }
    }
}

fn child_line(out: &mut String, child: &ChildView) {
    let reason = if child.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", child.reason)
    };
    let _ = writeln!(
        out,
        "    {}/{} {}{reason}",
        child.kind, child.name, child.readiness
    );
}

fn analysis_line(analysis: &Value) -> String {
    let count = |field: &str| analysis[field].as_u64().unwrap_or(0);
    let mut line = format!(
        "{} in phase {} ({}): {} measured, {} successful, {} failed, {} inconclusive",
        analysis["outcome"].as_str().unwrap_or("?"),
        analysis["phase"].as_str().unwrap_or("?"),
        analysis["metric"].as_str().unwrap_or("?"),
        count("measured"),
        count("successful"),
        count("failed"),
        count("inconclusive"),
    );
    if let Some(message) = analysis["message"].as_str().filter(|m| !m.is_empty()) {
        let _ = write!(line, "; {message}");
    }
    line
}

/// How long before `now` `time` was, e.g. `42s ago`, `3m ago`, `2h ago`.
fn ago(time: Option<Timestamp>, now: Timestamp) -> String {
    let Some(time) = time else {
        return "-".to_string();
    };
    let seconds = now.duration_since(time).as_secs().max(0);
    match seconds {
        0..120 => format!("{seconds}s ago"),
        120..7200 => format!("{}m ago", seconds / 60),
        7200..172_800 => format!("{}h ago", seconds / 3600),
        _ => format!("{}d ago", seconds / 86_400),
    }
}
