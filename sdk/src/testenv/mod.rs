//! A real Kubernetes control plane for tests: kube-apiserver + etcd on loopback.
//!
//! [`TestEnv::start`] runs etcd and kube-apiserver as child processes on free loopback ports, with
//! keys and certificates generated in Rust, waits until the apiserver is ready, and hands back an
//! admin [`kube::Client`] plus a kubeconfig (as a value and as a file, for child processes such as
//! an operator binary under test). It is the Rust counterpart of controller-runtime's envtest, and
//! it is how kubeapp tests itself; operators built on kubeapp can use it the same way.
//!
//! ```
//! # async fn demo() -> Result<(), kubeapp_sdk::testenv::TestEnvError> {
//! use kubeapp_sdk::testenv::TestEnv;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! let env = TestEnv::start().await?;
//! let ns = env.create_namespace("demo").await?;
//! let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("hello".into());
//! configmaps.create(&PostParams::default(), &cm).await.expect("create");
//! assert!(env.kubeconfig_path().exists());
//! # Ok(())
//! # }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # What you get, and what you don't
//!
//! - CRDs, custom resources, core kinds, watches, finalizers and `deletionTimestamp`, server-side
//!   apply, the status subresource, RBAC (see [`TestEnv::identity`]), admission and conversion
//!   webhooks called on loopback.
//! - By default no kube-controller-manager runs: no garbage collection through owner references,
//!   and deleted namespaces stay `Terminating`. Use a fresh namespace per test
//!   ([`TestEnv::create_namespace`]).
//! - [`TestEnvBuilder::cluster`] adds kube-controller-manager, kube-scheduler and kwok's fake nodes
//!   (the [`cluster`] module): garbage collection, namespace deletion, Deployments that roll out,
//!   pods that become Ready (no container runs). It starts in seconds more; [`SharedTestEnv`]
//!   shares one between the tests of a test binary.
//!
//! # Binaries
//!
//! kube-apiserver and etcd (and in cluster mode kube-controller-manager, kube-scheduler and kwok)
//! are looked up as [`binaries`] describes; `testbin/build.sh` in the kubeapp repository, or
//! `kubeapp testenv install`, builds them from source into a cache. A missing binary is a
//! [`TestEnvError::BinaryNotFound`] naming the binary, the directories searched, the environment
//! variable and the script.
//!
//! # Processes never outlive the test binary
//!
//! Dropping a [`TestEnv`] kills its processes and removes its directory. If the test binary exits
//! without dropping it (`std::process::exit`, an abort, a `static` environment, SIGKILL), the kernel
//! kills the processes anyway: each is forked with a parent-death signal (`PR_SET_PDEATHSIG`) from
//! a thread that lives as long as the test binary.
//!
//! # etcd without fsync, unless asked
//!
//! etcd runs with `--unsafe-no-fsync` (writes are not flushed to disk): tests are faster, and
//! every write cheaper than on a real cluster. [`TestEnvBuilder::etcd_fsync`] turns fsync on, for
//! benchmarks that stand for a real cluster. [`TestEnv::etcd_url`] is etcd's plain-HTTP client
//! URL, for tests that need etcd itself.
//!
//! # Faults
//!
//! [`TestEnv::stop_apiserver`] kills kube-apiserver (SIGKILL, as a crash would) while etcd keeps
//! the data; [`TestEnv::start_apiserver`] brings it back on the same address with the same
//! credentials, so clients made before the stop work again afterwards.

pub mod binaries;
mod certs;
pub mod cluster;
mod error;
mod kubeconfig;
mod process;
mod resources;
pub mod shared;
mod startup;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::config::Kubeconfig;

pub use self::certs::{CertificateAuthority, IssuedCert};
pub use self::cluster::ClusterOptions;
pub use self::error::TestEnvError;
use self::process::ManagedProcess;
pub use self::shared::SharedTestEnv;
use self::startup::{ApiServer, Files, start_etcd};

/// Options for starting a [`TestEnv`]; [`TestEnv::start`] uses the defaults.
#[derive(Clone, Debug)]
pub struct TestEnvBuilder {
    binary_dir: Option<PathBuf>,
    only_binary_dir: bool,
    start_timeout: Duration,
    apiserver_args: Vec<String>,
    etcd_fsync: bool,
    cluster: Option<ClusterOptions>,
    crds_yaml: Vec<String>,
}

impl Default for TestEnvBuilder {
    fn default() -> Self {
        Self {
            binary_dir: None,
            only_binary_dir: false,
            start_timeout: Duration::from_secs(60),
            apiserver_args: Vec::new(),
            etcd_fsync: false,
            cluster: None,
            crds_yaml: Vec::new(),
        }
    }
}

impl TestEnvBuilder {
    /// Looks for `kube-apiserver` and `etcd` in `dir` before the default places.
    #[must_use]
    pub fn binary_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.binary_dir = Some(dir.into());
        self
    }

    /// Searches only the directory given to [`binary_dir`](Self::binary_dir), not
    /// `$KUBEBUILDER_ASSETS` or the cache: for pinning exact binaries.
    #[must_use]
    pub fn only_binary_dir(mut self) -> Self {
        self.only_binary_dir = true;
        self
    }

    /// How long each process may take to become ready (default 60 s; a 2-core machine running
    /// several test binaries at once needs the slack).
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Adds a kube-apiserver flag, e.g. `--feature-gates=...`. Later flags override earlier ones.
    #[must_use]
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Runs etcd with fsync on, as on a real cluster. By default a test control plane runs etcd
    /// with `--unsafe-no-fsync` (writes are not flushed to disk), which makes tests fast but
    /// every write cheaper than a real cluster's; benchmarks that stand for a real cluster turn
    /// fsync on.
    #[must_use]
    pub fn etcd_fsync(mut self) -> Self {
        self.etcd_fsync = true;
        self
    }

    /// Cluster mode: kube-controller-manager, kube-scheduler and kwok with one fake node run
    /// beside the apiserver, so owner references are garbage-collected, namespaces finish
    /// deleting and Deployments roll out. See the [cluster module](crate::testenv::cluster) for
    /// what it runs and what it does not.
    #[must_use]
    pub fn cluster(self) -> Self {
        self.cluster_with(ClusterOptions::default())
    }

    /// Cluster mode with `options` (the number of fake nodes, how pods behave).
    #[must_use]
    pub fn cluster_with(mut self, options: ClusterOptions) -> Self {
        self.cluster = Some(options);
        self
    }

    /// Installs the CRDs in `yaml` (as [`TestEnv::install_crds_yaml`]) as soon as the apiserver
    /// is ready, before the [cluster mode](Self::cluster)'s controllers start. The garbage
    /// collector reads the API's kinds (discovery) when it starts and then only every 30 s: a
    /// kind installed here is known to it from the start, one installed later may wait up to
    /// that long for its children to be collected.
    #[must_use]
    pub fn crds_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.crds_yaml.push(yaml.into());
        self
    }

    /// Starts etcd and kube-apiserver and waits until the apiserver is ready; in
    /// [cluster mode](Self::cluster) then the controller-manager, the scheduler and kwok, and
    /// waits until they are healthy and every fake node is Ready.
    pub async fn start(self) -> Result<TestEnv, TestEnvError> {
        let started = Instant::now();
        let dirs = match (&self.binary_dir, self.only_binary_dir) {
            (Some(dir), true) => vec![dir.clone()],
            (dir, _) => binaries::search_dirs(dir.as_deref()),
        };
        let etcd_bin = binaries::find("etcd", &dirs)?;
        let apiserver_bin = binaries::find("kube-apiserver", &dirs)?;
        let cluster_bins = match &self.cluster {
            Some(_) => Some(cluster::ClusterBinaries {
                controller_manager: binaries::find("kube-controller-manager", &dirs)?,
                scheduler: binaries::find("kube-scheduler", &dirs)?,
                kwok: binaries::find("kwok", &dirs)?,
            }),
            None => None,
        };

        let dir = tempfile::Builder::new()
            .prefix("kubeapp-testenv-")
            .tempdir()
            .map_err(|source| TestEnvError::Io {
                action: "creating a directory in",
                path: std::env::temp_dir(),
                source,
            })?;
        let files = Files::write(dir.path())?;

        let etcd = start_etcd(&etcd_bin, dir.path(), self.start_timeout, self.etcd_fsync).await?;
        let mut apiserver = ApiServer {
            binary: apiserver_bin,
            args: Vec::new(),
            port: 0,
            log: dir.path().join("kube-apiserver.log"),
            extra_args: self.apiserver_args,
            timeout: self.start_timeout,
        };
        let (process, client, kubeconfig) =
            apiserver.start_first(&etcd.url, &files, dir.path()).await?;
        let kubeconfig_path = dir.path().join("kubeconfig.yaml");
        kubeconfig::write(&kubeconfig, &kubeconfig_path)?;
        let mut env = TestEnv {
            cluster: None,
            apiserver_process: Mutex::new(Some(process)),
            apiserver,
            etcd: etcd.process,
            etcd_url: etcd.url,
            client,
            kubeconfig,
            kubeconfig_path,
            files,
            dir,
        };
        for yaml in &self.crds_yaml {
            env.install_crds_yaml(yaml).await?;
        }
        if let (Some(options), Some(bins)) = (self.cluster, cluster_bins) {
            env.cluster = Some(
                env.start_cluster(&bins, options, self.start_timeout)
                    .await?,
            );
        }
        tracing::info!(
            server = %env.apiserver.url(),
            dir = %env.dir.path().display(),
            cluster = env.cluster.is_some(),
            elapsed_ms = started.elapsed().as_millis(),
            "test control plane ready"
        );
        Ok(env)
    }
}

/// A running kube-apiserver + etcd pair, stopped when dropped.
///
/// See the [module docs](self) for an example and for what the control plane does.
pub struct TestEnv {
    // Field order is drop order: the cluster mode's processes, then the apiserver, then etcd,
    // the directory last.
    cluster: Option<cluster::Cluster>,
    apiserver_process: Mutex<Option<ManagedProcess>>,
    apiserver: ApiServer,
    etcd: ManagedProcess,
    etcd_url: String,
    client: kube::Client,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    files: Files,
    dir: tempfile::TempDir,
}

impl TestEnv {
    /// Starts a control plane with default options; see [`TestEnvBuilder`] for others.
    pub async fn start() -> Result<Self, TestEnvError> {
        TestEnvBuilder::default().start().await
    }

    /// Options for starting a control plane.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// A client authenticated as `admin` in `system:masters` (allowed everything).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// A file holding the admin kubeconfig, for child processes (`KUBECONFIG=...`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        self.apiserver.url()
    }

    /// The directory holding the environment's data, certificates and logs; removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the environment runs in [cluster mode](TestEnvBuilder::cluster).
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The cluster mode's process ids (controller-manager, scheduler, kwok), or `None` in the
    /// plain mode.
    pub fn cluster_pids(&self) -> Option<[u32; 3]> {
        self.cluster.as_ref().map(|c| {
            [
                c.components.controller_manager.pid(),
                c.components.scheduler.pid(),
                c.components.kwok.pid(),
            ]
        })
    }

    /// etcd's process id.
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.pid()
    }

    /// etcd's client URL, `http://127.0.0.1:<port>` (plain HTTP on loopback): for tests that need
    /// etcd itself, e.g. to write a key while kube-apiserver is stopped.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// kube-apiserver's process id, or `None` while it is stopped.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.lock_apiserver().as_ref().map(ManagedProcess::pid)
    }

    /// A client and kubeconfig for another identity, authenticated by a client certificate with
    /// common name `user` and organizations `groups`. It has no rights until RBAC grants some,
    /// which makes it the way to test that an operator works with exactly the permissions it asks
    /// for.
    pub async fn identity(&self, user: &str, groups: &[&str]) -> Result<Identity, TestEnvError> {
        let cert = self.files.client_ca.issue_client(user, groups)?;
        let kubeconfig = kubeconfig::for_client_cert(
            &self.apiserver.url(),
            &self.files.serving_ca_pem,
            user,
            &cert,
        )?;
        let client = kubeconfig::client(&kubeconfig, user).await?;
        let safe: String = user
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let kubeconfig_path = self.dir.path().join(format!("kubeconfig-{safe}.yaml"));
        kubeconfig::write(&kubeconfig, &kubeconfig_path)?;
        Ok(Identity {
            user: user.to_string(),
            client,
            kubeconfig,
            kubeconfig_path,
        })
    }

    /// Kills kube-apiserver (SIGKILL, like a crash); etcd keeps running with all data. Requests
    /// fail until [`start_apiserver`](Self::start_apiserver). Does nothing when already stopped.
    pub fn stop_apiserver(&self) {
        if let Some(mut process) = self.lock_apiserver().take() {
            process.kill();
            tracing::info!(server = %self.apiserver.url(), "kube-apiserver stopped");
        }
    }

    /// Starts kube-apiserver again on the same address with the same credentials and waits until
    /// it is ready. Does nothing when it is running.
    pub async fn start_apiserver(&self) -> Result<(), TestEnvError> {
        if self.apiserver_pid().is_some() {
            return Ok(());
        }
        let process = self.apiserver.restart(&self.client).await?;
        *self.lock_apiserver() = Some(process);
        tracing::info!(server = %self.apiserver.url(), "kube-apiserver started again");
        Ok(())
    }

    /// Stops both processes and removes the directory now (dropping does the same).
    pub fn stop(self) {
        drop(self);
    }

    /// Starts the cluster mode's processes and fake nodes and waits until they are ready.
    async fn start_cluster(
        &self,
        bins: &cluster::ClusterBinaries,
        options: ClusterOptions,
        timeout: Duration,
    ) -> Result<cluster::Cluster, TestEnvError> {
        let plane = cluster::ControlPlane {
            dir: self.dir.path(),
            files: &self.files,
            server: self.apiserver.url(),
            admin: &self.client,
            timeout,
        };
        let mut components = cluster::start_components(bins, &plane, &options).await?;
        cluster::create_nodes(&self.client, &options).await?;
        let names = options.node_names();
        startup::wait_ready(&mut components.kwok, timeout, &names, |names| {
            cluster::nodes_ready(&self.client, names)
        })
        .await?;
        Ok(cluster::Cluster {
            components,
            options,
        })
    }

    fn lock_apiserver(&self) -> std::sync::MutexGuard<'_, Option<ManagedProcess>> {
        // A poisoned lock only means another thread panicked while holding it; the Option inside
        // is still meaningful.
        self.apiserver_process
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ensure_running(&self) -> Result<(), TestEnvError> {
        match self.apiserver_pid() {
            Some(_) => Ok(()),
            None => Err(TestEnvError::ApiServerStopped),
        }
    }
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("server", &self.server_url())
            .field("dir", &self.dir.path())
            .field("etcd_pid", &self.etcd_pid())
            .field("apiserver_pid", &self.apiserver_pid())
            .finish_non_exhaustive()
    }
}

/// Another identity of the control plane: see [`TestEnv::identity`].
#[derive(Clone)]
pub struct Identity {
    /// The user name Kubernetes sees.
    pub user: String,
    /// A client that authenticates as this identity.
    pub client: kube::Client,
    /// Its kubeconfig.
    pub kubeconfig: Kubeconfig,
    /// Its kubeconfig as a file, for child processes.
    pub kubeconfig_path: PathBuf,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("user", &self.user)
            .field("kubeconfig_path", &self.kubeconfig_path)
            .finish_non_exhaustive()
    }
}
