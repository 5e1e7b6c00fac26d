//! What a sync page read under each item (conversation comments, reviews, review threads with
//! their comments, review requests), written through the same lock-compare-write steps as the
//! webhooks, under the item's locked row. Comments and review comments are child classes of the
//! engine ([`sync_engine::children`]): one a whole listing of its parent no longer shows is
//! tombstoned, in a RECONCILIATION only, only if it was live before the listing, and only within
//! the blast radius.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;

use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::forward::Freshness;
use lifecycle_core::snapshot::{ListRead, SnapshotOutcome};
use scm_mirror::comments::{
    self, Comment, CommentFields, CommentRow, ReviewComment, StoredComment,
};
use scm_mirror::events::{Item, Origin};
use scm_mirror::reviews::Thread;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use sync_engine::Pass;
use sync_engine::children::{ChildClass, ChildListing, ChildOutcome, ChildTombstones};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::source::{CommentNode, Conversation, Nested};
use crate::webhooks::reviews::{Applied, ReviewRead, apply_review, apply_thread};
use crate::webhooks::{micros, reviewers};

/// What a page's nested writes changed in the mirror (each a correction of what webhooks left).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Corrections {
    pub comments: u64,
    pub reviews: u64,
    pub review_comments: u64,
    pub threads: u64,
    pub reviewer_requests: u64,
    /// Comments tombstoned because a whole listing of their parent no longer shows them.
    pub comments_removed: u64,
}

impl Corrections {
    pub fn total(&self) -> u64 {
        self.comments
            + self.reviews
            + self.review_comments
            + self.threads
            + self.reviewer_requests
            + self.comments_removed
    }

    pub fn add(&mut self, other: Corrections) {
        self.comments += other.comments;
        self.reviews += other.reviews;
        self.review_comments += other.review_comments;
        self.threads += other.threads;
        self.reviewer_requests += other.reviewer_requests;
        self.comments_removed += other.comments_removed;
    }
}

/// A RECONCILIATION's comment candidates in one repository: the live comments per parent row,
/// captured before the listings start, so a comment mirrored during the pass is never one.
#[derive(Debug, Default, Clone)]
pub struct Candidates {
    /// Conversation comments by their issue's or pull request's row.
    comments: HashMap<Uuid, HashSet<i64>>,
    /// Review comments by their pull request's row.
    review_comments: HashMap<Uuid, HashSet<i64>>,
}

impl Candidates {
    pub async fn capture(pool: &PgPool, repository_id: Uuid) -> Result<Self, sqlx::Error> {
        let mut out = Candidates::default();
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT coalesce(issue_id, pull_request_id), native_id FROM comment
              WHERE repository_id = $1 AND deleted_at IS NULL",
        )
        .bind(repository_id)
        .fetch_all(pool)
        .await?;
        for (parent, id) in rows {
            out.comments.entry(parent).or_default().insert(id);
        }
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT rc.pull_request_id, rc.native_id FROM review_comment rc
               JOIN pull_request p ON p.id = rc.pull_request_id
              WHERE p.repository_id = $1 AND rc.deleted_at IS NULL",
        )
        .bind(repository_id)
        .fetch_all(pool)
        .await?;
        for (parent, id) in rows {
            out.review_comments.entry(parent).or_default().insert(id);
        }
        Ok(out)
    }
}

/// Conversation comments, as a child class of their issue or pull request.
pub const COMMENTS: ChildClass = ChildClass {
    vendor: ConnectionKind::Github,
    name: "comment",
};

/// Review comments, as a child class of their pull request.
pub const REVIEW_COMMENTS: ChildClass = ChildClass {
    vendor: ConnectionKind::Github,
    name: "review_comment",
};

/// What a RECONCILIATION page write may infer deleted: the repository's comment candidates,
/// reconciled in `pass`.
#[derive(Debug, Clone, Copy)]
pub struct Removal<'a> {
    pub candidates: &'a Candidates,
    pub pass: Pass<'a>,
}

/// Tombstones comments of table `C` under `scope_id`, dated `deleted_at`, as a webhook's
/// deletion does.
struct Tombstones<C> {
    scope_id: Uuid,
    deleted_at: OffsetDateTime,
    table: PhantomData<fn() -> C>,
}

#[async_trait::async_trait]
impl<C: CommentRow + 'static> ChildTombstones<i64> for Tombstones<C> {
    async fn tombstone(
        &self,
        conn: &mut sqlx::PgConnection,
        plan: &TombstonePlan<i64>,
    ) -> Result<u64, sqlx::Error> {
        let ids: Vec<i64> = plan.ids().iter().copied().collect();
        comments::tombstone_missing::<C>(conn, self.scope_id, &ids, self.deleted_at).await
    }
}

impl<C> Tombstones<C> {
    fn new(scope_id: Uuid, deleted_at: OffsetDateTime) -> Self {
        Tombstones {
            scope_id,
            deleted_at,
            table: PhantomData,
        }
    }
}

/// Reconciles the children of `class` under the locked `item`: `live` is what `item` held
/// before the listings, `listed` what its listing showed (`None` when the listing was not
/// whole); `writer` tombstones what the gate plans.
async fn reconcile<C: CommentRow + 'static>(
    txn: &mut sqlx::PgConnection,
    pass: Pass<'_>,
    class: ChildClass,
    item: &Item,
    live: Option<&HashSet<i64>>,
    listed: Option<Vec<i64>>,
    writer: Tombstones<C>,
) -> Result<u64, sqlx::Error> {
    let children = pass.children(class);
    let sweep = children.capture(live.into_iter().flatten().copied());
    // Fail-closed: only a whole listing of the parent infers a deletion.
    let listing = listed.map_or(ChildListing::Partial, ChildListing::Whole);
    let mut parent = serde_json::Map::new();
    parent.insert(
        "repository_id".into(),
        item.repository_id.to_string().into(),
    );
    parent.insert("parent_id".into(), item.id.to_string().into());
    Ok(
        match children
            .reconcile(txn, parent, sweep, listing, &writer)
            .await?
        {
            ChildOutcome::Tombstoned(n) => n,
            ChildOutcome::Skipped | ChildOutcome::Held { .. } => 0,
        },
    )
}

fn fields(c: &CommentNode) -> CommentFields<'_> {
    CommentFields {
        native_id: c.native_id,
        node_id: &c.node_id,
        author: c.author.as_deref(),
        body: Some(&c.body),
        created_at: c.created_at,
        updated_at: c.updated_at,
    }
}

/// Forward-only write of one comment over its locked row; whether it changed the stored row.
async fn write_comment<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    comment: &C,
) -> Result<bool, sqlx::Error> {
    let stored = comments::lock(txn, comment).await?;
    let updated_at = comment.fields().updated_at;
    if stored.freshness(updated_at) == Freshness::Stale {
        return Ok(false);
    }
    comments::write(txn, comment).await?;
    Ok(!matches!(stored, StoredComment::Live { updated_at: at } if at == updated_at))
}

/// Writes what `conversation` holds under the locked `item` (stored at `version`), read at
/// `read_at`. `removal` is the repository's candidates in a RECONCILIATION whose page reported
/// no error; `None` removes nothing.
pub async fn write(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    version: OffsetDateTime,
    read_at: OffsetDateTime,
    conversation: &Conversation,
    removal: Option<&Removal<'_>>,
) -> Result<Corrections, sqlx::Error> {
    let mut done = Corrections::default();
    let read_at = micros(read_at);
    if let Some(list) = &conversation.comments {
        for c in &list.nodes {
            let comment = Comment {
                parent: *item,
                fields: fields(c),
            };
            done.comments += u64::from(write_comment(txn, &comment).await?);
        }
        if let Some(removal) = removal {
            let listed: HashSet<i64> = list.nodes.iter().map(|c| c.native_id).collect();
            let listed = list.whole.then(|| listed.into_iter().collect());
            done.comments_removed += reconcile(
                txn,
                removal.pass,
                COMMENTS,
                item,
                removal.candidates.comments.get(&item.id),
                listed,
                Tombstones::<Comment<'static>>::new(item.repository_id, read_at),
            )
            .await?;
        }
    }
    if let Some(list) = &conversation.reviews {
        for r in &list.nodes {
            let read = ReviewRead {
                native_id: r.native_id,
                node_id: &r.node_id,
                author: r.author.as_deref(),
                body: Some(&r.body),
                state: r.state,
                commit_sha: r.commit_sha.as_deref(),
                submitted_at: r.submitted_at,
                updated_at: r.updated_at,
            };
            let applied = apply_review(txn, item, &read, version, Origin::Sync).await?;
            done.reviews += u64::from(applied == Applied::Written { changed: true });
        }
    }
    if let Some(list) = &conversation.threads {
        let mut listed = HashSet::new();
        let mut whole = list.whole;
        for t in &list.nodes {
            let thread = Thread {
                pull_request_id: item.id,
                node_id: &t.node_id,
                path: Some(&t.path),
                resolved: t.resolved,
                received_at: read_at,
                resolved_by: t.resolved_by.as_deref(),
                latest: t.comments.nodes.iter().map(|c| c.comment.updated_at).max(),
            };
            let rows: Vec<ReviewComment<'_>> = t
                .comments
                .nodes
                .iter()
                .map(|c| ReviewComment {
                    pull_request_id: item.id,
                    thread_id: None,
                    review_native_id: c.review_native_id,
                    in_reply_to: c.in_reply_to,
                    path: Some(&c.path),
                    line: c.line,
                    commit_sha: c.commit_sha.as_deref(),
                    fields: fields(&c.comment),
                })
                .collect();
            let applied = apply_thread(txn, item, &thread, &rows, version, Origin::Sync).await?;
            done.threads += u64::from(applied.thread == Applied::Written { changed: true });
            done.review_comments += applied.comments_changed;
            whole &= t.comments.whole;
            listed.extend(t.comments.nodes.iter().map(|c| c.comment.native_id));
        }
        // Every review comment sits in a thread: all threads and each one's comments are whole.
        if let Some(removal) = removal {
            let listed = whole.then(|| listed.into_iter().collect());
            done.comments_removed += reconcile(
                txn,
                removal.pass,
                REVIEW_COMMENTS,
                item,
                removal.candidates.review_comments.get(&item.id),
                listed,
                Tombstones::<ReviewComment<'static>>::new(item.id, read_at),
            )
            .await?;
        }
    }
    if let Some(list) = &conversation.reviewers {
        let read = reviewer_read(list);
        let (outcome, changed) = reviewers::apply_counted(txn, item.id, read_at, read).await?;
        done.reviewer_requests += u64::from(outcome == SnapshotOutcome::Applied && changed);
    }
    Ok(done)
}

/// GitHub's single page of review requests: applied only when it is the whole list.
fn reviewer_read(list: &Nested<reviewers::Reviewer>) -> ListRead<reviewers::Reviewer> {
    if list.whole && list.nodes.len() <= reviewers::PAGE {
        ListRead::Whole(list.nodes.clone())
    } else {
        ListRead::Partial
    }
}
