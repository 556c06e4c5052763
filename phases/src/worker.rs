//! What a phase's worker gets and returns: [`Work`] (the object, its phase, the phase's
//! [`Inputs`]) in, a [`Transition`] (next phase, outputs, status details) out.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use kubeapp_components::Rendered;
use kubeapp_operator::{Context, ReconcileError};
use serde_json::Value;

/// One worker call's input: the custom object (as of the phase being worked), its phase, and the
/// phase's inputs.
pub struct Work<K, P> {
    /// The custom object.
    pub object: Arc<K>,
    /// The phase being worked.
    pub phase: P,
    /// The values of the phase's declared inputs.
    pub inputs: Inputs,
}

/// What a worker decided: the next phase (the same one to stay), the outputs to ensure, and
/// details for `status.details`.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition<P> {
    /// The phase to move to (the current one to stay and be worked again after its interval).
    pub next: P,
    /// Objects to server-side apply, each owned by the custom object.
    pub outputs: Vec<Rendered>,
    /// Written to `status.details` (`None` keeps what is there).
    pub details: Option<Value>,
}

impl<P> Transition<P> {
    /// Move to (or stay in) `next`, with no outputs.
    pub fn to(next: P) -> Self {
        Self {
            next,
            outputs: Vec::new(),
            details: None,
        }
    }

    /// Adds an output.
    #[must_use]
    pub fn output(mut self, output: Rendered) -> Self {
        self.outputs.push(output);
        self
    }

    /// Sets `status.details`.
    #[must_use]
    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// The values of a phase's inputs, one per type.
#[derive(Default)]
pub struct Inputs {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Inputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inputs")
            .field("count", &self.values.len())
            .finish()
    }
}

impl Inputs {
    /// Adds a value (replacing one of the same type).
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The input of type `T`.
    ///
    /// # Errors
    ///
    /// A terminal error naming `T` when the phase declares no such input (a bug in the
    /// operator, not something a retry fixes).
    pub fn get<T: Any + Send + Sync>(&self) -> Result<&T, ReconcileError> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
            .ok_or_else(|| {
                ReconcileError::terminal(format!(
                    "this phase declares no input of type {}",
                    std::any::type_name::<T>()
                ))
            })
    }
}

/// A worker, boxed.
pub(crate) type BoxWorker<K, P, C> = Box<
    dyn Fn(Work<K, P>, Context<C>) -> BoxFuture<'static, Result<Transition<P>, ReconcileError>>
        + Send
        + Sync,
>;

/// An input, boxed: reads the value and adds it to the inputs.
pub(crate) type BoxInput<K, C> = Box<
    dyn Fn(Arc<K>, Context<C>) -> BoxFuture<'static, Result<InputValue, ReconcileError>>
        + Send
        + Sync,
>;

/// One gathered input value.
pub(crate) struct InputValue(Box<dyn FnOnce(&mut Inputs) + Send>);

impl InputValue {
    pub(crate) fn of<T: Any + Send + Sync>(value: T) -> Self {
        Self(Box::new(move |inputs| inputs.insert(value)))
    }

    pub(crate) fn add_to(self, inputs: &mut Inputs) {
        (self.0)(inputs);
    }
}

/// The object of kind `T` named by the custom object, read from the cache of a kind attached
/// with `owns` or `watches` (see [`crate::PhaseMachine::input_named`]); `None` when not cached.
#[derive(Debug)]
pub struct Named<T>(pub Option<Arc<T>>);

/// The objects of kind `T` carrying a label value the custom object names, read from the cache
/// of a kind attached with `owns` or `watches` (see [`crate::PhaseMachine::input_labelled`]).
#[derive(Debug)]
pub struct Labelled<T>(pub Vec<Arc<T>>);
