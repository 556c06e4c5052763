//! Turning admission and conversion reviews into calls of the apps' hooks, and back.
//!
//! HTTP statuses, chosen so the apiserver's error (and the user's `kubectl` output) says what went
//! wrong:
//!
//! | situation | status | body |
//! |---|---|---|
//! | the hook answered (admitted, denied with a message, mutated, converted or failed to convert) | 200 | the review with its response |
//! | the body is not JSON or not a review | 400 | the reason, text |
//! | the body is larger than the limit | 413 | the limit, text; see [`body`](super::body) |
//! | the content type is not `application/json` | 415 | the reason, text |
//! | no app manages the kind, or its app has no such hook | 404 | which kind and hook, text |
//! | the hook panicked | 500 | the panic message, text |
//!
//! A denial carries the validator's message and code (default 400) in the review's status, which
//! the apiserver shows to the client.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use http::{StatusCode, header};
use kube::api::DynamicObject;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kubeapp_sdk::app::{AdmissionError, App, ConversionError};

use super::body::{BodyError, BodyLimits, TooLarge, read_limited};
use crate::http_server::{Request, Response, json as json_response, text};

/// What the review handlers share: the apps, and the body limits.
#[derive(Clone)]
pub(crate) struct Apps {
    pub(crate) apps: Arc<Vec<Arc<dyn App>>>,
    pub(crate) limits: BodyLimits,
}

/// An HTTP error answer.
enum Refusal {
    /// A status and a one-line reason.
    Plain(StatusCode, String),
    /// 413: the body is larger than the limit (what is left of it is discarded, bounded).
    TooLarge(TooLarge),
}

impl Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::Plain(status, reason) => {
                tracing::warn!(status = status.as_u16(), %reason, "webhook request refused");
                text(status, reason)
            }
            Self::TooLarge(too_large) => too_large.into_response(),
        }
    }
}

/// Checks the content type and reads the body within the limits.
async fn json_body(request: Request, limits: BodyLimits) -> Result<Bytes, Refusal> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err(Refusal::Plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type must be application/json, got {content_type:?}"),
        ));
    }
    read_limited(request, limits)
        .await
        .map_err(|error| match error {
            BodyError::TooLarge(too_large) => Refusal::TooLarge(too_large),
            BodyError::Unreadable(reason) => Refusal::Plain(
                StatusCode::BAD_REQUEST,
                format!("request body is unreadable: {reason}"),
            ),
        })
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::Plain(
            StatusCode::BAD_REQUEST,
            format!(
                "malformed {what}: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// The app that manages `group`/`kind`, if any.
fn app_for<'a>(apps: &'a [Arc<dyn App>], group: &str, kind: &str) -> Option<&'a Arc<dyn App>> {
    apps.iter().find(|app| {
        app.managed_kinds()
            .iter()
            .any(|r| r.group == group && r.kind == kind)
    })
}

async fn admission_request(
    state: &Apps,
    request: Request,
) -> Result<(AdmissionRequest<DynamicObject>, Arc<dyn App>), Refusal> {
    let body = json_body(request, state.limits).await?;
    let review: AdmissionReview<DynamicObject> = parse(&body, "AdmissionReview")?;
    let request: AdmissionRequest<DynamicObject> = review.try_into().map_err(|e| {
        Refusal::Plain(
            StatusCode::BAD_REQUEST,
            format!("AdmissionReview without a usable request: {e}"),
        )
    })?;
    let app = app_for(&state.apps, &request.kind.group, &request.kind.kind)
        .cloned()
        .ok_or_else(|| {
            Refusal::Plain(
                StatusCode::NOT_FOUND,
                format!(
                    "no app manages kind {}.{}",
                    request.kind.kind, request.kind.group
                ),
            )
        })?;
    Ok((request, app))
}

/// Maps a hook's refusal to the response, or to an HTTP error for a missing hook.
fn admission_refusal(
    request: &AdmissionRequest<DynamicObject>,
    err: AdmissionError,
) -> Result<AdmissionResponse, Refusal> {
    match err {
        AdmissionError::NotImplemented { .. } => {
            Err(Refusal::Plain(StatusCode::NOT_FOUND, err.to_string()))
        }
        AdmissionError::Denied { message, code } => {
            let mut response = AdmissionResponse::from(request).deny(message);
            response.result.code = code.unwrap_or(400);
            Ok(response)
        }
        AdmissionError::Internal(message) => {
            let mut response = AdmissionResponse::from(request).deny(message);
            response.result.code = 500;
            Ok(response)
        }
    }
}

/// `POST /validate`.
pub(crate) async fn validate(state: &Apps, request: Request) -> Response {
    let handled = async {
        let (request, app) = admission_request(state, request).await?;
        let outcome = AssertUnwindSafe(app.validate(&request))
            .catch_unwind()
            .await;
        let response = match outcome {
            Err(panic) => {
                return Err(Refusal::Plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("validation hook panicked: {}", panic_message(&*panic)),
                ));
            }
            Ok(Ok(())) => AdmissionResponse::from(&request),
            Ok(Err(err)) => admission_refusal(&request, err)?,
        };
        Ok(json_response(&response.into_review()))
    };
    handled.await.unwrap_or_else(Refusal::into_response)
}

/// `POST /mutate`.
pub(crate) async fn mutate(state: &Apps, request: Request) -> Response {
    let handled = async {
        let (request, app) = admission_request(state, request).await?;
        let outcome = AssertUnwindSafe(app.mutate(&request)).catch_unwind().await;
        let response = match outcome {
            Err(panic) => {
                return Err(Refusal::Plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("mutation hook panicked: {}", panic_message(&*panic)),
                ));
            }
            Ok(Ok(changed)) => patch_response(&request, &changed)?,
            Ok(Err(err)) => admission_refusal(&request, err)?,
        };
        Ok(json_response(&response.into_review()))
    };
    handled.await.unwrap_or_else(Refusal::into_response)
}

/// Admits `request` with the JSON patch that turns its object into `changed`.
fn patch_response(
    request: &AdmissionRequest<DynamicObject>,
    changed: &DynamicObject,
) -> Result<AdmissionResponse, Refusal> {
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        Refusal::Plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
    };
    let response = AdmissionResponse::from(request);
    let Some(original) = &request.object else {
        // DELETE and CONNECT carry no object to mutate: admit unchanged.
        return Ok(response);
    };
    let before = serde_json::to_value(original).map_err(|e| internal("encoding the object", &e))?;
    let after =
        serde_json::to_value(changed).map_err(|e| internal("encoding the mutated object", &e))?;
    let patch = json_patch::diff(&before, &after);
    if patch.0.is_empty() {
        return Ok(response);
    }
    response
        .with_patch(patch)
        .map_err(|e| internal("encoding the patch", &e))
}

/// `POST /convert`.
pub(crate) async fn convert(state: &Apps, request: Request) -> Response {
    let handled = async {
        let body = json_body(request, state.limits).await?;
        let review: ConversionReview = parse(&body, "ConversionReview")?;
        let request = ConversionRequest::from_review(review).map_err(|e| {
            Refusal::Plain(
                StatusCode::BAD_REQUEST,
                format!("ConversionReview without a usable request: {e}"),
            )
        })?;
        let group = request
            .desired_api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
            .to_string();
        let kind = request
            .objects
            .first()
            .and_then(|o| o.get("kind"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let desired = request.desired_api_version.clone();
        let objects = request.objects.clone();
        let response = ConversionResponse::for_request(request);
        if objects.is_empty() {
            return Ok(json_response(&response.success(Vec::new()).into_review()));
        }
        let app = app_for(&state.apps, &group, &kind)
            .cloned()
            .ok_or_else(|| {
                Refusal::Plain(
                    StatusCode::NOT_FOUND,
                    format!("no app manages kind {kind}.{group}"),
                )
            })?;
        let mut converted = Vec::with_capacity(objects.len());
        for object in objects {
            let outcome = AssertUnwindSafe(app.convert(object, &desired))
                .catch_unwind()
                .await;
            match outcome {
                Err(panic) => {
                    return Err(Refusal::Plain(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("conversion hook panicked: {}", panic_message(&*panic)),
                    ));
                }
                Ok(Ok(object)) => converted.push(object),
                Ok(Err(err @ ConversionError::NotImplemented { .. })) => {
                    return Err(Refusal::Plain(StatusCode::NOT_FOUND, err.to_string()));
                }
                Ok(Err(err @ ConversionError::Failed { .. })) => {
                    let status = Status::failure(&err.to_string(), "ConversionFailed");
                    return Ok(json_response(&response.failure(status).into_review()));
                }
            }
        }
        Ok(json_response(&response.success(converted).into_review()))
    };
    handled.await.unwrap_or_else(Refusal::into_response)
}
