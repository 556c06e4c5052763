//! The Runner's life cycle around its apps: apps added after `bind` get their webhooks served, a
//! failing app's error is logged once (not repeated through its causes), and shutdown hooks run
//! once everything stopped.

mod webhook_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_runner::webhook::WebhookConfig;
use kubeapp_runner::{Runner, RunnerConfig, RunnerError};
use kubeapp_sdk::app::{AdmissionError, App, AppError};
use tokio_util::sync::CancellationToken;
use webhook_support::{Certs, WAIT, admitted};

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Admits every `g.example.com/v1` Gadget; runs until stopped.
struct Gadgets;

#[async_trait]
impl App for Gadgets {
    fn name(&self) -> &str {
        "gadgets"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![ApiResource::from_gvk(&GroupVersionKind::gvk(
            "g.example.com",
            "v1",
            "Gadget",
        ))]
    }
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        stop.cancelled().await;
        Ok(())
    }
    async fn validate(
        &self,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_added_after_bind_has_its_webhooks_served() {
    let certs = Certs::new();
    let config = RunnerConfig::default()
        .metrics_addr(local())
        .webhook(WebhookConfig::new(&certs.cert, &certs.key).addr(local()));
    let mut runner = Runner::new(config).expect("runner");
    runner.bind().await.expect("bind");
    let addr = runner.webhook_addr().expect("webhook bound");
    runner.add_app(Arc::new(Gadgets));
    let stop = CancellationToken::new();
    let running = tokio::spawn(runner.run_until(stop.clone().cancelled_owned()));

    let response = certs.validate(addr, "late-app", 0).await;
    assert!(admitted(&response), "{response}");

    stop.cancel();
    tokio::time::timeout(WAIT, running)
        .await
        .expect("stops in time")
        .expect("joined")
        .expect("clean stop");
}

/// Fails at once with a run error.
struct Failing;

#[async_trait]
impl App for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }
    async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
        Err(AppError::Run {
            app: "failing".to_string(),
            source: "run error".into(),
        })
    }
}

/// A log sink for `tracing_subscriber::fmt`.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

// Current-thread runtime: the runner's log lines are written on this thread, where the
// subscriber is the default.
#[tokio::test]
async fn a_failing_app_is_logged_with_each_cause_once() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let runner = Runner::new(RunnerConfig::default().metrics_addr(local()))
        .expect("runner")
        .with_app(Arc::new(Failing));
    let err = tokio::time::timeout(WAIT, runner.run_until(std::future::pending()))
        .await
        .expect("returned in time")
        .expect_err("failed");
    assert!(matches!(err, RunnerError::App { .. }), "{err:?}");
    let logs = captured.text();
    let line = logs
        .lines()
        .find(|line| line.contains("stopping the other apps"))
        .unwrap_or_else(|| panic!("no log line about the failure in {logs}"));
    let chain = "error=an app failed; the runner stopped the others: app failing failed: run error";
    assert!(
        line.contains(&format!("{chain} ")) || line.ends_with(chain),
        "{line}"
    );
    assert_eq!(line.matches("run error").count(), 1, "{line}");
    assert_eq!(line.matches("app failing failed").count(), 1, "{line}");
}
#[tokio::test]
async fn shutdown_hooks_run_after_the_apps_stopped_and_before_run_returns() {
    let app_stopped = Arc::new(AtomicBool::new(false));
    let hook_saw_stopped = Arc::new(AtomicBool::new(false));

    /// Sets its flag when `run` returns.
    struct Flagging(Arc<AtomicBool>);
    #[async_trait]
    impl App for Flagging {
        fn name(&self) -> &str {
            "flagging"
        }
        fn managed_kinds(&self) -> Vec<ApiResource> {
            Vec::new()
        }
        async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
            stop.cancelled().await;
            self.0.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    let mut runner = Runner::new(RunnerConfig::default().metrics_addr(local()))
        .expect("runner")
        .with_app(Arc::new(Flagging(Arc::clone(&app_stopped))));
    runner.on_shutdown({
        let (app_stopped, hook_saw_stopped) =
            (Arc::clone(&app_stopped), Arc::clone(&hook_saw_stopped));
        move || async move {
            hook_saw_stopped.store(app_stopped.load(Ordering::SeqCst), Ordering::SeqCst);
        }
    });
    let stop = CancellationToken::new();
    stop.cancel();
    tokio::time::timeout(WAIT, runner.run_until(stop.cancelled_owned()))
        .await
        .expect("returned in time")
        .expect("clean stop");
    assert!(
        hook_saw_stopped.load(Ordering::SeqCst),
        "the hook ran, and after the app had stopped"
    );
}
