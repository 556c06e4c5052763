//! End-to-end smoke tests of the test control plane (`kubeapp::sdk::testenv`): a real
//! kube-apiserver + etcd, driven through a plain `kube::Client`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{CustomResource, ResourceExt};
use kubeapp::sdk::testenv::{TestEnv, TestEnvError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A small custom kind with a status subresource.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "smoke.kubeapp.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
struct WidgetSpec {
    size: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
struct WidgetStatus {
    observed_size: Option<i32>,
}

const TIMEOUT: Duration = Duration::from_secs(30);

fn widget(name: &str, size: i32) -> Widget {
    Widget::new(name, WidgetSpec { size })
}

/// Waits for the next watch event that `pick` accepts, failing after [`TIMEOUT`].
async fn next_matching<S, T>(
    stream: &mut S,
    what: &str,
    mut pick: impl FnMut(&Event<Widget>) -> Option<T>,
) -> T
where
    S: futures::Stream<Item = Result<Event<Widget>, watcher::Error>> + Unpin,
{
    let found = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = stream.try_next().await.expect("watch stream failed") {
            if let Some(found) = pick(&event) {
                return Some(found);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(found)) => found,
        Ok(None) => panic!("watch ended before {what}"),
        Err(_) => panic!("no watch event for {what} within {TIMEOUT:?}"),
    }
}

fn applied_named(name: &str) -> impl FnMut(&Event<Widget>) -> Option<Widget> + '_ {
    move |event| match event {
        Event::Apply(w) if w.name_any() == name => Some(w.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn crd_lifecycle_with_finalizer_is_seen_by_a_watch() {
    let env = TestEnv::start().await.expect("start control plane");
    env.install_crd::<Widget>().await.expect("install CRD");
    let ns = env.create_namespace("smoke").await.expect("namespace");
    let api: Api<Widget> = Api::namespaced(env.client(), &ns);

    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    // The initial list of an empty namespace ends with InitDone; everything after is live.
    next_matching(&mut events, "the initial list", |e| {
        matches!(e, Event::InitDone).then_some(())
    })
    .await;

    // Create, carrying a finalizer.
    let mut w = widget("w1", 3);
    w.metadata.finalizers = Some(vec!["smoke.kubeapp.dev/hold".into()]);
    api.create(&PostParams::default(), &w)
        .await
        .expect("create");
    let seen = next_matching(&mut events, "the create", applied_named("w1")).await;
    assert_eq!(seen.spec.size, 3);

    // List.
    let listed = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(
        listed
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["w1"]
    );

    // Patch the status subresource.
    let status = serde_json::json!({ "status": { "observed_size": 3 } });
    api.patch_status("w1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch status");
    let seen = next_matching(&mut events, "the status patch", |e| match e {
        Event::Apply(w) if w.status.as_ref().and_then(|s| s.observed_size) == Some(3) => {
            Some(w.clone())
        }
        _ => None,
    })
    .await;
    assert_eq!(
        seen.metadata.generation,
        Some(1),
        "a status patch keeps the generation"
    );

    // Delete: the finalizer holds the object, which now carries a deletionTimestamp.
    api.delete("w1", &DeleteParams::default())
        .await
        .expect("delete");
    let held = next_matching(&mut events, "the deletionTimestamp", |e| match e {
        Event::Apply(w) if w.metadata.deletion_timestamp.is_some() => Some(w.clone()),
        _ => None,
    })
    .await;
    assert_eq!(held.finalizers(), ["smoke.kubeapp.dev/hold"]);
    assert!(
        api.get_opt("w1").await.expect("get").is_some(),
        "held by the finalizer"
    );

    // Remove the finalizer: the object goes away and the watch sees the delete.
    let remove = serde_json::json!({ "metadata": { "finalizers": null } });
    api.patch("w1", &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .expect("remove finalizer");
    next_matching(&mut events, "the delete", |e| match e {
        Event::Delete(w) if w.name_any() == "w1" => Some(()),
        _ => None,
    })
    .await;
    assert!(
        api.get_opt("w1").await.expect("get").is_none(),
        "gone after the finalizer left"
    );
}

#[tokio::test]
async fn two_control_planes_run_side_by_side() {
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (a, b) = (a.expect("start a"), b.expect("start b"));
    assert_ne!(a.server_url(), b.server_url());

    let ns = "default";
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("only-in-a".into());
    cm.data = Some(BTreeMap::from([("k".into(), "v".into())]));
    Api::<ConfigMap>::namespaced(a.client(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create in a");

    let in_a = Api::<ConfigMap>::namespaced(a.client(), ns)
        .get_opt("only-in-a")
        .await
        .expect("get a");
    let in_b = Api::<ConfigMap>::namespaced(b.client(), ns)
        .get_opt("only-in-a")
        .await
        .expect("get b");
    assert!(
        in_a.is_some(),
        "the object is in the control plane it was written to"
    );
    assert!(in_b.is_none(), "and not in the other one");
}

#[tokio::test]
async fn apiserver_restart_keeps_objects() {
    let env = TestEnv::start().await.expect("start control plane");
    env.install_crd::<Widget>().await.expect("install CRD");
    let ns = env.create_namespace("restart").await.expect("namespace");
    let api: Api<Widget> = Api::namespaced(env.client(), &ns);
    api.create(&PostParams::default(), &widget("kept", 7))
        .await
        .expect("create");

    let before = env.apiserver_pid().expect("running");
    env.stop_apiserver();
    assert_eq!(env.apiserver_pid(), None);
    assert!(!process_alive(before), "the old apiserver process is gone");
    assert!(
        api.get_opt("kept").await.is_err(),
        "requests fail while the apiserver is down"
    );
    assert!(matches!(
        env.create_namespace("x").await,
        Err(TestEnvError::ApiServerStopped)
    ));

    env.start_apiserver().await.expect("restart apiserver");
    let after = env.apiserver_pid().expect("running again");
    assert_ne!(before, after);
    // The same client (made before the stop) reaches the new process, and etcd kept the data.
    let kept = api.get("kept").await.expect("object survives the restart");
    assert_eq!(kept.spec.size, 7);
    let crds = env.install_crd::<Widget>().await;
    assert!(crds.is_ok(), "the CRD is still served: {crds:?}");
}

#[tokio::test]
async fn missing_binaries_give_an_error_naming_what_where_and_how_to_fix() {
    let empty = tempfile::tempdir().expect("tempdir");
    // A builder-given directory is searched first; with nothing there the defaults are searched,
    // which do hold the binaries in CI. So point the whole search at empty places instead.
    let err = TestEnv::builder()
        .binary_dir(empty.path())
        .only_binary_dir()
        .start()
        .await
        .expect_err("no binaries in an empty directory");
    let text = err.to_string();
    assert!(
        matches!(err, TestEnvError::BinaryNotFound { .. }),
        "{err:?}"
    );
    assert!(text.contains("etcd not found"), "{text}");
    assert!(text.contains(&empty.path().display().to_string()), "{text}");
    assert!(text.contains("KUBEBUILDER_ASSETS"), "{text}");
    assert!(text.contains("testbin/build.sh"), "{text}");
}

#[tokio::test]
async fn a_start_up_failure_shows_the_tail_of_the_process_log() {
    let err = TestEnv::builder()
        .apiserver_arg("--no-such-flag=1")
        .start()
        .await
        .expect_err("kube-apiserver rejects an unknown flag");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            TestEnvError::Exited {
                binary: "kube-apiserver",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        text.contains("unknown flag: --no-such-flag"),
        "the log tail is in the error: {text}"
    );
}

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.smoke.kubeapp.dev
spec:
  group: smoke.kubeapp.dev
  scope: Cluster
  names: { plural: gadgets, singular: gadget, kind: Gadget }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: doohickeys.smoke.kubeapp.dev
spec:
  group: smoke.kubeapp.dev
  scope: Namespaced
  names: { plural: doohickeys, singular: doohickey, kind: Doohickey }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test]
async fn crds_from_yaml_are_established_and_kubeconfig_file_works_for_other_clients() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let env = TestEnv::start().await.expect("start control plane");
    let installed = env
        .install_crds_yaml(GADGET_CRD)
        .await
        .expect("install CRDs from YAML");
    assert_eq!(installed.len(), 2);

    // A client built from the kubeconfig file alone, as a child process would build one.
    let file =
        kube::config::Kubeconfig::read_from(env.kubeconfig_path()).expect("read kubeconfig file");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    let gvk = GroupVersionKind::gvk("smoke.kubeapp.dev", "v1", "Gadget");
    let gadgets: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&gvk));
    let gadget = DynamicObject::new("g1", &ApiResource::from_gvk(&gvk))
        .data(serde_json::json!({"spec": {"x": 1}}));
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .expect("create a Gadget");
    assert_eq!(
        gadgets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );

    let bad = env
        .install_crds_yaml("kind: [unclosed")
        .await
        .expect_err("malformed YAML");
    assert!(matches!(bad, TestEnvError::InvalidYaml { .. }), "{bad:?}");
    assert!(
        bad.to_string().contains("CustomResourceDefinition YAML"),
        "{bad}"
    );
}

/// etcd's command line, from `/proc`.
fn etcd_args(env: &TestEnv) -> Vec<String> {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", env.etcd_pid())).expect("cmdline");
    cmdline
        .split(|b| *b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

#[tokio::test]
async fn etcd_skips_fsync_unless_asked_and_its_url_is_etcd() {
    let fast = TestEnv::start().await.expect("start control plane");
    assert!(
        etcd_args(&fast).contains(&"--unsafe-no-fsync=true".to_string()),
        "default: no fsync: {:?}",
        etcd_args(&fast)
    );
    let real = TestEnv::builder()
        .etcd_fsync()
        .start()
        .await
        .expect("start control plane with etcd fsync");
    assert!(
        !etcd_args(&real)
            .iter()
            .any(|a| a.contains("unsafe-no-fsync")),
        "etcd_fsync: fsync on: {:?}",
        etcd_args(&real)
    );
    // The URL is etcd's client URL, the one etcd listens on.
    let url = real.etcd_url();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(
        etcd_args(&real).contains(&format!("--listen-client-urls={url}")),
        "{url} vs {:?}",
        etcd_args(&real)
    );
    // And it works as a control plane.
    let ns = real.create_namespace("fsync").await.expect("namespace");
    assert!(ns.starts_with("fsync"));
}

#[tokio::test]
async fn dropping_the_env_kills_both_processes() {
    let env = TestEnv::start().await.expect("start control plane");
    let pids = [env.etcd_pid(), env.apiserver_pid().expect("running")];
    let dir = env.dir().to_path_buf();
    assert!(pids.iter().all(|&pid| process_alive(pid)));
    drop(env);
    for pid in pids {
        assert!(!process_alive(pid), "process {pid} survived the drop");
    }
    assert!(!dir.exists(), "the data directory is removed");
}

#[tokio::test]
async fn a_restricted_identity_has_only_the_rights_rbac_gives() {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let env = TestEnv::start().await.expect("start control plane");
    let ns = env.create_namespace("rbac").await.expect("namespace");
    let bob = env
        .identity("bob", &["readers", "auditors"])
        .await
        .expect("identity");
    assert!(bob.kubeconfig_path.exists());
    let as_bob: Api<ConfigMap> = Api::namespaced(bob.client.clone(), &ns);

    let denied = as_bob
        .list(&ListParams::default())
        .await
        .expect_err("no rights yet");
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403),
        "{denied:?}"
    );

    // Grant list to the second group only: both O= attributes of the certificate count.
    let mut role = Role::default();
    role.metadata.name = Some("cm-reader".into());
    role.rules = Some(vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".into()]),
        verbs: vec!["list".into()],
        ..PolicyRule::default()
    }]);
    Api::<Role>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some("auditors-read".into());
    binding.role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Role".into(),
        name: "cm-reader".into(),
    };
    binding.subjects = Some(vec![Subject {
        kind: "Group".into(),
        name: "auditors".into(),
        ..Subject::default()
    }]);
    Api::<RoleBinding>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");

    // RBAC is evaluated from an informer cache in the apiserver: await the grant.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while as_bob.list(&ListParams::default()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the grant never took effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("nope".into());
    let create = as_bob
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("create not granted");
    assert!(
        matches!(&create, kube::Error::Api(s) if s.code == 403),
        "{create:?}"
    );
}

/// True while `pid` names a live (not zombie) process.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Runs this test binary again as a child that starts a control plane, prints both pids, and then
/// leaves without dropping it, in the way `KUBEAPP_ORPHAN_MODE` says. The parent asserts that
/// etcd and kube-apiserver die with the child. In the child role (the variable set) it is the
/// child's body instead.
#[tokio::test]
async fn processes_die_with_the_test_binary() {
    if let Ok(mode) = std::env::var("KUBEAPP_ORPHAN_MODE") {
        let env = TestEnv::start().await.expect("start control plane");
        println!(
            "PIDS {} {} {}",
            env.etcd_pid(),
            env.apiserver_pid().expect("running"),
            env.dir().display()
        );
        std::mem::forget(env);
        // Leave only when the parent has seen both processes alive and says "go" (or kills us).
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("read stdin");
        match mode.as_str() {
            "exit" => std::process::exit(0),
            "abort" => std::process::abort(),
            // "kill": wait for the parent's SIGKILL.
            _ => loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
            },
        }
    }
    for mode in ["exit", "abort", "kill"] {
        let (pids, dir) = run_orphan_child(mode).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|&pid| process_alive(pid)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "mode {mode}: control-plane processes {pids:?} outlived the test binary"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        std::fs::remove_dir_all(&dir).expect("remove the child's control-plane directory");
    }
}

async fn run_orphan_child(mode: &str) -> (Vec<u32>, std::path::PathBuf) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let exe = std::env::current_exe().expect("test binary path");
    assert!(Path::new(&exe).exists());
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "processes_die_with_the_test_binary",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KUBEAPP_ORPHAN_MODE", mode)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn child test binary");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (pids, dir) = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.next_line().await.expect("read child stdout") {
            // The harness prints "test <name> ... " on the same line before the test's output.
            if let Some((_, rest)) = line.split_once("PIDS ") {
                // "<etcd pid> <apiserver pid> <dir>": the child never drops its TestEnv, so the
                // parent removes the directory (etcd preallocates ~120 MB of WAL there).
                let mut parts = rest.splitn(3, ' ');
                let pids = [parts.next(), parts.next()]
                    .map(|p| p.and_then(|p| p.parse::<u32>().ok()).expect("pid"));
                let dir = std::path::PathBuf::from(parts.next().expect("dir"));
                return (pids.to_vec(), dir);
            }
        }
        panic!("mode {mode}: the child exited without starting a control plane");
    })
    .await
    .expect("child printed its pids in time");
    assert!(
        pids.iter().all(|&pid| process_alive(pid)),
        "mode {mode}: running before the child leaves"
    );
    if mode == "kill" {
        child.start_kill().expect("SIGKILL the child");
    } else {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(b"go\n")
            .await
            .expect("tell the child to leave");
    }
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("child exits")
        .expect("wait child");
    assert!(mode != "exit" || status.success(), "mode exit: {status}");
    (pids, dir)
}

/// Counts the ERROR events it sees.
struct ErrorCounter(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ErrorCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::ERROR {
            let mut line = String::new();
            event.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    line.push_str(&format!("{}={value:?} ", field.name()));
                },
            );
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("{}: {line}", event.metadata().target()));
        }
    }
}

/// Starting the control plane logs no ERROR: its readiness polls meet 500s from an apiserver
/// still starting, which are expected (kube's client logs every 5xx at ERROR; they used to flood
/// the output of every test).
#[tokio::test(flavor = "current_thread")]
async fn starting_logs_no_error() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let subscriber =
        tracing_subscriber::registry().with(ErrorCounter(std::sync::Arc::clone(&errors)));
    // One thread: every task of the start runs where this default applies.
    let _default = tracing::subscriber::set_default(subscriber);
    let env = TestEnv::start().await.expect("control plane");
    drop(env);
    let errors = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        errors.is_empty(),
        "{} ERROR events: {errors:#?}",
        errors.len()
    );
}
