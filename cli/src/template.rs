//! The project templates, built into the binary, and the tiny replacer that fills them.
//!
//! A template is text with `{{name}}` placeholders. [`render`] replaces each with its value and
//! fails on a placeholder it has no value for, naming the template and the placeholder, so a
//! typo in a template is caught by the unit tests rather than written into a project. No template
//! engine crate: the templates need substitution only (no loops, no conditions), and a dozen
//! lines keep them plain Rust and YAML that an editor highlights.

use std::collections::BTreeMap;

/// One template file: where it goes in the project (itself a template) and its text.
#[derive(Clone, Copy, Debug)]
pub struct TemplateFile {
    /// The path in the generated project, relative to its root (may hold placeholders).
    pub path: &'static str,
    /// The template's name, for error messages (its file under `cli/templates/`).
    pub source: &'static str,
    /// The text.
    pub text: &'static str,
}

macro_rules! template {
    ($path:expr, $source:literal) => {
        TemplateFile {
            path: $path,
            source: $source,
            text: include_str!(concat!("../templates/", $source)),
        }
    };
}

/// The files every project has, whatever its template.
pub const COMMON: &[TemplateFile] = &[
    template!("Cargo.toml", "common/Cargo.toml.tmpl"),
    template!("manifest.yaml", "common/manifest.yaml.tmpl"),
    template!("README.md", "common/README.md.tmpl"),
    template!("AGENTS.md", "common/AGENTS.md.tmpl"),
    template!("Dockerfile", "common/Dockerfile.tmpl"),
    template!(".dockerignore", "common/dockerignore.tmpl"),
    template!(".gitignore", "common/gitignore.tmpl"),
    template!("src/main.rs", "common/main.rs.tmpl"),
    template!("src/kinds.rs", "common/kinds.rs.tmpl"),
    template!("tests/e2e.rs", "common/e2e.rs.tmpl"),
    template!("tests/faults.rs", "common/faults.rs.tmpl"),
];

/// The files of one kind: its sample (the kind module comes from [`Flavor::kind_module`]).
pub const SAMPLE: TemplateFile =
    template!("samples/{{kind_snake}}.yaml", "common/sample.yaml.tmpl");

/// What a project's handlers are: the `--template` of `kubeapp init`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    /// A reconciler: `apply` on every change, `cleanup` before deletion (examples/minimal).
    Reconciler,
    /// A watcher: `add`, `update`, `delete` and `sync` calls (examples/watcher).
    Watcher,
    /// Components rendered and applied in dependency order (kubeapp::components).
    Components,
    /// A phase machine driven by `status.phase` (kubeapp::phases).
    Phases,
}

impl Flavor {
    /// Every flavor, for tests.
    pub const ALL: [Flavor; 4] = [
        Flavor::Reconciler,
        Flavor::Watcher,
        Flavor::Components,
        Flavor::Phases,
    ];

    /// The name used on the command line and in `[package.metadata.kubeapp]`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Reconciler => "reconciler",
            Flavor::Watcher => "watcher",
            Flavor::Components => "components",
            Flavor::Phases => "phases",
        }
    }

    /// The flavor of a name, as written by [`Flavor::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|flavor| flavor.name() == name)
    }

    /// The features of the `kubeapp` dependency the template needs (as written in `Cargo.toml`,
    /// a list's inside): `cli`, and the framework module of the flavor.
    pub fn kubeapp_features(self) -> &'static str {
        match self {
            Flavor::Reconciler | Flavor::Watcher => r#""cli""#,
            Flavor::Components => r#""cli", "components""#,
            Flavor::Phases => r#""cli", "phases""#,
        }
    }

    /// How the project's fault test starts its control plane: the cluster mode for components,
    /// whose `web` Deployment must roll out before the operator is done with a sample.
    pub fn fault_testenv(self) -> &'static str {
        match self {
            // As rustfmt lays the chain out in the generated test.
            Flavor::Components => "TestEnv::builder()\n        .cluster()\n        .start()",
            Flavor::Reconciler | Flavor::Watcher | Flavor::Phases => "TestEnv::start()",
        }
    }

    /// The fault test's workload, as its module doc says it.
    pub fn fault_workload(self) -> &'static str {
        match self {
            Flavor::Phases => "three created, one labelled, one deleted",
            Flavor::Components | Flavor::Reconciler | Flavor::Watcher => {
                "three created, one changed, one deleted"
            }
        }
    }

    /// The fault test's second step, chained after the creates: a change of the first sample's
    /// spec; for phases a label on it instead. A phase machine that has finished keeps its
    /// outcome, so where a spec change lands would depend on whether the operator saw the
    /// sample finish first (a history, not a fault: the oracle flags it).
    pub fn fault_change_step(self) -> &'static str {
        match self {
            Flavor::Phases => concat!(
                "\n        .step(\"label the first\", |workload| async move {\n",
                "            let patch =\n",
                "                serde_json::json!({ \"metadata\": { \"labels\": { \"example.com/touched\": \"yes\" } } });\n",
                "            api(&workload)\n",
                "                .patch(&name(1), &PatchParams::default(), &Patch::Merge(&patch))\n",
                "                .await?;\n",
                "            Ok(())\n",
                "        })"
            ),
            Flavor::Components | Flavor::Reconciler | Flavor::Watcher => concat!(
                "\n        .step(\"change the first\", |workload| async move {\n",
                "            let patch = serde_json::json!({ \"spec\": { \"message\": \"changed\" } });\n",
                "            api(&workload)\n",
                "                .patch(&name(1), &PatchParams::default(), &Patch::Merge(&patch))\n",
                "                .await?;\n",
                "            Ok(())\n",
                "        })"
            ),
        }
    }

    /// What the project's README says of the template after `kubeapp run` (a paragraph and its
    /// blank line, or nothing; `{{kind}}` and `{{kind_snake}}` are filled in).
    pub fn run_note(self) -> &'static str {
        match self {
            Flavor::Components => concat!(
                "The `{{kind}}` has two components (`src/{{kind_snake}}.rs`): `config`, the stub to\n",
                "write, and `web`, a Deployment of `spec.image` (one replica, default `nginx:1.27`),\n",
                "implemented and independent of `config`. In the cluster mode (`kubeapp run`'s default\n",
                "once `kubeapp testenv install` has built its binaries) it rolls out on a simulated\n",
                "node, and the run shows it `Available=True` before you write anything; the sample is\n",
                "`Ready` once `config` works too.\n\n",
            ),
            Flavor::Reconciler | Flavor::Watcher | Flavor::Phases => "",
        }
    }

    /// The module of one kind: its type and its handler stub.
    pub fn kind_module(self) -> TemplateFile {
        match self {
            Flavor::Reconciler => template!("src/{{kind_snake}}.rs", "reconciler/kind.rs.tmpl"),
            Flavor::Watcher => template!("src/{{kind_snake}}.rs", "watcher/kind.rs.tmpl"),
            Flavor::Components => template!("src/{{kind_snake}}.rs", "components/kind.rs.tmpl"),
            Flavor::Phases => template!("src/{{kind_snake}}.rs", "phases/kind.rs.tmpl"),
        }
    }
}

/// A placeholder without a value, or one left open.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// `{{name}}` has no value.
    #[error("template {template}: no value for the placeholder {{{{{name}}}}}")]
    Unknown {
        /// The template.
        template: &'static str,
        /// The placeholder's name.
        name: String,
    },
    /// `{{` without its `}}`.
    #[error("template {template}: a placeholder is not closed with }}}} (at byte {at})")]
    Unclosed {
        /// The template.
        template: &'static str,
        /// Where the `{{` is.
        at: usize,
    },
}

/// The values of the placeholders.
pub type Values = BTreeMap<&'static str, String>;

/// `text` with every `{{name}}` replaced by `values[name]`.
///
/// # Errors
///
/// A placeholder without a value, or an unclosed one; `source` names the template.
pub fn render(
    template: &'static str,
    text: &str,
    values: &Values,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or(TemplateError::Unclosed {
            template,
            at: text.len() - rest.len() + start,
        })?;
        let name = &after[..end];
        let value = values.get(name).ok_or_else(|| TemplateError::Unknown {
            template,
            name: name.to_string(),
        })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_unknown_ones_named() {
        let values = Values::from([("kind", "Widget".to_string())]);
        assert_eq!(
            render("t", "struct {{kind}}Spec; // {{kind}}", &values).expect("renders"),
            "struct WidgetSpec; // Widget"
        );
        let unknown = render("common/x.tmpl", "{{kid}}", &values).expect_err("unknown");
        assert_eq!(
            unknown.to_string(),
            "template common/x.tmpl: no value for the placeholder {{kid}}"
        );
        assert!(matches!(
            render("t", "a {{kind", &values),
            Err(TemplateError::Unclosed { at: 2, .. })
        ));
    }

    #[test]
    fn the_flavor_names_round_trip() {
        for flavor in Flavor::ALL {
            assert_eq!(Flavor::from_name(flavor.name()), Some(flavor));
        }
        assert_eq!(Flavor::from_name("operator"), None);
    }
}
