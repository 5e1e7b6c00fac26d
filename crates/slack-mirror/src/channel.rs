//! `slack_channel`: every channel a connection's directory listed, with where its consent stands
//! (`lifecycle_core::slack::ChannelStatus`), why, and the `consent_ts` nothing older than which
//! is kept. The status only moves under the row's lock ([`lock`]), so a message's admission and
//! a pause or withdrawal never interleave.

use lifecycle_core::forward::SlackTs;
use lifecycle_core::slack::ChannelStatus;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

/// A stored channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    /// Slack's id (`C...`, `G...`).
    pub slack_id: String,
    pub name: Option<String>,
    pub is_private: bool,
    pub status: ChannelStatus,
    pub reason: Option<String>,
    pub consent_ts: Option<SlackTs>,
    /// When a PAUSED channel was paused: messages said before it are still kept.
    pub paused_ts: Option<SlackTs>,
    pub status_at: OffsetDateTime,
    pub last_replay_at: Option<OffsetDateTime>,
    pub dropped: i64,
}

/// Names the channel in logs and reasons: `#name (C...)`.
impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "#{name} ({})", self.slack_id),
            None => f.write_str(&self.slack_id),
        }
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    connection_id: Uuid,
    workspace_id: Uuid,
    slack_id: String,
    name: Option<String>,
    is_private: bool,
    status: String,
    reason: Option<String>,
    consent_ts: Option<String>,
    paused_ts: Option<String>,
    status_at: OffsetDateTime,
    last_replay_at: Option<OffsetDateTime>,
    dropped: i64,
}

impl From<Row> for Channel {
    fn from(r: Row) -> Self {
        Channel {
            id: r.id,
            connection_id: r.connection_id,
            workspace_id: r.workspace_id,
            slack_id: r.slack_id,
            name: r.name,
            is_private: r.is_private,
            // The table's check admits only the four; anything else keeps nothing.
            status: ChannelStatus::parse(&r.status).unwrap_or(ChannelStatus::None),
            reason: r.reason,
            consent_ts: r.consent_ts.and_then(|t| t.parse().ok()),
            paused_ts: r.paused_ts.and_then(|t| t.parse().ok()),
            status_at: r.status_at,
            last_replay_at: r.last_replay_at,
            dropped: r.dropped,
        }
    }
}

/// The columns of [`Row`]: our constant text only (the queries are built from it).
macro_rules! columns {
    () => {
        "id, connection_id, workspace_id, slack_id, name, is_private, status, reason, \
         consent_ts::text AS consent_ts, paused_ts::text AS paused_ts, status_at, last_replay_at, \
         dropped"
    };
}

/// The connection's channel `slack_id`, locked until the caller's transaction ends.
pub async fn lock(
    conn: &mut PgConnection,
    connection_id: Uuid,
    slack_id: &str,
) -> Result<Option<Channel>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM slack_channel
          WHERE connection_id = $1 AND slack_id = $2 FOR UPDATE"
    ))
    .bind(connection_id)
    .bind(slack_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(Channel::from))
}

/// The connection's channel by our id, locked until the caller's transaction ends.
pub async fn lock_by_id(
    conn: &mut PgConnection,
    connection_id: Uuid,
    id: Uuid,
) -> Result<Option<Channel>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM slack_channel WHERE connection_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(connection_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(Channel::from))
}

/// One channel of a workspace, read without a lock (control-api).
pub async fn find_in_workspace<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<Channel>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM slack_channel WHERE workspace_id = $1 AND id = $2"
    ))
    .bind(workspace_id)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Channel::from))
}

/// A workspace's channels, by connection and name.
pub async fn of_workspace<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
) -> Result<Vec<Channel>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM slack_channel WHERE workspace_id = $1
          ORDER BY connection_id, name NULLS LAST, slack_id"
    ))
    .bind(workspace_id)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Channel::from).collect())
}

/// A connection's ACTIVE channels, the stalest replay first.
pub async fn active<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection_id: Uuid,
) -> Result<Vec<Channel>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM slack_channel WHERE connection_id = $1 AND status = 'active'
          ORDER BY last_replay_at NULLS FIRST, slack_id"
    ))
    .bind(connection_id)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Channel::from).collect())
}

/// What the directory (or a channel event) says of a channel.
#[derive(Debug, Clone)]
pub struct Seen<'a> {
    pub slack_id: &'a str,
    pub name: Option<&'a str>,
    pub is_private: bool,
}

/// Records a channel the connection sees: new ones are NONE; a known one takes the name Slack
/// gives it now (a rename). Returns the row and whether it was new.
pub async fn upsert_seen(
    conn: &mut PgConnection,
    connection_id: Uuid,
    workspace_id: Uuid,
    seen: &Seen<'_>,
) -> Result<(Channel, bool), sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Upserted {
        #[sqlx(flatten)]
        row: Row,
        inserted: bool,
    }
    let up: Upserted = sqlx::query_as(concat!(
        "INSERT INTO slack_channel (id, connection_id, workspace_id, slack_id, name, is_private)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (connection_id, slack_id) DO UPDATE
            SET name = COALESCE(EXCLUDED.name, slack_channel.name),
                is_private = EXCLUDED.is_private,
                updated_at = now()
         RETURNING ",
        columns!(),
        ", (xmax = 0) AS inserted"
    ))
    .bind(Uuid::now_v7())
    .bind(connection_id)
    .bind(workspace_id)
    .bind(seen.slack_id)
    .bind(seen.name)
    .bind(seen.is_private)
    .fetch_one(&mut *conn)
    .await?;
    Ok((Channel::from(up.row), up.inserted))
}

/// Renames a known channel; `false` when the connection has no such channel.
pub async fn rename(
    conn: &mut PgConnection,
    connection_id: Uuid,
    slack_id: &str,
    name: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE slack_channel SET name = $3, updated_at = now()
          WHERE connection_id = $1 AND slack_id = $2",
    )
    .bind(connection_id)
    .bind(slack_id)
    .bind(name)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Moves a locked channel to `status` with `reason`; `consent_ts` is set when given (ACTIVE by
/// an announcement or a resume) and cleared when the channel goes back to NONE.
pub async fn set_status(
    conn: &mut PgConnection,
    id: Uuid,
    status: ChannelStatus,
    reason: Option<&str>,
    consent_ts: Option<SlackTs>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE slack_channel
            SET status = $2, reason = $3,
                consent_ts = CASE WHEN $2 = 'none' THEN NULL
                                  ELSE COALESCE($4::numeric, consent_ts) END,
                paused_ts = CASE WHEN $2 = 'paused' THEN paused_ts ELSE NULL END,
                status_at = now(), updated_at = now()
          WHERE id = $1",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(reason)
    .bind(consent_ts.map(|t| t.to_string()))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Pauses a locked channel at `at` with `reason`: what was said before `at` is still kept.
pub async fn pause(
    conn: &mut PgConnection,
    id: Uuid,
    reason: &str,
    at: Option<SlackTs>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE slack_channel
            SET status = 'paused', reason = $2, paused_ts = $3::numeric,
                status_at = now(), updated_at = now()
          WHERE id = $1",
    )
    .bind(id)
    .bind(reason)
    .bind(at.map(|t| t.to_string()))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records why a channel that stays where it is could not move (a consent whose announcement
/// was refused).
pub async fn set_reason(
    conn: &mut PgConnection,
    id: Uuid,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE slack_channel SET reason = $2, updated_at = now() WHERE id = $1")
        .bind(id)
        .bind(reason)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Counts a dropped message against the channel, when the connection has it.
pub async fn count_drop<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection_id: Uuid,
    slack_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE slack_channel SET dropped = dropped + 1
          WHERE connection_id = $1 AND slack_id = $2",
    )
    .bind(connection_id)
    .bind(slack_id)
    .execute(db)
    .await?;
    Ok(())
}

/// Stamps a replay of the channel that read it to the end.
pub async fn mark_replayed<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    id: Uuid,
    at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE slack_channel SET last_replay_at = $2 WHERE id = $1")
        .bind(id)
        .bind(at)
        .execute(db)
        .await?;
    Ok(())
}

/// Erases every message kept of a locked channel (a withdrawal); returns how many.
pub async fn erase_messages(conn: &mut PgConnection, id: Uuid) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("DELETE FROM slack_message WHERE channel_id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Erases a locked channel whole, its messages with it (Slack deleted the channel).
pub async fn delete(conn: &mut PgConnection, id: Uuid) -> Result<u64, sqlx::Error> {
    let messages = erase_messages(conn, id).await?;
    sqlx::query("DELETE FROM slack_channel WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(messages)
}

/// Moves every ACTIVE channel of a connection's consent to `at`: a connection resumed after a
/// suspension keeps nothing from the gap. Returns the channels moved.
pub async fn restart_consent(
    conn: &mut PgConnection,
    connection_id: Uuid,
    at: SlackTs,
) -> Result<Vec<Channel>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "UPDATE slack_channel SET consent_ts = $2::numeric, status_at = now(), updated_at = now()
          WHERE connection_id = $1 AND status = 'active' AND consent_ts < $2::numeric
         RETURNING ",
        columns!()
    ))
    .bind(connection_id)
    .bind(at.to_string())
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(Channel::from).collect())
}
