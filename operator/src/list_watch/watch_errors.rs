//! How the informer reports a failed list or watch.
//!
//! Every failure is counted (`kubernetes_watch_errors_total`) and retried after kube-runtime's
//! backoff. Most are logged as a warning each time. A `404 Not Found` on the list is different:
//! it means the kind's resource is not served at all, most often because its CRD is not
//! installed (or does not serve this version), and it will fail the same way on every retry
//! until someone installs it. So it is **one error line** per outage, naming the CRD and the
//! command that installs it, and the retries after it are logged at debug level only. A list
//! that completes ends the outage: a later one gets its own line.

use kube::api::ApiResource;
use kube::runtime::watcher;

/// The informer's record of what it reported (see the [module docs](self)).
pub(super) struct WatchErrorLog {
    /// Group, version and plural of the kind, when the informer lists from an apiserver.
    resource: Option<ApiResource>,
    /// A 404 was reported since the last list began.
    not_found_reported: bool,
}

impl WatchErrorLog {
    pub(super) fn new(resource: Option<ApiResource>) -> Self {
        Self {
            resource,
            not_found_reported: false,
        }
    }

    /// A list completed: the next 404 is a new outage. (Not when a list begins: kube-runtime's
    /// watcher announces a list before it asks for it, so a failing list begins every retry.)
    pub(super) fn listed(&mut self) {
        self.not_found_reported = false;
    }

    /// Logs `error` of the informer of `kind`.
    pub(super) fn report(&mut self, kind: &str, error: &watcher::Error) {
        let not_found = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 404,
            _ => false,
        };
        match (&self.resource, not_found) {
            (Some(resource), true) if !self.not_found_reported => {
                self.not_found_reported = true;
                tracing::error!(kind, %error, "{}", not_installed(resource));
            }
            (Some(_), true) => {
                tracing::debug!(kind, %error, "still not served (404); retrying after backoff");
            }
            _ => tracing::warn!(kind, %error, "watch failed; retrying after backoff"),
        }
    }
}

/// The line for a kind whose resource the apiserver does not serve.
fn not_installed(resource: &ApiResource) -> String {
    let listing = format!(
        "listing {} {} answered 404 Not Found",
        resource.api_version, resource.plural
    );
    if resource.group.is_empty() {
        return format!(
            "the API version {} is not served by this apiserver ({listing}); retrying quietly",
            resource.api_version
        );
    }
    let crd = format!("{}.{}", resource.plural, resource.group);
    let binary = std::env::args_os()
        .next()
        .and_then(|path| {
            std::path::Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "<operator>".to_string());
    format!(
        "the CRD {crd} is not installed, or does not serve version {version} ({listing}): \
         install it, e.g. `{binary} crd | kubectl apply -f -` for a kubeapp operator binary; \
         retrying quietly until it is served",
        version = resource.version
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_crd_is_named_with_the_command_that_installs_it() {
        let resource = ApiResource {
            group: "shop.example.com".into(),
            version: "v1".into(),
            api_version: "shop.example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let line = not_installed(&resource);
        assert!(
            line.starts_with(
                "the CRD widgets.shop.example.com is not installed, or does not serve version v1 \
                 (listing shop.example.com/v1 widgets answered 404 Not Found): install it, e.g. `"
            ),
            "{line}"
        );
        assert!(line.contains(" crd | kubectl apply -f -`"), "{line}");
    }
}
