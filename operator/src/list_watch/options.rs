//! [`ListWatchOptions`]: what one [`Informer`](super::Informer) built from a client lists and
//! watches, and how it caches.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::watcher;

use super::drift::DriftCheck;

/// A transform applied to each object before it is decoded and cached.
pub type Transform = Arc<dyn Fn(&mut DynamicObject) + Send + Sync>;

/// What one [`Informer`](super::Informer) built by [`Informer::new`](super::Informer::new) or
/// [`Informer::dynamic`](super::Informer::dynamic) lists and watches (namespace, selectors,
/// pages) and how it caches (resync, managed fields, a transform of the raw object);
/// `ListWatchOptions::default()` watches all namespaces. A kind registered with
/// [`InformerController::kind`](crate::InformerController::kind) takes kube's `watcher::Config`
/// and the [`InformerOptions<K>`](crate::InformerOptions) of the shared informers instead.
#[derive(Clone)]
pub struct ListWatchOptions {
    pub(super) namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    pub(super) resync_interval: Option<Duration>,
    page_size: Option<u32>,
    streaming_list: bool,
    pub(super) max_concurrent_workers: Option<usize>,
    pub(super) keep_managed_fields: bool,
    pub(super) transform: Option<Transform>,
    pub(super) drift_check: Option<DriftCheck>,
}

impl Default for ListWatchOptions {
    fn default() -> Self {
        Self {
            namespace: None,
            label_selector: None,
            field_selector: None,
            resync_interval: None,
            page_size: None,
            streaming_list: false,
            max_concurrent_workers: None,
            keep_managed_fields: false,
            transform: None,
            drift_check: Some(DriftCheck::default()),
        }
    }
}

impl ListWatchOptions {
    /// Watches only `namespace` (leave unset for cluster-scoped kinds).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Watches only objects matching the label selector, e.g. `app=x,tier!=db`.
    #[must_use]
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Watches only objects matching the field selector, e.g. `metadata.name=x`.
    #[must_use]
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Re-emits every cached object as a Resync event at this interval (off by default).
    #[must_use]
    pub fn resync_interval(mut self, interval: Duration) -> Self {
        self.resync_interval = Some(interval);
        self
    }

    /// Objects per list page (kube-runtime's default is 500).
    #[must_use]
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.page_size = Some(page_size);
        self
    }

    /// Uses a streaming list (a watch with `sendInitialEvents`) instead of paged lists.
    #[must_use]
    pub fn streaming_list(mut self) -> Self {
        self.streaming_list = true;
        self
    }

    /// How many objects of this kind the controller handles at once (the controller's
    /// `max_concurrent_workers` otherwise). The first informer added for a kind decides.
    #[must_use]
    pub fn max_concurrent_workers(mut self, workers: usize) -> Self {
        self.max_concurrent_workers = Some(workers);
        self
    }

    /// Keeps `metadata.managedFields` (dropped by default).
    #[must_use]
    pub fn keep_managed_fields(mut self) -> Self {
        self.keep_managed_fields = true;
        self
    }

    /// Runs `transform` on each object before it is decoded and cached, e.g. to drop large fields.
    #[must_use]
    pub fn transform(
        mut self,
        transform: impl Fn(&mut DynamicObject) + Send + Sync + 'static,
    ) -> Self {
        self.transform = Some(Arc::new(transform));
        self
    }

    /// How the informer checks its cache against the apiserver (see
    /// [drift detection](super#drift-detection)); `None` turns it off. Default: every 10
    /// minutes, 60 s grace.
    #[must_use]
    pub fn drift_check(mut self, check: Option<DriftCheck>) -> Self {
        self.drift_check = check;
        self
    }

    pub(super) fn watcher_config(&self) -> watcher::Config {
        let mut config = watcher::Config::default();
        if let Some(labels) = &self.label_selector {
            config = config.labels(labels);
        }
        if let Some(fields) = &self.field_selector {
            config = config.fields(fields);
        }
        if let Some(page_size) = self.page_size {
            config = config.page_size(page_size);
        }
        if self.streaming_list {
            config = config.streaming_lists();
        }
        config
    }
}

impl fmt::Debug for ListWatchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListWatchOptions")
            .field("namespace", &self.namespace)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("resync_interval", &self.resync_interval)
            .field("page_size", &self.page_size)
            .field("streaming_list", &self.streaming_list)
            .field("max_concurrent_workers", &self.max_concurrent_workers)
            .field("keep_managed_fields", &self.keep_managed_fields)
            .field("transform", &self.transform.is_some())
            .field("drift_check", &self.drift_check)
            .finish()
    }
}
