//! Reading a review's body within the limit, and refusing an oversized one so that the client
//! always gets the status.
//!
//! A body larger than [`BodyLimits::max_body_bytes`] is refused with 413, naming the limit:
//!
//! - **Announced by `Content-Length`:** refused before any of the body is read. hyper sends
//!   `100 Continue` only when the body is first read, so a client that sent
//!   `Expect: 100-continue` gets the 413 instead and need not upload at all.
//! - **Found while reading** (a chunked body, or a `Content-Length` that lied): refused as soon
//!   as the limit is passed.
//!
//! Either way the client may still be uploading. Closing the connection then would make the
//! kernel reset it with the client's bytes unread, and a client that writes its whole body
//! before reading (most do) sees "broken pipe" or "connection reset" and never the status. So
//! after the 413 has started on its way the rest of the body is read and discarded, up to
//! [`BodyLimits::drain_bytes`] and for at most [`BodyLimits::drain_timeout`], and the connection
//! is closed afterwards (HTTP/1.1 `Connection: close`; an HTTP/2 stream ends alone). A client
//! that sends more, or more slowly, than those bounds is cut off: it cannot hold a connection
//! or the server's time beyond them.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{StatusCode, Version, header};
use http_body::Frame;
use http_body_util::{BodyDataStream, BodyExt as _, StreamBody};

use crate::http_server::{Request, RequestBody, Response};

/// What is left of a refused body.
type Rest = BodyDataStream<RequestBody>;

/// How much of a body is read, and how much of an oversized one is discarded after its refusal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimits {
    /// Bodies larger than this are refused with 413.
    pub(crate) max_body_bytes: usize,
    /// After a refusal, at most this many further bytes are read and discarded.
    pub(crate) drain_bytes: u64,
    /// After a refusal, the discarding stops after this long.
    pub(crate) drain_timeout: Duration,
}

/// Why no body came out of [`read_limited`].
pub(crate) enum BodyError {
    /// The body could not be read (the client went away, or sent a malformed chunk).
    Unreadable(String),
    /// The body is larger than the limit.
    TooLarge(TooLarge),
}

/// An oversized body's refusal: the 413 response, with what is left of the body to discard.
pub(crate) struct TooLarge {
    message: String,
    rest: Option<Rest>,
    close_connection: bool,
    limits: BodyLimits,
}

/// Reads `request`'s body within `limits.max_body_bytes`; an announced `Content-Length` past the
/// limit is refused without reading anything (see the [module docs](self)).
pub(crate) async fn read_limited(request: Request, limits: BodyLimits) -> Result<Bytes, BodyError> {
    let limit = limits.max_body_bytes;
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let close_connection = request.version() <= Version::HTTP_11;
    let mut body = request.into_body().into_data_stream();
    if let Some(length) = announced
        && length > limit as u64
    {
        return Err(BodyError::TooLarge(TooLarge {
            message: format!(
                "request body of {length} bytes (Content-Length) is larger than the limit of {limit} bytes"
            ),
            rest: Some(body),
            close_connection,
            limits,
        }));
    }
    let capacity = announced.map_or(0, |length| usize::try_from(length).unwrap_or(limit));
    let mut bytes = Vec::with_capacity(capacity.min(limit));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|err| BodyError::Unreadable(err.to_string()))?;
        if bytes.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge(TooLarge {
                message: format!("request body is larger than the limit of {limit} bytes"),
                rest: Some(body),
                close_connection,
                limits,
            }));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(bytes))
}

impl TooLarge {
    /// 413 with the message; the body is discarded once the response is being written (not
    /// earlier: reading it before the response head would make hyper send `100 Continue`).
    pub(crate) fn into_response(mut self) -> Response {
        tracing::warn!(status = 413, reason = %self.message, "webhook request refused");
        let message = Bytes::from(std::mem::take(&mut self.message));
        let length = message.len();
        let rest = self.rest.take();
        let limits = self.limits;
        // hyper polls the response body only after it wrote the head: the first poll starts the
        // discarding.
        let body = futures::stream::once(async move {
            if let Some(rest) = rest {
                tokio::spawn(discard(rest, limits));
            }
            Ok::<_, Infallible>(Frame::data(message))
        });
        let mut response = http::Response::new(StreamBody::new(body).boxed_unsync());
        *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(length));
        if self.close_connection {
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// Reads and drops the rest of a refused body, within the drain bounds. Dropping the stream
/// before its end (a bound reached) makes hyper close the connection.
async fn discard(mut rest: Rest, limits: BodyLimits) {
    let mut discarded = 0u64;
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while let Some(chunk) = rest.next().await {
            let Ok(chunk) = chunk else {
                return true; // the client went away: nothing left to protect
            };
            discarded += chunk.len() as u64;
            if discarded > limits.drain_bytes {
                return false;
            }
        }
        true
    })
    .await;
    match drained {
        Ok(true) => tracing::debug!(discarded, "rest of a refused webhook body discarded"),
        Ok(false) => tracing::debug!(
            discarded,
            drain_bytes = limits.drain_bytes,
            "refused webhook body still coming after the drain limit; closing the connection"
        ),
        Err(_elapsed) => tracing::debug!(
            discarded,
            drain_timeout = ?limits.drain_timeout,
            "refused webhook body still coming after the drain timeout; closing the connection"
        ),
    }
}
