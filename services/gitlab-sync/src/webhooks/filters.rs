//! Which webhooks gitlab-sync consumes, each consumer's filters following what the
//! connections hold now (`sync_engine::webhook::follow`):
//! - [`CONNECTION_EVENTS_CONSUMER`]: the hooks we registered, `gitlab.?connection.<id>.>` of
//!   every active GitLab connection (activation makes sure it takes a connection before its
//!   hook exists);
//! - [`PROJECT_EVENTS_CONSUMER`]: operator-created hooks on the shared endpoint,
//!   `gitlab.<namespace>.<project>.>` of every monitored project (with its root group's events).

use bus::Stream;
use bus::consumer::ConsumerSpec;
use lifecycle_core::subject::Monitor;
use sqlx::PgPool;
use sync_engine::webhook::follow::{Filters, Monitors};
use uuid::Uuid;

/// The durable consumer of the hooks we registered.
pub const CONNECTION_EVENTS_CONSUMER: &str = "gitlab-sync-connection-events";
/// The durable consumer of operator-created hooks.
pub const PROJECT_EVENTS_CONSUMER: &str = "gitlab-sync-project-events";

/// The spec of [`CONNECTION_EVENTS_CONSUMER`] (its filters follow [`ConnectionRoutes`]).
pub fn connection_events_spec(concurrency: usize) -> ConsumerSpec {
    ConsumerSpec {
        concurrency: concurrency.max(1),
        ..ConsumerSpec::new(Stream::WebhooksGitlab, CONNECTION_EVENTS_CONSUMER)
    }
}

/// The spec of [`PROJECT_EVENTS_CONSUMER`] (its filters follow [`ProjectMonitors`]).
pub fn project_events_spec(concurrency: usize) -> ConsumerSpec {
    ConsumerSpec {
        concurrency: concurrency.max(1),
        ..ConsumerSpec::new(Stream::WebhooksGitlab, PROJECT_EVENTS_CONSUMER)
    }
}

/// The connections whose registered hooks are consumed: every active GitLab connection.
#[derive(Clone)]
pub struct ConnectionRoutes {
    pub pool: PgPool,
}

impl Monitors for ConnectionRoutes {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM connection WHERE kind = 'gitlab' AND status = 'active' ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(ids
            .into_iter()
            .map(|id| Monitor::GitlabConnection {
                connection_id: id.to_string(),
            })
            .collect())
    }
}

/// The projects monitored by a GitLab connection that may write (a paused one keeps its reads
/// but takes no webhook writes).
#[derive(Clone)]
pub struct ProjectMonitors {
    pub pool: PgPool,
}

impl Monitors for ProjectMonitors {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let sql = format!(
            "SELECT DISTINCT m.owner, m.name FROM repository_to_monitor m
               JOIN connection c ON c.id = m.connection_id
              WHERE c.kind = 'gitlab' AND c.status IN ({})",
            store::scm_scope::writing_statuses()
        );
        let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(namespace, project)| Monitor::GitlabProject { namespace, project })
            .collect())
    }
}

/// The registered hooks' filters.
pub fn connection_filters(pool: PgPool) -> Filters<ConnectionRoutes> {
    Filters {
        monitors: ConnectionRoutes { pool },
        excluded: Vec::new(),
    }
}

/// The operator-created hooks' filters.
pub fn project_filters(pool: PgPool) -> Filters<ProjectMonitors> {
    Filters {
        monitors: ProjectMonitors { pool },
        excluded: Vec::new(),
    }
}
