//! The load and the churn: N objects created at bounded concurrency and, while the creates still
//! run, spec updates of every `update_every`-th object and deletes of every `delete_every`-th.
//!
//! Two pipelined stages: the creator creates objects in index order with
//! [`WorkloadSettings::create_concurrency`] requests in flight and hands each created object to
//! the churner, which (with [`WorkloadSettings::churn_concurrency`] objects in flight) raises the
//! revision of the selected objects [`WorkloadSettings::updates_per_object`] times, one patch
//! after the other (each is its own watch event), then deletes the selected ones. So updates and
//! deletes reach the operator while it still works through the adds. Object 0 is both updated and
//! deleted (so are all multiples of both).
//!
//! Every request rides out apiserver restarts ([`crate::retry`]); a create whose answer was lost
//! and that meets 409 on the retry reads the object instead, a delete that meets 404 is done. The
//! [`Ledger`] says what the apiserver must hold at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::error::SoakError;
use crate::kind::{Churn, revision_patch};
use crate::retry::retrying;

/// What the workload does.
#[derive(Clone, Debug)]
pub struct WorkloadSettings {
    /// Objects created.
    pub objects: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// Objects whose updates and deletes are in flight at once.
    pub churn_concurrency: usize,
    /// Every object whose index is a multiple of this gets spec updates (0: none).
    pub update_every: usize,
    /// Spec updates per updated object (revision 1, 2, ...).
    pub updates_per_object: u32,
    /// Every object whose index is a multiple of this is deleted (0: none).
    pub delete_every: usize,
    /// Prefix of the object names (`{prefix}{index:05}`); rounds use different prefixes.
    pub name_prefix: String,
    /// How long one request may keep failing transiently (the apiserver restarting).
    pub patience: Duration,
}

impl Default for WorkloadSettings {
    fn default() -> Self {
        Self {
            objects: 2000,
            create_concurrency: 10,
            churn_concurrency: 10,
            update_every: 3,
            updates_per_object: 2,
            delete_every: 5,
            name_prefix: "churn-".into(),
            patience: Duration::from_secs(120),
        }
    }
}

impl WorkloadSettings {
    /// The name of object `index`.
    pub fn name(&self, index: usize) -> String {
        format!("{}{index:05}", self.name_prefix)
    }

    fn updates_of(&self, index: usize) -> u32 {
        if self.update_every > 0 && index.is_multiple_of(self.update_every) {
            self.updates_per_object
        } else {
            0
        }
    }

    fn deletes(&self, index: usize) -> bool {
        self.delete_every > 0 && index.is_multiple_of(self.delete_every)
    }
}

/// What the workload did, which is what the apiserver must hold at the end.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// Every created object: name to UID.
    pub uids: BTreeMap<String, String>,
    /// The revision the workload last wrote, for objects it did not delete.
    pub live: BTreeMap<String, u32>,
    /// The objects it deleted.
    pub deleted: BTreeSet<String>,
    /// Spec updates made.
    pub updates: u64,
    /// How long the creates took (first to last).
    pub create_time: Duration,
    /// How long the whole workload took.
    pub total_time: Duration,
}

/// Runs the workload in `api`'s namespace; `created` counts the objects created so far (for the
/// conflict writer, [`crate::faults::poke_objects`]).
///
/// # Errors
///
/// The first request that failed for good (see [`retrying`]).
pub async fn run_workload(
    api: &Api<Churn>,
    settings: &WorkloadSettings,
    created: &AtomicUsize,
) -> Result<Ledger, SoakError> {
    let started = Instant::now();
    let (to_churn, to_do) = futures::channel::mpsc::unbounded::<(usize, String, String)>();
    let creator = async {
        let mut to_churn = to_churn;
        let mut creates = futures::stream::iter(0..settings.objects)
            .map(|index| async move {
                let name = settings.name(index);
                let uid = create(api, &name, settings.patience).await?;
                Ok::<_, SoakError>((index, name, uid))
            })
            .buffer_unordered(settings.create_concurrency.max(1));
        while let Some(done) = creates.next().await {
            let done = done?;
            created.fetch_add(1, Ordering::Relaxed);
            // The churner only stops early on an error, which ends the workload anyway.
            let _ = to_churn.send(done).await;
        }
        Ok::<_, SoakError>(started.elapsed())
    };
    let churner = async {
        let mut churned = to_do
            .map(|(index, name, uid)| async move {
                let updates = settings.updates_of(index);
                for revision in 1..=updates {
                    update(api, &name, revision, settings.patience).await?;
                }
                let deleted = settings.deletes(index);
                if deleted {
                    delete(api, &name, settings.patience).await?;
                }
                Ok::<_, SoakError>((name, uid, updates, deleted))
            })
            .buffer_unordered(settings.churn_concurrency.max(1));
        let mut ledger = Ledger::default();
        while let Some(churned) = churned.next().await {
            let (name, uid, updates, deleted) = churned?;
            ledger.uids.insert(name.clone(), uid);
            ledger.updates += u64::from(updates);
            if deleted {
                ledger.deleted.insert(name);
            } else {
                ledger.live.insert(name, updates);
            }
        }
        Ok::<_, SoakError>(ledger)
    };
    let (create_time, ledger) = futures::try_join!(creator, churner)?;
    Ok(Ledger {
        create_time,
        total_time: started.elapsed(),
        ..ledger
    })
}

/// Creates `name` at revision 0 and returns its UID.
async fn create(api: &Api<Churn>, name: &str, patience: Duration) -> Result<String, SoakError> {
    let object = Churn::initial(name);
    let created = retrying(
        || format!("creating {name}"),
        patience,
        || async {
            match api.create(&PostParams::default(), &object).await {
                // A retry after an answer lost to a restart: the first attempt created it.
                Err(kube::Error::Api(status)) if status.code == 409 => api.get(name).await,
                other => other,
            }
        },
    )
    .await?;
    created
        .uid()
        .ok_or_else(|| SoakError::Setup(format!("{name} was created without a UID")))
}

async fn update(
    api: &Api<Churn>,
    name: &str,
    revision: u32,
    patience: Duration,
) -> Result<(), SoakError> {
    let patch = revision_patch(revision);
    let params = PatchParams::default();
    retrying(
        || format!("setting the revision of {name} to {revision}"),
        patience,
        || async { api.patch(name, &params, &Patch::Merge(&patch)).await },
    )
    .await
    .map(drop)
}

async fn delete(api: &Api<Churn>, name: &str, patience: Duration) -> Result<(), SoakError> {
    retrying(
        || format!("deleting {name}"),
        patience,
        || async {
            match api.delete(name, &DeleteParams::default()).await {
                // A retry after an answer lost to a restart, or the object already gone.
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                other => other.map(drop),
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_third_is_updated_and_every_fifth_deleted() {
        let settings = WorkloadSettings::default();
        assert_eq!(settings.updates_of(0), 2);
        assert_eq!(settings.updates_of(3), 2);
        assert_eq!(settings.updates_of(4), 0);
        assert!(settings.deletes(0) && settings.deletes(10) && !settings.deletes(3));
        assert_eq!(settings.name(42), "churn-00042");
        let none = WorkloadSettings {
            update_every: 0,
            delete_every: 0,
            ..settings
        };
        assert_eq!(none.updates_of(0), 0);
        assert!(!none.deletes(0));
    }
}
