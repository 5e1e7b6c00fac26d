//! Outline's mirror on real Postgres: forward-only writes on every path, tombstones and
//! restores, a collection's deletion, one event per change, tenant isolation and the erasure
//! declaration.

use anyhow::Result;
use outline_mirror::collection::{self, CollectionPayload, CollectionWritten, PassOutcome};
use outline_mirror::document::{self, DocumentPayload, Written};
use outline_mirror::{OutlineConnection, events};
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + secs).unwrap()
}

/// A fresh database with an Outline instance.
struct World {
    _db: testkit::TestDb,
    pool: PgPool,
    instance: Uuid,
}

impl World {
    async fn new() -> Result<World> {
        let db = testkit::TestDb::new().await?;
        let pool = db.db.get_postgres_connection_pool().clone();
        let instance = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'outline')")
            .bind(instance)
            .execute(&pool)
            .await?;
        Ok(World {
            _db: db,
            pool,
            instance,
        })
    }

    /// A workspace with one connection of `kind`; returns (workspace, connection).
    async fn connection_of(&self, kind: &str) -> Result<(Uuid, Uuid)> {
        let (ws, conn) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
            .bind(ws)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
             VALUES ($1, $2, $3, 'active', $4)",
        )
        .bind(conn)
        .bind(ws)
        .bind(kind)
        .bind(self.instance)
        .execute(&self.pool)
        .await?;
        Ok((ws, conn))
    }

    async fn outline(&self) -> Result<OutlineConnection> {
        let (_, id) = self.connection_of("outline").await?;
        Ok(OutlineConnection::load(&self.pool, id)
            .await?
            .expect("an outline connection"))
    }

    /// Applies `p` and records its event in one transaction, as a consumer does.
    async fn apply(&self, c: &OutlineConnection, p: &DocumentPayload) -> Result<Written> {
        let mut txn = self.pool.begin().await?;
        let written = document::apply(&mut txn, c, p).await?;
        events::document(&mut txn, c, &written).await?;
        txn.commit().await?;
        Ok(written)
    }

    async fn delete(
        &self,
        c: &OutlineConnection,
        id: &str,
        when: OffsetDateTime,
    ) -> Result<Written> {
        let mut txn = self.pool.begin().await?;
        let written = document::tombstone(&mut txn, c, id, when, Some("coll-1")).await?;
        events::document(&mut txn, c, &written).await?;
        txn.commit().await?;
        Ok(written)
    }

    async fn row(&self, c: &OutlineConnection, id: &str) -> Result<Option<Row>> {
        Ok(sqlx::query_as(
            "SELECT outline_id, collection_outline_id, parent_outline_id, title, text, updated_at,
                    deleted_at
               FROM outline_document WHERE connection_id = $1 AND outline_id = $2",
        )
        .bind(c.id())
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn rows(&self, c: &OutlineConnection) -> Result<Vec<Row>> {
        Ok(sqlx::query_as(
            "SELECT outline_id, collection_outline_id, parent_outline_id, title, text, updated_at,
                    deleted_at
               FROM outline_document WHERE connection_id = $1 ORDER BY outline_id",
        )
        .bind(c.id())
        .fetch_all(&self.pool)
        .await?)
    }

    /// (type, source key) of every event of the connection, in order.
    async fn events(&self, c: &OutlineConnection) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT type, source_key FROM integration_event WHERE connection_id = $1
              ORDER BY type, source_key",
        )
        .bind(c.id())
        .fetch_all(&self.pool)
        .await?)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct Row {
    outline_id: String,
    collection_outline_id: String,
    parent_outline_id: Option<String>,
    title: Option<String>,
    text: Option<String>,
    updated_at: Option<OffsetDateTime>,
    deleted_at: Option<OffsetDateTime>,
}

/// Version `v` of document `id`: what Outline would report at `at(v)` (same `updatedAt`, same
/// content, as a real redelivery).
fn version(id: &str, v: i64) -> DocumentPayload {
    DocumentPayload {
        outline_id: id.into(),
        collection_outline_id: if v % 3 == 2 { "coll-2" } else { "coll-1" }.into(),
        parent_outline_id: None,
        title: Some(format!("{id} title {}", v / 2)),
        text: Some(format!("{id} text {v}")),
        url_id: Some(format!("u-{id}")),
        created_at: Some(at(0)),
        updated_at: at(v),
        published_at: Some(at(0)),
        archived_at: None,
        deleted_at: None,
    }
}

#[tokio::test]
async fn redelivery_changes_nothing_and_an_older_payload_neither() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    assert!(matches!(
        w.apply(&c, &version("d1", 10)).await?,
        Written::Inserted(_)
    ));
    assert_eq!(w.apply(&c, &version("d1", 10)).await?, Written::Unchanged);
    assert_eq!(w.apply(&c, &version("d1", 4)).await?, Written::Unchanged);
    let kept = w.row(&c, "d1").await?.unwrap();
    assert_eq!(kept.text.as_deref(), Some("d1 text 10"));
    assert_eq!(kept.updated_at, Some(at(10)));
    // A newer one applies; its title changed: a rename.
    assert!(matches!(
        w.apply(&c, &version("d1", 12)).await?,
        Written::Renamed(_)
    ));
    assert_eq!(
        w.row(&c, "d1").await?.unwrap().text.as_deref(),
        Some("d1 text 12")
    );
    // One event per change: published, then updated.
    let events = w.events(&c).await?;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, events::PUBLISHED);
    assert_eq!(events[1].0, events::UPDATED);
    Ok(())
}

#[tokio::test]
async fn a_move_is_metadata_of_the_same_row() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    w.apply(&c, &version("d1", 10)).await?;
    let Written::Moved {
        document,
        from_collection_outline_id,
    } = w.apply(&c, &version("d1", 11)).await?
    else {
        panic!("moved to coll-2");
    };
    assert_eq!(from_collection_outline_id, "coll-1");
    assert_eq!(document.collection_outline_id, "coll-2");
    let rows = w.rows(&c).await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].collection_outline_id, "coll-2");
    assert!(w.events(&c).await?.iter().any(|(t, _)| t == events::MOVED));
    Ok(())
}

#[tokio::test]
async fn a_deletion_tombstones_at_once_and_only_a_newer_version_restores() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    w.apply(&c, &version("d1", 10)).await?;
    assert!(matches!(
        w.delete(&c, "d1", at(20)).await?,
        Written::Tombstoned(_)
    ));
    let gone = w.row(&c, "d1").await?.unwrap();
    assert_eq!((gone.title, gone.text), (None, None));
    assert_eq!(gone.deleted_at, Some(at(20)));
    // The same deletion again, an older version, a version of the deletion's second: nothing.
    assert_eq!(w.delete(&c, "d1", at(20)).await?, Written::Unchanged);
    assert_eq!(w.apply(&c, &version("d1", 15)).await?, Written::Unchanged);
    assert_eq!(w.apply(&c, &version("d1", 20)).await?, Written::Unchanged);
    assert_eq!(w.row(&c, "d1").await?.unwrap().deleted_at, Some(at(20)));
    // Strictly newer: restored with its content.
    assert!(matches!(
        w.apply(&c, &version("d1", 21)).await?,
        Written::Restored(_)
    ));
    let back = w.row(&c, "d1").await?.unwrap();
    assert_eq!(back.deleted_at, None);
    assert_eq!(back.text.as_deref(), Some("d1 text 21"));
    // A deletion older than the restored version is stale.
    assert_eq!(w.delete(&c, "d1", at(19)).await?, Written::Unchanged);
    let types: Vec<String> = w.events(&c).await?.into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        types,
        [events::DELETED, events::PUBLISHED, events::RESTORED]
    );
    Ok(())
}

#[tokio::test]
async fn a_deletion_of_a_document_never_held_keeps_a_late_older_copy_out() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    assert_eq!(w.delete(&c, "d9", at(30)).await?, Written::Unchanged);
    assert_eq!(w.apply(&c, &version("d9", 25)).await?, Written::Unchanged);
    let row = w.row(&c, "d9").await?.unwrap();
    assert_eq!((row.title, row.deleted_at), (None, Some(at(30))));
    assert!(w.events(&c).await?.is_empty());
    Ok(())
}

/// One report Outline can make about a document.
#[derive(Debug, Clone)]
enum Report {
    Version(&'static str, i64),
    Deleted(&'static str, i64),
}

async fn report(w: &World, c: &OutlineConnection, r: &Report) -> Result<Written> {
    match *r {
        Report::Version(id, v) => w.apply(c, &version(id, v)).await,
        Report::Deleted(id, v) => w.delete(c, id, at(v)).await,
    }
}

fn shuffled(reports: &[Report], copies: usize, mut seed: u64) -> Vec<Report> {
    let mut all: Vec<Report> = (0..copies).flat_map(|_| reports.iter().cloned()).collect();
    for i in (1..all.len()).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        all.swap(i, (seed >> 33) as usize % (i + 1));
    }
    all
}

#[tokio::test]
async fn shuffled_and_repeated_reports_end_where_in_order_ones_do() -> Result<()> {
    let w = World::new().await?;
    // Updates, moves (every version 2 mod 3 is in coll-2), deletions and restores, in order.
    let mut in_order = Vec::new();
    for (i, id) in ["a", "b", "c", "d", "e", "f"].into_iter().enumerate() {
        let i = i as i64;
        for v in 1..=8 {
            let t = v * 10 + i;
            in_order.push(Report::Version(id, t));
            if (v + i) % 4 == 0 {
                in_order.push(Report::Deleted(id, t + 3));
            }
        }
    }
    // Some end deleted, some restored after a deletion.
    in_order.push(Report::Deleted("b", 200));
    in_order.push(Report::Deleted("e", 201));
    in_order.push(Report::Version("e", 202));
    in_order.sort_by_key(|r| match *r {
        Report::Version(_, t) => (t, 0),
        Report::Deleted(_, t) => (t, 1),
    });

    let reference = w.outline().await?;
    let mut changes = 0;
    for r in &in_order {
        if report(&w, &reference, r).await? != Written::Unchanged {
            changes += 1;
        }
    }
    let expected = w.rows(&reference).await?;
    assert!(expected.iter().any(|r| r.deleted_at.is_some()));
    assert!(expected.iter().any(|r| r.deleted_at.is_none()));
    // In order, every report is one change and one event.
    assert_eq!(w.events(&reference).await?.len(), changes);

    for seed in [1, 7, 42] {
        let c = w.outline().await?;
        for r in shuffled(&in_order, 3, seed) {
            report(&w, &c, &r).await?;
        }
        let rows = w.rows(&c).await?;
        assert_eq!(rows, expected, "seed {seed}");
        // Every copy delivered again changes nothing and announces nothing more.
        let announced = w.events(&c).await?;
        for r in &in_order {
            assert_eq!(report(&w, &c, r).await?, Written::Unchanged, "{r:?}");
        }
        assert_eq!(w.events(&c).await?, announced);
    }
    Ok(())
}

#[tokio::test]
async fn a_collection_deletion_tombstones_it_and_its_documents() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    let mut txn = w.pool.begin().await?;
    let payload = CollectionPayload {
        outline_id: "coll-1".into(),
        name: Some("Handbook".into()),
        url_id: None,
        updated_at: at(1),
        deleted_at: None,
    };
    assert!(matches!(
        collection::apply(&mut txn, &c, &payload).await?,
        CollectionWritten::Inserted(_)
    ));
    assert_eq!(
        collection::apply(&mut txn, &c, &payload).await?,
        CollectionWritten::Unchanged
    );
    txn.commit().await?;
    w.apply(&c, &version("a", 10)).await?;
    w.apply(&c, &version("b", 12)).await?;
    w.apply(&c, &version("other", 11)).await?; // coll-2
    w.apply(&c, &version("late", 40)).await?; // coll-1, edited after the deletion below

    let mut txn = w.pool.begin().await?;
    let written = collection::tombstone(&mut txn, &c, "coll-1", at(30)).await?;
    let CollectionWritten::Tombstoned {
        collection: gone,
        documents,
    } = &written
    else {
        panic!("tombstoned: {written:?}");
    };
    assert_eq!((gone.name.clone(), gone.deleted_at), (None, Some(at(30))));
    let mut ids: Vec<&str> = documents.iter().map(|d| d.outline_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(events::collection(&mut txn, &c, &written).await?, 3);
    // Again: nothing.
    assert_eq!(
        collection::tombstone(&mut txn, &c, "coll-1", at(30)).await?,
        CollectionWritten::Unchanged
    );
    txn.commit().await?;
    // A version older than the deletion delivered after it is written; the deletion reported
    // again tombstones it.
    assert!(matches!(
        w.apply(&c, &version("straggler", 13)).await?,
        Written::Inserted(_)
    ));
    let mut txn = w.pool.begin().await?;
    let again = collection::tombstone(&mut txn, &c, "coll-1", at(30)).await?;
    let CollectionWritten::Tombstoned { documents, .. } = &again else {
        panic!("the straggler goes: {again:?}");
    };
    assert_eq!(documents.len(), 1);
    // The collection's event is absorbed, the straggler's is new.
    assert_eq!(events::collection(&mut txn, &c, &again).await?, 1);
    txn.commit().await?;
    assert!(w.row(&c, "straggler").await?.unwrap().deleted_at.is_some());

    for id in ["a", "b"] {
        let row = w.row(&c, id).await?.unwrap();
        assert_eq!(
            (row.title, row.text, row.deleted_at),
            (None, None, Some(at(30)))
        );
    }
    assert!(w.row(&c, "other").await?.unwrap().deleted_at.is_none());
    assert!(w.row(&c, "late").await?.unwrap().deleted_at.is_none());
    let types: Vec<String> = w.events(&c).await?.into_iter().map(|(t, _)| t).collect();
    assert!(types.contains(&events::COLLECTION_DELETED.to_owned()));
    assert_eq!(types.iter().filter(|t| *t == events::DELETED).count(), 3);
    // An older listing of the collection does not bring it back; a newer one does.
    let mut txn = w.pool.begin().await?;
    assert_eq!(
        collection::apply(&mut txn, &c, &payload).await?,
        CollectionWritten::Unchanged
    );
    let newer = CollectionPayload {
        updated_at: at(31),
        ..payload
    };
    assert!(matches!(
        collection::apply(&mut txn, &c, &newer).await?,
        CollectionWritten::Restored(_)
    ));
    txn.commit().await?;
    Ok(())
}

#[tokio::test]
async fn collections_await_a_clean_pass_until_one_is_recorded() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    w.apply(&c, &version("a", 10)).await?;
    let ws = c.workspace_id();
    let listed = collection::in_workspace(&w.pool, ws).await?;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].awaiting_clean_pass);
    let id = listed[0].id;
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(collection::due(&w.pool, &c, hour).await?.len(), 1);
    assert!(
        collection::record_pass(
            &w.pool,
            &c,
            id,
            &PassOutcome::NotClean("budget_exhausted".into())
        )
        .await?
    );
    let after = collection::find_in_workspace(&w.pool, ws, id)
        .await?
        .unwrap();
    assert!(after.awaiting_clean_pass);
    assert_eq!(after.last_outcome.as_deref(), Some("budget_exhausted"));
    assert!(collection::record_pass(&w.pool, &c, id, &PassOutcome::Clean).await?);
    let after = collection::find_in_workspace(&w.pool, ws, id)
        .await?
        .unwrap();
    assert!(!after.awaiting_clean_pass && after.last_clean_pass_at.is_some());
    assert!(collection::due(&w.pool, &c, hour).await?.is_empty());
    assert_eq!(collection::await_clean_passes(&w.pool, &c).await?, 1);
    assert_eq!(collection::due(&w.pool, &c, hour).await?.len(), 1);
    assert_eq!(document::live_ids(&w.pool, &c, "coll-1").await?, ["a"]);
    Ok(())
}

#[tokio::test]
async fn tenants_are_isolated_in_writes_and_reads() -> Result<()> {
    let w = World::new().await?;
    let a = w.outline().await?;
    let b = w.outline().await?;
    w.apply(&a, &version("d1", 10)).await?;
    let a_rows = w.rows(&a).await?;
    let a_doc = document::page(&w.pool, a.workspace_id(), None, None, 10).await?;
    assert_eq!(a_doc.len(), 1);
    let a_doc = a_doc[0].clone();
    let a_collection = a_doc.collection_id;

    // B names A's document and collection ids: only B's own rows are written.
    let mut forged = version("d1", 99);
    forged.title = Some("B's title".into());
    assert!(matches!(w.apply(&b, &forged).await?, Written::Inserted(_)));
    assert!(matches!(
        w.delete(&b, "d1", at(100)).await?,
        Written::Tombstoned(_)
    ));
    let mut txn = w.pool.begin().await?;
    collection::tombstone(&mut txn, &b, "coll-1", at(200)).await?;
    txn.commit().await?;
    assert!(!collection::record_pass(&w.pool, &b, a_collection, &PassOutcome::Clean).await?);
    assert_eq!(w.rows(&a).await?, a_rows);
    let a_events: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM integration_event WHERE connection_id = $1")
            .bind(a.id())
            .fetch_all(&w.pool)
            .await?;
    assert_eq!(a_events.len(), 1);

    // B's workspace reads nothing of A's.
    let bw = b.workspace_id();
    assert!(
        document::find_in_workspace(&w.pool, bw, a_doc.id)
            .await?
            .is_none()
    );
    assert!(
        collection::find_in_workspace(&w.pool, bw, a_collection)
            .await?
            .is_none()
    );
    let b_page = document::page(&w.pool, bw, None, None, 100).await?;
    assert!(b_page.iter().all(|d| d.connection_id == b.id()));
    assert!(
        document::page(&w.pool, bw, Some(a_collection), None, 100)
            .await?
            .is_empty()
    );
    assert!(
        collection::in_workspace(&w.pool, bw)
            .await?
            .iter()
            .all(|c| c.connection_id == b.id())
    );
    // A reads its own, with its text.
    let view = document::find_in_workspace(&w.pool, a.workspace_id(), a_doc.id)
        .await?
        .unwrap();
    assert_eq!(view.text.as_deref(), Some("d1 text 10"));

    // Only a connection of kind outline binds writes.
    let (_, slack) = w.connection_of("slack").await?;
    assert!(OutlineConnection::load(&w.pool, slack).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn documents_page_by_after_and_limit() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    for id in ["a", "b", "c", "d", "e"] {
        w.apply(&c, &version(id, 10)).await?;
    }
    let ws = c.workspace_id();
    let first = document::page(&w.pool, ws, None, None, 2).await?;
    let second = document::page(&w.pool, ws, None, Some(first[1].id), 2).await?;
    let third = document::page(&w.pool, ws, None, Some(second[1].id), 2).await?;
    let ids: Vec<&str> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .map(|d| d.outline_id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    Ok(())
}

#[tokio::test]
async fn the_erasure_declaration_deletes_the_connections_content_and_only_it() -> Result<()> {
    use store::erasure::Selector;
    let holder = &outline_mirror::erasure::ERASABLE;
    let content = |table: &str| -> Vec<&str> {
        holder
            .content
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.columns.to_vec())
            .unwrap_or_default()
    };
    assert_eq!(content("outline_document"), ["title", "text"]);
    assert_eq!(content("outline_collection"), ["name"]);
    assert!(
        outline_mirror::OUTLINE
            .holders
            .iter()
            .any(|h| h.holder == "outline")
    );

    let w = World::new().await?;
    let a = w.outline().await?;
    let b = w.outline().await?;
    for c in [&a, &b] {
        w.apply(c, &version("d1", 10)).await?;
        w.delete(c, "d2", at(5)).await?;
    }
    for table in holder.tables {
        let Selector::Connection(predicate) = table.selector else {
            panic!("{} is selected by connection", table.table);
        };
        // Our own declaration's constant text.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {} WHERE {predicate}",
            table.table
        )))
        .bind(a.id())
        .execute(&w.pool)
        .await?;
    }
    for table in ["outline_document", "outline_collection"] {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE connection_id = $1"
        )))
        .bind(a.id())
        .fetch_one(&w.pool)
        .await?;
        assert_eq!(left, 0, "{table}");
    }
    assert_eq!(w.rows(&b).await?.len(), 2);
    // Its subscription's subjects belong to the connection alone.
    let subjects = (holder.connection_subjects)(&w.pool, a.id()).await?;
    assert_eq!(subjects, [format!("outline.?connection.{}.>", a.id())]);
    Ok(())
}

#[tokio::test]
async fn concurrent_writers_of_one_document_end_at_its_newest_version() -> Result<()> {
    let w = World::new().await?;
    let c = w.outline().await?;
    // Versions and a deletion of one document, each written by its own transaction at once.
    let mut tasks = Vec::new();
    for v in (1..=12).rev() {
        let pool = w.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut txn = pool.begin().await?;
            let written = if v == 9 {
                document::tombstone(&mut txn, &c, "d1", at(9), Some("coll-1")).await?
            } else {
                document::apply(&mut txn, &c, &version("d1", v)).await?
            };
            events::document(&mut txn, &c, &written).await?;
            txn.commit().await?;
            anyhow::Ok(written != Written::Unchanged)
        }));
    }
    let mut changes = 0;
    for task in tasks {
        changes += usize::from(task.await??);
    }
    let row = w.row(&c, "d1").await?.unwrap();
    assert_eq!(row.updated_at, Some(at(12)));
    assert_eq!(row.text.as_deref(), Some("d1 text 12"));
    assert!(row.deleted_at.is_none());
    // Each change announced once.
    assert_eq!(w.events(&c).await?.len(), changes);
    Ok(())
}

/// The kind of a write, for comparing what two paths did.
fn kind(w: &Written) -> &'static str {
    match w {
        Written::Inserted(_) => "inserted",
        Written::Published(_) => "published",
        Written::Updated(_) => "updated",
        Written::Renamed(_) => "renamed",
        Written::Moved { .. } => "moved",
        Written::Tombstoned(_) => "tombstoned",
        Written::Restored(_) => "restored",
        Written::Unchanged => "unchanged",
    }
}

#[tokio::test]
async fn a_page_writes_what_its_documents_one_by_one_would() -> Result<()> {
    let w = World::new().await?;
    let deleted = |id: &str, v: i64| DocumentPayload {
        deleted_at: Some(at(v)),
        ..version(id, v)
    };
    // Pages as listings and confirming reads report them: new documents, newer and older
    // versions of held ones, a move to another collection, a deletion, a restore past it, and a
    // page that repeats a document.
    let pages: Vec<Vec<DocumentPayload>> = vec![
        vec![
            version("a", 10),
            version("b", 10),
            version("c", 10),
            version("d", 10),
        ],
        vec![
            version("a", 11),
            version("b", 5),
            deleted("c", 12),
            version("e", 10),
        ],
        vec![
            version("a", 11),
            version("c", 14),
            version("d", 20),
            version("d", 23),
        ],
        vec![
            deleted("f", 30),
            version("f", 25),
            version("g", 2),
            version("b", 10),
        ],
    ];
    let (one_by_one, paged) = (w.outline().await?, w.outline().await?);
    for page in &pages {
        // A page keeps each document's newest version, as applying them in turn leaves it.
        let mut expected = Vec::new();
        let mut newest: std::collections::BTreeMap<&str, &DocumentPayload> = Default::default();
        for p in page {
            let e = newest.entry(&p.outline_id).or_insert(p);
            if p.updated_at > e.updated_at {
                *e = p;
            }
        }
        for p in newest.values() {
            expected.push(kind(&w.apply(&one_by_one, p).await?));
        }
        let mut txn = w.pool.begin().await?;
        let written = document::apply_page(&mut txn, &paged, page).await?;
        for wr in &written {
            events::document(&mut txn, &paged, wr).await?;
        }
        txn.commit().await?;
        let mut got: Vec<&str> = written.iter().map(kind).collect();
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "{page:?}");
    }
    assert_eq!(w.rows(&paged).await?, w.rows(&one_by_one).await?);
    let types = |events: Vec<(String, String)>| {
        let mut types: Vec<String> = events.into_iter().map(|(t, _)| t).collect();
        types.sort();
        types
    };
    assert_eq!(
        types(w.events(&paged).await?),
        types(w.events(&one_by_one).await?)
    );
    Ok(())
}
