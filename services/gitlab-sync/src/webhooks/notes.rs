//! Note Hooks: user and diff notes and replies of issues and merge requests (system notes are
//! not mirrored), written forward-only by the note's `updated_at`, compared with the note's row
//! locked while its parent is locked; an edit records one `comment_edited` event. GitLab sends
//! no hook when a note is deleted: the notes reconciliation removes those.
//!
//! The note becomes the row [`crate::note_rows::NoteRow`] maps it to, through the same write
//! as the notes pass's, so either path stores the same row.

use sync_engine::webhook::{Outcome, Webhook, WebhookError};

use super::GitlabWebhooks;
use super::items::lock_or_stub_parent;
use super::payload::NoteHook;
use crate::note_rows::NoteRow;

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
    let edited = n.action.as_deref() == Some("update");
    let version = issue
        .map(|i| i.updated_at.0)
        .or(merge_request.map(|m| m.updated_at.0))
        .unwrap_or(n.updated_at.0);
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let Some(parent) = lock_or_stub_parent(&mut txn, repository_id, issue, merge_request).await?
    else {
        return Ok(Outcome::Ignored);
    };
    let Some(row) = NoteRow::from_hook(parent, n, &e.user) else {
        // System notes are not mirrored.
        return Ok(Outcome::Ignored);
    };
    let changed = row.write(&mut txn, edited.then_some(version)).await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}
