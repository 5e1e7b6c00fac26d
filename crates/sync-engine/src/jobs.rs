//! The `sync_job` row is the truth about a job: claimed with a lease so any number of replicas can
//! run jobs and a dead replica's job is taken over after its lease; progress and cancellation are
//! read and written through the same row. A replica claims only its vendor's jobs.

use std::collections::BTreeMap;
use std::time::Duration;

use lifecycle_core::job::SyncJobType;
use sqlx::PgPool;
use store::entity::ConnectionKind;
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
        }
    }

    /// How long a claim lasts without a heartbeat.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }

    /// Claims a queued job, or a running one whose lease expired (its replica died). `None` when
    /// the job is finished, canceled, or running elsewhere.
    pub async fn claim(&self, job_id: Uuid) -> Result<Option<ClaimedJob>, sqlx::Error> {
        let row: Option<ClaimedRow> = sqlx::query_as(
            "UPDATE sync_job SET status = 'running', claimed_by = $2,
                    lease_until = now() + make_interval(secs => $3),
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
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|row| {
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
        }))
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

    /// Gives the job back after a transient failure, so a redelivery can claim it at once.
    pub async fn release(&self, job: &ClaimedJob) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE sync_job SET lease_until = now(), updated_at = now()
              WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
        )
        .bind(job.id)
        .bind(&self.replica)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records how the job ended (only while this replica still holds it).
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
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
