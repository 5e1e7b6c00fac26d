//! The API's routes, one module per resource.

pub mod connections;
pub mod dead_messages;
pub mod endpoints;
pub mod erasures;
pub mod github;
pub mod jobs;
pub mod workspaces;

use axum::Router;
use axum::routing::{get, post};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::AppState;
use crate::error::ApiError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(crate::openapi::serve))
        .route(
            "/workspaces",
            post(workspaces::create).get(workspaces::list),
        )
        .route("/workspaces/{workspace_id}", get(workspaces::get))
        .route("/workspaces/{workspace_id}/purge", post(workspaces::purge))
        .route("/workspaces/{workspace_id}/erasures", get(erasures::list))
        .route(
            "/workspaces/{workspace_id}/erasure-scan",
            get(erasures::scan),
        )
        .route(
            "/workspaces/{workspace_id}/connections",
            post(connections::create).get(connections::list),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}",
            get(connections::get),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/audit",
            get(connections::audit),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/{transition}",
            post(connections::transition),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/sync",
            post(jobs::create),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/jobs",
            get(jobs::list),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/jobs/{job_id}/cancel",
            post(jobs::cancel),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/endpoints",
            post(endpoints::create),
        )
        .route(
            "/workspaces/{workspace_id}/connections/{connection_id}/endpoints/{endpoint_id}/rotate-secret",
            post(endpoints::rotate_secret),
        )
        .route(
            "/workspaces/{workspace_id}/inbound-messages/{message_id}/replay",
            post(endpoints::replay),
        )
        .route(
            "/workspaces/{workspace_id}/github/repositories",
            get(github::repositories),
        )
        .route(
            "/workspaces/{workspace_id}/github/repositories/{repository_id}/issues",
            get(github::issues),
        )
        .route("/dead-messages", get(dead_messages::list))
        .route("/dead-messages/{id}/replay", post(dead_messages::replay))
        .fallback(not_found)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see /openapi.json for the API")
}

/// RFC 3339 text for API responses.
pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}
