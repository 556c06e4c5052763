//! Reading a manifest's `schema` as a CRD version schema (the shapes are listed in the
//! [module docs](super)).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{Map, Value};

/// The CRD schema of `kind` in `raw`, or the field path and message of the first problem.
pub(super) fn crd_schema(kind: &str, raw: &Value) -> Result<JSONSchemaProps, (String, String)> {
    let Value::Object(map) = raw else {
        return Err((".".into(), "must be an object".into()));
    };
    let (root, at) = locate_root(kind, map)?;
    if let Some(path) = find_ref(&root, &at) {
        return Err((
            path,
            "`$ref` is not resolved in CRD schemas; inline the referenced schema".into(),
        ));
    }
    serde_path_to_error::deserialize(&root).map_err(|err| {
        let inner = err.path().to_string();
        let field = if inner == "." {
            at.clone()
        } else if at == "." {
            inner
        } else {
            format!("{at}.{inner}")
        };
        (field, err.into_inner().to_string())
    })
}

/// The schema object of the kind in one of the accepted shapes, and its path in `map`.
fn locate_root(kind: &str, map: &Map<String, Value>) -> Result<(Value, String), (String, String)> {
    if let Some(schema) = map.get("openAPIV3Schema") {
        return Ok((schema.clone(), "openAPIV3Schema".into()));
    }
    if let Some(components) = map.get("components") {
        let at = format!("components.schemas.{kind}");
        return components
            .get("schemas")
            .and_then(|schemas| schemas.get(kind))
            .map(|schema| (schema.clone(), at.clone()))
            .ok_or_else(|| (at, format!("no schema for kind {kind}")));
    }
    if ["type", "properties", "x-kubernetes-preserve-unknown-fields"]
        .iter()
        .any(|key| map.contains_key(*key))
    {
        return Ok((Value::Object(map.clone()), ".".into()));
    }
    if let Some(schema) = map.get(kind) {
        return Ok((schema.clone(), kind.to_string()));
    }
    // The properties of the kind object, as in `openAPIV3Schema.properties`.
    let root = serde_json::json!({ "type": "object", "properties": Value::Object(map.clone()) });
    Ok((root, ".".into()))
}

/// The path of the first `$ref` in `value`, if any.
fn find_ref(value: &Value, at: &str) -> Option<String> {
    let join = |key: &str| {
        if at == "." {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            if map.contains_key("$ref") {
                return Some(join("$ref"));
            }
            map.iter().find_map(|(key, v)| find_ref(v, &join(key)))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_ref(v, &format!("{at}[{i}]"))),
        _ => None,
    }
}
