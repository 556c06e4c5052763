//! Where an analysis's values come from: the [`MetricProvider`] trait (one async query, one
//! value), and [`PrometheusProvider`], an instant query against a Prometheus-compatible HTTP API
//! (with a timeout and a bound on the answer's size).

use std::time::Duration;

use async_trait::async_trait;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// The largest answer read from a provider (a hostile or broken server cannot exhaust memory).
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Why a query gave no value.
#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    /// The request failed: connection refused, a timeout, a broken answer.
    #[error("querying {url}")]
    Request {
        /// The URL asked.
        url: String,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered an HTTP error.
    #[error("querying {url}: HTTP {status}: {body}")]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer.
        body: String,
    },
    /// The answer was longer than [`MAX_ANSWER_BYTES`].
    #[error("querying {url}: the answer is longer than {MAX_ANSWER_BYTES} bytes")]
    TooLong {
        /// The URL asked.
        url: String,
    },
    /// The answer is not what the API promises, or the query's result is not one value.
    #[error("querying {url}: {reason}")]
    Answer {
        /// The URL asked.
        url: String,
        /// What is wrong with the answer.
        reason: String,
    },
}

/// A source of measured values.
///
/// [`PrometheusProvider`] is the one kubeapp ships; another source plugs in with this trait:
///
/// ```
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "Rollout", namespaced, status = "kubeapp_phases::PhaseStatus")]
/// # pub struct RolloutSpec { app: String }
/// # #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// # enum Step { Waiting, Evaluating, Done, Failed }
/// # impl kubeapp_phases::Phase for Step {
/// #     const ALL: &'static [Self] = &[Step::Waiting, Step::Evaluating, Step::Done, Step::Failed];
/// #     const INITIAL: Self = Step::Waiting;
/// #     fn name(&self) -> &'static str { match self { Step::Waiting => "Waiting",
/// #         Step::Evaluating => "Evaluating", Step::Done => "Done", Step::Failed => "Failed" } }
/// #     fn is_final(&self) -> bool { matches!(self, Step::Done | Step::Failed) }
/// # }
/// use async_trait::async_trait;
/// use kubeapp_phases::provider::{MetricError, MetricProvider};
/// use kubeapp_phases::{Analysis, Comparison, PhaseMachine, Transition};
///
/// /// Every query measures the same value (a test double, or a value from elsewhere).
/// struct Fixed(f64);
///
/// #[async_trait]
/// impl MetricProvider for Fixed {
///     async fn measure(&self, _query: &str) -> Result<Option<f64>, MetricError> {
///         Ok(Some(self.0))
///     }
/// }
///
/// let analysis = Analysis::new("successRate", "anything").success(">= 0.95".parse::<Comparison>()?);
/// let machine = PhaseMachine::<Rollout, Step>::new()
///     .worker(Step::Waiting, |_work, _ctx| async move { Ok(Transition::to(Step::Evaluating)) })
///     .analysis(Step::Evaluating, move |_| analysis.clone(), Step::Done, Step::Failed)
///     .metric_provider(Fixed(0.99));
/// assert!(machine.build().is_ok(), "an analysis needs a provider, and has one");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[async_trait]
pub trait MetricProvider: Send + Sync {
    /// The value of `query` now; `Ok(None)` when the query has no value yet (an empty result,
    /// or NaN).
    ///
    /// # Errors
    ///
    /// [`MetricError`] when the source cannot be asked or answers something that is not one
    /// value.
    async fn measure(&self, query: &str) -> Result<Option<f64>, MetricError>;
}

/// Instant queries (`GET /api/v1/query`) against a Prometheus-compatible API.
///
/// A query must give one value: a scalar, or a vector of at most one series (aggregate it,
/// e.g. with `sum` or `max`); more series are an error saying so.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use kubeapp_phases::{MetricProvider, PrometheusProvider};
///
/// let prometheus = PrometheusProvider::new("http://prometheus.monitoring:9090", Duration::from_secs(10))?;
/// let up = prometheus.measure("max(up{job=\"shop\"})").await?;
/// println!("{up:?}"); // None until the series exists
/// # Ok(())
/// # }
/// ```
///
/// A machine takes it with [`PhaseMachine::prometheus`](crate::PhaseMachine::prometheus)`(url,
/// timeout)` or [`metric_provider`](crate::PhaseMachine::metric_provider).
#[derive(Clone, Debug)]
pub struct PrometheusProvider {
    base: String,
    client: reqwest::Client,
}

impl PrometheusProvider {
    /// Queries the API at `base` (e.g. `http://prometheus.monitoring:9090`), each query within
    /// `timeout`.
    ///
    /// # Errors
    ///
    /// [`MetricError::Request`] when the HTTP client cannot be built.
    pub fn new(base: impl Into<String>, timeout: Duration) -> Result<Self, MetricError> {
        let base = base.into().trim_end_matches('/').to_string();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|source| MetricError::Request {
                url: base.clone(),
                source,
            })?;
        Ok(Self { base, client })
    }
}

#[async_trait]
impl MetricProvider for PrometheusProvider {
    async fn measure(&self, query: &str) -> Result<Option<f64>, MetricError> {
        let url = format!(
            "{}/api/v1/query?query={}",
            self.base,
            utf8_percent_encode(query, NON_ALPHANUMERIC)
        );
        let request = |source| MetricError::Request {
            url: url.clone(),
            source,
        };
        let mut response = self.client.get(&url).send().await.map_err(request)?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(request)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(MetricError::TooLong { url });
            }
            body.extend_from_slice(&chunk);
        }
        let status = response.status();
        if !status.is_success() {
            return Err(MetricError::Status {
                url,
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).chars().take(200).collect(),
            });
        }
        let answer: Value = serde_json::from_slice(&body).map_err(|e| MetricError::Answer {
            url: url.clone(),
            reason: format!("not JSON: {e}"),
        })?;
        value_of(&answer).map_err(|reason| MetricError::Answer { url, reason })
    }
}

/// The one value of an instant query's answer.
fn value_of(answer: &Value) -> Result<Option<f64>, String> {
    if answer["status"] != "success" {
        return Err(format!("the query failed: {}", answer["error"]));
    }
    let data = &answer["data"];
    let sample = match data["resultType"].as_str() {
        Some("scalar") => &data["result"],
        Some("vector") => {
            let series = data["result"].as_array().map_or(0, Vec::len);
            match series {
                0 => return Ok(None),
                1 => &data["result"][0]["value"],
                n => {
                    return Err(format!(
                        "the query gave {n} series; an analysis needs one value (aggregate \
                         it, e.g. with sum or max)"
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "result type {other:?}: expected a scalar or a vector"
            ));
        }
    };
    let text = sample[1]
        .as_str()
        .ok_or_else(|| format!("no sample value in {sample}"))?;
    let value: f64 = text
        .parse()
        .map_err(|_| format!("the sample {text:?} is not a number"))?;
    Ok((!value.is_nan()).then_some(value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Serves one HTTP answer with `body` to the first request on a loopback port; returns the
    /// base URL.
    async fn serve_once(body: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut request = [0_u8; 4096];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
        });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn a_prometheus_answer_is_read_and_one_too_long_is_refused_at_the_bound() {
        let answer = json!({"status": "success",
                            "data": {"resultType": "vector", "result": [{"value": [1.0, "0.25"]}]}});
        let base = serve_once(answer.to_string().into_bytes()).await;
        let provider = PrometheusProvider::new(base, Duration::from_secs(10)).expect("a client");
        assert_eq!(
            provider.measure("sum(up)").await.expect("a value"),
            Some(0.25)
        );

        let base = serve_once(vec![b' '; MAX_ANSWER_BYTES + 1]).await;
        let provider = PrometheusProvider::new(base, Duration::from_secs(10)).expect("a client");
        let error = provider.measure("up").await.expect_err("too long");
        assert!(matches!(error, MetricError::TooLong { .. }), "{error}");
        assert!(
            error.to_string().contains("longer than 1048576 bytes"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_provider_is_an_error_naming_the_url() {
        // A port nothing listens on: bound, then dropped.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        drop(listener);
        let provider =
            PrometheusProvider::new(format!("http://{address}/"), Duration::from_secs(5))
                .expect("a client");
        let error = provider
            .measure("up{job=\"x\"}")
            .await
            .expect_err("refused");
        assert!(matches!(error, MetricError::Request { .. }), "{error}");
        assert!(
            error.to_string().contains(&format!(
                "querying http://{address}/api/v1/query?query=up%7Bjob%3D%22x%22%7D"
            )),
            "{error}"
        );
    }

    #[test]
    fn an_answer_gives_one_value_none_or_an_error_saying_why() {
        let vector = |result: Value| json!({"status": "success", "data": {"resultType": "vector", "result": result}});
        let one = vector(json!([{"metric": {}, "value": [1.0, "0.97"]}]));
        assert_eq!(value_of(&one), Ok(Some(0.97)));
        assert_eq!(
            value_of(&vector(json!([]))),
            Ok(None),
            "no series: no value yet"
        );
        let nan = vector(json!([{"metric": {}, "value": [1.0, "NaN"]}]));
        assert_eq!(value_of(&nan), Ok(None), "NaN: no value yet");
        let scalar =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "0.5"]}});
        assert_eq!(value_of(&scalar), Ok(Some(0.5)));
        let two = vector(json!([{"value": [1.0, "1"]}, {"value": [1.0, "2"]}]));
        assert!(value_of(&two).expect_err("two").contains("2 series"));
        let failed = json!({"status": "error", "error": "parse error"});
        assert!(
            value_of(&failed)
                .expect_err("failed")
                .contains("parse error")
        );
        let text = vector(json!([{"value": [1.0, "high"]}]));
        assert!(
            value_of(&text)
                .expect_err("text")
                .contains("\"high\" is not a number")
        );
    }
}
