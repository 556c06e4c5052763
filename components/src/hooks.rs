//! [`Hooks`]: code of the operator's own that runs after each phase of a reconcile, told whether
//! the phase completed (oper8's `after_deploy` / `after_deploy_unsuccessful` / `after_verify` /
//! `after_verify_unsuccessful`).
//!
//! A [`ComponentsReconciler`](crate::ComponentsReconciler) calls, after every run, one deploy
//! hook ([`Hooks::after_deploy`] when every enabled component deployed, else
//! [`Hooks::after_deploy_unsuccessful`]), then one verify hook ([`Hooks::after_verify`] when
//! every enabled component is ready, else [`Hooks::after_verify_unsuccessful`]). A hook's
//! [`ComponentError::Waiting`] makes the reconcile requeue, a [`ComponentError::Failed`] makes
//! it fail (retried by the controller's policy); a failed deploy hook skips the verify hook. The
//! dry run calls no hooks (they may talk to the cluster).

use std::future::Future;

use crate::component::{ComponentError, Session};
use crate::report::RunReport;

/// What runs after each phase; see the [module docs](self). Every method defaults to doing
/// nothing.
pub trait Hooks<K>: Send + Sync + 'static {
    /// Every enabled component deployed.
    fn after_deploy(
        &self,
        session: &Session<K>,
        report: &RunReport,
    ) -> impl Future<Output = Result<(), ComponentError>> + Send {
        let _ = (session, report);
        async { Ok(()) }
    }

    /// Some enabled component did not deploy (failed, waiting or halted).
    fn after_deploy_unsuccessful(
        &self,
        session: &Session<K>,
        report: &RunReport,
    ) -> impl Future<Output = Result<(), ComponentError>> + Send {
        let _ = (session, report);
        async { Ok(()) }
    }

    /// Every enabled component is ready.
    fn after_verify(
        &self,
        session: &Session<K>,
        report: &RunReport,
    ) -> impl Future<Output = Result<(), ComponentError>> + Send {
        let _ = (session, report);
        async { Ok(()) }
    }

    /// Some enabled component is not ready (or did not deploy).
    fn after_verify_unsuccessful(
        &self,
        session: &Session<K>,
        report: &RunReport,
    ) -> impl Future<Output = Result<(), ComponentError>> + Send {
        let _ = (session, report);
        async { Ok(()) }
    }
}

/// No hooks: the default of a [`ComponentsReconciler`](crate::ComponentsReconciler).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl<K: 'static> Hooks<K> for NoHooks {}

/// Runs the deploy hook, then (unless it failed) the verify hook, for `report`.
pub(crate) async fn after_run<K, H: Hooks<K>>(
    hooks: &H,
    session: &Session<K>,
    report: &RunReport,
) -> Result<(), ComponentError> {
    if report.all_deployed() {
        hooks.after_deploy(session, report).await?;
    } else {
        hooks.after_deploy_unsuccessful(session, report).await?;
    }
    if report.all_ready() {
        hooks.after_verify(session, report).await
    } else {
        hooks.after_verify_unsuccessful(session, report).await
    }
}
