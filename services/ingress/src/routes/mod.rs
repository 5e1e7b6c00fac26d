//! The webhook routes, one module per vendor, plus the token-addressed generic route.

pub mod generic;
pub mod github;
pub mod gitlab;
pub mod outline;
pub mod slack;

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::{RequestBodyDeadlineLayer, TimeoutLayer};

use crate::AppState;
use crate::reject::Rejection;

/// The webhook routes, each with its vendor's body limit, behind one concurrency limit and the
/// request and body-read deadlines (a slow body cannot hold a worker).
pub fn router(state: AppState) -> Router {
    let s = state.settings.clone();
    let limit = |bytes: usize| DefaultBodyLimit::max(bytes);
    let limits = &s.body_limits;
    Router::new()
        .route(
            "/webhooks/github",
            post(github::receive).layer(limit(limits.github)),
        )
        .route(
            "/webhooks/gitlab",
            post(gitlab::receive_shared).layer(limit(limits.gitlab)),
        )
        .route(
            "/webhooks/gitlab/connections/{connection_id}/{key_id}/{route_id}",
            post(gitlab::receive_registered).layer(limit(limits.gitlab)),
        )
        .route(
            "/webhooks/slack",
            post(slack::receive).layer(limit(limits.slack)),
        )
        .route(
            "/webhooks/outline/{token}",
            post(outline::receive).layer(limit(limits.outline)),
        )
        // The endpoint's kind picks the limit once the token has named it.
        .route("/hooks/{token}", post(generic::receive))
        .layer(RequestBodyDeadlineLayer::new(s.body_timeout))
        .layer(GlobalConcurrencyLimitLayer::new(s.concurrency))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            s.request_timeout,
        ))
        .with_state(state)
}

/// The buffered body, or 413 past the limit, or 408 past the body-read deadline.
pub(crate) fn body(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Rejection> {
    match body {
        Ok(b) => Ok(b),
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Rejection::too_large(limit)),
        Err(r) if caused_by::<tower_http::timeout::TimeoutError>(&r) => {
            Err(Rejection::timed_out(deadline))
        }
        Err(r) => Err(Rejection::malformed(format!(
            "the body could not be read: {}",
            r.body_text()
        ))),
    }
}

/// Reads `body` up to `limit` bytes: 413 as soon as it passes the limit, without reading on.
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Rejection> {
    use http_body_util::BodyExt as _;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Rejection::too_large(limit)),
        Err(e) if caused_by::<tower_http::timeout::TimeoutError>(&*e) => {
            Err(Rejection::timed_out(deadline))
        }
        Err(e) => Err(Rejection::malformed(format!(
            "the body could not be read: {e}"
        ))),
    }
}

/// Whether `E` is `error` or one of its sources.
fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<E>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// A header's text value, if present and text.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The body as a JSON object, or 400.
pub(crate) fn json_object(body: &[u8]) -> Result<serde_json::Value, Rejection> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(Rejection::malformed("the body must be a JSON object")),
        Err(e) => Err(Rejection::malformed(format!("the body is not JSON: {e}"))),
    }
}

/// A string at a JSON pointer.
pub(crate) fn str_at<'a>(v: &'a serde_json::Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
}
