//! The answers the proxy gives in the apiserver's place: `Status` objects with the codes,
//! reasons and headers a real apiserver sends for the same condition, so that the client under
//! test takes the path it takes in production.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::request::ResourceRequest;

/// A `Status` failure as the apiserver writes it.
pub(crate) fn status(code: u16, reason: &str, message: &str, request: &ResourceRequest) -> Bytes {
    let mut details = json!({ "kind": request.resource.plural });
    if let Some(name) = &request.name {
        details["name"] = json!(name);
    }
    if !request.resource.group.is_empty() {
        details["group"] = json!(request.resource.group);
    }
    status_body(code, reason, message, Some(details))
}

/// The bytes of a `Status` failure.
fn status_body(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<serde_json::Value>,
) -> Bytes {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    Bytes::from(status.to_string())
}

/// The message of a 409 on an update, as the apiserver words it.
pub(crate) fn conflict_message(request: &ResourceRequest) -> String {
    format!(
        "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply \
         your changes to the latest version and try again (injected by the fault proxy)",
        request.resource,
        request.name.as_deref().unwrap_or("")
    )
}

/// The `details.retryAfterSeconds` of a 429, rounded up to whole seconds (at least 1) as the
/// `Retry-After` header carries it.
pub(crate) fn retry_after_seconds(retry_after: Duration) -> u64 {
    retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0 || retry_after.is_zero())
}

/// A 429 with `Retry-After`, as the apiserver's max-in-flight and priority-and-fairness
/// filters answer.
pub(crate) fn too_many_requests(retry_after: Duration, request: &ResourceRequest) -> Bytes {
    let seconds = retry_after_seconds(retry_after);
    let mut details = json!({ "kind": request.resource.plural, "retryAfterSeconds": seconds });
    if let Some(name) = &request.name {
        details["name"] = json!(name);
    }
    status_body(
        429,
        "TooManyRequests",
        "Too many requests, please try again later (injected by the fault proxy).",
        Some(details),
    )
}

/// The watch event that ends a watch whose resourceVersion is too old: the client re-lists.
pub(crate) fn expired_watch_event() -> Bytes {
    let status = status_body(
        410,
        "Expired",
        "too old resource version (the fault proxy withheld this watch's events)",
        None,
    );
    let mut line = Vec::with_capacity(status.len() + 32);
    line.extend_from_slice(br#"{"type":"ERROR","object":"#);
    line.extend_from_slice(&status);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_never_zero() {
        assert_eq!(retry_after_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_seconds(Duration::from_millis(1_500)), 2);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
    }

    #[test]
    fn the_expired_event_is_one_line_a_watch_client_decodes_as_a_410() {
        let line = expired_watch_event();
        assert_eq!(line.iter().filter(|&&byte| byte == b'\n').count(), 1);
        let event: serde_json::Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["code"], 410);
        assert_eq!(event["object"]["reason"], "Expired");
    }
}
