//! Debug log lines at the start and end of every handler call (target `kubeapp::calls`), so the
//! calls of several replicas can be put on one timeline: `RUST_LOG=info,kubeapp::calls=debug`.
//! The end line is written when the call finishes or is dropped (cancelled at a stop or when a
//! replica stops acting), so every start has an end.
//!
//! While the lines are written, whether the run still acts (leading, own shard Lease valid) is
//! asked again *after* the start line: a line's time is then never later than the check that let
//! its call start, so a timeline built from the lines can tell a call that started after the
//! replica's deadline (a bug) from one that was already under way (which Leases cannot fence).

use super::kind_runtime::Running;
use super::lanes::{HandlerId, LaneKey};

/// Writes the end line when dropped; nothing when the target is off.
pub(super) struct CallLog<'a> {
    on: Option<(&'a str, &'a LaneKey, HandlerId)>,
}

impl<'a> CallLog<'a> {
    /// Writes the start line of `handler`'s call for `object` of `kind`; `None` (with an end
    /// line saying so) when `run` no longer acts by then: the call must not start.
    pub(super) fn start(
        kind: &'a str,
        object: &'a LaneKey,
        handler: HandlerId,
        run: &Running,
    ) -> Option<Self> {
        if !tracing::enabled!(target: "kubeapp::calls", tracing::Level::DEBUG) {
            return Some(Self { on: None });
        }
        tracing::debug!(target: "kubeapp::calls", kind, %object, %handler, "handler call started");
        if !run.leading() {
            tracing::debug!(target: "kubeapp::calls", kind, %object, %handler, started = false, "handler call ended");
            return None;
        }
        Some(Self {
            on: Some((kind, object, handler)),
        })
    }
}

impl Drop for CallLog<'_> {
    fn drop(&mut self) {
        if let Some((kind, object, handler)) = self.on {
            tracing::debug!(target: "kubeapp::calls", kind, %object, %handler, "handler call ended");
        }
    }
}
