//! Which webhooks github-sync consumes. Owner-level events (`github.<owner>.?.<event>`:
//! repository lifecycle, installations) come through one fixed filter; repository events come
//! through a durable consumer whose filters the consumer subject math computes from the
//! monitors, rebuilt when the monitors change.

use std::sync::Arc;
use std::time::Duration;

use bus::Bus;
use bus::consumer::{self, ConsumerSpec};
use lifecycle_core::subject::{Monitor, filter_covers, filter_subjects};
use sea_orm::DatabaseConnection;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::WebhookHandler;

/// Every owner-level GitHub subject.
pub const OWNER_LEVEL: &str = "github.*.?.>";

/// The repository-level filters of every monitor of an active or suspended GitHub connection
/// (owner-level subjects excluded: the owner consumer takes those).
pub async fn repository_filters(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let sql = format!(
        "SELECT DISTINCT m.owner, m.name FROM repository_to_monitor m
           JOIN connection c ON c.id = m.connection_id
          WHERE c.kind = 'github' AND c.status IN ({})",
        store::scm_scope::writing_statuses()
    );
    let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await?;
    let monitors: Vec<Monitor> = rows
        .into_iter()
        .map(|(owner, repo)| Monitor::GithubRepository { owner, repo })
        .collect();
    Ok(filter_subjects(&monitors)
        .into_iter()
        .filter(|f| !filter_covers(OWNER_LEVEL, f))
        .collect())
}

/// Runs the repository-level consumer until `shutdown`, re-declaring it with new filters
/// whenever the monitors' filters change (checked every `refresh`). Deliveries in flight finish
/// before the consumer is re-declared; without any monitor nothing is consumed.
pub async fn run_repository_consumer(
    bus: Bus,
    db: DatabaseConnection,
    template: ConsumerSpec,
    handler: Arc<WebhookHandler>,
    refresh: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let pool = db.get_postgres_connection_pool().clone();
    let mut current: Vec<String> = Vec::new();
    while !shutdown.is_cancelled() {
        match repository_filters(&pool).await {
            Ok(filters) => current = filters,
            Err(e) => tracing::warn!(error = %e, "reading monitors for consumer filters failed"),
        }
        metrics::gauge!("github_consumer_filters").set(current.len() as f64);
        if current.is_empty() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(refresh) => continue,
            }
        }
        tracing::info!(filters = current.len(), "consuming repository webhooks");
        let stop = shutdown.child_token();
        let spec = ConsumerSpec {
            filter_subjects: current.clone(),
            ..template.clone()
        };
        let run = consumer::run(&bus, db.clone(), spec, handler.clone(), stop.clone());
        tokio::pin!(run);
        loop {
            tokio::select! {
                done = &mut run => {
                    done?;
                    break;
                }
                _ = tokio::time::sleep(refresh) => {
                    match repository_filters(&pool).await {
                        Ok(next) if next != current => {
                            // Monitors changed: finish in-flight work, then re-declare.
                            stop.cancel();
                            (&mut run).await?;
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "reading monitors for consumer filters failed"),
                    }
                }
            }
        }
    }
    Ok(())
}
