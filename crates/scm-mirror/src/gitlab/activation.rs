//! `gitlab_activation`: where a GitLab connection's activation stands (discovery, the connection
//! consumer, the group hook), written by gitlab-sync at each step and read by the operators' API.
//! The hook itself is the connection's `provider_registration` row.

use time::OffsetDateTime;
use uuid::Uuid;

/// One connection's activation state.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ActivationState {
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    /// Whether the last discovery was complete (listing ends reached, count matched).
    pub discovery_complete: bool,
    /// Why the last discovery was incomplete.
    pub discovery_reason: Option<String>,
    pub groups_found: Option<i64>,
    pub projects_found: Option<i64>,
    /// GitLab's own project count of the group (with subgroups).
    pub project_count: Option<i64>,
    pub discovered_at: Option<OffsetDateTime>,
    /// The durable consumer that takes the connection's events.
    pub consumer: Option<String>,
    pub consumer_confirmed_at: Option<OffsetDateTime>,
    pub consumer_reason: Option<String>,
    /// Why no hook is registered (yet).
    pub hook_reason: Option<String>,
    /// GitLab's disabling of the hook, as its last listing said.
    pub hook_disabled_until: Option<OffsetDateTime>,
    pub hook_alert_status: Option<String>,
    pub hook_checked_at: Option<OffsetDateTime>,
    pub updated_at: OffsetDateTime,
}

/// What one discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryRecord {
    pub complete: bool,
    pub reason: Option<String>,
    pub groups_found: i64,
    pub projects_found: i64,
    pub project_count: Option<i64>,
}

/// Reads the state of a connection (`None` before its first activation step).
pub async fn get<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
) -> Result<Option<ActivationState>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM gitlab_activation WHERE connection_id = $1")
        .bind(connection_id)
        .fetch_optional(executor)
        .await
}

/// Records a discovery's result.
pub async fn record_discovery<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    workspace_id: Uuid,
    d: &DiscoveryRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO gitlab_activation (connection_id, workspace_id, discovery_complete,
             discovery_reason, groups_found, projects_found, project_count, discovered_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now())
         ON CONFLICT (connection_id) DO UPDATE SET discovery_complete = EXCLUDED.discovery_complete,
             discovery_reason = EXCLUDED.discovery_reason, groups_found = EXCLUDED.groups_found,
             projects_found = EXCLUDED.projects_found, project_count = EXCLUDED.project_count,
             discovered_at = now(), updated_at = now()",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(d.complete)
    .bind(&d.reason)
    .bind(d.groups_found)
    .bind(d.projects_found)
    .bind(d.project_count)
    .execute(executor)
    .await?;
    Ok(())
}

/// Records the consumer step: confirmed on the server, or why not.
pub async fn record_consumer<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    workspace_id: Uuid,
    consumer: &str,
    failure: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO gitlab_activation (connection_id, workspace_id, consumer,
             consumer_confirmed_at, consumer_reason)
         VALUES ($1, $2, $3, CASE WHEN $4::text IS NULL THEN now() END, $4)
         ON CONFLICT (connection_id) DO UPDATE SET consumer = EXCLUDED.consumer,
             consumer_confirmed_at = CASE WHEN $4::text IS NULL THEN now()
                                          ELSE gitlab_activation.consumer_confirmed_at END,
             consumer_reason = EXCLUDED.consumer_reason, updated_at = now()",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(consumer)
    .bind(failure)
    .execute(executor)
    .await?;
    Ok(())
}

/// Records the hook step: why there is no hook (`None` once one is adopted).
pub async fn record_hook<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    workspace_id: Uuid,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO gitlab_activation (connection_id, workspace_id, hook_reason)
         VALUES ($1, $2, $3)
         ON CONFLICT (connection_id) DO UPDATE SET hook_reason = EXCLUDED.hook_reason,
             updated_at = now()",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(reason)
    .execute(executor)
    .await?;
    Ok(())
}

/// Records GitLab's disabling of the hook as a listing showed it.
pub async fn record_hook_health<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    workspace_id: Uuid,
    disabled_until: Option<OffsetDateTime>,
    alert_status: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO gitlab_activation (connection_id, workspace_id, hook_disabled_until,
             hook_alert_status, hook_checked_at)
         VALUES ($1, $2, $3, $4, now())
         ON CONFLICT (connection_id) DO UPDATE SET
             hook_disabled_until = EXCLUDED.hook_disabled_until,
             hook_alert_status = EXCLUDED.hook_alert_status, hook_checked_at = now(),
             updated_at = now()",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(disabled_until)
    .bind(alert_status)
    .execute(executor)
    .await?;
    Ok(())
}
