//! `/healthz`, `/readyz` and `/metrics`: the routes every service merges into its router.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use migrations::{Migrator, MigratorTrait as _};
use sea_orm::{ConnectionTrait as _, DatabaseConnection};

/// What readiness checks: the database, the NATS connection and the schema version.
#[derive(Clone)]
pub struct HealthState {
    /// The service's database pool.
    pub db: DatabaseConnection,
    /// The service's NATS client.
    pub nats: async_nats::Client,
}

/// Routes for `GET /healthz` (alive), `GET /readyz` (dependencies answer, migrations current)
/// and `GET /metrics` (Prometheus text format).
pub fn router<S>(state: HealthState) -> Router<S> {
    // Install the recorder now, so metrics recorded from here on reach `/metrics`.
    crate::telemetry::metrics_handle();
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(state): State<HealthState>) -> Response {
    let mut failed = serde_json::Map::new();

    if let Err(err) = state.db.execute_unprepared("SELECT 1").await {
        failed.insert("postgres".into(), format!("SELECT 1 failed: {err}").into());
    } else {
        // Read-only: a probe must not create the migrations table.
        match Migrator::get_pending_migrations_read_only(&state.db).await {
            Ok(pending) if pending.is_empty() => {}
            Ok(pending) => {
                let names: Vec<String> = pending.iter().map(|m| m.name().to_owned()).collect();
                failed.insert(
                    "migrations".into(),
                    format!(
                        "pending: {}; run the service with --migrate (FORGESYNC_MIGRATE=true) or `cargo xtask migrate`",
                        names.join(", ")
                    )
                    .into(),
                );
            }
            Err(err) => {
                failed.insert(
                    "migrations".into(),
                    format!("cannot read migration status: {err}").into(),
                );
            }
        }
    }

    let nats = state.nats.connection_state();
    if nats != async_nats::connection::State::Connected {
        failed.insert("nats".into(), format!("connection is {nats}").into());
    }

    if failed.is_empty() {
        (StatusCode::OK, "ready").into_response()
    } else {
        tracing::warn!(failed = ?failed.keys().collect::<Vec<_>>(), "not ready");
        let body = serde_json::json!({ "status": "not ready", "failed": failed });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

async fn metrics() -> Response {
    let handle = crate::telemetry::metrics_handle();
    // Histograms need periodic upkeep; a scrape is a natural moment for it.
    handle.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}
