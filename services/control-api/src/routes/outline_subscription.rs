//! Where an Outline connection's webhook subscription stands: its newest registration
//! (requested, adopted, failed, or created for an older generation and left for provider
//! repair), Outline's id of it, the team it is on, and why the last activation left it missing.
//! Read from what outline-sync records; scoped to the caller's workspace like every connection
//! route. Never the endpoint's secret or address.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use outline_mirror::SUBSCRIPTION;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};
use store::entity::inbound_endpoint::EndpointStatus;
use store::entity::{ConnectionKind, connection_activity, inbound_endpoint};
use store::registration::{self, RegistrationState};
use uuid::Uuid;

use super::connections::find_connection;
use super::{ConnectionPath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, PathParams, Unauthorized};

/// An Outline connection's webhook subscription registration.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubscriptionView {
    pub connection_id: Uuid,
    pub registration_id: Uuid,
    /// `requested` (created or not: settled by its marker at the next activation), `adopted`
    /// (the connection's own), `failed` (Outline refused it) or `created` (made for an older
    /// connection version or generation, left for provider repair to remove).
    pub state: String,
    /// Whether it was asked for in the connection's current lifecycle generation.
    pub current: bool,
    /// Outline's id of the subscription, once known.
    pub subscription_id: Option<String>,
    /// The Outline team it is on.
    pub team_id: String,
    /// SHA-256 of the URL it delivers to (the URL itself addresses the endpoint).
    pub url_hash: String,
    /// The endpoint it delivers to, and whether that still takes deliveries.
    pub endpoint_id: Option<Uuid>,
    pub endpoint_status: Option<String>,
    pub requested_at: String,
    pub resolved_at: Option<String>,
    /// Why Outline refused the create (a `failed` registration), or why the last activation
    /// left the connection without an open subscription.
    pub reason: Option<String>,
    /// When the last activation step was recorded.
    pub checked_at: Option<String>,
}

/// Read an Outline connection's webhook subscription
///
/// Its newest registration: state, Outline's id, the team, and why it is not open.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections/{connection_id}/outline/subscription",
    operation_id = "getOutlineSubscription", params(ConnectionPath), tag = "connections",
    responses((status = 200, description = "The connection's subscription registration.", body = SubscriptionView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such Outline connection in a workspace this token reaches, or no subscription registered for it yet (`no_subscription`).", body = ErrorBody)))]
pub async fn subscription(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let conn = find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    if conn.kind != ConnectionKind::Outline {
        return Err(ApiError::not_found("Outline connection"));
    }
    let pool = state.db.get_postgres_connection_pool();
    let regs = registration::of_connection(pool, conn.id, SUBSCRIPTION)
        .await
        .map_err(ApiError::internal)?;
    // The current lifecycle generation's newest (an adopted one stays the connection's own
    // across a pause and resume), else the newest of any.
    let Some(reg) = regs
        .iter()
        .find(|r| r.generation.lifecycle_generation == conn.lifecycle_generation.max(0) as u64)
        .or(regs.first())
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_subscription",
            "no webhook subscription is registered for this connection yet: its \
             activation registers one (activate the connection, or Sync now to retry)",
        ));
    };
    let endpoint_status = match reg.endpoint_id {
        Some(id) => inbound_endpoint::Entity::find_by_id(id)
            .one(&state.db)
            .await?
            .filter(|e| e.connection_id == conn.id)
            .map(|e| status_name(e.status)),
        None => None,
    };
    // The last activation's word on the subscription (or on the token, which comes first).
    let last = connection_activity::Entity::find()
        .filter(connection_activity::Column::ConnectionId.eq(conn.id))
        .filter(
            connection_activity::Column::Activity
                .is_in(["outline_activation_auth", "outline_activation_subscription"]),
        )
        .order_by_desc(connection_activity::Column::CreatedAt)
        .order_by_desc(connection_activity::Column::Id)
        .one(&state.db)
        .await?
        .map(|a| {
            let reason = a.detail["reason"].as_str().map(str::to_owned);
            (reason, a.created_at)
        });
    let reason = match reg.state {
        RegistrationState::Failed => reg.failure.clone(),
        _ => last.as_ref().and_then(|(reason, _)| reason.clone()),
    };
    Ok(Json(SubscriptionView {
        connection_id: conn.id,
        registration_id: reg.id,
        state: match reg.state {
            RegistrationState::Requested => "requested",
            RegistrationState::Adopted => "adopted",
            RegistrationState::Failed => "failed",
            RegistrationState::Created => "created",
            RegistrationState::Removed => "removed",
        }
        .to_owned(),
        current: reg.generation.lifecycle_generation == conn.lifecycle_generation.max(0) as u64,
        subscription_id: reg.vendor_id.clone(),
        team_id: reg.target.clone(),
        url_hash: reg.url_hash.clone(),
        endpoint_id: reg.endpoint_id,
        endpoint_status,
        requested_at: rfc3339(reg.requested_at),
        resolved_at: reg.resolved_at.map(rfc3339),
        reason,
        checked_at: last.map(|(_, at)| rfc3339(at)),
    }))
}

fn status_name(status: EndpointStatus) -> String {
    match status {
        EndpointStatus::Active => "active",
        EndpointStatus::Rotating => "rotating",
        EndpointStatus::Disabled => "disabled",
    }
    .to_owned()
}
