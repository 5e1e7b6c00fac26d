//! Connections and their lifecycle. A transition is one transaction: the row is locked, the
//! state machine of `lifecycle_core::connection` decides, the version moves, an audit row and
//! the `lifecycle.<kind>.<id>.<transition>` outbox message are written. An illegal transition
//! writes nothing.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use lifecycle_core::connection::Transition;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
};
use serde::{Deserialize, Serialize};
use store::entity::{
    ConnectionKind, ConnectionStatus, WorkspaceStatus, connection, connection_audit,
    connection_secret, provider_instance,
};
use uuid::Uuid;

use super::KeysetPage;
use super::workspaces::find_reachable;
use super::{ConnectionPath, WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::{Admin, Caller};
use crate::error::QueryParams;
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, JsonBody, PathParams, PayloadTooLarge,
    Unauthorized, UnsupportedMediaType,
};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateConnection {
    /// github, gitlab, slack or outline.
    #[schema(value_type = String, example = "github")]
    pub kind: ConnectionKind,
    /// The vendor server; omit for the kind's default (github.com, gitlab.com, ...).
    #[serde(default)]
    pub server_url: Option<String>,
    /// Non-secret settings (e.g. the GitHub App installation id).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub settings: Option<serde_json::Value>,
    /// Credentials by name, those the kind takes only: `token` (GitHub PAT, GitLab, Slack,
    /// Outline) or `private_key` (GitHub App). Stored encrypted, never returned.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConnectionView {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub kind: String,
    /// pending, active, suspended, paused, uninstalled or disconnected.
    pub status: String,
    /// Moves by one with every transition.
    pub version: i64,
    /// Moves by one with every activation.
    pub lifecycle_generation: i64,
    pub provider_instance_id: Uuid,
    pub server_url: Option<String>,
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
    /// Names of stored secrets; values are never returned.
    pub secret_names: Vec<String>,
    /// The vendor refused the connection's credentials (a 401, or a 403 for a missing
    /// permission): its scheduled jobs stop until its secrets are replaced.
    pub needs_credentials: bool,
    /// When the vendor last refused them, while they are not replaced.
    pub credentials_refused_at: Option<String>,
    /// Why, as the job that met the refusal said it (`bad_credentials: ...`,
    /// `forbidden: issues=read: ...`).
    pub credentials_refusal: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditView {
    pub id: Uuid,
    pub actor: String,
    pub action: String,
    pub before_status: Option<String>,
    pub after_status: Option<String>,
    pub version: i64,
    pub created_at: String,
}

pub(crate) use store::lifecycle::status_name;

async fn view<C: ConnectionTrait>(
    db: &C,
    m: connection::Model,
) -> Result<ConnectionView, ApiError> {
    let instance = provider_instance::Entity::find_by_id(m.provider_instance_id)
        .one(db)
        .await?;
    let secret_names = connection_secret::Entity::find()
        .select_only()
        .column(connection_secret::Column::Name)
        .filter(connection_secret::Column::ConnectionId.eq(m.id))
        .order_by_asc(connection_secret::Column::Name)
        .into_tuple::<String>()
        .all(db)
        .await?;
    Ok(ConnectionView {
        id: m.id,
        workspace_id: m.workspace_id,
        kind: m.kind.as_str().to_owned(),
        status: status_name(m.status),
        version: m.version,
        lifecycle_generation: m.lifecycle_generation,
        provider_instance_id: m.provider_instance_id,
        server_url: instance.and_then(|i| i.server_url),
        settings: m.settings,
        secret_names,
        needs_credentials: m.credentials_refused_at.is_some(),
        credentials_refused_at: m.credentials_refused_at.map(rfc3339),
        credentials_refusal: m.credentials_refusal,
        created_at: rfc3339(m.created_at),
        updated_at: rfc3339(m.updated_at),
    })
}

/// The connection, if it belongs to a workspace this caller reaches; otherwise 404.
pub(crate) async fn find_connection<C: ConnectionTrait>(
    db: &C,
    caller: &crate::Claims,
    workspace_id: Uuid,
    connection_id: Uuid,
    lock: bool,
) -> Result<connection::Model, ApiError> {
    if !caller.reaches(workspace_id) {
        return Err(ApiError::not_found("connection"));
    }
    let found = if lock {
        connection::lock_in_workspace(db, workspace_id, connection_id).await?
    } else {
        connection::find_in_workspace(db, workspace_id, connection_id).await?
    };
    found.ok_or_else(|| ApiError::not_found("connection"))
}

/// Create a connection
///
/// The connection starts pending; activate it to sync. A GitHub token's repositories are
/// verified with GitHub first.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections", operation_id = "createConnection",
    params(WorkspacePath), request_body = CreateConnection,
    responses((status = 201, description = "The connection, created pending.", body = ConnectionView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody),
              (status = 409, description = "The workspace is being purged (`workspace_not_active`).", body = ErrorBody),
              (status = 413, response = PayloadTooLarge), (status = 415, response = UnsupportedMediaType),
              (status = 422, description = "The workspace holds its cap of connections (`connection_cap`), the settings name more repositories than a connection may monitor (`monitor_cap`), the server URL is not acceptable (`invalid_server_url`) or not a public host (`vendor_unreachable`: loopback, link-local, private, CGNAT and unique-local addresses are refused unless the operator allows their range), a secret name the kind does not take (`unknown_secret_name`, naming the allowed ones), or the token cannot read the named repositories.", body = ErrorBody),
              (status = 502, description = "The vendor could not be asked to verify the token.", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams(workspace_id): PathParams<Uuid>,
    JsonBody(body): JsonBody<CreateConnection>,
) -> Result<(StatusCode, Json<ConnectionView>), ApiError> {
    check_secret_names(body.kind, &body.secrets)?;
    let settings = body.settings.unwrap_or_else(|| serde_json::json!({}));
    if !settings.is_object() {
        return Err(ApiError::bad_request("settings must be a JSON object"));
    }
    // Nothing is checked with a vendor, nor anything resolved, for a caller who cannot reach the
    // workspace.
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    check_monitor_cap(&settings, state.caps.monitors_per_connection)?;
    // Vendor instances: https only (unless the operator allows http), no user info, and a host
    // whose every address is public (unless the operator allows its range).
    if let Some(url) = body.server_url.as_deref().filter(|u| !u.trim().is_empty()) {
        provider_instance::check_server_url(url, state.allow_insecure_server_urls)
            .map_err(|message| ApiError::unprocessable("invalid_server_url", message))?;
        state.egress.check_server(url.trim()).await.map_err(|refused| {
            tracing::warn!(%workspace_id, detail = %refused.detail(), "server_url refused by the egress policy");
            ApiError::unprocessable(
                "vendor_unreachable",
                "server_url: vendor unreachable; a connection's server must be a public host",
            )
        })?;
    }
    // Reads follow verified access: a PAT's repositories resolve with the PAT first.
    if body.kind == ConnectionKind::Github {
        let api = github_client::ClientConfig::for_server(
            provider_instance::normalise_server_url(body.server_url.as_deref()).as_deref(),
        )
        .with_egress(state.egress.clone());
        crate::github_access::verify_pat_repositories(
            &api,
            &settings,
            body.secrets.get("token").map(String::as_str),
        )
        .await?;
    }
    let txn = state.db.begin().await?;
    let ws = find_reachable(&txn, &caller, workspace_id, true).await?;
    if ws.status != WorkspaceStatus::Active {
        return Err(ApiError::conflict(
            "workspace_not_active",
            "the workspace is being purged; it cannot gain connections",
        ));
    }
    // The workspace row is locked: two creations cannot both take the last place.
    let held = connection::Entity::find()
        .filter(connection::Column::WorkspaceId.eq(workspace_id))
        .filter(connection::Column::Status.ne(ConnectionStatus::Disconnected))
        .count(&txn)
        .await?;
    if held >= state.caps.connections_per_workspace {
        return Err(ApiError::unprocessable(
            "connection_cap",
            format!(
                "the workspace holds {held} connections, its cap \
                 (FORGESYNC_MAX_CONNECTIONS_PER_WORKSPACE = {}); disconnect one first",
                state.caps.connections_per_workspace
            ),
        ));
    }
    let instance = provider_instance::ensure(&txn, body.kind, body.server_url.as_deref()).await?;
    let row = connection::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(workspace_id),
        kind: Set(body.kind),
        status: Set(ConnectionStatus::Pending),
        version: Set(1),
        lifecycle_generation: Set(0),
        provider_instance_id: Set(instance.id),
        settings: Set(settings),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    for (name, value) in &body.secrets {
        store::secrets::put(&txn, &state.secret_key, row.id, name, value.as_bytes())
            .await
            .map_err(ApiError::internal)?;
    }
    store::lifecycle::write_audit(&txn, &row, &caller.sub, "create", None).await?;
    let view = view(&txn, row).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, connection_id = %view.id, actor = %caller.sub, "connection created");
    Ok((StatusCode::CREATED, Json(view)))
}

/// A connection's settings may name at most `cap` repositories to monitor.
fn check_monitor_cap(settings: &serde_json::Value, cap: usize) -> Result<(), ApiError> {
    let named = settings
        .get("repositories")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    if named > cap {
        return Err(ApiError::unprocessable(
            "monitor_cap",
            format!(
                "settings.repositories names {named} repositories, more than the cap of {cap} \
                 per connection (FORGESYNC_MAX_MONITORS_PER_CONNECTION)"
            ),
        ));
    }
    Ok(())
}

/// Only the names the connection's kind reads may be set: any other name would be stored and
/// never used, or shadow a secret the system names itself (an endpoint's).
fn check_secret_names(
    kind: ConnectionKind,
    secrets: &BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let allowed = kind.secret_names();
    let unknown: Vec<&str> = secrets
        .keys()
        .map(String::as_str)
        .filter(|name| !allowed.contains(name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    // Names are echoed only when short; a long one is a mistake or a probe.
    let shown: Vec<String> = unknown
        .iter()
        .map(|n| match n.chars().count() {
            0 => "an empty name".to_owned(),
            1..=100 => format!("{n:?}"),
            _ => "a name over 100 characters".to_owned(),
        })
        .collect();
    Err(ApiError::unprocessable(
        "unknown_secret_name",
        format!(
            "a {} connection takes only the secrets {}; not {}",
            kind.as_str(),
            allowed
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            shown.join(", ")
        ),
    ))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceSecrets {
    /// Credentials by name, those the connection's kind takes only (as at creation); each named
    /// secret is replaced, the others are kept. Stored encrypted, never returned.
    pub secrets: BTreeMap<String, String>,
}

/// Replace a connection's secrets
///
/// Replaces the named secrets (e.g. a revoked GitHub `token`), verifying a GitHub token's
/// repositories with GitHub first. Clears the connection's refused-credentials flag, so its
/// scheduled jobs resume; audited as `replace_secrets`.
///
/// A suspended or disconnected connection's `token` is also the removal credential of its
/// unsettled provider repairs: it is sealed into their references, the repairs that waited for
/// a credential are due at once and provider-repair is woken
/// (`lifecycle.<kind>.<connectionId>.repair_credential`). A disconnected connection takes only
/// that `token`, and only while a repair of it is unsettled; it goes into the repairs alone
/// (the connection's own secrets stay deleted), audited as `repair_credential`.
#[utoipa::path(put, path = "/workspaces/{workspace_id}/connections/{connection_id}/secrets",
    operation_id = "replaceConnectionSecrets", params(ConnectionPath), request_body = ReplaceSecrets,
    responses((status = 200, description = "The connection with its new secrets, no longer flagged as needing credentials.", body = ConnectionView),
              (status = 202, description = "Stored, but a provider repair of the connection has an attempt whose outcome is not recorded yet: the credential waits for that outcome before it is used.", body = ConnectionView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The connection is disconnected and no provider repair of it is unsettled (`connection_disconnected`), or the workspace is being purged (`workspace_not_active`).", body = ErrorBody),
              (status = 413, response = PayloadTooLarge), (status = 415, response = UnsupportedMediaType),
              (status = 422, description = "A secret name the connection's kind (or, disconnected, its repairs) does not take (`unknown_secret_name`, naming the allowed ones), an empty secret (`empty_secret`), GitHub refused the new token (`credentials_refused`) or it cannot read the connection's repositories (`repository_not_accessible`); nothing was stored.", body = ErrorBody),
              (status = 502, description = "The vendor could not be asked to verify the token; nothing was stored.", body = ErrorBody)))]
pub async fn replace_secrets(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
    JsonBody(body): JsonBody<ReplaceSecrets>,
) -> Result<(StatusCode, Json<ConnectionView>), ApiError> {
    if body.secrets.is_empty() {
        return Err(ApiError::bad_request("name at least one secret to replace"));
    }
    let row = find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    // Checked once the caller reaches the connection: a stranger learns nothing of its kind.
    check_secret_names(row.kind, &body.secrets)?;
    // An empty credential is no credential: refused before anything is stored.
    if let Some(name) = body
        .secrets
        .iter()
        .find_map(|(name, value)| value.trim().is_empty().then_some(name))
    {
        return Err(ApiError::unprocessable(
            "empty_secret",
            format!("secret `{name}` is empty; send the credential itself"),
        ));
    }
    // Reads follow verified access: a new PAT resolves the connection's repositories first (a
    // disconnected connection reads nothing; its token only removes what we created).
    if row.kind == ConnectionKind::Github
        && row.status != ConnectionStatus::Disconnected
        && let Some(token) = body.secrets.get("token")
    {
        let instance = provider_instance::Entity::find_by_id(row.provider_instance_id)
            .one(&state.db)
            .await?;
        let api = github_client::ClientConfig::for_server(
            provider_instance::normalise_server_url(instance.and_then(|i| i.server_url).as_deref())
                .as_deref(),
        )
        .with_egress(state.egress.clone());
        crate::github_access::verify_pat_repositories(&api, &row.settings, Some(token.as_str()))
            .await?;
    }
    let txn = state.db.begin().await?;
    let ws = find_reachable(&txn, &caller, workspace_id, false).await?;
    let row = find_connection(&txn, &caller, workspace_id, connection_id, true).await?;
    if ws.status != WorkspaceStatus::Active {
        return Err(ApiError::conflict(
            "workspace_not_active",
            "the workspace is being purged; its connections take no new secrets",
        ));
    }
    let receipt = if row.status == ConnectionStatus::Disconnected {
        repair_credential(&state, &txn, &caller, &row, &body.secrets).await?
    } else {
        for (name, value) in &body.secrets {
            store::secrets::put(&txn, &state.secret_key, row.id, name, value.as_bytes())
                .await
                .map_err(ApiError::internal)?;
            // A new credential wakes the provider repairs that waited for one.
            store::repair::credential_replaced(&txn, row.id, name).await?;
        }
        // New credentials lift the refusal: the schedules take the connection again.
        store::credentials::replaced(&txn, row.id).await?;
        store::lifecycle::write_audit(&txn, &row, &caller.sub, "replace_secrets", Some(row.status))
            .await?;
        if body.secrets.contains_key(store::repair::REMOVAL_CREDENTIAL) {
            store::repair_admin::unsettled(&txn, row.id).await?
        } else {
            Default::default()
        }
    };
    if receipt.unsettled > 0 {
        // Rows are the truth (the fences are due now); the message wakes provider-repair
        // without waiting for its schedule.
        wake_provider_repair(&txn, &row, &caller.sub).await?;
    }
    let row = connection::Entity::find_by_id(row.id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found("connection"))?;
    let view = view(&txn, row).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, secrets = ?body.secrets.keys().collect::<Vec<_>>(), repairs = receipt.unsettled, actor = %caller.sub, "connection secrets replaced");
    // A permit whose outcome is unrecorded: the publication stays unfinished until it is.
    let status = if receipt.unrecorded {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// A disconnected connection's `token`, handed in for its unsettled provider repairs only: sealed
/// into their references, never into `connection_secret` (erasure deleted those for good).
async fn repair_credential(
    state: &AppState,
    txn: &sea_orm::DatabaseTransaction,
    caller: &crate::Claims,
    row: &connection::Model,
    secrets: &BTreeMap<String, String>,
) -> Result<store::repair_admin::CredentialReceipt, ApiError> {
    let removal = store::repair::REMOVAL_CREDENTIAL;
    if let Some(other) = secrets.keys().find(|name| name.as_str() != removal) {
        return Err(ApiError::unprocessable(
            "unknown_secret_name",
            format!(
                "a disconnected connection takes only `{removal}`, the credential its provider                  repairs remove with; not {other:?}"
            ),
        ));
    }
    let pending = store::repair_admin::unsettled(txn, row.id).await?;
    if pending.unsettled == 0 {
        return Err(ApiError::conflict(
            "connection_disconnected",
            "a disconnected connection takes no new secrets, and no provider repair of it waits              for a credential; create a new connection",
        ));
    }
    let token = secrets
        .get(removal)
        .map(String::as_bytes)
        .unwrap_or_default();
    let receipt = store::repair_admin::hand_in_credential(txn, &state.secret_key, row.id, token)
        .await
        .map_err(ApiError::internal)?;
    store::lifecycle::write_audit(txn, row, &caller.sub, "repair_credential", Some(row.status))
        .await?;
    Ok(receipt)
}

/// Enqueues the message that wakes provider-repair for `row`'s repairs, in the caller's
/// transaction.
async fn wake_provider_repair(
    txn: &sea_orm::DatabaseTransaction,
    row: &connection::Model,
    actor: &str,
) -> Result<(), ApiError> {
    let status = store::lifecycle::status_name(row.status);
    let message = store::contracts::LifecycleTransition {
        connection_id: row.id,
        workspace_id: row.workspace_id,
        kind: row.kind.as_str().to_owned(),
        transition: store::repair_admin::CREDENTIAL_WAKE.to_owned(),
        before_status: status.clone(),
        status,
        version: row.version,
        lifecycle_generation: row.lifecycle_generation,
        provider_instance_id: row.provider_instance_id,
        actor: actor.to_owned(),
        at: rfc3339(time::OffsetDateTime::now_utc()),
    };
    store::outbox::enqueue_contract(txn, &message).await?;
    Ok(())
}

/// List a workspace's connections
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections", operation_id = "listConnections",
    params(WorkspacePath, KeysetPage),
    responses((status = 200, description = "The workspace's connections, oldest first.", body = Vec<ConnectionView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<ConnectionView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    // Ids are time-ordered (v7): by id is by creation, and a keyset.
    let mut q = connection::in_workspace(workspace_id)
        .order_by_asc(connection::Column::Id)
        .limit(page.limit());
    if let Some(after) = page.after {
        q = q.filter(connection::Column::Id.gt(after));
    }
    let rows = q.all(&state.db).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(view(&state.db, row).await?);
    }
    Ok(Json(out))
}

/// Get a connection
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections/{connection_id}", operation_id = "getConnection",
    params(ConnectionPath),
    responses((status = 200, description = "The connection.", body = ConnectionView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
) -> Result<Json<ConnectionView>, ApiError> {
    let row = find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    Ok(Json(view(&state.db, row).await?))
}

/// List a connection's audit trail
#[utoipa::path(get, path = "/workspaces/{workspace_id}/connections/{connection_id}/audit",
    operation_id = "listConnectionAudit", params(ConnectionPath, KeysetPage),
    responses((status = 200, description = "Every change of the connection, with who made it.", body = Vec<AuditView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody)))]
pub async fn audit(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<AuditView>>, ApiError> {
    find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    // Newest first; `after` names the last entry of the previous (newer) page.
    let mut q = connection_audit::of_connection(workspace_id, connection_id)
        .order_by_desc(connection_audit::Column::Id)
        .limit(page.limit());
    if let Some(after) = page.after {
        q = q.filter(connection_audit::Column::Id.lt(after));
    }
    let rows = q.all(&state.db).await?;
    Ok(Json(
        rows.into_iter()
            .map(|a| AuditView {
                id: a.id,
                actor: a.actor,
                action: a.action,
                before_status: a.before_status,
                after_status: a.after_status,
                version: a.version,
                created_at: rfc3339(a.created_at),
            })
            .collect(),
    ))
}

/// The transitions an operator may request (for the OpenAPI document; uninstall is reported by
/// vendors, not requested).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TransitionName {
    Activate,
    Suspend,
    Resume,
    Pause,
    Disconnect,
}

fn parse_transition(name: &str) -> Result<Transition, ApiError> {
    // Uninstall is reported by vendors, not requested by operators.
    match name {
        "activate" => Ok(Transition::Activate),
        "suspend" => Ok(Transition::Suspend),
        "resume" => Ok(Transition::Resume),
        "pause" => Ok(Transition::Pause),
        "disconnect" => Ok(Transition::Disconnect),
        other => Err(ApiError::not_found(&format!(
            "transition {other:?} (use activate, suspend, resume, pause or disconnect):"
        ))),
    }
}

/// Move a connection through its lifecycle
///
/// One of activate, suspend, resume, pause or disconnect; the state machine decides which are
/// legal from the connection's status.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections/{connection_id}/{transition}",
    operation_id = "transitionConnection",
    params(ConnectionPath, ("transition" = inline(TransitionName), Path, description = "The transition to apply.")),
    responses((status = 200, description = "The connection after the transition.", body = ConnectionView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such connection in a workspace this token reaches, or no such transition.", body = ErrorBody),
              (status = 409, description = "The transition is illegal from the connection's status (`illegal_transition`), or the workspace is being purged (`workspace_not_active`).", body = ErrorBody)))]
pub async fn transition(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id, name)): PathParams<(Uuid, Uuid, String)>,
) -> Result<Json<ConnectionView>, ApiError> {
    let transition = parse_transition(&name)?;
    // A capture that meets an identity lock it did not take first fails the transaction; it is
    // run again (its identity locks first), a few times.
    let mut attempt = 0;
    loop {
        attempt += 1;
        match apply_transition(
            &state,
            &caller,
            workspace_id,
            connection_id,
            &name,
            transition,
        )
        .await
        {
            Err(TransitionError::Contended) if attempt < 5 => {
                tokio::time::sleep(std::time::Duration::from_millis(10 * attempt)).await;
            }
            Err(TransitionError::Contended) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "contended",
                    "the connection's vendor resources kept changing during the transition; \
                     retry",
                ));
            }
            Err(TransitionError::Api(e)) => return Err(e),
            Ok(view) => return Ok(view),
        }
    }
}

enum TransitionError {
    Contended,
    Api(ApiError),
}

impl From<ApiError> for TransitionError {
    fn from(e: ApiError) -> Self {
        TransitionError::Api(e)
    }
}

impl From<sea_orm::DbErr> for TransitionError {
    fn from(e: sea_orm::DbErr) -> Self {
        if store::repair::is_contended(&e) {
            TransitionError::Contended
        } else {
            TransitionError::Api(e.into())
        }
    }
}

async fn apply_transition(
    state: &AppState,
    caller: &crate::Claims,
    workspace_id: Uuid,
    connection_id: Uuid,
    name: &str,
    transition: Transition,
) -> Result<Json<ConnectionView>, TransitionError> {
    let txn = state.db.begin().await?;
    let ws = find_reachable(&txn, caller, workspace_id, false).await?;
    // Provider repair's lock order: identity locks before the connection row lock.
    store::repair::lock_identities(&txn, &[connection_id]).await?;
    let row = find_connection(&txn, caller, workspace_id, connection_id, true).await?;
    if ws.status != WorkspaceStatus::Active && transition != Transition::Disconnect {
        return Err(ApiError::conflict(
            "workspace_not_active",
            "the workspace is being purged; only disconnect is allowed",
        )
        .into());
    }
    let before = row.status;
    let row = store::lifecycle::apply(&txn, row, transition, &caller.sub, name)
        .await?
        .map_err(|e| {
            ApiError::conflict(
                "illegal_transition",
                format!(
                    "a connection that is {} cannot {name}: {e}",
                    status_name(before)
                ),
            )
        })?;
    let view = view(&txn, row).await?;
    txn.commit().await?;
    tracing::info!(%workspace_id, %connection_id, transition = %name, version = view.version, actor = %caller.sub, "connection transition");
    Ok(Json(view))
}
