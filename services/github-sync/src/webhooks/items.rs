//! `issues` and `pull_request` webhooks: the item row moves forward only (compared with the row
//! locked, in the same transaction as the sync's writes), and each lifecycle change records its
//! item event under its source key, so duplicates, late copies and the sync add nothing twice.

use lifecycle_core::forward::{Freshness, Push};
use lifecycle_core::source_key::{LifecycleChange, state_change_publishes as publishes};
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{self, Counts, ItemClass, ItemNode, ItemStep, StoredItem};
use serde::Deserialize;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use super::payload::{self, Repository};
use super::{Outcome, Webhook, WebhookError, misfiled, monitored_repository, reviewers};
use crate::mirror::VENDOR;

#[derive(Debug, Deserialize)]
pub struct IssuesEvent {
    action: String,
    repository: Repository,
    issue: payload::Issue,
}

impl IssuesEvent {
    /// The repository, class and number this delivery names (a hint's item).
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        (&self.repository, ItemClass::Issue, self.issue.item.number)
    }
}

#[derive(Debug, Deserialize)]
pub struct PullRequestEvent {
    action: String,
    repository: Repository,
    pull_request: payload::PullRequest,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    after: Option<String>,
}

impl PullRequestEvent {
    /// The repository, class and number this delivery names (a hint's item).
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        (
            &self.repository,
            ItemClass::PullRequest,
            self.pull_request.item.number,
        )
    }
}

/// Handles an `issues` delivery.
pub async fn issues(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: IssuesEvent,
) -> Result<Outcome, WebhookError> {
    let node = event.issue.node();
    let f = &node.fields;
    let mut txn = pool.begin().await?;
    let repository_id = monitored_repository(&mut txn, hook, &event.repository).await?;
    let counts = Counts::reported(f.comment_count);
    let (step, prior) = match write_item(&mut txn, hook, repository_id, &node, counts, None).await?
    {
        Ok(written) => written,
        Err(skipped) => return Ok(skipped),
    };
    let freshness = step.freshness;
    let stored_state = match (freshness, &prior) {
        (Freshness::Stale, Some(prior)) => &prior.state,
        _ => &f.state,
    };
    let change = match event.action.as_str() {
        "opened" => Some(LifecycleChange::Opened {
            created_at: f.created_at,
        }),
        "closed" => f
            .closed_at
            .filter(|_| publishes(freshness, stored_state, &f.state))
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        "reopened" => publishes(freshness, stored_state, &f.state)
            .then_some(LifecycleChange::Reopen { at: f.updated_at }),
        _ => None,
    };
    let item = Item::issue(VENDOR, step.id, repository_id);
    finish(txn, &item, change, f.updated_at, freshness).await
}

/// Handles a `pull_request` delivery.
pub async fn pull_request(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: PullRequestEvent,
) -> Result<Outcome, WebhookError> {
    let node = event.pull_request.node();
    let f = &node.fields;
    let mut txn = pool.begin().await?;
    let repository_id = monitored_repository(&mut txn, hook, &event.repository).await?;
    let push = match (event.action.as_str(), &event.before, &event.after) {
        ("synchronize", Some(before), Some(after)) => Some(Push {
            before: before.clone(),
            after: after.clone(),
            at: f.updated_at,
        }),
        _ => None,
    };
    let counts = Counts::reported(f.comment_count);
    let written = write_item(&mut txn, hook, repository_id, &node, counts, push.as_ref());
    let (step, prior) = match written.await? {
        Ok(written) => written,
        Err(skipped) => return Ok(skipped),
    };
    let freshness = step.freshness;
    let (stored_state, stored_draft) = match (freshness, &prior) {
        (Freshness::Stale, Some(prior)) => (&prior.state, prior.draft),
        _ => (
            &f.state,
            node.draft.or(prior.as_ref().and_then(|p| p.draft)),
        ),
    };
    // Reviewer lists are dated by receipt, not by updated_at: applied even from a stale payload.
    reviewers::apply_payload(&mut txn, step.id, hook.received_at, &event.pull_request).await?;
    let at = f.updated_at;
    let change = match event.action.as_str() {
        "opened" => Some(LifecycleChange::Opened {
            created_at: f.created_at,
        }),
        // A push is the move from one head to the next, recorded even when it cannot move the
        // stored head (an older push keeps its own event).
        "synchronize" => push.as_ref().map(|p| LifecycleChange::Push {
            before: &p.before,
            after: &p.after,
        }),
        "ready_for_review" => publishes(freshness, &stored_draft, &Some(false))
            .then_some(LifecycleChange::Ready { at }),
        "converted_to_draft" => publishes(freshness, &stored_draft, &Some(true))
            .then_some(LifecycleChange::Draft { at }),
        "reopened" => {
            publishes(freshness, stored_state, &f.state).then_some(LifecycleChange::Reopen { at })
        }
        // A merge is final: it records whenever it is reported (the key absorbs repeats).
        "closed" if f.state == "merged" => node
            .merged_at
            .map(|merged_at| LifecycleChange::Merge { merged_at }),
        "closed" => f
            .closed_at
            .filter(|_| publishes(freshness, stored_state, &f.state))
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        _ => None,
    };
    let item = Item::pull_request(VENDOR, step.id, repository_id);
    finish(txn, &item, change, at, freshness).await
}

/// The forward-only step for an item delivery, after misfiled work is refiled: `Err` carries
/// the outcome of a delivery whose work stays with its holding repository.
async fn write_item<N: ItemNode>(
    txn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    repository_id: Uuid,
    node: &N,
    counts: Counts,
    push: Option<&Push>,
) -> Result<Result<(ItemStep, Option<StoredItem>), Outcome>, WebhookError> {
    let key = node.key();
    let misfiled = misfiled::refile_admitted(
        txn,
        N::CLASS,
        hook,
        repository_id,
        key.native_id,
        key.number,
    );
    if let Some(skipped) = misfiled.await? {
        return Ok(Err(skipped));
    }
    let written = items::lock_compare_write(txn, repository_id, node, counts, push).await?;
    Ok(Ok(written))
}

/// Records the delivery's change of `item`, if any, and commits.
async fn finish(
    mut txn: sqlx::Transaction<'_, sqlx::Postgres>,
    item: &Item,
    change: Option<LifecycleChange<'_>>,
    version: OffsetDateTime,
    freshness: Freshness,
) -> Result<Outcome, WebhookError> {
    let recorded = match change {
        Some(change) => events::record(&mut txn, item, &change, version, Origin::Webhook).await?,
        None => false,
    };
    txn.commit().await?;
    Ok(Outcome::of_change(
        freshness == Freshness::Apply || recorded,
    ))
}
