//! [`InformerOptions<K>`]: what kubeapp adds to kube-rs's `watcher::Config` for one kind.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::list_watch::{DriftCheck, TypedTransform};
use crate::object::KubeObject;
use crate::store::{IndexFn, Store, label_index, label_indexer};

/// kubeapp's additions to `kube::runtime::watcher::Config` (which keeps the selectors, page
/// size and list strategy) and to the `Api` (which carries the namespace).
///
/// `InformerOptions::default()`: no resync, `managedFields` dropped, no transform, no extra
/// index, the controller's worker count, the cache checked against the apiserver every 10
/// minutes ([`drift_check`](Self::drift_check)).
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::{Api, runtime::watcher};
/// use kubeapp_operator::{InformerOptions, Informers};
///
/// let options = InformerOptions::<Pod>::default()
///     .resync_every(Duration::from_secs(600))
///     // Cache only what the handlers read: no status conditions of the containers.
///     .transform("no-container-statuses", |pod: &mut Pod| {
///         if let Some(status) = pod.status.as_mut() {
///             status.container_statuses = None;
///         }
///     })
///     .index("node", |pod: &Pod| {
///         pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
///     });
/// let pods = Informers::new().store(Api::<Pod>::all(client), watcher::Config::default(), options);
/// pods.wait_until_synced().await;
/// let on_node = pods.by_index("node", "node-1")?;
/// println!("{} pods on node-1", on_node.len());
/// # Ok(())
/// # }
/// ```
pub struct InformerOptions<K> {
    pub(crate) resync: Option<Duration>,
    pub(crate) keep_managed_fields: bool,
    pub(crate) transform: Option<(&'static str, TypedTransform<K>)>,
    pub(crate) indexes: Vec<(Arc<str>, IndexFn)>,
    pub(crate) max_concurrent_workers: Option<usize>,
    pub(crate) drift_check: Option<DriftCheck>,
}

impl<K> Default for InformerOptions<K> {
    fn default() -> Self {
        Self {
            resync: None,
            keep_managed_fields: false,
            transform: None,
            indexes: Vec::new(),
            max_concurrent_workers: None,
            drift_check: Some(DriftCheck::default()),
        }
    }
}

impl<K> Clone for InformerOptions<K> {
    fn clone(&self) -> Self {
        Self {
            resync: self.resync,
            keep_managed_fields: self.keep_managed_fields,
            transform: self.transform.clone(),
            indexes: self.indexes.clone(),
            max_concurrent_workers: self.max_concurrent_workers,
            drift_check: self.drift_check,
        }
    }
}

impl<K: KubeObject> InformerOptions<K> {
    /// Re-delivers every cached object at this period (watchers see `update(obj, obj)`,
    /// reconcilers `Resynced`). Part of the informer's identity: registrations with different
    /// periods do not share a watch.
    #[must_use]
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// Keeps `metadata.managedFields` (dropped by default: about half of the metadata, never
    /// needed by handlers). Part of the informer's identity.
    #[must_use]
    pub fn keep_managed_fields(mut self) -> Self {
        self.keep_managed_fields = true;
        self
    }

    /// Runs `f` on each decoded object before it is cached, e.g. to drop large fields. `name` is
    /// part of the informer's identity: two registrations share a watch only when their
    /// transforms have the same name (closures cannot be compared).
    #[must_use]
    pub fn transform(
        mut self,
        name: &'static str,
        f: impl Fn(&mut K) + Send + Sync + 'static,
    ) -> Self {
        self.transform = Some((name, Arc::new(f)));
        self
    }

    /// Indexes the cache by `f`'s values, for [`Store::by_index`]`(name, value)`.
    #[must_use]
    pub fn index(
        mut self,
        name: &'static str,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.indexes
            .push((Arc::from(name), Store::<K>::index_fn(f)));
        self
    }

    /// Indexes the cache by the value of the label `key`, for [`Store::by_label`].
    #[must_use]
    pub fn index_label(mut self, key: &'static str) -> Self {
        self.indexes
            .push((Arc::from(label_index(key)), label_indexer(key)));
        self
    }

    /// How many objects of this kind a controller handles at once (the controller's
    /// `max_concurrent_workers` otherwise). The first registration of a kind decides.
    #[must_use]
    pub fn max_concurrent_workers(mut self, workers: usize) -> Self {
        self.max_concurrent_workers = Some(workers.max(1));
        self
    }

    /// How the informer checks its cache against a consistent list of the apiserver, and
    /// re-lists when the watch failed to deliver (see
    /// [drift detection](crate::list_watch#drift-detection)); `None` turns it off. Default:
    /// every 10 minutes, with 60 s for the watch to catch up. The first registration of a shared
    /// informer decides.
    #[must_use]
    pub fn drift_check(mut self, check: Option<DriftCheck>) -> Self {
        self.drift_check = check;
        self
    }
}

impl<K> fmt::Debug for InformerOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerOptions")
            .field("resync", &self.resync)
            .field("drift_check", &self.drift_check)
            .field("keep_managed_fields", &self.keep_managed_fields)
            .field("transform", &self.transform.as_ref().map(|(name, _)| *name))
            .field(
                "indexes",
                &self
                    .indexes
                    .iter()
                    .map(|(name, _)| &**name)
                    .collect::<Vec<_>>(),
            )
            .field("max_concurrent_workers", &self.max_concurrent_workers)
            .finish()
    }
}
