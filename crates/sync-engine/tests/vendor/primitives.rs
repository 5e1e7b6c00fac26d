//! The engine primitives a vendor that is not a forge needs, each proved through a shaped
//! variant of the scripted vendor ([`Shaped`]): a vendor that never sweeps, the job types queued
//! on activation, a scope that loses access, confirm-before-tombstone, and a listing that ends at
//! its horizon. [`Shaped`] forwards every read and write to [`Scripted`] and only adds the knob
//! a test turns, so each test proves one engine rule.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::job::SyncJobType;
use lifecycle_core::vendor_error::VendorErrorClass;
use store::entity::{ConnectionKind, connection};
use sync_engine::consumers::{LifecycleHandler, activation_refusal};
use sync_engine::{
    ClaimedJob, Engine, JobControl, JobOutcome, ListingEnd, ListingPlan, PageCheck, Pass,
    ReadError, ReadStop, Scopes, Vendor,
};

use crate::scripted::{
    self, Fault, Fixture, Gitlab, Monitored, Note, Scripted, ScriptedError, ScriptedPage,
    ScriptedSource,
};

/// The declarations a shaped vendor makes.
pub trait Shape: Send + Sync + 'static {
    const KIND: ConnectionKind;
    const SWEEPS: bool;
    const ON_ACTIVATION: &'static [SyncJobType];
}

/// A forge: sweeps, runs INITIAL on activation.
pub struct Forge;
impl Shape for Forge {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
    const SWEEPS: bool = true;
    const ON_ACTIVATION: &'static [SyncJobType] = &[SyncJobType::Initial];
}

/// A channel-like vendor: never sweeps, reads nothing on activation.
pub struct Channel;
impl Shape for Channel {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
    const SWEEPS: bool = false;
    const ON_ACTIVATION: &'static [SyncJobType] = &[];
}

/// A wrong declaration: Outline refuses BACKFILL.
pub struct RefusedOnActivation;
impl Shape for RefusedOnActivation {
    const KIND: ConnectionKind = ConnectionKind::Outline;
    const SWEEPS: bool = true;
    const ON_ACTIVATION: &'static [SyncJobType] = &[SyncJobType::Backfill, SyncJobType::Initial];
}

/// How [`Shaped::confirm_gone`] answers.
#[derive(Debug, Clone, Default)]
pub enum Confirm {
    /// Every candidate is gone (the default of a vendor).
    #[default]
    All,
    /// Only these are gone; the others still read.
    Only(Vec<String>),
    /// The confirming reads fail.
    Fail,
}

/// What the test turns, and what the engine asked of the vendor.
#[derive(Debug, Default)]
pub struct Knobs {
    /// Scopes (by native id) whose reads fail: the bot lost access to them.
    pub lost: Vec<i64>,
    /// Scopes whose reads fail with refused credentials, claiming to stop only the scope.
    pub revoked: Vec<i64>,
    /// The page (counted from 0 over the vendor's life) at which the page check ends the listing.
    pub end_here_at: Option<usize>,
    pub confirm: Confirm,
    /// Pages the page check saw.
    pub pages_seen: usize,
    /// Calls of the four sweep methods (live ids, tombstone, reconciled within, mark reconciled).
    pub sweep_calls: usize,
    /// Candidates the engine asked to confirm, per call.
    pub confirm_asked: Vec<Vec<String>>,
    /// Scopes marked as having lost access, with the reason.
    pub lost_marked: Vec<(String, String)>,
    /// How each listing ended.
    pub ends: Vec<ListingEnd>,
}

/// A read failure of the shaped vendor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapedError {
    Scripted(ScriptedError),
    /// The bot is no longer in the channel.
    LostAccess,
    /// The token was revoked, though the error says it stops only its scope.
    RevokedInScope,
    /// A confirming read failed.
    Unconfirmed,
}

impl std::fmt::Display for ShapedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShapedError::Scripted(e) => e.fmt(f),
            ShapedError::LostAccess => f.write_str("not_in_channel"),
            ShapedError::RevokedInScope => f.write_str("token_revoked"),
            ShapedError::Unconfirmed => f.write_str("the confirming read answered HTTP 503"),
        }
    }
}

impl ReadError for ShapedError {
    fn class(&self) -> VendorErrorClass {
        match self {
            ShapedError::Scripted(e) => e.class(),
            ShapedError::LostAccess => VendorErrorClass::ScopeLost,
            ShapedError::RevokedInScope => VendorErrorClass::BadCredentials,
            ShapedError::Unconfirmed => VendorErrorClass::ServerError,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            ShapedError::Scripted(e) => e.stops(),
            ShapedError::LostAccess => ReadStop::Scope("the bot was removed from it".into()),
            ShapedError::RevokedInScope => ReadStop::Scope("the token was revoked".into()),
            ShapedError::Unconfirmed => ReadStop::Listing,
        }
    }
}

/// The scripted vendor with one shape's declarations and the test's knobs.
pub struct Shaped<S: Shape> {
    inner: Scripted<Gitlab>,
    pub knobs: Arc<Mutex<Knobs>>,
    shape: std::marker::PhantomData<fn() -> S>,
}

impl<S: Shape> Shaped<S> {
    fn with<T>(&self, f: impl FnOnce(&mut Knobs) -> T) -> T {
        f(&mut self.knobs.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl<S: Shape> Vendor for Shaped<S> {
    const KIND: ConnectionKind = S::KIND;
    const SCOPES: &'static str = "channels";
    const CLASSES: &'static [Note] = &[Note];
    const SWEEPS: bool = S::SWEEPS;
    const ON_ACTIVATION: &'static [SyncJobType] = S::ON_ACTIVATION;

    type Source = Arc<ScriptedSource>;
    type Scope = Monitored;
    type Class = Note;
    type Id = String;
    type Page = ScriptedPage;
    type Error = ShapedError;

    fn class_name(_: Note) -> &'static str {
        "note"
    }

    async fn source(&self, conn: &connection::Model) -> anyhow::Result<Arc<ScriptedSource>> {
        self.inner.source(conn).await
    }

    async fn scopes(
        &self,
        pass: &Pass<'_>,
        source: &Arc<ScriptedSource>,
    ) -> Result<Result<Scopes<Monitored>, ShapedError>, sqlx::Error> {
        Ok(self
            .inner
            .scopes(pass, source)
            .await?
            .map_err(ShapedError::Scripted))
    }

    async fn read_page(
        &self,
        source: &Arc<ScriptedSource>,
        scope: &Monitored,
        class: Note,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<ScriptedPage, ShapedError> {
        if self.with(|k| k.lost.contains(&scope.native_id)) {
            return Err(ShapedError::LostAccess);
        }
        if self.with(|k| k.revoked.contains(&scope.native_id)) {
            return Err(ShapedError::RevokedInScope);
        }
        self.inner
            .read_page(source, scope, class, after, page_size)
            .await
            .map_err(ShapedError::Scripted)
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        scope: &mut Monitored,
        class: Note,
        page: &ScriptedPage,
    ) -> Result<u64, sqlx::Error> {
        self.inner.write_page(pass, scope, class, page).await
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        scope: &mut Monitored,
        class: Note,
    ) -> Result<Vec<String>, sqlx::Error> {
        self.with(|k| k.sweep_calls += 1);
        self.inner.live_ids(pass, scope, class).await
    }

    async fn tombstone(
        &self,
        pass: &Pass<'_>,
        scope: &Monitored,
        class: Note,
        plan: &TombstonePlan<String>,
    ) -> Result<u64, sqlx::Error> {
        self.with(|k| k.sweep_calls += 1);
        self.inner.tombstone(pass, scope, class, plan).await
    }

    async fn confirm_gone(
        &self,
        _: &Arc<ScriptedSource>,
        _: &Monitored,
        _: Note,
        candidates: &[String],
    ) -> Result<Vec<String>, ShapedError> {
        let confirm = self.with(|k| {
            k.confirm_asked.push(candidates.to_vec());
            k.confirm.clone()
        });
        match confirm {
            Confirm::All => Ok(candidates.to_vec()),
            Confirm::Only(gone) => Ok(gone),
            Confirm::Fail => Err(ShapedError::Unconfirmed),
        }
    }

    fn scope_detail(&self, scope: &Monitored) -> serde_json::Map<String, serde_json::Value> {
        self.inner.scope_detail(scope)
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        scope: &Monitored,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        self.with(|k| k.sweep_calls += 1);
        self.inner.reconciled_within(pass, scope, cooldown).await
    }

    async fn mark_reconciled(&self, pass: &Pass<'_>, scope: &Monitored) -> Result<(), sqlx::Error> {
        self.with(|k| k.sweep_calls += 1);
        self.inner.mark_reconciled(pass, scope).await
    }

    async fn scope_lost_access(
        &self,
        _: &Pass<'_>,
        scope: &mut Monitored,
        reason: &str,
    ) -> Result<(), sqlx::Error> {
        self.with(|k| k.lost_marked.push((scope.to_string(), reason.to_owned())));
        Ok(())
    }

    async fn after_scope(
        &self,
        pass: &Pass<'_>,
        source: &Arc<ScriptedSource>,
        scope: &mut Monitored,
        cooling: bool,
    ) -> Result<JobControl, sqlx::Error> {
        self.inner.after_scope(pass, source, scope, cooling).await
    }

    async fn listing_ended(
        &self,
        _: &Pass<'_>,
        _: &mut Monitored,
        _: Note,
        end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        self.with(|k| k.ends.push(end.clone()));
        Ok(())
    }

    async fn check_page(
        &self,
        _: &Pass<'_>,
        _: &mut Monitored,
        _: &ScriptedPage,
    ) -> Result<PageCheck, sqlx::Error> {
        Ok(self.with(|k| {
            let page = k.pages_seen;
            k.pages_seen += 1;
            if k.end_here_at == Some(page) {
                PageCheck::EndHere
            } else {
                PageCheck::Write
            }
        }))
    }
}

/// A shaped vendor over `source` and its engine on the fixture's database.
fn shaped<S: Shape>(f: &Fixture, source: &Arc<ScriptedSource>) -> Engine<Shaped<S>> {
    let vendor = Shaped::<S> {
        inner: Scripted::new(f.pool.clone(), source.clone()),
        knobs: Arc::default(),
        shape: std::marker::PhantomData,
    };
    Engine::new(
        Arc::new(vendor),
        f.pool.clone(),
        "replica-a",
        Duration::from_secs(30),
        scripted::settings(),
    )
}

/// Queues, claims and runs a job on `engine`.
async fn run<S: Shape>(
    f: &Fixture,
    engine: &Engine<Shaped<S>>,
    job_type: &str,
    trigger: &str,
    source: &Arc<ScriptedSource>,
) -> Result<JobOutcome> {
    let id = f.queue(job_type, trigger).await?;
    let job: ClaimedJob = engine.jobs.claim(id).await?.job().expect("claimable");
    Ok(engine
        .run(&job, f.provider_instance_id, source.clone())
        .await?)
}

fn knobs<S: Shape>(engine: &Engine<Shaped<S>>) -> std::sync::MutexGuard<'_, Knobs> {
    engine.vendor.knobs.lock().unwrap()
}

#[tokio::test]
async fn a_vendor_that_never_sweeps_is_never_asked_to_and_tombstones_nothing() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(30);
    let engine = shaped::<Channel>(&f, &source);
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert_eq!(f.live().await?, 30);
    source.with(|s| s.items.truncate(10));
    for trigger in ["manual", "scheduled"] {
        assert_eq!(
            run(&f, &engine, "RECONCILIATION", trigger, &source).await?,
            JobOutcome::Succeeded
        );
    }
    assert!(f.tombstoned().await?.is_empty(), "no deletion from absence");
    assert_eq!(
        knobs(&engine).sweep_calls,
        0,
        "no live ids, tombstones or reconcile stamps"
    );
    assert!(f.activities("not_reconciled").await?.is_empty());
    // No stamp cools the scheduled pass: it read again (three pages, then one and one).
    assert_eq!(source.calls(), 5);

    // The same listing by a sweeping vendor tombstones what vanished.
    let forge = shaped::<Forge>(&f, &source);
    run(&f, &forge, "RECONCILIATION", "manual", &source).await?;
    assert_eq!(f.tombstoned().await?.len(), 20);
    assert!(knobs(&forge).sweep_calls > 0);
    Ok(())
}

#[tokio::test]
async fn a_vendor_that_never_sweeps_records_an_incomplete_listing_itself() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(30);
    let engine = shaped::<Channel>(&f, &source);
    // A clean replay records nothing.
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert!(f.activities("listing_incomplete").await?.is_empty());

    // A page with an error inside it: no deletion gate runs for this vendor, so the engine
    // says the listing was partial, for which class and scope, and why.
    let calls = source.calls();
    source.with(|s| s.faults = vec![(calls + 1, Fault::Errored)]);
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    let recorded = f.activities("listing_incomplete").await?;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["class"], "note", "{recorded:?}");
    assert!(
        recorded[0]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{recorded:?}"
    );
    assert!(f.tombstoned().await?.is_empty());
    assert_eq!(knobs(&engine).sweep_calls, 0);
    Ok(())
}

fn activation(f: &Fixture, generation: i64) -> bus::contracts::LifecycleTransition {
    bus::contracts::LifecycleTransition {
        connection_id: f.tenant.connection_id,
        workspace_id: f.tenant.workspace_id,
        kind: f.kind.as_str().into(),
        transition: "activate".into(),
        before_status: "pending".into(),
        status: "active".into(),
        version: generation,
        lifecycle_generation: generation,
        provider_instance_id: f.provider_instance_id,
        actor: "test".into(),
        at: "2026-12-03T12:00:00Z".into(),
    }
}

async fn activate<S: Shape>(
    f: &Fixture,
    source: &Arc<ScriptedSource>,
    generation: i64,
) -> Result<bus::consumer::Settle> {
    let handler = LifecycleHandler {
        db: f.db.clone(),
        vendor: shaped::<S>(f, source).vendor,
    };
    handler
        .activated(&activation(f, generation))
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))
}

/// A resume runs the vendor's activation steps again (fresh resources for what suspension
/// fenced) but queues no activation job: the mirror was kept while suspended.
#[tokio::test]
async fn a_resume_queues_no_activation_job() -> Result<()> {
    let source = ScriptedSource::new(1);
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let handler = LifecycleHandler {
        db: f.db.clone(),
        vendor: shaped::<Forge>(&f, &source).vendor,
    };
    let resumed = bus::contracts::LifecycleTransition {
        transition: "resumed".into(),
        before_status: "suspended".into(),
        ..activation(&f, 1)
    };
    let settle = handler
        .resumed(&resumed)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert!(
        matches!(settle, bus::consumer::Settle::Applied(why) if why.contains("activation steps")),
        "{settle:?}"
    );
    assert!(queued(&f).await?.is_empty());
    Ok(())
}

async fn queued(f: &Fixture) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar("SELECT job_type FROM sync_job ORDER BY job_type")
            .fetch_all(&f.pool)
            .await?,
    )
}

#[tokio::test]
async fn an_activation_queues_the_declared_job_types_and_never_a_refused_one() -> Result<()> {
    let source = ScriptedSource::new(1);
    // A forge's activation queues its INITIAL, once per activation.
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    for _ in 0..2 {
        activate::<Forge>(&f, &source, 1).await?;
    }
    assert_eq!(queued(&f).await?, ["INITIAL"]);

    // A vendor that reads nothing at connect queues nothing, and says so.
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let settle = activate::<Channel>(&f, &source, 1).await?;
    assert!(queued(&f).await?.is_empty());
    assert!(
        matches!(settle, bus::consumer::Settle::Applied(why) if why.contains("no job on activation")),
        "{settle:?}"
    );

    // A declared type the kind refuses is never queued (and the service refuses to start).
    let f = Fixture::new(ConnectionKind::Outline).await?;
    activate::<RefusedOnActivation>(&f, &source, 1).await?;
    assert_eq!(queued(&f).await?, ["INITIAL"]);
    let refusal = activation_refusal::<Shaped<RefusedOnActivation>>().expect("refused");
    assert!(
        refusal
            .to_string()
            .starts_with("Outline connections do not backfill"),
        "{refusal}"
    );
    Ok(())
}

#[test]
fn every_vendor_declares_only_activation_jobs_its_kind_runs() {
    assert_eq!(
        activation_refusal::<github_sync::sync::GithubVendor>(),
        None
    );
    assert_eq!(
        activation_refusal::<gitlab_sync::sync::GitlabVendor>(),
        None
    );
    assert_eq!(activation_refusal::<Shaped<Forge>>(), None);
    assert_eq!(activation_refusal::<Shaped<Channel>>(), None);
}

#[tokio::test]
async fn a_scope_that_lost_access_is_marked_and_the_pass_goes_on_without_flagging_the_connection()
-> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    f.mirror.monitor(f.tenant, ("acme", "random", 2)).await?;
    let source = ScriptedSource::new(15);
    let engine = shaped::<Forge>(&f, &source);
    run(&f, &engine, "INITIAL", "lifecycle", &source).await?;
    assert_eq!(f.live().await?, 30, "both channels");

    // The bot is removed from #general; #random still reads.
    knobs(&engine).lost = vec![1];
    source.with(|s| s.items.truncate(5));
    let outcome = run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert_eq!(outcome, JobOutcome::Succeeded, "a lost scope fails no job");
    let lost = knobs(&engine).lost_marked.clone();
    assert_eq!(
        lost,
        [(
            "acme/general".to_owned(),
            "scope_lost: the bot was removed from it".to_owned()
        )]
    );
    let recorded = f.activities("scope_lost_access").await?;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["scope"], "general");
    // Nothing inferred from the lost scope; the other was reconciled.
    assert_eq!(f.items(1).await?.len(), 15);
    assert_eq!(f.items(2).await?.len(), 5);
    let refused: Option<time::OffsetDateTime> =
        sqlx::query_scalar("SELECT credentials_refused_at FROM connection WHERE id = $1")
            .bind(f.tenant.connection_id)
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(
        refused, None,
        "the connection's credentials are not flagged"
    );
    assert!(f.activities("credentials_refused").await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn refused_credentials_are_never_taken_for_a_lost_scope() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(5);
    let engine = shaped::<Forge>(&f, &source);
    // A revoked token whose error claims to stop only its scope: the refusal wins.
    knobs(&engine).revoked = vec![1];
    let outcome = run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert!(
        matches!(outcome, JobOutcome::Failed(_)),
        "refused credentials fail the job: {outcome:?}"
    );
    assert!(knobs(&engine).lost_marked.is_empty(), "no scope is paused");
    let refused: Option<time::OffsetDateTime> =
        sqlx::query_scalar("SELECT credentials_refused_at FROM connection WHERE id = $1")
            .bind(f.tenant.connection_id)
            .fetch_one(&f.pool)
            .await?;
    assert!(
        refused.is_some(),
        "the connection's credentials are flagged"
    );
    Ok(())
}

#[tokio::test]
async fn only_candidates_the_vendor_confirms_gone_are_tombstoned() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(30);
    let engine = shaped::<Forge>(&f, &source);
    run(&f, &engine, "INITIAL", "lifecycle", &source).await?;
    let vanish = ["note-0004", "note-0017", "note-0023"];
    source.with(|s| s.items.retain(|i| !vanish.contains(&i.id.as_str())));

    // A confirming read fails: every candidate is kept, and that is recorded.
    knobs(&engine).confirm = Confirm::Fail;
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert!(f.tombstoned().await?.is_empty());
    let unconfirmed = f.activities("tombstones_unconfirmed").await?;
    assert_eq!(unconfirmed.len(), 1);
    assert_eq!(unconfirmed[0]["planned"], 3);
    assert!(
        unconfirmed[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("server_error: ")
    );

    // Two still read (offset pages shifted): only the third is tombstoned.
    knobs(&engine).confirm = Confirm::Only(vec!["note-0017".into(), "note-0099".into()]);
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert_eq!(
        f.tombstoned().await?,
        ["note-0017"],
        "never an id the plan did not hold"
    );
    assert_eq!(
        knobs(&engine).confirm_asked.last().unwrap(),
        &vanish.map(String::from)
    );
    Ok(())
}

#[tokio::test]
async fn the_blast_radius_holds_a_plan_before_any_candidate_is_confirmed() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(150);
    let engine = shaped::<Forge>(&f, &source);
    run(&f, &engine, "INITIAL", "lifecycle", &source).await?;
    source.with(|s| s.items.truncate(30));
    run(&f, &engine, "RECONCILIATION", "manual", &source).await?;
    assert!(f.tombstoned().await?.is_empty());
    assert_eq!(f.activities("sweep_held").await?.len(), 1);
    assert!(
        knobs(&engine).confirm_asked.is_empty(),
        "a held plan asks the vendor nothing"
    );
    Ok(())
}

#[tokio::test]
async fn a_listing_ended_at_its_horizon_is_complete_and_infers_no_deletion() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    let source = ScriptedSource::new(40);
    let engine = shaped::<Forge>(&f, &source);
    run(&f, &engine, "INITIAL", "lifecycle", &source).await?;
    assert_eq!(f.live().await?, 40);
    let seen = knobs(&engine).pages_seen;

    // The history past the second page is older than the horizon (e.g. a channel's consent):
    // the reconcile ends there, whatever the items it did not read.
    source.with(|s| {
        s.items
            .retain(|i| i.id != "note-0003" && i.id != "note-0031")
    });
    knobs(&engine).end_here_at = Some(seen + 1);
    let calls = source.calls();
    assert_eq!(
        run(&f, &engine, "RECONCILIATION", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(source.calls() - calls, 2, "no read past the horizon");
    assert!(
        f.tombstoned().await?.is_empty(),
        "nothing inferred from what was not read, not even what the read pages omit"
    );
    assert!(f.activities("not_reconciled").await?.is_empty());
    let end = knobs(&engine).ends.last().cloned().unwrap();
    assert_eq!(end.plan, ListingPlan::Whole);
    assert!(end.complete, "complete for its plan");
    assert!(!end.batch_full);
    assert_eq!(end.last_cursor.as_deref(), Some("c20"));
    Ok(())
}

#[tokio::test]
async fn a_job_records_the_total_its_listings_report() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Gitlab).await?;
    f.mirror.monitor(f.tenant, ("acme", "random", 2)).await?;
    let source = ScriptedSource::new(35);
    let engine = shaped::<Forge>(&f, &source);
    run(&f, &engine, "INITIAL", "lifecycle", &source).await?;
    let (done, total): (i64, Option<i64>) =
        sqlx::query_as("SELECT progress_done, progress_total FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((done, total), (70, Some(70)), "two listings of 35");
    Ok(())
}
