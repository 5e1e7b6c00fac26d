//! The scripted vendor as a sync service: its engine registered with `SyncJobs` on a
//! `runtime::Service` beside its monitor-following webhook consumer and the relay, started with
//! `testkit::spawn` like every service, over real JetStream and Postgres. Jobs are queued the
//! way control-api and the lifecycle queue them (row and message in one transaction) and reach
//! the engine only through the bus: activation -> INITIAL, RECONCILIATION with its fail-closed
//! sweep, BACKFILL passes, a cancel, a lease taken over by a second replica, a schedule, and a
//! webhook applied while a reconcile runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use bus::Stream;
use bus::consumer::ConsumerSpec;
use bus::contracts::LifecycleTransition;
use lifecycle_core::connection::Transition;
use lifecycle_core::subject;
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use store::entity::{ConnectionKind, JobTrigger, JobType, connection};
use sync_engine::webhook::WebhookConsumer;
use sync_engine::webhook::follow::{self, Filters};
use sync_engine::{Engine, JobSchedule, SyncJobs};
use testkit::TestEnv;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::scripted::{
    self, Fault, GENERAL, Gitlab, Kind, Mirror, Outline, Scripted, ScriptedSource, Stored, Tenant,
    item_event, note_id, row,
};

/// The service's name: its durables are `scripted-sync-jobs` and `scripted-sync-lifecycle`.
const NAME: &str = "scripted-sync";
const WEBHOOKS: &str = "scripted-sync-webhooks";
/// The replicas' job lease, and so the jobs consumer's ack wait (the durable's, shared by them).
const LEASE: Duration = Duration::from_secs(4);

/// The scripted vendor's service as a test configures it.
struct ScriptedSync {
    common: runtime::CommonArgs,
    replica: &'static str,
    lease: Duration,
    source: Arc<ScriptedSource>,
    /// The RECONCILIATION schedule; `off` unless a test looks at it.
    reconcile_cron: &'static str,
}

runtime::launch!(ScriptedSync, "scripted-sync", run);

/// A sync service's whole wiring, as a real vendor's `run` has it.
async fn run(
    config: ScriptedSync,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> Result<()> {
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let pool = db.get_postgres_connection_pool().clone();
    let vendor = Scripted::<Gitlab>::new(pool.clone(), config.source);
    let engine = Engine::new(
        Arc::new(vendor.clone()),
        pool.clone(),
        config.replica,
        config.lease,
        scripted::settings(),
    );
    let mut service = runtime::Service::new(NAME, &config.common, &shutdown);
    let mut schedules = runtime::ScheduleRunner::new(db.clone(), config.replica);
    SyncJobs {
        service: NAME,
        engine,
        concurrency: 2,
        schedules: &[JobSchedule {
            job_type: JobType::Reconciliation,
            cron: config.reconcile_cron,
            variable: "SCRIPTED_RECONCILE_CRON",
        }],
    }
    .register(&mut service, &mut schedules, &bus, &db)?;
    let webhooks = Arc::new(WebhookConsumer::new(pool, vendor.clone()));
    service.task("webhook consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let filters = Filters {
            monitors: vendor,
            excluded: Vec::new(),
            cap: follow::DEFAULT_MAX_FILTERS,
        };
        let spec = ConsumerSpec::new(Stream::WebhooksGitlab, WEBHOOKS);
        move |stop| {
            follow::run(
                bus,
                db,
                spec,
                webhooks,
                filters,
                Duration::from_millis(100),
                stop,
            )
        }
    });
    service.schedules(schedules);
    service.relay(&db, &bus);
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

/// A `sync_job` row as a test reads it.
#[derive(Debug, sqlx::FromRow)]
struct Job {
    status: String,
    error: Option<String>,
    trigger: String,
    passes: i32,
    claimed_by: Option<String>,
}

/// Real Postgres and JetStream, the scripted vendor's tables and one GitLab connection
/// monitoring [`GENERAL`], whose upstream is `source`.
struct World {
    env: TestEnv,
    mirror: Mirror,
    tenant: Tenant,
    source: Arc<ScriptedSource>,
}

impl std::ops::Deref for World {
    type Target = Mirror;

    fn deref(&self) -> &Mirror {
        &self.mirror
    }
}

impl World {
    /// The connection in `status`, its upstream holding `items` notes.
    async fn new(status: &str, items: usize) -> Result<World> {
        let env = TestEnv::new().await?;
        let mirror = Mirror::new(&env.db.db, ConnectionKind::Gitlab).await?;
        let tenant = mirror.tenant(ConnectionKind::Gitlab, status).await?;
        mirror.monitor(tenant, GENERAL).await?;
        Ok(World {
            env,
            mirror,
            tenant,
            source: ScriptedSource::new(items),
        })
    }

    fn config(&self, replica: &'static str, lease: Duration) -> ScriptedSync {
        ScriptedSync {
            common: self.env.common_args(),
            replica,
            lease,
            source: self.source.clone(),
            reconcile_cron: "off",
        }
    }

    /// A replica of the service, claiming as `replica` with leases of [`LEASE`].
    async fn start(&self, replica: &'static str) -> Result<testkit::Running> {
        testkit::spawn(self.config(replica, LEASE)).await
    }

    async fn connection(&self) -> Result<connection::Model> {
        connection::Entity::find_by_id(self.tenant.connection_id)
            .one(&self.db)
            .await?
            .context("the connection")
    }

    /// Queues a job as an operator's request does: its row and its message commit together.
    async fn queue(&self, job_type: JobType) -> Result<Uuid> {
        let conn = self.connection().await?;
        let txn = self.db.begin().await?;
        let job = store::jobs::queue(&txn, &conn, job_type, JobTrigger::Manual, None)
            .await?
            .context("queued")?;
        txn.commit().await?;
        Ok(job.id)
    }

    /// Waits until job `id` has ended.
    async fn ended(&self, id: Uuid) -> Result<Job> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let job: Job = sqlx::query_as(
                "SELECT status, error, trigger, passes, claimed_by FROM sync_job WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
            if matches!(job.status.as_str(), "succeeded" | "failed" | "canceled") {
                return Ok(job);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} did not end: {job:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until a job of `job_type` exists; returns its id.
    async fn job_of(&self, job_type: JobType) -> Result<Uuid> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let id: Option<Uuid> =
                sqlx::query_scalar("SELECT id FROM sync_job WHERE job_type = $1 LIMIT 1")
                    .bind(job_type.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
            if let Some(id) = id {
                return Ok(id);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {} job was queued",
                job_type.as_str()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Queues and runs an INITIAL: the mirror then holds what upstream holds.
    async fn initial(&self) -> Result<()> {
        let job = self.ended(self.queue(JobType::Initial).await?).await?;
        assert_eq!(job.status, "succeeded", "{job:?}");
        Ok(())
    }
}

/// A hook that cancels the running job as an operator does.
fn cancel_running(pool: sqlx::PgPool) -> scripted::Hook {
    Box::new(move || {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE status = 'running'")
                .execute(&pool)
                .await
                .expect("canceling the job");
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_runs_one_initial_job_through_the_service() -> Result<()> {
    let w = World::new("pending", 35).await?;
    let replica = w.start("replica-a").await?;
    // Activated as control-api activates: the transition and its message in one transaction.
    let txn = w.db.begin().await?;
    let row = connection::Entity::find_by_id(w.tenant.connection_id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .context("the connection")?;
    store::lifecycle::apply(&txn, row, Transition::Activate, "test", "activate")
        .await?
        .expect("a pending connection activates");
    txn.commit().await?;

    let job = w.ended(w.job_of(JobType::Initial).await?).await?;
    assert_eq!(
        (job.status.as_str(), job.trigger.as_str()),
        ("succeeded", "lifecycle")
    );
    assert_eq!(w.live().await?, 35);
    assert_eq!(w.source.calls(), 4, "four pages of ten");

    // The activation delivered again (a redelivery, another copy): no second INITIAL.
    let filter = subject::lifecycle_filter(Gitlab::KIND.as_str(), "activated");
    let stored = testkit::read_stream(
        &w.env.bus,
        Stream::Lifecycle,
        &filter,
        1,
        Duration::from_secs(10),
    )
    .await?;
    let activation: LifecycleTransition = serde_json::from_slice(&stored[0].payload)?;
    store::outbox::enqueue_contract(&w.db, &activation).await?;
    scripted::settle(
        &w.env.bus,
        &w.pool,
        Stream::Lifecycle,
        &format!("{NAME}-lifecycle"),
    )
    .await?;
    assert_eq!(
        w.count("SELECT count(*) FROM sync_job WHERE job_type = 'INITIAL'")
            .await?,
        1,
        "one INITIAL per activation"
    );
    replica.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_reconciliation_tombstones_only_after_a_complete_listing() -> Result<()> {
    let w = World::new("active", 30).await?;
    let replica = w.start("replica-a").await?;
    w.initial().await?;
    // note-0009 vanishes upstream, and the vendor fails at the reconcile's second page.
    w.source.with(|s| {
        s.items.retain(|i| i.id != note_id(9));
        s.faults = vec![(s.calls + 1, Fault::Unavailable)];
    });
    let failed = w.ended(w.queue(JobType::Reconciliation).await?).await?;
    assert_eq!(failed.status, "failed", "{failed:?}");
    assert!(
        failed
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("server_error: failing:")),
        "{failed:?}"
    );
    assert!(
        w.tombstoned().await?.is_empty(),
        "a failed listing deletes nothing"
    );
    assert_eq!(w.activities("not_reconciled").await?.len(), 1);

    let clean = w.ended(w.queue(JobType::Reconciliation).await?).await?;
    assert_eq!(clean.status, "succeeded", "{clean:?}");
    assert_eq!(w.tombstoned().await?, [note_id(9)]);
    let recorded = w.activities("tombstoned").await?;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["count"], 1);
    replica.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_backfill_passes_again_until_a_pass_is_complete() -> Result<()> {
    let w = World::new("active", 30).await?;
    // The first pass's second page disagrees on the total; the second pass is clean.
    w.source.with(|s| s.faults = vec![(1, Fault::WrongTotal)]);
    let replica = w.start("replica-a").await?;
    let job = w.ended(w.queue(JobType::Backfill).await?).await?;
    assert_eq!(
        (job.status.as_str(), job.passes),
        ("succeeded", 2),
        "{job:?}"
    );
    assert_eq!(w.activities("backfill_pass_incomplete").await?.len(), 1);
    assert_eq!(w.live().await?, 30);
    assert!(w.tombstoned().await?.is_empty(), "a backfill never sweeps");
    replica.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_job_stops_at_its_next_page() -> Result<()> {
    let w = World::new("active", 50).await?;
    // An operator cancels while the second page is read.
    w.source.during_next_call(cancel_running(w.pool.clone()));
    let replica = w.start("replica-a").await?;
    let job = w.ended(w.queue(JobType::Backfill).await?).await?;
    assert_eq!(job.status, "canceled", "{job:?}");
    assert_eq!(w.source.calls(), 2, "no page is read after the cancel");
    assert_eq!(w.live().await?, 20, "the page in hand was written");
    assert!(
        w.activities("backfill_pass_incomplete").await?.is_empty(),
        "a canceled backfill does not pass again"
    );
    replica.stop().await?;
    Ok(())
}

/// Replica A stalls in the job's second page and is stopped; its grace runs out, so the job is
/// abandoned with A's lease still live and its message comes back (nak'ed as it drops, or after
/// the ack wait). Replica B may take the message while that lease holds and must not drop it:
/// once the lease lapses, B claims the job and runs it to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_abandoned_by_a_stopped_replica_is_taken_over_after_its_lease() -> Result<()> {
    let w = World::new("active", 30).await?;
    w.source.during_next_call(Box::new(|| {
        Box::pin(tokio::time::sleep(Duration::from_secs(600)))
    }));
    let mut a = w.config("replica-a", LEASE);
    a.common.shutdown_grace_secs = 1;
    let a = testkit::spawn(a).await?;
    let id = w.queue(JobType::Backfill).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while w.source.calls() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never reached its second page"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        a.stop().await.is_err(),
        "A abandons the stalled job at its grace"
    );
    let held: (String, Option<String>) =
        sqlx::query_as("SELECT status, claimed_by FROM sync_job WHERE id = $1")
            .bind(id)
            .fetch_one(&w.pool)
            .await?;
    assert_eq!(held, ("running".into(), Some("replica-a".into())));

    let b = w.start("replica-b").await?;
    let job = w.ended(id).await?;
    assert_eq!(job.status, "succeeded", "{job:?}");
    assert_eq!(job.claimed_by.as_deref(), Some("replica-b"));
    assert_eq!(w.live().await?, 30, "B ran the job to its end");
    b.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_queues_a_reconciliation_that_skips_a_scope_within_its_cooldown() -> Result<()> {
    let w = World::new("active", 20).await?;
    scripted::mark_reconciled(&w.pool, w.provider_instance_id, GENERAL.2).await?;
    // A replica runs the latest due instant of its schedule when it starts.
    let mut config = w.config("replica-a", LEASE);
    config.reconcile_cron = "0 0 3 * * *";
    let replica = testkit::spawn(config).await?;
    let job = w.ended(w.job_of(JobType::Reconciliation).await?).await?;
    assert_eq!(
        (job.status.as_str(), job.trigger.as_str()),
        ("succeeded", "scheduled")
    );
    assert_eq!(w.source.calls(), 0, "the scheduled pass read nothing");
    replica.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_of_a_job_type_the_vendor_refuses_is_a_configuration_error() -> Result<()> {
    let env = TestEnv::new().await?;
    let db = env.db.db.clone();
    let pool = db.get_postgres_connection_pool().clone();
    let shutdown = CancellationToken::new();
    let mut service = runtime::Service::new(NAME, &env.common_args(), &shutdown);
    let mut schedules = runtime::ScheduleRunner::new(db.clone(), "replica-a");
    let vendor = Scripted::<Outline>::new(pool.clone(), ScriptedSource::new(0));
    let refused = SyncJobs {
        service: NAME,
        engine: Engine::new(
            Arc::new(vendor),
            pool,
            "replica-a",
            Duration::from_secs(30),
            scripted::settings(),
        ),
        concurrency: 1,
        schedules: &[JobSchedule {
            job_type: JobType::Backfill,
            cron: "0 0 3 * * *",
            variable: "SCRIPTED_BACKFILL_CRON",
        }],
    }
    .register(&mut service, &mut schedules, &env.bus, &db)
    .expect_err("Outline refuses BACKFILL");
    let reason = refused.to_string();
    assert!(
        reason.starts_with("SCRIPTED_BACKFILL_CRON: Outline connections do not backfill"),
        "{reason}"
    );
    shutdown.cancel();
    Ok(())
}

/// A note delivered by webhook while a reconcile lists its project: the listing was read before
/// upstream had it, and the candidates were captured before the listing began, so the sweep
/// leaves it alone while it tombstones what really vanished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_delivered_live_during_a_reconciliation_survives_its_sweep() -> Result<()> {
    let w = World::new("active", 30).await?;
    let endpoint = w.endpoint(w.tenant).await?;
    let replica = w.start("replica-a").await?;
    w.initial().await?;
    w.source.with(|s| s.items.retain(|i| i.id != note_id(5)));
    let mirror = w.mirror.clone();
    w.source.during_next_call(Box::new(move || {
        let mirror = mirror.clone();
        Box::pin(async move {
            let body = item_event(GENERAL.2, 99, "live", 1);
            mirror
                .deliver(endpoint, GENERAL, "item", body, Stored::default())
                .await
                .expect("stored");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while !mirror
                .items(GENERAL.2)
                .await
                .expect("items")
                .contains(&row(99, "live", 1))
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the delivery was not applied"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }));
    let job = w.ended(w.queue(JobType::Reconciliation).await?).await?;
    assert_eq!(job.status, "succeeded", "{job:?}");
    assert_eq!(w.tombstoned().await?, [note_id(5)]);
    assert!(w.items(GENERAL.2).await?.contains(&row(99, "live", 1)));
    replica.stop().await?;
    Ok(())
}
