//! The webhook routes, one module per vendor, plus the token-addressed generic route.

pub mod generic;
pub mod github;
pub mod gitlab;
pub mod outline;
pub mod slack;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;

use crate::AppState;
use crate::reject::Rejection;

pub fn router(state: AppState) -> Router {
    let limit = state.settings.max_body_bytes;
    Router::new()
        .route("/webhooks/github", post(github::receive))
        .route("/webhooks/gitlab", post(gitlab::receive_shared))
        .route(
            "/webhooks/gitlab/connections/{connection_id}/{key_id}/{route_id}",
            post(gitlab::receive_registered),
        )
        .route("/webhooks/slack", post(slack::receive))
        .route("/webhooks/outline/{token}", post(outline::receive))
        .route("/hooks/{token}", post(generic::receive))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// The buffered body, or 413 past the limit.
pub(crate) fn body(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, Rejection> {
    match body {
        Ok(b) => Ok(b),
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Rejection::too_large(limit)),
        Err(r) => Err(Rejection::malformed(format!(
            "the body could not be read: {}",
            r.body_text()
        ))),
    }
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
