//! GitLab routes.
//!
//! - `POST /webhooks/gitlab`: operator-created hooks. The endpoint is found by the digest of
//!   `X-Gitlab-Token`, which is then compared with the sealed secret in constant time. Subject
//!   `gitlab.<namespace>.<project>.<event>`, or `gitlab.<rootGroup>.?.<event>` for project,
//!   subgroup and member events.
//! - `POST /webhooks/gitlab/connections/{connectionId}/{keyId}/{routeId}`: hooks we registered.
//!   `X-Gitlab-Token` is a route credential bound to connection, key, route and origin. Subject
//!   `gitlab.?connection.<connectionId>.<event>`, whatever the payload's paths say.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use lifecycle_core::gitlab::route_credential;
use lifecycle_core::subject;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, provider_instance};
use uuid::Uuid;

use super::{header, json_object, str_at};
use crate::accept::{Routed, accept, select_headers};
use crate::endpoint::{Attempt, Endpoint, Lookup, One, Verified, with_fresh_retry};
use crate::reject::Rejection;
use crate::{AppState, verify};

const VENDOR: &str = "gitlab";

const KEPT: &[&str] = &[
    "X-Gitlab-Event",
    "X-Gitlab-Event-UUID",
    "X-Gitlab-Webhook-UUID",
    "Idempotency-Key",
    "X-Gitlab-Instance",
    "User-Agent",
    "Content-Type",
];

/// Events about a group's projects, subgroups and members: routed by root group.
const ROOT_GROUP_EVENTS: &[&str] = &[
    "project_create",
    "project_destroy",
    "project_rename",
    "project_transfer",
    "project_update",
    "subgroup_create",
    "subgroup_destroy",
    "group_rename",
    "user_add_to_group",
    "user_remove_from_group",
    "user_update_for_group",
    "user_access_request_to_group",
    "user_add_to_team",
    "user_remove_from_team",
    "user_update_for_team",
];

pub async fn receive_shared(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let token = header(&headers, "X-Gitlab-Token")
            .ok_or_else(|| Rejection::missing_signature("X-Gitlab-Token"))?;
        // The token names the endpoint; a token no endpoint holds is a bad token, refused before
        // the body is read.
        let lookup = Lookup::GitlabToken(token);
        super::known(&state, lookup, Rejection::unknown_hook).await?;
        let body = state
            .read_body(&headers, body, state.settings.body_limits.gitlab)
            .await?;
        with_fresh_retry(|attempt| {
            let (state, headers, body) = (&state, &headers, body.bytes.clone());
            async move {
                let ep = state
                    .endpoints
                    .find_one(&state.db, &state.secret_key, lookup, &attempt)
                    .await
                    .map_err(super::unknown_as(Rejection::unknown_hook))?;
                deliver_shared(state, &ep, headers, body).await
            }
        })
        .await
    };
    run.await.unwrap_or_else(|r| r.respond(VENDOR))
}

/// Verifies the plain token of an operator-created hook, routes by payload path, stores.
pub async fn deliver_shared(
    state: &AppState,
    ep: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let token = header(headers, "X-Gitlab-Token")
        .ok_or_else(|| Rejection::missing_signature("X-Gitlab-Token"))?;
    let verified = ep.verify(|secret| verify::gitlab_token(secret, token))?;
    // Only a verified delivery learns that its endpoint is disabled.
    ep.ensure_enabled()?;
    let payload = json_object(&body)?;
    let event = event_name(&payload, headers)?;
    let subject = route_by_path(&event, &payload)?.ok_or_else(|| {
        Rejection::malformed("the payload names no project or group path to route by")
    })?;
    let routed = Routed {
        event,
        subject,
        event_id: event_id(headers),
    };
    accept(
        state,
        VENDOR,
        ep,
        verified,
        routed,
        select_headers(headers, KEPT),
        body,
    )
    .await
}

pub async fn receive_registered(
    State(state): State<AppState>,
    Path((connection_id, key_id, route_id)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let (Ok(connection), Ok(route)) = (connection_id.parse::<Uuid>(), route_id.parse::<Uuid>())
        else {
            return Err(Rejection::unknown_endpoint());
        };
        let path = || Registered {
            connection,
            route,
            connection_id: &connection_id,
            key_id: &key_id,
            route_id: &route_id,
        };
        // The route and its credential are checked before a byte of the body is read.
        check_registered(&state, &Attempt::default(), &path(), &headers).await?;
        let body = state
            .read_body(&headers, body, state.settings.body_limits.gitlab)
            .await?;
        with_fresh_retry(|attempt| {
            let body = body.bytes.clone();
            let (state, headers, path) = (&state, &headers, path());
            async move { deliver_registered(state, &attempt, path, headers, body).await }
        })
        .await
    };
    run.await.unwrap_or_else(|r| r.respond(VENDOR))
}

/// The path of a hook we registered.
#[derive(Clone, Copy)]
struct Registered<'a> {
    connection: Uuid,
    route: Uuid,
    connection_id: &'a str,
    key_id: &'a str,
    route_id: &'a str,
}

/// The endpoint of a registered hook's route, once the route is one we registered for exactly
/// this connection, enabled, and its credential verifies for the connection's origin.
async fn check_registered(
    state: &AppState,
    attempt: &Attempt,
    path: &Registered<'_>,
    headers: &HeaderMap,
) -> Result<One, Rejection> {
    let Registered {
        connection,
        route,
        connection_id,
        key_id,
        route_id,
    } = *path;
    let ep = state
        .endpoints
        .find_one(&state.db, &state.secret_key, Lookup::Id(route), attempt)
        .await?;
    // The route must be a hook we registered for exactly this connection.
    if ep.ids.connection_id != connection
        || ep.ids.kind != ConnectionKind::Gitlab
        || ep.registration != Registration::Registered
    {
        return Err(Rejection::unknown_endpoint());
    }
    ep.ensure_enabled()?;
    let credential = header(headers, "X-Gitlab-Token")
        .ok_or_else(|| Rejection::missing_signature("X-Gitlab-Token"))?;
    let key = state
        .routing_keys
        .get(key_id)
        .ok_or_else(Rejection::bad_signature)?;
    let origin = route_credential::verify(key, connection_id, key_id, route_id, credential)
        .map_err(|_| Rejection::bad_signature())?;
    // The credential's origin must be the connection's GitLab instance.
    let configured = provider_instance::normalise_server_url(Some(&ep.origin));
    if provider_instance::normalise_server_url(Some(&origin)) != configured {
        return Err(Rejection::bad_signature());
    }
    // A supplied instance header must agree with the signed origin; it never selects anything.
    if let Some(instance) = header(headers, "X-Gitlab-Instance")
        && provider_instance::normalise_server_url(Some(instance)) != configured
    {
        return Err(Rejection::origin_mismatch());
    }
    Ok(ep)
}

/// Verifies a registered hook's route credential, admits the payload, stores it.
async fn deliver_registered(
    state: &AppState,
    attempt: &Attempt,
    path: Registered<'_>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let ep = check_registered(state, attempt, &path, headers).await?;
    let connection = path.connection;
    let payload = json_object(&body)?;
    // Admission: a group-bound route accepts only its group's payloads, judged by a full path
    // the payload states.
    if let (Some(group), Some(path)) = (&ep.provider_ref, stated_full_path(&payload))
        && !within(&path, group)
    {
        return Err(Rejection::malformed(
            "the payload's project or group is outside the group this route was registered for",
        ));
    }
    let event = event_name(&payload, headers)?;
    let routed = Routed {
        subject: subject::gitlab_connection(&connection.to_string(), &event)?,
        event,
        event_id: event_id(headers),
    };
    accept(
        state,
        VENDOR,
        &ep,
        Verified::without_secret(),
        routed,
        select_headers(headers, KEPT),
        body,
    )
    .await
}

/// `Idempotency-Key` (stable across retries), then the event UUID.
fn event_id(headers: &HeaderMap) -> Option<String> {
    header(headers, "Idempotency-Key")
        .or_else(|| header(headers, "X-Gitlab-Event-UUID"))
        .map(str::to_owned)
}

/// `object_kind`, else the system-hook `event_name`, else the `X-Gitlab-Event` header.
fn event_name(payload: &serde_json::Value, headers: &HeaderMap) -> Result<String, Rejection> {
    if let Some(kind) = str_at(payload, "/object_kind").or_else(|| str_at(payload, "/event_name")) {
        return Ok(kind.to_owned());
    }
    header(headers, "X-Gitlab-Event")
        .map(|h| {
            h.trim_end_matches(" Hook")
                .to_ascii_lowercase()
                .replace(' ', "_")
        })
        .ok_or_else(|| Rejection::malformed("the payload has no object_kind or event_name"))
}

/// Where a payload states the full path of the project or group it is about.
const FULL_PATHS: &[&str] = &[
    "/project/path_with_namespace",
    "/path_with_namespace",
    "/project_path_with_namespace",
    "/full_path",
    "/group/full_path",
];

/// The full path of the project or group a payload is about, as it states it.
fn stated_full_path(p: &serde_json::Value) -> Option<String> {
    FULL_PATHS
        .iter()
        .find_map(|ptr| str_at(p, ptr))
        .map(str::to_owned)
}

/// The path to route a payload by: its full path, else a member event's `group_path`. GitLab
/// names a member event's group by its own segment (`team-a` for `acme/team-a`), which says
/// nothing of where the group sits, so it never decides a group-bound route's admission: the
/// group's id is admitted downstream against the connection's organization.
fn payload_path(p: &serde_json::Value) -> Option<String> {
    stated_full_path(p).or_else(|| str_at(p, "/group_path").map(str::to_owned))
}

fn within(path: &str, group: &str) -> bool {
    let (path, group) = (path.to_ascii_lowercase(), group.to_ascii_lowercase());
    path == group || path.starts_with(&format!("{group}/"))
}

/// The shared route's subject for `event`; `None` when the payload names no path to route by,
/// an error when a name is too long for a subject token.
pub fn route_by_path(
    event: &str,
    p: &serde_json::Value,
) -> Result<Option<String>, subject::SubjectError> {
    let Some(path) = payload_path(p) else {
        return Ok(None);
    };
    let project = str_at(p, "/project/path_with_namespace");
    match project {
        Some(full) if !ROOT_GROUP_EVENTS.contains(&event) => match full.rsplit_once('/') {
            Some((namespace, name)) => subject::gitlab_project(namespace, name, event).map(Some),
            None => Ok(None),
        },
        _ => match path.split('/').next().filter(|r| !r.is_empty()) {
            Some(root) => subject::gitlab_root_group(root, event).map(Some),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn project_events_route_by_namespace_and_group_events_by_root_group() {
        let mr = json!({"object_kind": "merge_request",
            "project": {"path_with_namespace": "acme/platform/api"}});
        assert_eq!(
            route_by_path("merge_request", &mr).unwrap().unwrap(),
            "gitlab.acme/platform.api.merge_request"
        );
        let create = json!({"event_name": "project_create", "path_with_namespace": "acme/sub/new"});
        assert_eq!(
            route_by_path("project_create", &create).unwrap().unwrap(),
            "gitlab.acme.?.project_create"
        );
        let member = json!({"event_name": "user_add_to_group", "group_path": "acme"});
        assert_eq!(
            route_by_path("user_add_to_group", &member)
                .unwrap()
                .unwrap(),
            "gitlab.acme.?.user_add_to_group"
        );
        let subgroup_member = json!({"event_name": "user_add_to_group", "group_path": "team-a"});
        assert_eq!(stated_full_path(&subgroup_member), None);
        assert!(within("acme/sub/x", "acme"));
        assert!(!within("acmeX/sub", "acme"));
    }
}
