//! Debug log lines at the start and end of every handler call (target `kubeapp::calls`), so the
//! calls of several replicas can be put on one timeline: `RUST_LOG=info,kubeapp::calls=debug`.
//! The end line is written when the call finishes or is dropped (cancelled at a stop or when a
//! replica stops acting), so every start has an end.

use super::lanes::{HandlerId, LaneKey};

/// Writes the end line when dropped; nothing when the target is off.
pub(super) struct CallLog<'a> {
    on: Option<(&'a str, &'a LaneKey, HandlerId)>,
}

impl<'a> CallLog<'a> {
    /// Writes the start line of `handler`'s call for `object` of `kind`.
    pub(super) fn start(kind: &'a str, object: &'a LaneKey, handler: HandlerId) -> Self {
        if !tracing::enabled!(target: "kubeapp::calls", tracing::Level::DEBUG) {
            return Self { on: None };
        }
        tracing::debug!(target: "kubeapp::calls", kind, %object, %handler, "handler call started");
        Self {
            on: Some((kind, object, handler)),
        }
    }
}

impl Drop for CallLog<'_> {
    fn drop(&mut self) {
        if let Some((kind, object, handler)) = self.on {
            tracing::debug!(target: "kubeapp::calls", kind, %object, %handler, "handler call ended");
        }
    }
}
