//! Approval acts of Merge Request Hooks (`approved`/`approval`, `unapproved`/`unapproval`): the
//! merge request's row moves forward as any Merge Request Hook moves it, then the act goes through
//! `lifecycle_core`'s review rules over the stored approvals, in the transaction that admitted
//! the delivery for the project. An accepted act leaves the review decision unknown until
//! GitLab's readiness is read; an accepted unapproval that withdraws a standing approval records
//! `scm.pull_request.review_dismissed` under that approval.

use lifecycle_core::gitlab::review::{ActKind, ApprovalAct, ReviewOutcome};
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::gitlab::approvals::StoredApprovals;
use scm_mirror::items::{self, Counts, ItemClass};
use sync_engine::webhook::{Outcome, Webhook, WebhookError};

use super::GitlabWebhooks;
use super::items::merge_request_node;
use super::payload::MergeRequestHook;
use crate::mirror::VENDOR;

/// The approval act a Merge Request Hook's action names, if any.
pub fn act_kind(action: Option<&str>) -> Option<ActKind> {
    match action? {
        "approved" | "approval" => Some(ActKind::Approve),
        "unapproved" | "unapproval" => Some(ActKind::Unapprove),
        _ => None,
    }
}

/// Applies the approval act of a Merge Request Hook.
pub async fn act(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    kind: ActKind,
    e: MergeRequestHook,
) -> Result<Outcome, WebhookError> {
    let a = &e.object_attributes;
    // GitLab resetting approvals after a push names the pusher, not whose approvals went.
    let kind = match a.system_action.as_deref() {
        Some("approvals_reset_on_push" | "code_owner_approvals_reset_on_push") => {
            ActKind::ResetOnPush
        }
        _ => kind,
    };
    // A payload missing what the act needs is invalid, never dropped.
    let user = e
        .user
        .as_ref()
        .map(|u| u.username.clone())
        .ok_or_else(|| WebhookError::Invalid("approval hook without `user`".into()))?;
    let head = a
        .last_commit
        .as_ref()
        .map(|c| c.id.clone())
        .ok_or_else(|| {
            WebhookError::Invalid("approval hook without `object_attributes.last_commit`".into())
        })?;
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let mut stored =
        items::lock_items(&mut txn, ItemClass::PullRequest, repository_id, &[a.id]).await?;
    let prior = stored.remove(&a.id);
    let Some(node) = merge_request_node(a, None, prior.as_ref()) else {
        tracing::warn!(
            state = a.state,
            "an approval hook with an unknown state; ignored"
        );
        return Ok(Outcome::Ignored);
    };
    let step = items::compare_write(
        &mut txn,
        repository_id,
        &node,
        Counts::reported(None),
        prior.as_ref(),
        None,
    )
    .await?;
    // The facts after the row's forward-only step: a newer act is about the head it names.
    let stored = StoredApprovals::lock(&mut txn, step.id)
        .await?
        .ok_or_else(|| WebhookError::Invalid("the merge request's row is missing".into()))?;
    let act = ApprovalAct {
        user,
        kind,
        version: a.updated_at.0,
        head,
        received_at: hook.received_at,
    };
    let mut facts = stored.facts.clone();
    // Version, head and dated-snapshot gates: a redelivered or older act changes nothing.
    let changed = match facts.apply_act(&act) {
        ReviewOutcome::Rejected(rejection) => {
            tracing::debug!(?rejection, "an approval act changed nothing");
            false
        }
        ReviewOutcome::Accepted { changed } => changed,
    };
    let mut recorded = false;
    if changed {
        stored.write(&mut txn, step.id, &facts, act.version).await?;
        if kind == ActKind::Approve {
            // An approval ends its author's earlier request for changes.
            scm_mirror::gitlab::requested_changes::approved(
                &mut txn,
                step.id,
                &act.user,
                act.version,
            )
            .await?;
        }
        // An accepted unapproval is keyed by the approval it withdraws.
        if let (ActKind::Unapprove, Some(approved_at)) =
            (kind, stored.approved_at.get(&act.user).copied())
        {
            let review = format!("approval:{}", act.user);
            let change = LifecycleChange::Dismissal {
                review: &review,
                review_updated_at: approved_at,
            };
            let item = Item::pull_request(VENDOR, step.id, repository_id);
            recorded =
                events::record(&mut txn, &item, &change, act.version, Origin::Webhook).await?;
        }
    }
    txn.commit().await?;
    Ok(Outcome::of_change(
        changed || recorded || step.freshness == lifecycle_core::forward::Freshness::Apply,
    ))
}
