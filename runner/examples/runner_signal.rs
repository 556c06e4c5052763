//! A Runner with one slow-stopping app, stopped by SIGTERM or SIGINT: what `operator/tests/runner.rs`
//! drives as a child process to prove the signal handling, and a small demo of a `main` built on
//! the Runner.
//!
//! ```sh
//! cargo run -p kubeapp-runner --example runner_signal -- [stop-ms] [shutdown-timeout-ms]
//! # then press Ctrl-C once (graceful) or twice (at once)
//! cargo run -p kubeapp-runner --example runner_signal -- client   # infer a Kubernetes client
//! ```
//!
//! Prints `listening on <addr>`, `app started`, then on the first signal `app stopping`, and after
//! `stop-ms` (default 300) of in-flight work `app finished in-flight work`. Exit code 0 after a
//! graceful stop, 1 on any runner error (a second signal, the timeout), 2 on bad arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::ApiResource;
use kubeapp_runner::{Runner, RunnerConfig, default_client};
use kubeapp_sdk::app::{App, AppError};
use tokio_util::sync::CancellationToken;

/// An app whose in-flight work takes `stop` to finish once it is asked to stop.
struct SlowStop {
    stop: Duration,
}

#[async_trait]
impl App for SlowStop {
    fn name(&self) -> &str {
        "slow-stop"
    }

    fn managed_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
        println!("app started");
        stop.cancelled().await;
        println!("app stopping");
        tokio::time::sleep(self.stop).await; // the in-flight work
        println!("app finished in-flight work");
        Ok(())
    }
}

fn millis(arg: Option<String>, default: u64) -> Result<Duration, String> {
    match arg {
        None => Ok(Duration::from_millis(default)),
        Some(text) => text
            .parse()
            .map(Duration::from_millis)
            .map_err(|error| format!("{text:?} is not a number of milliseconds: {error}")),
    }
}

fn report(error: &dyn std::error::Error) {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    eprintln!("error: {text}");
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("client") {
        return match default_client().await {
            Ok(client) => {
                println!("client for namespace {}", client.default_namespace());
                ExitCode::SUCCESS
            }
            Err(error) => {
                report(&error);
                ExitCode::FAILURE
            }
        };
    }
    let (stop, timeout) = match (millis(first, 300), millis(args.next(), 10_000)) {
        (Ok(stop), Ok(timeout)) => (stop, timeout),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("usage: runner_signal [stop-ms] [shutdown-timeout-ms] | client: {error}");
            return ExitCode::from(2);
        }
    };

    let config = RunnerConfig::default()
        .metrics_addr(([127, 0, 0, 1], 0).into())
        .shutdown_timeout(timeout);
    let runner = match Runner::new(config) {
        Ok(runner) => runner,
        Err(error) => {
            report(&error);
            return ExitCode::FAILURE;
        }
    };
    let mut runner = runner.with_app(Arc::new(SlowStop { stop }));
    match runner.bind().await {
        Ok(addr) => println!("listening on {addr}"),
        Err(error) => {
            report(&error);
            return ExitCode::FAILURE;
        }
    }
    match runner.run().await {
        Ok(()) => {
            println!("runner stopped cleanly");
            ExitCode::SUCCESS
        }
        Err(error) => {
            report(&error);
            ExitCode::FAILURE
        }
    }
}
