//! control-api: the operators' API. Workspaces, connections and their lifecycle transitions,
//! sync jobs, and dead messages, over JSON with bearer-token auth. Every state change commits
//! with its audit row and its outbox message in one transaction.
#![forbid(unsafe_code)]

pub mod auth;
pub mod error;
pub mod openapi;
pub mod routes;

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use bus::relay::{Relay, RelayConfig};
use sea_orm::DatabaseConnection;
use store::secrets::Keyring;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

pub use auth::{Claims, Keys, Role};

/// control-api's configuration: the common flags plus its own.
#[derive(Clone, clap::Parser)]
#[command(name = "control-api", about = "forgesync operators' API")]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// HS256 key that bearer tokens are signed with.
    #[arg(
        long,
        env = "FORGESYNC_JWT_SECRET",
        value_name = "FORGESYNC_JWT_SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: String,

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
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub keys: Keys,
    pub secret_key: Keyring,
    /// How long a rotated webhook secret keeps verifying.
    pub rotation_window: std::time::Duration,
    /// Connections may name http server URLs (local simulators only).
    pub allow_insecure_server_urls: bool,
}

/// The API router, without health endpoints.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    routes::router()
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(record_response),
        )
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

fn record_response(
    res: &axum::http::Response<axum::body::Body>,
    latency: std::time::Duration,
    _span: &tracing::Span,
) {
    let status = res.status().as_u16().to_string();
    metrics::counter!("http_requests_total", "service" => "control-api", "status" => status)
        .increment(1);
    metrics::histogram!("http_request_duration_seconds", "service" => "control-api")
        .record(latency.as_secs_f64());
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
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let state = AppState {
        db: db.clone(),
        keys: Keys::hs256(config.jwt_secret.as_bytes())?,
        secret_key,
        rotation_window: std::time::Duration::from_secs(config.rotation_window_secs),
        allow_insecure_server_urls: config.allow_insecure_server_urls,
    };
    let app =
        router(state, config.max_body_bytes).merge(runtime::health::router(runtime::HealthState {
            db: db.clone(),
            nats: bus.client().clone(),
        }));

    let listener = tokio::net::TcpListener::bind(config.common.listen)
        .await
        .with_context(|| format!("FORGESYNC_LISTEN: cannot bind {}", config.common.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "control-api listening");
    on_listen(addr);

    // This service writes outbox rows, so it also relays them; any number of relays is safe.
    let relay = Relay::new(db.clone(), bus.clone(), RelayConfig::default());
    let relay_stop = shutdown.child_token();
    let relay_task = tokio::spawn({
        let stop = relay_stop.clone();
        async move { relay.run(stop).await }
    });

    let server_stop = shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { server_stop.cancelled().await })
        .await
        .context("control-api server")?;
    relay_stop.cancel();
    relay_task.await.context("outbox relay task")?;
    Ok(())
}

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
