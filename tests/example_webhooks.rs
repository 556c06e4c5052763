//! End-to-end tests of the reconciler example's webhooks: the binary runs as a child process
//! with development certificates from `testenv::CertificateAuthority`, its CRD and webhook
//! configurations are installed from its own `crd` and `manifests --webhook-url` output, and
//! kube-apiserver calls its validator, mutator and converter on loopback.
//!
//! The binary is the one cargo built next to this test; build it first with
//! `cargo build -p kubeapp-example-reconciler` (`scripts/test` does). Every wait is a condition
//! polled against a deadline.

mod example_support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeapp::sdk::testenv::TestEnv;
use serde_json::json;

use example_support::{
    APP_NAME, OPERATOR_LABEL, Operator, eventually, get, reconciled, template, templates,
};

/// A control plane with the example operator running and its webhooks live.
struct Setup {
    env: TestEnv,
    ns: String,
    operator: Operator,
}

impl Setup {
    async fn start(prefix: &str) -> Self {
        let env = TestEnv::start().await.expect("control plane");
        let ns = env.create_namespace(prefix).await.expect("namespace");
        let operator = Operator::start(&env, &ns, &[]);
        operator.install_crd(&env).await;
        operator.install_webhook_configurations(&env).await;
        let addr = operator.metrics_addr;
        eventually(
            "/readyz answers 200",
            || operator.logs(),
            || async {
                get(addr, "/readyz")
                    .await
                    .filter(|(status, _)| *status == 200)
            },
        )
        .await;
        operator.wait_for_webhooks(&env.client(), &ns).await;
        Self { env, ns, operator }
    }

    fn client(&self) -> kube::Client {
        self.env.client()
    }
}

/// The message of an API error, or a panic naming what was expected.
fn api_message(result: Result<kube::api::DynamicObject, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("{what}: expected the apiserver to refuse, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_template_is_rejected_with_the_validators_message() {
    let setup = Setup::start("example-validate").await;
    let client = setup.client();
    let v1 = templates(&client, &setup.ns, "v1");
    let pp = PostParams::default();

    let bad_key = template("v1", "bad", json!({"data": {"bad key": "1", "ok": "2"}}));
    let message = api_message(v1.create(&pp, &bad_key).await, "a key with a space");
    assert!(
        message.contains("validate.templates.reconciler.example.kubeapp.dev")
            && message.contains(
                "Template \"bad\" cannot render a ConfigMap: key \"bad key\" is not a valid \
                 ConfigMap key"
            ),
        "{message}"
    );
    assert!(
        v1.get_opt("bad").await.expect("get").is_none(),
        "nothing stored"
    );

    // A v2 request is converted to v1 and checked by the same validator.
    let v2 = templates(&client, &setup.ns, "v2");
    let empty = template("v2", "empty", json!({"entries": []}));
    let message = api_message(v2.create(&pp, &empty).await, "no entries");
    assert!(
        message.contains("Template \"empty\" cannot render a ConfigMap: it has no data"),
        "{message}"
    );

    // An update that makes a valid Template invalid is refused too; the stored one is unchanged.
    let good = template("v1", "good", json!({"data": {"a": "1"}}));
    v1.create(&pp, &good).await.expect("a valid Template");
    let patch = json!({"spec": {"data": {"a": null, "..": "x"}}});
    let refused = v1
        .patch("good", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let message = api_message(refused, "an update to an invalid key");
    assert!(message.contains("key \"..\""), "{message}");
    let stored = v1.get("good").await.expect("stored");
    assert_eq!(stored.data["spec"], json!({"data": {"a": "1"}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutation_is_in_the_stored_object() {
    let setup = Setup::start("example-mutate").await;
    let client = setup.client();
    let pp = PostParams::default();
    let v1 = templates(&client, &setup.ns, "v1");
    let v2 = templates(&client, &setup.ns, "v2");

    v1.create(&pp, &template("v1", "one", json!({"data": {"a": "1"}})))
        .await
        .expect("create as v1");
    v2.create(
        &pp,
        &template(
            "v2",
            "two",
            json!({"entries": [{"key": "a", "value": "1"}]}),
        ),
    )
    .await
    .expect("create as v2");
    for name in ["one", "two"] {
        let stored = v1.get(name).await.expect("stored");
        assert_eq!(
            stored.labels().get(OPERATOR_LABEL).map(String::as_str),
            Some(APP_NAME),
            "{name}: {:?}",
            stored.labels()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_read_back_converted_in_both_directions_and_are_reconciled() {
    let setup = Setup::start("example-convert").await;
    let client = setup.client();
    let pp = PostParams::default();
    let v1 = templates(&client, &setup.ns, "v1");
    let v2 = templates(&client, &setup.ns, "v2");
    let logs = || setup.operator.logs();

    // Created as v1 (stored as is), read as v2: entries in key order.
    v1.create(
        &pp,
        &template("v1", "from-v1", json!({"data": {"b": "2", "a": "1"}})),
    )
    .await
    .expect("create as v1");
    let as_v2 = v2.get("from-v1").await.expect("read as v2");
    assert_eq!(
        as_v2.types.as_ref().map(|t| t.api_version.as_str()),
        Some("reconciler.example.kubeapp.dev/v2")
    );
    assert_eq!(
        as_v2.data["spec"],
        json!({"entries": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]})
    );

    // Created as v2 (converted to v1 for storage), read back as either.
    let entries =
        json!({"entries": [{"key": "greeting", "value": "hello"}, {"key": "lang", "value": "en"}]});
    v2.create(&pp, &template("v2", "from-v2", entries.clone()))
        .await
        .expect("create as v2");
    let as_v1 = v1.get("from-v2").await.expect("read as v1");
    assert_eq!(
        as_v1.data["spec"],
        json!({"data": {"greeting": "hello", "lang": "en"}})
    );
    assert_eq!(
        v2.get("from-v2").await.expect("read as v2").data["spec"],
        entries
    );

    // Two entries with one key cannot become v1: the converter's message reaches the client.
    let duplicate = template(
        "v2",
        "duplicate",
        json!({"entries": [{"key": "k", "value": "1"}, {"key": "k", "value": "2"}]}),
    );
    let message = api_message(v2.create(&pp, &duplicate).await, "duplicate keys");
    assert!(message.contains("key \"k\" more than once"), "{message}");

    // The Template created as v2 is reconciled: the ConfigMap has its entries, and its status
    // (read as v2) reports the generation and Ready.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &setup.ns);
    let expected: BTreeMap<String, String> = [
        ("greeting".to_string(), "hello".to_string()),
        ("lang".to_string(), "en".to_string()),
    ]
    .into();
    eventually("the ConfigMap of from-v2 is rendered", logs, || async {
        configmaps
            .get_opt("from-v2")
            .await
            .ok()
            .flatten()
            .filter(|cm| cm.data.as_ref() == Some(&expected))
    })
    .await;
    eventually("from-v2 reads as reconciled in v2", logs, || async {
        v2.get("from-v2").await.ok().filter(reconciled)
    })
    .await;

    // An update through v2 reaches the ConfigMap.
    let patch = json!({"spec": {"entries": [{"key": "greeting", "value": "bonjour"}]}});
    v2.patch("from-v2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("update as v2");
    eventually("the ConfigMap follows the v2 update", logs, || async {
        configmaps
            .get_opt("from-v2")
            .await
            .ok()
            .flatten()
            .filter(|cm| {
                cm.data.as_ref() == Some(&[("greeting".to_string(), "bonjour".to_string())].into())
            })
    })
    .await;
}
