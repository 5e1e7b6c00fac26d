//! What a vendor gives the engine: its connections' kind, a reader per connection, the scopes a
//! connection monitors, its item classes, one page of a class read and written, the live ids a
//! sweep may tombstone, and per-scope reconcile stamps. Everything else (claims, passes,
//! backfill, the deletion gate, activity, metrics) is the engine's.

use std::fmt;
use std::time::Duration;

use lifecycle_core::deletion::{BlastRadius, TombstonePlan};
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::{ListingFault, ListingPage, TotalCount};
use lifecycle_core::vendor_error::VendorErrorClass;
use store::entity::{ConnectionKind, connection};
use uuid::Uuid;

use crate::jobs::{ClaimedJob, JobControl, Jobs};

/// One vendor's sync, as the engine drives it. See `docs/adding-a-vendor.md`.
#[async_trait::async_trait]
pub trait Vendor: Send + Sync + 'static {
    /// Its connections' kind: jobs are claimed and queued only for it, and the job types it
    /// refuses are that kind's declaration in lifecycle-core ([`ConnectionKind::jobs`]).
    const KIND: ConnectionKind;
    /// What its scopes are called in a job's error (`repositories`, `channels`).
    const SCOPES: &'static str;
    /// The item classes a scope holds, listed in this order.
    const CLASSES: &'static [Self::Class];
    /// Whether the vendor infers deletion from absence. A vendor that never sweeps (`false`:
    /// deletions reach it as events) has no live ids, tombstones or reconcile stamps: the engine
    /// never calls [`live_ids`](Self::live_ids), [`tombstone`](Self::tombstone),
    /// [`reconciled_within`](Self::reconciled_within) or [`mark_reconciled`](Self::mark_reconciled),
    /// and its RECONCILIATION lists (whole or filtered) without inferring any deletion.
    const SWEEPS: bool = true;
    /// The job types queued when a connection activates, after [`activate`](Self::activate), in
    /// this order. Each must be one the kind's [`ConnectionKind::jobs`] runs (a refused type is
    /// never queued); an empty list queues nothing (Slack: nothing is read at connect).
    const ON_ACTIVATION: &'static [SyncJobType] = &[SyncJobType::Initial];

    /// A connection's reader, built once per job.
    type Source: Send + Sync;
    /// What a connection monitors (a repository, a project, a channel, a collection), as a pass
    /// walks it; it may carry what the pass resolves on the way (the stored row). Its display
    /// names it in logs and reasons.
    type Scope: fmt::Display + Send + Sync;
    /// An item class (issue, pull request, message, document).
    type Class: Copy + Send + Sync + 'static;
    /// A native id, as the deletion gate compares them.
    type Id: Ord + Clone + Send + Sync + 'static;
    /// One page of a class as read, waiting to be written.
    type Page: Listed<Self::Id> + Send + Sync;
    /// A failed read.
    type Error: ReadError;

    /// The class's name in logs, metrics and activity.
    fn class_name(class: Self::Class) -> &'static str;

    /// Whether the vendor reports a total count for a class's listing.
    fn total_count(_class: Self::Class) -> TotalCount {
        TotalCount::Required
    }

    /// The connection's reader; an error fails the job ("cannot reach <vendor> ...").
    async fn source(&self, conn: &connection::Model) -> anyhow::Result<Self::Source>;

    /// The scopes the connection's own credentials reach now, recorded as its monitors. What it
    /// no longer reaches is the `unresolved` reason: the pass walks the rest, then fails.
    async fn scopes(
        &self,
        pass: &Pass<'_>,
        source: &Self::Source,
    ) -> Result<Result<Scopes<Self::Scope>, Self::Error>, sqlx::Error>;

    /// One page of `class` in `scope`, after `after`.
    async fn read_page(
        &self,
        source: &Self::Source,
        scope: &Self::Scope,
        class: Self::Class,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<Self::Page, Self::Error>;

    /// Writes a page forward-only; returns how many items changed the mirror.
    async fn write_page(
        &self,
        pass: &Pass<'_>,
        scope: &mut Self::Scope,
        class: Self::Class,
        page: &Self::Page,
    ) -> Result<u64, sqlx::Error>;

    /// The ids of the class's live rows in the scope: a RECONCILIATION's candidates, captured
    /// before its listing starts.
    /// Called only when [`SWEEPS`](Self::SWEEPS); by default there are none.
    async fn live_ids(
        &self,
        _pass: &Pass<'_>,
        _scope: &mut Self::Scope,
        _class: Self::Class,
    ) -> Result<Vec<Self::Id>, sqlx::Error> {
        Ok(Vec::new())
    }

    /// Tombstones what the deletion gate planned and [`confirm_gone`](Self::confirm_gone)
    /// confirmed; returns how many rows it marked. Called only when [`SWEEPS`](Self::SWEEPS);
    /// by default it marks none.
    async fn tombstone(
        &self,
        _pass: &Pass<'_>,
        _scope: &Self::Scope,
        _class: Self::Class,
        _plan: &TombstonePlan<Self::Id>,
    ) -> Result<u64, sqlx::Error> {
        Ok(0)
    }

    /// Confirms, before anything is tombstoned, which of the deletion gate's planned ids are
    /// gone upstream (e.g. a direct read of each answers 404): only those are tombstoned. By
    /// default a whole listing is proof and every candidate is confirmed. An error keeps every
    /// candidate (nothing is tombstoned) and is recorded; the blast-radius hold applies to the
    /// planned set before this is asked.
    async fn confirm_gone(
        &self,
        _source: &Self::Source,
        _scope: &Self::Scope,
        _class: Self::Class,
        candidates: &[Self::Id],
    ) -> Result<Vec<Self::Id>, Self::Error> {
        Ok(candidates.to_vec())
    }

    /// The scope's fields in a sweep's activity detail (e.g. the stored row's id).
    fn scope_detail(&self, scope: &Self::Scope) -> serde_json::Map<String, serde_json::Value>;

    /// Whether the scope finished a complete reconcile within `cooldown` (a scheduled
    /// RECONCILIATION skips it). Called only when [`SWEEPS`](Self::SWEEPS); by default never.
    async fn reconciled_within(
        &self,
        _pass: &Pass<'_>,
        _scope: &Self::Scope,
        _cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        Ok(false)
    }

    /// Stamps a complete reconcile of the scope. Called only when [`SWEEPS`](Self::SWEEPS); by
    /// default it stamps nothing.
    async fn mark_reconciled(
        &self,
        _pass: &Pass<'_>,
        _scope: &Self::Scope,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// The scope lost the connection's access (a read failed with [`ReadStop::Scope`]: a bot
    /// removed from one channel): the vendor marks that monitor (e.g. paused with `reason`).
    /// The scope's listing has ended, inferring nothing; the pass goes on with the other scopes,
    /// and the connection's credentials are not flagged.
    async fn scope_lost_access(
        &self,
        _pass: &Pass<'_>,
        _scope: &mut Self::Scope,
        _reason: &str,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// Readies a connection for its jobs: on activation, before its
    /// [`ON_ACTIVATION`](Self::ON_ACTIVATION) jobs are queued, and
    /// again before every RECONCILIATION (scheduled or Sync now), which retries what an earlier
    /// activation left unfinished. A vendor with nothing to ready (the default) changes nothing.
    /// What could not be readied is the vendor's to record; an error here is a failure to do
    /// even that (the activation message is retried, a RECONCILIATION runs on and logs it).
    async fn activate(&self, _conn: &connection::Model, _moment: Moment) -> anyhow::Result<()> {
        Ok(())
    }

    /// Runs before a scope's listings in every pass (GitHub re-reads stale check runs here).
    async fn before_scope(
        &self,
        _pass: &Pass<'_>,
        _source: &Self::Source,
        _scope: &mut Self::Scope,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// Runs after a scope's listings in a pass that walked them all (GitLab mirrors and
    /// reconciles the notes of the scope's items here). `cooling`: as for
    /// [`plan_listing`](Self::plan_listing). Work that reads the vendor at length heartbeats
    /// between its reads ([`Pass::heartbeat`]) and, once told to stop, returns that without
    /// writing more: the engine ends the job (canceled, or as a lost lease) and walks no further.
    async fn after_scope(
        &self,
        _pass: &Pass<'_>,
        _source: &Self::Source,
        _scope: &mut Self::Scope,
        _cooling: bool,
    ) -> Result<JobControl, sqlx::Error> {
        Ok(JobControl::Continue)
    }

    /// How the class's listing of the scope runs in this pass. `cooling`: a scheduled
    /// RECONCILIATION found the scope completely reconciled within the cooldown. By default a
    /// cooling scope is skipped and every other listing is whole.
    async fn plan_listing(
        &self,
        _pass: &Pass<'_>,
        _scope: &mut Self::Scope,
        _class: Self::Class,
        cooling: bool,
    ) -> Result<ListingPlan, sqlx::Error> {
        Ok(if cooling {
            ListingPlan::Skip
        } else {
            ListingPlan::Whole
        })
    }

    /// Runs after each planned listing of the class ends, however it ended (a vendor keeps its
    /// watermark or a backfill's resume point here).
    async fn listing_ended(
        &self,
        _pass: &Pass<'_>,
        _scope: &mut Self::Scope,
        _class: Self::Class,
        _end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// Looks at each page before it is written: the scope's listing may end here, inferring
    /// nothing (GitHub: the monitored name now belongs to another repository), and the scope may
    /// learn what the page says of it (GitHub: the repository was renamed).
    async fn check_page(
        &self,
        _pass: &Pass<'_>,
        _scope: &mut Self::Scope,
        _page: &Self::Page,
    ) -> Result<PageCheck, sqlx::Error> {
        Ok(PageCheck::Write)
    }
}

/// How one class's listing of one scope runs in a pass ([`Vendor::plan_listing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListingPlan {
    /// Not listed in this pass.
    Skip,
    /// The whole class from its first page: the only listing a RECONCILIATION's deletion gate
    /// may follow.
    Whole,
    /// Only what the vendor's own filter selects (e.g. changed since its watermark), read to
    /// its end: it never sweeps, since what it leaves out is not gone.
    Filtered,
    /// At most `pages` pages from `after`: one batch of a longer listing. It never sweeps, and
    /// a batch that stops at its page limit has done its share of the pass.
    Batch { after: Option<String>, pages: u32 },
}

/// How a planned listing ended ([`Vendor::listing_ended`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingEnd {
    pub plan: ListingPlan,
    /// The listing reached its last page with every check clean (for a batch: the rest of the
    /// listing from where it started).
    pub complete: bool,
    /// A batch stopped at its page limit, with more to come.
    pub batch_full: bool,
    /// The cursor after the last page written, if any page was.
    pub last_cursor: Option<String>,
    /// Why the listing is not complete (a fault, a short page, the budget); `None` when it is.
    pub incomplete: Option<String>,
    /// What the deletion gate did after it: `None` when it did not run (not a whole
    /// RECONCILIATION listing of a sweeping vendor, or the listing was incomplete).
    pub sweep: Option<SweepEnd>,
}

/// What the deletion gate did after a whole RECONCILIATION listing ([`ListingEnd::sweep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepEnd {
    /// Its plan was confirmed and tombstoned (or it planned nothing).
    Applied,
    /// Held for an operator: more would go than the blast radius allows.
    Held,
    /// Confirming the planned tombstones failed: every candidate was kept.
    Unconfirmed,
}

/// When [`Vendor::activate`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The connection was activated; its [`Vendor::ON_ACTIVATION`] jobs are queued after.
    Activated,
    /// A RECONCILIATION job is about to run.
    Reconciliation,
    /// The connection was resumed; no jobs are queued after.
    Resumed,
}

/// The job a pass runs for, as a vendor sees it.
#[derive(Debug, Clone, Copy)]
pub struct Pass<'a> {
    pub job: &'a ClaimedJob,
    /// The vendor instance of the job's connection.
    pub provider_instance_id: Uuid,
    pub(crate) jobs: &'a Jobs,
    /// The engine's blast radius, which child sweeps share ([`crate::children`]).
    pub(crate) blast_radius: BlastRadius,
    pub(crate) clock_skew: std::time::Duration,
}

impl Pass<'_> {
    /// The latest vendor time a page read at `read_at` may carry: a node dated past it is not
    /// written (it would freeze its row), and says why.
    pub fn time_bound(&self, read_at: time::OffsetDateTime) -> lifecycle_core::forward::TimeBound {
        lifecycle_core::forward::TimeBound::after(read_at, self.clock_skew)
    }

    /// Extends the job's lease and says whether it goes on, as the engine asks before every
    /// page: canceled, or taken over by another replica (write nothing more). The job's
    /// recorded progress stays.
    pub async fn heartbeat(&self) -> Result<JobControl, sqlx::Error> {
        self.jobs.heartbeat(self.job, None, None).await
    }
}

/// What [`Vendor::scopes`] found.
#[derive(Debug, Clone)]
pub struct Scopes<S> {
    /// The scopes to walk, in order.
    pub scopes: Vec<S>,
    /// Why some monitored scopes no longer resolve with the connection's credentials; the pass
    /// fails with it after walking the rest (never a quiet skip).
    pub unresolved: Option<String>,
}

/// A page as the engine's listing sees it.
pub trait Listed<Id> {
    /// The ids, cursor and totals the listing checks.
    fn listing(&self) -> ListingPage<Id>;
    /// Whether the vendor reported an error in an otherwise usable page.
    fn errored(&self) -> bool;
}

/// What [`Vendor::check_page`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCheck {
    Write,
    /// Not this scope's data: its listing ends and decides nothing.
    SkipScope,
    /// The page is written (the vendor's [`Vendor::write_page`] keeps only what is inside its
    /// horizon) and the listing ends there, complete for its plan: e.g. a channel's history
    /// reached the channel's consent time. Nothing is inferred from what was not read, whatever
    /// the plan.
    EndHere,
}

/// A failed read, and how far it reaches.
pub trait ReadError: fmt::Display + Send + Sync + 'static {
    /// The vendor's error class of the failure. Every reason the engine records names it, and a
    /// class that refuses the credentials fails the job and flags the connection whatever
    /// [`stops`](Self::stops) says.
    fn class(&self) -> VendorErrorClass;
    /// How the listing records it.
    fn fault(&self) -> ListingFault {
        ListingFault::Vendor(self.class())
    }
    /// What else it stops.
    fn stops(&self) -> ReadStop;
}

/// How far a failed read reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadStop {
    /// Only this listing (a scope-level failure such as a 404).
    Listing,
    /// The scope lost the connection's access (a bot removed from one channel), with the
    /// reason: its listing ends inferring nothing, the vendor marks that monitor
    /// ([`Vendor::scope_lost_access`]) and the pass goes on with the other scopes. The
    /// connection's credentials are not flagged and the job does not fail for it. Its class is
    /// `VendorErrorClass::ScopeLost`; an error whose class refuses the credentials is handled as
    /// the refusal it is, whatever it says it stops.
    Scope(String),
    /// The pass, failing with the reason (the vendor is failing; a backfill may pass again).
    Pass(String),
    /// The job, failing with the reason: quota or rate limit, which another pass would only
    /// spend further.
    Job(String),
}
