//! Reviews (`review`) and review threads (`review_thread`) of a pull request. Each is read with
//! its row locked inside the transaction that holds the pull request locked; the vendor's rules
//! (forward-only review states, dated resolutions) decide what the caller writes.

use time::OffsetDateTime;
use uuid::Uuid;

use crate::upsert::{OnConflict, Upsert};

/// A review's stored row, read locked.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredReview {
    /// The state as stored (the vendor's text).
    pub state: String,
    #[sqlx(rename = "upstream_updated_at")]
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
        sqlx::query_as(
            "SELECT state, upstream_updated_at FROM review
              WHERE pull_request_id = $1 AND native_id = $2 FOR UPDATE",
        )
        .bind(pull_request_id)
        .bind(native_id)
        .fetch_optional(&mut *txn)
        .await
    }

    /// Writes the review over its locked row (the caller applied the vendor's state rule).
    pub async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        use OnConflict::{Coalesce, Keep, KeepStored, Replace};
        let mut row = Upsert::new("review");
        row.set("pull_request_id", Keep, self.pull_request_id)
            .set("native_id", Keep, self.native_id)
            .set("node_id", Replace, self.node_id)
            .set("author", Replace, self.author)
            .set_text("body", Replace, self.body, crate::upsert::MAX_BODY_BYTES)
            .set("state", Replace, self.state)
            .set("commit_sha", Coalesce, self.commit_sha)
            .set("submitted_at", Coalesce, self.submitted_at)
            .set("upstream_updated_at", Replace, self.updated_at)
            // A dismissal is final: the first one stored keeps its date.
            .set(
                "dismissed_at",
                KeepStored,
                self.dismissed.then_some(self.updated_at),
            );
        row.write(txn, "pull_request_id, native_id", &["mirrored_at = now()"])
            .await?;
        Ok(())
    }
}

/// A review thread's stored row, read locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
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
        sqlx::query_as(
            "SELECT id, resolved, resolution_received_at FROM review_thread
              WHERE pull_request_id = $1 AND node_id = $2 FOR UPDATE",
        )
        .bind(pull_request_id)
        .bind(node_id)
        .fetch_optional(&mut *txn)
        .await
    }

    /// The row of thread `node_id` of a pull request, created when missing, for a comment that
    /// names its thread but not its resolution state (which stays as stored); `latest` moves
    /// the thread's last activity forward only. Returns the row id.
    pub async fn ensure(
        txn: &mut sqlx::PgConnection,
        pull_request_id: Uuid,
        node_id: &str,
        path: Option<&str>,
        latest: OffsetDateTime,
    ) -> Result<Uuid, sqlx::Error> {
        use OnConflict::{Coalesce, Greatest, Keep};
        let mut row = Upsert::new("review_thread");
        row.set("pull_request_id", Keep, pull_request_id)
            .set("node_id", Keep, node_id)
            .set("path", Coalesce, path)
            .set("upstream_updated_at", Greatest, Some(latest));
        row.write(txn, "pull_request_id, node_id", &["mirrored_at = now()"])
            .await
    }

    /// Writes the thread over its locked row (the caller compared the dates); a resolution
    /// already stored keeps its date and author. Returns the row id.
    pub async fn write(&self, txn: &mut sqlx::PgConnection) -> Result<Uuid, sqlx::Error> {
        use OnConflict::{Coalesce, Greatest, Keep, Replace, SinceRise};
        let mut row = Upsert::new("review_thread");
        // A resolution already stored keeps its date and author until an unresolve.
        row.set("pull_request_id", Keep, self.pull_request_id)
            .set("node_id", Keep, self.node_id)
            .set("path", Coalesce, self.path)
            .set("resolved", Replace, self.resolved)
            .set(
                "resolved_at",
                SinceRise("resolved"),
                self.resolved.then_some(self.received_at),
            )
            .set(
                "resolved_by",
                SinceRise("resolved"),
                self.resolved_by.filter(|_| self.resolved),
            )
            .set("upstream_updated_at", Greatest, self.latest)
            .set("resolution_received_at", Replace, self.received_at);
        row.write(txn, "pull_request_id, node_id", &["mirrored_at = now()"])
            .await
    }
}
