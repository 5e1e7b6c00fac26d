//! The bus side of a sync service: job messages run jobs, activation messages ready the
//! connection (the vendor's [`Vendor::activate`]) and then queue its activation jobs
//! ([`Vendor::ON_ACTIVATION`]), schedules queue RECONCILIATION and BACKFILL jobs. Each queued job and its `jobs.*`
//! message commit together; a job is identified by its dedup key, so redeliveries queue nothing
//! twice.

use bus::consumer::{Delivery, Handler, HandlerError, Settle};
use bus::contracts::{JobQueued, LifecycleTransition};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, TransactionTrait};
use store::entity::{ConnectionKind, ConnectionStatus, JobTrigger, JobType, connection};
use uuid::Uuid;

use crate::engine::Engine;
use crate::jobs::{Claim, JobOutcome};
use lifecycle_core::job::SyncJobType;

use crate::vendor::{Moment, Vendor};

/// Runs `jobs.<kind>.*` messages of one vendor.
pub struct JobHandler<V: Vendor> {
    pub db: DatabaseConnection,
    pub engine: Engine<V>,
}

impl<V: Vendor> Handler for JobHandler<V> {
    type Message = JobQueued;

    async fn handle(&self, msg: JobQueued, _: &Delivery) -> Result<Settle, HandlerError> {
        self.run_job(msg.job_id).await
    }
}

impl<V: Vendor> JobHandler<V> {
    /// Claims the job and runs it to its end, unless its connection cannot sync now.
    pub async fn run_job(&self, job_id: Uuid) -> Result<Settle, HandlerError> {
        let jobs = &self.engine.jobs;
        let job = match jobs.claim(job_id).await {
            Ok(Claim::Claimed(job)) => job,
            // Not its turn: the message is settled, so waiting spends no delivery and holds
            // no slot; a job of its workspace ending (or the sweep) queues it again.
            Ok(Claim::Deferred(wait)) => {
                metrics::counter!("sync_jobs_deferred_total", "vendor" => V::KIND.as_str(), "waits_for" => wait.as_str())
                    .increment(1);
                return Ok(Settle::Unchanged("job deferred until its turn"));
            }
            Ok(Claim::Unclaimable) => {
                // Lease takeover: a replica holding the job may die with it (this message came
                // back because one stopped), so the message returns until the lease lapses or
                // the job ends; a finished or canceled job needs nothing.
                return match jobs.held(job_id).await {
                    Ok(true) => Err(HandlerError::transient(
                        "job held by a replica whose lease is live; retried until it lapses",
                    )),
                    Ok(false) => Ok(Settle::Ignored("job not claimable")),
                    Err(e) => Err(HandlerError::transient(format!("reading job: {e}"))),
                };
            }
            Err(e) => return Err(HandlerError::transient(format!("claiming job: {e}"))),
        };
        let conn = match connection::Entity::find_by_id(job.connection_id)
            .one(&self.db)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                let _ = jobs.release(&job).await;
                return Err(HandlerError::transient(format!("loading connection: {e}")));
            }
        };
        let outcome_for_unusable = match &conn {
            None => Some("the connection no longer exists".to_owned()),
            Some(c) if c.status != ConnectionStatus::Active => Some(format!(
                "the connection is {:?}; only an active connection syncs",
                c.status
            )),
            // A schedule queued it before the credentials were refused: reading with them
            // again would only be refused again.
            Some(c) if job.scheduled && c.credentials_refused_at.is_some() => Some(format!(
                "the connection needs new credentials ({}); its schedules resume once they are replaced",
                c.credentials_refusal.as_deref().unwrap_or("refused")
            )),
            _ => None,
        };
        if let Some(reason) = outcome_for_unusable {
            let _ = jobs.finish(&job, &JobOutcome::Failed(reason), 0).await;
            return Ok(Settle::Applied("job failed: connection unusable"));
        }
        let Some(conn) = conn else {
            return Ok(Settle::Ignored("no connection"));
        };
        let source = match self.engine.vendor.source(&conn).await {
            Ok(s) => s,
            Err(e) => {
                let reason = format!(
                    "cannot reach {} with this connection: {e:#}",
                    V::KIND.jobs().vendor
                );
                let _ = jobs.finish(&job, &JobOutcome::Failed(reason), 0).await;
                return Ok(Settle::Applied("job failed: vendor unreachable"));
            }
        };
        // A reconcile retries what activation left unfinished before it lists anything.
        if job.job_type == SyncJobType::Reconciliation
            && let Err(e) = self
                .engine
                .vendor
                .activate(&conn, Moment::Reconciliation)
                .await
        {
            tracing::warn!(job_id = %job.id, connection_id = %conn.id, error = %format!("{e:#}"), "readying the connection before a reconcile failed; the reconcile runs on");
        }
        // The runner keeps the message ours while the job runs; a dead replica's comes back.
        match self
            .engine
            .run(&job, conn.provider_instance_id, source)
            .await
        {
            Ok(_) => Ok(Settle::Applied("job ran")),
            Err(e) => {
                let _ = jobs.release(&job).await;
                Err(HandlerError::transient(format!(
                    "job failed on the database: {e}"
                )))
            }
        }
    }
}

/// Queues a job and its message in one transaction; `false` when its dedup key already exists.
pub async fn queue_job(
    db: &DatabaseConnection,
    conn: &connection::Model,
    job_type: JobType,
    trigger: JobTrigger,
    dedup_key: String,
) -> Result<bool, sea_orm::DbErr> {
    let txn = db.begin().await?;
    let queued = store::jobs::queue(&txn, conn, job_type, trigger, Some(dedup_key)).await?;
    txn.commit().await?;
    Ok(queued.is_some())
}

/// `lifecycle.<kind>.*.activated`: the vendor readies the connection, then the job types it
/// declares in [`Vendor::ON_ACTIVATION`] (INITIAL by default) are queued for that activation.
pub struct LifecycleHandler<V: Vendor> {
    pub db: DatabaseConnection,
    pub vendor: std::sync::Arc<V>,
}

impl<V: Vendor> Handler for LifecycleHandler<V> {
    type Message = LifecycleTransition;

    async fn handle(&self, msg: LifecycleTransition, _: &Delivery) -> Result<Settle, HandlerError> {
        if msg.transition == "resumed" {
            self.resumed(&msg).await
        } else {
            self.activated(&msg).await
        }
    }
}

impl<V: Vendor> LifecycleHandler<V> {
    /// Runs the vendor's activation steps for a resumed connection (no activation jobs: its
    /// mirror was kept while suspended). Suspension fenced what the connection had created at
    /// the vendor, and a fenced resource is never adopted back, so these steps create fresh
    /// ones. A message about a connection that left active since is inert (the vendor's steps
    /// run only for an active connection).
    pub async fn resumed(&self, msg: &LifecycleTransition) -> Result<Settle, HandlerError> {
        let conn = match connection::Entity::find_by_id(msg.connection_id)
            .one(&self.db)
            .await
        {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(Settle::Unchanged("resumed connection no longer exists")),
            Err(e) => return Err(HandlerError::transient(format!("loading connection: {e}"))),
        };
        if let Err(e) = self.vendor.activate(&conn, Moment::Resumed).await {
            return Err(HandlerError::transient(format!(
                "activating the resumed connection: {e:#}"
            )));
        }
        Ok(Settle::Applied(
            "resumed; the vendor's activation steps ran",
        ))
    }

    /// Readies the activated connection and queues its activation jobs, once per activation.
    pub async fn activated(&self, msg: &LifecycleTransition) -> Result<Settle, HandlerError> {
        let conn = match connection::Entity::find_by_id(msg.connection_id)
            .one(&self.db)
            .await
        {
            Ok(Some(c)) => c,
            Ok(None) => {
                return Err(HandlerError::permanent(
                    "activated connection does not exist",
                ));
            }
            Err(e) => return Err(HandlerError::transient(format!("loading connection: {e}"))),
        };
        // The vendor's activation steps come before its activation jobs; a failure to run them
        // is retried with the message, and no job is queued before they ran.
        if let Err(e) = self.vendor.activate(&conn, Moment::Activated).await {
            return Err(HandlerError::transient(format!(
                "activating the connection: {e:#}"
            )));
        }
        let support = V::KIND.jobs();
        let mut queued = 0;
        for &job_type in V::ON_ACTIVATION {
            // The vendor's job declaration binds activation too: a refused type is never queued.
            if let Some(refusal) = support.refusal(job_type) {
                tracing::error!(connection_id = %conn.id, %refusal, "ON_ACTIVATION names a job type the vendor refuses; not queued");
                continue;
            }
            // One job of each type per activation: the generation names it, whoever delivers it.
            let key = format!(
                "{}:{}:{}",
                job_type.as_str().to_lowercase(),
                conn.id,
                msg.lifecycle_generation
            );
            match queue_job(&self.db, &conn, job_type.into(), JobTrigger::Lifecycle, key).await {
                Ok(true) => queued += 1,
                Ok(false) => {}
                Err(e) => {
                    return Err(HandlerError::transient(format!(
                        "queueing {job_type} job: {e}"
                    )));
                }
            }
        }
        Ok(if V::ON_ACTIVATION.is_empty() {
            Settle::Applied("activated; the vendor queues no job on activation")
        } else if queued > 0 {
            Settle::Applied("activation jobs queued")
        } else {
            Settle::Unchanged("activation jobs already queued")
        })
    }
}

/// The first job type a vendor's [`Vendor::ON_ACTIVATION`] names that its kind refuses: a
/// declaration error ([`crate::SyncJobs::register`] refuses to start with one).
pub fn activation_refusal<V: Vendor>() -> Option<lifecycle_core::job::JobRefusal> {
    V::ON_ACTIVATION
        .iter()
        .find_map(|&job_type| V::KIND.jobs().refusal(job_type))
}

/// A schedule's run: one job of `job_type` per active connection of `kind` whose credentials
/// were not refused, per due instant (the dedup key makes a second replica or a retried run
/// queue nothing more).
pub async fn queue_scheduled(
    db: &DatabaseConnection,
    kind: ConnectionKind,
    job_type: JobType,
    due_at: time::OffsetDateTime,
) -> anyhow::Result<usize> {
    let conns = connection::Entity::find()
        .filter(connection::Column::Kind.eq(kind))
        .filter(connection::Column::Status.eq(ConnectionStatus::Active))
        .all(db)
        .await?;
    // Refused credentials stop the schedules until they are replaced.
    let (conns, refused): (Vec<_>, Vec<_>) = conns
        .into_iter()
        .partition(|c| c.credentials_refused_at.is_none());
    metrics::gauge!("sync_connections_needing_credentials", "vendor" => kind.as_str())
        .set(refused.len() as f64);
    if !refused.is_empty() {
        tracing::warn!(
            vendor = kind.as_str(),
            job_type = job_type.as_str(),
            skipped = refused.len(),
            "scheduled jobs skip connections whose credentials were refused"
        );
    }
    let mut queued = 0;
    for conn in &conns {
        let key = format!(
            "scheduled:{}:{}:{}",
            job_type.as_str(),
            conn.id,
            due_at.unix_timestamp()
        );
        if queue_job(db, conn, job_type, JobTrigger::Scheduled, key).await? {
            queued += 1;
        }
    }
    Ok(queued)
}
