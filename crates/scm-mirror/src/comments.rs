//! Conversation comments (`comment`) and review comments (`review_comment`). A comment only
//! moves forward by its `updated_at`, compared with its row locked inside the transaction that
//! holds its parent item locked; each edit records one `comment_edited` item event on the parent
//! under the edit's source key; a deletion leaves a tombstone no late copy can bring back.
//! [`apply`] is the one lock-compare-write step for both tables.

use std::future::Future;

use lifecycle_core::forward::{Freshness, by_updated_at};
use lifecycle_core::source_key::LifecycleChange;
// Table and column names in dynamic SQL come only from `CommentRow`'s constants.
use sqlx::AssertSqlSafe;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::events::{self, Item, Origin};

/// What a comment delivery asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentAction {
    Created,
    Edited,
    Deleted,
}

impl CommentAction {
    pub fn parse(action: &str) -> Option<Self> {
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
pub enum StoredComment {
    Missing,
    Live { updated_at: OffsetDateTime },
    Deleted,
}

impl StoredComment {
    fn from_row(row: Option<(OffsetDateTime, Option<OffsetDateTime>)>) -> Self {
        match row {
            None => StoredComment::Missing,
            Some((_, Some(_))) => StoredComment::Deleted,
            Some((updated_at, None)) => StoredComment::Live { updated_at },
        }
    }

    /// Whether a created or edited payload dated `updated_at` is written.
    pub fn freshness(self, updated_at: OffsetDateTime) -> Freshness {
        match self {
            // A deleted comment never comes back: a late copy of it changes nothing.
            StoredComment::Deleted => Freshness::Stale,
            // Forward-only: an older payload changes nothing.
            StoredComment::Live { updated_at: stored } => by_updated_at(Some(stored), updated_at),
            StoredComment::Missing => Freshness::Apply,
        }
    }
}

/// A comment's identity and version, as a writer compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommentKey<'a> {
    /// The row its native id is unique under (a repository or a pull request).
    pub scope_id: Uuid,
    pub native_id: i64,
    /// The vendor's `updated_at`: the version forward-only compares.
    pub updated_at: OffsetDateTime,
    /// The text an edit is identified by.
    pub text: &'a str,
}

/// A comment of either table, as a writer holds it.
pub trait CommentRow: Sync {
    /// The table, and the column its native ids are unique under (closed sets of literals).
    const TABLE: &'static str;
    const SCOPE: &'static str;
    fn key(&self) -> CommentKey<'_>;
    /// Writes the comment over its locked row (the caller checked freshness).
    fn write(
        &self,
        txn: &mut sqlx::PgConnection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    /// Tombstones the comment (content cleared, dated `deleted_at`), creating the tombstone
    /// when it was never mirrored so a late copy of its creation finds it deleted. Returns
    /// whether it was live before.
    fn tombstone(
        &self,
        txn: &mut sqlx::PgConnection,
        deleted_at: OffsetDateTime,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

/// Applies a comment delivery to its locked parent `item`: the lock-compare-write step, then the
/// edit's item event (at the parent's `version`). Returns whether anything changed.
pub async fn apply<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    action: CommentAction,
    comment: &C,
    version: OffsetDateTime,
    deleted_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let stored = lock(txn, comment).await?;
    let wrote = match action {
        CommentAction::Deleted => comment.tombstone(txn, deleted_at).await?,
        CommentAction::Created | CommentAction::Edited => {
            let fresh = stored.freshness(comment.key().updated_at) == Freshness::Apply;
            if fresh {
                comment.write(txn).await?;
            }
            fresh
        }
    };
    let recorded = match action {
        CommentAction::Edited => record_edit(txn, item, stored, comment, version).await?,
        CommentAction::Created | CommentAction::Deleted => false,
    };
    Ok(wrote || recorded)
}

/// Locks and reads a comment's stored row.
pub async fn lock<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    comment: &C,
) -> Result<StoredComment, sqlx::Error> {
    let key = comment.key();
    let sql = format!(
        "SELECT upstream_updated_at, deleted_at FROM {}
          WHERE {} = $1 AND native_id = $2 FOR UPDATE",
        C::TABLE,
        C::SCOPE
    );
    let row = sqlx::query_as(AssertSqlSafe(sql))
        .bind(key.scope_id)
        .bind(key.native_id)
        .fetch_optional(&mut *txn)
        .await?;
    Ok(StoredComment::from_row(row))
}

/// Records an edit of a comment of `item`: its `updated_at` and text are its identity, so each
/// edit records once whatever order its copies arrive in, a late older edit included. Nothing
/// is recorded for a deleted comment.
async fn record_edit<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    item: &Item,
    stored: StoredComment,
    comment: &C,
    version: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    if stored == StoredComment::Deleted {
        return Ok(false);
    }
    let key = comment.key();
    let native_id = key.native_id.to_string();
    let change = LifecycleChange::CommentEdit {
        comment: &native_id,
        updated_at: key.updated_at,
        text: key.text,
    };
    events::record(txn, item, &change, version, Origin::Webhook).await
}

/// A conversation comment of an issue or pull request (`comment`, keyed by repository).
#[derive(Debug, Clone, Copy)]
pub struct Comment<'a> {
    /// The issue or pull request, locked by the caller.
    pub parent: Item,
    pub native_id: i64,
    pub node_id: &'a str,
    pub author: Option<&'a str>,
    pub body: Option<&'a str>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl CommentRow for Comment<'_> {
    const TABLE: &'static str = "comment";
    const SCOPE: &'static str = "repository_id";

    fn key(&self) -> CommentKey<'_> {
        CommentKey {
            scope_id: self.parent.repository_id,
            native_id: self.native_id,
            updated_at: self.updated_at,
            text: self.body.unwrap_or_default(),
        }
    }

    // Every writer of a comment holds its parent's row first, so no other writer inserts it
    // between the lock and the write.
    async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        let (issue_id, pull_request_id) = self.parent.columns();
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
        .bind(self.parent.repository_id)
        .bind(issue_id)
        .bind(pull_request_id)
        .bind(self.native_id)
        .bind(self.node_id)
        .bind(self.author)
        .bind(self.body)
        .bind(self.created_at)
        .bind(self.updated_at)
        .execute(&mut *txn)
        .await?;
        Ok(())
    }

    async fn tombstone(
        &self,
        txn: &mut sqlx::PgConnection,
        deleted_at: OffsetDateTime,
    ) -> Result<bool, sqlx::Error> {
        let (issue_id, pull_request_id) = self.parent.columns();
        let newly: Option<bool> = sqlx::query_scalar(
            "INSERT INTO comment (id, repository_id, issue_id, pull_request_id, native_id, node_id,
                                  author, body, upstream_created_at, upstream_updated_at,
                                  deleted_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, $10)
             ON CONFLICT (repository_id, native_id) DO UPDATE SET
                body = NULL, deleted_at = EXCLUDED.deleted_at, mirrored_at = now()
              WHERE comment.deleted_at IS NULL
             RETURNING true",
        )
        .bind(Uuid::now_v7())
        .bind(self.parent.repository_id)
        .bind(issue_id)
        .bind(pull_request_id)
        .bind(self.native_id)
        .bind(self.node_id)
        .bind(self.author)
        .bind(self.created_at)
        .bind(self.updated_at)
        .bind(deleted_at)
        .fetch_optional(&mut *txn)
        .await?;
        Ok(newly.is_some())
    }
}

/// A review comment of a pull request (`review_comment`, keyed by pull request).
#[derive(Debug, Clone, Copy)]
pub struct ReviewComment<'a> {
    /// The pull request's row id, locked by the caller.
    pub pull_request_id: Uuid,
    /// The thread it is filed under, when the delivery names one.
    pub thread_id: Option<Uuid>,
    pub review_native_id: Option<i64>,
    pub native_id: i64,
    pub node_id: &'a str,
    pub in_reply_to: Option<i64>,
    pub path: Option<&'a str>,
    pub line: Option<i32>,
    pub commit_sha: Option<&'a str>,
    pub author: Option<&'a str>,
    pub body: Option<&'a str>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl ReviewComment<'_> {
    /// Files a stored comment under `thread_id` without moving its content.
    pub async fn file_under(
        &self,
        txn: &mut sqlx::PgConnection,
        thread_id: Uuid,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE review_comment SET thread_id = $3
              WHERE pull_request_id = $1 AND native_id = $2",
        )
        .bind(self.pull_request_id)
        .bind(self.native_id)
        .bind(thread_id)
        .execute(&mut *txn)
        .await?;
        Ok(())
    }
}

impl CommentRow for ReviewComment<'_> {
    const TABLE: &'static str = "review_comment";
    const SCOPE: &'static str = "pull_request_id";

    fn key(&self) -> CommentKey<'_> {
        CommentKey {
            scope_id: self.pull_request_id,
            native_id: self.native_id,
            updated_at: self.updated_at,
            text: self.body.unwrap_or_default(),
        }
    }

    // Every writer holds the pull request's row first, so no other writer inserts it between
    // the lock and the write.
    async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO review_comment (id, pull_request_id, thread_id, review_native_id,
                                         native_id, node_id, in_reply_to, path, line, commit_sha,
                                         author, body, upstream_created_at, upstream_updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             ON CONFLICT (pull_request_id, native_id) DO UPDATE SET
                thread_id = coalesce(EXCLUDED.thread_id, review_comment.thread_id),
                review_native_id = coalesce(EXCLUDED.review_native_id,
                                            review_comment.review_native_id),
                node_id = EXCLUDED.node_id, in_reply_to = EXCLUDED.in_reply_to,
                path = EXCLUDED.path, line = EXCLUDED.line, commit_sha = EXCLUDED.commit_sha,
                author = EXCLUDED.author, body = EXCLUDED.body,
                upstream_created_at = EXCLUDED.upstream_created_at,
                upstream_updated_at = EXCLUDED.upstream_updated_at, mirrored_at = now()",
        )
        .bind(Uuid::now_v7())
        .bind(self.pull_request_id)
        .bind(self.thread_id)
        .bind(self.review_native_id)
        .bind(self.native_id)
        .bind(self.node_id)
        .bind(self.in_reply_to)
        .bind(self.path)
        .bind(self.line)
        .bind(self.commit_sha)
        .bind(self.author)
        .bind(self.body)
        .bind(self.created_at)
        .bind(self.updated_at)
        .execute(&mut *txn)
        .await?;
        Ok(())
    }

    async fn tombstone(
        &self,
        txn: &mut sqlx::PgConnection,
        deleted_at: OffsetDateTime,
    ) -> Result<bool, sqlx::Error> {
        let newly: Option<bool> = sqlx::query_scalar(
            "INSERT INTO review_comment (id, pull_request_id, review_native_id, native_id,
                                         node_id, in_reply_to, path, author,
                                         upstream_created_at, upstream_updated_at, deleted_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (pull_request_id, native_id) DO UPDATE SET
                body = NULL, deleted_at = EXCLUDED.deleted_at, mirrored_at = now()
              WHERE review_comment.deleted_at IS NULL
             RETURNING true",
        )
        .bind(Uuid::now_v7())
        .bind(self.pull_request_id)
        .bind(self.review_native_id)
        .bind(self.native_id)
        .bind(self.node_id)
        .bind(self.in_reply_to)
        .bind(self.path)
        .bind(self.author)
        .bind(self.created_at)
        .bind(self.updated_at)
        .bind(deleted_at)
        .fetch_optional(&mut *txn)
        .await?;
        Ok(newly.is_some())
    }
}
