//! control-api: the operators' API. Workspaces, connections and their lifecycle transitions,
//! sync jobs, and dead messages, over JSON with bearer-token auth. Every state change commits
//! with its audit row and its outbox message in one transaction.
#![forbid(unsafe_code)]

pub mod auth;
pub mod error;
pub mod github_access;
pub mod openapi;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use sea_orm::DatabaseConnection;
use store::secrets::Keyring;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

pub use auth::{Audience, AuthSettings, Claims, Keys, Role, Verifier};

/// control-api's configuration: the common flags plus its own.
#[derive(Clone, clap::Parser)]
#[command(name = "control-api", about = "forgesync operators' API")]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// HS256 key that bearer tokens may be signed with (this, a JWKS, or both).
    #[arg(
        long,
        env = "FORGESYNC_JWT_SECRET",
        value_name = "FORGESYNC_JWT_SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: Option<String>,

    /// JWKS (file path or http(s) URL) whose keys verify RS256/ES256 bearer tokens, by `kid`.
    #[arg(long, env = "FORGESYNC_JWT_JWKS", value_name = "FORGESYNC_JWT_JWKS")]
    pub jwt_jwks: Option<String>,

    /// Seconds between two reads of the JWKS.
    #[arg(
        long,
        env = "FORGESYNC_JWT_JWKS_REFRESH",
        value_name = "FORGESYNC_JWT_JWKS_REFRESH",
        default_value_t = 300
    )]
    pub jwt_jwks_refresh_secs: u64,

    /// The `iss` every bearer token must carry.
    #[arg(
        long,
        env = "FORGESYNC_JWT_ISSUER",
        value_name = "FORGESYNC_JWT_ISSUER"
    )]
    pub jwt_issuer: String,

    /// The `aud` every bearer token must carry.
    #[arg(
        long,
        env = "FORGESYNC_JWT_AUDIENCE",
        value_name = "FORGESYNC_JWT_AUDIENCE"
    )]
    pub jwt_audience: String,

    /// Longest bearer-token lifetime accepted (`exp` - `iat`), in seconds.
    #[arg(
        long,
        env = "FORGESYNC_JWT_MAX_LIFETIME",
        value_name = "FORGESYNC_JWT_MAX_LIFETIME",
        default_value_t = 24 * 3600
    )]
    pub jwt_max_lifetime_secs: u64,

    /// Keyring of 32-byte AES-256-GCM keys sealing connection secrets at rest: `id:base64,...`
    /// (the last seals, any opens) or one bare base64 key.
    #[arg(
        long,
        env = "FORGESYNC_SECRET_KEY",
        value_name = "FORGESYNC_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: String,

    /// Largest request body accepted, in bytes.
    #[arg(
        long,
        env = "FORGESYNC_MAX_BODY_BYTES",
        value_name = "FORGESYNC_MAX_BODY_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub max_body_bytes: usize,

    /// Seconds a rotated webhook secret keeps verifying beside the new one.
    #[arg(
        long = "webhook-rotation-window",
        env = "FORGESYNC_WEBHOOK_ROTATION_WINDOW",
        value_name = "FORGESYNC_WEBHOOK_ROTATION_WINDOW",
        default_value_t = 24 * 3600
    )]
    pub rotation_window_secs: u64,

    /// Accept connection server URLs other than https (the local stack's http simulators).
    #[arg(
        long,
        env = "FORGESYNC_ALLOW_INSECURE_SERVER_URLS",
        value_name = "FORGESYNC_ALLOW_INSECURE_SERVER_URLS"
    )]
    pub allow_insecure_server_urls: bool,

    /// Connections a workspace may hold (disconnected ones not counted); one more is 422
    /// `connection_cap`.
    #[arg(
        long,
        env = "FORGESYNC_MAX_CONNECTIONS_PER_WORKSPACE",
        value_name = "FORGESYNC_MAX_CONNECTIONS_PER_WORKSPACE",
        default_value_t = 50
    )]
    pub max_connections_per_workspace: u64,

    /// Repositories (monitors) one connection's settings may name; more is 422 `monitor_cap`.
    #[arg(
        long,
        env = "FORGESYNC_MAX_MONITORS_PER_CONNECTION",
        value_name = "FORGESYNC_MAX_MONITORS_PER_CONNECTION",
        default_value_t = 1000
    )]
    pub max_monitors_per_connection: usize,

    /// The Slack app's OAuth client id; with its secret and the callback URL, Slack
    /// connections authorize through `POST .../authorize`.
    #[arg(
        long,
        env = "FORGESYNC_SLACK_CLIENT_ID",
        value_name = "FORGESYNC_SLACK_CLIENT_ID"
    )]
    pub slack_client_id: Option<String>,

    /// The Slack app's OAuth client secret.
    #[arg(
        long,
        env = "FORGESYNC_SLACK_CLIENT_SECRET",
        value_name = "FORGESYNC_SLACK_CLIENT_SECRET",
        hide_env_values = true
    )]
    pub slack_client_secret: Option<String>,

    /// Slack's authorization page.
    #[arg(
        long,
        env = "FORGESYNC_SLACK_AUTHORIZE_URL",
        value_name = "FORGESYNC_SLACK_AUTHORIZE_URL",
        default_value = "https://slack.com/oauth/v2/authorize"
    )]
    pub slack_authorize_url: String,

    /// Slack's Web API base, for the code exchange and the token's check.
    #[arg(
        long,
        env = "FORGESYNC_SLACK_API_URL",
        value_name = "FORGESYNC_SLACK_API_URL",
        default_value = slack_client::SLACK_API
    )]
    pub slack_api_url: String,

    /// This API's `/oauth/callback` as the vendor's redirect reaches it (registered with the
    /// Slack app as its redirect URL).
    #[arg(
        long,
        env = "FORGESYNC_OAUTH_CALLBACK_URL",
        value_name = "FORGESYNC_OAUTH_CALLBACK_URL"
    )]
    pub oauth_callback_url: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("jwt_issuer", &self.jwt_issuer)
            .field("jwt_audience", &self.jwt_audience)
            .field("jwt_jwks", &self.jwt_jwks)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The token rules this config names.
    pub fn auth_settings(&self) -> AuthSettings {
        AuthSettings {
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            max_lifetime: Duration::from_secs(self.jwt_max_lifetime_secs),
            hs256_secret: self.jwt_secret.as_ref().map(|s| s.as_bytes().to_vec()),
            jwks: self.jwt_jwks.clone(),
            jwks_refresh: Duration::from_secs(self.jwt_jwks_refresh_secs.max(1)),
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    /// JetStream, for the erasure-completeness scan's stream counts.
    pub bus: bus::Bus,
    pub auth: Arc<Verifier>,
    pub secret_key: Keyring,
    /// How long a rotated webhook secret keeps verifying.
    pub rotation_window: std::time::Duration,
    /// Connections may name http server URLs (local simulators only).
    pub allow_insecure_server_urls: bool,
    /// Where a connection's server may be (`FORGESYNC_EGRESS_ALLOW`): checked when it is named
    /// and at every call.
    pub egress: vendor_http::egress::Egress,
    /// What one workspace and one connection may hold.
    pub caps: Caps,
    /// Slack's OAuth app, for connections that authorize.
    pub slack_oauth: Arc<routes::oauth::SlackOAuth>,
}

/// Quotas on what a tenant may create, each named in the refusal that reaches it.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub connections_per_workspace: u64,
    pub monitors_per_connection: usize,
}

/// The API router, without health endpoints.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    routes::router()
        .layer(DefaultBodyLimit::max(max_body_bytes))
        // Requests are counted and timed per route by the runtime's layer (`http_requests_total`).
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .with_state(state)
}

/// A span per request naming the workspace and connection it concerns (never the body).
fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let (workspace_id, connection_id) = ids_in_path(req.uri().path());
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        workspace_id = workspace_id.unwrap_or_default(),
        connection_id = connection_id.unwrap_or_default(),
    )
}

/// The workspace and connection ids of `/workspaces/{w}/connections/{c}/...` paths.
fn ids_in_path(path: &str) -> (Option<&str>, Option<&str>) {
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("workspaces"), w, Some("connections"), c) => (w, c),
        (Some("workspaces"), w, _, _) => (w, None),
        _ => (None, None),
    }
}

/// Runs control-api until `shutdown`; `on_listen` learns the bound address (port 0 in tests).
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let secret_key = Keyring::parse(&config.secret_key)?;
    let rotation_window = Duration::from_secs(config.rotation_window_secs);
    if rotation_window > routes::endpoints::MAX_ROTATION_WINDOW {
        anyhow::bail!(
            "FORGESYNC_WEBHOOK_ROTATION_WINDOW may be at most {} seconds (7 days)",
            routes::endpoints::MAX_ROTATION_WINDOW.as_secs()
        );
    }
    let auth = Arc::new(Verifier::new(&config.auth_settings()).await?);
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let state = AppState {
        db: db.clone(),
        bus: bus.clone(),
        auth: auth.clone(),
        secret_key,
        rotation_window,
        allow_insecure_server_urls: config.allow_insecure_server_urls,
        egress: config.common.egress.clone(),
        caps: Caps {
            connections_per_workspace: config.max_connections_per_workspace,
            monitors_per_connection: config.max_monitors_per_connection,
        },
        slack_oauth: Arc::new(routes::oauth::SlackOAuth {
            client_id: config.slack_client_id.clone().filter(|s| !s.is_empty()),
            client_secret: config.slack_client_secret.clone().filter(|s| !s.is_empty()),
            authorize_url: config.slack_authorize_url.clone(),
            api_url: config.slack_api_url.clone(),
            callback_url: config.oauth_callback_url.clone().filter(|s| !s.is_empty()),
            scopes: routes::oauth::SLACK_SCOPES.to_owned(),
        }),
    };
    let mut service = runtime::Service::new("control-api", &config.common, &shutdown);
    service.routes(router(state, config.max_body_bytes));
    // This service writes outbox rows, so it also relays them; any number of relays is safe.
    service.relay(&db, &bus);
    // A JWKS is read again periodically (and on an unknown kid, by the verifier).
    if auth.jwks().is_some() {
        let auth = auth.clone();
        service.task("JWKS refresh", |stop| async move {
            if let Some(jwks) = auth.jwks() {
                jwks.refresh_until(stop).await;
            }
            Ok(())
        });
    }
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "control-api", run);

#[cfg(test)]
mod tests {
    use super::ids_in_path;

    #[test]
    fn request_spans_name_the_workspace_and_connection() {
        assert_eq!(
            ids_in_path("/workspaces/w1/connections/c1/activate"),
            (Some("w1"), Some("c1"))
        );
        assert_eq!(ids_in_path("/workspaces/w1/purge"), (Some("w1"), None));
        assert_eq!(
            ids_in_path("/workspaces/w1/connections"),
            (Some("w1"), None)
        );
        assert_eq!(ids_in_path("/dead-messages"), (None, None));
    }
}
