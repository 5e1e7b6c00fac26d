//! Conversation comments (`comment`) and review comments (`review_comment`). A comment only
//! moves forward by its `updated_at`, compared with its row locked inside the transaction that
//! holds its parent item locked; each edit records one `comment_edited` item event on the parent
//! under the edit's source key; a deletion leaves a tombstone no late copy can bring back.
//! [`apply`] is the one lock-compare-write step for both tables.

use lifecycle_core::forward::{Freshness, by_updated_at};
use lifecycle_core::source_key::LifecycleChange;
// Table and column names in dynamic SQL come only from `CommentRow`'s constants.
use sqlx::AssertSqlSafe;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::events::{self, Item, Origin};
use crate::upsert::{OnConflict, Upsert};

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

/// What every comment carries, as the vendor reports it.
#[derive(Debug, Clone, Copy)]
pub struct CommentFields<'a> {
    pub native_id: i64,
    pub node_id: &'a str,
    pub author: Option<&'a str>,
    pub body: Option<&'a str>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl CommentFields<'_> {
    /// Adds the columns every comment table has, but its content.
    fn columns(&self, row: &mut Upsert) {
        use OnConflict::{Keep, Replace};
        row.set("native_id", Keep, self.native_id)
            .set("node_id", Replace, self.node_id)
            .set("author", Replace, self.author)
            .set("upstream_created_at", Replace, self.created_at)
            .set("upstream_updated_at", Replace, self.updated_at);
    }
}

/// A comment of either table, as a writer holds it.
pub trait CommentRow: Sync {
    /// The table, and the column its native ids are unique under (closed sets of literals).
    const TABLE: &'static str;
    const SCOPE: &'static str;
    /// What the comment shares with every comment.
    fn fields(&self) -> &CommentFields<'_>;
    /// The id of the row its native id is unique under (the `SCOPE` column's value).
    fn scope_id(&self) -> Uuid;
    /// Adds the columns that place the comment (its scope, its parent); a tombstone keeps them.
    fn place(&self, row: &mut Upsert);
    /// Adds the table's own columns that only a live write sets.
    fn detail(&self, row: &mut Upsert);

    /// Who the comment is and which version of it this is.
    fn key(&self) -> CommentKey<'_> {
        let f = self.fields();
        CommentKey {
            scope_id: self.scope_id(),
            native_id: f.native_id,
            updated_at: f.updated_at,
            text: f.body.unwrap_or_default(),
        }
    }
}

/// The columns a comment's native id is unique under.
fn conflict_key<C: CommentRow>() -> String {
    format!("{}, native_id", C::SCOPE)
}

/// Writes the comment over its locked row (the caller checked freshness). Every writer of a
/// comment holds its parent's row first, so no other writer inserts it between the lock and
/// the write.
pub async fn write<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    comment: &C,
) -> Result<(), sqlx::Error> {
    let mut row = Upsert::new(C::TABLE);
    comment.place(&mut row);
    comment.fields().columns(&mut row);
    row.set_text(
        "body",
        OnConflict::Replace,
        comment.fields().body,
        crate::upsert::MAX_BODY_BYTES,
    );
    comment.detail(&mut row);
    row.write(txn, &conflict_key::<C>(), &["mirrored_at = now()"])
        .await?;
    Ok(())
}

/// Tombstones the comment (content cleared, dated `deleted_at`), creating the tombstone when it
/// was never mirrored so a late copy of its creation finds it deleted. Returns whether it was
/// live before.
async fn tombstone<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    comment: &C,
    deleted_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let mut row = Upsert::new(C::TABLE);
    comment.place(&mut row);
    comment.fields().columns(&mut row);
    row.tombstone(txn, &conflict_key::<C>(), &["body"], deleted_at)
        .await
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
        CommentAction::Deleted => tombstone(txn, comment, deleted_at).await?,
        CommentAction::Created | CommentAction::Edited => {
            let fresh = stored.freshness(comment.key().updated_at) == Freshness::Apply;
            if fresh {
                write(txn, comment).await?;
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

/// Tombstones the live comments `native_ids` under `scope_id` (content cleared, dated
/// `deleted_at`), as a webhook's deletion does; returns how many were live. The caller decided
/// they are gone upstream and holds their parent locked.
pub async fn tombstone_missing<C: CommentRow>(
    txn: &mut sqlx::PgConnection,
    scope_id: Uuid,
    native_ids: &[i64],
    deleted_at: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    if native_ids.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "UPDATE {} SET body = NULL, deleted_at = $3, mirrored_at = now()
          WHERE {} = $1 AND native_id = ANY($2) AND deleted_at IS NULL",
        C::TABLE,
        C::SCOPE
    );
    let done = sqlx::query(AssertSqlSafe(sql))
        .bind(scope_id)
        .bind(native_ids)
        .bind(deleted_at)
        .execute(&mut *txn)
        .await?;
    Ok(done.rows_affected())
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
    pub fields: CommentFields<'a>,
}

impl CommentRow for Comment<'_> {
    const TABLE: &'static str = "comment";
    const SCOPE: &'static str = "repository_id";

    fn fields(&self) -> &CommentFields<'_> {
        &self.fields
    }

    fn scope_id(&self) -> Uuid {
        self.parent.repository_id
    }

    fn place(&self, row: &mut Upsert) {
        let (issue_id, pull_request_id) = self.parent.columns();
        row.set("repository_id", OnConflict::Keep, self.parent.repository_id)
            .set("issue_id", OnConflict::Keep, issue_id)
            .set("pull_request_id", OnConflict::Keep, pull_request_id);
    }

    fn detail(&self, _row: &mut Upsert) {}
}

/// A review comment of a pull request (`review_comment`, keyed by pull request).
#[derive(Debug, Clone, Copy)]
pub struct ReviewComment<'a> {
    /// The pull request's row id, locked by the caller.
    pub pull_request_id: Uuid,
    /// The thread it is filed under, when the delivery names one.
    pub thread_id: Option<Uuid>,
    pub review_native_id: Option<i64>,
    pub in_reply_to: Option<i64>,
    pub path: Option<&'a str>,
    pub line: Option<i32>,
    pub commit_sha: Option<&'a str>,
    pub fields: CommentFields<'a>,
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
        .bind(self.fields.native_id)
        .bind(thread_id)
        .execute(&mut *txn)
        .await?;
        Ok(())
    }
}

impl CommentRow for ReviewComment<'_> {
    const TABLE: &'static str = "review_comment";
    const SCOPE: &'static str = "pull_request_id";

    fn fields(&self) -> &CommentFields<'_> {
        &self.fields
    }

    fn scope_id(&self) -> Uuid {
        self.pull_request_id
    }

    fn place(&self, row: &mut Upsert) {
        use OnConflict::{Coalesce, Keep, Replace};
        row.set("pull_request_id", Keep, self.pull_request_id)
            .set("review_native_id", Coalesce, self.review_native_id)
            .set("in_reply_to", Replace, self.in_reply_to)
            .set("path", Replace, self.path);
    }

    fn detail(&self, row: &mut Upsert) {
        use OnConflict::{Coalesce, Replace};
        row.set("thread_id", Coalesce, self.thread_id)
            .set("line", Replace, self.line)
            .set("commit_sha", Replace, self.commit_sha);
    }
}
