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
use sync_engine::webhook::follow::{DEFAULT_MAX_FILTERS, Filters, Monitors};

pub use crate::activation::{CONNECTION_EVENTS_CONSUMER, ConnectionRoutes, connection_events_spec};

/// The durable consumer of operator-created hooks.
pub const PROJECT_EVENTS_CONSUMER: &str = "gitlab-sync-project-events";

/// The spec of [`PROJECT_EVENTS_CONSUMER`] (its filters follow [`ProjectMonitors`]).
pub fn project_events_spec(concurrency: usize) -> ConsumerSpec {
    ConsumerSpec {
        concurrency: concurrency.max(1),
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksGitlab, PROJECT_EVENTS_CONSUMER)
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
        cap: DEFAULT_MAX_FILTERS,
    }
}

/// The operator-created hooks' filters.
pub fn project_filters(pool: PgPool) -> Filters<ProjectMonitors> {
    Filters {
        monitors: ProjectMonitors { pool },
        // Past its cap the filter may take the whole vendor root: the registered hooks'
        // deliveries stay the other consumer's.
        excluded: vec![lifecycle_core::subject::by_connection_filter("gitlab")],
        cap: DEFAULT_MAX_FILTERS,
    }
}
