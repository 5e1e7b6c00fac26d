//! Reviews (`review`) and review threads (`review_thread`) of a pull request. Each is read with
//! its row locked inside the transaction that holds the pull request locked; the vendor's rules
//! (forward-only review states, dated resolutions) decide what the caller writes.

use time::OffsetDateTime;
use uuid::Uuid;

/// A review's stored row, read locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReview {
    /// The state as stored (the vendor's text).
    pub state: String,
    pub updated_at: OffsetDateTime,
}

/// A review as the mirror stores it.
#[derive(Debug, Clone, Copy)]
pub struct Review<'a> {
    pub pull_request_id: Uuid,
    pub native_id: i64,
    pub node_id: &'a str,
    pub author: Option<&'a str>,
    pub body: Option<&'a str>,
    pub state: &'a str,
    pub commit_sha: Option<&'a str>,
    pub submitted_at: Option<OffsetDateTime>,
    pub updated_at: OffsetDateTime,
    /// Whether this write dismisses it (dated by `updated_at`; a dismissal already stored stays).
    pub dismissed: bool,
}

impl Review<'_> {
    /// Locks and reads the stored row of review `native_id` of a pull request.
    pub async fn lock(
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
        native_id: i64,
    ) -> Result<Option<StoredReview>, sqlx::Error> {
        let row: Option<(String, OffsetDateTime)> = sqlx::query_as(
            "SELECT state, upstream_updated_at FROM review
              WHERE pull_request_id = $1 AND native_id = $2 FOR UPDATE",
        )
        .bind(pull_request_id)
        .bind(native_id)
        .fetch_optional(&mut *txn)
        .await?;
        Ok(row.map(|(state, updated_at)| StoredReview { state, updated_at }))
    }

    /// Writes the review over its locked row (the caller applied the vendor's state rule).
    pub async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO review (id, pull_request_id, native_id, node_id, author, body, state,
                                 commit_sha, submitted_at, upstream_updated_at, dismissed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $11 THEN $10 END)
             ON CONFLICT (pull_request_id, native_id) DO UPDATE SET
                node_id = EXCLUDED.node_id, author = EXCLUDED.author, body = EXCLUDED.body,
                state = EXCLUDED.state,
                commit_sha = coalesce(EXCLUDED.commit_sha, review.commit_sha),
                submitted_at = coalesce(EXCLUDED.submitted_at, review.submitted_at),
                upstream_updated_at = EXCLUDED.upstream_updated_at,
                dismissed_at = coalesce(review.dismissed_at, EXCLUDED.dismissed_at),
                mirrored_at = now()",
        )
        .bind(Uuid::now_v7())
        .bind(self.pull_request_id)
        .bind(self.native_id)
        .bind(self.node_id)
        .bind(self.author)
        .bind(self.body)
        .bind(self.state)
        .bind(self.commit_sha)
        .bind(self.submitted_at)
        .bind(self.updated_at)
        .bind(self.dismissed)
        .execute(&mut *txn)
        .await?;
        Ok(())
    }
}

/// A review thread's stored row, read locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredThread {
    pub id: Uuid,
    pub resolved: Option<bool>,
    /// When the stored resolution state was received: the version a resolution compares.
    pub resolution_received_at: Option<OffsetDateTime>,
}

/// A review thread's resolution state as the mirror stores it.
#[derive(Debug, Clone, Copy)]
pub struct Thread<'a> {
    pub pull_request_id: Uuid,
    pub node_id: &'a str,
    pub path: Option<&'a str>,
    pub resolved: bool,
    /// When the state was received; also the resolution's date.
    pub received_at: OffsetDateTime,
    pub resolved_by: Option<&'a str>,
    /// The latest comment's `updated_at`.
    pub latest: Option<OffsetDateTime>,
}

impl Thread<'_> {
    /// Locks and reads the stored row of thread `node_id` of a pull request.
    pub async fn lock(
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
        node_id: &str,
    ) -> Result<Option<StoredThread>, sqlx::Error> {
        let row: Option<(Uuid, Option<bool>, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT id, resolved, resolution_received_at FROM review_thread
              WHERE pull_request_id = $1 AND node_id = $2 FOR UPDATE",
        )
        .bind(pull_request_id)
        .bind(node_id)
        .fetch_optional(&mut *txn)
        .await?;
        Ok(
            row.map(|(id, resolved, resolution_received_at)| StoredThread {
                id,
                resolved,
                resolution_received_at,
            }),
        )
    }

    /// Writes the thread over its locked row (the caller compared the dates); a resolution
    /// already stored keeps its date and author. Returns the row id.
    pub async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<Uuid, sqlx::Error> {
        sqlx::query_scalar(
            "INSERT INTO review_thread (id, pull_request_id, node_id, path, resolved, resolved_at,
                                        resolved_by, upstream_updated_at, resolution_received_at)
             VALUES ($1, $2, $3, $4, $5, CASE WHEN $5 THEN $6 END, CASE WHEN $5 THEN $7 END, $8,
                     $6)
             ON CONFLICT (pull_request_id, node_id) DO UPDATE SET
                path = coalesce(EXCLUDED.path, review_thread.path),
                resolved = EXCLUDED.resolved,
                resolved_at = CASE WHEN NOT EXCLUDED.resolved THEN NULL
                                   WHEN review_thread.resolved THEN review_thread.resolved_at
                                   ELSE EXCLUDED.resolved_at END,
                resolved_by = CASE WHEN NOT EXCLUDED.resolved THEN NULL
                                   WHEN review_thread.resolved THEN review_thread.resolved_by
                                   ELSE EXCLUDED.resolved_by END,
                upstream_updated_at = greatest(EXCLUDED.upstream_updated_at,
                                               review_thread.upstream_updated_at),
                resolution_received_at = EXCLUDED.resolution_received_at, mirrored_at = now()
             RETURNING id",
        )
        .bind(Uuid::now_v7())
        .bind(self.pull_request_id)
        .bind(self.node_id)
        .bind(self.path)
        .bind(self.resolved)
        .bind(self.received_at)
        .bind(self.resolved_by)
        .bind(self.latest)
        .fetch_one(&mut *txn)
        .await
    }
}
