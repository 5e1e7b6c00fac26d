//! `installation` and `installation_repositories` webhooks (owner-level subject), for the
//! connections whose App installation they name on that provider instance.
//!
//! `installation_repositories` changes what the installation reaches: `added` materialises
//! monitors for the added repositories (as a sync does from the installation's listing),
//! `removed` removes the monitors. Mirror rows stay: other workspaces may still monitor the
//! repository, and an orphaned repository's mirror is the eraser's to remove.
//!
//! `installation` (`created`, `deleted`, `suspend`, `unsuspend`) is recorded as connection
//! activity; the connection's state belongs to control-api, which owns its state machine, so
//! github-sync changes no status here. `created` also materialises the listed repositories.

use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::{Outcome, Webhook, WebhookError, parse};
use crate::monitors;
use crate::source::RepoRef;

#[derive(Debug, Deserialize)]
struct Installation {
    id: i64,
}

/// A repository as installation events list it: `full_name` names it, there is no owner object.
#[derive(Debug, Deserialize)]
struct ListedRepository {
    id: i64,
    full_name: String,
}

impl ListedRepository {
    fn repo_ref(&self) -> Option<RepoRef> {
        let (owner, name) = self.full_name.split_once('/')?;
        Some(RepoRef {
            owner: owner.to_owned(),
            name: name.to_owned(),
            native_id: Some(self.id),
        })
    }
}

#[derive(Debug, Deserialize)]
struct InstallationEvent {
    action: String,
    installation: Installation,
    #[serde(default)]
    repositories: Vec<ListedRepository>,
}

#[derive(Debug, Deserialize)]
struct InstallationRepositoriesEvent {
    action: String,
    installation: Installation,
    #[serde(default)]
    repositories_added: Vec<ListedRepository>,
    #[serde(default)]
    repositories_removed: Vec<ListedRepository>,
}

/// A connection an installation event concerns.
struct Installed {
    connection_id: Uuid,
    workspace_id: Uuid,
}

/// The App connections of `installation_id` on the instance that have not ended.
async fn connections(
    txn: &mut sqlx::PgConnection,
    provider_instance_id: Uuid,
    installation_id: i64,
) -> Result<Vec<Installed>, sqlx::Error> {
    let rows: Vec<(Uuid, Uuid)> = sqlx::query_as(
        "SELECT id, workspace_id FROM connection
          WHERE kind = 'github' AND provider_instance_id = $1
            AND settings->>'auth' = 'app' AND settings->'installation_id' = to_jsonb($2::bigint)
            AND status IN ('pending', 'active', 'suspended', 'paused')
          ORDER BY id",
    )
    .bind(provider_instance_id)
    .bind(installation_id)
    .fetch_all(&mut *txn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(connection_id, workspace_id)| Installed {
            connection_id,
            workspace_id,
        })
        .collect())
}

async fn record_activity(
    txn: &mut sqlx::PgConnection,
    on: &Installed,
    activity: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO connection_activity (id, connection_id, workspace_id, activity, detail)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(Uuid::now_v7())
    .bind(on.connection_id)
    .bind(on.workspace_id)
    .bind(activity)
    .bind(sqlx::types::Json(detail))
    .execute(&mut *txn)
    .await?;
    Ok(())
}

fn repo_refs(listed: &[ListedRepository]) -> Vec<RepoRef> {
    listed
        .iter()
        .filter_map(ListedRepository::repo_ref)
        .collect()
}

/// Handles an `installation` delivery.
pub async fn installation(pool: &PgPool, hook: &Webhook<'_>) -> Result<Outcome, WebhookError> {
    let event: InstallationEvent = parse(hook)?;
    let action = event.action.as_str();
    metrics::counter!("github_installation_events_total", "action" => action.to_owned())
        .increment(1);
    if !matches!(action, "created" | "deleted" | "suspend" | "unsuspend") {
        return Ok(Outcome::Ignored);
    }
    let mut txn = pool.begin().await?;
    let installed = connections(&mut txn, hook.provider_instance_id, event.installation.id).await?;
    let repos = repo_refs(&event.repositories);
    for on in &installed {
        // The installation's state is control-api's to change; this records what GitHub said.
        record_activity(
            &mut txn,
            on,
            &format!("github_installation_{action}"),
            serde_json::json!({ "installation_id": event.installation.id }),
        )
        .await?;
        if action == "created" {
            monitors::materialise(
                &mut txn,
                hook.provider_instance_id,
                on.workspace_id,
                on.connection_id,
                &repos,
            )
            .await?;
        }
        tracing::info!(connection_id = %on.connection_id, workspace_id = %on.workspace_id, installation_id = event.installation.id, action, "GitHub App installation event recorded");
    }
    txn.commit().await?;
    Ok(if installed.is_empty() {
        Outcome::Ignored
    } else {
        Outcome::Applied
    })
}

/// Handles an `installation_repositories` delivery.
pub async fn installation_repositories(
    pool: &PgPool,
    hook: &Webhook<'_>,
) -> Result<Outcome, WebhookError> {
    let event: InstallationRepositoriesEvent = parse(hook)?;
    let action = event.action.as_str();
    if !matches!(action, "added" | "removed") {
        return Ok(Outcome::Ignored);
    }
    let added = repo_refs(&event.repositories_added);
    let removed = repo_refs(&event.repositories_removed);
    let mut txn = pool.begin().await?;
    let installed = connections(&mut txn, hook.provider_instance_id, event.installation.id).await?;
    let mut changed = 0;
    for on in &installed {
        let created = monitors::materialise(
            &mut txn,
            hook.provider_instance_id,
            on.workspace_id,
            on.connection_id,
            &added,
        )
        .await?;
        let mut dropped = 0;
        for repo in &removed {
            dropped += monitors::remove(&mut txn, on.connection_id, repo).await?;
        }
        record_activity(
            &mut txn,
            on,
            &format!("github_installation_repositories_{action}"),
            serde_json::json!({
                "installation_id": event.installation.id,
                "added": added.iter().map(|r| format!("{}/{}", r.owner, r.name)).collect::<Vec<_>>(),
                "removed": removed.iter().map(|r| format!("{}/{}", r.owner, r.name)).collect::<Vec<_>>(),
                "monitors_created": created, "monitors_removed": dropped,
            }),
        )
        .await?;
        tracing::info!(connection_id = %on.connection_id, workspace_id = %on.workspace_id, installation_id = event.installation.id, created, removed = dropped, "installation repositories changed; monitors follow");
        changed += created + dropped;
    }
    txn.commit().await?;
    Ok(if changed > 0 {
        Outcome::Applied
    } else if installed.is_empty() {
        Outcome::Ignored
    } else {
        Outcome::Unchanged
    })
}
