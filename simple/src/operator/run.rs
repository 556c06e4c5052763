//! The `run` command of an [`Operator`]: telemetry, client, Runner, leader election or shard
//! ring, and the app built in its [`AppContext`], until a signal.

use kubeapp_ha::election::{ElectionMetrics, LeaderElector};
use kubeapp_ha::sharding::{ShardMetrics, ShardRing};
use kubeapp_operator::{CancellationToken, MetricsRegistry};
use kubeapp_runner::Runner;
use kubeapp_runner::default_client_with_metrics;
use kubeapp_sdk::error::error_chain;
use kubeapp_sdk::manifest::ManifestData;

use super::{AppContext, Operator, OperatorError, webhooks};
use crate::app::SimpleApp;
use crate::cli::OperatorArgs;
use crate::manifest_match;
use crate::telemetry;

impl<A, S> Operator<A, S>
where
    A: clap::Args + Send + Sync + 'static,
    S: clap::Subcommand + 'static,
{
    /// What `run` does with `run`'s flags `args` and the operator's own flags `own`: telemetry,
    /// client, Runner, app, until a signal.
    ///
    /// # Errors
    ///
    /// Invalid flags, telemetry that cannot start, no client, an app that does not match its
    /// manifest, or the Runner failing.
    pub async fn run(&self, args: &OperatorArgs, own: &A) -> Result<(), OperatorError> {
        let manifest = self.manifest()?.clone();
        let guard = telemetry::init(args.telemetry_config(manifest.app_name.clone()))?;
        let result = self.run_app(manifest, args, own).await;
        if let Err(error) = &result {
            tracing::error!(error = %error_chain(error), "operator failed");
        }
        let flushed = guard.shutdown().await;
        result?;
        Ok(flushed?)
    }

    async fn run_app(
        &self,
        manifest: ManifestData,
        args: &OperatorArgs,
        own: &A,
    ) -> Result<(), OperatorError> {
        // Checked before anything starts, on an app built with a registry nothing serves.
        let mismatches = manifest_match::mismatches(
            &(self.app)(AppContext {
                manifest: manifest.clone(),
                metrics: MetricsRegistry::new(None)?,
                args: own,
                operator: args,
            })
            .map_err(|e| OperatorError::AppBuilder(error_chain(e.as_ref())))?
            .kinds,
            &manifest,
        );
        if !mismatches.is_empty() {
            return Err(OperatorError::KindMismatch {
                file: self.manifest_file.clone(),
                mismatches,
            });
        }
        webhooks::require_server(&manifest, args)?;
        let election = args.election_config(&manifest.app_name)?;
        let manifest_name = manifest.app_name.clone();
        let runner_config = args.runner_config()?;
        let mut runner = Runner::new(runner_config)?;
        let client = default_client_with_metrics(runner.metrics()).await?;
        if args.metrics_auth {
            runner = runner.authenticate_metrics(client.clone());
        }
        let mut config = (self.app)(AppContext {
            manifest,
            metrics: runner.metrics().clone(),
            args: own,
            operator: args,
        })
        .map_err(|e| OperatorError::AppBuilder(error_chain(e.as_ref())))?
        .namespace(args.namespace.clone())
        .informers(runner.informers().clone())
        .metrics(runner.metrics().clone());
        // In-flight handler calls may run on for 90% of --shutdown-timeout, so the app has
        // returned cleanly before the Runner gives up on it.
        let grace = args
            .shutdown_timeout
            .saturating_sub(args.shutdown_timeout / 10);
        config.controller = config.controller.clone().shutdown_grace(grace);
        if let Some(instance) = &args.instance {
            config.controller = config.controller.clone().instance(instance.clone());
        }
        if let Some(threshold) = args.ready_requires_writes {
            config = config.ready_requires_writes(threshold);
        }
        // The elector outlives the app: it releases the Lease only after the handlers stopped.
        let elector_stop = CancellationToken::new();
        let elector = match election {
            Some(election) => {
                let metrics = runner
                    .metrics()
                    .set::<ElectionMetrics>()
                    .map_err(|e| OperatorError::Election(error_chain(&e)))?;
                let elector = LeaderElector::new(client.clone(), election)
                    .map_err(|e| OperatorError::Election(error_chain(&e)))?
                    .report_to(&metrics);
                config = config.leadership(elector.leadership());
                if args.leader_ready {
                    config = config.ready_only_when_leading();
                }
                Some(tokio::spawn(elector.run(elector_stop.clone())))
            }
            None => None,
        };
        // The ring outlives the app too: it deletes its Lease (handing the share over) only
        // after the handlers stopped.
        let ring = match args.sharding_config(&manifest_name)? {
            Some(sharding) => {
                let metrics = runner.metrics().set::<ShardMetrics>().map_err(|e| {
                    OperatorError::Sharding(format!("sharding metrics: {}", error_chain(&e)))
                })?;
                let ring = ShardRing::new(client.clone(), sharding)
                    .map_err(|e| OperatorError::Sharding(error_chain(&e)))?
                    .report_to(&metrics);
                config = config.sharding(ring.membership());
                Some(tokio::spawn(ring.run(elector_stop.clone())))
            }
            None => None,
        };
        let runner = runner.app(SimpleApp::new(config, client)?);
        tracing::info!(
            metrics_addr = %args.metrics_addr,
            namespace = args.namespace.as_deref().unwrap_or("(all)"),
            leader_elect = args.leader_elect,
            shard = args.shard,
            "operator starting"
        );
        let ran = runner.run().await;
        elector_stop.cancel();
        if let Some(elector) = elector {
            let _ = elector.await;
        }
        if let Some(ring) = ring {
            let _ = ring.await;
        }
        ran?;
        tracing::info!("operator stopped");
        Ok(())
    }
}
