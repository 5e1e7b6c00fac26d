//! `installation` and `installation_repositories` webhooks (owner-level subject), for the
//! delivering connection only, and only through its App endpoint for the installation it
//! verified with GitHub; anything else is out of scope.
//!
//! `installation_target` (`renamed`: the account the App is installed on has a new login)
//! re-keys the connection's repositories of that account to the new owner name.
//!
//! `installation_repositories` changes what the installation reaches: `added` materialises
//! monitors for the added repositories (as a sync does from the installation's listing),
//! `removed` removes the monitors. Mirror rows stay: other workspaces may still monitor the
//! repository, and an orphaned repository's mirror is the eraser's to remove.
//!
//! `installation` (`created`, `deleted`, `suspend`, `unsuspend`) is recorded as connection
//! activity. `deleted`, `suspend` and `unsuspend` move the connection to uninstalled, suspended
//! or back to active through the one checked transition ([`store::lifecycle::apply`]: version,
//! audit row and lifecycle message in one transaction); an unsuspend lifts only a suspension,
//! never an operator's pause. `created` materialises the listed repositories.
//!
//! A listed repository becomes a monitor bound to its native id only once the connection's own
//! installation token reads it by that id; the rest wait for the next reconcile's listing.

use lifecycle_core::connection::Transition;
use scm_mirror::admission::GithubInstallation;
use scm_mirror::monitors;
use sea_orm::{DbErr, TransactionTrait};
use serde::Deserialize;
use sqlx::PgPool;
use store::entity::{ConnectionStatus, connection};
use store::lifecycle;
use uuid::Uuid;

use super::{Outcome, Readers, Webhook, WebhookError, record_activity};
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
pub struct InstallationEvent {
    action: String,
    installation: Installation,
    #[serde(default)]
    repositories: Vec<ListedRepository>,
}

/// An account as `installation_target` names it.
#[derive(Debug, Deserialize)]
struct Account {
    login: String,
}

#[derive(Debug, Deserialize)]
struct LoginFrom {
    from: String,
}

/// `changes` of `installation_target.renamed`: `{"login": {"from": "old"}}` (a slug-only change
/// names no login).
#[derive(Debug, Default, Deserialize)]
struct TargetChanges {
    #[serde(default)]
    login: Option<LoginFrom>,
}

/// `installation_target`: the account the App is installed on changed, named at the top level.
#[derive(Debug, Deserialize)]
pub struct InstallationTargetEvent {
    action: String,
    account: Account,
    #[serde(default)]
    changes: TargetChanges,
    installation: Installation,
}

#[derive(Debug, Deserialize)]
pub struct InstallationRepositoriesEvent {
    action: String,
    installation: Installation,
    #[serde(default)]
    repositories_added: Vec<ListedRepository>,
    #[serde(default)]
    repositories_removed: Vec<ListedRepository>,
}

/// The connection an installation event concerns: the delivering one, once admitted.
struct Installed {
    connection_id: Uuid,
    workspace_id: Uuid,
}

/// Admits an installation event for the delivering connection: only through its App endpoint,
/// and only for the installation it verified with GitHub (see [`scm_mirror::admission`]).
async fn admitted(
    conn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    installation_id: i64,
) -> Result<Installed, WebhookError> {
    let admitted = hook
        .admit(&mut *conn, GithubInstallation { installation_id })
        .await?;
    Ok(Installed {
        connection_id: admitted.connection_id,
        workspace_id: admitted.workspace_id,
    })
}

/// The listed repositories the connection's own credentials read by native id, as GitHub names
/// them now; the others, with why, are left to the next reconcile.
async fn reached(
    readers: &Readers,
    hook: &Webhook<'_>,
    listed: &[RepoRef],
) -> Result<(Vec<RepoRef>, Vec<serde_json::Value>), WebhookError> {
    let mut confirmed = Vec::new();
    let mut unconfirmed = Vec::new();
    if listed.is_empty() {
        return Ok((confirmed, unconfirmed));
    }
    let Some(source) = readers.active(hook.connection_id).await? else {
        let reason = "the connection cannot read GitHub now";
        unconfirmed.extend(listed.iter().map(|r| unconfirmed_json(r, reason)));
        return Ok((confirmed, unconfirmed));
    };
    for repo in listed {
        let Some(native_id) = repo.native_id else {
            continue;
        };
        match source.repository(native_id).await {
            Ok(Some(now)) if now.native_id == Some(native_id) => confirmed.push(now),
            Ok(_) => unconfirmed.push(unconfirmed_json(
                repo,
                "the installation does not reach this repository id",
            )),
            Err(e) => unconfirmed.push(unconfirmed_json(repo, &format!("read failed: {e}"))),
        }
    }
    Ok((confirmed, unconfirmed))
}

fn unconfirmed_json(repo: &RepoRef, reason: &str) -> serde_json::Value {
    serde_json::json!({
        "repository": format!("{}/{}", repo.owner, repo.name),
        "native_id": repo.native_id,
        "reason": reason,
    })
}

fn repo_refs(listed: &[ListedRepository]) -> Vec<RepoRef> {
    listed
        .iter()
        .filter_map(ListedRepository::repo_ref)
        .collect()
}

/// Handles an `installation` delivery.
pub async fn installation(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: InstallationEvent,
) -> Result<Outcome, WebhookError> {
    let action = event.action.as_str();
    let acted_on = matches!(action, "created" | "deleted" | "suspend" | "unsuspend");
    // A label value the sender chose would make series without bound: others are `other`.
    let label = if acted_on { action } else { "other" };
    metrics::counter!("github_installation_events_total", "action" => label.to_owned())
        .increment(1);
    if !acted_on {
        return Ok(Outcome::Ignored);
    }
    if let Some(transition) = vendor_transition(action) {
        return transition_connection(
            pool,
            readers,
            hook,
            event.installation.id,
            action,
            transition,
        )
        .await;
    }
    admitted(&mut *pool.acquire().await?, hook, event.installation.id).await?;
    let (repos, unconfirmed) = if action == "created" {
        reached(readers, hook, &repo_refs(&event.repositories)).await?
    } else {
        (Vec::new(), Vec::new())
    };
    let mut txn = pool.begin().await?;
    // Still admitted now (the connection is held until commit).
    let on = admitted(&mut txn, hook, event.installation.id).await?;
    // The installation's state is control-api's to change; this records what GitHub said.
    record_activity(
        &mut txn,
        on.connection_id,
        on.workspace_id,
        &format!("github_installation_{action}"),
        serde_json::json!({
            "installation_id": event.installation.id,
            "unconfirmed": unconfirmed,
        }),
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
    txn.commit().await?;
    Ok(Outcome::Applied)
}

/// The connection transition an installation action reports, if any.
fn vendor_transition(action: &str) -> Option<Transition> {
    match action {
        "deleted" => Some(Transition::Uninstall),
        "suspend" => Some(Transition::Suspend),
        "unsuspend" => Some(Transition::Resume),
        _ => None,
    }
}

/// Moves the delivering connection through `transition`, once the delivery is admitted for the
/// installation the connection verified, through its App endpoint.
async fn transition_connection(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    installation_id: i64,
    action: &str,
    transition: Transition,
) -> Result<Outcome, WebhookError> {
    // Admission (App endpoint, verified installation), and the version it admitted.
    let (on, admitted_version) = {
        let mut txn = pool.begin().await?;
        let on = admitted(&mut txn, hook, installation_id).await?;
        let (version,): (i64,) = sqlx::query_as("SELECT version FROM connection WHERE id = $1")
            .bind(on.connection_id)
            .fetch_one(&mut *txn)
            .await?;
        txn.commit().await?;
        (on, version)
    };
    let txn = readers.db.begin().await?;
    let Some(row) = connection::lock_in_workspace(&txn, on.workspace_id, on.connection_id).await?
    else {
        return Ok(Outcome::Ignored);
    };
    // Admitted for this very state: a transition in between makes the delivery try again.
    if row.version != admitted_version {
        return Err(WebhookError::Store(DbErr::Custom(
            "the connection changed while the delivery was admitted".into(),
        )));
    }
    let before = row.status;
    // A vendor's unsuspend lifts the vendor's suspension, never an operator's pause.
    let outcome = if transition == Transition::Resume && before != ConnectionStatus::Suspended {
        None
    } else {
        let audit = format!("github_installation_{action}");
        match lifecycle::apply(&txn, row, transition, "github", &audit).await? {
            Ok(row) => Some(row.status),
            Err(illegal) => {
                tracing::info!(connection_id = %on.connection_id, %illegal, "installation event changes no state");
                None
            }
        }
    };
    txn.commit().await?;
    record_activity(
        &mut *pool.acquire().await?,
        on.connection_id,
        on.workspace_id,
        &format!("github_installation_{action}"),
        serde_json::json!({
            "installation_id": installation_id,
            "before": lifecycle::status_name(before),
            "after": outcome.map(lifecycle::status_name),
        }),
    )
    .await?;
    tracing::info!(connection_id = %on.connection_id, workspace_id = %on.workspace_id, installation_id, action, changed = outcome.is_some(), "GitHub App installation event applied to the connection");
    Ok(Outcome::of_change(outcome.is_some()))
}

/// Handles an `installation_target` delivery: a renamed account re-keys the delivering
/// connection's repositories of that account (mirrored rows and monitors, by native id), so the
/// consumer filters follow the new owner name.
pub async fn installation_target(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: InstallationTargetEvent,
) -> Result<Outcome, WebhookError> {
    let (Some(from), "renamed") = (event.changes.login.as_ref(), event.action.as_str()) else {
        return Ok(Outcome::Ignored);
    };
    let (from, to) = (from.from.as_str(), event.account.login.as_str());
    // Admission first: nothing is read with the connection's credentials for a delivery it does
    // not cover (the writing transaction admits again).
    let mut txn = pool.begin().await?;
    admitted(&mut txn, hook, event.installation.id).await?;
    txn.rollback().await?;
    // A rename is a claim until GitHub confirms it: the installation's repositories, read with
    // the connection's own credentials outside any transaction, must be the new login's. Only
    // repositories GitHub lists under it are re-keyed.
    let Some(reader) = readers.active(hook.connection_id).await? else {
        return Err(WebhookError::Unavailable(
            "the rename cannot be confirmed with GitHub now".into(),
        ));
    };
    let reach = reader
        .repositories()
        .await
        .map_err(|e| WebhookError::Unavailable(format!("confirming the rename: {e}")))?;
    let confirmed: std::collections::BTreeSet<i64> = reach
        .repositories
        .iter()
        .filter(|r| r.owner.eq_ignore_ascii_case(to))
        .filter_map(|r| r.native_id)
        .collect();
    let mut txn = pool.begin().await?;
    let on = admitted(&mut txn, hook, event.installation.id).await?;
    // Only what this connection monitors by native id: the account's repositories it verified.
    let repositories: Vec<(i64, String)> = sqlx::query_as(
        "SELECT DISTINCT m.native_id, coalesce(r.name, m.name)
           FROM repository_to_monitor m
           LEFT JOIN repository r ON r.provider_instance_id = $2 AND r.native_id = m.native_id
          WHERE m.connection_id = $1 AND m.native_id IS NOT NULL
            AND (lower(m.owner) = lower($3) OR lower(r.owner) = lower($3))
          ORDER BY 1",
    )
    .bind(on.connection_id)
    .bind(hook.provider_instance_id)
    .bind(from)
    .fetch_all(&mut *txn)
    .await?;
    let (mut moved, mut merged, mut blocked, mut unconfirmed) = (0, 0, 0, 0);
    for (native_id, name) in &repositories {
        if !confirmed.contains(native_id) {
            unconfirmed += 1;
            continue;
        }
        let done = monitors::rekey(
            &mut txn,
            on.connection_id,
            hook.provider_instance_id,
            *native_id,
            to,
            name,
            &[(from, name.as_str())],
        )
        .await?;
        (moved, merged, blocked) = (
            moved + done.moved,
            merged + done.merged,
            blocked + done.blocked,
        );
    }
    record_activity(
        &mut txn,
        on.connection_id,
        on.workspace_id,
        "github_installation_target_renamed",
        serde_json::json!({
            "installation_id": event.installation.id,
            "from": from, "to": to,
            "repositories": repositories.len(),
            "monitors_moved": moved, "monitors_merged": merged, "monitors_blocked": blocked,
            "unconfirmed": unconfirmed,
        }),
    )
    .await?;
    txn.commit().await?;
    tracing::info!(connection_id = %on.connection_id, from, to, repositories = repositories.len(), moved, unconfirmed, "installation account renamed; the repositories GitHub lists under the new login re-keyed");
    Ok(Outcome::Applied)
}

/// Handles an `installation_repositories` delivery.
pub async fn installation_repositories(
    pool: &PgPool,
    readers: &Readers,
    hook: &Webhook<'_>,
    event: InstallationRepositoriesEvent,
) -> Result<Outcome, WebhookError> {
    let action = event.action.as_str();
    if !matches!(action, "added" | "removed") {
        return Ok(Outcome::Ignored);
    }
    admitted(&mut *pool.acquire().await?, hook, event.installation.id).await?;
    let (added, unconfirmed) =
        reached(readers, hook, &repo_refs(&event.repositories_added)).await?;
    let removed = repo_refs(&event.repositories_removed);
    let mut txn = pool.begin().await?;
    // Still admitted now (the connection is held until commit).
    let on = admitted(&mut txn, hook, event.installation.id).await?;
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
        on.connection_id,
        on.workspace_id,
        &format!("github_installation_repositories_{action}"),
        serde_json::json!({
            "installation_id": event.installation.id,
            "added": added.iter().map(|r| format!("{}/{}", r.owner, r.name)).collect::<Vec<_>>(),
            "removed": removed.iter().map(|r| format!("{}/{}", r.owner, r.name)).collect::<Vec<_>>(),
            "monitors_created": created, "monitors_removed": dropped,
            "unconfirmed": unconfirmed,
        }),
    )
    .await?;
    tracing::info!(connection_id = %on.connection_id, workspace_id = %on.workspace_id, installation_id = event.installation.id, created, removed = dropped, "installation repositories changed; monitors follow");
    let changed = created + dropped;
    txn.commit().await?;
    Ok(if changed > 0 {
        Outcome::Applied
    } else {
        Outcome::Unchanged
    })
}
