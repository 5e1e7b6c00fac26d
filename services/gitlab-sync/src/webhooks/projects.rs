//! Project and subgroup events of the connected group (GitLab's Project and Subgroup Hooks;
//! ingress names them by `event_name`): renames, transfers, creations and deletions. None of
//! them is written as the payload says it: a hook only names which project (by native id) to
//! ask GitLab about, with the delivering connection's own token, and what GitLab reports is
//! what re-keys the project ([`crate::activation::rekey_in`]). A forged rename therefore
//! changes nothing, and a hook naming another workspace's project is refused by admission (or
//! by route admission, which asks GitLab too).

use gitlab_client::Budget;
use scm_mirror::admission::GitlabProject;
use sea_orm::EntityTrait as _;
use serde::Deserialize;
use store::admission::Refusal;
use store::entity::connection;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};

use super::GitlabWebhooks;
use crate::mirror::gid_number;

/// The project events the sync acts on.
pub const PROJECT_EVENTS: &[&str] = &[
    "project_create",
    "project_destroy",
    "project_rename",
    "project_transfer",
];

/// The subgroup events the sync acts on.
pub const SUBGROUP_EVENTS: &[&str] = &["group_rename", "subgroup_rename"];

/// A Project Hook (`project_create`, `project_destroy`, `project_rename`, `project_transfer`).
/// Its paths are never written: only `project_id` is used, to ask GitLab.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectEvent {
    pub event_name: String,
    pub project_id: i64,
    #[serde(default)]
    pub path_with_namespace: Option<String>,
    #[serde(default)]
    pub old_path_with_namespace: Option<String>,
}

/// A Subgroup Hook's rename (`group_rename`): the group's old full path picks which of the
/// connection's own projects are read again.
#[derive(Debug, Clone, Deserialize)]
pub struct SubgroupEvent {
    pub event_name: String,
    pub group_id: i64,
    #[serde(default)]
    pub full_path: Option<String>,
    pub old_full_path: String,
}

/// The most projects one subgroup rename reads again; past it, the next reconcile heals.
const MAX_REKEYED_PER_RENAME: i64 = 500;

/// The delivering connection (`None`: gone).
pub(super) async fn delivering(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
) -> Result<Option<connection::Model>, WebhookError> {
    Ok(connection::Entity::find_by_id(hook.connection_id)
        .one(&w.readers.db)
        .await?)
}

/// Whether a monitor of the delivering connection is bound to `native_id` (admission's answer;
/// any other refusal is the delivery's).
async fn monitored(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    native_id: i64,
) -> Result<bool, WebhookError> {
    let mut txn = w.pool.begin().await?;
    let admitted = hook.admit(&mut txn, GitlabProject { native_id }).await;
    txn.rollback().await?;
    match admitted {
        Ok(_) => Ok(true),
        Err(WebhookError::OutOfScope(Refusal::NotMonitored)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The full path GitLab reports now for project `native_id`, read with the connection's own
/// token; `None` when GitLab shows the connection no such project (gone, hidden, another id).
async fn reported_path(
    w: &GitlabWebhooks,
    conn: &connection::Model,
    native_id: i64,
) -> Result<Option<String>, WebhookError> {
    let source = w
        .readers
        .source(conn)
        .await
        .map_err(|e| WebhookError::Unavailable(format!("{e:#}")))?;
    let Ok(id) = u64::try_from(native_id) else {
        return Ok(None);
    };
    // The reserve jobs keep is for follow-up reads like this one.
    let client = source.client.with_budget(Budget::unlimited());
    match client.project_by_id(id).await {
        Ok(Some(p)) if gid_number(p.id.inner()) == Some(native_id) => {
            Ok(Some(p.full_path.into_inner()))
        }
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(WebhookError::Unavailable(e.to_string())),
    }
}

/// Re-keys project `native_id` to the path GitLab reports, in a transaction that admits the
/// delivery for it. `true` when a monitor moved.
async fn rekey_reported(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    conn: &connection::Model,
    native_id: i64,
) -> Result<bool, WebhookError> {
    // Rule: a rename hook's own path is never trusted; GitLab's answer for the id is.
    let Some(path) = reported_path(w, conn, native_id).await? else {
        // Gone or hidden: the next reconcile decides, with a complete discovery.
        return Ok(false);
    };
    let mut txn = w.pool.begin().await?;
    hook.admit(&mut txn, GitlabProject { native_id }).await?;
    let rekeyed = crate::activation::rekey_in(&mut txn, conn, native_id, &path, None)
        .await
        .map_err(|e| WebhookError::Invalid(format!("{e:#}")))?;
    txn.commit().await?;
    Ok(rekeyed.is_some_and(|r| r.moved > 0))
}

/// A Project Hook.
pub async fn project(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: ProjectEvent,
) -> Result<Outcome, WebhookError> {
    let Some(conn) = delivering(w, hook).await? else {
        return Ok(Outcome::Ignored);
    };
    let native_id = e.project_id;
    if !monitored(w, hook, native_id).await? {
        // Created in, moved into or renamed into the connection's reach: route admission asks
        // GitLab for the id and binds a monitor only inside the group and the selection. A
        // deletion of a project we do not hold concerns nothing of ours.
        return match (&w.route, e.event_name.as_str()) {
            (Some(route), "project_create" | "project_rename" | "project_transfer") => {
                route.admit(&w.pool, hook, native_id).await?;
                Ok(Outcome::Applied)
            }
            _ => Err(WebhookError::OutOfScope(Refusal::NotMonitored)),
        };
    }
    match e.event_name.as_str() {
        "project_rename" | "project_transfer" => Ok(Outcome::of_change(
            rekey_reported(w, hook, &conn, native_id).await?,
        )),
        // Already held (a redelivery, or discovery was first).
        "project_create" => Ok(Outcome::Unchanged),
        "project_destroy" => {
            // Confirm before tombstone: a deletion is inferred only by a reconcile's complete
            // discovery; the hook only says so on the connection's activity.
            store::activity::record(
                &w.pool,
                conn.id,
                conn.workspace_id,
                "gitlab_project_destroy_reported",
                serde_json::json!({"project_id": native_id, "removed_by": "next reconcile"}),
            )
            .await?;
            Ok(Outcome::Unchanged)
        }
        _ => Ok(Outcome::Ignored),
    }
}

/// A subgroup rename: the connection's own projects under the old path are each read again by
/// id and re-keyed to what GitLab reports. A forged old path only makes the connection re-read
/// its own projects.
pub async fn subgroup(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: SubgroupEvent,
) -> Result<Outcome, WebhookError> {
    let Some(conn) = delivering(w, hook).await? else {
        return Ok(Outcome::Ignored);
    };
    let old = e.old_full_path.trim_end_matches('/').to_ascii_lowercase();
    if old.is_empty() {
        return Err(WebhookError::Invalid(
            "a group rename without old_full_path".into(),
        ));
    }
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT native_id FROM repository_to_monitor
          WHERE connection_id = $1 AND native_id IS NOT NULL
            AND (lower(owner) = $2 OR left(lower(owner), length($2) + 1) = $2 || '/')
          ORDER BY native_id LIMIT $3",
    )
    .bind(conn.id)
    .bind(&old)
    .bind(MAX_REKEYED_PER_RENAME)
    .fetch_all(&w.pool)
    .await?;
    if ids.is_empty() {
        return Err(WebhookError::OutOfScope(Refusal::NotMonitored));
    }
    let mut moved = false;
    for native_id in ids {
        match rekey_reported(w, hook, &conn, native_id).await {
            Ok(m) => moved |= m,
            // Unmonitored meanwhile: nothing of it to re-key.
            Err(WebhookError::OutOfScope(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Outcome::of_change(moved))
}
