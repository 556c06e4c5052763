//! The `crd`, `rbac` and `manifests` commands of [`Operator`] without a cluster, and its errors.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::watcher;

use super::commands::{CrdArgs, ManifestArgs, RbacArgs, WebhookTargetArgs};
use super::*;
use crate::kinds::UnmanagedKind;
use kubeapp_operator::WatcherFns;

const WEBHOOK_MANIFEST: &str = "
appName: shop
group: shop.example.com
versions:
  - name: v1
    kinds:
      - kind: Order
        admission: { validation: { operations: [CREATE] } }
";

fn ca_file(dir: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kubeapp-operator-tests-{dir}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("ca.crt");
    std::fs::write(
        &path,
        "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n",
    )
    .expect("write CA");
    path
}

fn manifest_args(webhook: WebhookTargetArgs) -> ManifestArgs {
    ManifestArgs {
        namespace: "shop-system".into(),
        image: Some("shop:1".into()),
        replicas: 1,
        shard: false,
        webhook,
    }
}

#[test]
fn webhooks_of_the_manifest_need_a_ca_and_are_deployed_with_their_configuration() {
    let operator = Operator::new(WEBHOOK_MANIFEST);
    let error = operator
        .manifests_yaml(&manifest_args(WebhookTargetArgs::default()))
        .expect_err("no CA");
    let message = error.to_string();
    assert!(
        message.contains("--webhook-ca-file") && message.contains("Order: validation"),
        "{message}"
    );
    let yaml = operator
        .manifests_yaml(&manifest_args(WebhookTargetArgs {
            webhook_ca_file: Some(ca_file("manifests")),
            webhook_url: None,
        }))
        .expect("manifests");
    for needle in [
        "kind: Deployment",
        "--webhook-cert-file",
        "secretName: shop-operator-webhook-tls",
        "kind: ValidatingWebhookConfiguration",
        "name: shop-operator-webhook",
        "namespace: shop-system",
    ] {
        assert!(yaml.contains(needle), "{needle} missing:\n{yaml}");
    }
    let error = operator
        .manifests_yaml(&manifest_args(WebhookTargetArgs {
            webhook_ca_file: Some(ca_file("url")),
            webhook_url: Some("http://127.0.0.1:8443".into()),
        }))
        .expect_err("not https");
    assert!(error.to_string().contains("not an https:// URL"), "{error}");
}

#[test]
fn run_refuses_a_webhook_manifest_without_a_server_certificate() {
    let manifest = ManifestData::from_yaml(WEBHOOK_MANIFEST).expect("manifest");
    let args = <crate::cli::OperatorArgs as clap::FromArgMatches>::from_arg_matches(
        &<commands::OperatorCommand as clap::CommandFactory>::command()
            .try_get_matches_from(["op", "run"])
            .expect("parses")
            .subcommand_matches("run")
            .expect("run")
            .clone(),
    )
    .expect("args");
    let error = webhooks::require_server(&manifest, &args).expect_err("no certificate");
    assert!(
        error
            .to_string()
            .contains("--webhook-cert-file and --webhook-key-file"),
        "{error}"
    );
}

#[test]
fn rbac_comes_from_the_manifest_and_the_apps_kinds_and_can_be_namespaced() {
    let operator = Operator::new(WEBHOOK_MANIFEST).app(|manifest| {
        AppConfig::from_manifest(manifest).unmanaged_kind(
            UnmanagedKind::<ConfigMap>::new()
                .watcher(WatcherFns::<ConfigMap>::new())
                .owns::<Secret>(watcher::Config::default()),
        )
    });
    let yaml = operator
        .rbac_yaml(&RbacArgs {
            namespace: "shop-system".into(),
            watch_namespace: Some("shop".into()),
        })
        .expect("rbac");
    for needle in [
        "kind: Role\n",
        "kind: RoleBinding",
        "- configmaps",
        "- secrets",
        "- orders",
    ] {
        assert!(yaml.contains(needle), "{needle} missing:\n{yaml}");
    }
}

#[test]
fn an_invalid_manifest_is_reported_by_every_command() {
    let operator = Operator::new("appName: [unclosed");
    let crd = operator
        .crd_yaml(&CrdArgs {
            namespace: "default".into(),
            webhook: WebhookTargetArgs::default(),
        })
        .expect_err("invalid manifest");
    assert!(
        crd.to_string().starts_with("the operator's manifest:"),
        "{crd}"
    );
    assert!(operator.check_manifest().is_err());
    assert!(
        operator
            .manifests_yaml(&manifest_args(WebhookTargetArgs::default()))
            .is_err()
    );
}

#[tokio::test]
async fn dry_run_calls_the_operators_rendering_and_says_when_there_is_none() {
    let args = super::dry_run::DryRunArgs {
        object: PathBuf::from("app.yaml"),
        existing: None,
        out: PathBuf::from("out"),
    };
    let without = Operator::new(WEBHOOK_MANIFEST);
    let error = without
        .execute(Command::DryRun(args.clone()))
        .await
        .expect_err("no dry run given");
    assert!(error.to_string().contains("has no dry run"), "{error}");

    let failing = Operator::new(WEBHOOK_MANIFEST)
        .dry_run(|args| async move { Err(format!("{}: not found", args.object.display()).into()) });
    let error = failing
        .execute(Command::DryRun(args.clone()))
        .await
        .expect_err("the rendering failed");
    assert_eq!(error.to_string(), "dry run: app.yaml: not found");

    let rendering = Operator::new(WEBHOOK_MANIFEST)
        .dry_run(|args| async move { Ok(format!("rendered into {}", args.out.display())) });
    rendering
        .execute(Command::DryRun(args))
        .await
        .expect("the rendering's summary is printed");
}

/// The Deployment's container args and whether a role grants `list`, `watch` and `delete` on
/// Leases (the base rules grant only `get`, `create` and `update`), for `args`.
fn run_args_and_lease_grant(args: &ManifestArgs) -> (Vec<String>, bool) {
    let yaml = Operator::new(WEBHOOK_MANIFEST)
        .manifests_yaml(args)
        .expect("manifests");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let container = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["containers"][0].clone())
        .expect("a Deployment");
    let run_args = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let leases = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            let has = |field: &str, value: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x == value))
            };
            rule["apiGroups"][0] == "coordination.k8s.io"
                && has("resources", "leases")
                && ["list", "watch", "delete"]
                    .iter()
                    .all(|verb| has("verbs", verb))
        });
    (run_args, leases)
}

#[test]
fn sharded_replicas_run_with_shard_and_the_lease_permissions_at_any_count() {
    for replicas in [1, 3] {
        let args = ManifestArgs {
            replicas,
            shard: true,
            ..manifest_args(WebhookTargetArgs {
                webhook_ca_file: Some(ca_file("shard")),
                webhook_url: None,
            })
        };
        let (run_args, leases) = run_args_and_lease_grant(&args);
        assert!(run_args.iter().any(|a| a == "--shard"), "{run_args:?}");
        assert!(
            !run_args.iter().any(|a| a == "--leader-elect"),
            "{run_args:?}"
        );
        assert!(
            leases,
            "{replicas} sharded replicas: the role grants Leases"
        );
    }
    let single = manifest_args(WebhookTargetArgs {
        webhook_ca_file: Some(ca_file("single")),
        webhook_url: None,
    });
    let (run_args, leases) = run_args_and_lease_grant(&single);
    assert!(
        !run_args
            .iter()
            .any(|a| a.starts_with("--shard") || a == "--leader-elect")
    );
    assert!(
        !leases,
        "one unsharded replica needs only the base Lease rules"
    );
}

#[test]
fn several_replicas_run_leader_elected_with_the_lease_permissions() {
    let operator = Operator::new(WEBHOOK_MANIFEST);
    let args = ManifestArgs {
        replicas: 3,
        ..manifest_args(WebhookTargetArgs {
            webhook_ca_file: Some(ca_file("replicas")),
            webhook_url: None,
        })
    };
    let yaml = operator.manifests_yaml(&args).expect("manifests");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a == "--leader-elect"),
        "{container}"
    );
    assert!(
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "POD_NAMESPACE"),
        "{container}"
    );
    let leases = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            rule["apiGroups"][0] == "coordination.k8s.io"
                && rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x == "leases"))
        });
    assert!(leases, "the role grants the Lease");
}
