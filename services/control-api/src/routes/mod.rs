//! The API's routes, one module per resource.

pub mod connections;
pub mod dead_messages;
pub mod endpoints;
pub mod erasures;
pub mod github;
pub mod gitlab;
pub mod gitlab_activation;
pub mod jobs;
pub mod oauth;
pub mod outline;
pub mod outline_subscription;
pub mod provider_repairs;
pub mod scm;
pub mod slack;
pub mod workspaces;

/// A page of a list, by keyset: what follows the entry `after` names, at most `limit` of it.
/// Every list route pages, so no list grows past what one answer holds.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KeysetPage {
    /// Entries after this one (the last `id` of the previous page).
    pub after: Option<uuid::Uuid>,
    /// At most this many entries (default 100, at most 1000).
    pub limit: Option<u64>,
}

impl KeysetPage {
    /// The page size asked for, within bounds.
    pub fn limit(&self) -> u64 {
        self.limit.unwrap_or(100).clamp(1, 1000)
    }
}

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, post, put};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;

/// The router, and the method and path of every route it serves, recorded as routes are added
/// so that the OpenAPI document can be checked against what is really served.
pub struct RouteTable {
    router: Router<AppState>,
    served: Vec<(Method, &'static str)>,
}

impl RouteTable {
    fn new() -> Self {
        RouteTable {
            router: Router::new(),
            served: Vec::new(),
        }
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::GET, path, get(handler))
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::POST, path, post(handler))
    }

    fn put<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::PUT, path, put(handler))
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::DELETE, path, delete(handler))
    }

    fn add(mut self, method: Method, path: &'static str, route: MethodRouter<AppState>) -> Self {
        // Two methods on one path merge into one method router.
        self.router = self.router.route(path, route);
        self.served.push((method, path));
        self
    }

    /// Every route served, as (method, path template).
    pub fn served(&self) -> &[(Method, &'static str)] {
        &self.served
    }
}

/// Every route of the API; add a route here and document it in [`crate::openapi::ApiDoc`].
pub fn table() -> RouteTable {
    RouteTable::new()
        .get("/openapi.json", crate::openapi::serve)
        .post("/workspaces", workspaces::create)
        .get("/workspaces", workspaces::list)
        .get("/workspaces/{workspace_id}", workspaces::get)
        .post("/workspaces/{workspace_id}/purge", workspaces::purge)
        .get("/workspaces/{workspace_id}/erasures", erasures::list)
        .get("/workspaces/{workspace_id}/erasure-scan", erasures::scan)
        .post(
            "/workspaces/{workspace_id}/connections",
            connections::create,
        )
        .get("/workspaces/{workspace_id}/connections", connections::list)
        .get(
            "/workspaces/{workspace_id}/connections/{connection_id}",
            connections::get,
        )
        .get(
            "/workspaces/{workspace_id}/connections/{connection_id}/audit",
            connections::audit,
        )
        .get(
            "/workspaces/{workspace_id}/connections/{connection_id}/gitlab/activation",
            gitlab_activation::activation,
        )
        .get(
            "/workspaces/{workspace_id}/connections/{connection_id}/outline/subscription",
            outline_subscription::subscription,
        )
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/{transition}",
            connections::transition,
        )
        .put(
            "/workspaces/{workspace_id}/connections/{connection_id}/secrets",
            connections::replace_secrets,
        )
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/authorize",
            oauth::authorize,
        )
        .get("/oauth/callback", oauth::callback)
        .get("/slack-exchanges", oauth::exchanges)
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/sync",
            jobs::create,
        )
        .get(
            "/workspaces/{workspace_id}/connections/{connection_id}/jobs",
            jobs::list,
        )
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/jobs/{job_id}/cancel",
            jobs::cancel,
        )
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/endpoints",
            endpoints::create,
        )
        .post(
            "/workspaces/{workspace_id}/connections/{connection_id}/endpoints/{endpoint_id}/rotate-secret",
            endpoints::rotate_secret,
        )
        .post(
            "/workspaces/{workspace_id}/inbound-messages/{message_id}/replay",
            endpoints::replay,
        )
        .get(
            "/workspaces/{workspace_id}/github/repositories",
            github::repositories,
        )
        .get(
            "/workspaces/{workspace_id}/github/repositories/{repository_id}/issues",
            github::issues,
        )
        .get("/workspaces/{workspace_id}/gitlab/projects", gitlab::projects)
        .get(
            "/workspaces/{workspace_id}/gitlab/projects/{project_id}/issues",
            gitlab::issues,
        )
        .get(
            "/workspaces/{workspace_id}/gitlab/projects/{project_id}/merge-requests",
            gitlab::merge_requests,
        )
        .get(
            "/workspaces/{workspace_id}/gitlab/projects/{project_id}/merge-requests/{merge_request_id}",
            gitlab::merge_request,
        )
        .get("/workspaces/{workspace_id}/slack/channels", slack::channels)
        .get(
            "/workspaces/{workspace_id}/slack/channels/{channel_id}/messages",
            slack::messages,
        )
        .post(
            "/workspaces/{workspace_id}/slack/channels/{channel_id}/consent",
            slack::consent,
        )
        .delete(
            "/workspaces/{workspace_id}/slack/channels/{channel_id}/consent",
            slack::withdraw,
        )
        .post(
            "/workspaces/{workspace_id}/slack/channels/{channel_id}/pause",
            slack::pause,
        )
        .post(
            "/workspaces/{workspace_id}/slack/channels/{channel_id}/resume",
            slack::resume,
        )
        .get(
            "/workspaces/{workspace_id}/outline/collections",
            outline::collections,
        )
        .get(
            "/workspaces/{workspace_id}/outline/documents",
            outline::documents,
        )
        .get(
            "/workspaces/{workspace_id}/outline/documents/{document_id}",
            outline::document,
        )
        .get("/dead-messages", dead_messages::list)
        .post("/dead-messages/{id}/replay", dead_messages::replay)
        .get("/provider-repairs", provider_repairs::list)
        .get("/provider-repairs/{id}", provider_repairs::get)
        .post("/provider-repairs/{id}/confirm", provider_repairs::confirm)
        .post("/provider-repairs/{id}/release", provider_repairs::release)
}

pub fn router() -> Router<AppState> {
    table().router.fallback(not_found)
}

/// The path parameter naming a workspace, declared once for the OpenAPI document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WorkspacePath {
    /// The workspace's id.
    pub workspace_id: Uuid,
}

/// The path parameters naming a connection in its workspace.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ConnectionPath {
    /// The workspace's id.
    pub workspace_id: Uuid,
    /// The connection's id.
    pub connection_id: Uuid,
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see /openapi.json for the API")
}

/// RFC 3339 text for API responses.
pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}
