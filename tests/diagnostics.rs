//! The Runner's `/debug/kubeapp` and the metrics port's authentication, against a real
//! kube-apiserver + etcd with `examples/minimal` run as child processes:
//!
//! - two leader-elected replicas each report their informers (synced, objects, a checksum of the
//!   cached `(uid, resourceVersion)` set), their kinds and their leader state: once 400
//!   Greetings are rendered, both caches hold 400 Greetings with the same checksum; one change
//!   moves the checksum on both, to the same new value; exactly one replica leads, both name
//!   the Lease and the leader as its holder;
//! - with `--metrics-auth`, `/metrics` and `/debug/kubeapp` answer 401 without a token or with
//!   a token the apiserver does not accept, 403 for a ServiceAccount without the
//!   `nonResourceURLs` permission, 200 for the scraper ServiceAccount bound to the reader role
//!   exactly as `manifests --metrics-auth --monitoring --scrape service-monitor` generates them
//!   (whose ServiceMonitor sends that account's token); `/readyz` stays open. That operator runs
//!   as its own generated ServiceAccount with only its generated ClusterRole, and does its job.
//!
//! The binary must be built first (`scripts/test` does: `cargo build --workspace --bins`).

mod example_support;

use std::net::SocketAddr;
use std::time::Duration;

use example_support::replica::{LEADER_ELECTED, MINIMAL, Options, Replica};
use example_support::{binary, eventually, get, kubeapp, output_of};
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubeapp::sdk::diagnostics::{Diagnostics, InformerDiagnostics};
use kubeapp::sdk::testenv::TestEnv;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const GREETINGS: usize = 400;

fn greetings(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("minimal.kubeapp.dev", "v1", "Greeting"),
        "greetings",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn greeting(ns: &str, name: &str, message: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "minimal.kubeapp.dev/v1", "kind": "Greeting",
        "metadata": {"name": name, "namespace": ns}, "spec": {"message": message}
    }))
    .expect("a Greeting")
}

/// The Greeting informer's report.
fn greeting_informer(report: &Diagnostics) -> Option<&InformerDiagnostics> {
    report.informers.iter().find(|i| i.kind == "Greeting")
}

/// Both replicas' Greeting informers once they hold `count` objects with one checksum (other
/// than `not`).
async fn agreed(
    a: &Replica,
    b: &Replica,
    count: u64,
    not: Option<&str>,
    logs: impl Fn() -> String,
) -> (Diagnostics, Diagnostics) {
    eventually("both replicas cache the same Greetings", logs, || async {
        let (da, db) = (a.diagnostics().await?, b.diagnostics().await?);
        let (ia, ib) = (greeting_informer(&da)?, greeting_informer(&db)?);
        (ia.objects == count
            && ib.objects == count
            && ia.checksum == ib.checksum
            && Some(ia.checksum.as_str()) != not)
            .then_some((da.clone(), db.clone()))
    })
    .await
}

/// A control plane with the minimal example's CRD, and a namespace named after `prefix`.
async fn minimal_env(prefix: &str) -> (TestEnv, String) {
    let env = TestEnv::start().await.expect("control plane");
    env.install_crds_yaml(&output_of(&binary(MINIMAL, MINIMAL), &["crd"]))
        .await
        .expect("the CRD installs");
    let ns = env.create_namespace(prefix).await.expect("namespace");
    (env, ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_report_the_same_cache_checksum_and_one_leader() {
    let (env, ns) = minimal_env("diagnostics").await;
    let client = env.client();
    let a = Replica::start(&env, &ns, "replica-a", LEADER_ELECTED, "info");
    let b = Replica::start(&env, &ns, "replica-b", LEADER_ELECTED, "info");
    let logs = || format!("{}\n---\n{}", a.log(), b.log());

    let api = greetings(&client, &ns);
    futures::stream::iter(0..GREETINGS)
        .for_each_concurrent(20, |i| {
            let api = api.clone();
            let ns = ns.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &greeting(&ns, &format!("g{i}"), "hi"),
                )
                .await
                .expect("create a Greeting");
            }
        })
        .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the leader renders every Greeting", logs, || async {
        let rendered = config_maps.list(&ListParams::default()).await.ok()?;
        (rendered.items.len() >= GREETINGS).then_some(())
    })
    .await;
    let count = GREETINGS as u64;
    let (da, db) = agreed(&a, &b, count, None, logs).await;

    for report in [&da, &db] {
        let informer = greeting_informer(report).expect("a Greeting informer");
        assert!(informer.synced, "{informer:?}");
        assert_eq!(informer.checksum.len(), 16, "{informer:?}");
        assert!(informer.last_event_age_seconds.is_some(), "{informer:?}");
        assert_eq!(informer.watch_errors, 0, "{informer:?}");
        assert!(
            report.informers.iter().any(|i| i.kind == "ConfigMap"),
            "the owned kind's informer: {report:?}"
        );
        let kind = report.kinds.iter().find(|k| k.kind == "greetings");
        assert!(
            kind.is_some_and(|k| k.objects_failing == 0 && k.retries_given_up == 0),
            "{report:?}"
        );
        let [app] = report.apps.as_slice() else {
            panic!("one app: {report:?}")
        };
        let leader = app.leader.as_ref().expect("leader-elected");
        assert_eq!(
            (leader.lease_namespace.as_str(), leader.lease_name.as_str()),
            (ns.as_str(), "greeter-leader")
        );
        assert!(app.shard.is_none(), "not sharded: {app:?}");
    }
    let leaders: Vec<_> = [(&da, &a), (&db, &b)]
        .iter()
        .filter(|(report, _)| report.apps[0].leader.as_ref().is_some_and(|l| l.leading))
        .map(|(report, replica)| {
            let leader = report.apps[0].leader.as_ref().expect("leader");
            assert_eq!(leader.identity, replica.name);
            assert!(leader.term >= 1, "{leader:?}");
            replica.name
        })
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one leads: {da:?}\n{db:?}");
    // Both name the leader as the Lease's holder: the standby from its last read.
    for report in [&da, &db] {
        let leader = report.apps[0].leader.as_ref().expect("leader");
        assert_eq!(leader.holder.as_deref(), Some(leaders[0]), "{report:?}");
    }

    // A change moves the checksum on both replicas, to the same value: it digests versions,
    // not only names.
    let before = greeting_informer(&da).expect("informer").checksum.clone();
    api.patch(
        "g7",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"message": "changed"}})),
    )
    .await
    .expect("patch a Greeting");
    agreed(&a, &b, count, Some(&before), logs).await;

    // `kubeapp trace --diagnostics` shows the leader's own report for the object's kind.
    let leader = if leaders[0] == a.name { &a } else { &b };
    let url = format!("http://{}", leader.metrics);
    let (code, stdout, stderr) = trace_g7(&env, &ns, &url, true).await;
    // The verdict is the object's (the minimal example writes no status: 3, not ready); an
    // error would be 1.
    assert_eq!(code, 3, "{stdout}{stderr}");
    let traced: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    let operator = &traced["operator"];
    assert_eq!(operator["informer"]["objects"], GREETINGS, "{stdout}");
    assert_eq!(operator["informer"]["synced"], true, "{stdout}");
    assert_eq!(operator["kind"]["kind"], "greetings", "{stdout}");
    assert_eq!(operator["apps"][0]["leader"]["leading"], true, "{stdout}");
    let (_, text, _) = trace_g7(&env, &ns, &url, false).await;
    assert!(
        text.contains(&format!("informer: synced, {GREETINGS} cached"))
            && text.contains(&format!(
                "{} leads with Lease {ns}/greeter-leader",
                leader.name
            )),
        "{text}"
    );
    // The standby's report names who leads.
    let standby = if leaders[0] == a.name { &b } else { &a };
    let (_, text, _) = trace_g7(&env, &ns, &format!("http://{}", standby.metrics), false).await;
    assert!(
        text.contains(&format!(
            "{} stands by for Lease {ns}/greeter-leader",
            standby.name
        )) && text.contains(&format!("held by {}", leader.name)),
        "{text}"
    );
    // An address nothing answers on is reported, not fatal.
    let (code, stdout, _) = trace_g7(&env, &ns, "http://127.0.0.1:9", true).await;
    assert_eq!(code, 3, "{stdout}");
    assert!(
        stdout.contains("operator diagnostics: http://127.0.0.1:9/debug/kubeapp"),
        "{stdout}"
    );
}

/// `kubeapp trace greeting/g7 -n ns --diagnostics url` (with `-o json` when `json`): the exit
/// code, stdout and stderr.
async fn trace_g7(env: &TestEnv, ns: &str, url: &str, json: bool) -> (i32, String, String) {
    let mut args = vec!["trace", "greeting/g7", "-n", ns, "--diagnostics", url];
    if json {
        args.extend(["-o", "json"]);
    }
    kubeapp(env.kubeconfig_path(), &args).await
}

/// `GET path` with `Authorization: Bearer token` (when given): the status and body.
async fn get_as(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split(' ').nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no answer from {addr}{path}"))
}

/// A token for ServiceAccount `name` in `ns`, made first unless `exists`.
async fn account_token(client: &kube::Client, ns: &str, name: &str, exists: bool) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    if !exists {
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        accounts
            .create(&PostParams::default(), &account)
            .await
            .expect("create a ServiceAccount");
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .and_then(|status| status.token)
        .expect("a token")
}

/// The document of `kind` whose name ends with `suffix` in `docs`.
fn generated<'d>(docs: &'d [serde_json::Value], kind: &str, suffix: &str) -> &'d serde_json::Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|name| name.ends_with(suffix))
        })
        .unwrap_or_else(|| panic!("the manifests have no {kind} *{suffix}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_metrics_auth_only_a_permitted_token_reads_metrics_and_diagnostics() {
    let (env, ns) = minimal_env("metrics-auth").await;
    let client = env.client();
    // The scraper's identity and permission as the operator's own manifests generate them
    // (`--metrics-auth --monitoring --scrape service-monitor`): the reader ClusterRole, the
    // scraper's ServiceAccount and its binding. Its token Secret needs the token controller and
    // the ServiceMonitor the Prometheus operator's CRD, which this control plane has neither of:
    // the test asks a token of the same ServiceAccount with a TokenRequest instead.
    let yaml = output_of(
        &binary(MINIMAL, MINIMAL),
        &[
            "manifests",
            "--image",
            "minimal:test",
            "--namespace",
            &ns,
            "--metrics-auth",
            "--monitoring",
            "--scrape",
            "service-monitor",
        ],
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let role: ClusterRole =
        serde_json::from_value(generated(&docs, "ClusterRole", "-metrics-reader").clone())
            .expect("a ClusterRole");
    let account: ServiceAccount =
        serde_json::from_value(generated(&docs, "ServiceAccount", "-metrics-scraper").clone())
            .expect("a ServiceAccount");
    let binding: ClusterRoleBinding =
        serde_json::from_value(generated(&docs, "ClusterRoleBinding", "-metrics-scraper").clone())
            .expect("a ClusterRoleBinding");
    let monitor = generated(&docs, "ServiceMonitor", "");
    let secret = generated(&docs, "Secret", "-metrics-scraper-token");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"],
        secret["metadata"]["name"],
        "the monitor sends the scraper's token"
    );
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("the generated ClusterRole");
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("the generated ServiceAccount");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the generated ClusterRoleBinding");
    // The operator itself runs as its generated ServiceAccount with only its generated
    // ClusterRole (the reviews `--metrics-auth` needs included), not as the admin.
    let own = |kind: &str| -> serde_json::Value {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|name| !name.contains("-metrics-"))
            })
            .unwrap_or_else(|| panic!("the manifests have no {kind} of the operator"))
            .clone()
    };
    let operator_account: ServiceAccount =
        serde_json::from_value(own("ServiceAccount")).expect("a ServiceAccount");
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &operator_account)
        .await
        .expect("the operator's ServiceAccount");
    let operator_role: ClusterRole =
        serde_json::from_value(own("ClusterRole")).expect("a ClusterRole");
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &operator_role)
        .await
        .expect("the operator's ClusterRole");
    let operator_binding: ClusterRoleBinding =
        serde_json::from_value(own("ClusterRoleBinding")).expect("a ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &operator_binding)
        .await
        .expect("the operator's ClusterRoleBinding");
    let identity = env
        .identity(
            &format!(
                "system:serviceaccount:{ns}:{}",
                operator_account.metadata.name.as_deref().expect("a name")
            ),
            &["system:serviceaccounts"],
        )
        .await
        .expect("the operator's identity");
    let scraper_name = account.metadata.name.clone().expect("a name");
    let scraper = account_token(&client, &ns, &scraper_name, true).await;
    let nobody = account_token(&client, &ns, "nobody", false).await;

    let operator = Replica::start_with(
        &env,
        &ns,
        "secured",
        &["--metrics-auth"],
        "info",
        &Options {
            kubeconfig: Some(identity.kubeconfig_path.clone()),
            ..Options::default()
        },
    );
    let logs = || operator.log();
    eventually("/readyz answers 200 without a token", logs, || async {
        get(operator.metrics, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    for path in ["/metrics", "/debug/kubeapp"] {
        let (status, body) = get_as(operator.metrics, path, None).await;
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(body.contains("no Authorization header"), "{body}");
        let (status, body) = get_as(operator.metrics, path, Some("not-a-token")).await;
        assert_eq!(status, 401, "{path} with a bad token: {body}");
        let (status, body) = get_as(operator.metrics, path, Some(&nobody)).await;
        assert_eq!(status, 403, "{path} without the permission: {body}");
        assert!(
            body.contains(&format!("system:serviceaccount:{ns}:nobody")),
            "{body}"
        );
        let (status, body) = get_as(operator.metrics, path, Some(&scraper)).await;
        assert_eq!(status, 200, "{path} with the permission: {body}");
    }
    let (_, body) = get_as(operator.metrics, "/debug/kubeapp", Some(&scraper)).await;
    let report: Diagnostics = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(greeting_informer(&report).is_some(), "{body}");
    let (_, body) = get_as(operator.metrics, "/metrics", Some(&scraper)).await;
    assert!(body.contains("informer_events_total"), "{body}");
    // With nothing but its generated permissions, it does its job.
    greetings(&client, &ns)
        .create(&PostParams::default(), &greeting(&ns, "secured", "hi"))
        .await
        .expect("create a Greeting");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the Greeting is rendered", logs, || async {
        config_maps.get_opt("secured").await.ok().flatten()
    })
    .await;
}
