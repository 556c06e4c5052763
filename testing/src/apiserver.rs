//! [`ApiserverRestart`]: what the harness restarts the apiserver with, for
//! [`FaultPlan::RestartApiserver`](crate::FaultPlan::RestartApiserver). `testenv`'s
//! [`TestEnv`] is one: it stops kube-apiserver (etcd keeps the data) and starts it again on the
//! same address.

use std::sync::Arc;

use kubeapp_sdk::testenv::TestEnv;

/// Restarts the apiserver a harness's client reaches: down (every connection refused), then up
/// again on the same address and ready, with its storage kept.
#[async_trait::async_trait]
pub trait ApiserverRestart: Send + Sync {
    /// Stops the apiserver and starts it again; returns once it is ready.
    async fn restart(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

#[async_trait::async_trait]
impl ApiserverRestart for TestEnv {
    async fn restart(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.stop_apiserver();
        self.start_apiserver().await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl<T: ApiserverRestart + ?Sized> ApiserverRestart for Arc<T> {
    async fn restart(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        (**self).restart().await
    }
}
