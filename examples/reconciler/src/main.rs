//! kubeapp example operator: renders a ConfigMap from a Template.
//!
//! Today the binary prints its CustomResourceDefinition (`crd`); the operator itself grows with
//! the App and Runner work.

use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The spec of the example's custom kind.
#[derive(kube::CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "reconciler.example.kubeapp.dev",
    version = "v1",
    kind = "Template",
    namespaced
)]
pub struct TemplateSpec {
    /// The data of the ConfigMap to render.
    pub data: std::collections::BTreeMap<String, String>,
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["crd"] => match serde_saphyr::to_string(&Template::crd()) {
            Ok(yaml) => {
                print!("{yaml}");
                std::process::ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: rendering the CRD: {err}");
                std::process::ExitCode::FAILURE
            }
        },
        ["--help"] | ["-h"] | [] => {
            println!(
                "usage: kubeapp-example-reconciler crd    print the CustomResourceDefinition as YAML"
            );
            std::process::ExitCode::SUCCESS
        }
        other => {
            eprintln!("error: unknown arguments {other:?}; see --help");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_names_the_kind_and_group() {
        let crd = Template::crd();
        assert_eq!(crd.spec.group, "reconciler.example.kubeapp.dev");
        assert_eq!(crd.spec.names.kind, "Template");
    }
}
