//! OAuth authorization of a connection: the state is bound to the connection, its version and
//! its lifecycle generation before the redirect, and the callback spends it once. Slack is the
//! vendor that authorizes this way: the exchange's intent is committed before `oauth.v2.access`,
//! what Slack returned (team, bot user, token fingerprint) before `auth.test`, and the token is
//! adopted under its identity lock with the exchange removed in the same transaction (provider
//! repair's adoption rules, `store::oauth`). An exchange whose outcome is unknown stays for an
//! admin (`GET /slack-exchanges`); a refusal by Slack leaves nothing.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use slack_client::{SlackClient, SlackError};
use store::entity::{ConnectionKind, ConnectionStatus};
use store::oauth::{self, Adoption, Claimed, NotAdopted};
use uuid::Uuid;

use super::KeysetPage;
use super::connections::find_connection;
use crate::AppState;
use crate::auth::{Admin, Operator};
use crate::error::{ApiError, ErrorBody, Forbidden, PathParams, QueryParams, Unauthorized};

/// The bot scopes a Slack connection asks for: its channels, their history, and posting its
/// announcements.
pub const SLACK_SCOPES: &str =
    "channels:read,groups:read,channels:history,groups:history,chat:write";

/// The app's Slack OAuth settings (`FORGESYNC_SLACK_CLIENT_ID`, ...); authorization is refused
/// while any is missing.
#[derive(Clone, Default)]
pub struct SlackOAuth {
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// Slack's authorization page.
    pub authorize_url: String,
    /// The Web API's base (`oauth.v2.access`, `auth.test`).
    pub api_url: String,
    /// Where Slack sends the browser back: this API's `/oauth/callback`, as the public reaches it.
    pub callback_url: Option<String>,
    /// The bot scopes asked for.
    pub scopes: String,
}

impl SlackOAuth {
    fn configured(&self) -> Result<(&str, &str, &str), ApiError> {
        match (&self.client_id, &self.client_secret, &self.callback_url) {
            (Some(id), Some(secret), Some(callback)) => Ok((id, secret, callback)),
            _ => Err(ApiError::unprocessable(
                "oauth_not_configured",
                "Slack authorization needs FORGESYNC_SLACK_CLIENT_ID, \
                 FORGESYNC_SLACK_CLIENT_SECRET and FORGESYNC_OAUTH_CALLBACK_URL",
            )),
        }
    }

    fn client_settings(&self) -> slack_client::Settings {
        slack_client::Settings {
            base_url: self.api_url.clone(),
            ..slack_client::Settings::default()
        }
    }
}

/// Where to send the person who authorizes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuthorizeView {
    /// Slack's authorization page, with the state bound to this connection.
    pub authorize_url: String,
    /// The state is refused after this (RFC 3339).
    pub expires_at: String,
}

/// Start authorizing a connection
///
/// Binds a fresh state to the connection as it is now (its version and lifecycle generation)
/// and answers the vendor's authorization page to send the person to. The callback refuses the
/// state once the connection changed, once it was used, and after it expires. Slack
/// connections only.
#[utoipa::path(post, path = "/workspaces/{workspace_id}/connections/{connection_id}/authorize",
    operation_id = "authorizeConnection", tag = "connections", params(super::ConnectionPath),
    responses((status = 201, description = "The state is bound; send the person to `authorize_url`.", body = AuthorizeView),
              (status = 401, response = Unauthorized), (status = 403, response = Forbidden),
              (status = 404, description = "No such connection in a workspace this token reaches.", body = ErrorBody),
              (status = 409, description = "The connection is disconnected (`connection_disconnected`).", body = ErrorBody),
              (status = 422, description = "The connection's kind does not authorize by OAuth (`oauth_unsupported`), or Slack authorization is not configured (`oauth_not_configured`).", body = ErrorBody)))]
pub async fn authorize(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((workspace_id, connection_id)): PathParams<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<AuthorizeView>), ApiError> {
    let conn = find_connection(&state.db, &caller, workspace_id, connection_id, false).await?;
    if conn.kind != ConnectionKind::Slack {
        return Err(ApiError::unprocessable(
            "oauth_unsupported",
            format!(
                "a {} connection takes its credentials through PUT .../secrets; only Slack \
                 connections authorize by OAuth",
                conn.kind.as_str()
            ),
        ));
    }
    if conn.status == ConnectionStatus::Disconnected {
        return Err(ApiError::conflict(
            "connection_disconnected",
            "a disconnected connection cannot be authorized; create a new one",
        ));
    }
    let (client_id, _, callback) = state.slack_oauth.configured()?;
    let pool = state.db.get_postgres_connection_pool();
    let issued = oauth::issue(pool, workspace_id, connection_id, callback)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found("connection"))?;
    let mut url = reqwest::Url::parse(&state.slack_oauth.authorize_url)
        .map_err(|e| ApiError::internal(format!("FORGESYNC_SLACK_AUTHORIZE_URL: {e}")))?;
    url.query_pairs_mut()
        .append_pair("client_id", client_id)
        .append_pair("scope", &state.slack_oauth.scopes)
        .append_pair("state", &issued.state)
        .append_pair("redirect_uri", callback);
    store::activity::record(
        pool,
        conn.id,
        conn.workspace_id,
        "oauth_authorize",
        serde_json::json!({"actor": caller.sub, "expires_at": super::rfc3339(issued.expires_at)}),
    )
    .await
    .map_err(ApiError::internal)?;
    Ok((
        StatusCode::CREATED,
        Json(AuthorizeView {
            authorize_url: url.to_string(),
            expires_at: super::rfc3339(issued.expires_at),
        }),
    ))
}

/// What the vendor sends the browser back with.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The state handed out with the redirect.
    pub state: Option<String>,
    /// The authorization code.
    pub code: Option<String>,
    /// Set instead of a code when the person declined.
    pub error: Option<String>,
}

/// The connection the callback authorized.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuthorizedView {
    pub connection_id: Uuid,
    /// Slack's team the bot token acts in.
    pub team_id: String,
    /// The bot user it acts as.
    pub bot_user_id: String,
}

/// OAuth callback
///
/// Where the vendor sends the browser back. Needs no token: the state is the credential. An
/// unknown, used, expired or stale state is refused and nothing is stored. Slack: the code is
/// exchanged once; its token is checked with `auth.test` (its team and bot user) and stored as
/// the connection's `token`. A refusal by Slack stores nothing; an exchange whose outcome is
/// unknown is kept for an admin (`GET /slack-exchanges`) and answered 502.
#[utoipa::path(get, path = "/oauth/callback", operation_id = "oauthCallback", tag = "connections",
    params(CallbackQuery), security(()),
    responses((status = 200, description = "The connection holds the new token.", body = AuthorizedView),
              (status = 400, description = "No state or code (`bad_request`), an unknown, used, expired or stale state (`oauth_state_unknown`, `oauth_state_reused`, `oauth_state_expired`, `oauth_state_stale`), the person declined (`authorization_declined`) or Slack refused the code (`oauth_refused`); nothing was stored.", body = ErrorBody),
              (status = 409, description = "The token's identity is fenced for removal (`resource_fenced`), or the connection changed during the exchange (`oauth_state_stale`); the exchange is kept for an admin.", body = ErrorBody),
              (status = 422, description = "The token belongs to another team than the connection's (`team_mismatch`); the exchange is kept for an admin.", body = ErrorBody),
              (status = 502, description = "The exchange's outcome is unknown (no answer, a server error, a token `auth.test` did not confirm); kept for an admin.", body = ErrorBody)))]
pub async fn callback(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<CallbackQuery>,
) -> Result<Json<AuthorizedView>, ApiError> {
    let Some(state_token) = q
        .state
        .as_deref()
        .filter(|s| !s.is_empty() && s.len() <= 200)
    else {
        return Err(ApiError::bad_request("the callback carries no state"));
    };
    let pool = state.db.get_postgres_connection_pool();
    if let Some(declined) = &q.error {
        // Declined at the vendor: nothing to exchange, and the state stays unspent.
        tracing::info!(error = %declined, "authorization declined");
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "authorization_declined",
            "the authorization was declined at the vendor; nothing was stored",
        ));
    }
    let Some(code) = q
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= 500)
    else {
        return Err(ApiError::bad_request("the callback carries no code"));
    };
    let (client_id, client_secret, _) = state.slack_oauth.configured()?;
    let claimed = match oauth::claim(pool, state_token)
        .await
        .map_err(ApiError::internal)?
    {
        Ok(claimed) => claimed,
        Err(refused) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                refused.code(),
                refused.to_string(),
            ));
        }
    };
    let settings = state.slack_oauth.client_settings();
    let access = match SlackClient::oauth_v2_access(
        &settings,
        client_id,
        client_secret,
        code,
        &claimed.redirect_uri,
    )
    .await
    {
        Ok(access) => access,
        Err(e) => return Err(exchange_failed(&state, &claimed, e).await),
    };
    let uncertain = |detail: String| async move {
        oauth::uncertain(pool, claimed.exchange_id, &detail)
            .await
            .map_err(ApiError::internal)
    };
    let Some(bot_user) = access.bot_user_id.clone() else {
        uncertain("Slack issued a token without a bot user".into()).await?;
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "oauth_uncertain",
            "Slack issued a token without a bot user; the exchange is kept for an admin",
        ));
    };
    let (target, vendor_id, proof) = slack_mirror::bot_token_resource(
        &access.team_id,
        &bot_user,
        access.access_token.as_bytes(),
    );
    // What Slack returned is on record before the token is used.
    oauth::exchanged(
        pool,
        claimed.exchange_id,
        &access.team_id,
        &bot_user,
        &proof[..16],
    )
    .await
    .map_err(ApiError::internal)?;
    let checked = match SlackClient::new(&settings, &access.access_token) {
        Ok(client) => client.auth_test().await,
        Err(e) => Err(e),
    };
    match checked {
        Ok(who) if who.team_id == access.team_id && who.user_id == bot_user => {}
        Ok(who) => {
            let detail = format!(
                "auth.test names team {} and user {}, not the exchange's {} and {bot_user}",
                who.team_id, who.user_id, access.team_id
            );
            uncertain(detail.clone()).await?;
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "oauth_uncertain",
                detail,
            ));
        }
        Err(e) => {
            let detail = format!("the new token could not be confirmed: {e}");
            uncertain(detail.clone()).await?;
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "oauth_uncertain",
                detail,
            ));
        }
    }
    // The connection names its team; a token of another team is never its credential.
    let conn = store::entity::connection::find_in_workspace(
        &state.db,
        claimed.workspace_id,
        claimed.connection_id,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("connection"))?;
    if let Ok(s) = slack_mirror::Settings::from_settings(&conn.settings)
        && s.team_id != access.team_id
    {
        let detail = format!(
            "the token belongs to Slack team {}, not to the connection's team {}",
            access.team_id, s.team_id
        );
        uncertain(detail.clone()).await?;
        return Err(ApiError::unprocessable("team_mismatch", detail));
    }
    let adopted = oauth::adopt(
        pool,
        &state.secret_key,
        &Adoption {
            claimed: &claimed,
            kind: slack_mirror::BOT_TOKEN,
            target: &target,
            vendor_id: &vendor_id,
            proof: &proof,
            secret_name: store::repair::REMOVAL_CREDENTIAL,
            token: access.access_token.as_bytes(),
        },
    )
    .await
    .map_err(ApiError::internal)?;
    match adopted {
        Ok(_) => {}
        Err(NotAdopted::Fenced) => {
            uncertain("the token's identity is fenced for removal".into()).await?;
            return Err(ApiError::conflict(
                "resource_fenced",
                "this bot token's identity is fenced for removal and is never adopted; \
                 authorize again for a fresh token",
            ));
        }
        Err(NotAdopted::Stale) => {
            uncertain("the connection changed during the exchange".into()).await?;
            return Err(ApiError::conflict(
                "oauth_state_stale",
                "the connection changed during the exchange; the token was not stored, the \
                 exchange is kept for an admin",
            ));
        }
    }
    store::activity::record(
        pool,
        claimed.connection_id,
        claimed.workspace_id,
        "oauth_authorized",
        serde_json::json!({"team_id": access.team_id, "bot_user_id": bot_user,
                           "token_fingerprint": &proof[..16]}),
    )
    .await
    .map_err(ApiError::internal)?;
    Ok(Json(AuthorizedView {
        connection_id: claimed.connection_id,
        team_id: access.team_id,
        bot_user_id: bot_user,
    }))
}

/// `oauth.v2.access` failed: a refusal by Slack (its answer says the code did nothing) leaves
/// nothing; anything else may have issued a token and is kept for an admin.
async fn exchange_failed(state: &AppState, claimed: &Claimed, e: SlackError) -> ApiError {
    let pool = state.db.get_postgres_connection_pool();
    let refused = matches!(e, SlackError::Api { .. } | SlackError::RateLimited { .. });
    let recorded = if refused {
        oauth::refused(pool, claimed.exchange_id).await
    } else {
        oauth::uncertain(pool, claimed.exchange_id, &e.to_string()).await
    };
    if let Err(db) = recorded {
        return ApiError::internal(db);
    }
    if refused {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "oauth_refused",
            format!("{e}; nothing was stored, authorize again"),
        )
    } else {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "oauth_uncertain",
            format!("{e}; the exchange's outcome is unknown and is kept for an admin"),
        )
    }
}

/// Slack exchanges kept for an admin
///
/// Authorizations whose outcome is unknown (no answer from `oauth.v2.access`, a token
/// `auth.test` did not confirm, a connection that changed meanwhile): each may have issued a
/// bot token that nothing holds. Never revoked automatically. Operator tokens only.
#[utoipa::path(get, path = "/slack-exchanges", operation_id = "listSlackExchanges", tag = "provider_repairs",
    params(KeysetPage),
    responses((status = 200, description = "The kept exchanges, oldest first.", body = Vec<ExchangeView>),
              (status = 401, response = Unauthorized), (status = 403, response = Forbidden)))]
pub async fn exchanges(
    State(state): State<AppState>,
    Operator(_): Operator,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<ExchangeView>>, ApiError> {
    let pool = state.db.get_postgres_connection_pool();
    let rows = oauth::exchanges(pool, page.after, page.limit() as i64)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.into_iter().map(ExchangeView::from).collect()))
}

/// A Slack exchange kept for an admin.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExchangeView {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    /// `dispatched` (in flight, or its process died), `exchanged` (Slack answered with a token
    /// that was not adopted), `uncertain` (no answer).
    pub status: String,
    pub team_id: Option<String>,
    pub bot_user_id: Option<String>,
    /// The first 16 hex digits of the token's SHA-256.
    pub token_fingerprint: Option<String>,
    pub detail: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl From<oauth::Exchange> for ExchangeView {
    fn from(e: oauth::Exchange) -> Self {
        ExchangeView {
            id: e.id,
            workspace_id: e.workspace_id,
            connection_id: e.connection_id,
            status: e.status,
            team_id: e.team_id,
            bot_user_id: e.bot_user_id,
            token_fingerprint: e.token_fingerprint,
            detail: e.detail,
            created_at: super::rfc3339(e.created_at),
            updated_at: super::rfc3339(e.updated_at),
        }
    }
}
