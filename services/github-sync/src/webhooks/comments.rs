//! `issue_comment` webhooks: conversation comments of issues and pull requests, mirrored in
//! `comment`. A comment only moves forward by its `updated_at` (compared with its row locked, in
//! the transaction that holds its parent locked); each edit records one `comment_edited` item
//! event on the parent under the edit's source key, and a deletion leaves a tombstone that no
//! late copy of the comment can bring back.

use lifecycle_core::forward::{Freshness, by_updated_at};
use lifecycle_core::source_key::LifecycleChange;
use serde::Deserialize;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use super::payload::{self, Repository};
use super::{Outcome, Webhook, WebhookError, misfiled, monitored_repository, parse};
use crate::events::{self, Item, ItemKind, Origin};
use crate::mirror::{self, ItemClass};

#[derive(Debug, Deserialize)]
struct IssueCommentEvent {
    action: String,
    repository: Repository,
    issue: payload::Issue,
    comment: payload::Comment,
}

/// What a comment delivery asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommentAction {
    Created,
    Edited,
    Deleted,
}

impl CommentAction {
    pub(super) fn parse(action: &str) -> Option<Self> {
        match action {
            "created" => Some(CommentAction::Created),
            "edited" => Some(CommentAction::Edited),
            "deleted" => Some(CommentAction::Deleted),
            _ => None,
        }
    }
}

/// A comment row as its writer found it, locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoredComment {
    Missing,
    Live { updated_at: OffsetDateTime },
    Deleted,
}

impl StoredComment {
    pub(super) fn from_row(row: Option<(OffsetDateTime, Option<OffsetDateTime>)>) -> Self {
        match row {
            None => StoredComment::Missing,
            Some((_, Some(_))) => StoredComment::Deleted,
            Some((updated_at, None)) => StoredComment::Live { updated_at },
        }
    }

    /// Whether a created or edited payload dated `updated_at` is written.
    pub(super) fn freshness(self, updated_at: OffsetDateTime) -> Freshness {
        match self {
            // A deleted GitHub comment never comes back: a late copy of it changes nothing.
            StoredComment::Deleted => Freshness::Stale,
            // Forward-only: an older payload changes nothing.
            StoredComment::Live { updated_at: stored } => by_updated_at(Some(stored), updated_at),
            StoredComment::Missing => Freshness::Apply,
        }
    }
}

/// Records an edit of a comment of `item`: its `updated_at` and text are its identity, so each
/// edit records once whatever order its copies arrive in, a late older edit included. Nothing
/// is recorded for a deleted comment.
pub(super) async fn record_edit(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    stored: StoredComment,
    comment_id: i64,
    updated_at: OffsetDateTime,
    text: &str,
    version: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    if stored == StoredComment::Deleted {
        return Ok(false);
    }
    let comment = comment_id.to_string();
    let change = LifecycleChange::CommentEdit {
        comment: &comment,
        updated_at,
        text,
    };
    events::record(txn, item, &change, version, Origin::Webhook).await
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
        let row: Option<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM pull_request WHERE repository_id = $1 AND number = $2
              ORDER BY deleted_at NULLS FIRST, native_id LIMIT 1 FOR UPDATE",
        )
        .bind(repository_id)
        .bind(issue.number)
        .fetch_optional(&mut *txn)
        .await?;
        return Ok(row.map(|(id,)| Item::pull_request(id, repository_id)));
    }
    let node = issue.node();
    let stored =
        mirror::lock_items(txn, ItemClass::Issue, repository_id, &[node.native_id]).await?;
    let id = match stored.get(&node.native_id) {
        Some(prior) => prior.id,
        None => {
            let comments = mirror::reported_count(node.comment_count);
            mirror::write_issue(txn, repository_id, &node, comments, None).await?
        }
    };
    Ok(Some(Item::issue(id, repository_id)))
}

/// Handles an `issue_comment` delivery.
pub async fn issue_comment(pool: &PgPool, hook: &Webhook<'_>) -> Result<Outcome, WebhookError> {
    let event: IssueCommentEvent = parse(hook)?;
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
            event.issue.id,
            event.issue.number,
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
            number = event.issue.number,
            comment = event.comment.id,
            "a comment on a pull request that is not mirrored yet was skipped; the sync brings it"
        );
        return Ok(Outcome::Ignored);
    };
    let c = &event.comment;
    let row: Option<(OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
        "SELECT upstream_updated_at, deleted_at FROM comment
          WHERE repository_id = $1 AND native_id = $2 FOR UPDATE",
    )
    .bind(repository_id)
    .bind(c.id)
    .fetch_optional(&mut *txn)
    .await?;
    let stored = StoredComment::from_row(row);
    let (issue_id, pull_request_id) = match item.kind {
        ItemKind::Issue => (Some(item.id), None),
        ItemKind::PullRequest => (None, Some(item.id)),
    };
    let wrote = match action {
        CommentAction::Deleted => {
            tombstone(
                &mut txn,
                repository_id,
                (issue_id, pull_request_id),
                c,
                hook,
            )
            .await?
        }
        CommentAction::Created | CommentAction::Edited => {
            let fresh = stored.freshness(c.updated_at) == Freshness::Apply;
            if fresh {
                write(&mut txn, repository_id, (issue_id, pull_request_id), c).await?;
            }
            fresh
        }
    };
    let recorded = match action {
        CommentAction::Edited => {
            let text = c.body.as_deref().unwrap_or_default();
            let version = event.issue.updated_at;
            record_edit(&mut txn, &item, stored, c.id, c.updated_at, text, version).await?
        }
        CommentAction::Created | CommentAction::Deleted => false,
    };
    txn.commit().await?;
    Ok(if wrote || recorded {
        Outcome::Applied
    } else {
        Outcome::Unchanged
    })
}

/// Writes a comment over its locked row (the caller checked freshness). Every writer of a
/// comment holds its parent's row first, so no other writer inserts it between the two.
async fn write(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    (issue_id, pull_request_id): (Option<Uuid>, Option<Uuid>),
    c: &payload::Comment,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO comment (id, repository_id, issue_id, pull_request_id, native_id, node_id,
                              author, body, upstream_created_at, upstream_updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (repository_id, native_id) DO UPDATE SET
            node_id = EXCLUDED.node_id, author = EXCLUDED.author, body = EXCLUDED.body,
            upstream_created_at = EXCLUDED.upstream_created_at,
            upstream_updated_at = EXCLUDED.upstream_updated_at, mirrored_at = now()",
    )
    .bind(Uuid::now_v7())
    .bind(repository_id)
    .bind(issue_id)
    .bind(pull_request_id)
    .bind(c.id)
    .bind(&c.node_id)
    .bind(c.user.as_ref().map(|u| &u.login))
    .bind(&c.body)
    .bind(c.created_at)
    .bind(c.updated_at)
    .execute(&mut *txn)
    .await?;
    Ok(())
}

/// Tombstones a deleted comment (content cleared, dated by when we received the deletion),
/// creating the tombstone when the comment was never mirrored, so a late copy of its creation
/// finds it deleted. Returns whether it was live before.
async fn tombstone(
    txn: &mut sqlx::PgConnection,
    repository_id: Uuid,
    (issue_id, pull_request_id): (Option<Uuid>, Option<Uuid>),
    c: &payload::Comment,
    hook: &Webhook<'_>,
) -> Result<bool, sqlx::Error> {
    let newly: Option<(bool,)> = sqlx::query_as(
        "INSERT INTO comment (id, repository_id, issue_id, pull_request_id, native_id, node_id,
                              author, body, upstream_created_at, upstream_updated_at, deleted_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, $10)
         ON CONFLICT (repository_id, native_id) DO UPDATE SET
            body = NULL, deleted_at = EXCLUDED.deleted_at, mirrored_at = now()
          WHERE comment.deleted_at IS NULL
         RETURNING true",
    )
    .bind(Uuid::now_v7())
    .bind(repository_id)
    .bind(issue_id)
    .bind(pull_request_id)
    .bind(c.id)
    .bind(&c.node_id)
    .bind(c.user.as_ref().map(|u| &u.login))
    .bind(c.created_at)
    .bind(c.updated_at)
    .bind(super::micros(hook.received_at))
    .fetch_optional(&mut *txn)
    .await?;
    Ok(newly.is_some())
}
