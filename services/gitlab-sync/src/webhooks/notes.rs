//! Note Hooks: user, system and diff notes and replies of issues and merge requests, written
//! through `scm_mirror::comments` (forward-only by the note's `updated_at`, compared with the
//! note's row locked while its parent is locked; an edit records one `comment_edited` event).
//! GitLab sends no hook when a note is deleted: the notes reconciliation removes those.
//!
//! Where a note goes ([`NoteRow`], the one mapping of a GitLab note onto the mirror): a diff
//! note of a merge request is a review comment in the review thread of its discussion (a reply
//! refers to the thread's first comment); every other note (plain, system, a discussion's
//! reply) is a conversation comment of its issue or merge request.

use scm_mirror::comments::{self, Comment, CommentAction, CommentFields, ReviewComment};
use scm_mirror::events::{Item, ItemKind};
use scm_mirror::reviews::Thread;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;

use super::GitlabWebhooks;
use super::items::lock_or_stub_parent;
use super::payload::NoteHook;

/// A diff note's place in its merge request's diff.
#[derive(Debug, Clone, Copy)]
pub struct DiffPlace<'a> {
    /// The discussion it belongs to: the review thread's node id.
    pub discussion_id: &'a str,
    pub path: Option<&'a str>,
    pub line: Option<i32>,
    /// The head it was written on.
    pub commit_sha: Option<&'a str>,
}

/// A GitLab note as the mirror stores it.
#[derive(Debug, Clone, Copy)]
pub struct NoteRow<'a> {
    /// The issue or merge request it is on, locked by the caller.
    pub parent: Item,
    pub fields: CommentFields<'a>,
    /// Set for a diff note of a merge request.
    pub diff: Option<DiffPlace<'a>>,
}

/// A note's node id (GitLab's global id of a note).
pub fn note_node_id(id: i64) -> String {
    format!("gid://gitlab/Note/{id}")
}

impl NoteRow<'_> {
    /// Applies the note (created or edited) to its table; whether anything changed. `version`
    /// is the parent's `updated_at` the event is recorded at.
    pub async fn apply(
        &self,
        txn: &mut sqlx::PgConnection,
        action: CommentAction,
        version: OffsetDateTime,
        deleted_at: OffsetDateTime,
    ) -> Result<bool, sqlx::Error> {
        let item = &self.parent;
        match (self.diff, item.kind, item.columns()) {
            (Some(diff), ItemKind::PullRequest, (None, Some(pull_request_id))) => {
                let thread_id = Thread::ensure(
                    &mut *txn,
                    pull_request_id,
                    diff.discussion_id,
                    diff.path,
                    self.fields.updated_at,
                )
                .await?;
                // A reply refers to the first comment of its thread, whatever order the
                // thread's hooks arrive in (the merge request's lock orders its writers).
                let key = (self.fields.created_at, self.fields.native_id);
                let first: Option<i64> = sqlx::query_scalar(
                    "SELECT native_id FROM review_comment
                      WHERE thread_id = $1 AND (upstream_created_at, native_id) < ($2, $3)
                      ORDER BY upstream_created_at, native_id LIMIT 1",
                )
                .bind(thread_id)
                .bind(key.0)
                .bind(key.1)
                .fetch_optional(&mut *txn)
                .await?;
                let row = ReviewComment {
                    pull_request_id,
                    thread_id: Some(thread_id),
                    review_native_id: None,
                    in_reply_to: first,
                    path: diff.path,
                    line: diff.line,
                    commit_sha: diff.commit_sha,
                    fields: self.fields,
                };
                let changed = comments::apply(txn, item, action, &row, version, deleted_at).await?;
                if first.is_none() {
                    // The thread's first comment arrived after replies: they refer to it.
                    sqlx::query(
                        "UPDATE review_comment SET in_reply_to = $3
                          WHERE thread_id = $1 AND (upstream_created_at, native_id) > ($2, $3)",
                    )
                    .bind(thread_id)
                    .bind(key.0)
                    .bind(key.1)
                    .execute(&mut *txn)
                    .await?;
                }
                Ok(changed)
            }
            _ => {
                let row = Comment {
                    parent: *item,
                    fields: self.fields,
                };
                comments::apply(txn, item, action, &row, version, deleted_at).await
            }
        }
    }
}

/// Handles a Note Hook.
pub async fn note(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: NoteHook,
) -> Result<Outcome, WebhookError> {
    let n = &e.object_attributes;
    let (issue, merge_request) = match n.noteable_type.as_str() {
        "Issue" => (
            Some(e.issue.as_ref().ok_or_else(|| {
                WebhookError::Invalid("an issue's Note Hook without its issue".into())
            })?),
            None,
        ),
        "MergeRequest" => (
            None,
            Some(e.merge_request.as_ref().ok_or_else(|| {
                WebhookError::Invalid(
                    "a merge request's Note Hook without its merge request".into(),
                )
            })?),
        ),
        // Notes of commits and snippets are not mirrored.
        _ => return Ok(Outcome::Ignored),
    };
    // Note hooks say `update` for an edit (GitLab 16.11+); older ones only create.
    let action = match n.action.as_deref() {
        Some("update") => CommentAction::Edited,
        _ => CommentAction::Created,
    };
    let version = issue
        .map(|i| i.updated_at.0)
        .or(merge_request.map(|m| m.updated_at.0))
        .unwrap_or(n.updated_at.0);
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let Some(parent) = lock_or_stub_parent(&mut txn, repository_id, issue, merge_request).await?
    else {
        return Ok(Outcome::Ignored);
    };
    let node_id = note_node_id(n.id);
    let position = n.position.as_ref();
    let diff = (n.kind.as_deref() == Some("DiffNote")).then(|| DiffPlace {
        discussion_id: n.discussion_id.as_deref().unwrap_or(&node_id),
        path: position.and_then(|p| p.new_path.as_deref().or(p.old_path.as_deref())),
        line: position.and_then(|p| p.new_line.or(p.old_line)),
        commit_sha: position.and_then(|p| p.head_sha.as_deref()),
    });
    let row = NoteRow {
        parent,
        fields: CommentFields {
            native_id: n.id,
            node_id: &node_id,
            author: Some(&e.user.username),
            body: Some(&n.note),
            created_at: n.created_at.0,
            updated_at: n.updated_at.0,
        },
        diff,
    };
    // A Note Hook never deletes: the date a deletion would carry is unused.
    let changed = row
        .apply(&mut txn, action, version, hook.received_at)
        .await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}
