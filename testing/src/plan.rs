//! Fault plans: one fault each, placed by what a fault-free run of the scenario did (its
//! writes, the resources it watched, its steps), and the seeded order a budget takes them in.

use std::fmt;

use crate::faults::WriteFault;
use crate::request::ResourceKey;

/// One fault, placed in a run of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultPlan {
    /// The operator crashes right after its `n`-th write reached the apiserver (counted from 1
    /// over the run): its answer is lost, the process is killed and a new one started.
    CrashAfterWrite(u64),
    /// The operator's `n`-th write gets `fault` instead of the apiserver's answer.
    FailWrite {
        /// Which write (from 1).
        write: u64,
        /// What it gets.
        fault: WriteFault,
    },
    /// The events of `resource` are withheld from before step `step` through the step after it
    /// (the operator quiesces on a stale view in between, and the next step acts on it), until
    /// the operator is quiescent on what it saw; then its watches end with 410 and it re-lists.
    /// A window that starts at the last step covers that step only.
    Withhold {
        /// The resource whose events are withheld.
        resource: ResourceKey,
        /// The step (from 0) the fault starts before.
        step: usize,
    },
    /// The apiserver is restarted right after step `step`'s writes, while the operator reacts
    /// to them: its requests fail until the apiserver is back, its watches end and resume, a
    /// write under way may land with its answer lost. Only with
    /// [`FaultHarness::restarts`](crate::FaultHarness::restarts).
    RestartApiserver {
        /// The step (from 0) after whose writes it restarts.
        step: usize,
    },
    /// The events of `resource` are held back from before step `step` through the step after
    /// it (as for [`Withhold`](Self::Withhold)), until the operator is quiescent on what it
    /// saw; then they are delivered, in order.
    Lag {
        /// The resource whose events lag.
        resource: ResourceKey,
        /// The step (from 0) the fault starts before.
        step: usize,
    },
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CrashAfterWrite(n) => write!(f, "crash right after write {n}"),
            Self::FailWrite { write, fault } => write!(f, "write {write} answered with {fault}"),
            Self::Withhold { resource, step } => {
                write!(
                    f,
                    "{resource} events withheld from step {step} through the next, then a re-list"
                )
            }
            Self::RestartApiserver { step } => {
                write!(
                    f,
                    "the apiserver restarted right after step {step}'s writes"
                )
            }
            Self::Lag { resource, step } => {
                write!(
                    f,
                    "{resource} events held back from step {step} through the next, then delivered"
                )
            }
        }
    }
}

/// Every plan a fault-free run with `writes` writes, `steps` steps and watches of `watched`
/// suggests: a crash after each write, a conflict and a lost answer on each write, and each
/// watched resource withheld and lagging from each step (through the next).
pub fn enumerate(writes: u64, steps: usize, watched: &[ResourceKey]) -> Vec<FaultPlan> {
    let mut plans = enumerate_in_process(writes, steps, watched);
    plans.extend((0..steps).map(|step| FaultPlan::RestartApiserver { step }));
    plans
}

/// [`enumerate`] without the apiserver restarts.
pub fn enumerate_in_process(writes: u64, steps: usize, watched: &[ResourceKey]) -> Vec<FaultPlan> {
    let mut plans = Vec::new();
    for write in 1..=writes {
        plans.push(FaultPlan::CrashAfterWrite(write));
        plans.push(FaultPlan::FailWrite {
            write,
            fault: WriteFault::Conflict,
        });
        plans.push(FaultPlan::FailWrite {
            write,
            fault: WriteFault::ResponseLost,
        });
    }
    for resource in watched {
        for step in 0..steps {
            plans.push(FaultPlan::Withhold {
                resource: resource.clone(),
                step,
            });
            plans.push(FaultPlan::Lag {
                resource: resource.clone(),
                step,
            });
        }
    }
    plans
}

/// `plans` in the order `seed` gives: each kind of fault shuffled on its own (Fisher-Yates driven
/// by splitmix64), then taken in turn (a crash, a lost answer, a withheld watch, a conflict, a
/// lagging watch, an apiserver restart, a crash, ...), so that a small budget still tries every
/// kind of fault. The same seed gives the same order on every machine.
///
/// Watch faults are taken earliest window first (the seed orders the resources within a step):
/// the first steps usually create what the later ones act on, so a window that opens early
/// leaves the operator acting on a stale view of the most objects, and a budget of a few watch
/// plans covers every watched resource at the scenario's start before it covers later steps.
pub fn shuffled(plans: Vec<FaultPlan>, seed: u64) -> Vec<FaultPlan> {
    let mut state = seed;
    let mut kinds: [Vec<FaultPlan>; 6] = Default::default();
    for plan in plans {
        let kind = match &plan {
            FaultPlan::CrashAfterWrite(_) => 0,
            FaultPlan::FailWrite {
                fault: WriteFault::ResponseLost,
                ..
            } => 1,
            FaultPlan::Withhold { .. } => 2,
            FaultPlan::FailWrite { .. } => 3,
            FaultPlan::Lag { .. } => 4,
            FaultPlan::RestartApiserver { .. } => 5,
        };
        kinds[kind].push(plan);
    }
    for kind in &mut kinds {
        shuffle(kind, &mut state);
    }
    for watch in [2, 4] {
        // Stable: plans of one step keep the shuffled order.
        kinds[watch].sort_by_key(|plan| match plan {
            FaultPlan::Withhold { step, .. } | FaultPlan::Lag { step, .. } => *step,
            _ => 0,
        });
    }
    let mut queues = kinds.map(std::collections::VecDeque::from);
    let mut ordered = Vec::new();
    while queues.iter().any(|queue| !queue.is_empty()) {
        for queue in &mut queues {
            if let Some(plan) = queue.pop_front() {
                ordered.push(plan);
            }
        }
    }
    ordered
}

/// A Fisher-Yates shuffle driven by splitmix64 from `state`.
fn shuffle(plans: &mut [FaultPlan], state: &mut u64) {
    for index in (1..plans.len()).rev() {
        let bound = u64::try_from(index + 1).unwrap_or(u64::MAX);
        let pick = usize::try_from(splitmix64(state) % bound).unwrap_or(0);
        plans.swap(index, pick);
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_and_every_watched_resource_at_every_step_gets_its_plans() {
        let watched = [ResourceKey::new("", "configmaps")];
        let plans = enumerate(2, 3, &watched);
        assert_eq!(plans.len(), 2 * 3 + 3 * 2 + 3);
        assert!(plans.contains(&FaultPlan::RestartApiserver { step: 2 }));
        assert_eq!(enumerate_in_process(2, 3, &watched).len(), 2 * 3 + 3 * 2);
        assert!(plans.contains(&FaultPlan::CrashAfterWrite(2)));
        assert!(plans.contains(&FaultPlan::Lag {
            resource: watched[0].clone(),
            step: 2
        }));
    }

    #[test]
    fn a_seed_fixes_the_order_and_another_seed_changes_it() {
        let plans = enumerate(20, 2, &[]);
        assert_eq!(shuffled(plans.clone(), 7), shuffled(plans.clone(), 7));
        assert_ne!(shuffled(plans.clone(), 7), shuffled(plans.clone(), 8));
        let mut sorted = shuffled(plans.clone(), 7);
        sorted.sort_by_key(ToString::to_string);
        let mut expected = plans;
        expected.sort_by_key(ToString::to_string);
        assert_eq!(sorted, expected, "a permutation");
    }

    #[test]
    fn watch_faults_are_taken_earliest_step_first_with_resources_in_seeded_order() {
        let watched = [
            ResourceKey::new("", "configmaps"),
            ResourceKey::new("", "secrets"),
            ResourceKey::new("apps", "deployments"),
        ];
        let steps = |seed| -> Vec<usize> {
            shuffled(enumerate(0, 3, &watched), seed)
                .into_iter()
                .filter_map(|plan| match plan {
                    FaultPlan::Withhold { step, .. } => Some(step),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(steps(3), [0, 0, 0, 1, 1, 1, 2, 2, 2]);
        let first = |seed| -> Vec<FaultPlan> {
            shuffled(enumerate(0, 3, &watched), seed)
                .into_iter()
                .filter(|plan| matches!(plan, FaultPlan::Lag { .. }))
                .take(3)
                .collect()
        };
        assert!(
            (1..20).any(|seed| first(seed) != first(0)),
            "the seed orders the resources within a step"
        );
    }

    #[test]
    fn a_small_budget_tries_every_kind_of_fault_first() {
        let watched = [ResourceKey::new("", "configmaps")];
        let first: Vec<FaultPlan> = shuffled(enumerate(30, 3, &watched), 11)
            .into_iter()
            .take(5)
            .collect();
        assert!(
            matches!(first[0], FaultPlan::CrashAfterWrite(_)),
            "{first:?}"
        );
        assert!(
            matches!(
                first[1],
                FaultPlan::FailWrite {
                    fault: WriteFault::ResponseLost,
                    ..
                }
            ),
            "{first:?}"
        );
        assert!(matches!(first[2], FaultPlan::Withhold { .. }), "{first:?}");
        assert!(
            matches!(
                first[3],
                FaultPlan::FailWrite {
                    fault: WriteFault::Conflict,
                    ..
                }
            ),
            "{first:?}"
        );
        assert!(matches!(first[4], FaultPlan::Lag { .. }), "{first:?}");
    }
}
