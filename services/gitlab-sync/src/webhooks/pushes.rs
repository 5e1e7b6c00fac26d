//! Push Hooks: a push to a branch is a push to every open merge request of the project whose
//! source branch it names, recorded as `scm.pull_request.synchronized` under the source key the
//! merge request's own update hook and the sync derive (the move from one head to the next), in
//! the transaction that admitted the delivery, with those merge requests' rows locked.
//!
//! A Push Hook carries no date GitLab gives the push, so it cannot order itself against the
//! stored head (a force-push back makes an old push continue from the head again): it records
//! the push and moves no head. The merge request's update hook (dated by its `updated_at`) and
//! the sync move the head. A push away from the stored head still leaves readiness unknown
//! (`ReviewFacts::push`): unknown is never wrong, and a redelivery of the push that set the
//! stored head leaves a decision read since in place.

use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use super::GitlabWebhooks;
use super::payload::PushHook;
use crate::mirror::VENDOR;

/// Git's name for "no commit": the `before` of a created branch, the `after` of a deleted one.
fn is_null_sha(sha: &str) -> bool {
    !sha.is_empty() && sha.bytes().all(|b| b == b'0')
}

/// A field the push's writer needs; a payload without it is invalid, never dropped.
fn required<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, WebhookError> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| WebhookError::Invalid(format!("push hook without `{field}`")))
}

/// Handles a Push Hook.
pub async fn push(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: PushHook,
) -> Result<Outcome, WebhookError> {
    let git_ref = required(&e.git_ref, "ref")?;
    let before = required(&e.before, "before")?;
    let after = required(&e.after, "after")?;
    // A tag is no merge request's source branch.
    let Some(branch) = git_ref.strip_prefix("refs/heads/") else {
        return Ok(Outcome::Ignored);
    };
    // A created or deleted branch moves no merge request's head from one commit to another.
    if is_null_sha(before) || is_null_sha(after) || before == after {
        return Ok(Outcome::Ignored);
    }
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let open: Vec<(Uuid, OffsetDateTime, Option<String>)> = sqlx::query_as(
        "SELECT id, upstream_updated_at, head_sha FROM pull_request
          WHERE repository_id = $1 AND head_ref = $2 AND state = 'open' AND deleted_at IS NULL
          ORDER BY id FOR UPDATE",
    )
    .bind(repository_id)
    .bind(branch)
    .fetch_all(&mut *txn)
    .await?;
    let change = LifecycleChange::Push { before, after };
    let mut changed = false;
    for (id, version, head) in open {
        let item = Item::pull_request(VENDOR, id, repository_id);
        // One push, one event: the update hook and the sync derive the same key.
        changed |= events::record(&mut txn, &item, &change, version, Origin::Webhook).await?;
        if head.as_deref() == Some(before) {
            changed |= scm_mirror::gitlab::pushes::head_moved(&mut txn, id).await?;
        }
    }
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_or_deleted_branch_names_no_commit() {
        assert!(is_null_sha("0000000000000000000000000000000000000000"));
        assert!(!is_null_sha("0000000000000000000000000000000000000001"));
        assert!(!is_null_sha(""));
    }
}
