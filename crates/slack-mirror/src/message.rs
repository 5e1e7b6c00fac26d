//! `slack_message`: a consented channel's messages, one row per channel and `ts`, replies by
//! `thread_ts`, authors by Slack user id only. Writes only move forward: an edit applies only
//! with a later `edited.ts` (`lifecycle_core::forward::slack_edit`), a tombstone is final, and a
//! tombstone of a ts never seen keeps a late copy from being inserted.

use lifecycle_core::forward::{Freshness, SlackTs, slack_edit};
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::channel::Channel;

/// A file shared in a message: its id, name and type (never its content).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileRef {
    pub id: String,
    pub name: Option<String>,
    pub mimetype: Option<String>,
}

/// A message as Slack reported it (an event, or a page of history or replies).
#[derive(Debug, Clone, Default)]
pub struct Incoming {
    pub thread_ts: Option<SlackTs>,
    pub user: Option<String>,
    pub subtype: Option<String>,
    pub text: Option<String>,
    pub files: Vec<FileRef>,
    pub edited_ts: Option<SlackTs>,
    pub latest_reply: Option<SlackTs>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// A message not kept before: posted.
    Inserted(Uuid),
    /// A later edit of a kept message.
    Edited(Uuid),
    /// A kept message deleted at Slack.
    Tombstoned(Uuid),
    /// Already there, older, or already deleted.
    Unchanged,
}

#[derive(sqlx::FromRow)]
struct Stored {
    id: Uuid,
    edited_ts: Option<String>,
    deleted: bool,
}

async fn lock(
    conn: &mut PgConnection,
    channel_id: Uuid,
    ts: SlackTs,
) -> Result<Option<Stored>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, edited_ts::text AS edited_ts, deleted_at IS NOT NULL AS deleted
           FROM slack_message WHERE channel_id = $1 AND ts = $2::numeric FOR UPDATE",
    )
    .bind(channel_id)
    .bind(ts.to_string())
    .fetch_optional(&mut *conn)
    .await
}

fn files_json(files: &[FileRef]) -> Option<serde_json::Value> {
    (!files.is_empty()).then(|| serde_json::to_value(files).unwrap_or_default())
}

/// Stores `m` in `channel` (whose consent admitted it): inserted when new, edited when it
/// carries a later `edited.ts` than the kept copy, unchanged otherwise; a tombstoned message
/// never changes again. A thread parent's `latest_reply` only rises.
pub async fn put(
    conn: &mut PgConnection,
    channel: &Channel,
    ts: SlackTs,
    m: &Incoming,
) -> Result<Written, sqlx::Error> {
    // New messages are the common case: insert first, compare only when one is kept.
    let inserted: Option<(Uuid,)> = sqlx::query_as(
        "INSERT INTO slack_message (id, channel_id, connection_id, ts, thread_ts, user_id,
                                    subtype, text, files, edited_ts, latest_reply)
         VALUES ($1, $2, $3, $4::numeric, $5::numeric, $6, $7, $8, $9, $10::numeric,
                 $11::numeric)
         ON CONFLICT (channel_id, ts) DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(channel.id)
    .bind(channel.connection_id)
    .bind(ts.to_string())
    .bind(m.thread_ts.filter(|t| *t != ts).map(|t| t.to_string()))
    .bind(&m.user)
    .bind(&m.subtype)
    .bind(&m.text)
    .bind(files_json(&m.files).map(sqlx::types::Json))
    .bind(m.edited_ts.map(|t| t.to_string()))
    .bind(m.latest_reply.map(|t| t.to_string()))
    .fetch_optional(&mut *conn)
    .await?;
    if let Some((id,)) = inserted {
        return Ok(Written::Inserted(id));
    }
    // Kept already (or tombstoned): compare with the locked row.
    let Some(stored) = lock(conn, channel.id, ts).await? else {
        return Ok(Written::Unchanged);
    };
    if stored.deleted {
        return Ok(Written::Unchanged);
    }
    if let Some(latest) = m.latest_reply {
        sqlx::query(
            "UPDATE slack_message SET latest_reply = GREATEST(latest_reply, $2::numeric)
              WHERE id = $1",
        )
        .bind(stored.id)
        .bind(latest.to_string())
        .execute(&mut *conn)
        .await?;
    }
    let kept = stored.edited_ts.and_then(|t| t.parse().ok());
    if slack_edit(kept, m.edited_ts) != Freshness::Apply {
        return Ok(Written::Unchanged);
    }
    sqlx::query(
        "UPDATE slack_message SET text = $2, files = $3, edited_ts = $4::numeric, updated_at = now()
          WHERE id = $1",
    )
    .bind(stored.id)
    .bind(&m.text)
    .bind(files_json(&m.files).map(sqlx::types::Json))
    .bind(m.edited_ts.map(|t| t.to_string()))
    .execute(&mut *conn)
    .await?;
    Ok(Written::Edited(stored.id))
}

/// Tombstones the message `ts` of `channel`: its text and files cleared, dated `at`. A ts never
/// kept gets an empty tombstone (no event: nothing of it was kept), so a late copy never inserts
/// it.
pub async fn tombstone(
    conn: &mut PgConnection,
    channel: &Channel,
    ts: SlackTs,
    at: OffsetDateTime,
) -> Result<Written, sqlx::Error> {
    let row: Option<(Uuid, bool)> = sqlx::query_as(
        "INSERT INTO slack_message (id, channel_id, connection_id, ts, deleted_at)
         VALUES ($1, $2, $3, $4::numeric, $5)
         ON CONFLICT (channel_id, ts) DO UPDATE
            SET text = NULL, files = NULL, deleted_at = EXCLUDED.deleted_at, updated_at = now()
          WHERE slack_message.deleted_at IS NULL
         RETURNING id, (xmax = 0) AS inserted",
    )
    .bind(Uuid::now_v7())
    .bind(channel.id)
    .bind(channel.connection_id)
    .bind(ts.to_string())
    .bind(at)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        Some((id, false)) => Written::Tombstoned(id),
        _ => Written::Unchanged,
    })
}

/// A kept message as operators read it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct View {
    pub id: Uuid,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub user: Option<String>,
    pub subtype: Option<String>,
    pub text: Option<String>,
    pub files: Option<sqlx::types::Json<Vec<FileRef>>>,
    pub edited_ts: Option<String>,
    pub deleted_at: Option<OffsetDateTime>,
}

/// A channel's messages after `after`, oldest first, at most `limit`.
pub async fn page<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    channel_id: Uuid,
    after: Option<SlackTs>,
    limit: i64,
) -> Result<Vec<View>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, ts::text AS ts, thread_ts::text AS thread_ts, user_id AS user, subtype, text,
                files, edited_ts::text AS edited_ts, deleted_at
           FROM slack_message
          WHERE channel_id = $1 AND ($2::numeric IS NULL OR ts > $2::numeric)
          ORDER BY ts LIMIT $3",
    )
    .bind(channel_id)
    .bind(after.map(|t| t.to_string()))
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Thread parents of a channel, at or after `since`, whose newest reply Slack reported is newer
/// than what a replay has read of the thread: `(parent ts, latest reply)`, oldest first.
pub async fn threads_to_read<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    channel_id: Uuid,
    since: SlackTs,
) -> Result<Vec<(SlackTs, SlackTs)>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT ts::text, latest_reply::text FROM slack_message
          WHERE channel_id = $1 AND ts >= $2::numeric AND deleted_at IS NULL
            AND latest_reply IS NOT NULL
            AND latest_reply > COALESCE(replies_read, 0)
          ORDER BY ts",
    )
    .bind(channel_id)
    .bind(since.to_string())
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(ts, latest)| Some((ts.parse().ok()?, latest.parse().ok()?)))
        .collect())
}

/// Records that a replay read the thread of `parent` up to `latest`.
pub async fn mark_thread_read<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    channel_id: Uuid,
    parent: SlackTs,
    latest: SlackTs,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE slack_message SET replies_read = GREATEST(replies_read, $3::numeric)
          WHERE channel_id = $1 AND ts = $2::numeric",
    )
    .bind(channel_id)
    .bind(parent.to_string())
    .bind(latest.to_string())
    .execute(db)
    .await?;
    Ok(())
}
