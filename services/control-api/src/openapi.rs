//! The OpenAPI 3.1 document, generated from the handlers' annotations and served at
//! `/openapi.json`: the contract operators generate clients from.

use axum::Json;
use axum::http::Method;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::error::{BadRequest, Forbidden, PayloadTooLarge, Unauthorized, UnsupportedMediaType};
use crate::routes::{
    connections, dead_messages, endpoints, erasures, github, gitlab, gitlab_activation, jobs,
    oauth, outline, outline_subscription, provider_repairs, slack, workspaces,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "forgesync control-api",
        description = "Operators' API of forgesync: workspaces, connections and their lifecycle, \
            sync jobs, webhook endpoints, Slack channel consent, dead messages, provider repairs and reads of the mirrors (GitHub, GitLab, Slack, Outline).\n\n\
            Every operation but this document needs `Authorization: Bearer <JWT>`. A viewer \
            token reads; writes need the admin role; a workspace token reaches only its own \
            workspace, and other workspaces answer 404 as if they did not exist. Every error \
            answers an `ErrorBody`; besides the responses each operation lists, any operation \
            may answer 500 (`internal`) or 503 (`database_unavailable`)."
    ),
    paths(
        serve,
        workspaces::create, workspaces::list, workspaces::get, workspaces::purge,
        connections::create, connections::list, connections::get, connections::audit,
        connections::transition, connections::replace_secrets,
        oauth::authorize, oauth::callback, oauth::exchanges,
        gitlab_activation::activation, outline_subscription::subscription,
        jobs::create, jobs::list, jobs::cancel,
        endpoints::create, endpoints::rotate_secret, endpoints::replay,
        github::repositories, github::issues,
        gitlab::projects, gitlab::issues, gitlab::merge_requests, gitlab::merge_request,
        slack::channels, slack::messages, slack::consent, slack::pause, slack::resume,
        slack::withdraw,
        outline::collections, outline::documents, outline::document,
        dead_messages::list, dead_messages::replay,
        provider_repairs::list, provider_repairs::get, provider_repairs::confirm,
        provider_repairs::release,
        erasures::list, erasures::scan,
    ),
    components(responses(BadRequest, Unauthorized, Forbidden, PayloadTooLarge, UnsupportedMediaType)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "meta", description = "This document."),
        (name = "workspaces", description = "The tenants."),
        (name = "connections", description = "Vendor connections and their lifecycle."),
        (name = "jobs", description = "Sync jobs of a connection."),
        (name = "endpoints", description = "Webhook endpoints and replays of received messages."),
        (name = "github", description = "Reads of the GitHub mirror, scoped to the workspace."),
        (name = "gitlab", description = "Reads of the GitLab mirror, scoped to the workspace."),
        (name = "slack", description = "Slack channels, their consent and the messages kept of them, scoped to the workspace."),
        (name = "outline", description = "Reads of the Outline mirror (collections, documents), scoped to the workspace."),
        (name = "dead_messages", description = "Messages consumers gave up on (operators only)."),
        (name = "provider_repairs", description = "Fences of what we created at vendors and must remove; confirmation and release by instance admins (operators only)."),
        (name = "erasures", description = "Erasure of disconnected connections and purged workspaces."),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// This OpenAPI document
///
/// The API's contract; it needs no token.
#[utoipa::path(get, path = "/openapi.json", operation_id = "getOpenApi", tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = Object)))]
pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The keys of an OpenAPI path item that are operations (the others are shared fields).
const OPERATIONS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Where the served routes and the document disagree: a route served without documentation,
/// or an operation documented but not served. Empty when they agree.
pub fn mismatches(served: &[(Method, &str)], document: &serde_json::Value) -> Vec<String> {
    let mut documented: Vec<(String, String)> = document["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flatten()
                .filter(|(key, _)| OPERATIONS.contains(&key.as_str()))
                .map(move |(method, _)| (method.to_uppercase(), path.clone()))
        })
        .collect();
    let mut out = Vec::new();
    for (method, path) in served {
        let key = (method.as_str().to_owned(), (*path).to_owned());
        match documented.iter().position(|d| *d == key) {
            Some(i) => {
                documented.swap_remove(i);
            }
            None => out.push(format!("{method} {path} is served but not documented")),
        }
    }
    out.extend(
        documented
            .into_iter()
            .map(|(method, path)| format!("{method} {path} is documented but not served")),
    );
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> serde_json::Value {
        serde_json::to_value(ApiDoc::openapi()).unwrap()
    }

    #[test]
    fn every_served_route_is_documented_and_nothing_else_is() {
        let table = crate::routes::table();
        assert_eq!(
            mismatches(table.served(), &document()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_route_whose_documentation_is_removed_is_reported() {
        let table = crate::routes::table();
        let mut doc = document();
        let paths = doc["paths"].as_object_mut().unwrap();
        paths.remove("/workspaces/{workspace_id}/purge").unwrap();
        // One method of a path with two.
        paths["/workspaces"]
            .as_object_mut()
            .unwrap()
            .remove("get")
            .unwrap();
        assert_eq!(
            mismatches(table.served(), &doc),
            [
                "GET /workspaces is served but not documented",
                "POST /workspaces/{workspace_id}/purge is served but not documented",
            ]
        );
    }

    #[test]
    fn an_operation_documented_but_not_served_is_reported() {
        let served: Vec<_> = crate::routes::table()
            .served()
            .iter()
            .filter(|(_, path)| *path != "/dead-messages")
            .cloned()
            .collect();
        assert_eq!(
            mismatches(&served, &document()),
            ["GET /dead-messages is documented but not served"]
        );
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document();
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count, "{ids:?}");
        assert_eq!(count, crate::routes::table().served().len());
    }
}
