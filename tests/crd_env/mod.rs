//! What the end-to-end test files that start a control plane per test share: the control plane
//! with one CRD installed and a fresh namespace, holding one of the file's parallel slots (each
//! file caps how many of its control planes run at once with a semaphore of its own, sized for
//! what its tests do).
//!
//! Each test file is its own crate and uses only part of this module.
#![allow(dead_code)]

use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::{CustomResourceExt, Resource};
use kubeapp::sdk::testenv::TestEnv;
use tokio::sync::{Semaphore, SemaphorePermit};

/// A control plane with a CRD and a fresh namespace; see the [module docs](self).
pub struct CrdEnv {
    /// The control plane.
    pub env: TestEnv,
    /// The test's namespace.
    pub ns: String,
    _slot: SemaphorePermit<'static>,
}

impl CrdEnv {
    /// Waits for one of `slots`, starts a control plane, installs `K`'s CRD and creates a
    /// namespace named after `prefix`.
    pub async fn start<K: CustomResourceExt>(slots: &'static Semaphore, prefix: &str) -> Self {
        let slot = slots
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let env = TestEnv::start().await.expect("control plane");
        env.install_crd::<K>().await.expect("CRD");
        let ns = env.create_namespace(prefix).await.expect("namespace");
        Self {
            env,
            ns,
            _slot: slot,
        }
    }

    /// A client of the control plane.
    pub fn client(&self) -> kube::Client {
        self.env.client()
    }

    /// The `K` objects of the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.env.client(), &self.ns)
    }
}
