//! The `sync_job` row is the truth about a job: claimed with a lease so any number of replicas can
//! run jobs and a dead replica's job is taken over after its lease; progress and cancellation are
//! read and written through the same row. A replica claims only its vendor's jobs.
//!
//! Jobs take turns: a connection runs one job at a time and a workspace at most its limit, so a
//! tenant whose server answers slowly holds at most that many of the shared slots. A job that
//! must wait is deferred on its row and its message settled (waiting spends no delivery and no
//! slot); the end of a job of its workspace queues its message again.

use std::collections::BTreeMap;
use std::time::Duration;

use lifecycle_core::job::SyncJobType;
use sqlx::PgPool;
use store::contracts::JobQueued;
use store::entity::{ConnectionKind, JobTrigger};
use uuid::Uuid;

/// A job this replica holds.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub job_type: SyncJobType,
    /// Started by the schedule (rather than by an operator or a lifecycle event).
    pub scheduled: bool,
    /// When this replica claimed it (before it read the connection's credentials).
    pub claimed_at: time::OffsetDateTime,
    /// The trace context of whoever queued it (`traceparent`, `tracestate`); empty when none.
    pub trace_context: BTreeMap<String, String>,
}

impl ClaimedJob {
    /// Records connection activity of this job (its id joins the detail).
    pub async fn record_activity<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        activity: &str,
        mut detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        detail["job_id"] = serde_json::json!(self.id);
        store::activity::record(
            executor,
            self.connection_id,
            self.workspace_id,
            activity,
            detail,
        )
        .await
    }
}

/// A `sync_job` row as a claim returns it.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    id: Uuid,
    connection_id: Uuid,
    workspace_id: Uuid,
    job_type: String,
    trigger: String,
    claimed_at: time::OffsetDateTime,
    trace_context: Option<serde_json::Value>,
}

/// A job row as a wake returns it.
#[derive(sqlx::FromRow)]
struct WokenRow {
    id: Uuid,
    connection_id: Uuid,
    workspace_id: Uuid,
    job_type: String,
    trigger: String,
}

/// Jobs of one workspace (of one vendor) running at once by default, across every replica.
pub const DEFAULT_WORKSPACE_JOBS: u32 = 1;

/// Whose turn a deferred job waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Its connection runs another job.
    Connection,
    /// Its workspace runs as many jobs as it may.
    Workspace,
}

impl Wait {
    pub fn as_str(self) -> &'static str {
        match self {
            Wait::Connection => "connection",
            Wait::Workspace => "workspace",
        }
    }
}

/// What a claim found.
#[derive(Debug, Clone)]
pub enum Claim {
    /// This replica holds the job now.
    Claimed(ClaimedJob),
    /// Not its turn: marked deferred, woken when a job of its workspace ends.
    Deferred(Wait),
    /// Finished, canceled, or running on a replica (possibly one whose lease is live).
    Unclaimable,
}

impl Claim {
    /// The claimed job, if this replica holds it now.
    pub fn job(self) -> Option<ClaimedJob> {
        match self {
            Claim::Claimed(job) => Some(job),
            Claim::Deferred(_) | Claim::Unclaimable => None,
        }
    }
}

/// Takes the lock on which claims, ends and wakes of one workspace's jobs take turns (released
/// at commit). The two-key form keeps it apart from the single-key locks used elsewhere.
async fn lock_workspace(tx: &mut sqlx::PgConnection, workspace: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(CLAIM_LOCK_CLASS)
        .bind(workspace.to_string())
        .execute(tx)
        .await?;
    Ok(())
}

/// The first key of the claim lock ("jobs" in ASCII).
const CLAIM_LOCK_CLASS: i32 = 0x6a6f_6273;

/// What the job should do after a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobControl {
    Continue,
    /// An operator canceled the job: stop at this page.
    Canceled,
    /// Another replica took the job over (this one's lease lapsed): stop without writing.
    LostClaim,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    Succeeded,
    Failed(String),
    Canceled,
}

/// Claims, heartbeats and finishes one vendor's jobs for one replica.
#[derive(Debug, Clone)]
pub struct Jobs {
    kind: ConnectionKind,
    pool: PgPool,
    replica: String,
    lease: Duration,
    workspace_limit: u32,
}

impl Jobs {
    /// Jobs of connections of `kind`, claimed as `replica` for `lease` at a time.
    pub fn new(
        kind: ConnectionKind,
        pool: PgPool,
        replica: impl Into<String>,
        lease: Duration,
    ) -> Self {
        Jobs {
            kind,
            pool,
            replica: replica.into(),
            lease,
            workspace_limit: DEFAULT_WORKSPACE_JOBS,
        }
    }

    /// At most `limit` jobs of one workspace run at once, across every replica of the vendor
    /// (at least 1); a connection runs one at a time whatever the limit.
    pub fn with_workspace_limit(mut self, limit: u32) -> Self {
        self.workspace_limit = limit.max(1);
        self
    }

    /// How long a claim lasts without a heartbeat.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }

    /// Claims a queued job, or a running one whose lease expired (its replica died), when it is
    /// its turn: its connection runs no other job and its workspace fewer than it may
    /// ([`Jobs::with_workspace_limit`]). Otherwise the job is marked deferred and waits for a job
    /// of its workspace to end ([`Jobs::finish`], [`Jobs::release`]) or for
    /// [`Jobs::wake_deferred`]. Claims of one workspace's jobs take turns on a lock, so two
    /// replicas never both find a connection idle.
    pub async fn claim(&self, job_id: Uuid) -> Result<Claim, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let Some((connection_id, workspace_id)) = sqlx::query_as::<_, (Uuid, Uuid)>(
            "SELECT connection_id, workspace_id FROM sync_job
              WHERE id = $1 AND kind = $2
                AND (status = 'queued' OR (status = 'running' AND lease_until < now()))",
        )
        .bind(job_id)
        .bind(self.kind.as_str())
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(Claim::Unclaimable);
        };
        lock_workspace(&mut tx, workspace_id).await?;
        let (connection_running, workspace_running): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE connection_id = $3), count(*)
               FROM sync_job
              WHERE workspace_id = $2 AND kind = $4 AND id <> $1
                AND status = 'running' AND lease_until >= now()",
        )
        .bind(job_id)
        .bind(workspace_id)
        .bind(connection_id)
        .bind(self.kind.as_str())
        .fetch_one(&mut *tx)
        .await?;
        let wait = if connection_running > 0 {
            Some(Wait::Connection)
        } else if workspace_running >= i64::from(self.workspace_limit) {
            Some(Wait::Workspace)
        } else {
            None
        };
        if let Some(wait) = wait {
            let deferred = sqlx::query(
                "UPDATE sync_job SET deferred_at = coalesce(deferred_at, now()), updated_at = now()
                  WHERE id = $1
                    AND (status = 'queued' OR (status = 'running' AND lease_until < now()))",
            )
            .bind(job_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            return Ok(if deferred == 1 {
                Claim::Deferred(wait)
            } else {
                Claim::Unclaimable
            });
        }
        let row: Option<ClaimedRow> = sqlx::query_as(
            "UPDATE sync_job SET status = 'running', claimed_by = $2,
                    lease_until = now() + make_interval(secs => $3), deferred_at = NULL,
                    started_at = coalesce(started_at, now()), updated_at = now()
              WHERE id = $1 AND kind = $4
                AND (status = 'queued' OR (status = 'running' AND lease_until < now()))
          RETURNING id, connection_id, workspace_id, job_type, trigger, now() AS claimed_at,
                    trace_context",
        )
        .bind(job_id)
        .bind(&self.replica)
        .bind(self.lease_secs())
        .bind(self.kind.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        let job = row.and_then(|row| {
            Some(ClaimedJob {
                id: row.id,
                connection_id: row.connection_id,
                workspace_id: row.workspace_id,
                job_type: row.job_type.parse().ok()?,
                scheduled: row.trigger == "scheduled",
                claimed_at: row.claimed_at,
                trace_context: row
                    .trace_context
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default(),
            })
        });
        Ok(job.map_or(Claim::Unclaimable, Claim::Claimed))
    }

    /// Queues the message of every deferred job whose turn may have come (its connection runs
    /// nothing, its workspace runs fewer than it may), at most one per connection, oldest
    /// deferral first; its claim decides again. `workspace`: only that workspace's (a job of it
    /// ended); `None`: every workspace's (the periodic sweep, which also wakes jobs deferred
    /// behind a replica that died). Returns how many it woke.
    pub async fn wake_deferred(&self, workspace: Option<Uuid>) -> Result<u64, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        if let Some(workspace) = workspace {
            lock_workspace(&mut tx, workspace).await?;
        }
        let woken = self.wake_in(&mut tx, workspace).await?;
        tx.commit().await?;
        Ok(woken)
    }

    async fn wake_in(
        &self,
        tx: &mut sqlx::PgConnection,
        workspace: Option<Uuid>,
    ) -> Result<u64, sqlx::Error> {
        let rows: Vec<WokenRow> = sqlx::query_as(
            "WITH ready AS (
                 SELECT DISTINCT ON (j.connection_id) j.id
                   FROM sync_job j
                  WHERE j.kind = $1 AND j.deferred_at IS NOT NULL
                    AND ($2::uuid IS NULL OR j.workspace_id = $2)
                    AND (j.status = 'queued' OR (j.status = 'running' AND j.lease_until < now()))
                    AND NOT EXISTS (SELECT 1 FROM sync_job r
                                     WHERE r.connection_id = j.connection_id AND r.id <> j.id
                                       AND r.status = 'running' AND r.lease_until >= now())
                    AND (SELECT count(*) FROM sync_job r
                          WHERE r.workspace_id = j.workspace_id AND r.kind = j.kind
                            AND r.status = 'running' AND r.lease_until >= now()) < $3
                  ORDER BY j.connection_id, j.deferred_at, j.id
             )
             UPDATE sync_job j SET deferred_at = NULL, updated_at = now()
               FROM ready WHERE j.id = ready.id
           RETURNING j.id, j.connection_id, j.workspace_id, j.job_type, j.trigger",
        )
        .bind(self.kind.as_str())
        .bind(workspace)
        .bind(i64::from(self.workspace_limit))
        .fetch_all(&mut *tx)
        .await?;
        let woken = rows.len() as u64;
        for row in rows {
            let trigger = <JobTrigger as sea_orm::ActiveEnum>::try_from_value(&row.trigger)
                .map_err(|e| sqlx::Error::Decode(e.to_string().into()))?;
            let message = JobQueued {
                job_id: row.id,
                connection_id: row.connection_id,
                workspace_id: row.workspace_id,
                kind: self.kind.as_str().to_owned(),
                job_type: row.job_type,
                trigger,
            };
            store::outbox::enqueue_contract(&mut *tx, &message).await?;
        }
        if woken > 0 {
            metrics::counter!("sync_jobs_woken_total", "vendor" => self.kind.as_str())
                .increment(woken);
        }
        Ok(woken)
    }

    /// Whether the job runs on a replica whose lease is still live (this one included).
    pub async fn held(&self, job_id: Uuid) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sync_job
                             WHERE id = $1 AND status = 'running' AND lease_until >= now())",
        )
        .bind(job_id)
        .fetch_one(&self.pool)
        .await
    }

    /// Extends the lease and records progress (`None`: the recorded progress stays); tells the
    /// job whether to go on.
    pub async fn heartbeat(
        &self,
        job: &ClaimedJob,
        done: Option<i64>,
        total: Option<i64>,
    ) -> Result<JobControl, sqlx::Error> {
        let updated = sqlx::query(
            "UPDATE sync_job SET lease_until = now() + make_interval(secs => $3),
                    progress_done = coalesce($4, progress_done),
                    progress_total = coalesce($5, progress_total),
                    updated_at = now()
              WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
        )
        .bind(job.id)
        .bind(&self.replica)
        .bind(self.lease_secs())
        .bind(done)
        .bind(total)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if updated == 1 {
            return Ok(JobControl::Continue);
        }
        let status: Option<(String,)> = sqlx::query_as("SELECT status FROM sync_job WHERE id = $1")
            .bind(job.id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match status {
            Some((s,)) if s == "canceled" => JobControl::Canceled,
            _ => JobControl::LostClaim,
        })
    }

    /// Records that pass `pass` starts (a manual backfill may take several); its progress
    /// counts from zero again.
    pub async fn start_pass(&self, job: &ClaimedJob, pass: i32) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE sync_job SET passes = $3, progress_done = 0, progress_total = NULL,
                    updated_at = now()
              WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
        )
        .bind(job.id)
        .bind(&self.replica)
        .bind(pass)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Gives the job back after a transient failure, so a redelivery can claim it at once; the
    /// workspace's deferred jobs may take its turn meanwhile.
    pub async fn release(&self, job: &ClaimedJob) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, job.workspace_id).await?;
        sqlx::query(
            "UPDATE sync_job SET lease_until = now(), updated_at = now()
              WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
        )
        .bind(job.id)
        .bind(&self.replica)
        .execute(&mut *tx)
        .await?;
        self.wake_in(&mut tx, Some(job.workspace_id)).await?;
        tx.commit().await
    }

    /// Records how the job ended (only while this replica still holds it), and wakes the
    /// workspace's deferred jobs in the same transaction: a claim that deferred behind this job
    /// committed before, so it is seen, and one after sees this job ended.
    pub async fn finish(
        &self,
        job: &ClaimedJob,
        outcome: &JobOutcome,
        done: i64,
    ) -> Result<(), sqlx::Error> {
        let (status, error) = match outcome {
            JobOutcome::Succeeded => ("succeeded", None),
            JobOutcome::Failed(reason) => ("failed", Some(reason.as_str())),
            // Canceled rows already say so; only stamp the finish time.
            JobOutcome::Canceled => ("canceled", None),
        };
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, job.workspace_id).await?;
        sqlx::query(
            "UPDATE sync_job SET status = $3, error = $4, progress_done = $5,
                    finished_at = now(), lease_until = NULL, updated_at = now()
              WHERE id = $1 AND claimed_by = $2 AND status IN ('running', 'canceled')",
        )
        .bind(job.id)
        .bind(&self.replica)
        .bind(status)
        .bind(error)
        .bind(done)
        .execute(&mut *tx)
        .await?;
        self.wake_in(&mut tx, Some(job.workspace_id)).await?;
        tx.commit().await
    }
}
