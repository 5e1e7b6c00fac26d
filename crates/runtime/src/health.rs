//! `/healthz`, `/readyz` and `/metrics`: the routes every service merges into its router.

use std::collections::HashSet;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use migrations::{Migrator, MigratorTrait as _};
use sea_orm::{ConnectionTrait as _, DatabaseConnection, DbBackend, Statement};

/// What readiness checks: the database, the schema version, the NATS connection (for services
/// that cannot work without it) and the supervised tasks.
#[derive(Clone)]
pub struct HealthState {
    /// The service's database pool.
    pub db: DatabaseConnection,
    /// The service's NATS client, when readiness depends on it (ingress's does not: deliveries
    /// are durable in Postgres first).
    pub nats: Option<async_nats::Client>,
    /// The service's supervised tasks: not ready once one has ended.
    pub tasks: crate::Readiness,
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
        match pending_migrations(&state.db).await {
            Ok(pending) if pending.is_empty() => {}
            Ok(pending) => {
                failed.insert(
                    "migrations".into(),
                    format!(
                        "pending: {}; run the service with --migrate (FORGESYNC_MIGRATE=true) or `cargo xtask migrate`",
                        pending.join(", ")
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

    if let Some(nats) = state.nats.as_ref().map(|n| n.connection_state())
        && nats != async_nats::connection::State::Connected
    {
        failed.insert("nats".into(), format!("connection is {nats}").into());
    }

    if let Some(why) = state.tasks.failure() {
        failed.insert("tasks".into(), why.into());
    }

    if failed.is_empty() {
        (StatusCode::OK, "ready").into_response()
    } else {
        tracing::warn!(failed = ?failed.keys().collect::<Vec<_>>(), "not ready");
        let body = serde_json::json!({ "status": "not ready", "failed": failed });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

/// This binary's migrations not yet applied.
///
/// Read-only (a probe must not create tables), and a schema *ahead* of this binary counts as
/// current: during a rolling upgrade the new version migrates first and old replicas, whose
/// migrations are all applied, must stay ready.
async fn pending_migrations(db: &DatabaseConnection) -> Result<Vec<String>, sea_orm::DbErr> {
    let known: Vec<String> = Migrator::get_migration_files()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let exists = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT to_regclass('seaql_migrations') IS NOT NULL AS present",
        ))
        .await?
        .map(|row| row.try_get::<bool>("", "present"))
        .transpose()?
        .unwrap_or(false);
    if !exists {
        return Ok(known);
    }
    let applied: HashSet<String> = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT version FROM seaql_migrations",
        ))
        .await?
        .iter()
        .map(|row| row.try_get::<String>("", "version"))
        .collect::<Result<_, _>>()?;
    Ok(known.into_iter().filter(|m| !applied.contains(m)).collect())
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
