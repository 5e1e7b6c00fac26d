//! Where a GitLab connection's activation stands: its last discovery and why it was incomplete,
//! the connection consumer, and the group hook (registered, unknown, refused, disabled by
//! GitLab). Read from what gitlab-sync records; scoped to the caller's workspace like every
//! connection route.

use axum::Json;
use axum::extract::State;
use scm_mirror::gitlab::{self, GROUP_HOOK};
use serde::{Deserialize, Serialize};
use store::entity::ConnectionKind;
use store::registration::{self, RegistrationState};
use time::OffsetDateTime;
use uuid::Uuid;

use super::connections::find_connection;
use super::{ConnectionPath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, PathParams, Unauthorized};

/// The last discovery of the connected group's projects.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DiscoveryView {
    /// Both listings ended cleanly and the projects found equal GitLab's count.
    pub complete: bool,
    /// Why it was incomplete.
    pub reason: Option<String>,
    pub groups_found: Option<i64>,
    pub projects_found: Option<i64>,
    /// GitLab's own count of the group's projects, subgroups included.
    pub project_count: Option<i64>,
    pub at: Option<String>,
}

/// The durable consumer that takes the connection's registered hooks.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsumerView {
    pub name: Option<String>,
    /// When the NATS server last confirmed it takes the connection's subjects.
    pub confirmed_at: Option<String>,
    /// Why the last confirmation failed.
    pub reason: Option<String>,
}

/// The connection's group hook.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HookView {
    /// `open`, `unknown` (a create whose outcome is not settled yet), `refused` or `none`.
    pub state: String,
    /// GitLab's hook id, once known.
    pub hook_id: Option<String>,
    /// The GitLab group it is registered on.
    pub group_id: Option<String>,
    pub requested_at: Option<String>,
    /// Why there is no open hook.
    pub reason: Option<String>,
    /// GitLab disabled the hook after failing deliveries.
    pub disabled: bool,
    pub disabled_until: Option<String>,
    /// GitLab's `alert_status` as last listed.
    pub alert_status: Option<String>,
    pub checked_at: Option<String>,
}

/// A GitLab connection's activation.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivationView {
    pub connection_id: Uuid,
    /// The connection's status (pending, active, ...).
    pub status: String,
    /// Null before the first discovery.
    pub discovery: Option<DiscoveryView>,
    pub consumer: ConsumerView,
    pub hook: HookView,
}

fn time(t: Option<OffsetDateTime>) -> Option<String> {
    t.map(rfc3339)
}

/// Read a GitLab connection's activation
///
/// Discovery (and why it was incomplete), the connection consumer, and the group hook with
/// GitLab's disabled state.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections/{connection_id}/gitlab/activation",
    operation_id = "getGitlabActivation", params(ConnectionPath), tag = "connections",
    responses((status = 200, description = "Where the connection's activation stands.", body = ActivationView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such GitLab connection in a workspace this token reaches.", body = ErrorBody)))]
pub async fn activation(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
) -> Result<Json<ActivationView>, ApiError> {
    let conn = find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    if conn.kind != ConnectionKind::Gitlab {
        return Err(ApiError::not_found("GitLab connection"));
    }
    let pool = state.db.get_postgres_connection_pool();
    let recorded = gitlab::activation::get(pool, conn.id)
        .await
        .map_err(ApiError::internal)?;
    let regs = registration::of_connection(pool, conn.id, GROUP_HOOK)
        .await
        .map_err(ApiError::internal)?;
    // The newest hook of the connection's current lifecycle generation (an adopted one stays
    // the connection's own across a pause and resume, until a capture fences it).
    let hook = regs
        .iter()
        .find(|r| r.generation.lifecycle_generation == conn.lifecycle_generation.max(0) as u64);
    let (hook_state, reason) = match hook.map(|r| r.state) {
        Some(RegistrationState::Adopted) => ("open", None),
        Some(RegistrationState::Requested) => (
            "unknown",
            recorded.as_ref().and_then(|a| a.hook_reason.clone()),
        ),
        Some(RegistrationState::Failed) => ("refused", hook.and_then(|r| r.failure.clone())),
        Some(RegistrationState::Created | RegistrationState::Removed) | None => (
            "none",
            recorded.as_ref().and_then(|a| a.hook_reason.clone()),
        ),
    };
    let now = OffsetDateTime::now_utc();
    let a = recorded.as_ref();
    let disabled_until = a.and_then(|a| a.hook_disabled_until);
    let alert_status = a.and_then(|a| a.hook_alert_status.clone());
    let disabled = hook_state == "open"
        && (disabled_until.is_some_and(|t| t > now)
            || alert_status
                .as_deref()
                .is_some_and(|s| s.ends_with("disabled")));
    Ok(Json(ActivationView {
        connection_id: conn.id,
        status: super::connections::status_name(conn.status),
        discovery: a
            .filter(|a| a.discovered_at.is_some())
            .map(|a| DiscoveryView {
                complete: a.discovery_complete,
                reason: a.discovery_reason.clone(),
                groups_found: a.groups_found,
                projects_found: a.projects_found,
                project_count: a.project_count,
                at: time(a.discovered_at),
            }),
        consumer: ConsumerView {
            name: a.and_then(|a| a.consumer.clone()),
            confirmed_at: time(a.and_then(|a| a.consumer_confirmed_at)),
            reason: a.and_then(|a| a.consumer_reason.clone()),
        },
        hook: HookView {
            state: hook_state.to_owned(),
            hook_id: hook.and_then(|r| r.vendor_id.clone()),
            group_id: hook.map(|r| r.target.clone()),
            requested_at: time(hook.map(|r| r.requested_at)),
            reason,
            disabled,
            disabled_until: time(disabled_until),
            alert_status,
            checked_at: time(a.and_then(|a| a.hook_checked_at)),
        },
    }))
}
