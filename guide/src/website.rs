//! The operator the guide builds, assembled: the `Website` and `Domain` kinds and the app of
//! chapters 1 to 5, in one place.
//!
//! Each chapter shows its own part in full; later chapters' fragments import what earlier
//! chapters defined from here (a hidden `# use kubeapp_guide::website::*;` line), and chapter 8
//! tests this app against a real kube-apiserver. Keep it in step with the chapters: it is the
//! code they show, not a variant of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::api::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kubeapp::operator::apply::conditions;
use kubeapp::operator::{BoxError, Context, ReconcileError, ReconcileResult, Watcher};
use kubeapp::sdk::admission::TypedAdmissionRequest;
use kubeapp::sdk::app::AdmissionError;
use kubeapp::sdk::conversion::VersionConverter;
use kubeapp::sdk::manifest::ManifestData;
use kubeapp::simple::{AppConfig, ManagedKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The app manifest of the finished operator (chapter 5): two kinds, `Website` in two versions
/// with its webhooks, and `Domain`.
pub const MANIFEST: &str = r#"
appName: website-operator
group: guide.kubeapp.dev
preferredVersion: v1
versions:
  - name: v1
    kinds:
      - kind: Website
        conversion: true
        admission:
          validation:
            operations: [CREATE, UPDATE]
          mutation:
            operations: [CREATE, UPDATE]
      - kind: Domain
  - name: v2
    kinds:
      - kind: Website
        conversion: true
"#;

/// The label on every ConfigMap the operator renders, naming its `Website`; the app caches
/// only ConfigMaps that carry it.
pub const WEBSITE_LABEL: &str = "guide.kubeapp.dev/website";

/// The label the mutating webhook puts on every `Website`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// A static website: its pages, served from a ConfigMap the operator renders.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "guide.kubeapp.dev",
    version = "v1",
    kind = "Website",
    namespaced,
    status = "WebsiteStatus"
)]
pub struct WebsiteSpec {
    /// The pages, by file name (`index.html`, `about.html`, ...).
    pub pages: BTreeMap<String, String>,
}

/// What the operator reports about a `Website`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebsiteStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The hosts of the `Domain`s pointing at the site.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// `Ready`, and the conditions other controllers set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// A host name pointing at a `Website` of the same namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "guide.kubeapp.dev",
    version = "v1",
    kind = "Domain",
    namespaced
)]
pub struct DomainSpec {
    /// The host name, e.g. `www.example.com`.
    pub host: String,
    /// The `Website` it serves.
    pub website: String,
}

/// Version `v2` of `Website`: the pages as a list (chapter 5's conversion).
pub mod v2 {
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::WebsiteStatus;

    /// The `v2` spec: the pages as a list.
    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "guide.kubeapp.dev",
        version = "v2",
        kind = "Website",
        namespaced,
        status = "WebsiteStatus"
    )]
    pub struct WebsiteSpec {
        /// The pages.
        pub pages: Vec<Page>,
    }

    /// One page.
    #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
    pub struct Page {
        /// Its file name.
        pub path: String,
        /// Its content.
        pub html: String,
    }
}

/// The ConfigMap a `Website` renders to: its name and namespace, one key per page.
pub fn render(website: &Website) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: website.metadata.name.clone(),
            namespace: website.metadata.namespace.clone(),
            labels: Some([(WEBSITE_LABEL.to_string(), website.name_any())].into()),
            ..ObjectMeta::default()
        },
        data: Some(website.spec.pages.clone()),
        ..ConfigMap::default()
    }
}

/// The hosts of the cached `Domain`s that point at `website` (chapter 2).
pub fn hosts_of(website: &Website, ctx: &Context) -> Vec<String> {
    let Some(domains) = ctx.related_store::<Domain>() else {
        return Vec::new();
    };
    let hosts: BTreeSet<String> = domains
        .list(website.namespace().as_deref())
        .iter()
        .filter(|domain| domain.spec.website == website.name_any())
        .map(|domain| domain.spec.host.clone())
        .collect();
    hosts.into_iter().collect()
}

/// The `Website`s a `Domain` points at: the one it names (chapter 2's mapper).
pub fn website_of(domain: &Domain) -> Vec<ObjectRef<Website>> {
    let namespace = domain.namespace().unwrap_or_default();
    vec![ObjectRef::new(&domain.spec.website).within(&namespace)]
}

/// The status after the ConfigMap was applied, and whether `Ready` just became true (chapter 3).
pub fn published_status(website: &Website, hosts: Vec<String>) -> (WebsiteStatus, bool) {
    let generation = website.meta().generation;
    let mut status = website.status.clone().unwrap_or_default();
    let was_ready = conditions::is_true(&status.conditions, conditions::READY);
    let message = format!("{} pages published", website.spec.pages.len());
    conditions::set(
        &mut status.conditions,
        conditions::ready(true, "Published", message),
        generation,
    );
    status.observed_generation = generation;
    status.hosts = hosts;
    (status, !was_ready)
}

/// Renders the ConfigMap, then reports status, and an Event when the site first becomes ready
/// (chapters 1 to 3).
pub async fn apply(website: Arc<Website>, ctx: Context) -> Result<ReconcileResult, ReconcileError> {
    ctx.apply(render(&website))
        .owned_by(website.as_ref())?
        .send()
        .await?;
    let (status, became_ready) = published_status(&website, hosts_of(&website, &ctx));
    ctx.status(website.as_ref()).write(status).await?;
    if became_ready {
        let note = format!("serving {} pages", website.spec.pages.len());
        ctx.recorder()
            .normal(website.as_ref(), "Published", note)
            .await?;
    }
    Ok(ReconcileResult::done())
}

/// Nothing to undo: the garbage collector deletes the owned ConfigMap (chapter 1).
pub async fn cleanup(_: Arc<Website>, _: Context) -> Result<ReconcileResult, ReconcileError> {
    Ok(ReconcileResult::done())
}

/// Stands for a DNS provider's API: which host points at which website (chapter 4).
#[derive(Debug, Default)]
pub struct Dns {
    records: Mutex<BTreeMap<String, String>>,
}

impl Dns {
    /// Points `host` at `target`.
    pub fn point(&self, host: &str, target: &str) {
        self.lock().insert(host.to_string(), target.to_string());
    }

    /// Removes the record of `host`, if any.
    pub fn remove(&self, host: &str) {
        self.lock().remove(host);
    }

    /// Every record, host to target.
    pub fn records(&self) -> BTreeMap<String, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where a `Domain`'s record points: `website.namespace`.
pub fn target(domain: &Domain) -> String {
    format!(
        "{}.{}",
        domain.spec.website,
        domain.namespace().unwrap_or_default()
    )
}

/// Keeps one DNS record per `Domain` (chapter 4).
#[derive(Debug)]
pub struct DomainRecords;

impl Watcher<Domain, Dns> for DomainRecords {
    async fn add(&self, domain: Arc<Domain>, ctx: &Context<Dns>) -> Result<(), BoxError> {
        ctx.data().point(&domain.spec.host, &target(&domain));
        Ok(())
    }

    async fn update(
        &self,
        old: Arc<Domain>,
        new: Arc<Domain>,
        ctx: &Context<Dns>,
    ) -> Result<(), BoxError> {
        if old.spec.host != new.spec.host {
            ctx.data().remove(&old.spec.host);
        }
        ctx.data().point(&new.spec.host, &target(&new));
        Ok(())
    }

    async fn delete(&self, domain: Arc<Domain>, ctx: &Context<Dns>) -> Result<(), BoxError> {
        ctx.data().remove(&domain.spec.host);
        Ok(())
    }

    async fn sync(&self, domain: Arc<Domain>, ctx: &Context<Dns>) -> Result<(), BoxError> {
        ctx.data().point(&domain.spec.host, &target(&domain));
        Ok(())
    }
}

/// Why `spec` cannot be served, if it cannot (chapter 5's validation).
pub fn problems(spec: &WebsiteSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if !spec.pages.contains_key("index.html") {
        problems.push("it has no index.html".to_string());
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    for path in spec.pages.keys() {
        if path.is_empty() || !path.chars().all(valid) {
            problems.push(format!(
                "page {path:?} is not a valid file name: use letters, digits, '-', '_' and '.'"
            ));
        }
    }
    problems
}

/// The validating webhook (chapter 5): refuses a `Website` that cannot be served.
pub async fn validate(request: TypedAdmissionRequest<Website>) -> Result<(), AdmissionError> {
    let Some(website) = &request.object else {
        return Ok(());
    };
    let problems = problems(&website.spec);
    if problems.is_empty() {
        return Ok(());
    }
    Err(AdmissionError::denied(format!(
        "Website {:?} cannot be served: {}",
        website.name_any(),
        problems.join("; ")
    )))
}

/// The mutating webhook (chapter 5): labels every `Website` with the operator's name.
pub async fn mutate(request: TypedAdmissionRequest<Website>) -> Result<Website, AdmissionError> {
    let mut website = request
        .object
        .ok_or_else(|| AdmissionError::Internal("a request without an object".into()))?;
    website
        .labels_mut()
        .insert(MANAGED_BY_LABEL.into(), "website-operator".into());
    Ok(website)
}

/// `v1` to `v2` (chapter 5).
///
/// # Errors
///
/// Never; the signature is the one [`VersionConverter`] takes.
pub fn to_v2(website: Website) -> Result<v2::Website, String> {
    let pages = website.spec.pages.into_iter();
    Ok(v2::Website {
        metadata: website.metadata,
        spec: v2::WebsiteSpec {
            pages: pages.map(|(path, html)| v2::Page { path, html }).collect(),
        },
        status: website.status,
    })
}

/// `v2` to `v1` (chapter 5).
///
/// # Errors
///
/// A message naming the path when two pages have the same path.
pub fn to_v1(website: v2::Website) -> Result<Website, String> {
    let mut pages = BTreeMap::new();
    for page in website.spec.pages {
        if pages.insert(page.path.clone(), page.html).is_some() {
            return Err(format!("page {:?} is listed twice", page.path));
        }
    }
    Ok(Website {
        metadata: website.metadata,
        spec: WebsiteSpec { pages },
        status: website.status,
    })
}

/// The app of chapters 1 to 5: `Website`s rendered into the ConfigMaps they own, reconciled
/// again when a `Domain` pointing at them changes, validated, labelled and converted; `Domain`s
/// kept as records in `dns`.
pub fn app(manifest: ManifestData, dns: Arc<Dns>) -> AppConfig {
    let websites = ManagedKind::<Website>::new()
        .apply_cleanup_fn(apply, cleanup)
        .owns::<ConfigMap>(watcher::Config::default().labels(WEBSITE_LABEL))
        .watches::<Domain>(watcher::Config::default(), website_of)
        .validate_fn(validate)
        .mutate_fn(mutate)
        .converter(VersionConverter::new(to_v2, to_v1));
    let domains = ManagedKind::<Domain>::new()
        .context(dns)
        .watcher(DomainRecords);
    AppConfig::from_manifest(manifest)
        .managed_kind(websites)
        .managed_kind(domains)
}
