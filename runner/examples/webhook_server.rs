//! A Runner serving one app's validating webhook over HTTPS, with the webhook server's limits
//! set from the command line: what `operator/tests/webhook_process.rs` runs as a child process
//! (under `prlimit`, and stopped by SIGTERM) to prove the server's behaviour for a whole process.
//!
//! ```sh
//! cargo run -p kubeapp-runner --example webhook_server -- tls.crt tls.key \
//!     handshake_ms=10000 header_ms=10000 max_connections=512 drain_ms=10000 delay_ms=0
//! ```
//!
//! Prints `webhook on <addr>` and `metrics on <addr>`, then `hook started <name>` whenever the
//! validator is called. The validator admits every `Gadget` (`g.example.com/v1`) after sleeping
//! `spec.sleepMs` milliseconds (default 0). Exit code 0 after a graceful stop, 1 on a runner
//! error, 2 on bad arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_runner::webhook::WebhookConfig;
use kubeapp_runner::{Runner, RunnerConfig};
use kubeapp_sdk::app::{AdmissionError, App, AppError};
use tokio_util::sync::CancellationToken;

/// Admits every Gadget, after `spec.sleepMs`.
struct SlowHooks;

#[async_trait]
impl App for SlowHooks {
    fn name(&self) -> &str {
        "slow-hooks"
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
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        let object = request.object.as_ref();
        let name = object
            .and_then(|object| object.metadata.name.clone())
            .unwrap_or_default();
        let sleep = object
            .and_then(|object| object.data["spec"]["sleepMs"].as_u64())
            .unwrap_or(0);
        println!("hook started {name}");
        tokio::time::sleep(Duration::from_millis(sleep)).await;
        Ok(())
    }
}

/// The webhook and runner settings from `key=value` arguments.
fn configure(
    mut webhook: WebhookConfig,
    mut runner: RunnerConfig,
    settings: impl Iterator<Item = String>,
) -> Result<RunnerConfig, String> {
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("{setting:?} is not key=value"))?;
        let number: u64 = value
            .parse()
            .map_err(|error| format!("{setting:?}: {error}"))?;
        let millis = Duration::from_millis(number);
        match key {
            "handshake_ms" => webhook = webhook.tls_handshake_timeout(millis),
            "header_ms" => webhook = webhook.header_read_timeout(millis),
            "max_connections" => {
                webhook = webhook.max_connections(usize::try_from(number).unwrap_or(usize::MAX))
            }
            "drain_ms" => webhook = webhook.drain_timeout(millis),
            "delay_ms" => runner = runner.shutdown_delay(millis),
            _ => return Err(format!("unknown setting {key:?}")),
        }
    }
    Ok(runner.webhook(webhook))
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
    let (Some(cert), Some(key)) = (args.next(), args.next()) else {
        eprintln!("usage: webhook_server <cert> <key> [key=value...]");
        return ExitCode::from(2);
    };
    let webhook = WebhookConfig::new(cert, key).addr(([127, 0, 0, 1], 0).into());
    let runner = RunnerConfig::default().metrics_addr(([127, 0, 0, 1], 0).into());
    let config = match configure(webhook, runner, args) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("usage: webhook_server <cert> <key> [key=value...]: {error}");
            return ExitCode::from(2);
        }
    };
    let mut runner = match Runner::new(config) {
        Ok(runner) => runner.with_app(Arc::new(SlowHooks)),
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runner.bind().await {
        Ok(addr) => println!("metrics on {addr}"),
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(addr) = runner.webhook_addr() {
        println!("webhook on {addr}");
    }
    match runner.run().await {
        Ok(()) => {
            println!("runner stopped cleanly");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
