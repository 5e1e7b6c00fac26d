//! One sync job over one connection: materialise monitors, then list every monitored
//! repository's issues and pull requests page by page through an `UpstreamListing`, writing each
//! page forward-only. Only a RECONCILIATION whose listing finished clean may tombstone, and only
//! the candidates captured before it started (the deletion gate decides; this module obeys).
//! A manual BACKFILL repeats its pass, with backoff, until one pass lists everything, the job is
//! canceled, or its pass budget is spent.
//! Each pass also re-reads the check runs of open pull requests whose stored list of their head
//! has not finished and changed in the last day.

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder as _;
use lifecycle_core::deletion::{BlastRadius, SkipReason, SweepDecision, SweepPass};
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::{ListingFault, ListingPage, NextStep, UpstreamListing};
use scm_mirror::events::Origin;
use scm_mirror::items::{self, ItemClass};
use scm_mirror::monitors;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::check_runs;
use crate::jobs::{ClaimedJob, JobControl, JobOutcome, Jobs};
use crate::mirror;
use crate::source::{GithubSource, Page, RepoRef, SourceError};

/// Tunables of a pass.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// Nodes per page (GitHub allows at most 100).
    pub page_size: u32,
    /// Pages per listing before it counts as truncated.
    pub page_cap: u32,
    pub blast_radius: BlastRadius,
    /// A scheduled RECONCILIATION skips a repository completely reconciled this recently.
    pub reconcile_cooldown: Duration,
    pub backfill: BackfillPolicy,
}

/// How a manual BACKFILL repeats an incomplete pass.
#[derive(Debug, Clone)]
pub struct BackfillPolicy {
    /// Passes a backfill may take; after the last incomplete one it fails with that pass's reason.
    pub max_passes: u32,
    /// Wait after the first incomplete pass; it doubles with every further one.
    pub first_backoff: Duration,
    /// The longest wait between two passes.
    pub max_backoff: Duration,
}

impl Default for BackfillPolicy {
    fn default() -> Self {
        BackfillPolicy {
            max_passes: 10,
            first_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
        }
    }
}

impl Default for SyncSettings {
    fn default() -> Self {
        SyncSettings {
            page_size: 100,
            page_cap: 10_000,
            blast_radius: BlastRadius::default(),
            reconcile_cooldown: Duration::from_secs(12 * 3600),
            backfill: BackfillPolicy::default(),
        }
    }
}

/// A monitor as the engine walks it.
#[derive(Debug, Clone)]
struct Monitor {
    id: Uuid,
    owner: String,
    name: String,
    native_id: Option<i64>,
}

/// Runs jobs; shared by every handler of a replica.
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    pub jobs: Jobs,
    pub settings: SyncSettings,
}

/// How one pass over the monitored repositories ended.
#[derive(Debug)]
enum PassEnd {
    /// Every listing finished clean.
    Complete,
    /// A listing ended early for a reason another pass may not meet: a listing fault, or GitHub
    /// failing (`failing`: the pass stopped there, and a single-pass job fails).
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
    fn of_read_failure(e: &SourceError) -> Option<PassEnd> {
        match e {
            // Quota: another pass would only spend what is left of it.
            SourceError::BudgetExhausted(why) => Some(PassEnd::Final(JobOutcome::Failed(format!(
                "quota budget exhausted: {why}"
            )))),
            SourceError::RateLimited => Some(PassEnd::Final(JobOutcome::Failed(
                "GitHub's rate limit is spent".into(),
            ))),
            SourceError::Http(status) if *status >= 500 => Some(PassEnd::Incomplete {
                reason: format!("GitHub is failing (HTTP {status} after retries)"),
                failing: true,
            }),
            _ => None,
        }
    }
}

/// How one class's listing of one repository ended.
enum Listed {
    Whole,
    Partial(String),
    /// Not listed by design (the monitored name now belongs to another repository).
    Skipped,
}

/// What one page read produced, whatever the class.
struct PageRead {
    native_ids: Vec<i64>,
    has_next_page: bool,
    end_cursor: Option<String>,
    total_count: Option<u64>,
    errored: bool,
    repository: crate::source::RepoHeader,
}

fn read_of<T>(page: &Page<T>, id: fn(&T) -> i64) -> PageRead {
    PageRead {
        native_ids: page.nodes.iter().map(id).collect(),
        has_next_page: page.has_next_page,
        end_cursor: page.end_cursor.clone(),
        total_count: page.total_count,
        errored: !page.error_paths.is_empty(),
        repository: page.repository.clone(),
    }
}

impl Engine {
    /// Runs a claimed job to its end and records the outcome on its row.
    #[tracing::instrument(skip_all, fields(job_id = %job.id, connection_id = %job.connection_id, workspace_id = %job.workspace_id, job_type = %job.job_type))]
    pub async fn run(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: Arc<dyn GithubSource>,
    ) -> Result<JobOutcome, sqlx::Error> {
        let (outcome, done) = if job.job_type == SyncJobType::Backfill && !job.scheduled {
            self.backfill_until_complete(job, provider_instance_id, source.as_ref())
                .await?
        } else {
            let mut done: i64 = 0;
            self.jobs.start_pass(job, 1).await?;
            let end = self
                .walk(job, provider_instance_id, source.as_ref(), &mut done)
                .await?;
            (end.single_pass_outcome(), done)
        };
        self.jobs.finish(job, &outcome, done).await?;
        metrics::counter!("github_sync_jobs_total", "type" => job.job_type.as_str(), "outcome" => match &outcome {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Failed(_) => "failed",
            JobOutcome::Canceled => "canceled",
        })
        .increment(1);
        tracing::info!(?outcome, items = done, "sync job ended");
        Ok(outcome)
    }

    /// A manual backfill: passes until one lists everything, the job is canceled or its quota is
    /// spent, or the policy's passes run out. Returns the outcome and the last pass's items.
    async fn backfill_until_complete(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: &dyn GithubSource,
    ) -> Result<(JobOutcome, i64), sqlx::Error> {
        let policy = &self.settings.backfill;
        let mut waits = backon::ExponentialBuilder::default()
            .with_min_delay(policy.first_backoff)
            .with_max_delay(policy.max_backoff)
            .without_max_times()
            .build();
        let mut pass = 0;
        loop {
            pass += 1;
            self.jobs.start_pass(job, pass).await?;
            let mut done: i64 = 0;
            let end = self
                .walk(job, provider_instance_id, source, &mut done)
                .await?;
            let reason = match end {
                PassEnd::Complete => return Ok((JobOutcome::Succeeded, done)),
                PassEnd::Final(outcome) => return Ok((outcome, done)),
                PassEnd::Incomplete { reason, .. } => reason,
            };
            self.activity(
                job,
                "backfill_pass_incomplete",
                serde_json::json!({ "pass": pass, "items": done, "reason": reason }),
            )
            .await?;
            if pass >= i32::try_from(policy.max_passes.max(1)).unwrap_or(i32::MAX) {
                return Ok((
                    JobOutcome::Failed(format!(
                        "backfill still incomplete after {pass} passes: {reason}"
                    )),
                    done,
                ));
            }
            let wait = waits.next().unwrap_or(policy.max_backoff);
            tracing::info!(pass, ?wait, %reason, "backfill pass incomplete; another pass follows");
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
            let control = self.jobs.heartbeat(job, done, None).await?;
            let now = tokio::time::Instant::now();
            if control != JobControl::Continue || now >= until {
                return Ok(control);
            }
            tokio::time::sleep(TICK.min(until - now)).await;
        }
    }

    async fn walk(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: &dyn GithubSource,
        done: &mut i64,
    ) -> Result<PassEnd, sqlx::Error> {
        let (monitors, unresolved) = match self
            .materialise_monitors(job, provider_instance_id, source)
            .await?
        {
            Ok(m) => m,
            Err(e) => {
                let reason = format!("listing repositories: {e}");
                return Ok(match PassEnd::of_read_failure(&e) {
                    Some(PassEnd::Final(_)) => PassEnd::Final(JobOutcome::Failed(reason)),
                    _ => PassEnd::Incomplete {
                        reason,
                        failing: true,
                    },
                });
            }
        };
        let reconciling = job.job_type == SyncJobType::Reconciliation;
        let mut first_gap: Option<String> = None;
        for monitor in &monitors {
            self.rescan_check_runs(provider_instance_id, monitor, source)
                .await?;
            if reconciling
                && job.scheduled
                && self.cooling_down(provider_instance_id, monitor).await?
            {
                tracing::info!(repository = %format!("{}/{}", monitor.owner, monitor.name), "reconciled recently; the scheduled pass skips it");
                continue;
            }
            let mut complete = true;
            for class in [ItemClass::Issue, ItemClass::PullRequest] {
                let (stop, listed) = self
                    .sync_class(job, provider_instance_id, monitor, class, source, done)
                    .await?;
                match listed {
                    Listed::Whole => {}
                    Listed::Partial(reason) => {
                        complete = false;
                        first_gap.get_or_insert_with(|| {
                            format!(
                                "{}/{} {}: {reason}",
                                monitor.owner,
                                monitor.name,
                                class.table()
                            )
                        });
                    }
                    Listed::Skipped => complete = false,
                }
                if let Some(end) = stop {
                    return Ok(end);
                }
            }
            if reconciling && complete {
                self.mark_reconciled(provider_instance_id, monitor).await?;
            }
        }
        // A configured repository the credentials cannot reach is a failure, never a quiet skip.
        if !unresolved.is_empty() {
            return Ok(PassEnd::Incomplete {
                reason: format!(
                    "repositories no longer resolve with the connection's credentials (gone, or not visible to it): {}",
                    unresolved.join(", ")
                ),
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

    /// Monitors come from what the connection's own credentials resolve (App installation, or
    /// the PAT's names resolved with the PAT), bound to native ids. A PAT connection keeps no
    /// monitor of anything else; a configured name that no longer resolves is recorded as
    /// connection activity and returned so the pass reports it.
    async fn materialise_monitors(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: &dyn GithubSource,
    ) -> Result<Result<(Vec<Monitor>, Vec<String>), SourceError>, sqlx::Error> {
        let reach = match source.repositories().await {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let mut txn = self.pool.begin().await?;
        // The installation just listed with its own token is verified for this connection:
        // installation webhooks are admitted against it (a typed setting is not verification).
        if let Some(installation_id) = source.installation_id() {
            store::admission::record_github_installation(
                &mut txn,
                job.connection_id,
                installation_id,
            )
            .await?;
        }
        monitors::materialise(
            &mut txn,
            provider_instance_id,
            job.workspace_id,
            job.connection_id,
            &reach.repositories,
        )
        .await?;
        // A PAT reaches only what it resolved now: any other monitor of it (an unresolved name,
        // one renamed since, a legacy name) has lost its proof.
        let dropped = if reach.exclusive {
            let ids: Vec<i64> = reach
                .repositories
                .iter()
                .filter_map(|r| r.native_id)
                .collect();
            monitors::retain_only(&mut txn, job.connection_id, &ids).await?
        } else {
            0
        };
        txn.commit().await?;
        if !reach.unresolved.is_empty() {
            tracing::warn!(connection_id = %job.connection_id, unresolved = ?reach.unresolved, dropped, "configured repositories no longer resolve with the connection's credentials; not monitored");
            self.activity(
                job,
                "repositories_unresolved",
                serde_json::json!({
                    "repositories": reach.unresolved, "monitors_removed": dropped,
                }),
            )
            .await?;
        }
        let rows: Vec<(Uuid, String, String, Option<i64>)> = sqlx::query_as(
            "SELECT id, owner, name, native_id FROM repository_to_monitor
              WHERE connection_id = $1 ORDER BY lower(owner), lower(name)",
        )
        .bind(job.connection_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Ok((
            rows.into_iter()
                .map(|(id, owner, name, native_id)| Monitor {
                    id,
                    owner,
                    name,
                    native_id,
                })
                .collect(),
            reach.unresolved,
        )))
    }

    /// Re-reads the runs of each open pull request whose stored list of its head is unfinished
    /// and changed in the last 24 hours (a read that lagged the last hook settles here).
    async fn rescan_check_runs(
        &self,
        provider_instance_id: Uuid,
        monitor: &Monitor,
        source: &dyn GithubSource,
    ) -> Result<(), sqlx::Error> {
        let Some(repository_id) = self
            .repository_id(provider_instance_id, monitor.native_id)
            .await?
        else {
            return Ok(());
        };
        let due = check_runs::due_for_rescan(&self.pool, repository_id, OffsetDateTime::now_utc())
            .await?;
        let repo = RepoRef {
            owner: monitor.owner.clone(),
            name: monitor.name.clone(),
            native_id: monitor.native_id,
        };
        for (pull_request, head) in due {
            let read = check_runs::read_and_apply(
                &self.pool,
                source,
                &repo,
                &head,
                &[pull_request],
                Origin::Sync,
            )
            .await?;
            if let Err(SourceError::BudgetExhausted(_) | SourceError::RateLimited) = read {
                // What stops one read stops the rest; the listings will say so too.
                break;
            }
        }
        Ok(())
    }

    /// Whether the monitored repository finished a complete reconcile within the cooldown.
    async fn cooling_down(
        &self,
        provider_instance_id: Uuid,
        monitor: &Monitor,
    ) -> Result<bool, sqlx::Error> {
        let Some(native_id) = monitor.native_id else {
            return Ok(false);
        };
        let row: Option<(bool,)> = sqlx::query_as(
            "SELECT coalesce(reconciled_at > now() - make_interval(secs => $3), false)
               FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .bind(self.settings.reconcile_cooldown.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some_and(|(cooling,)| cooling))
    }

    async fn mark_reconciled(
        &self,
        provider_instance_id: Uuid,
        monitor: &Monitor,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE repository SET reconciled_at = now()
              WHERE provider_instance_id = $1
                AND native_id = (SELECT native_id FROM repository_to_monitor WHERE id = $2)",
        )
        .bind(provider_instance_id)
        .bind(monitor.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn repository_id(
        &self,
        provider_instance_id: Uuid,
        native_id: Option<i64>,
    ) -> Result<Option<Uuid>, sqlx::Error> {
        let Some(native_id) = native_id else {
            return Ok(None);
        };
        let row: Option<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(id,)| id))
    }

    #[tracing::instrument(skip_all, fields(repository = %format!("{}/{}", monitor.owner, monitor.name), class = class.table()))]
    async fn sync_class(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        monitor: &Monitor,
        class: ItemClass,
        source: &dyn GithubSource,
        done: &mut i64,
    ) -> Result<(Option<PassEnd>, Listed), sqlx::Error> {
        let known_repo = self
            .repository_id(provider_instance_id, monitor.native_id)
            .await?;
        // Deletion gate: candidates are the live rows before the listing starts.
        let candidates = match known_repo {
            Some(id) if job.job_type == SyncJobType::Reconciliation => {
                items::live_native_ids(&self.pool, class, id).await?
            }
            _ => Vec::new(),
        };
        let sweep = SweepPass::capture(job.job_type, candidates);
        let mut listing = UpstreamListing::new(self.settings.page_cap);
        let repo = RepoRef {
            owner: monitor.owner.clone(),
            name: monitor.name.clone(),
            native_id: monitor.native_id,
        };
        let mut after: Option<String> = None;
        let mut repository_id = known_repo;
        let mut stop: Option<PassEnd> = None;
        let mut healed = false;
        loop {
            match self.jobs.heartbeat(job, *done, None).await? {
                JobControl::Continue => {}
                JobControl::Canceled => {
                    listing.record_fault(ListingFault::Cancelled);
                    stop = Some(PassEnd::Final(JobOutcome::Canceled));
                    break;
                }
                JobControl::LostClaim => {
                    return Ok((
                        Some(PassEnd::Final(JobOutcome::Failed(
                            "lost the job's lease".into(),
                        ))),
                        Listed::Partial("lost the job's lease".into()),
                    ));
                }
            }
            let read = match self.read_page(class, source, &repo, after.as_deref()).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(error = %e, "page read failed; the listing is incomplete");
                    listing.record_fault(e.fault());
                    // Whatever stops every later read too ends the job; a repository-level
                    // failure (a GraphQL error, a 404) only ends this listing.
                    stop = PassEnd::of_read_failure(&e);
                    break;
                }
            };
            let (header, page_write) = read;
            // A monitor keeps the repository it first resolved: a reused name is another repository.
            if let Some(expected) = monitor.native_id
                && expected != header.repository.native_id
            {
                tracing::warn!(monitor = %monitor.id, expected, found = header.repository.native_id, "monitored name now belongs to another repository; skipped");
                self.activity(
                    job,
                    "monitor_name_reused",
                    serde_json::json!({
                        "monitor_id": monitor.id, "expected_native_id": expected,
                        "found_native_id": header.repository.native_id,
                    }),
                )
                .await?;
                return Ok((None, Listed::Skipped));
            }
            // A monitor resolves by native id (a legacy one by its name, which GitHub follows
            // to the repository's current one): a name that moved, within or across owners, is
            // re-keyed here, with the mirrored row and the other monitors of the repository.
            let current = &header.repository;
            if !healed && (current.owner != monitor.owner || current.name != monitor.name) {
                self.heal_identity(job.connection_id, provider_instance_id, monitor, current)
                    .await?;
                healed = true;
            }
            let repo_id = match repository_id {
                Some(id) => id,
                None => {
                    let id = scm_mirror::repository::ensure_repository(
                        &self.pool,
                        provider_instance_id,
                        &header.repository,
                    )
                    .await?;
                    sqlx::query("UPDATE repository_to_monitor SET native_id = $2, updated_at = now() WHERE id = $1 AND native_id IS NULL")
                        .bind(monitor.id)
                        .bind(header.repository.native_id)
                        .execute(&self.pool)
                        .await?;
                    repository_id = Some(id);
                    id
                }
            };
            let written = page_write.write(&self.pool, repo_id).await?;
            *done += header.native_ids.len() as i64;
            metrics::counter!("github_sync_items_total", "class" => class.table())
                .increment(written.applied);
            if header.errored {
                // Fail-closed: a GraphQL error anywhere leaves the listing incomplete.
                listing.record_fault(ListingFault::GraphQlError);
            }
            let step = listing.accept_page(ListingPage {
                ids: header.native_ids,
                has_next_page: header.has_next_page,
                end_cursor: header.end_cursor,
                total_count: header.total_count,
            });
            match step {
                NextStep::FetchAfter(cursor) => after = Some(cursor),
                NextStep::Finished => break,
                NextStep::Stopped(reason) => {
                    tracing::warn!(%reason, "listing stopped; nothing will be inferred from it");
                    break;
                }
            }
        }
        let finished = listing.finish();
        let listed = match &finished {
            Ok(_) => Listed::Whole,
            Err(reason) => Listed::Partial(reason.to_string()),
        };
        let decision = sweep.decide(finished, &self.settings.blast_radius);
        self.apply_decision(job, class, repository_id, decision)
            .await?;
        Ok((stop, listed))
    }

    /// Re-keys a monitor whose repository (by native id) is now called something else, with the
    /// repository's mirrored row and its other monitors, in one transaction.
    async fn heal_identity(
        &self,
        connection_id: Uuid,
        provider_instance_id: Uuid,
        monitor: &Monitor,
        current: &crate::source::RepoHeader,
    ) -> Result<(), sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        // The page was read with this connection's credentials: its monitors may take the id.
        let done = monitors::rekey(
            &mut txn,
            connection_id,
            provider_instance_id,
            current.native_id,
            &current.owner,
            &current.name,
            &[(&monitor.owner, &monitor.name)],
        )
        .await?;
        txn.commit().await?;
        tracing::info!(
            monitor = %monitor.id,
            from = %format!("{}/{}", monitor.owner, monitor.name),
            to = %format!("{}/{}", current.owner, current.name),
            native_id = current.native_id,
            moved = done.moved,
            merged = done.merged,
            blocked = done.blocked,
            "repository moved upstream; monitors re-keyed by native id"
        );
        Ok(())
    }

    async fn apply_decision(
        &self,
        job: &ClaimedJob,
        class: ItemClass,
        repository_id: Option<Uuid>,
        decision: SweepDecision<i64>,
    ) -> Result<(), sqlx::Error> {
        match decision {
            SweepDecision::Tombstone(plan) => {
                let Some(repo) = repository_id else {
                    return Ok(());
                };
                let ids: Vec<i64> = plan.ids().iter().copied().collect();
                if ids.is_empty() {
                    return Ok(());
                }
                let n = items::tombstone(&self.pool, class, repo, &ids, OffsetDateTime::now_utc())
                    .await?;
                tracing::info!(
                    tombstoned = n,
                    "reconcile tombstoned items missing upstream"
                );
                self.activity(
                    job,
                    "tombstoned",
                    serde_json::json!({
                        "class": class.table(), "repository_id": repo, "count": n,
                    }),
                )
                .await?;
            }
            SweepDecision::Hold(held) => {
                metrics::counter!("sweeps_held_total", "vendor" => "github", "class" => class.table())
                    .increment(1);
                tracing::warn!(
                    would_tombstone = held.would_tombstone(),
                    class_size = held.class_size(),
                    "sweep held for operator confirmation"
                );
                self.activity(
                    job,
                    "sweep_held",
                    serde_json::json!({
                        "class": class.table(), "repository_id": repository_id,
                        "would_tombstone": held.would_tombstone(), "class_size": held.class_size(),
                    }),
                )
                .await?;
            }
            SweepDecision::Skip(SkipReason::IncompleteListing(reason)) => {
                if job.job_type == SyncJobType::Reconciliation {
                    self.activity(
                        job,
                        "not_reconciled",
                        serde_json::json!({
                            "class": class.table(), "repository_id": repository_id,
                            "reason": reason.to_string(),
                        }),
                    )
                    .await?;
                }
            }
            SweepDecision::Skip(SkipReason::NotReconciliation(_)) => {}
        }
        Ok(())
    }

    async fn activity(
        &self,
        job: &ClaimedJob,
        activity: &str,
        mut detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        detail["job_id"] = serde_json::json!(job.id);
        sqlx::query(
            "INSERT INTO connection_activity (id, connection_id, workspace_id, activity, detail)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(Uuid::now_v7())
        .bind(job.connection_id)
        .bind(job.workspace_id)
        .bind(activity)
        .bind(sqlx::types::Json(detail))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn read_page(
        &self,
        class: ItemClass,
        source: &dyn GithubSource,
        repo: &RepoRef,
        after: Option<&str>,
    ) -> Result<(PageRead, PageWrite), SourceError> {
        let first = self.settings.page_size;
        Ok(match class {
            ItemClass::Issue => {
                let page = source.issues_page(repo, first, after).await?;
                (
                    read_of(&page, |n| n.fields.native_id),
                    PageWrite::Issues(page),
                )
            }
            ItemClass::PullRequest => {
                let page = source.pull_requests_page(repo, first, after).await?;
                (
                    read_of(&page, |n| n.fields.native_id),
                    PageWrite::PullRequests(page),
                )
            }
        })
    }
}

/// A page waiting to be written.
enum PageWrite {
    Issues(Page<crate::source::IssueNode>),
    PullRequests(Page<crate::source::PullRequestNode>),
}

impl PageWrite {
    async fn write(
        &self,
        pool: &PgPool,
        repository_id: Uuid,
    ) -> Result<mirror::Written, sqlx::Error> {
        match self {
            PageWrite::Issues(page) => mirror::upsert_page(pool, repository_id, page).await,
            PageWrite::PullRequests(page) => mirror::upsert_page(pool, repository_id, page).await,
        }
    }
}
