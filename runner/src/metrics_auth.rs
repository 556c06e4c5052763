//! Authentication and authorization of the metrics port (opt-in): a request to `/metrics` or
//! `/debug/kubeapp` must carry a bearer token that the apiserver accepts (a `TokenReview`) for a
//! user allowed to `get` that path (a `SubjectAccessReview` of the non-resource URL), as
//! controller-runtime's secure metrics and kube-rbac-proxy do. `/livez` and `/readyz` stay open
//! for the kubelet.
//!
//! Decisions are cached per (token, path) for a short time (allowed 60 s, refused 10 s), so a
//! Prometheus scraping every 15 s costs the apiserver two reviews a minute, not two per scrape;
//! the cache is bounded (a client sending a new token per request costs two reviews each, never
//! unbounded memory), and tokens longer than 16 KiB are refused without a review.
//!
//! The operator needs `create` on `tokenreviews` (authentication.k8s.io) and
//! `subjectaccessreviews` (authorization.k8s.io); a scraper needs a (Cluster)Role with
//! `nonResourceURLs: ["/metrics"]` (and `"/debug/kubeapp"` for the diagnostics), verb `get`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// How long an allowed request's decision is reused.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refused request's decision is reused.
const REFUSED_FOR: Duration = Duration::from_secs(10);
/// At most this many cached decisions (the cache is emptied when full).
const MAX_CACHED: usize = 1024;
/// Longer bearer tokens are refused without asking the apiserver.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a request was not let through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsAuthError {
    /// No bearer token, or one the apiserver did not accept (HTTP 401).
    #[error("unauthenticated: {reason}")]
    Unauthenticated {
        /// What was wrong with the token.
        reason: String,
    },
    /// The token's user may not `get` the path (HTTP 403).
    #[error("forbidden: {user} may not get {path}")]
    Forbidden {
        /// The user the token belongs to.
        user: String,
        /// The path asked for.
        path: String,
    },
    /// The apiserver could not be asked (HTTP 503).
    #[error("the apiserver could not review the request: {reason}")]
    ReviewFailed {
        /// The client's error.
        reason: String,
    },
}

/// A cached decision's key: the token and the path.
type DecisionKey = (String, String);
/// A cached decision and until when it holds.
type Decision = (Result<(), MetricsAuthError>, Instant);

/// Reviews bearer tokens against the apiserver; see the [module docs](self).
pub struct MetricsAuth {
    client: kube::Client,
    decisions: Mutex<HashMap<DecisionKey, Decision>>,
}

impl std::fmt::Debug for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAuth").finish_non_exhaustive()
    }
}

impl MetricsAuth {
    /// Reviews tokens with `client` (the operator's own identity).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            decisions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the `Authorization` header value `authorization` may `get` `path`.
    ///
    /// # Errors
    ///
    /// See [`MetricsAuthError`]: no or a bad token, a user without the permission, or an
    /// apiserver that could not be asked (not cached).
    pub async fn check(
        &self,
        authorization: Option<&str>,
        path: &str,
    ) -> Result<(), MetricsAuthError> {
        let token = bearer_token(authorization)?;
        let key = (token.to_string(), path.to_string());
        if let Some(cached) = self.cached(&key) {
            return cached;
        }
        let decision = self.review(token, path).await;
        if !matches!(decision, Err(MetricsAuthError::ReviewFailed { .. })) {
            let ttl = if decision.is_ok() {
                ALLOWED_FOR
            } else {
                REFUSED_FOR
            };
            let mut decisions = self
                .decisions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if decisions.len() >= MAX_CACHED {
                decisions.clear();
            }
            decisions.insert(key, (decision.clone(), Instant::now() + ttl));
        }
        decision
    }

    fn cached(&self, key: &DecisionKey) -> Option<Result<(), MetricsAuthError>> {
        let decisions = self
            .decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (decision, until) = decisions.get(key)?;
        (Instant::now() < *until).then(|| decision.clone())
    }

    async fn review(&self, token: &str, path: &str) -> Result<(), MetricsAuthError> {
        let failed = |error: kube::Error| MetricsAuthError::ReviewFailed {
            reason: error.to_string(),
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(failed)?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Err(MetricsAuthError::Unauthenticated {
                    reason: status
                        .error
                        .unwrap_or_else(|| "the apiserver did not accept the token".into()),
                });
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(failed)?;
        if decided.status.is_some_and(|status| status.allowed) {
            Ok(())
        } else {
            Err(MetricsAuthError::Forbidden {
                user: name,
                path: path.to_string(),
            })
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_token(authorization: Option<&str>) -> Result<&str, MetricsAuthError> {
    let unauthenticated = |reason: &str| MetricsAuthError::Unauthenticated {
        reason: reason.to_string(),
    };
    let value = authorization.ok_or_else(|| unauthenticated("no Authorization header"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthenticated("the Authorization header is not `Bearer <token>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthenticated(
            "the Authorization header is not `Bearer <token>`",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(unauthenticated("the bearer token is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(unauthenticated("the bearer token is longer than 16 KiB"));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::{MetricsAuthError, bearer_token};

    #[test]
    fn only_a_bearer_header_with_a_sane_token_is_reviewed() {
        assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Ok("abc"));
        for bad in [None, Some("abc"), Some("Basic abc"), Some("Bearer  ")] {
            assert!(
                matches!(
                    bearer_token(bad),
                    Err(MetricsAuthError::Unauthenticated { .. })
                ),
                "{bad:?}"
            );
        }
        let long = format!("Bearer {}", "a".repeat(16 * 1024 + 1));
        assert!(bearer_token(Some(&long)).is_err());
    }
}
