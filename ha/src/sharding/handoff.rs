//! The handoff rule: which of its slots a member may act on, given what every live member has
//! acknowledged.
//!
//! Each member publishes on its own Lease the membership it acts under (its *acknowledgement*),
//! and publishes a new one only after its work on the slots it loses has drained and been
//! cancelled. A member acts on a slot only when
//!
//! 1. the slot is its own under the membership it acknowledged itself, and
//! 2. no other live member owns the slot under the membership *that* member acknowledged
//!    (a member that acknowledged nothing yet owns nothing; a member whose Lease expired is not
//!    live and is not waited for).
//!
//! Safety: two members acting on one slot would each own it under their own acknowledgement,
//! and each would have read the other's after publishing its own; reads are consistent lists of
//! the ring's Leases, so the later of the two reads sees the other's acknowledgement and holds
//! back (see [`sharding`](super)). Liveness: once the members agree on the membership, every
//! acknowledgement is the same list, under which every slot has one owner, so each slot
//! becomes active on exactly one member.

use std::collections::HashMap;

use super::assignment::{SlotSet, owned_by};

/// What one live member has published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAck {
    /// The member's identity.
    pub identity: String,
    /// The membership it acknowledged (sorted identities), if any yet.
    pub acknowledged: Option<Vec<String>>,
}

/// The slots `me` may act on while it acknowledges `mine`, given the other live members'
/// acknowledgements (entries for `me` are ignored); see the [module docs](self).
pub(crate) fn active_slots(me: &str, mine: &[String], others: &[MemberAck]) -> SlotSet {
    let mut active = owned_by(mine, me);
    // Members often acknowledged the same list: compute each list's assignment once.
    let mut owned: HashMap<(&[String], &str), SlotSet> = HashMap::new();
    for other in others {
        if other.identity == me {
            continue;
        }
        let Some(theirs) = &other.acknowledged else {
            continue;
        };
        let held = owned
            .entry((theirs.as_slice(), other.identity.as_str()))
            .or_insert_with(|| owned_by(theirs, &other.identity));
        active = active.minus(held);
    }
    active
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::assignment::SLOTS;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(ToString::to_string).collect()
    }

    fn ack(identity: &str, acknowledged: Option<&[&str]>) -> MemberAck {
        MemberAck {
            identity: identity.into(),
            acknowledged: acknowledged.map(list),
        }
    }

    #[test]
    fn a_joining_member_waits_for_the_previous_owner_to_acknowledge() {
        // a ran alone; b joins.
        let both = list(&["a", "b"]);
        let b_share = owned_by(&both, "b");
        assert!(!b_share.is_empty());
        // a still acts under [a]: b may take nothing a owns, which is everything.
        let waiting = active_slots("b", &both, &[ack("a", Some(&["a"]))]);
        assert!(waiting.is_empty(), "{waiting:?}");
        // a drained and acknowledged [a, b]: b takes its whole share.
        let taken = active_slots("b", &both, &[ack("a", Some(&["a", "b"]))]);
        assert_eq!(taken, b_share);
        // Meanwhile a, acknowledging [a, b], acts on its share only.
        let a_share = active_slots("a", &both, &[ack("b", Some(&["a", "b"]))]);
        assert_eq!(a_share, owned_by(&both, "a"));
        assert_eq!(a_share.len() + b_share.len(), SLOTS);
        assert!(a_share.minus(&b_share) == a_share, "no slot on both");
    }

    #[test]
    fn a_member_that_acknowledged_nothing_holds_nothing() {
        let both = list(&["a", "b"]);
        assert_eq!(
            active_slots("a", &both, &[ack("b", None)]),
            owned_by(&both, "a")
        );
    }

    #[test]
    fn a_leaving_members_share_waits_for_it_unless_its_lease_expired() {
        let three = list(&["a", "b", "c"]);
        let two = list(&["a", "b"]);
        // c is still live and acting under [a, b, c]: a gains none of c's slots yet.
        let c_share = owned_by(&three, "c");
        let with_c = active_slots(
            "a",
            &two,
            &[
                ack("b", Some(&["a", "b"])),
                ack("c", Some(&["a", "b", "c"])),
            ],
        );
        assert!(
            with_c.minus(&c_share) == with_c,
            "a acts on none of c's slots"
        );
        // c's Lease expired: it is no longer listed, and a takes its share of c's slots.
        let without_c = active_slots("a", &two, &[ack("b", Some(&["a", "b"]))]);
        assert_eq!(without_c, owned_by(&two, "a"));
    }

    #[test]
    fn disagreeing_members_never_both_act_on_a_slot() {
        // Any mix of acknowledgements: the active sets are disjoint.
        let views = [
            list(&["a"]),
            list(&["a", "b"]),
            list(&["a", "b", "c"]),
            list(&["b", "c"]),
            list(&["a", "c"]),
        ];
        for va in &views {
            for vb in &views {
                for vc in &views {
                    let acks = [
                        MemberAck {
                            identity: "a".into(),
                            acknowledged: Some(va.clone()),
                        },
                        MemberAck {
                            identity: "b".into(),
                            acknowledged: Some(vb.clone()),
                        },
                        MemberAck {
                            identity: "c".into(),
                            acknowledged: Some(vc.clone()),
                        },
                    ];
                    let sets: Vec<SlotSet> = acks
                        .iter()
                        .map(|me| {
                            active_slots(
                                &me.identity,
                                me.acknowledged.as_deref().unwrap_or_default(),
                                &acks,
                            )
                        })
                        .collect();
                    for i in 0..3 {
                        for j in (i + 1)..3 {
                            assert!(
                                sets[i].minus(&sets[j]) == sets[i],
                                "{va:?} {vb:?} {vc:?}: members {i} and {j} share a slot"
                            );
                        }
                    }
                }
            }
        }
    }
}
