//! Where the Evaluating phase's success rate comes from: a Prometheus-compatible query API
//! (`--prometheus-url`), or else a ConfigMap `<canary>-success-rate` with a `rate` key (what the
//! end-to-end test writes).

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ConfigMap;
use kubeapp::prelude::*;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::Canary;

/// The canary's success rate, `None` while nothing was measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuccessRate(pub Option<f64>);

/// A success rate that could not be read (the reconcile is retried).
#[derive(Debug)]
pub struct SourceError(pub String);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceError {}

/// Where success rates are read.
#[derive(Clone, Debug)]
pub enum SuccessRateSource {
    /// The instant-query API of a Prometheus-compatible server at this base URL.
    Prometheus(String),
    /// The `rate` key of the ConfigMap `<canary>-success-rate`.
    ConfigMap,
}

fn failed(what: impl std::fmt::Display) -> ReconcileError {
    ReconcileError::new(SourceError(what.to_string()))
}

impl SuccessRateSource {
    /// The canary's current success rate (`client` reads the ConfigMap).
    ///
    /// # Errors
    ///
    /// The source cannot be reached or answers something that is not a rate.
    pub async fn read(
        &self,
        canary: &Canary,
        client: &kube::Client,
    ) -> Result<SuccessRate, ReconcileError> {
        match self {
            Self::ConfigMap => {
                let api: Api<ConfigMap> =
                    Api::namespaced(client.clone(), &canary.namespace().unwrap_or_default());
                let name = format!("{}-success-rate", canary.name_any());
                let Some(map) = api.get_opt(&name).await.map_err(failed)? else {
                    return Ok(SuccessRate(None));
                };
                let rate = map.data.as_ref().and_then(|d| d.get("rate"));
                rate.map(|r| {
                    r.parse::<f64>()
                        .map_err(|e| failed(format!("{name}: rate {r:?}: {e}")))
                })
                .transpose()
                .map(SuccessRate)
            }
            Self::Prometheus(url) => query(url, &canary.query()).await.map(SuccessRate),
        }
    }
}

/// The first sample of an instant query, `None` for an empty result.
async fn query(base: &str, promql: &str) -> Result<Option<f64>, ReconcileError> {
    let uri = format!(
        "{}/api/v1/query?query={}",
        base.trim_end_matches('/'),
        utf8_percent_encode(promql, NON_ALPHANUMERIC)
    );
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let request = http::Request::get(&uri)
        .body(http_body_util::Empty::new())
        .map_err(|e| failed(format!("{uri}: {e}")))?;
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .map_err(|_| failed(format!("{uri}: no answer within 10 s")))?
        .map_err(|e| failed(format!("{uri}: {e}")))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(format!("{uri}: {e}")))?
        .to_bytes();
    if !status.is_success() {
        return Err(failed(format!("{uri}: HTTP {status}")));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|e| failed(format!("{uri}: {e}")))?;
    if answer["status"] != "success" {
        return Err(failed(format!("{uri}: {}", answer["error"])));
    }
    let Some(sample) = answer["data"]["result"].get(0) else {
        return Ok(None);
    };
    let value = sample["value"][1].as_str().unwrap_or_default();
    value
        .parse::<f64>()
        .map(Some)
        .map_err(|e| failed(format!("{uri}: sample {value:?}: {e}")))
}
