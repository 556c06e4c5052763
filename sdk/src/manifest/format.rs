//! Reading and writing manifests as JSON or YAML, and the errors that name where a problem is.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ManifestData;

/// How a manifest that does not come from a file is named in errors.
pub(crate) const PLAIN_ORIGIN: &str = "<embedded manifest>";

/// A manifest's text format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// The format a file name says: `.json`, or `.yaml`/`.yml` (any case); `None` otherwise.
    pub(crate) fn from_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "json" => Some(Format::Json),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }

    /// Guesses the format from the text: JSON when the first non-blank character is `{`, YAML
    /// otherwise (YAML's flow style could also start with `{`, but such a manifest is also JSON
    /// in practice, and JSON errors then point at the right place).
    pub fn detect(text: &str) -> Self {
        match text.trim_start().chars().next() {
            Some('{') => Format::Json,
            _ => Format::Yaml,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Yaml => "YAML",
        })
    }
}

/// One problem found by [`ManifestData::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestProblem {
    /// The field path, e.g. `versions[1].kinds[0].plural`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ManifestProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a manifest could not be loaded, validated or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file could not be read.
    #[error("reading manifest {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid JSON/YAML, or a field has the wrong type or value.
    #[error("{origin}{}: {field}: {message} ({format})", position(*line, *column))]
    Parse {
        /// The file, or `<embedded manifest>`.
        origin: String,
        /// The format it was read as.
        format: Format,
        /// The field path (`.` for the whole document).
        field: String,
        /// The 1-based line, when the parser knows it.
        line: Option<u64>,
        /// The 1-based column, when the parser knows it.
        column: Option<u64>,
        /// The parser's message.
        message: String,
    },
    /// The manifest parsed but is inconsistent; every problem is listed.
    #[error("invalid manifest {origin}: {}", list(problems))]
    Invalid {
        /// The file, or `<embedded manifest>`.
        origin: String,
        /// Every problem found.
        problems: Vec<ManifestProblem>,
    },
    /// The manifest could not be serialized.
    #[error("writing the manifest as {format}: {message}")]
    Serialize {
        /// The target format.
        format: Format,
        /// The serializer's message.
        message: String,
    },
}

fn position(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

fn list(problems: &[ManifestProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Parses `text` as `format` and validates the result; `origin` names the text in errors.
pub(super) fn parse(
    text: &str,
    format: Format,
    origin: &str,
) -> Result<ManifestData, ManifestError> {
    let manifest = match format {
        Format::Json => parse_json(text, origin)?,
        Format::Yaml => parse_yaml(text, origin)?,
    };
    manifest.validate_from(origin)?;
    Ok(manifest)
}

fn parse_json(text: &str, origin: &str) -> Result<ManifestData, ManifestError> {
    let fail = |field: String, err: serde_json::Error| {
        let (line, column) = match err.line() {
            0 => (None, None),
            line => (Some(line as u64), Some(err.column() as u64)),
        };
        ManifestError::Parse {
            origin: origin.to_string(),
            format: Format::Json,
            field,
            line,
            column,
            message: strip_position(&err.to_string()),
        }
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let manifest: ManifestData = serde_path_to_error::deserialize(&mut de)
        .map_err(|err| fail(err.path().to_string(), err.into_inner()))?;
    de.end().map_err(|err| fail(".".to_string(), err))?;
    Ok(manifest)
}

/// Both parsers append " at line L[,] column C" to their messages; the error carries both
/// already, in front.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

fn parse_yaml(text: &str, origin: &str) -> Result<ManifestData, ManifestError> {
    let mut field = ".".to_string();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|err| {
            field = err.path().to_string();
            err.into_inner()
        })
    });
    result.map_err(|err| {
        let plain = err.without_snippet();
        let location = plain.location();
        ManifestError::Parse {
            origin: origin.to_string(),
            format: Format::Yaml,
            field,
            line: location.map(|l| l.line()).filter(|&l| l > 0),
            column: location.map(|l| l.column()).filter(|&c| c > 0),
            message: strip_position(&plain.to_string()),
        }
    })
}

/// Several objects as one YAML stream, each document introduced by `---` (what `kubectl apply
/// -f -` reads).
///
/// # Errors
///
/// The serializer's message when an object cannot be written.
pub fn to_yaml_documents<T: Serialize>(items: &[T]) -> Result<String, String> {
    let mut out = String::new();
    for item in items {
        let doc = serde_saphyr::to_string(item).map_err(|e| e.to_string())?;
        out.push_str("---\n");
        out.push_str(&doc);
        if !doc.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}
