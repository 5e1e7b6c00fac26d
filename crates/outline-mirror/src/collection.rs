//! `outline_collection`: the collections a connection reads, each with its version (Outline's
//! `updatedAt`), its tombstone, and where its reconcile stands: awaiting a clean pass until a
//! RECONCILIATION lists it whole, with the outcome of its last pass. A document naming a
//! collection not listed yet creates it without a version ([`ensure`]), so every document has its
//! collection's row.

use lifecycle_core::Timestamp;
use lifecycle_core::outline::document::{
    DeletionWrite, Stored, VersionWrite, on_deletion, on_version,
};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::OutlineConnection;
use crate::document::{self, DocumentKey};

/// A collection as Outline reports it (`collections.list`, `collections.info`, a delivery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionPayload {
    pub outline_id: String,
    pub name: Option<String>,
    pub url_id: Option<String>,
    pub updated_at: Timestamp,
    /// Set when Outline reports it deleted: the payload is then a deletion at that date.
    pub deleted_at: Option<Timestamp>,
}

/// A stored collection.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Collection {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub outline_id: String,
    pub name: Option<String>,
    pub url_id: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub updated_at: Option<Timestamp>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub deleted_at: Option<Timestamp>,
    pub awaiting_clean_pass: bool,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_clean_pass_at: Option<Timestamp>,
    pub last_outcome: Option<String>,
}

/// The columns of [`Collection`]: our constant text only (the queries are built from it).
macro_rules! columns {
    () => {
        "id, connection_id, workspace_id, outline_id, name, url_id, updated_at, deleted_at, \
         awaiting_clean_pass, last_clean_pass_at, last_outcome"
    };
}

/// What a collection write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CollectionWritten {
    Inserted(Collection),
    /// A newer version: its name, url or date changed.
    Updated(Collection),
    /// A newer version of a tombstoned collection: restored.
    Restored(Collection),
    /// Deleted at Outline: the collection and the documents it held, each tombstoned.
    Tombstoned {
        collection: Collection,
        documents: Vec<DocumentKey>,
    },
    /// Equal or older, or the same deletion again.
    Unchanged,
}

/// The connection's collection `outline_id`, locked until the caller's transaction ends.
pub async fn lock(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    outline_id: &str,
) -> Result<Option<Collection>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM outline_collection WHERE connection_id = $1 AND outline_id = $2 FOR UPDATE"
    ))
    .bind(connection.id())
    .bind(outline_id)
    .fetch_optional(&mut *txn)
    .await
}

/// The row id of the connection's collection `outline_id`, created without a version when no
/// listing or delivery has reported it yet (a document named it first).
pub async fn ensure(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    outline_id: &str,
) -> Result<Uuid, sqlx::Error> {
    loop {
        // Held already is the common case (every write of a document names its collection):
        // looked up first, inserted only when missing.
        let held: Option<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM outline_collection WHERE connection_id = $1 AND outline_id = $2",
        )
        .bind(connection.id())
        .bind(outline_id)
        .fetch_optional(&mut *txn)
        .await?;
        if let Some((id,)) = held {
            return Ok(id);
        }
        let inserted: Option<(Uuid,)> = sqlx::query_as(
            "INSERT INTO outline_collection (id, connection_id, workspace_id, outline_id)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (connection_id, outline_id) DO NOTHING
             RETURNING id",
        )
        .bind(Uuid::now_v7())
        .bind(connection.id())
        .bind(connection.workspace_id())
        .bind(outline_id)
        .fetch_optional(&mut *txn)
        .await?;
        if let Some((id,)) = inserted {
            return Ok(id);
        }
        // A concurrent writer committed it while the insert waited (or rolled it back): the
        // next statement's snapshot decides.
    }
}

fn stored(c: &Collection) -> Stored {
    Stored {
        updated_at: c.updated_at,
        deleted_at: c.deleted_at,
    }
}

/// Writes a collection Outline reported: inserted when new, written when its version is
/// strictly newer (restoring a tombstoned one), unchanged otherwise; a payload carrying
/// `deletedAt` is that deletion ([`tombstone`]).
pub async fn apply(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    payload: &CollectionPayload,
) -> Result<CollectionWritten, sqlx::Error> {
    if let Some(at) = payload.deleted_at {
        return tombstone(txn, connection, &payload.outline_id, at).await;
    }
    let inserted: Option<Collection> = sqlx::query_as(concat!(
        "INSERT INTO outline_collection (id, connection_id, workspace_id, outline_id, name,
                                         url_id, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (connection_id, outline_id) DO NOTHING
         RETURNING ",
        columns!()
    ))
    .bind(Uuid::now_v7())
    .bind(connection.id())
    .bind(connection.workspace_id())
    .bind(&payload.outline_id)
    .bind(&payload.name)
    .bind(&payload.url_id)
    .bind(payload.updated_at)
    .fetch_optional(&mut *txn)
    .await?;
    if let Some(collection) = inserted {
        return Ok(CollectionWritten::Inserted(collection));
    }
    let Some(held) = lock(txn, connection, &payload.outline_id).await? else {
        return Ok(CollectionWritten::Unchanged);
    };
    let write = on_version(Some(&stored(&held)), payload.updated_at);
    match write {
        VersionWrite::Unchanged => return Ok(CollectionWritten::Unchanged),
        VersionWrite::Behind => {
            // Still deleted: its version moves forward, its name stays cleared.
            sqlx::query(
                "UPDATE outline_collection
                    SET url_id = COALESCE($2, url_id), updated_at = $3, seen_at = now()
                  WHERE id = $1",
            )
            .bind(held.id)
            .bind(&payload.url_id)
            .bind(payload.updated_at)
            .execute(&mut *txn)
            .await?;
            return Ok(CollectionWritten::Unchanged);
        }
        VersionWrite::Insert | VersionWrite::Update | VersionWrite::Restore => {}
    }
    let written: Collection = sqlx::query_as(concat!(
        "UPDATE outline_collection
            SET name = $2, url_id = $3, updated_at = $4, deleted_at = NULL, seen_at = now()
          WHERE id = $1
         RETURNING ",
        columns!()
    ))
    .bind(held.id)
    .bind(&payload.name)
    .bind(&payload.url_id)
    .bind(payload.updated_at)
    .fetch_one(&mut *txn)
    .await?;
    Ok(match write {
        VersionWrite::Restore => CollectionWritten::Restored(written),
        _ => CollectionWritten::Updated(written),
    })
}

/// Tombstones the connection's collection `outline_id`, deleted at Outline at `at`: its name
/// cleared, and every live document it holds that is not newer than the deletion tombstoned
/// too. A collection never seen keeps an empty tombstone, so a late older copy never inserts it.
/// Reported again, it tombstones the documents written into it since (a version older than the
/// deletion delivered after it); `Tombstoned` then names only those.
///
/// Lock order: a collection before its documents (a document write takes its collection's key
/// share through the foreign key, so it waits for a deletion in progress).
pub async fn tombstone(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    outline_id: &str,
    at: Timestamp,
) -> Result<CollectionWritten, sqlx::Error> {
    let held = lock(txn, connection, outline_id).await?;
    match on_deletion(held.as_ref().map(stored).as_ref(), at) {
        DeletionWrite::InsertTombstone => {
            let inserted = sqlx::query(
                "INSERT INTO outline_collection (id, connection_id, workspace_id, outline_id,
                                                 deleted_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (connection_id, outline_id) DO NOTHING",
            )
            .bind(Uuid::now_v7())
            .bind(connection.id())
            .bind(connection.workspace_id())
            .bind(outline_id)
            .bind(at)
            .execute(&mut *txn)
            .await?;
            if inserted.rows_affected() == 0 {
                // Inserted by a concurrent write since the lock found nothing: decide again.
                return Box::pin(tombstone(txn, connection, outline_id, at)).await;
            }
            Ok(CollectionWritten::Unchanged)
        }
        // Already tombstoned: its deletion is reported again (a redelivery, a confirmed vanish).
        // A document version that arrived after the deletion but predates it was written live;
        // it goes now.
        DeletionWrite::Redate | DeletionWrite::Unchanged => {
            let Some(held) = held else {
                return Ok(CollectionWritten::Unchanged);
            };
            let Some(held_at) = held.deleted_at else {
                // Restored since the deletion: nothing of it is deleted.
                return Ok(CollectionWritten::Unchanged);
            };
            let at = held_at.max(at);
            let collection: Collection = sqlx::query_as(concat!(
                "UPDATE outline_collection SET deleted_at = $2 WHERE id = $1 RETURNING ",
                columns!()
            ))
            .bind(held.id)
            .bind(at)
            .fetch_one(&mut *txn)
            .await?;
            let documents = document::tombstone_in_collection(txn, connection, held.id, at).await?;
            if documents.is_empty() {
                return Ok(CollectionWritten::Unchanged);
            }
            Ok(CollectionWritten::Tombstoned {
                collection,
                documents,
            })
        }
        DeletionWrite::Tombstone => {
            let Some(held) = held else {
                return Ok(CollectionWritten::Unchanged);
            };
            let collection: Collection = sqlx::query_as(concat!(
                "UPDATE outline_collection SET name = NULL, deleted_at = $2 WHERE id = $1
                 RETURNING ",
                columns!()
            ))
            .bind(held.id)
            .bind(at)
            .fetch_one(&mut *txn)
            .await?;
            let documents = document::tombstone_in_collection(txn, connection, held.id, at).await?;
            Ok(CollectionWritten::Tombstoned {
                collection,
                documents,
            })
        }
    }
}

/// The outcome of one collection's reconcile pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassOutcome {
    /// Listed whole; its vanished documents were judged.
    Clean,
    /// Not listed whole (a fault, a short page, the budget), or its sweep was held: it keeps
    /// awaiting a clean pass. The reason as the pass reports it (`budget_exhausted`, ...).
    NotClean(String),
}

/// Records a pass over the connection's collection `id`; false when it has no such collection.
pub async fn record_pass<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection: &OutlineConnection,
    id: Uuid,
    outcome: &PassOutcome,
) -> Result<bool, sqlx::Error> {
    let (clean, reason) = match outcome {
        PassOutcome::Clean => (true, "clean"),
        PassOutcome::NotClean(reason) => (false, reason.as_str()),
    };
    let done = sqlx::query(
        "UPDATE outline_collection
            SET awaiting_clean_pass = NOT $3,
                last_clean_pass_at = CASE WHEN $3 THEN now() ELSE last_clean_pass_at END,
                last_outcome = $4
          WHERE connection_id = $1 AND id = $2",
    )
    .bind(connection.id())
    .bind(id)
    .bind(clean)
    .bind(reason)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks every live collection of the connection as awaiting a clean pass (after an INITIAL,
/// which lists only recent documents).
pub async fn await_clean_passes<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection: &OutlineConnection,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE outline_collection SET awaiting_clean_pass = true
          WHERE connection_id = $1 AND deleted_at IS NULL AND NOT awaiting_clean_pass",
    )
    .bind(connection.id())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// The connection's live collections, oldest row first.
pub async fn live<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection: &OutlineConnection,
) -> Result<Vec<Collection>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM outline_collection WHERE connection_id = $1 AND deleted_at IS NULL ORDER BY id"
    ))
    .bind(connection.id())
    .fetch_all(db)
    .await
}

/// The connection's live collections a scheduled pass takes: those awaiting a clean pass, and
/// those whose last clean pass is older than `cooldown`.
pub async fn due<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection: &OutlineConnection,
    cooldown: std::time::Duration,
) -> Result<Vec<Collection>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM outline_collection
          WHERE connection_id = $1 AND deleted_at IS NULL
            AND (awaiting_clean_pass OR last_clean_pass_at IS NULL
                 OR last_clean_pass_at < now() - make_interval(secs => $2))
          ORDER BY id"
    ))
    .bind(connection.id())
    .bind(cooldown.as_secs_f64())
    .fetch_all(db)
    .await
}

/// A workspace's collections, from every Outline connection of it (control-api).
pub async fn in_workspace<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
) -> Result<Vec<Collection>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM outline_collection WHERE workspace_id = $1 ORDER BY id"
    ))
    .bind(workspace_id)
    .fetch_all(db)
    .await
}

/// One collection of a workspace; `None` for another workspace's.
pub async fn find_in_workspace<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<Collection>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM outline_collection WHERE workspace_id = $1 AND id = $2"
    ))
    .bind(workspace_id)
    .bind(id)
    .fetch_optional(db)
    .await
}
