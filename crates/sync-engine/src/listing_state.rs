//! Per-scope listing state, owned by the engine for every vendor: one row per scope and item
//! class (`listing_state`) with the incremental watermark and a requested BACKFILL's batch
//! position. A vendor names its scope by kind and id ([`ScopeKey`]) and declares those rows for
//! erasure with its scopes; it never writes the table itself.
//!
//! The watermark only advances (a write behind it changes nothing), and a vendor holds it back
//! to the oldest change it did not read whole ([`held_back`]), so the next filtered read reads
//! that again.

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

/// A scope as the listing state names it: its kind (`repository`, `channel`, `collection`) and
/// its stored row's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeKey {
    pub kind: &'static str,
    pub id: Uuid,
}

impl ScopeKey {
    /// A mirrored repository (the forges' scope).
    pub fn repository(id: Uuid) -> Self {
        ScopeKey {
            kind: "repository",
            id,
        }
    }
}

/// One class's listing state in one scope; a scope never listed has the default (no watermark,
/// no backfill).
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct ListingState {
    /// The newest change a clean listing read, held back by what was not read whole: the next
    /// filtered listing reads from (just before) it.
    pub watermark: Option<OffsetDateTime>,
    /// A requested BACKFILL has batches left to read.
    pub backfill_pending: bool,
    /// Where the next batch resumes (`None`: from the first page).
    pub backfill_cursor: Option<String>,
    /// The manual BACKFILL job that requested the pending backfill.
    pub backfill_requested_by: Option<Uuid>,
    /// The job whose batch was read last (a request takes one batch per scope).
    pub backfill_batch_job: Option<Uuid>,
    /// When the last batch ended (a scheduled drain waits for it to cool).
    pub backfill_batch_at: Option<OffsetDateTime>,
}

/// The scope's listing state of `class`.
pub async fn load(pool: &PgPool, key: ScopeKey, class: &str) -> Result<ListingState, sqlx::Error> {
    let row: Option<ListingState> = sqlx::query_as(
        "SELECT watermark, backfill_pending, backfill_cursor, backfill_requested_by,
                backfill_batch_job, backfill_batch_at
           FROM listing_state WHERE scope_kind = $1 AND scope_id = $2 AND class = $3",
    )
    .bind(key.kind)
    .bind(key.id)
    .bind(class)
    .fetch_optional(pool)
    .await?;
    Ok(row.unwrap_or_default())
}

/// The watermark a clean listing earned: the newest change it read, held back to `unread`, the
/// oldest change of what it did not read whole (a vendor's nested reads), if any.
pub fn held_back(newest: OffsetDateTime, unread: Option<OffsetDateTime>) -> OffsetDateTime {
    unread.map_or(newest, |unread| unread.min(newest))
}

/// Moves the watermark of `class` in the scope to `to`, never back: a watermark only advances.
pub async fn advance_watermark(
    pool: &PgPool,
    key: ScopeKey,
    class: &str,
    to: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO listing_state (scope_kind, scope_id, class, watermark)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (scope_kind, scope_id, class) DO UPDATE
            SET watermark = GREATEST(listing_state.watermark, $4)",
    )
    .bind(key.kind)
    .bind(key.id)
    .bind(class)
    .bind(to)
    .execute(pool)
    .await?;
    Ok(())
}

/// Starts a backfill of `class` in the scope, requested by the manual BACKFILL `job`: pending,
/// from the first page.
pub async fn request_backfill(
    pool: &PgPool,
    key: ScopeKey,
    class: &str,
    job: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO listing_state
                (scope_kind, scope_id, class, backfill_pending, backfill_cursor, backfill_requested_by)
         VALUES ($1, $2, $3, true, NULL, $4)
         ON CONFLICT (scope_kind, scope_id, class) DO UPDATE
            SET backfill_pending = true, backfill_cursor = NULL,
                backfill_requested_by = $4",
    )
    .bind(key.kind)
    .bind(key.id)
    .bind(class)
    .bind(job)
    .execute(pool)
    .await?;
    Ok(())
}

/// How one backfill batch ended, as [`record_batch`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEnd<'a> {
    /// Batches remain (the listing did not reach its end).
    pub pending: bool,
    /// The cursor after the last page written; `None` keeps the stored one.
    pub last_cursor: Option<&'a str>,
    /// The job that read the batch.
    pub job: Uuid,
    /// The batch stopped at its page limit: this job has taken its batch of the scope.
    pub batch_full: bool,
}

/// Keeps a batch's end: progress is kept page by page, so a later batch resumes after the last
/// page written; a finished backfill forgets its cursor.
pub async fn record_batch(
    pool: &PgPool,
    key: ScopeKey,
    class: &str,
    end: &BatchEnd<'_>,
) -> Result<(), sqlx::Error> {
    let batch_job = (end.pending && end.batch_full).then_some(end.job);
    sqlx::query(
        "INSERT INTO listing_state
                (scope_kind, scope_id, class, backfill_pending, backfill_cursor,
                 backfill_requested_by, backfill_batch_job, backfill_batch_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now())
         ON CONFLICT (scope_kind, scope_id, class) DO UPDATE
            SET backfill_pending = $4,
                backfill_cursor = CASE WHEN $4 THEN coalesce($5, listing_state.backfill_cursor) END,
                backfill_requested_by = coalesce(listing_state.backfill_requested_by, $6),
                backfill_batch_job = coalesce($7, listing_state.backfill_batch_job),
                backfill_batch_at = now()",
    )
    .bind(key.kind)
    .bind(key.id)
    .bind(class)
    .bind(end.pending)
    .bind(end.last_cursor)
    .bind(end.job)
    .bind(batch_job)
    .execute(pool)
    .await?;
    Ok(())
}
