//! Slack channels of a workspace: where each one's consent stands, a consented channel's
//! messages, and the operators' channel commands (consent, pause, resume, withdraw). A command
//! is checked against the channel's status under the channel's lock and committed with its audit
//! row and its `lifecycle.slack.<connectionId>.channel` message; slack-ingest carries it out, so
//! the status does not change here.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lifecycle_core::forward::SlackTs;
use lifecycle_core::slack::{ChannelCommand, ChannelStatus};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde::{Deserialize, Serialize};
use slack_mirror::channel::{self, Channel};
use slack_mirror::command::ChannelCommandMessage;
use slack_mirror::message;
use store::entity::{ConnectionKind, ConnectionStatus};
use store::outbox;
use time::OffsetDateTime;
use uuid::Uuid;

use super::connections::find_connection;
use super::workspaces::find_reachable;
use super::{WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::{Admin, Caller, Claims};
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, PathParams, QueryParams, Unauthorized,
};

/// A channel a Slack connection's directory listed, with where its consent stands.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChannelView {
    pub id: Uuid,
    pub connection_id: Uuid,
    /// Slack's id (`C...`, `G...`).
    pub slack_id: String,
    /// As Slack last named it; null until known.
    pub name: Option<String>,
    pub is_private: bool,
    /// none, pending, active or paused.
    pub status: String,
    /// Why it stands where it does (a refused announcement, who paused it, ...).
    pub reason: Option<String>,
    /// Slack's ts nothing older than which is kept (`seconds.micros`).
    pub consent_ts: Option<String>,
    /// When the status last moved.
    pub status_at: String,
    /// When a replay last read the channel to the end.
    pub last_replay_at: Option<String>,
    /// Messages of the channel not kept (not consented, paused, before consent).
    pub dropped: i64,
}

impl From<Channel> for ChannelView {
    fn from(c: Channel) -> Self {
        ChannelView {
            id: c.id,
            connection_id: c.connection_id,
            slack_id: c.slack_id,
            name: c.name,
            is_private: c.is_private,
            status: c.status.as_str().to_owned(),
            reason: c.reason,
            consent_ts: c.consent_ts.map(|t| t.to_string()),
            status_at: rfc3339(c.status_at),
            last_replay_at: c.last_replay_at.map(rfc3339),
            dropped: c.dropped,
        }
    }
}

/// A file shared in a message: its id, name and type (never its content).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileView {
    pub id: String,
    pub name: Option<String>,
    pub mimetype: Option<String>,
}

/// A kept message of a channel.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageView {
    /// Slack's ts: the message's identity in its channel (`seconds.micros`).
    pub ts: String,
    /// The thread's parent, when the message is a reply.
    pub thread_ts: Option<String>,
    /// Slack's user id of the author.
    pub user: Option<String>,
    pub subtype: Option<String>,
    /// Null once the message is deleted.
    pub text: Option<String>,
    pub files: Vec<FileView>,
    /// The ts of the edit kept, when it was edited.
    pub edited_ts: Option<String>,
    /// When Slack reported the message deleted (a tombstone).
    pub deleted_at: Option<String>,
}

impl From<message::View> for MessageView {
    fn from(m: message::View) -> Self {
        MessageView {
            ts: m.ts,
            thread_ts: m.thread_ts,
            user: m.user,
            subtype: m.subtype,
            text: m.text,
            files: m
                .files
                .map(|files| files.0)
                .unwrap_or_default()
                .into_iter()
                .map(|f| FileView {
                    id: f.id,
                    name: f.name,
                    mimetype: f.mimetype,
                })
                .collect(),
            edited_ts: m.edited_ts,
            deleted_at: m.deleted_at.map(rfc3339),
        }
    }
}

/// A page of a channel's messages.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessagePageView {
    /// Oldest first.
    pub messages: Vec<MessageView>,
    /// The `after` of the next page when this one is full; null when it is the last.
    pub next_after: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagePage {
    /// Messages after this Slack ts (`digits[.up to 6 digits]`: the `next_after` of the previous
    /// page).
    pub after: Option<String>,
    /// At most this many messages, 1 to 500 (default 100).
    pub limit: Option<i64>,
}

/// Most messages one page holds.
const MAX_MESSAGES: i64 = 500;

impl MessagePage {
    /// The page asked for, or why it is not one.
    fn parse(&self) -> Result<(Option<SlackTs>, i64), ApiError> {
        let after = match self.after.as_deref() {
            Some(after) => Some(after.parse::<SlackTs>().map_err(|_| {
                ApiError::bad_request(
                    "`after` must be a Slack ts (digits, optionally a dot and up to 6 digits), \
                     e.g. the `next_after` of the previous page",
                )
            })?),
            None => None,
        };
        let limit = self.limit.unwrap_or(100);
        if !(1..=MAX_MESSAGES).contains(&limit) {
            return Err(ApiError::bad_request(format!(
                "`limit` must be 1 to {MAX_MESSAGES}"
            )));
        }
        Ok((after, limit))
    }
}

/// What a channel command answers: the request, accepted.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandAccepted {
    /// The command's id (the message's dedup key).
    pub request_id: Uuid,
    pub channel_id: Uuid,
    /// consent, pause, resume or withdraw.
    pub command: String,
}

/// The path parameters naming a channel in its workspace.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ChannelPath {
    /// The workspace's id.
    pub workspace_id: Uuid,
    /// The channel's id (not Slack's).
    pub channel_id: Uuid,
}

/// The one answer for a channel the caller cannot reach, whether it exists elsewhere or not.
fn no_channel() -> ApiError {
    ApiError::not_found("channel")
}

/// List the workspace's Slack channels
///
/// Every channel of the workspace's Slack connections, by connection and name, with where its
/// consent stands.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/slack/channels",
    operation_id = "listSlackChannels", params(WorkspacePath),
    responses((status = 200, description = "The workspace's channels.", body = Vec<ChannelView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn channels(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<Vec<ChannelView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let rows = channel::of_workspace(state.db.get_postgres_connection_pool(), workspace_id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// List a Slack channel's messages
///
/// The messages kept of the channel after `after`, oldest first: only those from its consent on.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/slack/channels/{channel_id}/messages",
    operation_id = "listSlackMessages", params(ChannelPath, MessagePage),
    responses((status = 200, description = "A page of the channel's messages, oldest first.", body = MessagePageView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such channel in a workspace this token reaches.", body = ErrorBody)))]
pub async fn messages(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, channel_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<MessagePage>,
) -> Result<Json<MessagePageView>, ApiError> {
    let (after, limit) = page.parse()?;
    if !caller.reaches(workspace_id) {
        return Err(no_channel());
    }
    let pool = state.db.get_postgres_connection_pool();
    let channel = channel::find_in_workspace(pool, workspace_id, channel_id)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(no_channel)?;
    let rows = message::page(pool, channel.id, after, limit)
        .await
        .map_err(ApiError::internal)?;
    let full = i64::try_from(rows.len()).is_ok_and(|n| n == limit);
    let next_after = full.then(|| rows.last().map(|m| m.ts.clone())).flatten();
    Ok(Json(MessagePageView {
        messages: rows.into_iter().map(Into::into).collect(),
        next_after,
    }))
}

/// Consent to a Slack channel
///
/// slack-ingest announces the mirror in the channel and keeps its messages from the
/// announcement on; until then the channel is pending. Audited as
/// `slack_channel_consent:<channel_id>`.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/slack/channels/{channel_id}/consent",
    operation_id = "consentSlackChannel", params(ChannelPath),
    responses((status = 202, description = "The consent is accepted; slack-ingest carries it out.", body = CommandAccepted),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such channel in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The channel is already active or paused (`wrong_channel_state`), or its connection is disconnected (`connection_disconnected`).", body = ErrorBody)))]
pub async fn consent(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, channel_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<CommandAccepted>), ApiError> {
    command(
        &state,
        &caller,
        workspace_id,
        channel_id,
        ChannelCommand::Consent,
    )
    .await
}

/// Pause a Slack channel
///
/// Nothing more of the channel is kept until a resume; the gap is never fetched. Audited as
/// `slack_channel_pause:<channel_id>`.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/slack/channels/{channel_id}/pause",
    operation_id = "pauseSlackChannel", params(ChannelPath),
    responses((status = 202, description = "The pause is accepted; slack-ingest carries it out.", body = CommandAccepted),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such channel in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The channel is not active (`wrong_channel_state`), or its connection is disconnected (`connection_disconnected`).", body = ErrorBody)))]
pub async fn pause(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, channel_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<CommandAccepted>), ApiError> {
    command(
        &state,
        &caller,
        workspace_id,
        channel_id,
        ChannelCommand::Pause,
    )
    .await
}

/// Resume a paused Slack channel
///
/// Its consent restarts at the resume: nothing from the paused gap is kept. Audited as
/// `slack_channel_resume:<channel_id>`.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/slack/channels/{channel_id}/resume",
    operation_id = "resumeSlackChannel", params(ChannelPath),
    responses((status = 202, description = "The resume is accepted; slack-ingest carries it out.", body = CommandAccepted),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such channel in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The channel is not paused (`wrong_channel_state`), or its connection is disconnected (`connection_disconnected`).", body = ErrorBody)))]
pub async fn resume(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, channel_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<CommandAccepted>), ApiError> {
    command(
        &state,
        &caller,
        workspace_id,
        channel_id,
        ChannelCommand::Resume,
    )
    .await
}

/// Withdraw the consent to a Slack channel
///
/// Everything kept of the channel is erased and it is none again. Audited as
/// `slack_channel_withdraw:<channel_id>`.
#[utoipa::path(delete, path = "/workspaces/{workspace_id}/slack/channels/{channel_id}/consent",
    operation_id = "withdrawSlackChannelConsent", params(ChannelPath),
    responses((status = 202, description = "The withdrawal is accepted; slack-ingest carries it out.", body = CommandAccepted),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such channel in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The channel was never consented to (`wrong_channel_state`), or its connection is disconnected (`connection_disconnected`).", body = ErrorBody)))]
pub async fn withdraw(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, channel_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<CommandAccepted>), ApiError> {
    command(
        &state,
        &caller,
        workspace_id,
        channel_id,
        ChannelCommand::Withdraw,
    )
    .await
}

/// Checks `command` against the locked channel and commits it with its audit row and message;
/// a refused command writes nothing.
async fn command(
    state: &AppState,
    caller: &Claims,
    workspace_id: Uuid,
    channel_id: Uuid,
    command: ChannelCommand,
) -> Result<(StatusCode, Json<CommandAccepted>), ApiError> {
    if !caller.reaches(workspace_id) {
        return Err(no_channel());
    }
    let txn = state.db.begin().await?;
    // The channel's lock: slack-ingest moves the status only under it, so the check below holds
    // until this commits.
    let locked = txn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT connection_id, status FROM slack_channel
              WHERE workspace_id = $1 AND id = $2 FOR UPDATE",
            [workspace_id.into(), channel_id.into()],
        ))
        .await?
        .ok_or_else(no_channel)?;
    let connection_id: Uuid = locked.try_get("", "connection_id")?;
    let status: String = locked.try_get("", "status")?;
    let status = ChannelStatus::parse(&status)
        .ok_or_else(|| ApiError::internal(format!("slack_channel status {status:?}")))?;
    // Read, not locked: a disconnect committing meanwhile erases the channel after this
    // commits, and slack-ingest ignores a command on a channel that is gone.
    let conn = find_connection(&txn, caller, workspace_id, connection_id, false)
        .await
        .map_err(|e| {
            if e.status == StatusCode::NOT_FOUND {
                no_channel()
            } else {
                e
            }
        })?;
    if conn.kind != ConnectionKind::Slack {
        return Err(no_channel());
    }
    if conn.status == ConnectionStatus::Disconnected {
        return Err(ApiError::conflict(
            "connection_disconnected",
            "the channel's connection is disconnected; its channels take no commands",
        ));
    }
    // Consent rules: a command applies only from the statuses it names.
    command
        .next(status)
        .map_err(|wrong| ApiError::conflict("wrong_channel_state", wrong.to_string()))?;
    let action = format!("slack_channel_{}:{channel_id}", command.as_str());
    store::lifecycle::write_audit(&txn, &conn, &caller.sub, &action, Some(conn.status)).await?;
    let message = ChannelCommandMessage {
        id: Uuid::now_v7(),
        connection_id,
        workspace_id,
        channel_id,
        command,
        actor: caller.sub.clone(),
        at: rfc3339(OffsetDateTime::now_utc()),
    };
    outbox::enqueue_contract(&txn, &message).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, %channel_id, request_id = %message.id, command = command.as_str(), actor = %caller.sub, "Slack channel command accepted");
    Ok((
        StatusCode::ACCEPTED,
        Json(CommandAccepted {
            request_id: message.id,
            channel_id,
            command: command.as_str().to_owned(),
        }),
    ))
}
