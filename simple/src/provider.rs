//! [`Provider`]: the simple SimpleApp behind `kubeapp_sdk`'s [`AppProvider`] trait.
//!
//! A provider pairs an app's manifest with a function that builds its [`AppConfig`], so that the
//! manifest is available (to print CRDs and RBAC, to check webhooks) before there is a client, and
//! the app itself is built only once a client exists. The manifest is attached to the config the
//! function returns, so the app is always validated against it.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeapp_operator::WatcherFns;
//! use kubeapp_sdk::app::AppProvider as _;
//! use kubeapp_sdk::manifest::ManifestData;
//! use kubeapp_simple::{AppConfig, Provider, UnmanagedKind};
//!
//! let manifest = ManifestData::from_yaml(
//!     "appName: audit\ngroup: audit.example.com\nversions:\n  - name: v1\n    kinds: []\n",
//! )?;
//! let provider = Provider::new(manifest, || {
//!     AppConfig::new("audit").unmanaged_kind(
//!         UnmanagedKind::<ConfigMap>::new().watcher(WatcherFns::<ConfigMap>::new().on_add(
//!             |cm, _ctx| async move {
//!                 tracing::info!(name = ?cm.metadata.name, "configmap added");
//!                 Ok(())
//!             },
//!         )),
//!     )
//! });
//! assert_eq!(provider.manifest().app_name, "audit");
//! // With a cluster: `let app = provider.new_app(client)?;` then `Runner::new(..)?.with_app(app)`.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use kubeapp_sdk::app::{self as sdk_app, AppError, AppProvider};
use kubeapp_sdk::manifest::ManifestData;

use crate::app::{AppConfig, SimpleApp};

/// Builds the [`AppConfig`] of an app; called once per [`AppProvider::new_app`].
type ConfigFn = dyn Fn() -> AppConfig + Send + Sync;

/// An [`AppProvider`] for the simple [`SimpleApp`]: a manifest plus a function that builds the app's
/// configuration.
///
/// [`new_app`](AppProvider::new_app) calls the function, attaches the manifest (replacing any the
/// function set, so the provider's manifest is the one the app is checked against), and builds the
/// app with the given client. Every validation problem becomes [`AppError::Build`] naming the app.
pub struct Provider {
    manifest: ManifestData,
    config: Box<ConfigFn>,
}

impl Provider {
    /// A provider of the app that `config` describes, checked against `manifest`.
    pub fn new(
        manifest: ManifestData,
        config: impl Fn() -> AppConfig + Send + Sync + 'static,
    ) -> Self {
        Self {
            manifest,
            config: Box::new(config),
        }
    }

    /// The app's configuration with the provider's manifest attached, for inspection or
    /// validation without a cluster.
    pub fn config(&self) -> AppConfig {
        (self.config)().manifest(self.manifest.clone())
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("app", &self.manifest.app_name)
            .finish_non_exhaustive()
    }
}

impl AppProvider for Provider {
    fn manifest(&self) -> &ManifestData {
        &self.manifest
    }

    fn new_app(&self, client: kube::Client) -> Result<Arc<dyn sdk_app::App>, AppError> {
        let config = self.config();
        Ok(Arc::new(
            SimpleApp::new(config, client).map_err(AppError::from)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn manifest(yaml: &str) -> ManifestData {
        ManifestData::from_yaml(yaml).expect("a valid manifest")
    }

    /// A client that is never used: building an app does not talk to the cluster.
    fn offline_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URI"));
        kube::Client::try_from(config).expect("a client")
    }

    #[tokio::test]
    async fn builds_the_app_checked_against_the_providers_manifest() {
        let provider = Provider::new(
            manifest(
                "appName: cms\ngroup: cms.example.com\nversions:\n  - name: v1\n    kinds: []\n",
            ),
            || {
                AppConfig::new("cms").unmanaged_kind(
                    crate::kinds::UnmanagedKind::<ConfigMap>::new()
                        .watcher(kubeapp_operator::WatcherFns::new()),
                )
            },
        );
        assert_eq!(provider.manifest().app_name, "cms");
        let app = provider.new_app(offline_client()).expect("a valid app");
        assert_eq!(app.name(), "cms");
    }

    #[tokio::test]
    async fn a_manifest_kind_without_handler_is_a_build_error_naming_app_and_kind() {
        // The function sets no manifest; the provider's one applies and declares a kind the app
        // does not manage.
        let provider = Provider::new(
            manifest(
                "appName: cms\ngroup: cms.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Page\n",
            ),
            || AppConfig::new("cms"),
        );
        let err = provider
            .new_app(offline_client())
            .err()
            .expect("the app is invalid against the manifest");
        let message = err.to_string();
        assert!(message.contains("cms"), "{message}");
        assert!(message.contains("Page"), "{message}");
        assert!(provider.config().validate().is_err());
    }

    #[test]
    fn the_providers_manifest_replaces_the_one_the_function_sets() {
        let provider = Provider::new(
            manifest(
                "appName: cms\ngroup: cms.example.com\nversions:\n  - name: v1\n    kinds: []\n",
            ),
            || {
                AppConfig::new("cms").manifest(manifest(
                    "appName: cms\ngroup: cms.example.com\nversions:\n  - name: v1\n    kinds:\n      - kind: Page\n",
                ))
            },
        );
        provider
            .config()
            .validate()
            .expect("the provider's manifest (no kinds) is the one checked");
    }
}
