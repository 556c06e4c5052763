//! What the Runner's two HTTP servers share: body and response types, text and JSON answers,
//! one connection's HTTP/1.1 settings.
//!
//! Both servers sit on hyper directly, without a web framework: they have four routes and three
//! hooks between them, matched by method and path in one `match`. axum (with its extractors,
//! router and their dependencies) cost a user about 7 s of every cold build for that (issue #40,
//! `docs/performance/README.md`).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};

/// The error a request body may fail with (the client went away, a malformed chunk).
pub type RequestBodyError = Box<dyn std::error::Error + Send + Sync>;

/// A request's body as the servers read it: hyper's, or any other (tests, an embedding server).
pub type RequestBody = UnsyncBoxBody<Bytes, RequestBodyError>;

/// A response's body: a whole buffer, or a stream (the webhook server's 413 discards the rest of
/// the request while its answer is written).
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// A request the servers answer.
pub type Request = http::Request<RequestBody>;

/// An answer of the servers.
pub type Response = http::Response<ResponseBody>;

/// hyper's HTTP/1.1 server for one connection, with its header timeout: a client that sends no
/// complete request header in time (also an idle keep-alive connection) is disconnected.
pub(crate) fn http1(header_read_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder
}

/// Turns any request body into a [`RequestBody`].
pub(crate) fn boxed_request<B>(request: http::Request<B>) -> Request
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<RequestBodyError>,
{
    request.map(|body| body.map_err(Into::into).boxed_unsync())
}

/// A response with a whole body and a content type.
pub(crate) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response {
    let mut response = http::Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A plain-text answer.
pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    full(status, "text/plain; charset=utf-8", body.into())
}

/// `value` as a 200 JSON answer, or a 500 naming why it could not be encoded.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => full(StatusCode::OK, "application/json", bytes),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the response: {error}\n"),
        ),
    }
}

/// 404 for a path no route has, 405 for a known path asked with another method.
pub(crate) fn no_route(known_path: bool) -> Response {
    if known_path {
        text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
    } else {
        text(StatusCode::NOT_FOUND, "not found\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_answer_has_its_status_and_content_type() {
        let response = text(StatusCode::IM_A_TEAPOT, "short and stout\n");
        assert_eq!(response.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }
}
