//! Which webhooks github-sync consumes. Owner-level events (`github.<owner>.?.<event>`:
//! repository lifecycle, installations) come through one fixed filter; repository events come
//! through the engine's monitor-following consumer (`sync_engine::webhook::follow`), whose
//! filters the consumer subject math computes from the monitors below.

use lifecycle_core::subject::{self, Monitor};
use sqlx::PgPool;
use sync_engine::webhook::follow::{self, Filters, Monitors};

/// The repositories monitored by an active or suspended GitHub connection (a paused one keeps
/// its reads but takes no webhook writes).
pub struct RepositoryMonitors {
    pub pool: PgPool,
}

impl Monitors for RepositoryMonitors {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let sql = format!(
            "SELECT DISTINCT m.owner, m.name FROM repository_to_monitor m
               JOIN connection c ON c.id = m.connection_id
              WHERE c.kind = 'github' AND c.status IN ({})",
            store::scm_scope::writing_statuses()
        );
        let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(owner, repo)| Monitor::GithubRepository { owner, repo })
            .collect())
    }
}

/// The repository-level filters: every monitor's, owner-level subjects excluded (the owner
/// consumer takes those).
pub fn repository_filters(pool: PgPool) -> Filters<RepositoryMonitors> {
    Filters {
        monitors: RepositoryMonitors { pool },
        excluded: vec![subject::github_owner_filter()],
        cap: follow::DEFAULT_MAX_FILTERS,
    }
}
