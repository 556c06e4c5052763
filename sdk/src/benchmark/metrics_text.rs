//! Reading an operator's `/metrics` (Prometheus text format): fetching it, and the sum of one
//! metric's series, e.g. the handler calls.
//!
//! A kubeapp operator's Runner counts every handler call in two histograms (one observation per
//! call, labelled `event_type` and `kind`): [`RECONCILER_CALLS`] for reconcilers and
//! [`WATCHER_CALLS`] for watchers; [`handler_calls`] sums both, every label set.

use std::net::SocketAddr;
use std::time::Duration;

/// The count series of the Runner's reconciler-call histogram.
pub const RECONCILER_CALLS: &str = "reconciler_process_duration_seconds_count";

/// The count series of the Runner's watcher-call histogram.
pub const WATCHER_CALLS: &str = "watcher_process_duration_seconds_count";

/// How long one fetch of `/metrics` may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest `/metrics` answer read (a larger one is an error, not a memory blow-up).
const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Fetching `/metrics` failed.
#[derive(Debug, thiserror::Error)]
#[error("reading http://{addr}/metrics: {problem}")]
pub struct FetchError {
    /// Where the metrics are served.
    pub addr: SocketAddr,
    /// What went wrong.
    pub problem: String,
}

/// The sum of every series whose metric name `matches` in Prometheus text `text`, or `None`
/// when there is no such series.
pub fn sum_of(text: &str, matches: impl Fn(&str) -> bool) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if !matches(&line[..name_end]) {
            continue;
        }
        // The value follows the labels (which may hold spaces inside quotes): after the `}`.
        let rest = match line[name_end..].rfind('}') {
            Some(close) => &line[name_end + close + 1..],
            None => &line[name_end..],
        };
        if let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

/// The handler calls (reconciler and watcher, every kind and event type) in a kubeapp
/// operator's metrics text, or `None` when it has neither histogram.
pub fn handler_calls(text: &str) -> Option<u64> {
    let sum = sum_of(text, |name| {
        name == RECONCILER_CALLS || name == WATCHER_CALLS
    })?;
    // Counts are whole numbers; the text format writes them as floats.
    Some(sum.round() as u64)
}

/// GETs `http://addr/metrics` (HTTP/1.0, no keep-alive) and returns the body.
///
/// # Errors
///
/// When nothing answers within 10 s, the answer is not `200`, or it is larger than 64 MiB.
pub async fn fetch(addr: SocketAddr) -> Result<String, FetchError> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let failed = |problem: String| FetchError { addr, problem };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut response = Vec::new();
        stream
            .take(MAX_BYTES + 1)
            .read_to_end(&mut response)
            .await
            .map_err(|e| failed(e.to_string()))?;
        if response.len() as u64 > MAX_BYTES {
            return Err(failed(format!(
                "the answer is larger than {MAX_BYTES} bytes"
            )));
        }
        let text = String::from_utf8(response).map_err(|_| failed("not UTF-8".into()))?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| failed("no HTTP header".into()))?;
        let status = head.split(' ').nth(1).unwrap_or_default();
        if status != "200" {
            return Err(failed(format!("answered {status}")));
        }
        Ok(body.to_string())
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .map_err(|_| failed(format!("no answer within {FETCH_TIMEOUT:?}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two kinds, a reconciler and a watcher; buckets and sums are not calls.
    const OPERATOR: &str = "\
# TYPE reconciler_process_duration_seconds histogram
reconciler_process_duration_seconds_bucket{event_type=\"CREATE\",kind=\"Widget\",le=\"0.1\"} 9
reconciler_process_duration_seconds_sum{event_type=\"CREATE\",kind=\"Widget\"} 0.25
reconciler_process_duration_seconds_count{event_type=\"CREATE\",kind=\"Widget\"} 30
reconciler_process_duration_seconds_count{event_type=\"UPDATE\",kind=\"Widget\"} 12
watcher_process_duration_seconds_count{event_type=\"ADD\",kind=\"Gadget\"} 5
informer_events_total{kind=\"Widget\"} 99
";

    #[test]
    fn handler_calls_are_reconciler_and_watcher_calls_of_every_label_set() {
        assert_eq!(handler_calls(OPERATOR), Some(47));
        assert_eq!(handler_calls("go_goroutines 12\n"), None);
    }

    #[test]
    fn labels_with_spaces_do_not_hide_the_value() {
        let text = "m{a=\"x y\",b=\"}\"} 5\nm 2\n";
        assert_eq!(sum_of(text, |n| n == "m"), Some(7.0));
    }

    #[tokio::test]
    async fn fetch_reads_the_body_of_a_200_and_names_anything_else() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            for answer in [
                "HTTP/1.0 200 OK\r\n\r\nm 1\n",
                "HTTP/1.0 503 Service Unavailable\r\n\r\n",
            ] {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                socket.write_all(answer.as_bytes()).await.expect("write");
            }
        });
        assert_eq!(fetch(addr).await.expect("200"), "m 1\n");
        let err = fetch(addr).await.expect_err("503");
        assert!(err.to_string().ends_with("/metrics: answered 503"), "{err}");
    }
}
