//! [`Settle`]: the end of each phase of a run. It waits until the operator is quiescent,
//! restarts it when a crash plan halted it, and reads its handler calls after each phase and
//! before each kill.

use std::time::Duration;

use crate::calls::CallHistory;
use crate::proxy::FaultProxy;
use crate::quiescence::{Quiescence, fetch};
use crate::report::HarnessError;
use crate::request::ResourceKey;
use crate::scenario::{OperatorUnderTest, RunContext, RunningOperator};

/// Waits for quiescence, restarting the operator when a crash plan halted it.
pub(crate) struct Settle<'a> {
    /// A client straight to the apiserver (for the quiescence check's lists).
    pub(crate) client: kube::Client,
    /// How long a phase may take to become quiescent.
    pub(crate) timeout: Duration,
    pub(crate) proxy: &'a FaultProxy,
    pub(crate) operator: &'a dyn OperatorUnderTest,
    /// The run's name, for errors.
    pub(crate) run: &'a str,
    /// The handler calls each process reported, read after each phase and before a kill.
    pub(crate) calls: CallHistory,
}

impl Settle<'_> {
    /// Adds the handler calls `running` (process `process`) reports now; a process that does
    /// not answer adds none (its later calls are read at the next phase).
    pub(crate) async fn read_calls(&mut self, running: &dyn RunningOperator, process: usize) {
        if let Ok(report) = fetch(running.metrics_addr()).await {
            self.calls.add(process, report.calls);
        }
    }

    /// Waits until the operator is quiescent (on all but `stale`) after step `step`, and returns
    /// it: the one it was given, or the one started after a crash plan halted that.
    pub(crate) async fn settle(
        &mut self,
        mut running: Box<dyn RunningOperator>,
        context: &mut RunContext,
        stale: &[ResourceKey],
        step: &str,
    ) -> Result<Box<dyn RunningOperator>, HarnessError> {
        loop {
            let quiescence = Quiescence::new(self.client.clone(), running.metrics_addr());
            let quiet = tokio::select! {
                biased;
                () = self.proxy.halted() => None,
                quiet = quiescence.wait_except(self.timeout, stale) => Some(quiet),
            };
            match quiet {
                Some(Ok(())) => {
                    self.read_calls(running.as_ref(), context.process).await;
                    return Ok(running);
                }
                Some(Err(source)) => {
                    running.kill().await;
                    return Err(HarnessError::NotQuiescent {
                        run: self.run.to_owned(),
                        step: step.to_owned(),
                        source,
                    });
                }
                None => {
                    // The crash: kill the halted process, let the proxy drop what it held, and
                    // start the next one, which lists afresh. (Its calls first: it still serves
                    // its report, the proxy halts only its way to the apiserver.)
                    self.read_calls(running.as_ref(), context.process).await;
                    running.kill().await;
                    self.proxy.resume();
                    context.process += 1;
                    running = self.operator.start(context).await.map_err(|source| {
                        HarnessError::Setup {
                            run: self.run.to_owned(),
                            what: "restart the operator after the crash".to_owned(),
                            source,
                        }
                    })?;
                }
            }
        }
    }
}
