//! `issue_comment` webhooks: conversation comments of issues and pull requests, written through
//! `scm_mirror::comments` (forward-only, tombstoned on deletion, one `comment_edited` item event
//! per edit). What stays here is GitHub's: finding the parent from the payload's issue object.

use scm_mirror::comments::{self, Comment, CommentAction};
use scm_mirror::events::Item;
use scm_mirror::items::{self, Counts, ItemClass};
use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::payload::{self, Repository};
use super::{Outcome, Webhook, WebhookError, misfiled, monitored_repository};
use crate::mirror::VENDOR;

#[derive(Debug, Deserialize)]
pub struct IssueCommentEvent {
    action: String,
    repository: Repository,
    issue: payload::Issue,
    comment: payload::Comment,
}

impl IssueCommentEvent {
    /// The repository, class and number this delivery names (a hint's item): the comment's
    /// issue, or the pull request whose conversation it is.
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        let class = if self.issue.pull_request.is_some() {
            ItemClass::PullRequest
        } else {
            ItemClass::Issue
        };
        (&self.repository, class, self.issue.item.number)
    }
}

/// The item the comment belongs to, locked; an issue not mirrored yet is created from the
/// payload (a stub the issues handler and the sync move forward later).
async fn parent(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    issue: &payload::Issue,
) -> Result<Option<Item>, sqlx::Error> {
    if issue.pull_request.is_some() {
        // A pull request's issue object carries the issue's id, not the pull request's, so the
        // number finds the row; without the pull request's id no stub can be made.
        let row: Option<Uuid> = sqlx::query_scalar(
            "SELECT id FROM pull_request WHERE repository_id = $1 AND number = $2
              ORDER BY deleted_at NULLS FIRST, native_id LIMIT 1 FOR UPDATE",
        )
        .bind(repository_id)
        .bind(issue.item.number)
        .fetch_optional(&mut *txn)
        .await?;
        return Ok(row.map(|id| Item::pull_request(VENDOR, id, repository_id)));
    }
    let node = issue.node();
    let counts = Counts::reported(node.fields.comment_count);
    let id = items::lock_or_stub(txn, repository_id, &node, counts).await?;
    Ok(Some(Item::issue(VENDOR, id, repository_id)))
}

/// Handles an `issue_comment` delivery.
pub async fn issue_comment(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: IssueCommentEvent,
) -> Result<Outcome, WebhookError> {
    let Some(action) = CommentAction::parse(&event.action) else {
        return Ok(Outcome::Ignored);
    };
    let mut txn = pool.begin().await?;
    let repository_id = monitored_repository(&mut txn, hook, &event.repository).await?;
    // Misfiled work moves to the repository GitHub reports before a comment may stub it; a
    // comment on work that stays where it is (skipped) is dropped, as a stub would collide.
    if event.issue.pull_request.is_none() {
        let misfiled = misfiled::refile_admitted(
            &mut txn,
            ItemClass::Issue,
            hook,
            repository_id,
            event.issue.item.id,
            event.issue.item.number,
        );
        if let Some(skipped) = misfiled.await? {
            return Ok(skipped);
        }
    }
    let Some(item) = parent(&mut txn, repository_id, &event.issue).await? else {
        metrics::counter!("github_webhook_skipped_total", "event" => "issue_comment", "reason" => "pullRequestNotMirrored")
            .increment(1);
        tracing::warn!(
            %repository_id,
            number = event.issue.item.number,
            comment = event.comment.id,
            "a comment on a pull request that is not mirrored yet was skipped; the sync brings it"
        );
        return Ok(Outcome::Ignored);
    };
    let comment = Comment {
        parent: item,
        fields: event.comment.fields(),
    };
    let version = event.issue.item.updated_at;
    let deleted_at = super::micros(hook.received_at);
    let changed = comments::apply(&mut txn, &item, action, &comment, version, deleted_at).await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}
