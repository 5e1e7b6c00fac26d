//! One sync job over one connection: materialise monitors, then list every monitored
//! repository's issues and pull requests page by page through an `UpstreamListing`, writing each
//! page forward-only. Only a RECONCILIATION whose listing finished clean may tombstone, and only
//! the candidates captured before it started (the deletion gate decides; this module obeys).
//! Each pass also re-reads the check runs of open pull requests whose stored list of their head
//! has not finished and changed in the last day.

use std::sync::Arc;

use lifecycle_core::deletion::{BlastRadius, SkipReason, SweepDecision, SweepPass};
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::{ListingFault, ListingPage, NextStep, UpstreamListing};
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::check_runs;
use crate::events::Origin;
use crate::jobs::{ClaimedJob, JobControl, JobOutcome, Jobs};
use crate::mirror::{self, ItemClass};
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
    pub reconcile_cooldown: std::time::Duration,
}

impl Default for SyncSettings {
    fn default() -> Self {
        SyncSettings {
            page_size: 100,
            page_cap: 10_000,
            blast_radius: BlastRadius::default(),
            reconcile_cooldown: std::time::Duration::from_secs(12 * 3600),
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

enum Flow {
    Next,
    Stop(JobOutcome),
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
        let mut done: i64 = 0;
        let outcome = match self
            .walk(job, provider_instance_id, source.as_ref(), &mut done)
            .await?
        {
            Flow::Next => JobOutcome::Succeeded,
            Flow::Stop(outcome) => outcome,
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

    async fn walk(
        &self,
        job: &ClaimedJob,
        provider_instance_id: Uuid,
        source: &dyn GithubSource,
        done: &mut i64,
    ) -> Result<Flow, sqlx::Error> {
        let monitors = match self.materialise_monitors(job, source).await? {
            Ok(m) => m,
            Err(e) => {
                return Ok(Flow::Stop(JobOutcome::Failed(format!(
                    "listing repositories: {e}"
                ))));
            }
        };
        let reconciling = job.job_type == SyncJobType::Reconciliation;
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
                let (flow, listed_whole) = self
                    .sync_class(job, provider_instance_id, monitor, class, source, done)
                    .await?;
                complete &= listed_whole;
                if let Flow::Stop(outcome) = flow {
                    return Ok(Flow::Stop(outcome));
                }
            }
            if reconciling && complete {
                self.mark_reconciled(provider_instance_id, monitor).await?;
            }
        }
        Ok(Flow::Next)
    }

    /// Monitors come from what the credentials reach (App installation or PAT list).
    async fn materialise_monitors(
        &self,
        job: &ClaimedJob,
        source: &dyn GithubSource,
    ) -> Result<Result<Vec<Monitor>, SourceError>, sqlx::Error> {
        let repos = match source.repositories().await {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        for RepoRef { owner, name } in &repos {
            sqlx::query(
                "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(Uuid::now_v7())
            .bind(job.workspace_id)
            .bind(job.connection_id)
            .bind(owner)
            .bind(name)
            .execute(&self.pool)
            .await?;
        }
        let rows: Vec<(Uuid, String, String, Option<i64>)> = sqlx::query_as(
            "SELECT id, owner, name, native_id FROM repository_to_monitor
              WHERE connection_id = $1 ORDER BY lower(owner), lower(name)",
        )
        .bind(job.connection_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Ok(rows
            .into_iter()
            .map(|(id, owner, name, native_id)| Monitor {
                id,
                owner,
                name,
                native_id,
            })
            .collect()))
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
    ) -> Result<(Flow, bool), sqlx::Error> {
        let known_repo = self
            .repository_id(provider_instance_id, monitor.native_id)
            .await?;
        // Deletion gate: candidates are the live rows before the listing starts.
        let candidates = match known_repo {
            Some(id) if job.job_type == SyncJobType::Reconciliation => {
                mirror::live_native_ids(&self.pool, class, id).await?
            }
            _ => Vec::new(),
        };
        let sweep = SweepPass::capture(job.job_type, candidates);
        let mut listing = UpstreamListing::new(self.settings.page_cap);
        let repo = RepoRef {
            owner: monitor.owner.clone(),
            name: monitor.name.clone(),
        };
        let mut after: Option<String> = None;
        let mut repository_id = known_repo;
        let mut stop: Option<JobOutcome> = None;
        loop {
            match self.jobs.heartbeat(job, *done, None).await? {
                JobControl::Continue => {}
                JobControl::Canceled => {
                    listing.record_fault(ListingFault::Cancelled);
                    stop = Some(JobOutcome::Canceled);
                    break;
                }
                JobControl::LostClaim => {
                    return Ok((
                        Flow::Stop(JobOutcome::Failed("lost the job's lease".into())),
                        false,
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
                    stop = match &e {
                        SourceError::BudgetExhausted(why) => {
                            Some(JobOutcome::Failed(format!("quota budget exhausted: {why}")))
                        }
                        SourceError::RateLimited => {
                            Some(JobOutcome::Failed("GitHub's rate limit is spent".into()))
                        }
                        SourceError::Http(status) if *status >= 500 => Some(JobOutcome::Failed(
                            format!("GitHub is failing (HTTP {status} after retries)"),
                        )),
                        _ => None,
                    };
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
                return Ok((Flow::Next, false));
            }
            let repo_id = match repository_id {
                Some(id) => id,
                None => {
                    let id = mirror::ensure_repository(
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
        let complete = finished.is_ok();
        let decision = sweep.decide(finished, &self.settings.blast_radius);
        self.apply_decision(job, class, repository_id, decision)
            .await?;
        let flow = match stop {
            Some(outcome) => Flow::Stop(outcome),
            None => Flow::Next,
        };
        Ok((flow, complete))
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
                let n = mirror::tombstone(&self.pool, class, repo, &ids, OffsetDateTime::now_utc())
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
                (read_of(&page, |n| n.native_id), PageWrite::Issues(page))
            }
            ItemClass::PullRequest => {
                let page = source.pull_requests_page(repo, first, after).await?;
                (
                    read_of(&page, |n| n.native_id),
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
            PageWrite::Issues(page) => mirror::upsert_issues(pool, repository_id, page).await,
            PageWrite::PullRequests(page) => {
                mirror::upsert_pull_requests(pool, repository_id, page).await
            }
        }
    }
}
