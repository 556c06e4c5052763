//! Admission of `Template`s: a validator that rejects specs which cannot render a ConfigMap, and
//! a mutator that labels every `Template` with the app that renders it.
//!
//! Both are plain sdk handlers ([`Validator`], [`Mutator`]) of the stored version `v1`; the
//! manifest declares admission on `v1` only and the apiserver converts requests made in `v2`
//! before calling them (see `manifest.yaml`).
//!
//! What the validator checks, all problems reported at once in one message:
//!
//! - there is at least one key (an empty ConfigMap is almost always a mistake);
//! - every key is a valid ConfigMap key: letters, digits, `-`, `_` and `.`, at most 253
//!   characters, not `.` or `..` and not starting with `..` (the apiserver's own rule, which
//!   would otherwise only fail later, when the reconciler applies the ConfigMap);
//! - keys and values together fit in a ConfigMap (1 MiB).
//!
//! It checks new objects (`CREATE`) and updates that change the spec. Updates that leave the
//! spec alone (finalizers, labels, the deletion of an object) are always admitted: an object
//! stored before the validator existed must still be deletable, and the opinionated wrapper's
//! finalizer patches must never be refused.

use async_trait::async_trait;
use kube::ResourceExt;
use kube::core::admission::Operation;
use kubeapp::sdk::admission::{Mutator, TypedAdmissionRequest, Validator};
use kubeapp::sdk::app::AdmissionError;

use crate::kind::{Template, TemplateSpec};

/// The label the mutator puts on every `Template`, naming the app that renders it.
pub const OPERATOR_LABEL: &str = "reconciler.example.kubeapp.dev/operator";

/// The most a ConfigMap may hold, keys and values together (the apiserver's limit).
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

/// The longest ConfigMap key.
const MAX_KEY_LENGTH: usize = 253;

/// Why `key` is not a valid ConfigMap key, if it is not.
fn key_problem(key: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if key.is_empty() {
        Some("a key is empty".to_string())
    } else if key.len() > MAX_KEY_LENGTH {
        Some(format!(
            "key {:?}... is {} characters long, more than {MAX_KEY_LENGTH}",
            &key[..key.char_indices().nth(20).map_or(key.len(), |(i, _)| i)],
            key.len()
        ))
    } else if !key.chars().all(allowed) {
        Some(format!(
            "key {key:?} is not a valid ConfigMap key: use only letters, digits, '-', '_' and '.'"
        ))
    } else if key == "." || key.starts_with("..") {
        Some(format!(
            "key {key:?} is not a valid ConfigMap key: it must not be '.' or start with '..'"
        ))
    } else {
        None
    }
}

/// Every reason why `spec` cannot render a ConfigMap; empty when it can.
pub fn problems(spec: &TemplateSpec) -> Vec<String> {
    if spec.data.is_empty() {
        return vec!["it has no data: a Template needs at least one key".to_string()];
    }
    let mut problems: Vec<String> = spec.data.keys().filter_map(|k| key_problem(k)).collect();
    let size: usize = spec.data.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_CONFIG_MAP_BYTES {
        problems.push(format!(
            "its data is {size} bytes, more than the {MAX_CONFIG_MAP_BYTES} a ConfigMap holds"
        ));
    }
    problems
}

/// The validator of `Template`s; see the [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct TemplateValidator;

#[async_trait]
impl Validator<Template> for TemplateValidator {
    async fn validate(
        &self,
        request: &TypedAdmissionRequest<Template>,
    ) -> Result<(), AdmissionError> {
        let Some(template) = &request.object else {
            return Ok(());
        };
        let spec_unchanged = request.operation == Operation::Update
            && request.old_object.as_ref().map(|old| &old.spec) == Some(&template.spec);
        if spec_unchanged || template.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let problems = problems(&template.spec);
        if problems.is_empty() {
            return Ok(());
        }
        Err(AdmissionError::denied(format!(
            "Template {:?} cannot render a ConfigMap: {}",
            template.name_any(),
            problems.join("; ")
        )))
    }
}

/// The mutator of `Template`s: sets [`OPERATOR_LABEL`] to the app's name (the webhook server
/// turns the returned object into a JSON patch). Objects being deleted are left alone.
#[derive(Clone, Debug)]
pub struct TemplateMutator {
    app: String,
}

impl TemplateMutator {
    /// A mutator labelling Templates with `app`.
    pub fn new(app: impl Into<String>) -> Self {
        Self { app: app.into() }
    }
}

#[async_trait]
impl Mutator<Template> for TemplateMutator {
    async fn mutate(
        &self,
        request: &TypedAdmissionRequest<Template>,
    ) -> Result<Template, AdmissionError> {
        let mut template = request.object.clone().ok_or_else(|| {
            AdmissionError::Internal(format!(
                "{:?} request without an object for Template {:?}",
                request.operation, request.name
            ))
        })?;
        if template.metadata.deletion_timestamp.is_none() {
            template
                .labels_mut()
                .insert(OPERATOR_LABEL.to_string(), self.app.clone());
        }
        Ok(template)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn template(data: &[(&str, &str)]) -> Template {
        let data = data
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        Template::new("t", TemplateSpec { data })
    }

    fn request(
        operation: Operation,
        object: Template,
        old: Option<Template>,
    ) -> TypedAdmissionRequest<Template> {
        TypedAdmissionRequest {
            operation,
            object: Some(object),
            old_object: old,
            namespace: Some("ns".into()),
            name: "t".into(),
            username: None,
            dry_run: false,
        }
    }

    fn denial(result: Result<(), AdmissionError>) -> String {
        match result {
            Err(AdmissionError::Denied { message, .. }) => message,
            other => panic!("not denied: {other:?}"),
        }
    }

    #[test]
    fn valid_keys_pass() {
        let spec = template(&[("app.conf", "x"), ("LOG_LEVEL", "debug"), ("a-b_c.d", "")]).spec;
        assert_eq!(problems(&spec), Vec::<String>::new());
    }

    #[test]
    fn empty_data_and_bad_keys_are_each_reported() {
        assert_eq!(
            problems(&template(&[]).spec),
            ["it has no data: a Template needs at least one key"]
        );
        let bad = template(&[("bad key", "1"), ("..hidden", "2"), (".", "3"), ("ok", "4")]);
        let found = problems(&bad.spec);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().any(|p| p.contains("\"bad key\"")), "{found:?}");
        assert!(
            found.iter().any(|p| p.contains("\"..hidden\"")),
            "{found:?}"
        );
        let long = "k".repeat(254);
        let found = problems(&template(&[(long.as_str(), "v")]).spec);
        assert!(found[0].contains("254 characters"), "{found:?}");
    }

    #[test]
    fn data_larger_than_a_config_map_is_reported() {
        let big = "v".repeat(MAX_CONFIG_MAP_BYTES);
        let found = problems(&template(&[("big", big.as_str())]).spec);
        assert!(found[0].contains("more than the 1048576"), "{found:?}");
    }

    #[tokio::test]
    async fn creates_are_validated_with_a_message_naming_the_object_and_the_key() {
        let message = denial(
            TemplateValidator
                .validate(&request(Operation::Create, template(&[("a b", "1")]), None))
                .await,
        );
        assert!(
            message.starts_with("Template \"t\" cannot render a ConfigMap: key \"a b\""),
            "{message}"
        );
        let ok = template(&[("a", "1")]);
        TemplateValidator
            .validate(&request(Operation::Create, ok, None))
            .await
            .expect("valid");
    }

    #[tokio::test]
    async fn updates_that_keep_the_spec_and_deletions_are_admitted() {
        let invalid = template(&[]);
        let mut with_finalizer = invalid.clone();
        with_finalizer.metadata.finalizers = Some(vec!["f".into()]);
        TemplateValidator
            .validate(&request(
                Operation::Update,
                with_finalizer,
                Some(invalid.clone()),
            ))
            .await
            .expect("spec unchanged");
        let mut deleting = invalid.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        TemplateValidator
            .validate(&request(Operation::Update, deleting, Some(invalid.clone())))
            .await
            .expect("being deleted");
        // An update that changes the spec to something invalid is refused.
        let valid = template(&[("a", "1")]);
        denial(
            TemplateValidator
                .validate(&request(Operation::Update, invalid, Some(valid)))
                .await,
        );
    }

    #[tokio::test]
    async fn the_mutator_labels_templates_with_the_app() {
        let mutated = TemplateMutator::new("app-1")
            .mutate(&request(Operation::Create, template(&[("a", "1")]), None))
            .await
            .expect("mutated");
        assert_eq!(mutated.labels()[OPERATOR_LABEL], "app-1");
        assert_eq!(mutated.spec, template(&[("a", "1")]).spec, "spec unchanged");
    }
}
