//! `pull_request_review`, `pull_request_review_comment` and `pull_request_review_thread`
//! webhooks: reviews, review comments and threads of a pull request in their own tables. Reviews
//! and review comments only move forward by `updated_at`, each with its row locked inside the
//! transaction that holds the pull request locked; a dismissal is dated by when we received it,
//! is final and records one `review_dismissed` event; a comment edit records one `comment_edited`; a thread's resolution
//! state is dated by when we received it and its resolution records one `thread_resolved`.

use lifecycle_core::forward::{
    Freshness, GithubReviewState, ReviewTransition, by_updated_at, github_review_state,
};
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::comments::{self, CommentAction, ReviewComment, StoredComment};
use scm_mirror::events::{self, Item, Origin};
use scm_mirror::items::{self, Counts, ItemClass};
use scm_mirror::reviews::{Review, StoredThread, Thread};
use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::payload::{self, Account, Repository};
use super::{Outcome, Webhook, WebhookError, micros, monitored_repository, reviewers};
use crate::mirror::VENDOR;

#[derive(Debug, Deserialize)]
pub struct ReviewEvent {
    action: String,
    repository: Repository,
    pull_request: payload::PullRequest,
    review: payload::Review,
}

impl ReviewEvent {
    /// The repository, class and number this delivery names (a hint's item).
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        (
            &self.repository,
            ItemClass::PullRequest,
            self.pull_request.item.number,
        )
    }
}

#[derive(Debug, Deserialize)]
pub struct ReviewCommentEvent {
    action: String,
    repository: Repository,
    pull_request: payload::PullRequest,
    comment: payload::ReviewComment,
}

impl ReviewCommentEvent {
    /// The repository, class and number this delivery names (a hint's item).
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        (
            &self.repository,
            ItemClass::PullRequest,
            self.pull_request.item.number,
        )
    }
}

#[derive(Debug, Deserialize)]
pub struct ThreadEvent {
    action: String,
    repository: Repository,
    pull_request: payload::PullRequest,
    thread: payload::Thread,
    #[serde(default)]
    sender: Option<Account>,
}

impl ThreadEvent {
    /// The repository, class and number this delivery names (a hint's item).
    pub fn named(&self) -> (&Repository, ItemClass, i32) {
        (
            &self.repository,
            ItemClass::PullRequest,
            self.pull_request.item.number,
        )
    }
}

/// The pull request a review payload is about, in a monitored repository, locked; created from
/// the payload when it is not mirrored yet (a stub the pull_request handler and the sync move
/// forward later). Its reviewer lists are a dated snapshot like any pull request payload's.
async fn parent(
    txn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    repository: &Repository,
    pr: &payload::PullRequest,
) -> Result<Item, WebhookError> {
    let repository_id = monitored_repository(txn, hook, repository).await?;
    let node = pr.node();
    let counts = Counts::reported(node.fields.comment_count);
    let id = items::lock_or_stub(txn, repository_id, &node, counts).await?;
    reviewers::apply_payload(txn, id, hook.received_at, pr).await?;
    Ok(Item::pull_request(VENDOR, id, repository_id))
}

fn review_state(state: &str) -> Option<GithubReviewState> {
    Some(match state.to_ascii_lowercase().as_str() {
        "pending" => GithubReviewState::Pending,
        "commented" => GithubReviewState::Commented,
        "approved" => GithubReviewState::Approved,
        "changes_requested" => GithubReviewState::ChangesRequested,
        "dismissed" => GithubReviewState::Dismissed,
        _ => return None,
    })
}

/// The state as stored (GitHub's GraphQL enum, as the sync stores it).
fn state_text(state: GithubReviewState) -> &'static str {
    match state {
        GithubReviewState::Pending => "PENDING",
        GithubReviewState::Commented => "COMMENTED",
        GithubReviewState::Approved => "APPROVED",
        GithubReviewState::ChangesRequested => "CHANGES_REQUESTED",
        GithubReviewState::Dismissed => "DISMISSED",
    }
}

/// Handles a `pull_request_review` delivery.
pub async fn review(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: ReviewEvent,
) -> Result<Outcome, WebhookError> {
    if !matches!(event.action.as_str(), "submitted" | "edited" | "dismissed") {
        return Ok(Outcome::Ignored);
    }
    let r = &event.review;
    let incoming = review_state(&r.state)
        .ok_or_else(|| WebhookError::Invalid(format!("unknown review state {:?}", r.state)))?;
    // A review's version: its updated_at; a payload without one is dated by its submission,
    // else by the pull request's. A dismissal is dated by the JetStream store time (GitHub's
    // payload carries no dismissal date), like a thread resolution.
    let updated_at = if event.action == "dismissed" {
        micros(hook.received_at)
    } else {
        r.updated_at
            .or(r.submitted_at)
            .unwrap_or(event.pull_request.item.updated_at)
    };
    let mut txn = pool.begin().await?;
    let item = parent(&mut txn, hook, &event.repository, &event.pull_request).await?;
    let read = ReviewRead {
        native_id: r.id,
        node_id: &r.node_id,
        author: r.user.as_ref().map(|u| u.login.as_str()),
        body: r.body.as_deref(),
        state: incoming,
        commit_sha: r.commit_id.as_deref(),
        submitted_at: r.submitted_at,
        updated_at,
    };
    let version = event.pull_request.item.updated_at;
    let applied = apply_review(&mut txn, &item, &read, version, Origin::Webhook).await?;
    txn.commit().await?;
    Ok(match applied {
        Applied::Stale => Outcome::Unchanged,
        Applied::Written { .. } => Outcome::Applied,
    })
}

/// A review as a webhook or a sync page reports it.
#[derive(Debug, Clone, Copy)]
pub struct ReviewRead<'a> {
    pub native_id: i64,
    pub node_id: &'a str,
    pub author: Option<&'a str>,
    pub body: Option<&'a str>,
    pub state: GithubReviewState,
    pub commit_sha: Option<&'a str>,
    pub submitted_at: Option<time::OffsetDateTime>,
    /// Its version: the forward-only comparison key.
    pub updated_at: time::OffsetDateTime,
}

/// What a lock-compare-write of a review or thread did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Older than the stored row: nothing written.
    Stale,
    /// Written; `changed` when the stored row was missing or differed in what it compares.
    Written { changed: bool },
}

/// The review's lock-compare-write under its locked pull request `item`, and its dismissal's
/// item event (at the pull request's `version`), for every path that reports a review.
pub async fn apply_review(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    r: &ReviewRead<'_>,
    version: time::OffsetDateTime,
    origin: Origin,
) -> Result<Applied, sqlx::Error> {
    let incoming = r.state;
    let updated_at = r.updated_at;
    let stored = Review::lock(txn, item.id, r.native_id).await?;
    let (state, dismissed, changed) = match &stored {
        None => (incoming, incoming == GithubReviewState::Dismissed, true),
        Some(stored) => {
            // Forward-only: an older payload changes nothing.
            if by_updated_at(Some(stored.updated_at), updated_at) == Freshness::Stale {
                return Ok(Applied::Stale);
            }
            let changed_version = stored.updated_at != updated_at;
            // Unknown stored text cannot be dismissed already: the payload's state applies.
            let stored = review_state(&stored.state).unwrap_or(GithubReviewState::Pending);
            // A dismissal is final: a dismissed review keeps its state, and only the move into
            // the dismissed state publishes.
            match github_review_state(stored, incoming) {
                ReviewTransition::Apply(state) => (
                    state,
                    state == GithubReviewState::Dismissed,
                    changed_version || state != stored,
                ),
                ReviewTransition::Unchanged => (stored, false, changed_version),
            }
        }
    };
    let review = Review {
        pull_request_id: item.id,
        native_id: r.native_id,
        node_id: r.node_id,
        author: r.author,
        body: r.body,
        state: state_text(state),
        commit_sha: r.commit_sha,
        submitted_at: r.submitted_at,
        updated_at,
        dismissed,
    };
    review.write(txn).await?;
    if dismissed {
        // The dismissal's identity is the updated_at the review stores for it.
        let review = r.native_id.to_string();
        let change = LifecycleChange::Dismissal {
            review: &review,
            review_updated_at: updated_at,
        };
        events::record(txn, item, &change, version, origin).await?;
    }
    Ok(Applied::Written { changed })
}

/// Handles a `pull_request_review_comment` delivery.
pub async fn review_comment(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: ReviewCommentEvent,
) -> Result<Outcome, WebhookError> {
    let Some(action) = CommentAction::parse(&event.action) else {
        return Ok(Outcome::Ignored);
    };
    let mut txn = pool.begin().await?;
    let item = parent(&mut txn, hook, &event.repository, &event.pull_request).await?;
    let comment = review_comment_row(item.id, &event.comment, None);
    let version = event.pull_request.item.updated_at;
    let deleted_at = micros(hook.received_at);
    let changed = comments::apply(&mut txn, &item, action, &comment, version, deleted_at).await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}

/// A review comment of the payload, as the mirror stores it.
pub fn review_comment_row(
    pull_request_id: Uuid,
    c: &payload::ReviewComment,
    thread_id: Option<Uuid>,
) -> ReviewComment<'_> {
    ReviewComment {
        pull_request_id,
        thread_id,
        review_native_id: c.pull_request_review_id,
        in_reply_to: c.in_reply_to_id,
        path: c.path.as_deref(),
        line: c.line,
        commit_sha: c.commit_id.as_deref(),
        fields: c.comment.fields(),
    }
}

/// Handles a `pull_request_review_thread` delivery.
///
/// GitHub's payload names no resolution time, so a resolution is dated by when we received it
/// (JetStream store time, kept across JetStream redeliveries): its resolvedAt, and the order of
/// resolved and unresolved deliveries like a dated snapshot. Only the move from unresolved to
/// resolved records, keyed by the stored resolvedAt, so a copy received later (a redelivery past
/// the duplicate window) finds the thread resolved and records nothing. The thread's latest
/// comment date would make a resolve, unresolve, resolve without a new comment one key and lose
/// the second resolution.
pub async fn thread(
    pool: &PgPool,
    hook: &Webhook<'_>,
    event: ThreadEvent,
) -> Result<Outcome, WebhookError> {
    let resolved = match event.action.as_str() {
        "resolved" => true,
        "unresolved" => false,
        _ => return Ok(Outcome::Ignored),
    };
    let received_at = micros(hook.received_at);
    let mut txn = pool.begin().await?;
    let item = parent(&mut txn, hook, &event.repository, &event.pull_request).await?;
    let t = &event.thread;
    let thread = Thread {
        pull_request_id: item.id,
        node_id: &t.node_id,
        path: t.comments.first().and_then(|c| c.path.as_deref()),
        resolved,
        received_at,
        resolved_by: event.sender.as_ref().map(|s| s.login.as_str()),
        latest: t.comments.iter().map(|c| c.comment.updated_at).max(),
    };
    let comments: Vec<ReviewComment<'_>> = t
        .comments
        .iter()
        .map(|c| review_comment_row(item.id, c, None))
        .collect();
    let version = event.pull_request.item.updated_at;
    let applied = apply_thread(
        &mut txn,
        &item,
        &thread,
        &comments,
        version,
        Origin::Webhook,
    )
    .await?;
    txn.commit().await?;
    Ok(match applied.thread {
        Applied::Stale => Outcome::Unchanged,
        Applied::Written { .. } => Outcome::Applied,
    })
}

/// What [`apply_thread`] did: the thread's own step, and how many of its comments it corrected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadApplied {
    pub thread: Applied,
    pub comments_changed: u64,
}

/// The thread's lock-compare-write under its locked pull request `item` (its resolution dated by
/// `thread.received_at`), its comments filed under it forward-only, and the resolution's item
/// event, for every path that reports a thread.
pub async fn apply_thread(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    thread: &Thread<'_>,
    comments: &[ReviewComment<'_>],
    version: time::OffsetDateTime,
    origin: Origin,
) -> Result<ThreadApplied, sqlx::Error> {
    let stored = Thread::lock(txn, item.id, thread.node_id).await?;
    // Dated state: a resolution received earlier than the stored one changes nothing.
    if let Some(StoredThread {
        resolution_received_at: Some(stored_at),
        ..
    }) = stored
        && thread.received_at < stored_at
    {
        return Ok(ThreadApplied {
            thread: Applied::Stale,
            comments_changed: 0,
        });
    }
    let was_resolved = stored.and_then(|s| s.resolved) == Some(true);
    let newly_resolved = thread.resolved && !was_resolved;
    let changed = stored.is_none_or(|s| s.resolved != Some(thread.resolved));
    let thread_id = thread.write(txn).await?;
    // The thread's comments: forward-only like any review comment, and filed under the thread.
    let mut comments_changed = 0;
    for c in comments {
        let comment = ReviewComment {
            thread_id: Some(thread_id),
            ..*c
        };
        let stored = comments::lock(txn, &comment).await?;
        let updated_at = comment.fields.updated_at;
        if stored.freshness(updated_at) == Freshness::Apply {
            comments::write(txn, &comment).await?;
            if !matches!(stored, StoredComment::Live { updated_at: at } if at == updated_at) {
                comments_changed += 1;
            }
        } else if stored != StoredComment::Missing {
            comment.file_under(txn, thread_id).await?;
        }
    }
    if newly_resolved {
        let change = LifecycleChange::ThreadResolved {
            thread: thread.node_id,
            resolved_at: thread.received_at,
        };
        events::record(txn, item, &change, version, origin).await?;
    }
    Ok(ThreadApplied {
        thread: Applied::Written { changed },
        comments_changed,
    })
}
