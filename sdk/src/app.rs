//! The App: the unit an operator binary runs.
//!
//! An [`App`] owns a set of kinds (its *managed* kinds: CRDs, admission and conversion come from
//! it), runs its informers and handlers until told to stop, reports health, contributes Prometheus
//! collectors, and answers admission and conversion requests. A Runner (in `kubeapp-runner`)
//! runs one or more apps, serves `/metrics`, `/livez` and `/readyz`, and routes webhook calls to
//! them. `kubeapp-simple` builds an `App` from a manifest and closures; implement the trait
//! directly when you need full control.
//!
//! The admission and conversion hooks answer "not implemented" unless overridden
//! ([`AdmissionError::NotImplemented`], [`ConversionError::NotImplemented`]); a webhook server
//! turns that into a clear refusal rather than silently allowing.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use kube::api::ApiResource;
//! use kubeapp_sdk::app::{App, AppError, HealthCheck};
//! use tokio_util::sync::CancellationToken;
//!
//! struct Hello;
//!
//! #[async_trait]
//! impl App for Hello {
//!     fn name(&self) -> &str {
//!         "hello"
//!     }
//!     fn managed_kinds(&self) -> Vec<ApiResource> {
//!         Vec::new()
//!     }
//!     async fn run(&self, stop: CancellationToken) -> Result<(), AppError> {
//!         stop.cancelled().await; // a real app runs its InformerController here
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let app: Arc<dyn App> = Arc::new(Hello);
//! let stop = CancellationToken::new();
//! let running = tokio::spawn({
//!     let (app, stop) = (app.clone(), stop.clone());
//!     async move { app.run(stop).await }
//! });
//! stop.cancel();
//! running.await.expect("joined").expect("ran");
//! assert!(app.health_checks().is_empty());
//! # }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use kube::api::{ApiResource, DynamicObject};
use kube::core::admission::{AdmissionRequest, Operation};
use tokio_util::sync::CancellationToken;

use crate::diagnostics::AppDiagnostics;
use crate::manifest::ManifestData;

/// Any error a user hook or handler may return (kubeapp's one `BoxError`; `kubeapp::operator::BoxError`
/// is this type).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An app failed to build or to run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Building the app from its configuration failed.
    #[error("building app {app}: {message}")]
    Build {
        /// The app's name.
        app: String,
        /// What was wrong.
        message: String,
    },
    /// The app stopped with an error while running (the error is the source).
    #[error("app {app} failed")]
    Run {
        /// The app's name.
        app: String,
        /// The cause.
        source: BoxError,
    },
    /// The app stopped when asked to, but dropped handler calls that were still running when
    /// its shutdown grace ran out: work was left undone (the next start sees those objects
    /// again). A Runner exits with a distinct status for it.
    #[error(
        "app {app} abandoned {calls} handler call(s) still running when its shutdown grace ran \
         out"
    )]
    Abandoned {
        /// The app's name.
        app: String,
        /// How many calls were dropped.
        calls: u64,
    },
}

/// A named check that `/readyz` evaluates on every request.
#[async_trait]
pub trait HealthCheck: Send + Sync {
    /// The name shown in the `/readyz` body (`name: ok|error`).
    fn name(&self) -> String;
    /// `Ok` when healthy, else a short reason.
    async fn check(&self) -> Result<(), String>;
}

/// Why an admission hook did not admit (or could not answer).
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The app has no handler for this kind and operation.
    #[error("{hook} is not implemented for {kind} {operation:?}")]
    NotImplemented {
        /// `validation` or `mutation`.
        hook: &'static str,
        /// The kind of the object.
        kind: String,
        /// The operation requested.
        operation: Operation,
    },
    /// The object is refused, with a message for the user and an optional HTTP-like code
    /// (default 400).
    #[error("denied: {message}")]
    Denied {
        /// Shown to the client that made the request.
        message: String,
        /// The code in the admission response's status.
        code: Option<u16>,
    },
    /// The hook failed; the request is refused with this message.
    #[error("admission hook failed: {0}")]
    Internal(String),
}

impl AdmissionError {
    /// A refusal with `message` and the default code.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::Denied {
            message: message.into(),
            code: None,
        }
    }
}

/// Why a conversion could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The app converts no objects of this kind (or not to this version).
    #[error("conversion of {kind} to {desired_api_version} is not implemented")]
    NotImplemented {
        /// The kind of the object.
        kind: String,
        /// The target `group/version`.
        desired_api_version: String,
    },
    /// The object could not be converted.
    #[error("converting {kind} to {desired_api_version}: {message}")]
    Failed {
        /// The kind of the object.
        kind: String,
        /// The target `group/version`.
        desired_api_version: String,
        /// Why.
        message: String,
    },
}

/// An operator app. See the [module docs](self).
#[async_trait]
pub trait App: Send + Sync + 'static {
    /// The app's name (the manifest's `appName`).
    fn name(&self) -> &str;

    /// The kinds this app owns.
    fn managed_kinds(&self) -> Vec<ApiResource>;

    /// Runs the app's informers and handlers until `stop` is cancelled, then lets in-flight
    /// work finish and returns.
    async fn run(&self, stop: CancellationToken) -> Result<(), AppError>;

    /// Checks that `/readyz` evaluates (for example: every informer has synced).
    fn health_checks(&self) -> Vec<Arc<dyn HealthCheck>> {
        Vec::new()
    }

    /// The app's leader and shard state for the Runner's `/debug/kubeapp` (see
    /// [`diagnostics`](crate::diagnostics)); by default only its name.
    fn diagnostics(&self) -> AppDiagnostics {
        AppDiagnostics::named(self.name())
    }

    /// Prometheus collectors the runner registers in its registry.
    fn metric_collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        Vec::new()
    }

    /// The webhooks the app's manifest declares (see
    /// [`ManifestData::declared_webhooks`](crate::manifest::ManifestData::declared_webhooks)),
    /// e.g. `Widget: validation, conversion`. A runner refuses to start an app that declares any
    /// without a webhook server configured: the apiserver would call a server that is not there.
    /// None by default.
    fn declared_webhooks(&self) -> Vec<String> {
        Vec::new()
    }

    /// Validates an admission request: `Ok(())` admits it.
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        Err(AdmissionError::NotImplemented {
            hook: "validation",
            kind: request.kind.kind.clone(),
            operation: request.operation.clone(),
        })
    }

    /// Mutates an admission request's object: returns the changed object (the webhook server
    /// computes the JSON patch from it).
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        Err(AdmissionError::NotImplemented {
            hook: "mutation",
            kind: request.kind.kind.clone(),
            operation: request.operation.clone(),
        })
    }

    /// Converts one object (as JSON) to `desired_api_version` (`group/version`).
    async fn convert(
        &self,
        object: serde_json::Value,
        desired_api_version: &str,
    ) -> Result<serde_json::Value, ConversionError> {
        let kind = object
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("<unknown kind>")
            .to_string();
        Err(ConversionError::NotImplemented {
            kind,
            desired_api_version: desired_api_version.to_string(),
        })
    }
}

/// Builds an [`App`] from its manifest: what an operator binary or a Runner is handed.
pub trait AppProvider: Send + Sync {
    /// The manifest the app is built from.
    fn manifest(&self) -> &ManifestData;

    /// Builds the app with a client for the cluster.
    fn new_app(&self, client: kube::Client) -> Result<Arc<dyn App>, AppError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bare;

    #[async_trait]
    impl App for Bare {
        fn name(&self) -> &str {
            "bare"
        }
        fn managed_kinds(&self) -> Vec<ApiResource> {
            Vec::new()
        }
        async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
            Ok(())
        }
    }

    fn admission_request(kind: &str) -> AdmissionRequest<DynamicObject> {
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "g.example.com", "version": "v1", "kind": kind},
                "resource": {"group": "g.example.com", "version": "v1", "resource": "things"},
                "operation": "CREATE",
                "userInfo": {},
                "object": {"apiVersion": "g.example.com/v1", "kind": kind, "metadata": {"name": "a"}},
                "dryRun": false
            }
        });
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(review).expect("review");
        review.try_into().expect("request")
    }

    #[tokio::test]
    async fn hooks_answer_not_implemented_by_default() {
        let app = Bare;
        let request = admission_request("Thing");
        let err = app.validate(&request).await.expect_err("no validator");
        assert!(
            matches!(&err, AdmissionError::NotImplemented { hook: "validation", kind, .. } if kind == "Thing"),
            "{err:?}"
        );
        let err = app.mutate(&request).await.expect_err("no mutator");
        assert!(matches!(
            err,
            AdmissionError::NotImplemented {
                hook: "mutation",
                ..
            }
        ));
        let object = serde_json::json!({"apiVersion": "g.example.com/v1", "kind": "Thing"});
        let err = app
            .convert(object, "g.example.com/v2")
            .await
            .expect_err("no converter");
        assert_eq!(
            err.to_string(),
            "conversion of Thing to g.example.com/v2 is not implemented"
        );
    }
}
