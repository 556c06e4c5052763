//! A reconciler triggered by another kind through a mapper function.
//!
//! What it shows: a `Site` names a ConfigMap of settings (`spec.settings`) that it does not own.
//! `KindHandle::watches` watches ConfigMaps and, for each change or deletion of one, reconciles
//! what the mapper returns: here every Site of that namespace naming the ConfigMap, found in the
//! Sites' own cache (`KindHandle::store`, read in the mapper: no request to the apiserver). The
//! reconciler reads the settings from the watched kind's cache (`ctx.related_store`), sees why
//! it runs (`request.cause`: its own event, or the ConfigMap that mapped to it) and reports
//! `Ready` with `conditions` and `ctx.status()`.
//!
//! Run it against the cluster of the current kubeconfig:
//!
//! ```sh
//! cargo run --example watches_mapper -- crd | kubectl apply -f -   # the Site CRD
//! cargo run --example watches_mapper                               # Ctrl-C stops it
//! # in another terminal:
//! kubectl apply -f - <<<'{"apiVersion": "examples.kubeapp.dev/v1", "kind": "Site",
//!   "metadata": {"name": "shop"}, "spec": {"settings": "shop-settings"}}'
//! kubectl create configmap shop-settings --from-literal=theme=dark
//! kubectl delete configmap shop-settings
//! ```
//!
//! What to look at: `default/shop (its own event): no ConfigMap shop-settings`; after the
//! create `default/shop (watched ConfigMap default/shop-settings changed): 1 setting(s)`,
//! after the delete `no ConfigMap` again; `kubectl get site shop -o yaml` shows `Ready`
//! following.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kubeapp::prelude::*;

/// A site configured by a ConfigMap it names.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.kubeapp.dev",
    version = "v1",
    kind = "Site",
    namespaced,
    status = "SiteStatus"
)]
pub struct SiteSpec {
    /// The name of the ConfigMap (same namespace) holding the site's settings.
    pub settings: String,
}

/// What the reconciler reports.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteStatus {
    /// How many settings the ConfigMap holds.
    pub settings_count: Option<i64>,
    /// `Ready`: whether the settings were found.
    #[serde(default)]
    #[schemars(schema_with = "conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// The Sites of `settings`' namespace that name it.
fn sites_using(sites: &Store<Site>, settings: &ConfigMap) -> Vec<ObjectRef<Site>> {
    sites
        .list(settings.namespace().as_deref())
        .iter()
        .filter(|site| site.spec.settings == settings.name_any())
        .map(|site| ObjectRef::from_obj(site.as_ref()))
        .collect()
}

async fn reconcile(
    request: ReconcileRequest<Site>,
    ctx: Context,
) -> Result<ReconcileResult, ReconcileError> {
    let site = request.object.as_ref();
    if request.action == ReconcileAction::Deleted {
        return Ok(ReconcileResult::done());
    }
    let why = request
        .cause
        .map_or("its own event".into(), |c| c.to_string());
    let key = format!(
        "{}/{}",
        site.namespace().unwrap_or_default(),
        site.name_any()
    );
    let settings = ctx
        .related_store::<ConfigMap>()
        .and_then(|store| store.get_named(site.namespace().as_deref(), &site.spec.settings));
    let mut status = site.status.clone().unwrap_or_default();
    let ready = match &settings {
        Some(cm) => {
            let count = cm.data.as_ref().map_or(0, |d| d.len() as i64);
            println!("{key} ({why}): {count} setting(s)");
            status.settings_count = Some(count);
            conditions::ready(true, "SettingsFound", format!("{count} setting(s)"))
        }
        None => {
            println!("{key} ({why}): no ConfigMap {}", site.spec.settings);
            status.settings_count = None;
            let message = format!("ConfigMap {} not found", site.spec.settings);
            conditions::ready(false, "SettingsMissing", message)
        }
    };
    conditions::set(&mut status.conditions, ready, site.metadata.generation);
    ctx.status(site).write(status).await?;
    // No requeue: the ConfigMap's creation reconciles the Site through the mapper.
    Ok(ReconcileResult::done())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows the library's logs
    if std::env::args().nth(1).as_deref() == Some("crd") {
        print!("{}", kubeapp::sdk::crd::to_yaml(&[Site::crd()])?);
        return Ok(());
    }
    let client = Client::try_default().await?;
    let controller =
        InformerController::new(ControllerConfig::default().name("watches-mapper-example"));
    let sites = controller.kind(
        Api::<Site>::all(client.clone()),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let site_cache = sites.store();
    // Every ConfigMap is cached here; a label selector in the config would cache fewer.
    let _settings = sites.watches(
        Api::<ConfigMap>::all(client),
        watcher::Config::default(),
        move |settings: &ConfigMap| sites_using(&site_cache, settings),
    );
    let _reconciler = sites.reconcile_fn(reconcile);

    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        }
    });
    controller.run(stop).await?;
    Ok(())
}
