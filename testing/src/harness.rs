//! [`FaultHarness`]: runs a scenario once without faults, then once per fault plan, each run in
//! a namespace of its own behind a fault proxy of its own, and compares each run's end state
//! with the fault-free one's (the differential oracle).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::apiserver::ApiserverRestart;
use crate::calls::{CallHistory, KEEP_CALLS, present_uids};
use crate::plan::{FaultPlan, enumerate, enumerate_in_process, shuffled};
use crate::proxy::FaultProxy;
use crate::report::{CALLS_SHOWN, HarnessError, PlanFailure, Report, around};
use crate::request::ResourceKey;
use crate::scenario::{BoxError, OperatorUnderTest, RunContext, Scenario, Workload};
use crate::settle::Settle;
use crate::snapshot::Snapshot;

/// How much a harness may spend on fault plans (the fault-free run is not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// At most this many plans.
    pub plans: usize,
    /// No plan is started after this long.
    pub time: Duration,
}

impl Default for Budget {
    /// 12 plans or 150 seconds: a couple of minutes of a project's `cargo test`.
    fn default() -> Self {
        Self {
            plans: 12,
            time: Duration::from_secs(150),
        }
    }
}

/// What one run ended with.
struct RunEnd {
    snapshot: Snapshot,
    writes: Vec<String>,
    watched: Vec<ResourceKey>,
    logs: String,
    /// The run's handler calls.
    calls: CallHistory,
    /// What the checks on the calls found.
    violations: Vec<String>,
}

/// Runs scenarios under fault plans; see the [module docs](self).
pub struct FaultHarness {
    client: kube::Client,
    dir: PathBuf,
    budget: Budget,
    seed: u64,
    timeout: Duration,
    /// Runs started so far (each one's namespace carries its number).
    runs: AtomicUsize,
    /// How to restart the apiserver, if plans may.
    restarts: Option<Arc<dyn ApiserverRestart>>,
}

impl FaultHarness {
    /// A harness on the apiserver `client` reaches (directly: each run puts a fault proxy in
    /// front of it), keeping kubeconfigs and logs under `dir`. The seed is
    /// `KUBEAPP_FAULT_SEED` if set, else taken from the clock (the report names it).
    ///
    /// From here on, kubeapp controllers made in this process keep their handler calls for
    /// `/debug/kubeapp` (`kubeapp_sdk::diagnostics::record_handler_calls`), so that the checks
    /// on calls can judge an operator run in the test process; [`OperatorProcess`] asks its
    /// child processes for them.
    ///
    /// [`OperatorProcess`]: crate::OperatorProcess
    pub fn new(client: kube::Client, dir: impl Into<PathBuf>) -> Self {
        let seed = std::env::var("KUBEAPP_FAULT_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_nanos() as u64)
            });
        // Operators the test process makes from now on report their handler calls.
        kubeapp_sdk::diagnostics::record_handler_calls(KEEP_CALLS);
        Self {
            client,
            dir: dir.into(),
            budget: Budget::default(),
            seed,
            timeout: Duration::from_secs(60),
            runs: AtomicUsize::new(0),
            restarts: None,
        }
    }

    /// Lets plans restart the apiserver ([`FaultPlan::RestartApiserver`], one per step) with
    /// `apiserver`, e.g. an `Arc<TestEnv>`. Off by default: a restart takes seconds, and the
    /// apiserver is shared with everything else the test runs.
    pub fn restarts(mut self, apiserver: impl ApiserverRestart + 'static) -> Self {
        self.restarts = Some(Arc::new(apiserver));
        self
    }

    /// Spends at most `budget` on plans.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Orders the plans with `seed` (overrides `KUBEAPP_FAULT_SEED`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How long a run may wait for the operator to become quiescent after a step (60 s).
    pub fn quiescence_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `scenario` without faults, then under the plans it suggests, in the seed's order,
    /// within the budget.
    pub async fn run(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
    ) -> Result<Report, HarnessError> {
        let started = Instant::now();
        let reference = self.reference(scenario, operator).await?;
        let writes = reference.writes.len() as u64;
        let plans = if self.restarts.is_some() {
            enumerate(writes, scenario.steps(), &reference.watched)
        } else {
            enumerate_in_process(writes, scenario.steps(), &reference.watched)
        };
        let plans = shuffled(plans, self.seed);
        Ok(self
            .judge_all(
                scenario,
                operator,
                &reference,
                plans,
                Some((started, self.budget)),
            )
            .await)
    }

    /// Runs `scenario` without faults, then under `plan` alone: to reproduce a failure.
    pub async fn replay(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
        plan: FaultPlan,
    ) -> Result<Report, HarnessError> {
        self.run_plans(scenario, operator, vec![plan]).await
    }

    /// Runs `scenario` without faults, then under each of `plans`, in order (no budget).
    pub async fn run_plans(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
        plans: Vec<FaultPlan>,
    ) -> Result<Report, HarnessError> {
        let reference = self.reference(scenario, operator).await?;
        Ok(self
            .judge_all(scenario, operator, &reference, plans, None)
            .await)
    }

    /// The fault-free run, which must pass the checks on calls.
    async fn reference(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
    ) -> Result<RunEnd, HarnessError> {
        let reference = self.run_once(scenario, operator, None).await?;
        if reference.violations.is_empty() {
            Ok(reference)
        } else {
            Err(HarnessError::CallChecks {
                run: "the fault-free run".to_owned(),
                violations: reference.violations,
            })
        }
    }

    /// Runs each of `plans` in order, within `budget` (from when it started) if there is one,
    /// and judges each against `reference`.
    async fn judge_all(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
        reference: &RunEnd,
        plans: Vec<FaultPlan>,
        budget: Option<(Instant, Budget)>,
    ) -> Report {
        let mut report = Report {
            scenario: scenario.name.clone(),
            seed: self.seed,
            available: plans.len(),
            run: 0,
            passed: 0,
            failures: Vec::new(),
            plans: Vec::new(),
            calls_unrecorded: usize::from(!reference.calls.recorded()),
        };
        for plan in plans {
            if let Some((started, budget)) = budget
                && (report.run >= budget.plans || started.elapsed() >= budget.time)
            {
                break;
            }
            report.run += 1;
            report.plans.push(plan.clone());
            self.judge(scenario, operator, reference, plan, &mut report)
                .await;
        }
        report
    }

    async fn judge(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
        reference: &RunEnd,
        plan: FaultPlan,
        report: &mut Report,
    ) {
        match self.run_once(scenario, operator, Some(&plan)).await {
            Ok(end) => {
                report.calls_unrecorded += usize::from(!end.calls.recorded());
                let mut differences = end.snapshot.diff(&reference.snapshot);
                differences.extend(end.violations);
                if differences.is_empty() {
                    report.passed += 1;
                } else {
                    let writes = around(&plan, end.writes);
                    report.failures.push(PlanFailure {
                        plan,
                        differences,
                        error: None,
                        writes,
                        calls: end.calls.last(CALLS_SHOWN),
                        logs: end.logs,
                    });
                }
            }
            Err(error) => report.failures.push(PlanFailure {
                plan,
                differences: Vec::new(),
                error: Some(kubeapp_sdk::error::error_chain(&error)),
                writes: Vec::new(),
                calls: Vec::new(),
                logs: String::new(),
            }),
        }
    }

    /// One run: a namespace, a proxy, the operator, the steps with `plan`'s fault, the end
    /// state.
    async fn run_once(
        &self,
        scenario: &Scenario,
        operator: &dyn OperatorUnderTest,
        plan: Option<&FaultPlan>,
    ) -> Result<RunEnd, HarnessError> {
        let run = plan.map_or_else(
            || "the fault-free run".to_owned(),
            |plan| format!("plan {plan}"),
        );
        let setup = |what: &str| {
            let run = run.clone();
            let what = what.to_owned();
            move |source: BoxError| HarnessError::Setup { run, what, source }
        };
        // Numbered over the harness's life: a replay after a run gets namespaces of its own.
        let index = self.runs.fetch_add(1, Ordering::Relaxed);
        let namespace = format!(
            "{}-{}-{index}",
            namespace_prefix(&scenario.name),
            self.seed % 100_000
        );
        let mut object = Namespace::default();
        object.metadata.name = Some(namespace.clone());
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &object)
            .await
            .map_err(|error| setup("create the run's namespace")(error.into()))?;
        let dir = self.dir.join(&namespace);
        std::fs::create_dir_all(&dir)
            .map_err(|error| setup("create the run's directory")(error.into()))?;
        let proxy = FaultProxy::start(self.client.clone())
            .await
            .map_err(|error| setup("start the fault proxy")(error.into()))?;
        let kubeconfig = dir.join("kubeconfig");
        proxy
            .write_kubeconfig(&kubeconfig)
            .map_err(|error| setup("write the kubeconfig")(error.into()))?;
        let mut context = RunContext {
            kubeconfig,
            client: proxy
                .client()
                .map_err(|error| setup("make the proxied client")(error.into()))?,
            namespace: namespace.clone(),
            process: 1,
            dir,
        };
        let workload = Workload {
            client: self.client.clone(),
            namespace: namespace.clone(),
        };
        for (name, step) in &scenario.setup {
            step(workload.clone())
                .await
                .map_err(|source| HarnessError::Step {
                    run: run.clone(),
                    step: name.clone(),
                    source,
                })?;
        }
        match plan {
            Some(FaultPlan::CrashAfterWrite(write)) => proxy.halt_after_write(*write),
            Some(FaultPlan::FailWrite { write, fault }) => proxy.fail_write_at(*write, *fault),
            _ => {}
        }
        let mut running = operator
            .start(&context)
            .await
            .map_err(setup("start the operator"))?;
        let mut settle = Settle {
            client: self.client.clone(),
            timeout: self.timeout,
            proxy: &proxy,
            operator,
            run: &run,
            calls: CallHistory::default(),
        };
        running = settle.settle(running, &mut context, &[], "(start)").await?;
        // A watch fault's window: from before its step through the next one (or the last).
        let window = match plan {
            Some(FaultPlan::Withhold { resource, step } | FaultPlan::Lag { resource, step }) => {
                let end = (*step + 1).min(scenario.steps.len().saturating_sub(1));
                Some((resource, *step, end))
            }
            _ => None,
        };
        let mut stale = Vec::new();
        for (index, (name, step)) in scenario.steps.iter().enumerate() {
            if let Some((resource, start, _)) = window
                && start == index
            {
                match plan {
                    Some(FaultPlan::Withhold { .. }) => proxy.withhold(resource.clone()),
                    _ => proxy.lag(resource.clone()),
                }
                stale.push(resource.clone());
            }
            if let Err(source) = step(workload.clone()).await {
                running.kill().await;
                return Err(HarnessError::Step {
                    run: run.clone(),
                    step: name.clone(),
                    source,
                });
            }
            if let Some(FaultPlan::RestartApiserver { step }) = plan
                && *step == index
            {
                let restarts = self.restarts.as_ref().ok_or_else(|| {
                    setup("restart the apiserver")(
                        "the plan restarts the apiserver, and the harness has no \
                         FaultHarness::restarts"
                            .into(),
                    )
                })?;
                if let Err(source) = restarts.restart().await {
                    running.kill().await;
                    return Err(setup("restart the apiserver")(source));
                }
            }
            running = settle.settle(running, &mut context, &stale, name).await?;
            if let Some((resource, _, end)) = window
                && end == index
            {
                match plan {
                    Some(FaultPlan::Withhold { .. }) => proxy.release(resource.clone()),
                    _ => proxy.catch_up(resource.clone()),
                }
                stale.clear();
                running = settle.settle(running, &mut context, &[], name).await?;
            }
        }
        let snapshot = Snapshot::take(
            &self.client,
            &namespace,
            &scenario.observed,
            scenario.normalize.as_deref(),
        )
        .await
        .map_err(|error| setup("list the end state")(error.into()))?;
        settle.read_calls(running.as_ref(), context.process).await;
        let present = present_uids(&self.client, &namespace, &scenario.observed)
            .await
            .map_err(|error| setup("list the end state's uids")(error.into()))?;
        let calls = settle.calls;
        let mut violations = calls.went_back();
        violations.extend(calls.deletions_unseen(&present));
        let logs = running.logs();
        running.kill().await;
        Ok(RunEnd {
            snapshot,
            writes: proxy.writes().iter().map(ToString::to_string).collect(),
            watched: proxy.watched_resources(),
            logs,
            calls,
            violations,
        })
    }
}

/// A namespace-safe prefix of a scenario's name: lower case letters, digits and `-`, at most 40
/// characters.
fn namespace_prefix(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let trimmed = cleaned.trim_matches('-');
    if trimmed.is_empty() {
        "scenario".to_owned()
    } else {
        trimmed.to_owned()
    }
}
