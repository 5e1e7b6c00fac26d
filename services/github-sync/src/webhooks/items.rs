//! `issues` and `pull_request` webhooks: the item row moves forward only (compared with the row
//! locked, in the same transaction as the sync's writes), and each lifecycle change records its
//! item event under its source key, so duplicates, late copies and the sync add nothing twice.

use lifecycle_core::forward::{Freshness, Push, by_updated_at};
use lifecycle_core::partial::Field;
use lifecycle_core::source_key::{LifecycleChange, state_event_publishes};
use serde::Deserialize;
use sqlx::PgPool;

use super::payload::{self, Repository};
use super::{Outcome, Webhook, WebhookError, misfiled, monitored_repository, parse, reviewers};
use crate::events::{self, Item, Origin};
use crate::mirror::{self, ItemClass};

#[derive(Debug, Deserialize)]
struct IssuesEvent {
    action: String,
    repository: Repository,
    issue: payload::Issue,
}

#[derive(Debug, Deserialize)]
struct PullRequestEvent {
    action: String,
    repository: Repository,
    pull_request: payload::PullRequest,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    after: Option<String>,
}

/// Whether a state change's item event publishes: the stored state is the payload's, or the
/// payload is older than the stored row (a first delivery after a later change still records
/// its event; a redelivery is absorbed by the source key).
fn publishes<S: PartialEq>(freshness: Freshness, stored: &S, payload: &S) -> bool {
    freshness == Freshness::Stale || state_event_publishes(stored, payload)
}

/// Handles an `issues` delivery.
pub async fn issues(pool: &PgPool, hook: &Webhook<'_>) -> Result<Outcome, WebhookError> {
    let event: IssuesEvent = parse(hook)?;
    let node = event.issue.node();
    let mut txn = pool.begin().await?;
    let repository_id = monitored_repository(&mut txn, hook, &event.repository).await?;
    let misfiled = misfiled::refile_admitted(
        &mut txn,
        ItemClass::Issue,
        hook,
        repository_id,
        node.native_id,
        node.number,
    );
    if let Some(skipped) = misfiled.await? {
        return Ok(skipped);
    }
    let stored =
        mirror::lock_items(&mut txn, ItemClass::Issue, repository_id, &[node.native_id]).await?;
    let prior = stored.get(&node.native_id);
    // Forward-only: an older payload changes nothing.
    let freshness = by_updated_at(prior.map(|p| p.updated_at), node.updated_at);
    let (id, stored_state) = match (freshness, prior) {
        (Freshness::Stale, Some(prior)) => (prior.id, prior.state.clone()),
        _ => {
            let comments = mirror::reported_count(node.comment_count);
            let id = mirror::write_issue(&mut txn, repository_id, &node, comments, prior).await?;
            (id, node.state.clone())
        }
    };
    let item = Item::issue(id, repository_id);
    let change = match event.action.as_str() {
        "opened" => Some(LifecycleChange::Opened {
            created_at: node.created_at,
        }),
        "closed" => node
            .closed_at
            .filter(|_| publishes(freshness, &stored_state, &node.state))
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        "reopened" => {
            publishes(freshness, &stored_state, &node.state).then_some(LifecycleChange::Reopen {
                at: node.updated_at,
            })
        }
        _ => None,
    };
    let recorded = match change {
        Some(change) => {
            events::record(&mut txn, &item, &change, node.updated_at, Origin::Webhook).await?
        }
        None => false,
    };
    txn.commit().await?;
    Ok(outcome(freshness, recorded))
}

/// Handles a `pull_request` delivery.
pub async fn pull_request(pool: &PgPool, hook: &Webhook<'_>) -> Result<Outcome, WebhookError> {
    let event: PullRequestEvent = parse(hook)?;
    let node = event.pull_request.node();
    let mut txn = pool.begin().await?;
    let repository_id = monitored_repository(&mut txn, hook, &event.repository).await?;
    let misfiled = misfiled::refile_admitted(
        &mut txn,
        ItemClass::PullRequest,
        hook,
        repository_id,
        node.native_id,
        node.number,
    );
    if let Some(skipped) = misfiled.await? {
        return Ok(skipped);
    }
    let stored = mirror::lock_items(
        &mut txn,
        ItemClass::PullRequest,
        repository_id,
        &[node.native_id],
    )
    .await?;
    let prior = stored.get(&node.native_id);
    let push = match (event.action.as_str(), &event.before, &event.after) {
        ("synchronize", Some(before), Some(after)) => Some(Push {
            before: before.clone(),
            after: after.clone(),
            at: node.updated_at,
        }),
        _ => None,
    };
    // Forward-only: an older payload changes nothing.
    let freshness = by_updated_at(prior.map(|p| p.updated_at), node.updated_at);
    let (id, stored_state, stored_draft) = match (freshness, prior) {
        (Freshness::Stale, Some(prior)) => (prior.id, prior.state.clone(), prior.draft),
        _ => {
            let move_head = mirror::head_moves(prior, &node, push.as_ref());
            let counts = (mirror::reported_count(node.comment_count), Field::Absent);
            let id = mirror::write_pull_request(
                &mut txn,
                repository_id,
                &node,
                counts,
                prior,
                move_head,
            )
            .await?;
            let draft = node.draft.or(prior.and_then(|p| p.draft));
            (id, node.state.clone(), draft)
        }
    };
    // Reviewer lists are dated by receipt, not by updated_at: applied even from a stale payload.
    reviewers::apply_payload(&mut txn, id, hook.received_at, &event.pull_request).await?;
    let item = Item::pull_request(id, repository_id);
    let at = node.updated_at;
    let change = match event.action.as_str() {
        "opened" => Some(LifecycleChange::Opened {
            created_at: node.created_at,
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
        "reopened" => publishes(freshness, &stored_state, &node.state)
            .then_some(LifecycleChange::Reopen { at }),
        // A merge is final: it records whenever it is reported (the key absorbs repeats).
        "closed" if node.state == "merged" => node
            .merged_at
            .map(|merged_at| LifecycleChange::Merge { merged_at }),
        "closed" => node
            .closed_at
            .filter(|_| publishes(freshness, &stored_state, &node.state))
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        _ => None,
    };
    let recorded = match change {
        Some(change) => events::record(&mut txn, &item, &change, at, Origin::Webhook).await?,
        None => false,
    };
    txn.commit().await?;
    Ok(outcome(freshness, recorded))
}

fn outcome(freshness: Freshness, recorded: bool) -> Outcome {
    if freshness == Freshness::Apply || recorded {
        Outcome::Applied
    } else {
        Outcome::Unchanged
    }
}
