//! Dead messages: operators list what consumers gave up on, and replay it.

use axum::Json;
use axum::extract::State;
use sea_orm::{EntityTrait, QueryOrder, QuerySelect};
use serde::{Deserialize, Serialize};
use store::entity::dead_message;
use uuid::Uuid;

use super::rfc3339;
use crate::AppState;
use crate::auth::{Admin, Caller};
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, PathParams, QueryParams, Unauthorized,
};

/// A dead message; its body is not returned (it may hold third-party content), only its size.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadMessageView {
    pub id: Uuid,
    pub stream: String,
    pub consumer: String,
    pub subject: String,
    #[schema(value_type = Object)]
    pub headers: serde_json::Value,
    pub payload_bytes: usize,
    pub reason: String,
    pub attempts: i64,
    pub created_at: String,
    pub replayed_at: Option<String>,
    pub replay_count: i32,
}

impl From<dead_message::Model> for DeadMessageView {
    fn from(m: dead_message::Model) -> Self {
        DeadMessageView {
            id: m.id,
            stream: m.stream,
            consumer: m.consumer,
            subject: m.subject,
            headers: m.headers,
            payload_bytes: m.payload.len(),
            reason: m.reason,
            attempts: m.attempts,
            created_at: rfc3339(m.created_at),
            replayed_at: m.replayed_at.map(rfc3339),
            replay_count: m.replay_count,
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Page {
    /// At most this many, newest first (default 100, at most 1000).
    pub limit: Option<u64>,
}

/// List dead messages
///
/// Operator tokens only: dead messages span workspaces.
#[utoipa::path(get, path = "/dead-messages", operation_id = "listDeadMessages", params(Page),
    responses((status = 200, description = "Dead messages, newest first, without their bodies.", body = Vec<DeadMessageView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    QueryParams(page): QueryParams<Page>,
) -> Result<Json<Vec<DeadMessageView>>, ApiError> {
    // Dead messages span workspaces: operators only.
    caller.require_operator()?;
    let rows = dead_message::Entity::find()
        .order_by_desc(dead_message::Column::CreatedAt)
        .limit(page.limit.unwrap_or(100).min(1000))
        .all(&state.db)
        .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// Replay a dead message
///
/// Operator tokens only. Publishes the message again to its stream.
#[utoipa::path(post, path = "/dead-messages/{id}/replay", operation_id = "replayDeadMessage",
    params(("id" = Uuid, Path, description = "The dead message's id.")),
    responses((status = 202, description = "The message was published again.", body = DeadMessageView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such dead message.", body = ErrorBody),
              (status = 409, description = "Its connection or endpoint accepts nothing (`replay_closed`).", body = ErrorBody)))]
pub async fn replay(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams(id): PathParams<Uuid>,
) -> Result<(axum::http::StatusCode, Json<DeadMessageView>), ApiError> {
    caller.require_operator()?;
    let row = bus::dead::replay(&state.db, id)
        .await
        .map_err(|e| match e {
            bus::dead::ReplayError::NotFound(_) => ApiError::not_found("dead message"),
            bus::dead::ReplayError::Closed(closed) => super::endpoints::replay_closed(&closed),
            bus::dead::ReplayError::Db(e) => e.into(),
        })?;
    tracing::info!(dead_message = %id, actor = %caller.sub, "dead message replayed");
    Ok((axum::http::StatusCode::ACCEPTED, Json(row.into())))
}
