//! Outline as the sync engine's vendor. Outline infers deletion from absence over offset pages
//! that report no total and shift as documents go, so every step is fail-closed:
//!
//! - Scopes: the team (its collections) and one per collection (its documents), the unit of a
//!   clean pass. Every pass first reads `collections.list` whole and writes it forward; the
//!   collections it lists are walked. The team scope's RECONCILIATION sweeps collections gone
//!   upstream (the engine never sweeps scopes themselves).
//! - INITIAL reads each collection's documents newest `updatedAt` first and ends cleanly at the
//!   horizon; it infers nothing, and leaves every collection awaiting a clean pass.
//! - RECONCILIATION lists a collection's documents by `createdAt` ascending, `offset`/`limit`,
//!   until an empty page ([`OffsetCursor`]); a page after a short one is an anomaly and the
//!   listing is not whole. Only a whole listing's vanished documents are candidates, and each is
//!   read on its own first (`documents.info`, `collections.info`): only a not-found answer or a
//!   dated deletion tombstones it; a document found elsewhere (moved, archived) is written as
//!   read, and a failed read keeps it (spec: confirm before tombstone; fail-closed listings).
//! - A collection is clean only after a whole listing whose sweep was applied with every
//!   candidate judged; otherwise it keeps awaiting, and the next 5-minute tick takes it again. A
//!   scheduled tick skips collections clean within the cooldown; an operator's pass takes all.
//!
//! Every write goes through `outline_mirror` under the row lock, forward by `updatedAt`, with its
//! one generic event.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lifecycle_core::Timestamp;
use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::forward::TimeBound;
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::{ListingPage, TotalCount};
use lifecycle_core::outline::confirm::{InfoAnswer, confirmed_gone};
use lifecycle_core::outline::pages::{OffsetCursor, OffsetPage};
use outline_client::types;
use outline_client::{Direction, DocumentSort, OutlineClient, OutlineError};
use outline_mirror::OutlineConnection;
use outline_mirror::collection::{
    self, Collection, CollectionPayload, CollectionWritten, PassOutcome,
};
use outline_mirror::document::{self, DocumentPayload};
use outline_mirror::events;
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::{ListingEnd, ListingPlan, Moment, PageCheck, Pass, Scopes, SweepEnd, Vendor};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::source::{ClientFactory, ReadFailure};

/// The most pages `collections.list` is read to when resolving a pass's collections.
const COLLECTION_PAGES: u32 = 1_000;

/// What a scope holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Collections,
    Documents,
}

/// A connection's reader for one job.
pub struct OutlineSource {
    pub client: OutlineClient,
    pub connection: OutlineConnection,
}

/// What a pass walks.
#[derive(Debug)]
pub enum Scope {
    /// The team: its collections.
    Team(Judged),
    /// One collection: its documents.
    Collection(Box<CollectionScope>),
}

/// One collection as a pass walks it.
#[derive(Debug)]
pub struct CollectionScope {
    pub row: Collection,
    /// Outline's id of it.
    pub uuid: Uuid,
    /// INITIAL: documents newest first, down to `horizon`.
    pub initial: Option<Timestamp>,
    pub judged: Judged,
}

/// What confirming a sweep's candidates found: the dates of those gone, and how many could not
/// be judged (kept, and the scope is not clean).
#[derive(Debug, Default)]
pub struct Judged {
    gone: Mutex<BTreeMap<String, Timestamp>>,
    unconfirmed: AtomicU64,
}

impl Judged {
    fn record(&self, gone: &[(String, Timestamp)], unconfirmed: u64) {
        let mut held = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        held.extend(gone.iter().cloned());
        self.unconfirmed.fetch_add(unconfirmed, Ordering::Relaxed);
    }

    fn date(&self, id: &str) -> Option<Timestamp> {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
    }

    fn unconfirmed(&self) -> u64 {
        self.unconfirmed.load(Ordering::Relaxed)
    }
}

impl Scope {
    fn judged(&self) -> &Judged {
        match self {
            Scope::Team(judged) => judged,
            Scope::Collection(c) => &c.judged,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Team(_) => f.write_str("team"),
            Scope::Collection(c) => write!(f, "collection {}", c.row.outline_id),
        }
    }
}

/// One page as read.
#[derive(Debug)]
pub struct OutlinePage {
    pub items: Items,
    pub page: OffsetPage<String>,
    /// When we asked (our clock): the bound of the dates it may carry.
    pub read_at: OffsetDateTime,
}

/// A page's items.
#[derive(Debug)]
pub enum Items {
    Collections(Vec<types::Collection>),
    Documents(Vec<types::Document>),
}

impl sync_engine::Listed<String> for OutlinePage {
    fn listing(&self) -> ListingPage<String> {
        self.page.listing.clone()
    }

    fn errored(&self) -> bool {
        self.page.anomaly
    }
}

/// chrono's instant (the generated client's) as ours.
fn instant(t: Option<chrono::DateTime<chrono::Utc>>) -> Option<Timestamp> {
    t.and_then(|t| t.timestamp_nanos_opt())
        .and_then(|n| OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).ok())
}

/// A listed collection as the mirror writes it; `None` without an id or `updatedAt`.
pub fn collection_payload(c: &types::Collection) -> Option<CollectionPayload> {
    Some(CollectionPayload {
        outline_id: c.id?.to_string(),
        name: c.name.clone(),
        url_id: c.url_id.clone(),
        updated_at: instant(c.updated_at)?,
        deleted_at: instant(c.deleted_at),
    })
}

/// A listed document as the mirror writes it; `None` without an id, a collection (a private
/// draft is not mirrored) or `updatedAt`.
pub fn document_payload(d: &types::Document) -> Option<DocumentPayload> {
    Some(DocumentPayload {
        outline_id: d.id?.to_string(),
        collection_outline_id: d.collection_id?.to_string(),
        parent_outline_id: d.parent_document_id.map(|p| p.to_string()),
        title: d.title.clone(),
        text: d.text.clone(),
        url_id: d.url_id.clone(),
        created_at: instant(d.created_at),
        updated_at: instant(d.updated_at)?,
        published_at: instant(d.published_at),
        archived_at: instant(d.archived_at),
        deleted_at: instant(d.deleted_at),
    })
}

/// Outline's sync.
pub struct OutlineVendor {
    pub pool: PgPool,
    pub factory: ClientFactory,
    /// How far back an INITIAL reads documents (by `updatedAt`).
    pub horizon: Duration,
    /// How far past our clock a read's dates may be.
    pub clock_skew: Duration,
    /// Readies a connection: its subscription, registered subscription first (`None`: nothing
    /// to ready, as in tests of the reads alone).
    pub activator: Option<crate::activation::Activator>,
}

/// Whether the deadlock detector chose this transaction (another writer locked the same rows in
/// the other order): the write is retried.
fn deadlocked(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "40P01")
}

impl OutlineVendor {
    /// Writes a page of documents forward, in one transaction per page with its collection's
    /// key share taken first (a collection's deletion locks it before its documents, so neither
    /// waits on the other holding what it needs). Returns how many changed the mirror.
    async fn write_documents(
        &self,
        connection: &OutlineConnection,
        scope: &CollectionScope,
        bound: TimeBound,
        documents: &[types::Document],
    ) -> Result<(u64, u64), sqlx::Error> {
        let mut payloads: Vec<DocumentPayload> = Vec::with_capacity(documents.len());
        // `document::apply_page` locks them in id order, as every writer does.
        let mut dropped = 0;
        for d in documents {
            let Some(p) = document_payload(d) else {
                dropped += 1;
                continue;
            };
            // A version dated past our clock would freeze the row; one older than the
            // INITIAL's horizon is the reconcile's.
            if bound.check(p.updated_at).is_err() || scope.initial.is_some_and(|h| p.updated_at < h)
            {
                dropped += 1;
                continue;
            }
            payloads.push(p);
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_payloads(connection, scope, &payloads).await {
                Err(e) if deadlocked(&e) && attempt < 3 => continue,
                written => return written.map(|n| (n, dropped)),
            }
        }
    }

    async fn write_payloads(
        &self,
        connection: &OutlineConnection,
        scope: &CollectionScope,
        payloads: &[DocumentPayload],
    ) -> Result<u64, sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        sqlx::query("SELECT 1 FROM outline_collection WHERE id = $1 FOR KEY SHARE")
            .bind(scope.row.id)
            .execute(&mut *txn)
            .await?;
        let mut changed = 0;
        for written in document::apply_page(&mut txn, connection, payloads).await? {
            events::document(&mut txn, connection, &written).await?;
            changed += u64::from(written.document().is_some());
        }
        txn.commit().await?;
        Ok(changed)
    }

    /// Writes a page of collections forward; how many changed the mirror.
    async fn write_collections(
        &self,
        connection: &OutlineConnection,
        bound: TimeBound,
        collections: &[types::Collection],
    ) -> Result<u64, sqlx::Error> {
        let mut changed = 0;
        for c in collections {
            let Some(p) = collection_payload(c) else {
                continue;
            };
            if bound.check(p.updated_at).is_err() {
                continue;
            }
            let mut txn = self.pool.begin().await?;
            let written = outline_mirror::apply_collection(&mut txn, connection, &p).await?;
            events::collection(&mut txn, connection, &written).await?;
            txn.commit().await?;
            changed += u64::from(written != CollectionWritten::Unchanged);
        }
        Ok(changed)
    }

    /// Reads `collections.list` to its empty page, writing each page forward; the ids listed,
    /// or the failure that stopped it.
    async fn resolve_collections(
        &self,
        pass: &Pass<'_>,
        source: &OutlineSource,
        limit: u32,
    ) -> Result<Result<BTreeSet<String>, ReadFailure>, sqlx::Error> {
        let mut cursor = OffsetCursor::default();
        let mut listed = BTreeSet::new();
        for _ in 0..COLLECTION_PAGES {
            let read_at = OffsetDateTime::now_utc();
            let page = match source.client.collections_list(cursor.offset, limit).await {
                Ok(page) => page,
                Err(e) => return Ok(Err(e.into())),
            };
            if page.items.is_empty() {
                return Ok(Ok(listed));
            }
            self.write_collections(&source.connection, pass.time_bound(read_at), &page.items)
                .await?;
            let n = page.items.len() as u64;
            listed.extend(
                page.items
                    .iter()
                    .filter_map(|c| c.id.map(|id| id.to_string())),
            );
            cursor = OffsetCursor {
                offset: cursor.offset + n,
                after_short: false,
            };
        }
        Ok(Err(ReadFailure::Anomaly(format!(
            "collections.list did not end within {COLLECTION_PAGES} pages"
        ))))
    }
}

#[async_trait::async_trait]
impl Vendor for OutlineVendor {
    const KIND: ConnectionKind = ConnectionKind::Outline;
    const SCOPES: &'static str = "collections";
    const CLASSES: &'static [Class] = &[Class::Collections, Class::Documents];

    type Source = OutlineSource;
    type Scope = Scope;
    type Class = Class;
    type Id = String;
    type Page = OutlinePage;
    type Error = ReadFailure;

    fn class_name(class: Class) -> &'static str {
        match class {
            Class::Collections => "collection",
            Class::Documents => "document",
        }
    }

    fn total_count(_: Class) -> TotalCount {
        TotalCount::NotOffered
    }

    async fn source(&self, conn: &connection::Model) -> anyhow::Result<OutlineSource> {
        let connection = OutlineConnection::load(&self.pool, conn.id)
            .await?
            .ok_or_else(|| {
                anyhow::anyhow!("connection {} is not an Outline connection", conn.id)
            })?;
        Ok(OutlineSource {
            client: self.factory.source(conn).await?,
            connection,
        })
    }

    async fn scopes(
        &self,
        pass: &Pass<'_>,
        source: &OutlineSource,
    ) -> Result<Result<Scopes<Scope>, ReadFailure>, sqlx::Error> {
        // Every pass walks the collections Outline lists now, written first; one a listing
        // misses is judged by the team scope's sweep, never walked blind.
        let listed = match self.resolve_collections(pass, source, 100).await? {
            Ok(listed) => listed,
            Err(e) => return Ok(Err(e)),
        };
        let initial = (pass.job.job_type == SyncJobType::Initial)
            .then(|| OffsetDateTime::now_utc() - self.horizon);
        let mut scopes = Vec::new();
        if pass.job.job_type == SyncJobType::Reconciliation {
            scopes.push(Scope::Team(Judged::default()));
        }
        for row in collection::live(&self.pool, &source.connection).await? {
            if !listed.contains(&row.outline_id) {
                continue;
            }
            let Ok(uuid) = row.outline_id.parse::<Uuid>() else {
                continue;
            };
            scopes.push(Scope::Collection(Box::new(CollectionScope {
                row,
                uuid,
                initial,
                judged: Judged::default(),
            })));
        }
        Ok(Ok(Scopes {
            scopes,
            unresolved: None,
        }))
    }

    async fn reconciled_within(
        &self,
        _pass: &Pass<'_>,
        scope: &Scope,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        // The row as the pass began; a tick's catch-up takes only what awaits or has cooled.
        Ok(match scope {
            Scope::Team(_) => false,
            Scope::Collection(c) => {
                !c.row.awaiting_clean_pass
                    && c.row
                        .last_clean_pass_at
                        .is_some_and(|at| at > OffsetDateTime::now_utc() - cooldown)
            }
        })
    }

    async fn plan_listing(
        &self,
        pass: &Pass<'_>,
        scope: &mut Scope,
        class: Class,
        cooling: bool,
    ) -> Result<ListingPlan, sqlx::Error> {
        let reconciling = pass.job.job_type == SyncJobType::Reconciliation;
        Ok(match (scope, class) {
            (Scope::Team(_), Class::Collections) if reconciling => ListingPlan::Whole,
            (Scope::Collection(_), Class::Documents) if !cooling => ListingPlan::Whole,
            _ => ListingPlan::Skip,
        })
    }

    async fn read_page(
        &self,
        source: &OutlineSource,
        scope: &Scope,
        class: Class,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<OutlinePage, ReadFailure> {
        let cursor = OffsetCursor::parse(after).map_err(|e| ReadFailure::Anomaly(e.to_string()))?;
        let limit = page_size.clamp(1, 100);
        let read_at = OffsetDateTime::now_utc();
        let items = match (scope, class) {
            (Scope::Team(_), Class::Collections) => Items::Collections(
                source
                    .client
                    .collections_list(cursor.offset, limit)
                    .await?
                    .items,
            ),
            (Scope::Collection(c), Class::Documents) => {
                // INITIAL: newest first, to the horizon. RECONCILIATION: by creation, which
                // moves only as documents go.
                let (sort, direction) = match c.initial {
                    Some(_) => (DocumentSort::UpdatedAt, Direction::Desc),
                    None => (DocumentSort::CreatedAt, Direction::Asc),
                };
                match source
                    .client
                    .documents_list(Some(c.uuid), cursor.offset, limit, sort, direction)
                    .await
                {
                    Ok(page) => Items::Documents(page.items),
                    // Outline refuses the listing of a collection deleted since it was listed:
                    // this listing ends; the team scope's sweep judges the collection.
                    Err(e @ (OutlineError::Forbidden { .. } | OutlineError::NotFound { .. })) => {
                        return Err(ReadFailure::CollectionUnreadable(e.to_string()));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            (scope, class) => {
                return Err(ReadFailure::Anomaly(format!(
                    "{scope} holds no {}",
                    Self::class_name(class)
                )));
            }
        };
        let ids: Option<Vec<String>> = match &items {
            Items::Collections(c) => c.iter().map(|c| c.id.map(|id| id.to_string())).collect(),
            Items::Documents(d) => d.iter().map(|d| d.id.map(|id| id.to_string())).collect(),
        };
        let ids = ids.ok_or_else(|| ReadFailure::Anomaly("an item without its id".into()))?;
        Ok(OutlinePage {
            items,
            page: cursor.page(ids, limit),
            read_at,
        })
    }

    async fn check_page(
        &self,
        _pass: &Pass<'_>,
        scope: &mut Scope,
        page: &OutlinePage,
    ) -> Result<PageCheck, sqlx::Error> {
        // INITIAL's horizon: the page reaching past it is the last one read.
        if let (Scope::Collection(c), Items::Documents(docs)) = (&*scope, &page.items)
            && let Some(horizon) = c.initial
            && docs
                .last()
                .and_then(|d| instant(d.updated_at))
                .is_some_and(|at| at < horizon)
        {
            return Ok(PageCheck::EndHere);
        }
        Ok(PageCheck::Write)
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        scope: &mut Scope,
        _class: Class,
        page: &OutlinePage,
    ) -> Result<u64, sqlx::Error> {
        let Some(connection) = OutlineConnection::load(&self.pool, pass.job.connection_id).await?
        else {
            return Ok(0);
        };
        let bound = pass.time_bound(page.read_at);
        match (&*scope, &page.items) {
            (Scope::Collection(c), Items::Documents(docs)) => {
                let (changed, dropped) = self.write_documents(&connection, c, bound, docs).await?;
                if dropped > 0 {
                    tracing::debug!(dropped, scope = %scope, "documents not written: no collection, past the clock or before the horizon");
                }
                Ok(changed)
            }
            (_, Items::Collections(cols)) => self.write_collections(&connection, bound, cols).await,
            _ => Ok(0),
        }
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        scope: &mut Scope,
        class: Class,
    ) -> Result<Vec<String>, sqlx::Error> {
        let Some(connection) = OutlineConnection::load(&self.pool, pass.job.connection_id).await?
        else {
            return Ok(Vec::new());
        };
        match (&*scope, class) {
            (Scope::Team(_), Class::Collections) => Ok(collection::live(&self.pool, &connection)
                .await?
                .into_iter()
                .map(|c| c.outline_id)
                .collect()),
            (Scope::Collection(c), Class::Documents) => {
                document::live_ids(&self.pool, &connection, &c.row.outline_id).await
            }
            _ => Ok(Vec::new()),
        }
    }

    async fn confirm_gone(
        &self,
        source: &OutlineSource,
        scope: &Scope,
        class: Class,
        candidates: &[String],
    ) -> Result<Vec<String>, ReadFailure> {
        let read_at = OffsetDateTime::now_utc();
        let bound = TimeBound::after(read_at, self.clock_skew);
        let mut answers = BTreeMap::new();
        for id in candidates {
            let answer = match id.parse::<Uuid>() {
                // Not an id Outline could answer for: nothing proves it gone.
                Err(_) => InfoAnswer::Failed,
                Ok(uuid) => match class {
                    Class::Documents => match source.client.documents_info(uuid).await {
                        Ok(d) => {
                            // Found: the read is its newest version (moved, archived). A version
                            // that could not be written leaves the pass unconfirmed, so the
                            // collection is not called clean and the next pass reads it again.
                            let written = match document_payload(&d) {
                                Some(p) if bound.check(p.updated_at).is_ok() => {
                                    self.write_found_document(source, &p).await
                                }
                                _ => Ok(()),
                            };
                            match written {
                                Ok(()) => InfoAnswer::Found {
                                    deleted_at: instant(d.deleted_at),
                                },
                                Err(e) => {
                                    tracing::warn!(error = %e, document = %id, "writing a confirmed document failed; it is kept");
                                    InfoAnswer::Failed
                                }
                            }
                        }
                        Err(e) if e.is_not_found() => InfoAnswer::NotFound,
                        Err(e) => {
                            tracing::warn!(error = %e, document = %id, "confirming a vanished document failed; it is kept");
                            InfoAnswer::Failed
                        }
                    },
                    Class::Collections => match source.client.collections_info(uuid).await {
                        Ok(c) => InfoAnswer::Found {
                            deleted_at: instant(c.deleted_at),
                        },
                        Err(e) if e.is_not_found() => InfoAnswer::NotFound,
                        Err(e) => {
                            tracing::warn!(error = %e, collection = %id, "confirming a vanished collection failed; it is kept");
                            InfoAnswer::Failed
                        }
                    },
                },
            };
            answers.insert(id.clone(), answer);
        }
        let gone = confirmed_gone(candidates, &answers, read_at);
        let unconfirmed = answers
            .values()
            .filter(|a| **a == InfoAnswer::Failed)
            .count() as u64;
        scope.judged().record(&gone, unconfirmed);
        Ok(gone.into_iter().map(|(id, _)| id).collect())
    }

    async fn tombstone(
        &self,
        pass: &Pass<'_>,
        scope: &Scope,
        class: Class,
        plan: &TombstonePlan<String>,
    ) -> Result<u64, sqlx::Error> {
        let Some(connection) = OutlineConnection::load(&self.pool, pass.job.connection_id).await?
        else {
            return Ok(0);
        };
        let mut marked = 0;
        for id in plan.ids() {
            // Dated by Outline's `deletedAt` when it gave one, else when it was confirmed.
            let Some(at) = scope.judged().date(id) else {
                continue;
            };
            let mut txn = self.pool.begin().await?;
            let changed = match (scope, class) {
                (Scope::Collection(c), Class::Documents) => {
                    let written = outline_mirror::tombstone_document(
                        &mut txn,
                        &connection,
                        id,
                        at,
                        Some(&c.row.outline_id),
                    )
                    .await?;
                    events::document(&mut txn, &connection, &written).await?;
                    written.document().is_some()
                }
                (Scope::Team(_), Class::Collections) => {
                    let written =
                        outline_mirror::tombstone_collection(&mut txn, &connection, id, at).await?;
                    events::collection(&mut txn, &connection, &written).await?;
                    written != CollectionWritten::Unchanged
                }
                _ => false,
            };
            txn.commit().await?;
            marked += u64::from(changed);
        }
        Ok(marked)
    }

    fn scope_detail(&self, scope: &Scope) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        if let Scope::Collection(c) = scope {
            detail.insert("collection_id".into(), c.row.id.to_string().into());
            detail.insert("outline_id".into(), c.row.outline_id.clone().into());
        }
        detail
    }

    async fn listing_ended(
        &self,
        pass: &Pass<'_>,
        scope: &mut Scope,
        class: Class,
        end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        let (Scope::Collection(c), Class::Documents) = (&*scope, class) else {
            return Ok(());
        };
        let Some(connection) = OutlineConnection::load(&self.pool, pass.job.connection_id).await?
        else {
            return Ok(());
        };
        let outcome = match pass.job.job_type {
            // INITIAL read only recent documents: the collection awaits its first clean pass.
            SyncJobType::Initial => PassOutcome::NotClean(match &end.incomplete {
                Some(reason) => format!("initial: {reason}"),
                None => "initial: documents since the horizon only".into(),
            }),
            _ => match (&end.incomplete, end.sweep, c.judged.unconfirmed()) {
                (Some(reason), _, _) => PassOutcome::NotClean(reason.clone()),
                (None, Some(SweepEnd::Applied), 0) => PassOutcome::Clean,
                (None, Some(SweepEnd::Applied), n) => {
                    PassOutcome::NotClean(format!("{n} vanished documents could not be confirmed"))
                }
                (None, Some(SweepEnd::Held), _) => PassOutcome::NotClean("sweep held".into()),
                (None, Some(SweepEnd::Unconfirmed), _) => {
                    PassOutcome::NotClean("tombstones unconfirmed".into())
                }
                (None, None, _) => PassOutcome::NotClean("not swept".into()),
            },
        };
        collection::record_pass(&self.pool, &connection, c.row.id, &outcome).await?;
        pass.job
            .record_activity(
                &self.pool,
                "outline_collection_pass",
                serde_json::json!({
                    "collection_id": c.row.id,
                    "outline_id": c.row.outline_id,
                    "outcome": match &outcome {
                        PassOutcome::Clean => "clean",
                        PassOutcome::NotClean(reason) => reason.as_str(),
                    },
                }),
            )
            .await
    }

    async fn activate(&self, conn: &connection::Model, moment: Moment) -> anyhow::Result<()> {
        let Some(activator) = &self.activator else {
            return Ok(());
        };
        let state = activator.activate(conn).await?;
        tracing::info!(connection_id = %conn.id, ?moment, ?state, "Outline subscription");
        Ok(())
    }
}

impl OutlineVendor {
    /// Writes a document a confirming read found, forward like any read.
    async fn write_found_document(
        &self,
        source: &OutlineSource,
        p: &DocumentPayload,
    ) -> Result<(), sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        let written = outline_mirror::apply_document(&mut txn, &source.connection, p).await?;
        events::document(&mut txn, &source.connection, &written).await?;
        txn.commit().await
    }
}
