//! Note Hooks: user and diff notes and replies of issues and merge requests (system notes are
//! not mirrored), written forward-only by the note's `updated_at`, compared with the note's row
//! locked while its parent is locked; an edit records one `comment_edited` event. GitLab sends
//! no hook when a note is deleted: the notes reconciliation removes those. A merge request's
//! "requested changes" system note is the one system note read: it names who requested changes
//! (`scm_mirror::gitlab::requested_changes`).
//!
//! The note becomes the row [`crate::note_rows::NoteRow`] maps it to, through the same write
//! as the notes pass's, so either path stores the same row.

use lifecycle_core::gitlab::review::requests_changes;
use scm_mirror::events::Origin;
use scm_mirror::gitlab::requested_changes::{RequestedChanges, record};
use sync_engine::webhook::{Outcome, Webhook, WebhookError};

use super::GitlabWebhooks;
use super::items::lock_or_stub_parent;
use super::payload::NoteHook;
use super::payload::{HookUser, NoteAttributes};
use crate::note_rows::NoteRow;

/// The request for changes a system note makes, if it is GitLab's "requested changes" note: its
/// author (the hook's actor, when the ids agree) requested changes when it was created.
fn requested_changes(n: &NoteAttributes, actor: &HookUser) -> Option<RequestedChanges> {
    // Requested changes are someone's only from the system note naming them.
    if !n.system || !requests_changes(&n.note) {
        return None;
    }
    if let (Some(author), Some(actor_id)) = (n.author_id, actor.id)
        && author != actor_id
    {
        return None;
    }
    Some(RequestedChanges {
        username: actor.username.clone(),
        note_id: n.id,
        requested_at: n.created_at.0,
    })
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
    if let Some(request) = requested_changes(n, &e.user).filter(|_| merge_request.is_some()) {
        let recorded = record(&mut txn, &parent, &request, Origin::Webhook).await?;
        txn.commit().await?;
        return Ok(Outcome::of_change(recorded.stored));
    }
    let Some(row) = NoteRow::from_hook(parent, n, &e.user) else {
        // System notes are not mirrored.
        return Ok(Outcome::Ignored);
    };
    let changed = row.write(&mut txn, edited.then_some(version)).await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}
