//! Webhook endpoints of a connection: creation, secret rotation, and explicit replay of a
//! received message. Secrets are returned once, when issued, and stored sealed.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sea_orm::{EntityTrait, QuerySelect, SqlErr, TransactionTrait};
use serde::{Deserialize, Serialize};
use store::entity::inbound_endpoint::{self, Registration};
use store::entity::{ConnectionKind, ConnectionStatus, inbound_endpoint::EndpointStatus};
use store::inbound::{NewEndpoint, ReplayClosed, ReplayError};
use store::secrets::SecretError;
use uuid::Uuid;

use super::connections::find_connection;
use super::{ConnectionPath, WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::Admin;
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, JsonBody, PathParams, PayloadTooLarge, RawBody,
    Unauthorized, UnsupportedMediaType,
};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// operator, registered or app.
    #[schema(value_type = String, example = "operator")]
    pub registration: Registration,
    /// GitHub hook id, Slack team id, Outline subscription id, or a GitLab group path.
    #[serde(default)]
    pub provider_ref: Option<String>,
    /// Give the endpoint a token-addressed route (`/hooks/{token}`).
    #[serde(default)]
    pub address: bool,
    /// The signing secret; generated when omitted.
    #[serde(default)]
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// The new secret; generated when omitted.
    #[serde(default)]
    pub secret: Option<String>,
    /// Seconds the previous secret keeps verifying (default: the configured window, one day).
    #[serde(default)]
    pub window_secs: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointView {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub kind: String,
    pub registration: String,
    pub provider_ref: Option<String>,
    pub address_token: Option<String>,
    /// active, rotating or disabled.
    pub status: String,
    pub previous_valid_until: Option<String>,
    /// Only in the answer that issued it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

fn name<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn view(m: inbound_endpoint::Model, secret: Option<String>) -> EndpointView {
    EndpointView {
        id: m.id,
        connection_id: m.connection_id,
        kind: m.kind.as_str().to_owned(),
        registration: name(m.registration),
        provider_ref: m.provider_ref,
        address_token: m.address_token,
        status: name(m.status),
        previous_valid_until: m.previous_valid_until.map(rfc3339),
        secret,
    }
}

fn secret_or_random(given: Option<String>) -> Result<String, ApiError> {
    match given {
        Some(s) if s.len() < 16 => Err(ApiError::bad_request(
            "a webhook secret must be at least 16 characters",
        )),
        Some(s) => Ok(s),
        None => store::inbound::random_token().map_err(ApiError::internal),
    }
}

/// Create a webhook endpoint
///
/// The answer carries the signing secret, once. An app endpoint, or one a shared vendor route
/// selects (by `provider_ref`), needs an operator token; a workspace token may create
/// token-addressed endpoints.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections/{connection_id}/endpoints",
    operation_id = "createEndpoint", params(ConnectionPath), request_body = CreateEndpoint,
    responses((status = 201, description = "The endpoint, with its secret.", body = EndpointView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The connection is disconnected (`connection_closed`), or another enabled endpoint has this provider_ref (`provider_ref_taken`; an Outline subscription id within the workspace).", body = ErrorBody),
              (status = 422, description = "An Outline endpoint without its subscription's id (`provider_ref_required`).", body = ErrorBody),
              (status = 413, response = PayloadTooLarge), (status = 415, response = UnsupportedMediaType)))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
    JsonBody(body): JsonBody<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let secret = secret_or_random(body.secret)?;
    let txn = state.db.begin().await?;
    let conn = find_connection(&txn, &caller, workspace_id, connection_id, true).await?;
    let address_token = if body.address {
        Some(store::inbound::random_token().map_err(ApiError::internal)?)
    } else {
        None
    };
    let new = NewEndpoint {
        workspace_id,
        connection_id,
        kind: conn.kind,
        registration: body.registration,
        provider_ref: body.provider_ref,
        address_token,
        // The answer shows the secret to the caller: only an operator's keeps it from tenants,
        // and a delivery signed with a secret a tenant knows is a claim, not a fact.
        tenant_keyed: !caller.operator,
    };
    // An endpoint a shared vendor route selects is not scoped to one workspace: operators only.
    if new.on_shared_route() {
        caller.require_operator().map_err(|_| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "an app endpoint, or one that a shared vendor route selects by provider_ref \
                 (GitHub hook id, Slack team id) or by token (operator GitLab hook), needs an \
                 operator token; a workspace token may create token-addressed endpoints \
                 (`\"address\": true`, no provider_ref)",
            )
        })?;
    }
    if matches!(
        conn.status,
        ConnectionStatus::Disconnected | ConnectionStatus::Uninstalled
    ) {
        return Err(ApiError::conflict(
            "connection_closed",
            "a disconnected connection cannot gain webhook endpoints",
        ));
    }
    // An Outline endpoint is bound to its subscription: a delivery naming any other is refused,
    // so one without an id would take every subscription's deliveries.
    if new.kind == ConnectionKind::Outline
        && new
            .provider_ref
            .as_deref()
            .is_none_or(|r| r.trim().is_empty())
    {
        return Err(ApiError::unprocessable(
            "provider_ref_required",
            "an Outline endpoint names its webhook subscription's id in provider_ref",
        ));
    }
    let (kind, provider_ref) = (new.kind, new.provider_ref.clone());
    let row = store::inbound::create_endpoint(&txn, &state.secret_key, new, secret.as_bytes())
        .await
        .map_err(|e| match e {
            // One enabled endpoint per vendor id; the index decides, also under a race.
            SecretError::Db(e) if is_provider_ref_taken(&e) => ApiError::conflict(
                "provider_ref_taken",
                format!(
                    "another enabled {} endpoint already has provider_ref {:?}; disable it \
                     (disconnect its connection) before claiming the id again",
                    kind.as_str(),
                    provider_ref.unwrap_or_default()
                ),
            ),
            e => ApiError::internal(e),
        })?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, endpoint = %row.id, actor = %caller.sub, "webhook endpoint created");
    Ok((StatusCode::CREATED, Json(view(row, Some(secret)))))
}

/// Whether `e` is the violation of the one-enabled-endpoint-per-provider_ref index.
fn is_provider_ref_taken(e: &sea_orm::DbErr) -> bool {
    matches!(e.sql_err(), Some(SqlErr::UniqueConstraintViolation(msg))
        if msg.contains(store::inbound::PROVIDER_REF_INDEX)
            || msg.contains(store::inbound::OUTLINE_SUBSCRIPTION_INDEX))
}

/// The longest rotation window: a leaked old secret stays useful no longer than this.
pub const MAX_ROTATION_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// Rotate a webhook endpoint's secret
///
/// The previous secret keeps verifying for the window. The body is optional: without one, a
/// secret is generated and the configured window applies.
#[utoipa::path(post,
    path = "/workspaces/{workspace_id}/connections/{connection_id}/endpoints/{endpoint_id}/rotate-secret",
    operation_id = "rotateEndpointSecret",
    params(ConnectionPath, ("endpoint_id" = Uuid, Path, description = "The endpoint's id.")),
    request_body(content = RotateSecret, description = "Optional.", content_type = "application/json"),
    responses((status = 200, description = "The endpoint, with its new secret.", body = EndpointView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such endpoint of a connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The endpoint is disabled (`endpoint_disabled`).", body = ErrorBody),
              (status = 413, response = PayloadTooLarge),
              (status = 422, description = "The window is longer than 7 days (`rotation_window_too_long`).", body = ErrorBody)))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id, endpoint_id)): PathParams<(Uuid, Uuid, Uuid)>,
    RawBody(body): RawBody,
) -> Result<Json<EndpointView>, ApiError> {
    // The body is optional: an empty one generates a secret with the default window.
    let body: RotateSecret = if body.is_empty() {
        RotateSecret::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))?
    };
    let window = body
        .window_secs
        .map_or(state.rotation_window, Duration::from_secs);
    // Rotation windows are capped (and the store adds them to now checked).
    if window > MAX_ROTATION_WINDOW {
        return Err(ApiError::unprocessable(
            "rotation_window_too_long",
            format!(
                "window_secs may be at most {} (7 days); got {}",
                MAX_ROTATION_WINDOW.as_secs(),
                window.as_secs()
            ),
        ));
    }
    let secret = secret_or_random(body.secret)?;
    let txn = state.db.begin().await?;
    find_connection(&txn, &caller, workspace_id, connection_id, false).await?;
    let endpoint = inbound_endpoint::Entity::find_by_id(endpoint_id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .filter(|e| e.workspace_id == workspace_id && e.connection_id == connection_id)
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    if endpoint.status == EndpointStatus::Disabled {
        return Err(ApiError::conflict(
            "endpoint_disabled",
            "the endpoint is disabled; its connection was disconnected",
        ));
    }
    // Who may create an endpoint a shared route selects is who may choose its secret.
    let shared = store::inbound::on_shared_route(
        endpoint.registration,
        endpoint.kind,
        endpoint.provider_ref.is_some(),
    );
    if shared {
        caller.require_operator()?;
    }
    let tenant_keyed = !caller.operator;
    let row = store::inbound::rotate_secret(
        &txn,
        &state.secret_key,
        endpoint,
        secret.as_bytes(),
        window,
        tenant_keyed,
    )
    .await
    .map_err(ApiError::internal)?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, endpoint = %endpoint_id, actor = %caller.sub,
        window_secs = window.as_secs(), "webhook secret rotated");
    Ok(Json(view(row, Some(secret))))
}

/// 409 for a replay into a connection or endpoint that accepts nothing.
pub fn replay_closed(closed: &ReplayClosed) -> ApiError {
    ApiError::conflict(
        "replay_closed",
        format!("{closed}; a replay goes only to an active connection and an enabled endpoint"),
    )
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayView {
    /// The new message.
    pub message_id: Uuid,
    pub replay_of: Uuid,
    pub subject: String,
}

/// Replay a received webhook message
///
/// Publishes its stored raw body again as a new message.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/inbound-messages/{message_id}/replay",
    operation_id = "replayInboundMessage",
    params(WorkspacePath, ("message_id" = Uuid, Path, description = "The received message's id.")),
    responses((status = 202, description = "The new message, accepted.", body = ReplayView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such message in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The raw body is gone (`body_gone`), or its connection or endpoint accepts nothing (`replay_closed`).", body = ErrorBody)))]
pub async fn replay(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, message_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<ReplayView>), ApiError> {
    if !caller.reaches(workspace_id) {
        return Err(ApiError::not_found("inbound message"));
    }
    let txn = state.db.begin().await?;
    let accepted = store::inbound::replay(&txn, workspace_id, message_id)
        .await
        .map_err(|e| match e {
            ReplayError::NotFound(_) => ApiError::not_found("inbound message"),
            ReplayError::BodyGone(_) => ApiError::conflict(
                "body_gone",
                "the raw body of this message was erased or expired; it cannot be replayed",
            ),
            ReplayError::Closed(closed) => replay_closed(&closed),
            ReplayError::Db(e) => e.into(),
        })?;
    txn.commit().await?;
    tracing::info!(%workspace_id, replay_of = %message_id, message = %accepted.message_id,
        actor = %caller.sub, "inbound message replayed");
    Ok((
        StatusCode::ACCEPTED,
        Json(ReplayView {
            message_id: accepted.message_id,
            replay_of: message_id,
            subject: accepted.message.subject,
        }),
    ))
}
