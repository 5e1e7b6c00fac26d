//! Issue and Merge Request Hooks: the item row moves forward only (compared with the row
//! locked, in the transaction that admitted the delivery), and each lifecycle change the hook
//! reports records its item event under its source key, so duplicates, late copies and the
//! sync add nothing twice. A hook carries no note count, no close or merge time and no author
//! (only the actor): those stay as stored.

use lifecycle_core::forward::{Freshness, Push};
use lifecycle_core::source_key::{LifecycleChange, state_change_publishes as publishes};
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{
    self, Counts, IssueNode, ItemClass, ItemFields, PullRequestNode, StoredItem,
};
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use super::GitlabWebhooks;
use super::payload::{IssueAttributes, IssueHook, MergeRequestAttributes, MergeRequestHook};
use crate::mirror::VENDOR;

/// The mirror's state of a GitLab issue state; `None` for one this build does not know.
fn issue_state(state: &str) -> Option<&'static str> {
    match state {
        "opened" => Some("open"),
        "closed" => Some("closed"),
        _ => None,
    }
}

/// The mirror's state of a GitLab merge request state; `None` for one this build does not know.
fn merge_request_state(state: &str) -> Option<&'static str> {
    match state {
        "opened" | "locked" => Some("open"),
        "closed" => Some("closed"),
        "merged" => Some("merged"),
        _ => None,
    }
}

/// An issue as a hook reports it; `author` only when the hook's actor is known to be it.
pub fn issue_node(a: &IssueAttributes, author: Option<&str>) -> Option<IssueNode> {
    let state = issue_state(&a.state)?;
    Some(IssueNode {
        fields: ItemFields {
            native_id: a.id,
            node_id: format!("gid://gitlab/Issue/{}", a.id),
            number: a.iid,
            title: a.title.clone(),
            body: a.description.clone().unwrap_or_default(),
            state: state.to_owned(),
            author: author.map(str::to_owned),
            locked: a.discussion_locked,
            lock_reason: None,
            // Partial metadata: hooks carry no note count.
            comment_count: None,
            created_at: a.created_at.0,
            updated_at: a.updated_at.0,
            closed_at: a.closed_at.map(|t| t.0).filter(|_| state == "closed"),
        },
        state_reason: None,
    })
}

/// A merge request as a hook reports it over its stored row: a hook names no close or merge
/// time, so a closed or merged request keeps the stored ones (the sync stores GitLab's
/// close time, read over REST, and mergedAt, and records the close or merge when it does).
pub fn merge_request_node(
    a: &MergeRequestAttributes,
    author: Option<&str>,
    prior: Option<&StoredItem>,
) -> Option<PullRequestNode> {
    let state = merge_request_state(&a.state)?;
    let merged_at = prior
        .and_then(|p| p.merged_at)
        .filter(|_| state == "merged");
    // The stored close of the state the hook reports; never one of another state (a reopen
    // clears it, a merge's close is its merge).
    let closed_at = match state {
        "merged" => merged_at,
        "closed" => prior
            .filter(|p| p.state == "closed")
            .and_then(|p| p.closed_at),
        _ => None,
    };
    Some(PullRequestNode {
        fields: ItemFields {
            native_id: a.id,
            node_id: format!("gid://gitlab/MergeRequest/{}", a.id),
            number: a.iid,
            title: a.title.clone(),
            body: a.description.clone().unwrap_or_default(),
            state: state.to_owned(),
            author: author.map(str::to_owned),
            locked: None,
            lock_reason: None,
            comment_count: None,
            created_at: a.created_at.0,
            updated_at: a.updated_at.0,
            closed_at,
        },
        draft: a.draft,
        review_count: None,
        head_ref: a.source_branch.clone(),
        head_sha: a.last_commit.as_ref().map(|c| c.id.clone()),
        base_ref: a.target_branch.clone(),
        merged_at,
    })
}

/// A hook state this build does not know: nothing is stored, the sync reads it.
fn unknown_state(kind: &str, state: &str) -> Outcome {
    tracing::warn!(
        kind,
        state,
        "a GitLab hook with a state this build does not know; ignored"
    );
    Outcome::Ignored
}

/// Handles an Issue Hook.
pub async fn issue(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: IssueHook,
) -> Result<Outcome, WebhookError> {
    let a = &e.object_attributes;
    let action = a.action.as_deref().unwrap_or_default();
    // Whoever opens an issue is its author.
    let author = e
        .user
        .as_ref()
        .filter(|_| action == "open")
        .map(|u| u.username.as_str());
    let Some(node) = issue_node(a, author) else {
        return Ok(unknown_state("issue", &a.state));
    };
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let (step, prior) =
        items::lock_compare_write(&mut txn, repository_id, &node, Counts::reported(None), None)
            .await?;
    let f = &node.fields;
    let stored_state = match (step.freshness, &prior) {
        (Freshness::Stale, Some(prior)) => &prior.state,
        _ => &f.state,
    };
    let change = match action {
        "open" => Some(LifecycleChange::Opened {
            created_at: f.created_at,
        }),
        "close" => f
            .closed_at
            .filter(|_| publishes(step.freshness, stored_state, &f.state))
            .map(|closed_at| LifecycleChange::Close { closed_at }),
        "reopen" => publishes(step.freshness, stored_state, &f.state)
            .then_some(LifecycleChange::Reopen { at: f.updated_at }),
        _ => None,
    };
    let item = Item::issue(VENDOR, step.id, repository_id);
    finish(txn, &item, change, f.updated_at, step.freshness).await
}

/// Handles a Merge Request Hook.
pub async fn merge_request(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: MergeRequestHook,
) -> Result<Outcome, WebhookError> {
    let a = &e.object_attributes;
    let action = a.action.as_deref().unwrap_or_default();
    if merge_request_state(&a.state).is_none() {
        return Ok(unknown_state("merge_request", &a.state));
    }
    let author = e
        .user
        .as_ref()
        .filter(|_| action == "open")
        .map(|u| u.username.as_str());
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let mut stored =
        items::lock_items(&mut txn, ItemClass::PullRequest, repository_id, &[a.id]).await?;
    let prior = stored.remove(&a.id);
    let Some(node) = merge_request_node(a, author, prior.as_ref()) else {
        return Ok(unknown_state("merge_request", &a.state));
    };
    // A push: the move from the previous head to the one the hook names.
    let push = match (action, &a.oldrev, &node.head_sha) {
        ("update", Some(before), Some(after)) => Some(Push {
            before: before.clone(),
            after: after.clone(),
            at: a.updated_at.0,
        }),
        _ => None,
    };
    // Whether this write moves the stored head to another commit.
    let head_moves = prior.as_ref().is_some_and(|p| {
        node.head_sha.is_some()
            && p.head_sha != node.head_sha
            && items::head_moves(Some(p), &node, push.as_ref())
    });
    let step = items::compare_write(
        &mut txn,
        repository_id,
        &node,
        Counts::reported(None),
        prior.as_ref(),
        push.as_ref(),
    )
    .await?;
    if step.freshness == Freshness::Apply && head_moves {
        // A push leaves readiness unknown for the new head (`ReviewFacts::push`).
        scm_mirror::gitlab::pushes::head_moved(&mut txn, step.id).await?;
    }
    let f = &node.fields;
    let (stored_state, stored_draft) = match (step.freshness, &prior) {
        (Freshness::Stale, Some(prior)) => (&prior.state, prior.draft),
        _ => (
            &f.state,
            node.draft.or(prior.as_ref().and_then(|p| p.draft)),
        ),
    };
    let at = f.updated_at;
    let draft_change = e.changes.draft.as_ref().and_then(|c| c.current);
    let change = match action {
        "open" => Some(LifecycleChange::Opened {
            created_at: f.created_at,
        }),
        "update" => match (&push, draft_change) {
            // A push records even when it cannot move the stored head.
            (Some(p), _) => Some(LifecycleChange::Push {
                before: &p.before,
                after: &p.after,
            }),
            (None, Some(false)) => publishes(step.freshness, &stored_draft, &Some(false))
                .then_some(LifecycleChange::Ready { at }),
            (None, Some(true)) => publishes(step.freshness, &stored_draft, &Some(true))
                .then_some(LifecycleChange::Draft { at }),
            (None, None) => None,
        },
        "reopen" => publishes(step.freshness, stored_state, &f.state)
            .then_some(LifecycleChange::Reopen { at }),
        // A merge or a close hook names no time: the sync that reads the request next stores
        // GitLab's merge or close time and records the merge or close then, once.
        _ => None,
    };
    // The hook's whole reviewer list, dated by when it was received.
    let mut reviewed = false;
    if let Some(list) = &e.reviewers {
        let named = list
            .iter()
            .map(|r| {
                (
                    r.username.clone(),
                    crate::readiness::hook_review(r.state.as_deref()),
                )
            })
            .collect();
        let received_at = super::pipelines::observed_at(&mut txn, hook).await?;
        reviewed =
            crate::readiness::apply_hook_reviewers(&mut txn, step.id, at, received_at, named)
                .await?;
    }
    let item = Item::pull_request(VENDOR, step.id, repository_id);
    let outcome = finish(txn, &item, change, at, step.freshness).await?;
    Ok(if reviewed { Outcome::Applied } else { outcome })
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

/// The item a note is on, locked; stubbed from the hook's copy when it is not mirrored yet
/// (the item's own writers move the stub forward later). `None` when the hook's copy has a
/// state this build does not know.
pub async fn lock_or_stub_parent(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    issue: Option<&IssueAttributes>,
    merge_request: Option<&MergeRequestAttributes>,
) -> Result<Option<Item>, sqlx::Error> {
    let counts = Counts::reported(None);
    if let Some(a) = issue {
        let Some(node) = issue_node(a, None) else {
            return Ok(None);
        };
        let id = items::lock_or_stub(txn, repository_id, &node, counts).await?;
        return Ok(Some(Item::issue(VENDOR, id, repository_id)));
    }
    if let Some(a) = merge_request {
        let Some(node) = merge_request_node(a, None, None) else {
            return Ok(None);
        };
        let id = items::lock_or_stub(txn, repository_id, &node, counts).await?;
        return Ok(Some(Item::pull_request(VENDOR, id, repository_id)));
    }
    Ok(None)
}
