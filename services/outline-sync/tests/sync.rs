//! INITIAL and RECONCILIATION on the sync engine, against the simulator over HTTP (real Postgres
//! and JetStream, outline-sync running its job consumer): INITIAL reads recent documents to the
//! horizon and infers nothing; a RECONCILIATION tombstones only what a whole listing missed and
//! Outline confirms gone; under each fault it tombstones nothing and the collection keeps
//! awaiting until a later pass is clean.

mod common;

use std::collections::BTreeSet;

use anyhow::Result;
use common::World;
use store::entity::JobType;
use time::{Duration, OffsetDateTime};
use vendor_sim::outline::{Fault, NewDocument, OutlineFault, methods};

/// Adds `n` documents to each collection without delivering them (Outline's webhooks missed
/// them): their ids per collection.
fn seed(w: &World, n: usize) -> [Vec<String>; 2] {
    let [eng, handbook] = w.collections.clone();
    w.sim.model(|m| {
        m.quietly(|m| {
            [&eng, &handbook].map(|c| {
                (0..n)
                    .map(|i| {
                        m.add_document(NewDocument::new(c, &format!("doc {i}")).text("body"))
                            .expect("a live collection")
                    })
                    .collect()
            })
        })
    })
}

/// Deletes `ids` at Outline without a delivery (the webhook was lost).
fn delete_quietly(w: &World, ids: &[&String]) {
    w.sim.model(|m| {
        m.quietly(|m| {
            for id in ids {
                m.delete_document(id).expect("a live document");
            }
        })
    });
}

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn initial_reads_recent_documents_to_the_horizon_and_collections_then_await() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = w.collections.clone();
    let recent = seed(&w, 6);
    // Older than the 30-day horizon: left for the reconcile.
    let old = w.sim.model(|m| {
        m.quietly(|m| {
            m.add_document(
                NewDocument::new(&eng, "old").dated(OffsetDateTime::now_utc() - Duration::days(40)),
            )
        })
    })?;
    let (status, error) = w.run_job(&w.a, JobType::Initial).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let live = w.live(&w.a).await?;
    let expected: BTreeSet<String> = recent.iter().flatten().cloned().collect();
    assert_eq!(live, expected, "every recent document, none older");
    assert!(!live.contains(&old));
    for (id, awaiting, outcome, _) in w.collections(&w.a).await? {
        assert!(awaiting, "{id} awaits its first clean pass");
        assert!(outcome.is_some_and(|o| o.starts_with("initial")));
    }
    // The reconcile then reads the collections whole, the old document too.
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    assert!(w.live(&w.a).await?.contains(&old));
    for (id, awaiting, outcome, _) in w.collections(&w.a).await? {
        assert!(!awaiting, "{id}: {outcome:?}");
        assert_eq!(outcome.as_deref(), Some("clean"));
    }
    Ok(())
}

#[tokio::test]
async fn initial_after_upstream_deletions_tombstones_nothing() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = seed(&w, 4);
    w.run_job(&w.a, JobType::Initial).await?;
    delete_quietly(&w, &[&eng[0], &eng[1]]);
    let (status, error) = w.run_job(&w.a, JobType::Initial).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let live = w.live(&w.a).await?;
    assert!(
        live.contains(&eng[0]) && live.contains(&eng[1]),
        "an INITIAL infers nothing"
    );
    Ok(())
}

#[tokio::test]
async fn a_reconcile_tombstones_exactly_the_vanished_that_outline_confirms_gone() -> Result<()> {
    let w = World::start().await?;
    let [eng, handbook] = seed(&w, 7);
    w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(w.live(&w.a).await?.len(), 14);
    delete_quietly(&w, &[&eng[1], &handbook[6]]);
    // Gone from the trash too: Outline no longer knows it.
    w.sim.model(|m| {
        m.quietly(|m| {
            m.delete_document(&eng[4])?;
            m.permanently_delete_document(&eng[4])
        })
    })?;
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let live = w.live(&w.a).await?;
    let gone = set(&[&eng[1], &eng[4], &handbook[6]]);
    let expected: BTreeSet<String> = eng
        .iter()
        .chain(&handbook)
        .filter(|id| !gone.contains(*id))
        .cloned()
        .collect();
    assert_eq!(live, expected);
    // Each tombstone is dated and cleared, with its one event.
    let rows = w.documents(&w.a).await?;
    for id in &gone {
        let row = rows
            .iter()
            .find(|r| &r.0 == id)
            .expect("kept as a tombstone");
        assert!(row.3.is_none() && row.4.is_none(), "title and text cleared");
    }
    assert_eq!(w.count(&w.a, "outline.document.deleted").await?, 3);
    Ok(())
}

/// The faults a listing may meet, each on the second `documents.list` call of the pass (the
/// first collection's second page).
fn faults() -> Vec<(&'static str, OutlineFault)> {
    vec![
        ("rate limited", OutlineFault::RateLimited { retry_after: 0 }),
        ("server error", OutlineFault::Status(503)),
        ("short page", OutlineFault::ShortPage { keep: 2 }),
        ("lost answer", OutlineFault::dropped()),
    ]
}

#[tokio::test]
async fn under_each_fault_a_reconcile_tombstones_nothing_and_the_next_one_is_clean() -> Result<()> {
    for (name, fault) in faults() {
        let w = World::start().await?;
        let [eng, handbook] = seed(&w, 12);
        w.run_job(&w.a, JobType::Reconciliation).await?;
        // The pass walks collections in the order their rows were made: the first one meets
        // the fault.
        let first: String = sqlx::query_scalar(
            "SELECT outline_id FROM outline_collection WHERE connection_id = $1 ORDER BY id
              LIMIT 1",
        )
        .bind(w.a.connection_id)
        .fetch_one(&w.pool)
        .await?;
        let (faulted, other) = if first == w.collections[0] {
            (&eng, &handbook)
        } else {
            (&handbook, &eng)
        };
        let vanished = [&faulted[0], &faulted[9], &other[3]];
        delete_quietly(&w, &vanished);
        // Every retry of the call meets it too, for the faults the client retries.
        let calls = match fault {
            OutlineFault::ShortPage { .. } => vendor_sim::outline::Calls::Nth(2),
            _ => vendor_sim::outline::Calls::From(2),
        };
        w.sim.inject(Fault {
            operation: Some(methods::DOCUMENTS_LIST.to_owned()),
            calls,
            kind: fault,
        });
        w.run_job(&w.a, JobType::Reconciliation).await?;
        let live = w.live(&w.a).await?;
        for id in &vanished[..2] {
            assert!(
                live.contains(*id),
                "{name}: nothing is tombstoned from a faulted listing"
            );
        }
        let awaiting: Vec<(bool, Option<String>)> = w
            .collections(&w.a)
            .await?
            .into_iter()
            .filter(|c| c.0 == first)
            .map(|c| (c.1, c.2))
            .collect();
        assert!(
            matches!(awaiting.as_slice(), [(true, Some(outcome))] if outcome != "clean"),
            "{name}: the faulted collection awaits: {awaiting:?}"
        );

        w.sim.clear_faults();
        let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
        assert_eq!(status, "succeeded", "{name}: {error:?}");
        let live = w.live(&w.a).await?;
        assert_eq!(
            live.len(),
            21,
            "{name}: exactly the vanished are tombstoned"
        );
        for id in vanished {
            assert!(!live.contains(id), "{name}");
        }
        assert!(
            w.collections(&w.a).await?.iter().all(|c| !c.1),
            "{name}: clean"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_document_moved_created_or_shifted_by_a_deletion_mid_pass_survives() -> Result<()> {
    let w = World::start().await?;
    let [eng_id, handbook_id] = w.collections.clone();
    let [eng, _] = seed(&w, 12);
    w.run_job(&w.a, JobType::Reconciliation).await?;
    // Between the engineering collection's pages: a document it has not reached yet moves to
    // the other collection, one it already listed is deleted (every later document shifts one
    // offset back, so the next page skips one), and a new one is created.
    let (moved, deleted, created_in) = (eng[11].clone(), eng[1].clone(), eng_id.clone());
    let handbook = handbook_id.clone();
    let first: String = sqlx::query_scalar(
        "SELECT outline_id FROM outline_collection WHERE connection_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    // The engineering collection's second page: its first when it is walked first, else the
    // handbook's three pages and its empty one come before.
    let nth = if first == eng_id { 2 } else { 6 };
    w.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        nth,
        OutlineFault::mutate(move |m| {
            m.quietly(|m| {
                m.move_document(&moved, &handbook, None).expect("moved");
                m.delete_document(&deleted).expect("deleted");
                m.add_document(NewDocument::new(&created_in, "new mid-pass"))
                    .expect("created");
            });
        }),
    ));
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let rows = w.documents(&w.a).await?;
    let moved_row = rows.iter().find(|r| r.0 == eng[11]).expect("held");
    assert!(
        moved_row.6.is_none(),
        "a moved document is never tombstoned"
    );
    assert_eq!(moved_row.1, handbook_id, "its row follows it");
    // The document the shifted offsets skipped was never seen missing for long: Outline
    // still shows it, so it stays.
    let live = w.live(&w.a).await?;
    assert!(
        live.contains(&eng[5]),
        "a live document hidden by the shift is kept"
    );
    // The deletion was listed before it happened: the next pass tombstones it.
    assert!(live.contains(&eng[1]));
    assert_eq!(w.count(&w.a, "outline.document.deleted").await?, 0);
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let live = w.live(&w.a).await?;
    assert!(!live.contains(&eng[1]) && live.contains(&eng[5]) && live.contains(&eng[11]));
    assert_eq!(w.count(&w.a, "outline.document.deleted").await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_found_version_that_cannot_be_written_leaves_its_collection_unclean() -> Result<()> {
    let w = World::start().await?;
    let [eng_id, handbook_id] = w.collections.clone();
    let [eng, _] = seed(&w, 12);
    w.run_job(&w.a, JobType::Reconciliation).await?;
    let moved = eng[11].clone();
    // The first write of the moved document after the move fails once, as a lost database
    // connection or a deadlock would: that write is the confirmation read's. (A sequence, as
    // it outlives the failed transaction.)
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SEQUENCE fail_once;
         CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.outline_id = '{moved}'
              AND NEW.collection_id IS DISTINCT FROM OLD.collection_id
              AND nextval('fail_once') = 1 THEN
             RAISE EXCEPTION 'injected write failure';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER fail_once BEFORE UPDATE ON outline_document
           FOR EACH ROW EXECUTE FUNCTION fail_once();"
    )))
    .execute(&w.pool)
    .await?;
    let first: String = sqlx::query_scalar(
        "SELECT outline_id FROM outline_collection WHERE connection_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    // Mid-walk of the engineering collection, a document it has not reached moves away.
    let nth = if first == eng_id { 2 } else { 6 };
    let (to_move, handbook) = (moved.clone(), handbook_id.clone());
    w.sim.inject(Fault::nth(
        methods::DOCUMENTS_LIST,
        nth,
        OutlineFault::mutate(move |m| {
            m.quietly(|m| m.move_document(&to_move, &handbook, None).expect("moved"));
        }),
    ));
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let met: bool = sqlx::query_scalar("SELECT is_called FROM fail_once")
        .fetch_one(&w.pool)
        .await?;
    assert!(met, "the injected failure was met");
    assert!(
        w.live(&w.a).await?.contains(&moved),
        "a found document is kept"
    );
    let eng_state = w
        .collections(&w.a)
        .await?
        .into_iter()
        .find(|c| c.0 == eng_id)
        .expect("held");
    assert!(
        eng_state.1 && eng_state.2.as_deref() != Some("clean"),
        "a confirmation whose version was not stored leaves the collection awaiting: {eng_state:?}"
    );
    // The next pass stores it and is clean.
    let (status, error) = w.run_job(&w.a, JobType::Reconciliation).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let rows = w.documents(&w.a).await?;
    let row = rows.iter().find(|r| r.0 == moved).expect("held");
    assert_eq!(row.1, handbook_id, "its row follows it");
    assert!(w.collections(&w.a).await?.iter().all(|c| !c.1), "clean");
    Ok(())
}
