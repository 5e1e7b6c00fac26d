//! Erasing stream copies. Subjects are per repository, not per tenant, so purging a subject would
//! erase other tenants' messages: a connection's messages are deleted one by one by the sequence
//! the stream ledger recorded when they were published (a secure erase: the server overwrites
//! the message). Only a subject that belongs to one connection alone (GitLab hooks we registered)
//! or to one workspace alone (its item events, on purge) is purged whole.
//!
//! Each batch deletes its messages, then their ledger rows and counts in one transaction, so a
//! crash in between deletes the same messages again (already gone: fine) and counts them once.

use std::collections::BTreeMap;

use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement};
use store::entity::connection;
use store::erasure::Erasable;
use store::inbound::StreamCopy;
use uuid::Uuid;

use crate::erase::{EraseError, Eraser};
use crate::records::{ErasureRecord, Step};

/// Ledger rows read and deleted per batch.
pub const BATCH: u64 = 512;

#[derive(Debug, Clone, FromQueryResult)]
struct Ledgered {
    stream: String,
    sequence: i64,
}

/// A text-array literal of our own names (stream names need no quoting).
fn text_array<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    format!("{{{}}}", items.into_iter().collect::<Vec<_>>().join(","))
}

/// Deletes a connection's recorded messages from the holders' streams, those of its workspace
/// about repositories the workspace lost, then the subjects it owns alone, then the rest of its
/// ledger rows (messages without content, such as lifecycle announcements, stay in their
/// streams).
pub async fn erase_connection_messages(
    eraser: &Eraser,
    record: &ErasureRecord,
    conn: &connection::Model,
    holders: &[&'static Erasable],
) -> Result<(), EraseError> {
    let streams = text_array(holders.iter().flat_map(|h| h.streams.iter().copied()));
    let repository_streams = text_array(
        holders
            .iter()
            .flat_map(|h| h.repository_streams.iter().copied()),
    );
    let select = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT stream, sequence FROM stream_message
          WHERE (connection_id = $1 AND stream = ANY($2::text[]))
             OR (workspace_id = $3 AND stream = ANY($4::text[])
                 AND repository_id IN (SELECT repository_id FROM erasure_repository
                                        WHERE erasure_id = $5 AND workspace_lost))
          ORDER BY stream, sequence LIMIT $6",
        [
            conn.id.into(),
            streams.into(),
            conn.workspace_id.into(),
            repository_streams.into(),
            record.id.into(),
            (BATCH as i64).into(),
        ],
    );
    delete_recorded(eraser, record, select).await?;
    let pool = eraser.db.get_postgres_connection_pool();
    let mut subjects: Vec<String> = Vec::new();
    for holder in holders {
        subjects.extend((holder.connection_subjects)(pool, conn.id).await?);
    }
    purge_subjects(eraser, record, "subjects", &subjects).await?;
    forget(eraser, record, "ledger", "connection_id = $1", conn.id).await
}

/// A purged workspace's recorded messages left in the holders' streams (item events of
/// repositories its connections still shared), then the subjects it owns alone, then its
/// ledger rows.
pub async fn erase_workspace_messages(
    eraser: &Eraser,
    record: &ErasureRecord,
    holders: &[&'static Erasable],
) -> Result<(), EraseError> {
    let streams = text_array(
        holders
            .iter()
            .flat_map(|h| h.streams.iter().chain(h.repository_streams).copied()),
    );
    let select = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT stream, sequence FROM stream_message
          WHERE workspace_id = $1 AND stream = ANY($2::text[])
          ORDER BY stream, sequence LIMIT $3",
        [
            record.workspace_id.into(),
            streams.into(),
            (BATCH as i64).into(),
        ],
    );
    delete_recorded(eraser, record, select).await?;
    let subjects: Vec<String> = holders
        .iter()
        .flat_map(|h| (h.workspace_subjects)(record.workspace_id))
        .collect();
    purge_subjects(eraser, record, "workspace-subjects", &subjects).await?;
    forget(
        eraser,
        record,
        "workspace-ledger",
        "workspace_id = $1",
        record.workspace_id,
    )
    .await
}

/// Deletes, batch by batch, the messages `select` names (up to [`BATCH`] ledger rows each).
async fn delete_recorded(
    eraser: &Eraser,
    record: &ErasureRecord,
    select: Statement,
) -> Result<(), EraseError> {
    loop {
        let batch = Ledgered::find_by_statement(select.clone())
            .all(&eraser.db)
            .await?;
        if batch.is_empty() {
            return Ok(());
        }
        delete_messages(&eraser.bus, &batch).await?;
        let mut step = Step::tally(&eraser.db, record.id).await?;
        let gone = Ledgered::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM stream_message WHERE (stream, sequence) IN
               (SELECT * FROM unnest($1::text[], $2::bigint[]))
             RETURNING stream, sequence",
            [
                text_array(batch.iter().map(|l| l.stream.as_str())).into(),
                format!(
                    "{{{}}}",
                    batch
                        .iter()
                        .map(|l| l.sequence.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
                .into(),
            ],
        ))
        .all(step.txn())
        .await?;
        let mut per_stream: BTreeMap<String, u64> = BTreeMap::new();
        for l in gone {
            *per_stream.entry(l.stream).or_default() += 1;
        }
        for (stream, n) in per_stream {
            step.add(format!("stream:{stream}"), n);
        }
        step.finish().await?;
    }
}

/// Deletes each message from its stream; one already gone counts as deleted.
async fn delete_messages(bus: &bus::Bus, batch: &[Ledgered]) -> Result<(), EraseError> {
    let copies: Vec<StreamCopy> = batch
        .iter()
        .map(|l| StreamCopy {
            stream: l.stream.clone(),
            sequence: u64::try_from(l.sequence).unwrap_or_default(),
        })
        .collect();
    bus::erasure::delete_stream_messages(bus, &copies)
        .await
        .map_err(|e| EraseError::Stream(e.to_string()))
}

/// Purges whole subjects that belong to one owner alone, once (step `name`).
async fn purge_subjects(
    eraser: &Eraser,
    record: &ErasureRecord,
    name: &str,
    subjects: &[String],
) -> Result<(), EraseError> {
    if subjects.is_empty() {
        return Ok(());
    }
    let Some(mut step) = Step::begin(&eraser.db, record.id, name).await? else {
        return Ok(());
    };
    for filter in subjects {
        let Some(stream) = bus::Stream::for_subject(filter) else {
            continue;
        };
        let full = eraser.bus.namespace().name(stream.name());
        let handle = eraser
            .bus
            .jetstream()
            .get_stream(&full)
            .await
            .map_err(|e| EraseError::Stream(format!("stream {full}: {e}")))?;
        let purged = handle
            .purge()
            .filter(eraser.bus.namespace().subject(filter))
            .await
            .map_err(|e| EraseError::Stream(format!("purging {filter}: {e}")))?;
        step.add(format!("stream:{}", stream.name()), purged.purged);
    }
    step.finish().await?;
    Ok(())
}

/// Drops the remaining ledger rows selected by `predicate` over `$1 = id` (step `name`).
async fn forget(
    eraser: &Eraser,
    record: &ErasureRecord,
    name: &str,
    predicate: &str,
    id: Uuid,
) -> Result<(), EraseError> {
    let Some(mut step) = Step::begin(&eraser.db, record.id, name).await? else {
        return Ok(());
    };
    let n = step
        .txn()
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("DELETE FROM stream_message WHERE {predicate}"),
            [id.into()],
        ))
        .await?
        .rows_affected();
    step.add("table:stream_message", n);
    step.finish().await?;
    Ok(())
}

/// Drops ledger rows of messages the streams have aged out (published longer ago than the
/// streams' max age), `batch` at most; returns how many.
pub async fn prune_ledger<C: ConnectionTrait>(
    db: &C,
    max_age: std::time::Duration,
    batch: u64,
) -> Result<u64, sea_orm::DbErr> {
    Ok(db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM stream_message WHERE (stream, sequence) IN
               (SELECT stream, sequence FROM stream_message
                 WHERE published_at < now() - make_interval(secs => $1) LIMIT $2)",
            [max_age.as_secs_f64().into(), (batch as i64).into()],
        ))
        .await?
        .rows_affected())
}
