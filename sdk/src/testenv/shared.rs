//! One control plane for every test of a test binary.
//!
//! Starting a [cluster mode](super::TestEnvBuilder::cluster) environment takes seconds; tests
//! that can share one (each in its own namespace) declare it once:
//!
//! ```no_run
//! use kubeapp_sdk::testenv::{SharedTestEnv, TestEnv};
//!
//! static CLUSTER: SharedTestEnv = SharedTestEnv::new(|| TestEnv::builder().cluster());
//!
//! #[test]
//! fn a_test() {
//!     CLUSTER.run(|env| async move {
//!         let ns = env.create_namespace("a-test").await.expect("namespace");
//!         // ...
//!     });
//! }
//! ```
//!
//! The environment starts on the first [`run`](SharedTestEnv::run) and lives on a runtime of its
//! own (a `kube::Client` only works while the runtime it was made on runs, so every test runs its
//! body on that runtime rather than under `#[tokio::test]`). When the test binary exits, its
//! processes are killed and its directory removed (an `atexit` handler), and if the binary dies
//! some other way the parent-death signal still kills them.

use std::future::Future;
use std::sync::{Arc, Mutex, Once, OnceLock};

use super::{TestEnv, TestEnvBuilder};

/// A [`TestEnv`] started once per test binary and shared by its tests; see the
/// [module docs](self).
pub struct SharedTestEnv {
    make: fn() -> TestEnvBuilder,
    inner: OnceLock<Inner>,
}

struct Inner {
    runtime: tokio::runtime::Runtime,
    env: Mutex<Option<Arc<TestEnv>>>,
}

impl SharedTestEnv {
    /// A shared environment built by `make` when first used.
    pub const fn new(make: fn() -> TestEnvBuilder) -> Self {
        Self {
            make,
            inner: OnceLock::new(),
        }
    }

    /// Runs `test` with the shared environment on its runtime, starting both on first use.
    ///
    /// # Panics
    ///
    /// When the runtime or the environment cannot be started (with the reason), or when `test`
    /// panics.
    pub fn run<F, Fut>(&'static self, test: F) -> Fut::Output
    where
        F: FnOnce(Arc<TestEnv>) -> Fut,
        Fut: Future,
    {
        let inner = self.inner.get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .thread_name("kubeapp-shared-testenv")
                .build()
                .unwrap_or_else(|e| panic!("starting the shared test environment's runtime: {e}"));
            let env = runtime
                .block_on((self.make)().start())
                .unwrap_or_else(|e| panic!("starting the shared test environment: {e}"));
            register_for_exit(self);
            Inner {
                runtime,
                env: Mutex::new(Some(Arc::new(env))),
            }
        });
        let env = inner
            .env
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| panic!("the shared test environment was stopped (process exit)"));
        inner.runtime.block_on(test(env))
    }

    /// Stops the environment (kills its processes, removes its directory).
    fn stop(&self) {
        if let Some(inner) = self.inner.get() {
            let env = inner
                .env
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            drop(env);
        }
    }
}

impl std::fmt::Debug for SharedTestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTestEnv")
            .field("started", &self.inner.get().is_some())
            .finish_non_exhaustive()
    }
}

fn started() -> &'static Mutex<Vec<&'static SharedTestEnv>> {
    static STARTED: OnceLock<Mutex<Vec<&'static SharedTestEnv>>> = OnceLock::new();
    STARTED.get_or_init(|| Mutex::new(Vec::new()))
}

fn register_for_exit(env: &'static SharedTestEnv) {
    started()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(env);
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `stop_all` is a plain `extern "C" fn()` with no arguments, as atexit requires;
        // registering it has no other effect.
        #[allow(unsafe_code)]
        let failed = unsafe { libc::atexit(stop_all) } != 0;
        if failed {
            tracing::warn!(
                "cannot register the shared test environment's exit handler; its directory will \
                 be left behind (its processes still end with the test binary)"
            );
        }
    });
}

extern "C" fn stop_all() {
    // Never unwind out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        let envs: Vec<_> = started()
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default();
        for env in envs {
            env.stop();
        }
    });
}
