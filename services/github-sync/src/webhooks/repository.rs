//! `repository` webhooks (owner-level subject). Each is admitted like any delivery (the
//! delivering connection has a monitor bound to the repository's id), and a destructive one is
//! then confirmed with GitHub through that connection's own credentials before it changes rows
//! other connections see; one that cannot be confirmed is recorded as connection activity and
//! left to the next reconcile.
//!
//! `deleted`, confirmed by a 404: the connection's own monitors go, and the mirrored row (its
//! items and everything derived cascade) only when no other connection's monitor is bound to it,
//! since a 404 may only mean this connection lost access. `renamed`, confirmed by GitHub naming
//! the repository as the payload does: the row and every id-bound monitor are re-keyed by native
//! id, so the consumer filters follow, unless the stored name comes from a rename received later
//! (the row is dated by the JetStream store time). `transferred` is left to the next reconcile.

use scm_mirror::admission::GithubRepository;
use scm_mirror::{monitors, repository};
use serde::Deserialize;
use sqlx::PgPool;
use store::admission::Admitted;

use super::payload::Repository;
use super::{Outcome, Readers, Webhook, WebhookError, micros, record_activity};
use crate::source::RepoRef;

#[derive(Debug, Deserialize)]
pub struct RepositoryEvent {
    action: String,
    repository: Repository,
    #[serde(default)]
    changes: Option<Changes>,
}

/// `changes` of `renamed`: `{"repository": {"name": {"from": "old"}}}`.
#[derive(Debug, Default, Deserialize)]
struct Changes {
    #[serde(default)]
    repository: Option<RenamedFrom>,
}

#[derive(Debug, Deserialize)]
struct RenamedFrom {
    name: From,
}

#[derive(Debug, Deserialize)]
struct From {
    from: String,
}

/// Handles a `repository` delivery.
pub async fn handle(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: RepositoryEvent,
) -> Result<Outcome, WebhookError> {
    let repo = &event.repository;
    if !matches!(event.action.as_str(), "deleted" | "renamed" | "transferred") {
        return Ok(Outcome::Ignored);
    }
    let scope = GithubRepository { native_id: repo.id };
    let admitted = {
        let mut conn = pool.acquire().await?;
        hook.admit(&mut conn, scope).await?
    };
    match event.action.as_str() {
        "deleted" => {
            // Confirmed only when this connection's credentials no longer find it.
            let unconfirmed = match read(readers, hook, repo.id).await? {
                Read::Answer(None) => None,
                Read::Answer(Some(_)) => Some("GitHub still shows the repository".to_owned()),
                Read::Failed(reason) => Some(reason),
            };
            if let Some(reason) = unconfirmed {
                return unconfirmed_event(pool, &admitted, &event, &reason).await;
            }
            let mut txn = pool.begin().await?;
            // Still admitted now that GitHub answered (the connection is held until commit).
            hook.admit(&mut txn, scope).await?;
            let done = delete(&mut txn, &admitted, repo.id).await?;
            record_activity(
                &mut txn,
                admitted.connection_id,
                admitted.workspace_id,
                "github_repository_deleted",
                serde_json::json!({
                    "native_id": repo.id,
                    "monitors_removed": done.monitors_removed,
                    "mirror_removed": done.mirror_removed,
                    "monitored_by_others": done.others,
                }),
            )
            .await?;
            txn.commit().await?;
            tracing::info!(
                native_id = repo.id,
                connection_id = %admitted.connection_id,
                monitors_removed = done.monitors_removed,
                mirror_removed = done.mirror_removed,
                monitored_by_others = done.others,
                "repository gone for this connection (confirmed with GitHub); its monitors removed"
            );
            Ok(Outcome::Applied)
        }
        "renamed" => {
            // Confirmed only when GitHub names the repository as the payload does.
            let unconfirmed = match read(readers, hook, repo.id).await? {
                Read::Answer(Some(now))
                    if now.native_id == Some(repo.id)
                        && now.owner.eq_ignore_ascii_case(&repo.owner.login)
                        && now.name.eq_ignore_ascii_case(&repo.name) =>
                {
                    None
                }
                Read::Answer(Some(now)) => Some(format!(
                    "GitHub names the repository {}/{}",
                    now.owner, now.name
                )),
                Read::Answer(None) => {
                    Some("GitHub does not show the repository to this connection".to_owned())
                }
                Read::Failed(reason) => Some(reason),
            };
            if let Some(reason) = unconfirmed {
                return unconfirmed_event(pool, &admitted, &event, &reason).await;
            }
            let previous = event
                .changes
                .as_ref()
                .and_then(|c| c.repository.as_ref())
                .map(|r| r.name.from.clone());
            let mut txn = pool.begin().await?;
            hook.admit(&mut txn, scope).await?;
            let received_at = micros(hook.received_at);
            if !repository::rename_is_current(
                &mut txn,
                hook.provider_instance_id,
                repo.id,
                received_at,
            )
            .await?
            {
                txn.commit().await?;
                tracing::info!(
                    native_id = repo.id,
                    to = %format!("{}/{}", repo.owner.login, repo.name),
                    "rename received before the stored one; nothing changed"
                );
                return Ok(Outcome::Unchanged);
            }
            // Rename within an owner: re-keyed now by native id (legacy monitors by the old name).
            let previous: Vec<(&str, &str)> = previous
                .as_deref()
                .map(|name| (repo.owner.login.as_str(), name))
                .into_iter()
                .collect();
            let done = monitors::rekey(
                &mut txn,
                admitted.connection_id,
                hook.provider_instance_id,
                repo.id,
                &repo.owner.login,
                &repo.name,
                &previous,
            )
            .await?;
            repository::date_rename(&mut txn, hook.provider_instance_id, repo.id, received_at)
                .await?;
            txn.commit().await?;
            tracing::info!(
                native_id = repo.id,
                to = %format!("{}/{}", repo.owner.login, repo.name),
                moved = done.moved,
                merged = done.merged,
                blocked = done.blocked,
                "repository renamed upstream (confirmed with GitHub); mirror and monitors re-keyed"
            );
            Ok(if done.moved + done.merged > 0 {
                Outcome::Applied
            } else {
                Outcome::Unchanged
            })
        }
        // Cross-owner transfer heals on the next reconcile by native id (the new owner's
        // subject reaches no filter of a workspace that monitored the old name).
        _ => {
            tracing::info!(
                native_id = repo.id,
                to = %format!("{}/{}", repo.owner.login, repo.name),
                "repository transferred upstream; the next reconcile re-keys its monitors"
            );
            Ok(Outcome::Ignored)
        }
    }
}

/// What the delivering connection's credentials said of a repository.
enum Read {
    /// GitHub answered: the repository as it is now, or `None` (404).
    Answer(Option<RepoRef>),
    /// No answer to rely on (no reader for the connection, or the read failed).
    Failed(String),
}

async fn read(readers: &Readers, hook: &Webhook<'_>, native_id: i64) -> Result<Read, WebhookError> {
    let Some(source) = readers.active(hook.connection_id).await? else {
        return Ok(Read::Failed(
            "the connection cannot read GitHub now".to_owned(),
        ));
    };
    Ok(match source.repository(native_id).await {
        Ok(found) => Read::Answer(found),
        Err(e) => Read::Failed(format!("reading the repository failed: {e}")),
    })
}

/// Records a destructive event GitHub did not confirm and changes nothing else: the next
/// reconcile decides from what the connection can list.
async fn unconfirmed_event(
    pool: &PgPool,
    admitted: &Admitted,
    event: &RepositoryEvent,
    reason: &str,
) -> Result<Outcome, WebhookError> {
    let mut txn = pool.begin().await?;
    record_activity(
        &mut txn,
        admitted.connection_id,
        admitted.workspace_id,
        "github_repository_event_unconfirmed",
        serde_json::json!({
            "action": event.action,
            "native_id": event.repository.id,
            "reason": reason,
        }),
    )
    .await?;
    txn.commit().await?;
    metrics::counter!("github_repository_events_unconfirmed_total", "action" => event.action.clone())
        .increment(1);
    tracing::warn!(
        action = %event.action,
        native_id = event.repository.id,
        connection_id = %admitted.connection_id,
        reason,
        "repository event not confirmed with GitHub; nothing changed, left to the next reconcile"
    );
    Ok(Outcome::Unchanged)
}

/// What a confirmed deletion removed.
struct Deleted {
    monitors_removed: u64,
    mirror_removed: bool,
    /// Other connections' monitors still bound to the repository.
    others: i64,
}

async fn delete(
    txn: &mut sqlx::PgConnection,
    admitted: &Admitted,
    native_id: i64,
) -> Result<Deleted, sqlx::Error> {
    let monitors_removed = sqlx::query(
        "DELETE FROM repository_to_monitor WHERE connection_id = $1 AND native_id = $2",
    )
    .bind(admitted.connection_id)
    .bind(native_id)
    .execute(&mut *txn)
    .await?
    .rows_affected();
    // One connection's 404 may only be its lost access: the shared row stays while another
    // connection's monitor is bound to it (that connection's reconcile decides for it).
    let (others,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM repository_to_monitor m
           JOIN connection c ON c.id = m.connection_id
          WHERE c.provider_instance_id = $1 AND m.native_id = $2",
    )
    .bind(admitted.provider_instance_id)
    .bind(native_id)
    .fetch_one(&mut *txn)
    .await?;
    let mirror_removed = others == 0
        && sqlx::query("DELETE FROM repository WHERE provider_instance_id = $1 AND native_id = $2")
            .bind(admitted.provider_instance_id)
            .bind(native_id)
            .execute(&mut *txn)
            .await?
            .rows_affected()
            > 0;
    Ok(Deleted {
        monitors_removed,
        mirror_removed,
        others,
    })
}
