//! A sync service's job wiring in one call: the jobs and lifecycle consumers of its vendor's
//! kind, and the schedules that queue its RECONCILIATION and BACKFILL jobs, on a
//! `runtime::Service`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use bus::consumer::ConsumerSpec;
use bus::{Bus, Stream};
use lifecycle_core::subject;
use runtime::{ScheduleRunner, Service};
use sea_orm::DatabaseConnection;
use store::entity::JobType;

use crate::consumers::{JobHandler, LifecycleHandler, queue_scheduled};
use crate::engine::Engine;
use crate::vendor::Vendor;

/// How often a replica wakes every deferred job whose turn has come.
const DEFERRED_SWEEP: Duration = Duration::from_secs(10);

/// A cron schedule that queues one job type for every active connection of the vendor.
#[derive(Debug, Clone, Copy)]
pub struct JobSchedule<'a> {
    pub job_type: JobType,
    /// A croner expression with seconds, UTC; `off` disables the schedule.
    pub cron: &'a str,
    /// The setting it comes from, named when it is refused.
    pub variable: &'static str,
}

/// How a sync service runs its vendor's jobs.
pub struct SyncJobs<'a, V: Vendor> {
    /// The service's name: its durable consumers are `<name>-jobs` and `<name>-lifecycle`.
    pub service: &'static str,
    pub engine: Engine<V>,
    /// Jobs run at once by this replica.
    pub concurrency: usize,
    pub schedules: &'a [JobSchedule<'a>],
}

impl<V: Vendor> SyncJobs<'_, V> {
    /// Declares the consumers on `service` and the schedules on `schedules`. A schedule of a
    /// job type the vendor refuses is a configuration error, and so is such a type in the
    /// vendor's [`Vendor::ON_ACTIVATION`].
    pub fn register(
        self,
        service: &mut Service,
        schedules: &mut ScheduleRunner,
        bus: &Bus,
        db: &DatabaseConnection,
    ) -> anyhow::Result<()> {
        let kind = V::KIND;
        // A refused job type is never queued, on activation either.
        if let Some(refusal) = crate::consumers::activation_refusal::<V>() {
            return Err(anyhow!("the vendor's ON_ACTIVATION: {refusal}"));
        }
        crate::engine::register_metrics::<V>();
        let jobs_spec = ConsumerSpec {
            filter_subjects: vec![subject::jobs_filter(kind.as_str())],
            concurrency: self.concurrency.max(1),
            // Lease takeover: the message of a replica that dies mid-job comes back about when
            // its lease lapses (the handler retries one that finds the lease still live).
            ack_wait: self.engine.jobs.lease(),
            ..ConsumerSpec::new(Stream::Jobs, format!("{}-jobs", self.service))
        };
        let vendor = self.engine.vendor.clone();
        // Ends of jobs wake the jobs deferred behind them; this sweep wakes the rest (those
        // deferred behind a replica that died, or when a wake's transaction failed).
        let deferred = self.engine.jobs.clone();
        service.task(format!("{}-deferred-jobs", self.service), move |stop| async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(DEFERRED_SWEEP) => {}
                }
                if let Err(e) = deferred.wake_deferred(None).await {
                    tracing::warn!(error = %e, "waking deferred jobs failed; the next sweep tries again");
                }
            }
        });
        let job_handler = Arc::new(JobHandler {
            db: db.clone(),
            engine: self.engine,
        });
        service.consumer(bus, db, jobs_spec, job_handler);
        let lifecycle_spec = ConsumerSpec {
            // A resume runs the vendor's activation steps again: what suspension fenced for
            // removal is never adopted back, so the resumed connection gets fresh resources.
            filter_subjects: vec![
                subject::lifecycle_filter(kind.as_str(), "activated"),
                subject::lifecycle_filter(kind.as_str(), "resumed"),
            ],
            ..ConsumerSpec::new(Stream::Lifecycle, format!("{}-lifecycle", self.service))
        };
        let lifecycle_handler = Arc::new(LifecycleHandler {
            db: db.clone(),
            vendor,
        });
        service.consumer(bus, db, lifecycle_spec, lifecycle_handler);
        for schedule in self.schedules {
            if schedule.cron.trim() == "off" {
                continue;
            }
            let job_type = schedule.job_type;
            if let Some(refusal) = kind.jobs().refusal(job_type.into()) {
                return Err(anyhow!("{}: {refusal}", schedule.variable));
            }
            let name = format!("{}-{}", kind.as_str(), job_type.as_str().to_lowercase());
            let schedule_db = db.clone();
            schedules
                .add(&name, schedule.cron, Duration::from_secs(300), move |run| {
                    let db = schedule_db.clone();
                    async move {
                        let queued = queue_scheduled(&db, kind, job_type, run.due_at).await?;
                        tracing::info!(
                            queued,
                            vendor = kind.as_str(),
                            job_type = job_type.as_str(),
                            "scheduled jobs queued"
                        );
                        Ok(())
                    }
                })
                .context(schedule.variable)?;
        }
        Ok(())
    }
}
