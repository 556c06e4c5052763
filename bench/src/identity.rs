//! Who the contender connects as: the control plane's admin (in `system:masters`, which API
//! priority and fairness exempts), or a ServiceAccount with exactly the RBAC a contender needs,
//! authenticated by a token from the TokenRequest API, as an operator runs in a real cluster
//! (its requests go through API priority and fairness like any workload's).

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{AuthInfo, Context, Kubeconfig, NamedAuthInfo, NamedContext};
use kubeapp::sdk::testenv::TestEnv;

use crate::kind::{GROUP, PLURAL};

/// The name of the contender's ServiceAccount (and of its Role and RoleBinding).
pub const SERVICE_ACCOUNT: &str = "kubeapp-bench-operator";

/// How long the contender's token is valid (longer than any run).
const TOKEN_SECONDS: i64 = 6 * 3600;

/// Which identity the contender runs as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityKind {
    /// The control plane's admin (`system:masters`: exempt from API priority and fairness).
    #[default]
    Admin,
    /// A ServiceAccount with a Role on the bench kind and a TokenRequest token.
    ServiceAccount,
}

/// The identity a contender connects as.
#[derive(Clone, Debug)]
pub struct OperatorIdentity {
    /// The user name in the audit log.
    pub user: String,
    /// The kubeconfig file the contender gets.
    pub kubeconfig: PathBuf,
}

/// Setting up the ServiceAccount identity failed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A request failed.
    #[error("{action}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// The admin kubeconfig names no cluster.
    #[error("the admin kubeconfig names no cluster")]
    NoCluster,
    /// The kubeconfig could not be written.
    #[error("writing {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The admin identity of `env`.
pub fn admin(env: &TestEnv) -> OperatorIdentity {
    OperatorIdentity {
        user: kubeapp::sdk::benchmark::audit::ADMIN_USER.to_string(),
        kubeconfig: env.kubeconfig_path().to_path_buf(),
    }
}

/// The rules of the contender's Role: what an operator of the bench kind needs, no more (read
/// and write the objects, write their status).
pub fn rules() -> Vec<PolicyRule> {
    let rule = |resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![GROUP.to_string()]),
        resources: Some(vec![resource.to_string()]),
        verbs: verbs.iter().map(ToString::to_string).collect(),
        ..PolicyRule::default()
    };
    vec![
        rule(PLURAL, &["get", "list", "watch", "update", "patch"]),
        rule(&format!("{PLURAL}/status"), &["get", "update", "patch"]),
    ]
}

/// Creates the ServiceAccount [`SERVICE_ACCOUNT`] in `namespace` with a Role of [`rules`], asks
/// for a token, and writes a kubeconfig with it into `dir`.
///
/// # Errors
///
/// When a request fails or the file cannot be written.
pub async fn service_account(
    env: &TestEnv,
    namespace: &str,
    dir: &Path,
) -> Result<OperatorIdentity, IdentityError> {
    let kube = |action| move |source| IdentityError::Kube { action, source };
    let client = env.client();
    let meta = || ObjectMeta {
        name: Some(SERVICE_ACCOUNT.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectMeta::default()
    };
    let post = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    accounts
        .create(
            &post,
            &ServiceAccount {
                metadata: meta(),
                ..ServiceAccount::default()
            },
        )
        .await
        .map_err(kube("creating the ServiceAccount"))?;
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(
            &post,
            &Role {
                metadata: meta(),
                rules: Some(rules()),
            },
        )
        .await
        .map_err(kube("creating the Role"))?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(
            &post,
            &RoleBinding {
                metadata: meta(),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_string()),
                    kind: "Role".to_string(),
                    name: SERVICE_ACCOUNT.to_string(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".to_string(),
                    name: SERVICE_ACCOUNT.to_string(),
                    namespace: Some(namespace.to_string()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .map_err(kube("creating the RoleBinding"))?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(SERVICE_ACCOUNT, &post, &request)
        .await
        .map_err(kube("requesting a token (TokenRequest)"))?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    let kubeconfig = token_kubeconfig(env.kubeconfig(), &token)?;
    let path = dir.join("kubeconfig-service-account.json");
    // JSON is YAML: kube reads it as a kubeconfig.
    let text = serde_json::to_string_pretty(&kubeconfig).map_err(|e| IdentityError::Write {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&path, text).map_err(|source| IdentityError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(OperatorIdentity {
        user: format!("system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"),
        kubeconfig: path,
    })
}

/// The admin kubeconfig's cluster with a bearer token as the only user.
fn token_kubeconfig(admin: &Kubeconfig, token: &str) -> Result<Kubeconfig, IdentityError> {
    let cluster = admin.clusters.first().ok_or(IdentityError::NoCluster)?;
    let user = SERVICE_ACCOUNT.to_string();
    Ok(Kubeconfig {
        clusters: vec![cluster.clone()],
        auth_infos: vec![NamedAuthInfo {
            name: user.clone(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: user.clone(),
            context: Some(Context {
                cluster: cluster.name.clone(),
                user: Some(user.clone()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(user),
        kind: Some("Config".to_string()),
        api_version: Some("v1".to_string()),
        ..Kubeconfig::default()
    })
}
