//! A phase's inputs: [`InputKey<T>`], the typed name of one input, and [`Inputs`], the values a
//! worker gets, read by key (`work.inputs.get(KEY)`, the value's type coming from the key).
//!
//! Inputs are stored by **name**, not by type: two inputs of one type on one phase (a canary's
//! primary and canary Deployments) are two keys with two names and never replace each other.
//! The same name declared twice on one phase is refused when the machine is built
//! ([`PhaseError::DuplicateInput`](crate::PhaseError::DuplicateInput)).
//!
//! A worker reading a key its phase does not declare is **not** caught by types or at build
//! time: a worker is an opaque async closure, so the machine cannot see which keys it reads
//! without a second list of them (which could drift from the code just as well) or per-phase
//! generic input tuples (a type parameter per phase on the machine). It is a terminal error at
//! run time naming the phase and the input (a bug in the operator: counted, never retried).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use kubeapp_operator::ReconcileError;

/// The typed name of one input of a phase: declared on the machine with it
/// ([`PhaseMachine::input`](crate::PhaseMachine::input) and friends), read by the worker with it
/// ([`Inputs::get`]), the value's type `T` coming from the key. Usually a `const`.
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kubeapp_phases::InputKey;
///
/// /// Two inputs of one type: two names.
/// const PRIMARY: InputKey<Option<Arc<Deployment>>> = InputKey::new("primary");
/// const CANARY: InputKey<Option<Arc<Deployment>>> = InputKey::new("canary");
/// /// Anything computed, e.g. a metrics query.
/// const SUCCESS_RATE: InputKey<Option<f64>> = InputKey::new("successRate");
///
/// assert_eq!(PRIMARY.name(), "primary");
/// assert_ne!(PRIMARY.name(), CANARY.name());
/// assert_eq!(SUCCESS_RATE.to_string(), "successRate");
/// ```
pub struct InputKey<T> {
    name: &'static str,
    value: PhantomData<fn() -> T>,
}

impl<T> InputKey<T> {
    /// The key named `name` (unique among the inputs of a phase).
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            value: PhantomData,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for InputKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for InputKey<T> {}

impl<T> fmt::Debug for InputKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InputKey").field(&self.name).finish()
    }
}

impl<T> fmt::Display for InputKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The values of one phase's declared inputs, by key.
///
/// Declared on the machine with [`PhaseMachine::input`](crate::PhaseMachine::input) (read
/// before every run of the phase's worker), read by the worker with [`get`](Self::get):
///
/// ```
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "Rollout", namespaced, status = "kubeapp_phases::PhaseStatus")]
/// # pub struct RolloutSpec { app: String }
/// # #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// # enum Step { Waiting, Evaluating, Done, Failed }
/// # impl kubeapp_phases::Phase for Step {
/// #     const ALL: &'static [Self] = &[Step::Waiting, Step::Evaluating, Step::Done, Step::Failed];
/// #     const INITIAL: Self = Step::Waiting;
/// #     fn name(&self) -> &'static str { match self { Step::Waiting => "Waiting",
/// #         Step::Evaluating => "Evaluating", Step::Done => "Done", Step::Failed => "Failed" } }
/// #     fn is_final(&self) -> bool { matches!(self, Step::Done | Step::Failed) }
/// # }
/// use std::sync::Arc;
/// use k8s_openapi::api::apps::v1::Deployment;
/// use kube::{Api, ResourceExt};
/// use kubeapp_phases::{InputKey, PhaseMachine, Transition};
///
/// const DEPLOYMENT: InputKey<Option<Deployment>> = InputKey::new("deployment");
///
/// let machine = PhaseMachine::<Rollout, Step>::new()
///     .input(Step::Waiting, DEPLOYMENT, |rollout: Arc<Rollout>, ctx| async move {
///         let ns = rollout.namespace().unwrap_or_default();
///         let api: Api<Deployment> = Api::namespaced(ctx.client().clone(), &ns);
///         Ok(api.get_opt(&rollout.spec.app).await?)
///     })
///     .worker(Step::Waiting, |work, _ctx| async move {
///         let available = work.inputs.get(DEPLOYMENT)?.as_ref().is_some_and(|d| {
///             kubeapp_components::Readiness::of(d).is_ready()
///         });
///         Ok(Transition::to(if available { Step::Evaluating } else { Step::Waiting }))
///     })
///     .worker(Step::Evaluating, |_work, _ctx| async move { Ok(Transition::to(Step::Done)) });
/// assert!(machine.build().is_ok());
/// ```
pub struct Inputs {
    /// The phase they are for (named in errors).
    phase: &'static str,
    values: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Inputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.values.keys().copied().collect();
        names.sort_unstable();
        f.debug_struct("Inputs")
            .field("phase", &self.phase)
            .field("names", &names)
            .finish()
    }
}

impl Inputs {
    /// No values yet, for `phase`.
    pub(crate) fn new(phase: &'static str) -> Self {
        Self {
            phase,
            values: HashMap::new(),
        }
    }

    /// Adds the value of `key` (names are unique per phase: the build checks it).
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, key: InputKey<T>, value: T) {
        self.values.insert(key.name, Box::new(value));
    }

    /// The value of the input `key`.
    ///
    /// # Errors
    ///
    /// A terminal error naming the phase and the input when the phase declares no input of that
    /// name, or declares it with another type (a bug in the operator, not something a retry
    /// fixes).
    pub fn get<T: Send + Sync + 'static>(&self, key: InputKey<T>) -> Result<&T, ReconcileError> {
        let value = self.values.get(key.name).ok_or_else(|| {
            ReconcileError::terminal(format!(
                "phase {} declares no input {:?}",
                self.phase, key.name
            ))
        })?;
        value.downcast_ref::<T>().ok_or_else(|| {
            ReconcileError::terminal(format!(
                "input {:?} of phase {} is not a {} (two keys of one name with different types)",
                key.name,
                self.phase,
                std::any::type_name::<T>()
            ))
        })
    }
}

/// One gathered input value, waiting to be added to its phase's [`Inputs`].
pub(crate) struct InputValue(Box<dyn FnOnce(&mut Inputs) + Send>);

impl InputValue {
    /// The value of `key`.
    pub(crate) fn of<T: Send + Sync + 'static>(key: InputKey<T>, value: T) -> Self {
        Self(Box::new(move |inputs| inputs.insert(key, value)))
    }

    /// Adds it to `inputs`.
    pub(crate) fn add_to(self, inputs: &mut Inputs) {
        (self.0)(inputs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: InputKey<Option<u32>> = InputKey::new("primary");
    const CANARY: InputKey<Option<u32>> = InputKey::new("canary");
    const OTHER: InputKey<String> = InputKey::new("primary");

    #[test]
    fn a_key_not_declared_or_of_another_type_is_a_terminal_error_naming_phase_and_input() {
        let mut inputs = Inputs::new("Waiting");
        InputValue::of(PRIMARY, Some(1)).add_to(&mut inputs);
        assert_eq!(inputs.get(PRIMARY).ok(), Some(&Some(1)));
        let missing = inputs.get(CANARY).expect_err("not declared");
        assert!(missing.terminal);
        assert!(
            missing
                .to_string()
                .contains("phase Waiting declares no input \"canary\""),
            "{missing}"
        );
        let mistyped = inputs.get(OTHER).expect_err("another type");
        assert!(mistyped.terminal);
        assert!(
            mistyped
                .to_string()
                .contains("input \"primary\" of phase Waiting is not a alloc::string::String"),
            "{mistyped}"
        );
    }
}
