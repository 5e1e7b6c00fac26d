//! `POST /webhooks/github`: `X-Hub-Signature-256` over the raw body; the endpoint is the hook
//! named by `X-GitHub-Hook-ID`. Subject `github.<owner>.<repo>.<event>`, or
//! `github.<owner>.?.<event>` for owner-level events.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use lifecycle_core::subject;
use store::entity::ConnectionKind;

use super::{header, json_object, str_at};
use crate::accept::{Routed, accept, select_headers};
use crate::endpoint::{Endpoint, Lookup, with_fresh_retry};
use crate::reject::Rejection;
use crate::{AppState, verify};

const VENDOR: &str = "github";

/// Kept with the message; signatures are not.
const KEPT: &[&str] = &[
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-GitHub-Hook-ID",
    "X-GitHub-Hook-Installation-Target-ID",
    "X-GitHub-Hook-Installation-Target-Type",
    "User-Agent",
    "Content-Type",
];

/// Events about the owner rather than one repository (repository lifecycle included).
const OWNER_LEVEL: &[&str] = &[
    "repository",
    "installation",
    "installation_repositories",
    "installation_target",
    "organization",
    "membership",
    "github_app_authorization",
];

pub async fn receive(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        // The hook id names the endpoint; on this route every tenant shares, a missing or unknown
        // hook id is refused before a byte of the body is read, answered like a bad signature.
        let hook_id = header(&headers, "X-GitHub-Hook-ID")
            .ok_or_else(|| Rejection::missing_signature("X-GitHub-Hook-ID"))?;
        let lookup = Lookup::ProviderRef(ConnectionKind::Github, hook_id);
        super::known(&state, lookup, Rejection::unknown_hook).await?;
        let body = state
            .read_body(&headers, body, state.settings.body_limits.github)
            .await?;
        with_fresh_retry(|attempt| {
            let (state, headers, body) = (&state, &headers, body.bytes.clone());
            async move {
                let ep = state
                    .endpoints
                    .find_one(&state.db, &state.secret_key, lookup, &attempt)
                    .await
                    .map_err(super::unknown_as(Rejection::unknown_hook))?;
                deliver(state, &ep, headers, body).await
            }
        })
        .await
    };
    run.await.unwrap_or_else(|r| r.respond(VENDOR))
}

/// Verifies, routes and stores a GitHub delivery to `ep`.
pub async fn deliver(
    state: &AppState,
    ep: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let signature = header(headers, "X-Hub-Signature-256")
        .ok_or_else(|| Rejection::missing_signature("X-Hub-Signature-256"))?;
    let verified = ep.verify(|secret| verify::github(secret, signature, &body))?;
    // Only a signed delivery learns that its endpoint is disabled.
    ep.ensure_enabled()?;
    let event = header(headers, "X-GitHub-Event")
        .ok_or_else(|| Rejection::malformed("X-GitHub-Event is required"))?;
    let payload = json_object(&body)?;
    let Some(routed) = route(event, &payload, header(headers, "X-GitHub-Delivery"))? else {
        if event == "ping" {
            // A ping of an app-level hook names no owner: acknowledge it, store nothing.
            return Ok((StatusCode::OK, "pong").into_response());
        }
        return Err(Rejection::malformed(
            "the payload names no repository, organization or installation account to route by",
        ));
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

/// The subject of a GitHub event; `None` when the payload names no owner, an error when a name
/// is too long for a subject token.
pub fn route(
    event: &str,
    payload: &serde_json::Value,
    delivery: Option<&str>,
) -> Result<Option<Routed>, Rejection> {
    let Some(owner) = str_at(payload, "/repository/owner/login")
        .or_else(|| str_at(payload, "/organization/login"))
        .or_else(|| str_at(payload, "/installation/account/login"))
        // A renamed installation account is named at the top level, already by its new login.
        .or_else(|| {
            (event == "installation_target")
                .then(|| str_at(payload, "/account/login"))
                .flatten()
        })
    else {
        return Ok(None);
    };
    let repo = str_at(payload, "/repository/name");
    // Repository lifecycle and other owner-level events ride the owner's `?` level.
    let subject = match repo {
        Some(repo) if !OWNER_LEVEL.contains(&event) => subject::github(owner, repo, event)?,
        _ => subject::github_owner(owner, event)?,
    };
    Ok(Some(Routed {
        event: event.to_owned(),
        subject,
        event_id: delivery.map(str::to_owned),
    }))
}

#[cfg(test)]
mod tests {
    use super::route;
    use serde_json::json;

    #[test]
    fn repository_events_route_by_owner_and_repo_and_lifecycle_by_owner() {
        let p = json!({"repository": {"name": "socket.io", "owner": {"login": "Acme"}}});
        assert_eq!(
            route("push", &p, None).unwrap().unwrap().subject,
            "github.acme.socket%2Eio.push"
        );
        assert_eq!(
            route("repository", &p, None).unwrap().unwrap().subject,
            "github.acme.?.repository"
        );
        let i = json!({"installation": {"account": {"login": "acme"}}});
        assert_eq!(
            route("installation", &i, None).unwrap().unwrap().subject,
            "github.acme.?.installation"
        );
        assert!(route("ping", &json!({"hook": {}}), None).unwrap().is_none());
    }

    #[test]
    fn a_renamed_installation_account_routes_by_its_new_login_at_owner_level() {
        let p = json!({
            "action": "renamed",
            "account": {"login": "Acme-New"},
            "changes": {"login": {"from": "acme"}},
            "target_type": "Organization",
            "installation": {"id": 1},
        });
        assert_eq!(
            route("installation_target", &p, None)
                .unwrap()
                .unwrap()
                .subject,
            "github.acme-new.?.installation_target"
        );
        // Only that event is routed by a top-level account.
        assert!(route("push", &p, None).unwrap().is_none());
    }
}
