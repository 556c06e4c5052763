//! The slots a controller term acts on, read on every event and grown as previous owners hand
//! their slots over.

use std::sync::atomic::{AtomicU64, Ordering};

use kubeapp_operator::gate::EventFilter;
use kubeapp_operator::object::SharedObject;

use super::assignment::{SLOTS, SlotSet, slot_of_uid};

/// The active slots of one controller term (only ever grown: losing slots ends the term).
#[derive(Debug, Default)]
pub(crate) struct ShardGate {
    words: [AtomicU64; SLOTS / 64],
}

impl ShardGate {
    /// Whether an object with this `metadata.uid` is in an active slot (an object without one,
    /// which the apiserver never serves, hashes as the empty string).
    pub(crate) fn admits_uid(&self, uid: Option<&str>) -> bool {
        let slot = slot_of_uid(uid.unwrap_or(""));
        self.words[slot / 64].load(Ordering::Acquire) & (1 << (slot % 64)) != 0
    }

    /// Adds `slots`.
    pub(crate) fn activate(&self, slots: &SlotSet) {
        for slot in slots.iter() {
            self.words[slot / 64].fetch_or(1 << (slot % 64), Ordering::AcqRel);
        }
    }

    /// The active slots now.
    pub(crate) fn active(&self) -> SlotSet {
        let mut set = SlotSet::EMPTY;
        for slot in 0..SLOTS {
            if self.words[slot / 64].load(Ordering::Acquire) & (1 << (slot % 64)) != 0 {
                set.insert(slot);
            }
        }
        set
    }
}

/// A sharded term's [`EventFilter`]: an event reaches the lanes only when its object is in an
/// active slot (one hash of the uid and one atomic load, no allocation).
impl EventFilter for ShardGate {
    fn admits(&self, object: &SharedObject) -> bool {
        self.admits_uid(object.metadata().uid.as_deref())
    }
}
