//! `outline_document`: a connection's documents, keyed by Outline's id. Every path (a delivery,
//! a listing's page, a `documents.info` read) writes through [`apply`] or [`tombstone`] with the
//! row locked, and the rules of `lifecycle_core::outline::document` decide: a version applies
//! only when strictly newer than what the row reflects; a deletion tombstones it at once, dated,
//! with its title and text cleared, until a strictly newer version restores it. A title change
//! and a move to another collection or parent are metadata of the same row.

use lifecycle_core::Timestamp;
use lifecycle_core::outline::document::{
    DeletionWrite, Stored, VersionWrite, on_deletion, on_version,
};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::OutlineConnection;
use crate::collection;

/// A document as Outline reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentPayload {
    pub outline_id: String,
    /// The collection it is in (`collectionId`).
    pub collection_outline_id: String,
    pub parent_outline_id: Option<String>,
    pub title: Option<String>,
    /// `None` when the read did not carry the text: the stored text is kept.
    pub text: Option<String>,
    pub url_id: Option<String>,
    pub created_at: Option<Timestamp>,
    /// `updatedAt`: the version, the key writes move forward by.
    pub updated_at: Timestamp,
    pub published_at: Option<Timestamp>,
    pub archived_at: Option<Timestamp>,
    /// Set when Outline reports it deleted: the payload is then a deletion at that date.
    pub deleted_at: Option<Timestamp>,
}

/// What identifies a stored document and the version a change left it at: ids and dates only,
/// what its event carries.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DocumentKey {
    pub id: Uuid,
    pub outline_id: String,
    /// The `outline_collection` row it is in.
    pub collection_id: Uuid,
    pub collection_outline_id: String,
    pub parent_outline_id: Option<String>,
    /// `None` only for a document known by its deletion alone.
    pub updated_at: Option<Timestamp>,
    pub published_at: Option<Timestamp>,
    pub deleted_at: Option<Timestamp>,
}

/// The columns of [`DocumentKey`]: our constant text only (the queries are built from it).
macro_rules! key_columns {
    () => {
        "id, outline_id, collection_id, collection_outline_id, parent_outline_id, updated_at, \
         published_at, deleted_at"
    };
}

/// What a write did; each change is one event ([`crate::events::document`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Not held before.
    Inserted(DocumentKey),
    /// A newer version that published a draft.
    Published(DocumentKey),
    /// A newer version, its text or other fields changed.
    Updated(DocumentKey),
    /// A newer version with another title.
    Renamed(DocumentKey),
    /// A newer version in another collection or under another parent (`from`: the collection it
    /// was in).
    Moved {
        document: DocumentKey,
        from_collection_outline_id: String,
    },
    /// Deleted at Outline: title and text cleared, dated.
    Tombstoned(DocumentKey),
    /// A version newer than its deletion.
    Restored(DocumentKey),
    /// Equal or older, the same deletion again, or a deletion of a document never held.
    Unchanged,
}

impl Written {
    /// The document a change left, if anything changed.
    pub fn document(&self) -> Option<&DocumentKey> {
        match self {
            Written::Inserted(d)
            | Written::Published(d)
            | Written::Updated(d)
            | Written::Renamed(d)
            | Written::Tombstoned(d)
            | Written::Restored(d)
            | Written::Moved { document: d, .. } => Some(d),
            Written::Unchanged => None,
        }
    }
}

#[derive(sqlx::FromRow)]
struct Held {
    id: Uuid,
    outline_id: String,
    collection_outline_id: String,
    parent_outline_id: Option<String>,
    title: Option<String>,
    updated_at: Option<Timestamp>,
    published_at: Option<Timestamp>,
    deleted_at: Option<Timestamp>,
}

impl Held {
    fn stored(&self) -> Stored {
        Stored {
            updated_at: self.updated_at,
            deleted_at: self.deleted_at,
        }
    }
}

async fn lock(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    outline_id: &str,
) -> Result<Option<Held>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, outline_id, collection_outline_id, parent_outline_id, title, updated_at,
                published_at, deleted_at
           FROM outline_document WHERE connection_id = $1 AND outline_id = $2 FOR UPDATE",
    )
    .bind(connection.id())
    .bind(outline_id)
    .fetch_optional(&mut *txn)
    .await
}

/// Writes a document Outline reported: inserted when new; written when its `updatedAt` is
/// strictly newer than what the row reflects (restoring a tombstoned one); unchanged otherwise.
/// A payload carrying `deletedAt` is that deletion ([`tombstone`]).
pub async fn apply(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    p: &DocumentPayload,
) -> Result<Written, sqlx::Error> {
    if let Some(at) = p.deleted_at {
        return tombstone(
            txn,
            connection,
            &p.outline_id,
            at,
            Some(&p.collection_outline_id),
        )
        .await;
    }
    let collection_id = collection::ensure(txn, connection, &p.collection_outline_id).await?;
    // New documents are the common case of a listing: insert first, compare only when held.
    let inserted: Option<DocumentKey> = sqlx::query_as(concat!(
        "INSERT INTO outline_document (id, connection_id, collection_id, outline_id,
                                       collection_outline_id, parent_outline_id, title, text,
                                       url_id, created_at_upstream, updated_at, published_at,
                                       archived_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (connection_id, outline_id) DO NOTHING
         RETURNING ",
        key_columns!()
    ))
    .bind(Uuid::now_v7())
    .bind(connection.id())
    .bind(collection_id)
    .bind(&p.outline_id)
    .bind(&p.collection_outline_id)
    .bind(&p.parent_outline_id)
    .bind(&p.title)
    .bind(&p.text)
    .bind(&p.url_id)
    .bind(p.created_at)
    .bind(p.updated_at)
    .bind(p.published_at)
    .bind(p.archived_at)
    .fetch_optional(&mut *txn)
    .await?;
    if let Some(key) = inserted {
        return Ok(Written::Inserted(key));
    }
    let Some(held) = lock(txn, connection, &p.outline_id).await? else {
        // Erased between the insert and the lock: nothing to write to.
        return Ok(Written::Unchanged);
    };
    write_held(txn, held, collection_id, p).await
}

/// Writes version `p` over the locked row `held` of collection row `collection_id`, as
/// [`apply`] decides it once the row is held.
async fn write_held(
    txn: &mut PgConnection,
    held: Held,
    collection_id: Uuid,
    p: &DocumentPayload,
) -> Result<Written, sqlx::Error> {
    let write = on_version(Some(&held.stored()), p.updated_at);
    match write {
        VersionWrite::Unchanged => return Ok(Written::Unchanged),
        VersionWrite::Behind => {
            // Still deleted: its metadata moves forward, its content stays cleared.
            sqlx::query(
                "UPDATE outline_document
                    SET collection_id = $2, collection_outline_id = $3, parent_outline_id = $4,
                        url_id = COALESCE($5, url_id),
                        created_at_upstream = COALESCE($6, created_at_upstream),
                        updated_at = $7, published_at = $8, archived_at = $9, seen_at = now()
                  WHERE id = $1",
            )
            .bind(held.id)
            .bind(collection_id)
            .bind(&p.collection_outline_id)
            .bind(&p.parent_outline_id)
            .bind(&p.url_id)
            .bind(p.created_at)
            .bind(p.updated_at)
            .bind(p.published_at)
            .bind(p.archived_at)
            .execute(&mut *txn)
            .await?;
            return Ok(Written::Unchanged);
        }
        VersionWrite::Insert | VersionWrite::Update | VersionWrite::Restore => {}
    }
    let key: DocumentKey = sqlx::query_as(concat!(
        "UPDATE outline_document
            SET collection_id = $2, collection_outline_id = $3, parent_outline_id = $4,
                title = $5, text = COALESCE($6, text), url_id = COALESCE($7, url_id),
                created_at_upstream = COALESCE($8, created_at_upstream), updated_at = $9,
                published_at = $10, archived_at = $11, deleted_at = NULL, seen_at = now()
          WHERE id = $1
         RETURNING ",
        key_columns!()
    ))
    .bind(held.id)
    .bind(collection_id)
    .bind(&p.collection_outline_id)
    .bind(&p.parent_outline_id)
    .bind(&p.title)
    .bind(&p.text)
    .bind(&p.url_id)
    .bind(p.created_at)
    .bind(p.updated_at)
    .bind(p.published_at)
    .bind(p.archived_at)
    .fetch_one(&mut *txn)
    .await?;
    Ok(if write == VersionWrite::Restore {
        Written::Restored(key)
    } else if held.collection_outline_id != p.collection_outline_id
        || held.parent_outline_id != p.parent_outline_id
    {
        Written::Moved {
            document: key,
            from_collection_outline_id: held.collection_outline_id,
        }
    } else if held.published_at.is_none() && p.published_at.is_some() {
        Written::Published(key)
    } else if held.title != p.title {
        Written::Renamed(key)
    } else {
        Written::Updated(key)
    })
}

/// Writes a page of documents Outline listed, each exactly as [`apply`] would, in fewer round
/// trips: the collections they name are resolved once, the documents not held yet are inserted
/// by one statement, and the held ones are locked together (in id order, as every writer locks
/// them) and compared. A payload carrying `deletedAt` goes through [`tombstone`]. Returns what
/// each write did, one per distinct document (the newest version when a page repeats one).
pub async fn apply_page(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    payloads: &[DocumentPayload],
) -> Result<Vec<Written>, sqlx::Error> {
    // One version per document: the newest, as applying them in turn would leave.
    let mut newest: std::collections::BTreeMap<&str, &DocumentPayload> = Default::default();
    for p in payloads {
        let entry = newest.entry(&p.outline_id).or_insert(p);
        if p.updated_at > entry.updated_at {
            *entry = p;
        }
    }
    let mut written = Vec::with_capacity(newest.len());
    let mut versions = Vec::with_capacity(newest.len());
    for p in newest.into_values() {
        if p.deleted_at.is_some() {
            written.push(apply(txn, connection, p).await?);
        } else {
            versions.push(p);
        }
    }
    if versions.is_empty() {
        return Ok(written);
    }
    // The collections they name, created without a version when none is held yet.
    let names: Vec<&str> = versions
        .iter()
        .map(|p| p.collection_outline_id.as_str())
        .collect();
    let mut collections: std::collections::BTreeMap<String, Uuid> =
        sqlx::query_as::<_, (String, Uuid)>(
            "SELECT outline_id, id FROM outline_collection
          WHERE connection_id = $1 AND outline_id = ANY($2)",
        )
        .bind(connection.id())
        .bind(&names)
        .fetch_all(&mut *txn)
        .await?
        .into_iter()
        .collect();
    for name in names {
        if !collections.contains_key(name) {
            let id = collection::ensure(txn, connection, name).await?;
            collections.insert(name.to_owned(), id);
        }
    }
    let collection_of = |p: &DocumentPayload| collections[p.collection_outline_id.as_str()];
    // New documents are the common case of a first listing: one insert for all of them.
    let inserted: Vec<DocumentKey> = sqlx::query_as(concat!(
        "INSERT INTO outline_document (id, connection_id, collection_id, outline_id,
                                       collection_outline_id, parent_outline_id, title, text,
                                       url_id, created_at_upstream, updated_at, published_at,
                                       archived_at)
         SELECT n.id, $1, n.collection_id, n.outline_id, n.collection_outline_id,
                n.parent_outline_id, n.title, n.text, n.url_id, n.created_at_upstream,
                n.updated_at, n.published_at, n.archived_at
           FROM UNNEST($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[],
                       $12::timestamptz[], $13::timestamptz[])
                AS n(id, collection_id, outline_id, collection_outline_id, parent_outline_id,
                     title, text, url_id, created_at_upstream, updated_at, published_at,
                     archived_at)
         ON CONFLICT (connection_id, outline_id) DO NOTHING
         RETURNING ",
        key_columns!()
    ))
    .bind(connection.id())
    .bind(versions.iter().map(|_| Uuid::now_v7()).collect::<Vec<_>>())
    .bind(
        versions
            .iter()
            .map(|p| collection_of(p))
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.outline_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.collection_outline_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.parent_outline_id.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.title.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.text.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(
        versions
            .iter()
            .map(|p| p.url_id.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(versions.iter().map(|p| p.created_at).collect::<Vec<_>>())
    .bind(versions.iter().map(|p| p.updated_at).collect::<Vec<_>>())
    .bind(versions.iter().map(|p| p.published_at).collect::<Vec<_>>())
    .bind(versions.iter().map(|p| p.archived_at).collect::<Vec<_>>())
    .fetch_all(&mut *txn)
    .await?;
    let new: std::collections::BTreeSet<String> =
        inserted.iter().map(|k| k.outline_id.clone()).collect();
    written.extend(inserted.into_iter().map(Written::Inserted));
    // The rest were held: locked together, in id order, then each compared.
    let held_ids: Vec<&str> = versions
        .iter()
        .map(|p| p.outline_id.as_str())
        .filter(|id| !new.contains(*id))
        .collect();
    if held_ids.is_empty() {
        return Ok(written);
    }
    let held: Vec<Held> = sqlx::query_as(
        "SELECT id, outline_id, collection_outline_id, parent_outline_id, title, updated_at,
                published_at, deleted_at
           FROM outline_document WHERE connection_id = $1 AND outline_id = ANY($2)
          ORDER BY outline_id
            FOR UPDATE",
    )
    .bind(connection.id())
    .bind(&held_ids)
    .fetch_all(&mut *txn)
    .await?;
    let by_id: std::collections::BTreeMap<&str, &DocumentPayload> = versions
        .iter()
        .map(|p| (p.outline_id.as_str(), *p))
        .collect();
    // A row erased between the insert and the lock has nothing to write to.
    for h in held {
        let Some(p) = by_id.get(h.outline_id.as_str()).copied() else {
            continue;
        };
        written.push(write_held(txn, h, collection_of(p), p).await?);
    }
    Ok(written)
}

/// Tombstones the connection's document `outline_id`, deleted at Outline at `at`
/// (`documents.delete`, `documents.permanent_delete`, or a confirmed vanish): title and text
/// cleared, dated. A document newer than the deletion stays. One never held gets an empty
/// tombstone when its collection is known, so a late older copy never inserts it (no event:
/// nothing of it was kept).
pub async fn tombstone(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    outline_id: &str,
    at: Timestamp,
    collection_outline_id: Option<&str>,
) -> Result<Written, sqlx::Error> {
    let held = lock(txn, connection, outline_id).await?;
    match on_deletion(held.as_ref().map(Held::stored).as_ref(), at) {
        DeletionWrite::Unchanged => Ok(Written::Unchanged),
        DeletionWrite::InsertTombstone => {
            let Some(collection_outline_id) = collection_outline_id else {
                return Ok(Written::Unchanged);
            };
            let collection_id = collection::ensure(txn, connection, collection_outline_id).await?;
            let inserted = sqlx::query(
                "INSERT INTO outline_document (id, connection_id, collection_id, outline_id,
                                               collection_outline_id, updated_at, deleted_at)
                 VALUES ($1, $2, $3, $4, $5, NULL, $6)
                 ON CONFLICT (connection_id, outline_id) DO NOTHING",
            )
            .bind(Uuid::now_v7())
            .bind(connection.id())
            .bind(collection_id)
            .bind(outline_id)
            .bind(collection_outline_id)
            .bind(at)
            .execute(&mut *txn)
            .await?;
            if inserted.rows_affected() == 0 {
                // Inserted by a concurrent write since the lock found nothing: decide again.
                return Box::pin(tombstone(txn, connection, outline_id, at, None)).await;
            }
            Ok(Written::Unchanged)
        }
        DeletionWrite::Redate => {
            sqlx::query("UPDATE outline_document SET deleted_at = $2 WHERE id = $1")
                .bind(held.map(|h| h.id))
                .bind(at)
                .execute(&mut *txn)
                .await?;
            Ok(Written::Unchanged)
        }
        DeletionWrite::Tombstone => {
            let Some(held) = held else {
                return Ok(Written::Unchanged);
            };
            let key: DocumentKey = sqlx::query_as(concat!(
                "UPDATE outline_document SET title = NULL, text = NULL, deleted_at = $2
                  WHERE id = $1
                 RETURNING ",
                key_columns!()
            ))
            .bind(held.id)
            .bind(at)
            .fetch_one(&mut *txn)
            .await?;
            Ok(Written::Tombstoned(key))
        }
    }
}

/// Tombstones the live documents of the collection row `collection_id` that are not newer than
/// its deletion at `at` (the caller holds the collection locked).
pub(crate) async fn tombstone_in_collection(
    txn: &mut PgConnection,
    connection: &OutlineConnection,
    collection_id: Uuid,
    at: Timestamp,
) -> Result<Vec<DocumentKey>, sqlx::Error> {
    // The same rule as one document's deletion: a document newer than it stays.
    sqlx::query_as(concat!(
        "UPDATE outline_document SET title = NULL, text = NULL, deleted_at = $3
          WHERE connection_id = $1 AND collection_id = $2 AND deleted_at IS NULL
            AND (updated_at IS NULL OR updated_at <= $3)
         RETURNING ",
        key_columns!()
    ))
    .bind(connection.id())
    .bind(collection_id)
    .bind(at)
    .fetch_all(&mut *txn)
    .await
}

/// The Outline ids of a collection's live documents: a sweep's candidates, captured before its
/// listing starts.
pub async fn live_ids<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    connection: &OutlineConnection,
    collection_outline_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT outline_id FROM outline_document
          WHERE connection_id = $1 AND collection_outline_id = $2 AND deleted_at IS NULL
          ORDER BY outline_id",
    )
    .bind(connection.id())
    .bind(collection_outline_id)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// A document as operators list it (no text).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Summary {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub outline_id: String,
    /// The `outline_collection` row it is in.
    pub collection_id: Uuid,
    pub collection_outline_id: String,
    pub parent_outline_id: Option<String>,
    pub title: Option<String>,
    pub url_id: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub updated_at: Option<Timestamp>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub published_at: Option<Timestamp>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub archived_at: Option<Timestamp>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub deleted_at: Option<Timestamp>,
}

/// One document as operators read it, with its text.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct View {
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub summary: Summary,
    pub text: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub created_at_upstream: Option<Timestamp>,
}

macro_rules! summary_columns {
    () => {
        "d.id, d.connection_id, d.outline_id, d.collection_id, d.collection_outline_id, \
         d.parent_outline_id, d.title, d.url_id, d.updated_at, d.published_at, d.archived_at, \
         d.deleted_at"
    };
}

/// A workspace's documents after the row `after`, in row order, at most `limit`; only those of
/// the collection row `collection_id` when given (control-api). Tombstoned documents are listed
/// with their date.
pub async fn page<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
    collection_id: Option<Uuid>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Summary>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        summary_columns!(),
        " FROM outline_document d
           JOIN connection c ON c.id = d.connection_id
          WHERE c.workspace_id = $1
            AND ($2::uuid IS NULL OR d.collection_id = $2)
            AND ($3::uuid IS NULL OR d.id > $3)
          ORDER BY d.id LIMIT $4"
    ))
    .bind(workspace_id)
    .bind(collection_id)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// One document of a workspace with its text; `None` for another workspace's.
pub async fn find_in_workspace<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    workspace_id: Uuid,
    id: Uuid,
) -> Result<Option<View>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        summary_columns!(),
        ", d.text, d.created_at_upstream
           FROM outline_document d
           JOIN connection c ON c.id = d.connection_id
          WHERE c.workspace_id = $1 AND d.id = $2"
    ))
    .bind(workspace_id)
    .bind(id)
    .fetch_optional(db)
    .await
}
