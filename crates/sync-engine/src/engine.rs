//! One sync job over one connection: the vendor's scopes, then every class of every scope listed
//! page by page through an `UpstreamListing`, each page written forward-only. Only a
//! RECONCILIATION whose listing finished clean may tombstone, and only the candidates captured
//! before it started (the deletion gate decides; the engine obeys). A manual BACKFILL repeats
//! its pass, with a growing but bounded wait, until one pass lists everything or the job is
//! canceled (or an operator's pass cap, off unless set, is reached). Cancellation and the lease
//! are checked before every page, and by the vendor's own reads after a scope's listings
//! ([`Pass::heartbeat`]).

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder as _;
use lifecycle_core::deletion::{BlastRadius, SkipReason, SweepDecision, SweepPass};
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::{ListingFault, NextStep, TotalCount, UpstreamListing};
use lifecycle_core::vendor_error::VendorErrorClass;
use sqlx::PgPool;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::jobs::{ClaimedJob, JobControl, JobOutcome, Jobs};
use crate::vendor::{
    Listed as _, ListingEnd, ListingPlan, PageCheck, Pass, ReadError as _, ReadStop, SweepEnd,
    Vendor,
};

/// How a job ends, as `sync_jobs_total{outcome}` and `sync_job_duration_seconds{outcome}` say.
pub const JOB_OUTCOMES: &[&str] = &["succeeded", "failed", "canceled"];

/// Registers the engine's counters of vendor `V` at zero (every job type and outcome, every
/// class's held sweeps), so alerts' `increase()` sees the first one and dashboards show 0.
pub fn register_metrics<V: Vendor>() {
    let vendor = V::KIND.as_str();
    for job_type in lifecycle_core::job::ALL_JOB_TYPES {
        for outcome in JOB_OUTCOMES {
            metrics::counter!("sync_jobs_total", "vendor" => vendor, "type" => job_type.as_str(), "outcome" => *outcome)
                .increment(0);
        }
    }
    for wait in [crate::jobs::Wait::Connection, crate::jobs::Wait::Workspace] {
        metrics::counter!("sync_jobs_deferred_total", "vendor" => vendor, "waits_for" => wait.as_str())
            .increment(0);
    }
    metrics::counter!("sync_jobs_woken_total", "vendor" => vendor).increment(0);
    for class in V::CLASSES {
        metrics::counter!("sweeps_held_total", "vendor" => vendor, "class" => V::class_name(*class))
            .increment(0);
    }
}

/// Tunables of a pass. Their defaults are the shared sync flags ([`crate::SyncArgs`]), nowhere
/// else.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// Nodes per page.
    pub page_size: u32,
    /// Pages per listing before it counts as truncated.
    pub page_cap: u32,
    pub blast_radius: BlastRadius,
    /// A scheduled RECONCILIATION skips a scope completely reconciled this recently.
    pub reconcile_cooldown: Duration,
    pub backfill: BackfillPolicy,
    /// How far past a page's read a vendor time may be ([`Pass::time_bound`]).
    pub clock_skew: Duration,
    /// Jobs of one workspace running at once across the vendor's replicas
    /// ([`Jobs::with_workspace_limit`]).
    pub workspace_jobs: u32,
}

/// How a manual BACKFILL repeats an incomplete pass.
#[derive(Debug, Clone)]
pub struct BackfillPolicy {
    /// Passes a backfill may take; after the last incomplete one it fails with that pass's reason.
    /// `None`: it passes until one is complete or it is canceled.
    pub max_passes: Option<std::num::NonZeroU32>,
    /// Wait after the first incomplete pass; it doubles with every further one.
    pub first_backoff: Duration,
    /// The longest wait between two passes.
    pub max_backoff: Duration,
}

/// Runs one vendor's jobs; shared by every handler of a replica.
pub struct Engine<V: Vendor> {
    pub pool: PgPool,
    pub jobs: Jobs,
    pub settings: SyncSettings,
    pub vendor: Arc<V>,
}

impl<V: Vendor> Clone for Engine<V> {
    fn clone(&self) -> Self {
        Engine {
            pool: self.pool.clone(),
            jobs: self.jobs.clone(),
            settings: self.settings.clone(),
            vendor: self.vendor.clone(),
        }
    }
}

/// How one pass over the scopes ended.
#[derive(Debug)]
enum PassEnd {
    /// Every listing finished clean.
    Complete,
    /// A listing ended early for a reason another pass may not meet: a listing fault, or the
    /// vendor failing (`failing`: the pass stopped there, and a single-pass job fails).
    Incomplete { reason: String, failing: bool },
    /// The job ends here, whatever its type: canceled, its lease lost, or its quota spent.
    Final(JobOutcome),
}

impl PassEnd {
    /// The outcome of a job that runs one pass.
    fn single_pass_outcome(self) -> JobOutcome {
        match self {
            PassEnd::Complete | PassEnd::Incomplete { failing: false, .. } => JobOutcome::Succeeded,
            PassEnd::Incomplete {
                reason,
                failing: true,
            } => JobOutcome::Failed(reason),
            PassEnd::Final(outcome) => outcome,
        }
    }

    /// What a read failure means for the pass, or `None` when it only ends its own listing.
    /// Its reason starts with the vendor's error class.
    fn of_read_failure(class: &VendorErrorClass, stop: ReadStop) -> Option<PassEnd> {
        match stop {
            // A lost scope is handled by the caller; for the pass it ends only that scope.
            ReadStop::Listing | ReadStop::Scope(_) => None,
            ReadStop::Pass(reason) => Some(PassEnd::Incomplete {
                reason: format!("{class}: {reason}"),
                failing: true,
            }),
            // Quota: another pass would only spend what is left of it.
            ReadStop::Job(reason) => Some(PassEnd::Final(JobOutcome::Failed(format!(
                "{class}: {reason}"
            )))),
        }
    }

    fn lost_lease() -> PassEnd {
        PassEnd::Final(JobOutcome::Failed("lost the job's lease".into()))
    }
}

/// A pass's progress as its job row shows it.
struct Progress {
    /// Items read.
    done: i64,
    /// The totals the listings begun so far reported, if any did (`progress_total`).
    total: Option<i64>,
}

/// How one class's listing of one scope ended.
enum Listed {
    Whole,
    Partial(String),
    /// Not listed by design (the vendor's page check refused the scope).
    Skipped,
    /// The scope lost the connection's access: its other listings are not read in this pass.
    LostAccess,
}

impl<V: Vendor> Engine<V> {
    /// An engine for `vendor`, claiming its jobs as `replica` with leases of `lease`.
    pub fn new(
        vendor: Arc<V>,
        pool: PgPool,
        replica: impl Into<String>,
        lease: Duration,
        settings: SyncSettings,
    ) -> Self {
        Engine {
            jobs: Jobs::new(V::KIND, pool.clone(), replica, lease)
                .with_workspace_limit(settings.workspace_jobs),
            pool,
            settings,
            vendor,
        }
    }

    /// Runs a claimed job to its end and records the outcome on its row.
    pub async fn run(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: V::Source,
    ) -> Result<JobOutcome, sqlx::Error> {
        let span = tracing::info_span!(
            "sync job",
            vendor = V::KIND.as_str(),
            job_id = %job.id,
            connection_id = %job.connection_id,
            workspace_id = %job.workspace_id,
            job_type = %job.job_type,
        );
        // A job's spans continue the trace of the request or schedule that queued it.
        store::trace::continue_from_map(&span, &job.trace_context);
        self.run_traced(job, provider_instance_id, source)
            .instrument(span)
            .await
    }

    async fn run_traced(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: V::Source,
    ) -> Result<JobOutcome, sqlx::Error> {
        let started = std::time::Instant::now();
        let pass = Pass {
            job,
            provider_instance_id,
            jobs: &self.jobs,
            blast_radius: self.settings.blast_radius,
            clock_skew: self.settings.clock_skew,
        };
        let (outcome, done) = if let Some(refusal) = V::KIND.jobs().refusal(job.job_type) {
            // The vendor's declaration binds the engine as it binds the API.
            (JobOutcome::Failed(refusal.to_string()), 0)
        } else if job.job_type == SyncJobType::Backfill && !job.scheduled {
            self.backfill_until_complete(&pass, &source).await?
        } else {
            let mut done: i64 = 0;
            self.jobs.start_pass(job, 1).await?;
            let end = self.walk(&pass, &source, &mut done).await?;
            (end.single_pass_outcome(), done)
        };
        self.jobs.finish(job, &outcome, done).await?;
        let ended = match &outcome {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Failed(_) => "failed",
            JobOutcome::Canceled => "canceled",
        };
        metrics::counter!("sync_jobs_total", "vendor" => V::KIND.as_str(), "type" => job.job_type.as_str(), "outcome" => ended)
            .increment(1);
        metrics::histogram!("sync_job_duration_seconds", "vendor" => V::KIND.as_str(), "type" => job.job_type.as_str(), "outcome" => ended)
            .record(started.elapsed().as_secs_f64());
        tracing::info!(?outcome, items = done, "sync job ended");
        Ok(outcome)
    }

    /// A manual backfill: passes until one lists everything, the job is canceled or its quota is
    /// spent, or an operator's pass cap is reached. Returns the outcome and the last pass's items.
    async fn backfill_until_complete(
        &self,
        pass: &Pass<'_>,
        source: &V::Source,
    ) -> Result<(JobOutcome, i64), sqlx::Error> {
        let job = pass.job;
        let policy = &self.settings.backfill;
        let mut waits = backon::ExponentialBuilder::default()
            .with_min_delay(policy.first_backoff)
            .with_max_delay(policy.max_backoff)
            .without_max_times()
            .build();
        let mut number: i32 = 0;
        loop {
            number = number.saturating_add(1);
            self.jobs.start_pass(job, number).await?;
            let mut done: i64 = 0;
            let end = self.walk(pass, source, &mut done).await?;
            let reason = match end {
                PassEnd::Complete => return Ok((JobOutcome::Succeeded, done)),
                PassEnd::Final(outcome) => return Ok((outcome, done)),
                PassEnd::Incomplete { reason, .. } => reason,
            };
            job.record_activity(
                &self.pool,
                "backfill_pass_incomplete",
                serde_json::json!({ "pass": number, "items": done, "reason": reason }),
            )
            .await?;
            // A manual backfill loops until complete or canceled; a cap only when set.
            if let Some(cap) = policy.max_passes
                && i64::from(number) >= i64::from(cap.get())
            {
                return Ok((
                    JobOutcome::Failed(format!(
                        "backfill still incomplete after {number} passes: {reason}"
                    )),
                    done,
                ));
            }
            let wait = waits.next().unwrap_or(policy.max_backoff);
            tracing::info!(pass = number, ?wait, %reason, "backfill pass incomplete; another pass follows");
            match self.wait_between_passes(job, done, wait).await? {
                JobControl::Continue => {}
                JobControl::Canceled => return Ok((JobOutcome::Canceled, done)),
                JobControl::LostClaim => {
                    return Ok((JobOutcome::Failed("lost the job's lease".into()), done));
                }
            }
        }
    }

    /// Sleeps `wait`, heartbeating often enough to keep the lease and to stop soon after a cancel.
    async fn wait_between_passes(
        &self,
        job: &ClaimedJob,
        done: i64,
        wait: Duration,
    ) -> Result<JobControl, sqlx::Error> {
        const TICK: Duration = Duration::from_millis(500);
        let until = tokio::time::Instant::now() + wait;
        loop {
            let control = self.jobs.heartbeat(job, Some(done), None).await?;
            let now = tokio::time::Instant::now();
            if control != JobControl::Continue || now >= until {
                return Ok(control);
            }
            tokio::time::sleep(TICK.min(until - now)).await;
        }
    }

    /// One pass over every scope the connection reaches.
    async fn walk(
        &self,
        pass: &Pass<'_>,
        source: &V::Source,
        done: &mut i64,
    ) -> Result<PassEnd, sqlx::Error> {
        let job = pass.job;
        let scopes = match self.vendor.scopes(pass, source).await? {
            Ok(scopes) => scopes,
            Err(e) => {
                let class = e.class();
                let reason = format!("{class}: listing {}: {e}", V::SCOPES);
                if class.refuses_credentials() {
                    return self.credentials_refused(pass, &class, reason).await;
                }
                return Ok(match e.stops() {
                    ReadStop::Job(_) => PassEnd::Final(JobOutcome::Failed(reason)),
                    _ => PassEnd::Incomplete {
                        reason,
                        failing: true,
                    },
                });
            }
        };
        let reconciling = job.job_type == SyncJobType::Reconciliation;
        let mut first_gap: Option<String> = None;
        let mut progress = Progress {
            done: *done,
            total: None,
        };
        for mut scope in scopes.scopes {
            self.vendor.before_scope(pass, source, &mut scope).await?;
            // A vendor that never sweeps keeps no reconcile stamps to cool by.
            let cooling = V::SWEEPS
                && reconciling
                && job.scheduled
                && self
                    .vendor
                    .reconciled_within(pass, &scope, self.settings.reconcile_cooldown)
                    .await?;
            let mut complete = true;
            let mut lost_access = false;
            for &class in V::CLASSES {
                let plan = self
                    .vendor
                    .plan_listing(pass, &mut scope, class, cooling)
                    .await?;
                match plan {
                    ListingPlan::Skip => {
                        if cooling {
                            tracing::info!(scope = %scope, class = V::class_name(class), "reconciled recently; the scheduled pass skips it");
                        }
                        complete = false;
                        continue;
                    }
                    // Only a whole listing stamps a reconcile.
                    ListingPlan::Filtered | ListingPlan::Batch { .. } => complete = false,
                    ListingPlan::Whole => {}
                }
                let (stop, listed) = self
                    .sync_class(pass, &mut scope, class, &plan, source, &mut progress)
                    .await?;
                *done = progress.done;
                match listed {
                    Listed::Whole => {}
                    Listed::Partial(reason) => {
                        complete = false;
                        first_gap.get_or_insert_with(|| {
                            format!("{scope} {}: {reason}", V::class_name(class))
                        });
                    }
                    Listed::Skipped => complete = false,
                    Listed::LostAccess => {
                        lost_access = true;
                        complete = false;
                    }
                }
                if let Some(end) = stop {
                    return Ok(end);
                }
                if lost_access {
                    break;
                }
            }
            if lost_access {
                // Its vendor reads after the listings would only be refused too.
                continue;
            }
            // The vendor's own reads after the listings heartbeat too: a cancel or a lost
            // lease they met ends the job as one met before a page does.
            match self
                .vendor
                .after_scope(pass, source, &mut scope, cooling)
                .await?
            {
                JobControl::Continue => {}
                JobControl::Canceled => return Ok(PassEnd::Final(JobOutcome::Canceled)),
                JobControl::LostClaim => return Ok(PassEnd::lost_lease()),
            }
            if V::SWEEPS && reconciling && complete {
                self.vendor.mark_reconciled(pass, &scope).await?;
            }
        }
        // A monitored scope the credentials cannot reach is a failure, never a quiet skip.
        if let Some(reason) = scopes.unresolved {
            return Ok(PassEnd::Incomplete {
                reason,
                failing: true,
            });
        }
        Ok(match first_gap {
            None => PassEnd::Complete,
            Some(reason) => PassEnd::Incomplete {
                reason,
                failing: false,
            },
        })
    }

    /// Lists one class of one scope, writing each page, then applies the deletion gate.
    #[tracing::instrument(skip_all, fields(scope = %scope, class = V::class_name(class)))]
    async fn sync_class(
        &self,
        pass: &Pass<'_>,
        scope: &mut V::Scope,
        class: V::Class,
        plan: &ListingPlan,
        source: &V::Source,
        progress: &mut Progress,
    ) -> Result<(Option<PassEnd>, Listed), sqlx::Error> {
        let job = pass.job;
        // A read error's class shadows `class` below.
        let item_class = class;
        // A vendor that never sweeps infers no deletion from any listing.
        let sweeps = V::SWEEPS && *plan == ListingPlan::Whole;
        // Deletion gate: candidates are the live rows before the listing starts, and only a
        // whole listing is compared with them.
        let candidates = if sweeps && job.job_type == SyncJobType::Reconciliation {
            self.vendor.live_ids(pass, scope, class).await?
        } else {
            Vec::new()
        };
        let sweep = SweepPass::capture(job.job_type, candidates);
        let (mut after, batch_pages, total_count) = match plan {
            // A batch starting mid-listing cannot count the listing's total.
            ListingPlan::Batch { after, pages } => {
                (after.clone(), Some(*pages), TotalCount::NotOffered)
            }
            _ => (None, None, V::total_count(class)),
        };
        let mut listing = UpstreamListing::with_total_count(self.settings.page_cap, total_count);
        let mut stop: Option<PassEnd> = None;
        let mut pages_written: u32 = 0;
        let mut batch_full = false;
        let mut last_cursor: Option<String> = None;
        // The vendor's page check ended the listing at its horizon, complete for its plan.
        let mut ended_here = false;
        let mut counted_total = false;
        loop {
            // Cancel and lease checks per page.
            match self
                .jobs
                .heartbeat(job, Some(progress.done), progress.total)
                .await?
            {
                JobControl::Continue => {}
                JobControl::Canceled => {
                    listing.record_fault(ListingFault::Cancelled);
                    stop = Some(PassEnd::Final(JobOutcome::Canceled));
                    break;
                }
                JobControl::LostClaim => {
                    // Another replica holds the job now: write nothing more.
                    return Ok((
                        Some(PassEnd::lost_lease()),
                        Listed::Partial("lost the job's lease".into()),
                    ));
                }
            }
            let page = match self
                .vendor
                .read_page(
                    source,
                    scope,
                    class,
                    after.as_deref(),
                    self.settings.page_size,
                )
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    let class = e.class();
                    tracing::warn!(error = %e, %class, "page read failed; the listing is incomplete");
                    listing.record_fault(e.fault());
                    if let ReadStop::Scope(reason) = e.stops()
                        && !class.refuses_credentials()
                    {
                        // A lost scope ends its own listing only: the connection's credentials
                        // still reach the other scopes. A refusal of the credentials is never
                        // taken for a lost scope (it fails every other read too).
                        let reason = format!("{class}: {reason}");
                        self.scope_lost_access(pass, scope, item_class, &reason)
                            .await?;
                        let end = ListingEnd {
                            plan: plan.clone(),
                            complete: false,
                            batch_full: false,
                            last_cursor,
                            incomplete: Some(reason.clone()),
                            sweep: None,
                        };
                        self.vendor
                            .listing_ended(pass, scope, item_class, &end)
                            .await?;
                        return Ok((None, Listed::LostAccess));
                    }
                    stop = if class.refuses_credentials() {
                        // Refused credentials fail every later read too: the job ends here.
                        let reason = format!("{class}: {scope}: {e}");
                        Some(self.credentials_refused(pass, &class, reason).await?)
                    } else {
                        // Whatever stops every later read too ends the pass or the job; a
                        // scope-level failure only ends this listing.
                        PassEnd::of_read_failure(&class, e.stops())
                    };
                    break;
                }
            };
            let check = self.vendor.check_page(pass, scope, &page).await?;
            if check == PageCheck::SkipScope {
                let end = ListingEnd {
                    plan: plan.clone(),
                    complete: false,
                    batch_full: false,
                    last_cursor,
                    incomplete: Some("the listing was not this scope's".into()),
                    sweep: None,
                };
                self.vendor.listing_ended(pass, scope, class, &end).await?;
                return Ok((None, Listed::Skipped));
            }
            let applied = self
                .vendor
                .write_page(pass, scope, class, &page)
                .instrument(tracing::info_span!("page write"))
                .await?;
            pages_written += 1;
            let read = page.listing();
            if read.end_cursor.is_some() {
                last_cursor.clone_from(&read.end_cursor);
            }
            progress.done += read.ids.len() as i64;
            // `progress_total`: a listing read from its start adds the total it reports.
            if pages_written == 1
                && total_count == TotalCount::Required
                && let Some(n) = read.total_count
            {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                progress.total = Some(progress.total.unwrap_or(0).saturating_add(n));
                counted_total = true;
            }
            metrics::counter!("sync_items_total", "vendor" => V::KIND.as_str(), "class" => V::class_name(class))
                .increment(applied);
            if page.errored() {
                // Fail-closed: a vendor error anywhere leaves the listing incomplete.
                listing.record_fault(ListingFault::VendorPageAnomaly);
            }
            if check == PageCheck::EndHere {
                // The horizon: what lies past it is out of the plan, never inferred gone. An
                // errored last page still leaves the listing incomplete.
                ended_here = !page.errored();
                break;
            }
            match listing.accept_page(read) {
                NextStep::FetchAfter(_) if batch_pages.is_some_and(|n| pages_written >= n) => {
                    // The batch has taken its share; the vendor resumes it from here later.
                    batch_full = true;
                    break;
                }
                NextStep::FetchAfter(cursor) => after = Some(cursor),
                NextStep::Finished => break,
                NextStep::Stopped(reason) => {
                    tracing::warn!(%reason, "listing stopped; nothing will be inferred from it");
                    break;
                }
            }
        }
        if counted_total {
            // The total is recorded now, even when no page follows to carry it; a cancel or a
            // lost lease it meets is met again before the next page.
            self.jobs
                .heartbeat(job, Some(progress.done), progress.total)
                .await?;
        }
        let finished = if batch_full || ended_here {
            Err(lifecycle_core::listing::IncompleteReason::NotFinished)
        } else {
            listing.finish()
        };
        let listed = match &finished {
            Ok(_) => Listed::Whole,
            // A full batch did what the pass asked of it, and a listing ended at its horizon
            // read all its plan asked.
            Err(_) if batch_full || ended_here => Listed::Whole,
            Err(reason) => Listed::Partial(reason.to_string()),
        };
        let mut end = ListingEnd {
            plan: plan.clone(),
            complete: finished.is_ok() || ended_here,
            batch_full,
            last_cursor,
            incomplete: match &finished {
                Err(reason) if !batch_full && !ended_here => Some(reason.to_string()),
                _ => None,
            },
            sweep: None,
        };
        // A vendor that never sweeps has no deletion gate to record an incomplete listing:
        // it is recorded here, so a replay that read less than it asked never looks clean.
        if !V::SWEEPS
            && let Err(reason) = &finished
            && !batch_full
            && !ended_here
        {
            let mut detail = serde_json::Map::new();
            detail.insert("class".into(), V::class_name(class).into());
            detail.extend(self.vendor.scope_detail(scope));
            detail.insert("reason".into(), reason.to_string().into());
            job.record_activity(
                &self.pool,
                "listing_incomplete",
                serde_json::Value::Object(detail),
            )
            .await?;
        }
        // A listing ended at its horizon decides no sweep: what it did not read is not gone.
        if sweeps && !ended_here {
            let decision = sweep.decide(finished, &self.settings.blast_radius);
            end.sweep = self
                .apply_decision(pass, source, scope, class, decision)
                .instrument(tracing::info_span!("sweep"))
                .await?;
        }
        self.vendor.listing_ended(pass, scope, class, &end).await?;
        Ok((stop, listed))
    }

    /// A scope lost the connection's access: the vendor marks its monitor, and the job records
    /// it. Nothing is flagged on the connection.
    async fn scope_lost_access(
        &self,
        pass: &Pass<'_>,
        scope: &mut V::Scope,
        class: V::Class,
        reason: &str,
    ) -> Result<(), sqlx::Error> {
        tracing::warn!(%reason, "the scope lost the connection's access; the pass goes on without it");
        self.vendor.scope_lost_access(pass, scope, reason).await?;
        metrics::counter!("sync_scopes_lost_total", "vendor" => V::KIND.as_str()).increment(1);
        let mut detail = serde_json::Map::new();
        detail.insert("class".into(), V::class_name(class).into());
        detail.extend(self.vendor.scope_detail(scope));
        detail.insert("reason".into(), reason.into());
        pass.job
            .record_activity(
                &self.pool,
                "scope_lost_access",
                serde_json::Value::Object(detail),
            )
            .await?;
        Ok(())
    }

    /// The vendor refused the connection's credentials: the connection is flagged as needing
    /// new ones (its schedules skip it until they are replaced) and the job fails with the
    /// class's reason. Credentials replaced since the job was claimed are not flagged: the
    /// refusal was of the old ones.
    async fn credentials_refused(
        &self,
        pass: &Pass<'_>,
        class: &VendorErrorClass,
        reason: String,
    ) -> Result<PassEnd, sqlx::Error> {
        let job = pass.job;
        let flagged =
            store::credentials::refuse(&self.pool, job.connection_id, job.claimed_at, &reason)
                .await?;
        metrics::counter!("sync_credentials_refused_total", "vendor" => V::KIND.as_str(), "class" => class.name())
            .increment(1);
        tracing::warn!(%reason, flagged, "the vendor refused the connection's credentials; the connection needs new ones");
        job.record_activity(
            &self.pool,
            "credentials_refused",
            serde_json::json!({ "class": class.name(), "reason": reason, "flagged": flagged }),
        )
        .await?;
        Ok(PassEnd::Final(JobOutcome::Failed(reason)))
    }

    /// Carries out the deletion gate's decision and records it as connection activity; what it
    /// came to, `None` when it decided no sweep.
    async fn apply_decision(
        &self,
        pass: &Pass<'_>,
        source: &V::Source,
        scope: &V::Scope,
        class: V::Class,
        decision: SweepDecision<V::Id>,
    ) -> Result<Option<SweepEnd>, sqlx::Error> {
        let job = pass.job;
        let detail = |fields: serde_json::Value| {
            let mut detail = serde_json::Map::new();
            detail.insert("class".into(), V::class_name(class).into());
            detail.extend(self.vendor.scope_detail(scope));
            if let serde_json::Value::Object(fields) = fields {
                detail.extend(fields);
            }
            serde_json::Value::Object(detail)
        };
        match decision {
            SweepDecision::Tombstone(plan) => {
                if plan.ids().is_empty() {
                    return Ok(Some(SweepEnd::Applied));
                }
                // Confirm-before-tombstone: only what the vendor confirms gone is tombstoned; a
                // failed confirmation keeps every candidate.
                let planned: Vec<V::Id> = plan.ids().iter().cloned().collect();
                let plan = match self
                    .vendor
                    .confirm_gone(source, scope, class, &planned)
                    .await
                {
                    Ok(confirmed) => plan.confirmed(confirmed),
                    Err(e) => {
                        let reason = format!("{}: {e}", e.class());
                        tracing::warn!(%reason, planned = planned.len(), "confirming the planned tombstones failed; every candidate is kept");
                        job.record_activity(
                            &self.pool,
                            "tombstones_unconfirmed",
                            detail(
                                serde_json::json!({ "planned": planned.len(), "reason": reason }),
                            ),
                        )
                        .await?;
                        return Ok(Some(SweepEnd::Unconfirmed));
                    }
                };
                let kept = planned.len() - plan.ids().len();
                if kept > 0 {
                    tracing::info!(kept, "candidates still present upstream are kept");
                }
                if plan.ids().is_empty() {
                    return Ok(Some(SweepEnd::Applied));
                }
                let n = self.vendor.tombstone(pass, scope, class, &plan).await?;
                tracing::info!(
                    tombstoned = n,
                    "reconcile tombstoned items missing upstream"
                );
                job.record_activity(
                    &self.pool,
                    "tombstoned",
                    detail(serde_json::json!({ "count": n })),
                )
                .await?;
                Ok(Some(SweepEnd::Applied))
            }
            SweepDecision::Hold(held) => {
                metrics::counter!("sweeps_held_total", "vendor" => V::KIND.as_str(), "class" => V::class_name(class))
                    .increment(1);
                tracing::warn!(
                    would_tombstone = held.would_tombstone(),
                    class_size = held.class_size(),
                    "sweep held for operator confirmation"
                );
                job.record_activity(
                    &self.pool,
                    "sweep_held",
                    detail(serde_json::json!({
                        "would_tombstone": held.would_tombstone(), "class_size": held.class_size(),
                    })),
                )
                .await?;
                Ok(Some(SweepEnd::Held))
            }
            SweepDecision::Skip(SkipReason::IncompleteListing(reason)) => {
                if job.job_type == SyncJobType::Reconciliation {
                    job.record_activity(
                        &self.pool,
                        "not_reconciled",
                        detail(serde_json::json!({ "reason": reason.to_string() })),
                    )
                    .await?;
                }
                Ok(None)
            }
            SweepDecision::Skip(SkipReason::NotReconciliation(_)) => Ok(None),
        }
    }
}
