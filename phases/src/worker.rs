//! What a phase's worker gets and returns: [`Work`] (the object, its phase, the phase's
//! [`Inputs`]) in, a [`Transition`] (next phase, outputs, status details) out.

use std::sync::Arc;

use futures::future::BoxFuture;
use kubeapp_components::Rendered;
use kubeapp_operator::{Context, ReconcileError};
use serde_json::Value;

use crate::inputs::{InputValue, Inputs};

/// One worker call's input: the custom object (as of the phase being worked), its phase, and the
/// phase's inputs.
pub struct Work<K, P> {
    /// The custom object.
    pub object: Arc<K>,
    /// The phase being worked.
    pub phase: P,
    /// The values of the phase's declared inputs, read by key: `work.inputs.get(KEY)`.
    pub inputs: Inputs,
}

/// What a worker decided: the next phase (the same one to stay), the outputs to ensure, and
/// details for `status.details`.
///
/// ```
/// use kubeapp_phases::Transition;
/// use serde_json::json;
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Step { Waiting, Ready }
///
/// let stay = Transition::to(Step::Waiting).details(json!({"replicasReady": 1}));
/// let next = Transition::to(Step::Ready).output(json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "traffic"}, "data": {"weight": "100"}
/// }));
/// assert_eq!((stay.next, stay.outputs.len()), (Step::Waiting, 0));
/// assert_eq!((next.next, next.outputs.len()), (Step::Ready, 1));
/// ```
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

    /// Adds an output: a [`Rendered`] object, or a `json!` object with its `apiVersion` and
    /// `kind` (see [`Rendered::value`]).
    #[must_use]
    pub fn output(mut self, output: impl Into<Rendered>) -> Self {
        self.outputs.push(output.into());
        self
    }

    /// Adds `outputs`, in order (as [`output`](Self::output) each).
    #[must_use]
    pub fn outputs<O: Into<Rendered>>(mut self, outputs: impl IntoIterator<Item = O>) -> Self {
        self.outputs.extend(outputs.into_iter().map(Into::into));
        self
    }

    /// Sets `status.details`.
    #[must_use]
    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// A worker, boxed.
pub(crate) type BoxWorker<K, P, C> = Box<
    dyn Fn(Work<K, P>, Context<C>) -> BoxFuture<'static, Result<Transition<P>, ReconcileError>>
        + Send
        + Sync,
>;

/// An input, boxed: reads the value of its key.
pub(crate) type BoxInput<K, C> = Box<
    dyn Fn(Arc<K>, Context<C>) -> BoxFuture<'static, Result<InputValue, ReconcileError>>
        + Send
        + Sync,
>;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outputs_take_json_objects_and_rendered_ones_in_order() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}});
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}});
        let transition = Transition::to("Next")
            .output(Rendered::value(config.clone()))
            .outputs(vec![secret.clone(), service.clone()]);
        let kinds: Vec<&str> = transition
            .outputs
            .iter()
            .map(|output| output.resource.kind.as_str())
            .collect();
        assert_eq!(kinds, ["ConfigMap", "Secret", "Service"]);
        assert_eq!(transition.outputs[1], Rendered::value(secret));
    }
}
