//! End-to-end tests of the manifest and what is generated from it (`kubeapp::sdk::{manifest, crd,
//! rbac}`), against a real kube-apiserver + etcd: the CRDs install and serve every version, and an
//! identity holding exactly the generated RBAC can do an operator's work, and gets a clear 403
//! with one permission less.

use std::future::Future;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Resource, ResourceExt};
use kubeapp::sdk::crd::{self, CrdBuilder};
use kubeapp::sdk::manifest::{ManifestData, Scope};
use kubeapp::sdk::rbac::{OperatorRbac, OperatorRole, RbacBuilder};
use kubeapp::sdk::testenv::TestEnv;

/// How long a condition in the apiserver (an RBAC change, a watch event) may take.
const TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);
const GROUP: &str = "manifest.kubeapp.dev";

mod v1 {
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// The first version of the managed kind: no status.
    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "manifest.kubeapp.dev",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    pub struct GadgetSpec {
        pub size: i32,
    }
}

mod v2 {
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// The second, stored version: a new optional field and a status.
    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "manifest.kubeapp.dev",
        version = "v2",
        kind = "Gadget",
        namespaced,
        status = "GadgetStatus"
    )]
    pub struct GadgetSpec {
        pub size: i32,
        pub color: Option<String>,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    pub struct GadgetStatus {
        pub ready: bool,
    }
}

/// Gadget in two versions (Rust types), and a cluster-scoped GadgetClass in v2 described only by
/// its schema in the manifest.
const MANIFEST: &str = r#"
appName: gadgets
group: manifest.kubeapp.dev
preferredVersion: v2
versions:
  - name: v1
    served: true
    kinds:
      - kind: Gadget
        plural: gadgets
        scope: Namespaced
  - name: v2
    served: true
    kinds:
      - kind: Gadget
        plural: gadgets
        scope: Namespaced
        admission:
          validation:
            operations: [CREATE, UPDATE]
      - kind: GadgetClass
        plural: gadgetclasses
        scope: Cluster
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  maxSize: { type: integer }
extraPermissions:
  accessKinds:
    - group: ""
      resource: secrets
      actions: [get]
"#;

fn manifest() -> ManifestData {
    ManifestData::from_embedded(MANIFEST).expect("the test manifest is valid")
}

fn crds(manifest: &ManifestData) -> Vec<CustomResourceDefinition> {
    CrdBuilder::new(manifest)
        .kind::<v1::Gadget>()
        .kind::<v2::Gadget>()
        .build()
        .expect("CRDs")
}

/// Retries `attempt` until it succeeds, failing the test after [`TIMEOUT`].
async fn eventually<T, E: std::fmt::Debug, Fut>(what: &str, mut attempt: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(err) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: still failing after {TIMEOUT:?}: {err:?}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

#[test]
fn manifest_round_trips_through_json_and_yaml_files() {
    let original = manifest();
    assert_eq!(original.kinds().len(), 2);
    assert_eq!(original.kinds()[1].scope, Scope::Cluster);
    let dir = tempfile::tempdir().expect("tempdir");

    let json_path = dir.path().join("manifest.json");
    std::fs::write(&json_path, original.to_json().expect("to JSON")).expect("write JSON");
    let from_json = ManifestData::from_file(&json_path).expect("read JSON");
    assert_eq!(from_json, original);

    let yaml_path = dir.path().join("manifest.yaml");
    std::fs::write(&yaml_path, from_json.to_yaml().expect("to YAML")).expect("write YAML");
    let from_yaml = ManifestData::from_file(&yaml_path).expect("read YAML");
    assert_eq!(from_yaml, original);

    // A broken file names itself, the line and the field.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        MANIFEST.replace("scope: Cluster", "scope: Everywhere"),
    )
    .expect("write broken");
    let err = ManifestData::from_file(&broken).expect_err("bad scope");
    let text = err.to_string();
    assert!(text.contains(&broken.display().to_string()), "{text}");
    assert!(text.contains("versions[1].kinds[1].scope"), "{text}");
    assert!(text.contains("Everywhere"), "{text}");
}

#[tokio::test]
async fn generated_crds_are_accepted_and_every_version_serves_objects() {
    let env = TestEnv::start().await.expect("start control plane");
    let manifest = manifest();
    let crds = crds(&manifest);
    // Through YAML, as `kubectl apply` would get them.
    let yaml = crd::to_yaml(&crds).expect("CRD YAML");
    let stored = env.install_crds_yaml(&yaml).await.expect("CRDs accepted");
    assert_eq!(stored.len(), 2);
    let gadget_crd = &stored[0];
    let served: Vec<(&str, bool, bool)> = gadget_crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(served, [("v1", true, false), ("v2", true, true)]);

    let ns = env.create_namespace("crds").await.expect("namespace");
    let old_api: Api<v1::Gadget> = Api::namespaced(env.client(), &ns);
    let new_api: Api<v2::Gadget> = Api::namespaced(env.client(), &ns);
    let pp = PostParams::default();
    old_api
        .create(&pp, &v1::Gadget::new("old", v1::GadgetSpec { size: 1 }))
        .await
        .expect("create through v1");
    let spec = v2::GadgetSpec {
        size: 2,
        color: Some("red".into()),
    };
    new_api
        .create(&pp, &v2::Gadget::new("new", spec))
        .await
        .expect("create through v2");

    // Each object reads through both versions (the None strategy only rewrites apiVersion).
    assert_eq!(
        new_api.get("old").await.expect("v1 object as v2").spec.size,
        1
    );
    assert_eq!(
        old_api.get("new").await.expect("v2 object as v1").spec.size,
        2
    );
    let new = new_api.get("new").await.expect("get v2");
    assert_eq!(new.spec.color.as_deref(), Some("red"));

    // v2 has the status subresource: a status patch lands and keeps the generation.
    let status = serde_json::json!({ "status": { "ready": true } });
    let patched = new_api
        .patch_status("new", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch v2 status");
    assert!(patched.status.is_some_and(|s| s.ready));

    // The cluster-scoped kind from the manifest schema, through the dynamic API.
    let gvk = GroupVersionKind::gvk(GROUP, "v2", "GadgetClass");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgetclasses");
    let classes: Api<DynamicObject> = Api::all_with(env.client(), &resource);
    let class = DynamicObject::new("small", &resource)
        .data(serde_json::json!({ "spec": { "maxSize": 3, "dropped": true } }));
    let created = classes
        .create(&pp, &class)
        .await
        .expect("create GadgetClass");
    assert_eq!(created.data["spec"]["maxSize"], 3);
    assert!(
        created.data["spec"].get("dropped").is_none(),
        "the manifest schema is structural: unknown fields are pruned"
    );
}

#[tokio::test]
async fn generated_rbac_suffices_for_an_operator_and_a_revoked_verb_is_a_403_naming_it() {
    let env = TestEnv::start().await.expect("start control plane");
    let manifest = manifest();
    env.install_crds(crds(&manifest))
        .await
        .expect("install CRDs");
    let ns = env.create_namespace("rbac").await.expect("namespace");
    let sa = "gadget-operator";
    let rbac = RbacBuilder::new(&manifest)
        .service_account(sa, &ns)
        .unmanaged::<ConfigMap>()
        .build()
        .expect("RBAC");
    create_rbac(&env, &rbac).await;

    // The operator's identity: what kube-apiserver sees for the ServiceAccount's token.
    let operator = env
        .identity(
            &format!("system:serviceaccount:{ns}:{sa}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{ns}"),
            ],
        )
        .await
        .expect("identity");
    let admin_gadgets: Api<v2::Gadget> = Api::namespaced(env.client(), &ns);
    let gadgets: Api<v2::Gadget> = Api::namespaced(operator.client.clone(), &ns);
    admin_gadgets
        .create(&PostParams::default(), &v2::Gadget::new("g1", spec(1)))
        .await
        .expect("admin creates g1");

    // Grants propagate asynchronously inside the apiserver.
    let lp = ListParams::default();
    eventually("the operator lists gadgets", || gadgets.list(&lp)).await;

    // List + watch, as an informer does.
    let mut events = watcher::watcher(gadgets.clone(), watcher::Config::default()).boxed();
    next_event(&mut events, "the initial list", |e| {
        matches!(e, WatchEvent::InitDone)
    })
    .await;
    admin_gadgets
        .create(&PostParams::default(), &v2::Gadget::new("g2", spec(2)))
        .await
        .expect("admin creates g2");
    next_event(
        &mut events,
        "the watch event of g2",
        |e| matches!(e, WatchEvent::Apply(g) if g.name_any() == "g2"),
    )
    .await;

    // Finalizer and status patches, as the opinionated reconciler does.
    let finalizer =
        serde_json::json!({ "metadata": { "finalizers": ["gadgets-gadgets-finalizer"] } });
    gadgets
        .patch("g1", &PatchParams::default(), &Patch::Merge(&finalizer))
        .await
        .expect("patch the finalizer");
    let status = serde_json::json!({ "status": { "ready": true } });
    gadgets
        .patch_status("g1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch status");

    // The unmanaged kind: read-only.
    let configmaps: Api<ConfigMap> = Api::namespaced(operator.client.clone(), &ns);
    configmaps
        .list(&ListParams::default())
        .await
        .expect("list configmaps");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("nope".into());
    let denied = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("configmaps are only watched");
    assert!(is_forbidden(&denied), "{denied:?}");

    // Events, both APIs.
    let g1 = gadgets.get("g1").await.expect("get g1");
    let recorder = Recorder::new(operator.client.clone(), Reporter::from(sa.to_string()));
    let reconciled = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("ready".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    // The first publish creates the event, the repeat patches its series.
    for attempt in ["create", "patch"] {
        recorder
            .publish(&reconciled, &g1.object_ref(&()))
            .await
            .unwrap_or_else(|err| panic!("{attempt} an events.k8s.io event: {err:?}"));
    }
    let mut core_event = CoreEvent::default();
    core_event.metadata.generate_name = Some("g1-".into());
    core_event.involved_object = g1.object_ref(&());
    core_event.reason = Some("Reconciled".into());
    Api::<CoreEvent>::namespaced(operator.client.clone(), &ns)
        .create(&PostParams::default(), &core_event)
        .await
        .expect("create a core event");

    // Leader election: get, create, update a lease.
    let leases: Api<Lease> = Api::namespaced(operator.client.clone(), &ns);
    let mut lease = Lease::default();
    lease.metadata.name = Some("gadgets-leader".into());
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    let mut lease = leases.get("gadgets-leader").await.expect("get lease");
    lease
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some(sa.into());
    leases
        .replace("gadgets-leader", &PostParams::default(), &lease)
        .await
        .expect("update lease");

    // One verb less: drop `patch` from the managed kinds' rule.
    let OperatorRole::Cluster { role, .. } = &rbac.role else {
        panic!("expected a ClusterRole");
    };
    let roles: Api<ClusterRole> = Api::all(env.client());
    let mut reduced = roles.get(&role.name_any()).await.expect("get the role");
    let rules = reduced.rules.as_mut().expect("rules");
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["gadgetclasses".to_string(), "gadgets".to_string()][..]),
        "the first rule is the managed kinds'"
    );
    rules[0].verbs.retain(|verb| verb != "patch");
    roles
        .replace(&role.name_any(), &PostParams::default(), &reduced)
        .await
        .expect("remove patch from the role");

    let err = eventually("the revoked verb to be refused", || async {
        match gadgets
            .patch("g2", &PatchParams::default(), &Patch::Merge(&finalizer))
            .await
        {
            Err(err) if is_forbidden(&err) => Ok(err),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let kube::Error::Api(status) = &err else {
        panic!("expected an API error: {err:?}");
    };
    assert_eq!(status.code, 403);
    assert!(
        status.message.contains("cannot patch resource \"gadgets\""),
        "the message names the verb and the resource: {}",
        status.message
    );
    assert!(status.message.contains(GROUP), "{}", status.message);
    // Everything else still works.
    gadgets
        .list(&ListParams::default())
        .await
        .expect("list still allowed");
}

fn spec(size: i32) -> v2::GadgetSpec {
    v2::GadgetSpec { size, color: None }
}

fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 403)
}

/// Creates the generated objects as the admin.
async fn create_rbac(env: &TestEnv, rbac: &OperatorRbac) {
    let pp = PostParams::default();
    let sa_ns = rbac
        .service_account
        .metadata
        .namespace
        .clone()
        .expect("namespace");
    Api::<ServiceAccount>::namespaced(env.client(), &sa_ns)
        .create(&pp, &rbac.service_account)
        .await
        .expect("ServiceAccount");
    let OperatorRole::Cluster { role, binding } = &rbac.role else {
        panic!("expected a ClusterRole: {:?}", rbac.role);
    };
    Api::<ClusterRole>::all(env.client())
        .create(&pp, role)
        .await
        .expect("ClusterRole");
    Api::<ClusterRoleBinding>::all(env.client())
        .create(&pp, binding)
        .await
        .expect("ClusterRoleBinding");
}

/// Waits for a watch event that `pick` accepts, failing after [`TIMEOUT`].
async fn next_event<S>(stream: &mut S, what: &str, pick: impl Fn(&WatchEvent<v2::Gadget>) -> bool)
where
    S: futures::Stream<Item = Result<WatchEvent<v2::Gadget>, watcher::Error>> + Unpin,
{
    let found = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = stream.try_next().await.expect("watch stream failed") {
            if pick(&event) {
                return true;
            }
        }
        false
    })
    .await;
    match found {
        Ok(true) => {}
        Ok(false) => panic!("the watch ended before {what}"),
        Err(_) => panic!("no watch event for {what} within {TIMEOUT:?}"),
    }
}
