//! End-to-end test of `kubeapp::sdk::deploy`: what [`OperatorDeployment`] renders is accepted by a
//! real kube-apiserver. Every object of the YAML stream, for an operator with webhooks and one
//! without, is server-side applied as a dry run (strict field validation) into a fresh namespace;
//! so is the `manifests` output of the examples that build theirs with it, and the minimal
//! example's `rbac` (their binaries must be built first: `cargo build -p kubeapp-example-watcher
//! -p kubeapp-example-reconciler -p kubeapp-example-minimal`, which `scripts/test` does).

mod example_support;

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use kubeapp::sdk::deploy::{OperatorDeployment, WebhookServing};
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::sdk::rbac::RoleScope;
use kubeapp::sdk::testenv::{CertificateAuthority, TestEnv};

use example_support::{binary, output_of};

const TIMEOUT: Duration = Duration::from_secs(60);

const MANIFEST: &str = r#"
appName: gadgets
group: gadgets.example.com
versions:
  - name: v1
    kinds:
      - kind: Gadget
        plural: gadgets
        validation: { operations: [CREATE, UPDATE] }
extraPermissions:
  accessKinds:
    - { group: "", resource: configmaps, actions: [get, list, watch] }
"#;

/// Server-side applies every document of `yaml` as a dry run into `namespace` and returns the
/// objects as the apiserver would have stored them.
async fn dry_run_apply(client: &kube::Client, namespace: &str, yaml: &str) -> Vec<DynamicObject> {
    let docs: Vec<DynamicObject> =
        serde_saphyr::from_multiple(yaml).expect("the rendered manifests parse");
    assert!(!docs.is_empty(), "nothing rendered:\n{yaml}");
    let params = PatchParams::apply("kubeapp-deploy-builder-test")
        .dry_run()
        .validation_strict();
    let mut accepted = Vec::new();
    for doc in docs {
        let types = doc
            .types
            .clone()
            .expect("every document has apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("a valid apiVersion");
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("the apiserver serves {gvk:?}: {e}"));
        let name = doc.metadata.name.clone().expect("every object is named");
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                assert_eq!(
                    doc.metadata.namespace.as_deref(),
                    Some(namespace),
                    "{} {name} is in the operator's namespace",
                    types.kind
                );
                Api::namespaced_with(client.clone(), namespace, &resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let stored = tokio::time::timeout(TIMEOUT, api.patch(&name, &params, &Patch::Apply(&doc)))
            .await
            .expect("the apiserver answers in time")
            .unwrap_or_else(|e| panic!("the apiserver rejects {} {name}: {e}\n{yaml}", types.kind));
        accepted.push(stored);
    }
    accepted
}

fn kinds(objects: &[DynamicObject]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_manifests_with_and_without_webhooks_pass_a_server_side_dry_run() {
    let env = TestEnv::start().await.expect("control plane");
    let namespace = env
        .create_namespace("deploy-builder")
        .await
        .expect("namespace");
    let client = env.client();
    let manifest = ManifestData::from_yaml(MANIFEST).expect("manifest");

    // With webhooks: cluster-wide RBAC, the webhook Service and the certificate mount.
    let webhooks = WebhookServing::new("gadgets-webhook-tls");
    let with_webhooks = OperatorDeployment::new(&manifest, "example.com/gadgets:1.0")
        .namespace(namespace.clone())
        .args([
            "run".to_string(),
            "--webhook-cert-file".to_string(),
            webhooks.cert_file(),
            "--webhook-key-file".to_string(),
            webhooks.key_file(),
        ])
        .env_from_field("POD_NAME", "metadata.name")
        .webhooks(webhooks)
        .build()
        .expect("builds")
        .to_yaml()
        .expect("renders");
    let accepted = dry_run_apply(&client, &namespace, &with_webhooks).await;
    assert_eq!(
        kinds(&accepted),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
            "Service"
        ]
    );
    let pod = &accepted[3].data["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "gadgets-operator");
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "gadgets-webhook-tls"
    );
    assert_eq!(
        accepted[2].data["subjects"][0]["name"], pod["serviceAccountName"],
        "the binding's subject is the pods' ServiceAccount"
    );

    // Without webhooks, namespaced RBAC and a custom name: no webhook Service, no mount.
    let without_webhooks = OperatorDeployment::new(&manifest, "example.com/gadgets:1.0")
        .name("gadgets-watcher")
        .namespace(namespace.clone())
        .replicas(2)
        .args(["run"])
        .rbac({
            let namespace = namespace.clone();
            move |rbac| rbac.scope(RoleScope::Namespace(namespace.clone()))
        })
        .build()
        .expect("builds")
        .to_yaml()
        .expect("renders");
    let accepted = dry_run_apply(&client, &namespace, &without_webhooks).await;
    assert_eq!(
        kinds(&accepted),
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service"
        ]
    );
    let pod = &accepted[3].data["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "gadgets-watcher");
    assert!(pod["volumes"].is_null(), "{pod}");

    // Nothing was stored: every apply was a dry run.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &namespace);
    let stored = deployments
        .list(&Default::default())
        .await
        .expect("lists deployments");
    assert!(stored.items.is_empty(), "a dry run stored a Deployment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_manifests_pass_a_server_side_dry_run() {
    let watcher = binary("kubeapp-example-watcher", "kubeapp-example-watcher");
    let reconciler = binary("kubeapp-example-reconciler", "kubeapp-example-reconciler");
    let env = TestEnv::start().await.expect("control plane");
    let namespace = env
        .create_namespace("deploy-examples")
        .await
        .expect("namespace");
    let client = env.client();

    let minimal = binary("kubeapp-example-minimal", "kubeapp-example-minimal");
    let yaml = output_of(
        &minimal,
        &[
            "manifests",
            "--namespace",
            &namespace,
            "--image",
            "example:1",
        ],
    );
    let accepted = dry_run_apply(&client, &namespace, &yaml).await;
    assert_eq!(
        kinds(&accepted),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service"
        ]
    );
    let role = &accepted[1].data["rules"];
    assert!(
        role.as_array()
            .is_some_and(|rules| rules.iter().any(|rule| {
                rule["resources"] == serde_json::json!(["configmaps"])
                    && rule["verbs"]
                        .as_array()
                        .is_some_and(|v| v.contains(&"create".into()))
            })),
        "the minimal operator owns ConfigMaps, so it may create them: {role}"
    );
    let yaml = output_of(&minimal, &["rbac", "--namespace", &namespace]);
    let accepted = dry_run_apply(&client, &namespace, &yaml).await;
    assert_eq!(
        kinds(&accepted),
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    );

    let yaml = output_of(
        &watcher,
        &[
            "manifests",
            "--namespace",
            &namespace,
            "--image",
            "example:1",
        ],
    );
    let accepted = dry_run_apply(&client, &namespace, &yaml).await;
    assert_eq!(kinds(&accepted)[3..], ["Deployment", "Service"]);

    let ca = CertificateAuthority::new("deploy-builder-test").expect("a CA");
    let ca_file = env.dir().join("deploy-builder-ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write the CA");
    let yaml = output_of(
        &reconciler,
        &[
            "manifests",
            "--namespace",
            &namespace,
            "--image",
            "example:1",
            "--webhook-ca-file",
            ca_file.to_str().expect("a UTF-8 path"),
        ],
    );
    let accepted = dry_run_apply(&client, &namespace, &yaml).await;
    assert_eq!(
        kinds(&accepted)[3..],
        [
            "Deployment",
            "Service",
            "Service",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration"
        ]
    );
}
