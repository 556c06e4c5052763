//! The process's most recent handler calls, for `/debug/kubeapp`: which handler was called for
//! which object at which `resourceVersion`. A fault test reads them (kubeapp's fault harness
//! checks that, within one process, no call saw an object older than an earlier call did, and
//! that every deleted object's deletion reached a handler).
//!
//! Off unless the process asks for them
//! ([`handler_calls_to_keep`]: `KUBEAPP_RECORD_CALLS=<how many>`, or
//! [`record_handler_calls`](kubeapp_sdk::diagnostics::record_handler_calls)), oldest dropped
//! first: a record costs a lock and a few small strings per call, which a production operator
//! need not pay. Read once, when the controller's metrics are made.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kubeapp_sdk::diagnostics::{HandlerCall, handler_calls_to_keep};

use crate::action::ReconcileAction;
use crate::object::SharedObject;

/// The most calls kept, whatever the environment asks (a bound on memory).
const MAX_KEPT: usize = 1 << 20;

/// Recent handler calls, shared by every kind of a controller; empty (and free) when off.
#[derive(Clone, Debug, Default)]
pub(crate) struct HandlerCalls(Option<Arc<Recorded>>);

#[derive(Debug)]
struct Recorded {
    keep: usize,
    next: AtomicU64,
    calls: Mutex<VecDeque<HandlerCall>>,
}

impl HandlerCalls {
    /// On when the process asks for calls ([`handler_calls_to_keep`] is positive).
    pub(crate) fn from_env() -> Self {
        match handler_calls_to_keep() {
            0 => Self(None),
            keep => Self::keeping(keep),
        }
    }

    /// On, keeping the last `keep` calls.
    pub(crate) fn keeping(keep: usize) -> Self {
        let keep = keep.min(MAX_KEPT);
        Self(Some(Arc::new(Recorded {
            keep,
            next: AtomicU64::new(1),
            calls: Mutex::new(VecDeque::with_capacity(keep.min(1024))),
        })))
    }

    /// Records attempt `attempt` (0: the first) of a call of `handler` of `kind` for `action` on
    /// `object` (nothing when off).
    pub(crate) fn record(
        &self,
        kind: &str,
        handler: &dyn fmt::Display,
        action: ReconcileAction,
        object: &SharedObject,
        attempt: u32,
    ) {
        let Some(recorded) = &self.0 else {
            return;
        };
        let meta = object.metadata();
        let mut call = HandlerCall::default();
        call.seq = recorded.next.fetch_add(1, Ordering::Relaxed);
        call.kind = kind.to_owned();
        call.handler = handler.to_string();
        call.action = action.metric_label().to_ascii_lowercase();
        call.namespace.clone_from(&meta.namespace);
        call.name = meta.name.clone().unwrap_or_default();
        call.uid.clone_from(&meta.uid);
        call.resource_version.clone_from(&meta.resource_version);
        call.attempt = attempt;
        call.deleting = meta.deletion_timestamp.is_some();
        let mut calls = recorded
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if calls.len() == recorded.keep {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    /// The kept calls, oldest first.
    pub(crate) fn recent(&self) -> Vec<HandlerCall> {
        self.0.as_ref().map_or_else(Vec::new, |recorded| {
            let calls = recorded
                .calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            calls.iter().cloned().collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(name: &str, version: &str) -> SharedObject {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.uid = Some(format!("uid-{name}"));
        cm.metadata.resource_version = Some(version.into());
        Arc::new(cm)
    }

    #[test]
    fn calls_are_kept_in_order_and_the_oldest_go_first() {
        let calls = HandlerCalls::keeping(2);
        for (name, version) in [("a", "1"), ("b", "2"), ("a", "3")] {
            calls.record(
                "configmaps",
                &"reconciler[0]",
                ReconcileAction::Updated,
                &object(name, version),
                0,
            );
        }
        let kept = calls.recent();
        assert_eq!(kept.len(), 2);
        assert_eq!((kept[0].seq, kept[0].name.as_str()), (2, "b"));
        assert_eq!(kept[1].resource_version.as_deref(), Some("3"));
        assert_eq!(kept[1].uid.as_deref(), Some("uid-a"));
        assert_eq!(kept[1].handler, "reconciler[0]");
    }

    #[test]
    fn off_records_nothing() {
        let calls = HandlerCalls::default();
        calls.record(
            "configmaps",
            &"watcher[0]",
            ReconcileAction::Created,
            &object("a", "1"),
            0,
        );
        assert!(calls.recent().is_empty());
    }
}
