//! Kubernetes Events (`events.k8s.io/v1`) about objects, through kube-runtime's
//! `events::Recorder`.
//!
//! An [`EventRecorder`] reports as one controller ([`Reporter`]: controller name and instance,
//! e.g. the pod name); [`EventRecorder::normal`] and [`EventRecorder::warning`] publish an Event
//! regarding an object, in the object's namespace (`default` for cluster-scoped objects, as
//! kube-runtime does). Repeats of the same event within a few minutes become one Event with a
//! growing series count (kube-runtime's cache). The reason doubles as the Event's `action`, and
//! notes are cut to the API's 1 kB limit. The controller needs RBAC `create` and `patch` on
//! `events.k8s.io` `events`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_operator::events::{EventRecorder, Reporter};
//!
//! # async fn run(client: kube::Client, config_map: ConfigMap) -> Result<(), kubeapp_operator::events::EventError> {
//! let recorder = EventRecorder::new(client, Reporter {
//!     controller: "widget-controller".into(),
//!     instance: std::env::var("POD_NAME").ok(),
//! });
//! recorder.normal(&config_map, "Applied", "the greeting is published").await?;
//! # Ok(()) }
//! ```

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

/// Who reports the events (kube-runtime's type): the controller's name and its instance.
pub use kube::runtime::events::Reporter;

/// The largest note the events API accepts (bytes).
const MAX_NOTE_BYTES: usize = 1024;

/// An Event that was not published.
#[derive(Debug, thiserror::Error)]
#[error("publishing {type_} event {reason:?} about {object} failed")]
pub struct EventError {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// The event's reason.
    pub reason: String,
    /// The object the event is about (`kind namespace/name`).
    pub object: String,
    /// The client's error (boxed: it is large).
    #[source]
    pub source: Box<kube::Error>,
}

/// Publishes Kubernetes Events as one controller. Cheap to clone; clones share the
/// deduplication cache.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder").finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder publishing through `client` as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes a `Normal` event about `object`.
    ///
    /// # Errors
    ///
    /// When the API server refuses the Event (e.g. no RBAC permission) or cannot be reached.
    pub async fn normal<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: impl Into<String>,
    ) -> Result<(), EventError> {
        self.publish(object, EventType::Normal, reason, note.into())
            .await
    }

    /// Publishes a `Warning` event about `object`.
    ///
    /// # Errors
    ///
    /// As [`EventRecorder::normal`].
    pub async fn warning<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: impl Into<String>,
    ) -> Result<(), EventError> {
        self.publish(object, EventType::Warning, reason, note.into())
            .await
    }

    /// Publishes an event about `object` whose `action` differs from its reason.
    ///
    /// Events of one object with the same type, reason and action form one series: kube-runtime's
    /// recorder counts a repeat instead of writing a new Event, and keeps the first note. Give
    /// events that say different things (a transition to another phase, a failure of another
    /// component) different actions, so each is recorded with its own note.
    ///
    /// # Errors
    ///
    /// As [`EventRecorder::normal`].
    pub async fn publish_action<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) -> Result<(), EventError> {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.publish_as(object, type_, reason, action, note.into())
            .await
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), EventError> {
        self.publish_as(object, type_, reason, reason, note).await
    }

    async fn publish_as<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), EventError> {
        self.publish_about(&object.object_ref(&()), type_, reason, action, note)
            .await
    }

    /// Publishes an event about the object `reference` points to (one known only by its
    /// reference, as the controller knows the objects of an erased kind).
    pub(crate) async fn publish_about(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), EventError> {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note, MAX_NOTE_BYTES)),
            action: action.to_string(),
            secondary: None,
        };
        self.recorder
            .publish(&event, reference)
            .await
            .map_err(|source| EventError {
                type_: match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                },
                reason: reason.to_string(),
                object: format!(
                    "{} {}{}",
                    reference.kind.as_deref().unwrap_or(""),
                    reference
                        .namespace
                        .as_deref()
                        .map(|ns| format!("{ns}/"))
                        .unwrap_or_default(),
                    reference.name.as_deref().unwrap_or("")
                ),
                source: Box::new(source),
            })
    }
}

/// `note` cut to at most `max` bytes, at a character boundary.
fn truncate(mut note: String, max: usize) -> String {
    if note.len() > max {
        let mut end = max;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn notes_are_cut_at_a_character_boundary_within_the_limit() {
        assert_eq!(truncate("short".into(), 1024), "short");
        let long = "é".repeat(600); // 1,200 bytes, 2 per character
        let cut = truncate(long, 1024);
        assert_eq!(cut.len(), 1024);
        let odd = truncate("aé".repeat(400), 1024); // 3 bytes per pair
        assert!(odd.len() <= 1024 && odd.len() >= 1022);
    }
}
