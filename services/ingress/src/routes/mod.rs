//! The webhook routes, one module per vendor, plus the token-addressed generic route.

pub mod generic;
pub mod github;
pub mod gitlab;
pub mod outline;
pub mod slack;

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::{RequestBodyDeadlineLayer, TimeoutLayer};

use crate::AppState;
use crate::endpoint::{Attempt, Lookup};
use crate::reject::Rejection;

/// The webhook routes behind one concurrency limit and the request and body-read deadlines (a
/// slow body cannot hold a worker). Every route names its endpoint from the path or the headers
/// and reads the body only once that endpoint exists, no further than its vendor's limit and
/// within the buffer budget all requests share.
pub fn router(state: AppState) -> Router {
    let s = state.settings.clone();
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
        .layer(RequestBodyDeadlineLayer::new(s.body_timeout))
        .layer(GlobalConcurrencyLimitLayer::new(s.concurrency))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            s.request_timeout,
        ))
        .with_state(state)
}

/// The refusal of a body that failed while it was read: 413 past the limit, 408 past the
/// body-read deadline, 400 for anything else the connection did.
pub(crate) fn body_error(
    error: &(dyn std::error::Error + 'static),
    limit: usize,
    deadline: Duration,
) -> Rejection {
    if caused_by::<http_body_util::LengthLimitError>(error) {
        Rejection::too_large(limit)
    } else if caused_by::<tower_http::timeout::TimeoutError>(error) {
        Rejection::timed_out(deadline)
    } else {
        Rejection::malformed(format!("the body could not be read: {error}"))
    }
}

/// Refuses with `unknown()` at once when no endpoint answers to `lookup`, before the body is
/// read; the read is cached, so the delivery's own lookup that follows costs nothing more.
pub(crate) async fn known(
    state: &AppState,
    lookup: Lookup<'_>,
    unknown: fn() -> Rejection,
) -> Result<(), Rejection> {
    state
        .endpoints
        .find_one(&state.db, &state.secret_key, lookup, &Attempt::default())
        .await
        .map(drop)
        .map_err(unknown_as(unknown))
}

/// Maps an unknown endpoint to `unknown()` (a route's own refusal of it); other refusals stand.
pub(crate) fn unknown_as(unknown: fn() -> Rejection) -> impl Fn(Rejection) -> Rejection {
    move |r| {
        if r.reason == "unknown_endpoint" {
            unknown()
        } else {
            r
        }
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
