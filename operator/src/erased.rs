//! The erased handler layer, for custom sources and multi-kind handlers.
//!
//! Most operators never need this module: they register a kind with
//! [`InformerController::kind`] and attach typed [`Watcher<K, C>`](crate::Watcher)s and
//! [`Reconciler<K, C>`](crate::Reconciler)s to its [`KindHandle`](crate::KindHandle). Underneath,
//! every handler is erased once into a [`DynWatcher`] or [`DynReconciler`] that works on
//! [`SharedObject`](crate::object::SharedObject)s; this module exposes that layer for what the
//! typed API does not cover:
//!
//! - a custom source of events: an [`Informer`] over a synthetic stream
//!   ([`Informer::from_stream`](crate::Informer::from_stream)), registered under a kind name of
//!   your choosing with [`ErasedHandlers::add_informer`];
//! - one handler for several kinds, or a wrapper around any handler (the
//!   [opinionated](crate::opinionated) wrappers are [`DynWatcher`]s and [`DynReconciler`]s
//!   around erased handlers), registered by kind name with [`ErasedHandlers::add_watcher`] and
//!   [`ErasedHandlers::add_reconciler`];
//! - closures over one concrete type on that layer: [`DynWatcherFns<K>`] and
//!   [`DynReconcilerFn<K, F>`], which downcast each object (an object of another type is an error
//!   for that call) and, like the typed handlers, never pass an
//!   [`Undecodable`](crate::object::Undecodable) state on (see [`view`](crate::view)).
//!
//! The argument order is the typed traits' everywhere: the object (or request) first, the
//! [`DynContext`](crate::DynContext) last.
//!
//! These methods are reached through [`InformerController::erased`], not on the controller
//! itself, so that the controller's own surface is the typed one.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_operator::erased::DynWatcherFns;
//! use kube::core::GroupVersionKind;
//! use kubeapp_operator::{ControllerConfig, Informer, InformerController};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let controller = InformerController::new(ControllerConfig::default());
//! let (_events, stream) = futures::channel::mpsc::unbounded();
//! let erased = controller.erased();
//! erased.add_informer("configmaps", Informer::from_stream(GroupVersionKind::gvk("", "v1", "Test"), stream));
//! erased.add_watcher(
//!     "configmaps",
//!     DynWatcherFns::<ConfigMap>::new().on_add(|cm, _ctx| async move {
//!         tracing::info!(name = ?cm.metadata.name, "added");
//!         Ok(())
//!     }),
//! );
//! # }
//! ```

use crate::controller::InformerController;
use crate::list_watch::Informer;

pub use crate::reconciler::{DynReconciler, DynReconcilerFn};
pub use crate::watcher::{DynWatcher, DynWatcherFns};

/// The erased, string-keyed registration of one [`InformerController`]; made by
/// [`InformerController::erased`]. See the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub struct ErasedHandlers<'a> {
    controller: &'a InformerController,
}

impl InformerController {
    /// The erased layer of this controller: informers and handlers keyed by a kind name, for
    /// custom sources and multi-kind handlers (see [`erased`](crate::erased)).
    pub fn erased(&self) -> ErasedHandlers<'_> {
        ErasedHandlers { controller: self }
    }
}

impl ErasedHandlers<'_> {
    /// Adds an informer for `kind` (a key of your choosing, used for handlers and as the `kind`
    /// metric label). Several informers may feed one kind. While the controller runs, the
    /// informer starts at once.
    pub fn add_informer(&self, kind: &str, informer: Informer) {
        self.controller.register_informer(kind, informer);
    }

    /// Adds a watcher for `kind`; watchers run in the order they were added, before reconcilers.
    pub fn add_watcher(&self, kind: &str, watcher: impl DynWatcher) {
        self.controller.register_watcher(kind, watcher);
    }

    /// Adds a reconciler for `kind`; reconcilers run in the order they were added, after
    /// watchers.
    pub fn add_reconciler(&self, kind: &str, reconciler: impl DynReconciler) {
        self.controller.register_reconciler(kind, reconciler);
    }
}
