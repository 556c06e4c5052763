//! `--diagnostics URL`: what the operator process itself reports about the traced object's kind
//! on its `/debug/kubeapp` (its informer's cache and watch, the kind's queue and failures, its
//! leader and shard state), read over HTTP, e.g. through `kubectl port-forward`, with a bearer
//! token from `--token-file` when the operator runs with `--metrics-auth`.

use std::path::Path;
use std::time::Duration;

use kubeapp::sdk::diagnostics::Diagnostics;

use super::model::OperatorView;
use crate::target::Target;

/// How long the operator gets to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The operator's report for `target`'s kind, read from `base` (`http://host:port`, or
/// `host:port`); an error says what failed, for the trace's `unreadable` list.
pub(super) async fn read(
    base: &str,
    token_file: Option<&Path>,
    target: &Target,
) -> Result<OperatorView, String> {
    let base = base.trim_end_matches('/');
    let url = if base.contains("://") {
        format!("{base}/debug/kubeapp")
    } else {
        format!("http://{base}/debug/kubeapp")
    };
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| format!("{url}: {e}"))?;
    let mut request = client.get(&url);
    if let Some(path) = token_file {
        let token = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the token {}: {e}", path.display()))?;
        request = request.bearer_auth(token.trim());
    }
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: {status}: {}", body.trim()));
    }
    let report: Diagnostics = serde_json::from_str(&body)
        .map_err(|e| format!("{url}: not a kubeapp diagnostics report: {e}"))?;
    Ok(view(url, report, target))
}

/// The parts of `report` about `target`'s kind.
fn view(url: String, report: Diagnostics, target: &Target) -> OperatorView {
    let resource = &target.resource;
    let namespace = target.namespace.as_deref();
    // The informer that caches the object: its kind's, watching its namespace or all.
    let informer = report.informers.into_iter().find(|i| {
        i.kind == resource.kind
            && i.api_version == resource.api_version
            && (i.namespace.is_none() || i.namespace.as_deref() == namespace)
    });
    let kind = report.kinds.into_iter().find(|k| k.kind == resource.plural);
    OperatorView {
        url,
        informer,
        kind,
        apps: report.apps,
    }
}
