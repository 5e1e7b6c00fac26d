//! Supervision and shutdown of the real `github-sync` binary: a consumer whose JetStream
//! consumer is deleted from under it ends, and the process exits non-zero at once; SIGTERM with
//! a handler in flight ends within `FORGESYNC_SHUTDOWN_GRACE`, the work either finished (acked)
//! or abandoned unacked and redelivered, never lost.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use bus::Stream;
use bus::contracts::Contract as _;
use sqlx::PgPool;
use testkit::TestEnv;
use tokio::time::Instant;
use uuid::Uuid;

/// The activation consumer and its stream.
const LIFECYCLE: (&str, Stream) = ("github-sync-lifecycle", Stream::Lifecycle);

/// The real binary, killed and reaped on every exit path.
struct Sync {
    child: Child,
    log: PathBuf,
}

impl Drop for Sync {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sync {
    /// Starts github-sync with every schedule off and waits until its consumer `durable` on
    /// `stream` exists.
    async fn start(
        env: &TestEnv,
        grace_secs: u64,
        (durable, stream): (&str, Stream),
    ) -> Result<Sync> {
        let port = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?
            .local_addr()?
            .port();
        let log = std::env::temp_dir().join(format!("github-sync-{}.log", Uuid::now_v7()));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_github-sync"))
            .env_clear()
            .env("DATABASE_URL", &env.db.url)
            .env("NATS_URL", &env.nats_url)
            .env(
                "FORGESYNC_NATS_PREFIX",
                env.bus.namespace().prefix().unwrap_or_default(),
            )
            .env("FORGESYNC_LISTEN", format!("127.0.0.1:{port}"))
            .env("FORGESYNC_SECRET_KEY", testkit::secret_key())
            .env("FORGESYNC_SHUTDOWN_GRACE", grace_secs.to_string())
            .env("FORGESYNC_GITHUB_RECONCILE_CRON", "off")
            .env("FORGESYNC_GITHUB_REDELIVER_CRON", "off")
            .env("RUST_LOG", "warn,runtime=info,bus=info,github_sync=info")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("spawning the github-sync binary")?;
        let mut sync = Sync { child, log };
        let stream = env
            .bus
            .jetstream()
            .get_stream(env.bus.namespace().name(stream.name()))
            .await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let name = env.bus.namespace().name(durable);
        loop {
            if let Some(status) = sync.child.try_wait()? {
                bail!(
                    "github-sync exited during start ({status}); log: {}",
                    sync.log.display()
                );
            }
            if stream.consumer_info(&name).await.is_ok() {
                // Give the pull request time to reach the server.
                tokio::time::sleep(Duration::from_millis(300)).await;
                return Ok(sync);
            }
            ensure!(
                Instant::now() < deadline,
                "consumer {name} not created; log: {}",
                sync.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to `limit` for the process to exit.
    async fn exit_within(&mut self, limit: Duration) -> Result<(ExitStatus, Duration)> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok((status, started.elapsed()));
            }
            ensure!(
                started.elapsed() < limit,
                "github-sync still runs {limit:?} later; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn sigterm(&self) -> Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill -TERM failed");
        Ok(())
    }
}

#[tokio::test]
async fn a_consumer_deleted_from_under_it_ends_the_process_non_zero_within_a_second() -> Result<()>
{
    let env = TestEnv::new().await?;
    for (durable, stream) in [LIFECYCLE, ("github-sync-jobs", Stream::Jobs)] {
        let js_stream = env
            .bus
            .jetstream()
            .get_stream(env.bus.namespace().name(stream.name()))
            .await?;
        let name = env.bus.namespace().name(durable);
        // A previous run's durable would count as created before this run attached to it.
        let _ = js_stream.delete_consumer(&name).await;
        let mut sync = Sync::start(&env, 25, (durable, stream)).await?;
        js_stream.delete_consumer(&name).await?;
        // Supervision: the consumer's task ends, so the service fails at once (not after the
        // 25 s grace: the other tasks stop promptly).
        let (status, took) = sync.exit_within(Duration::from_secs(1)).await?;
        assert!(
            !status.success(),
            "{durable}: a service whose consumer ended exits non-zero, got {status}"
        );
        assert!(took < Duration::from_secs(1), "{durable}: took {took:?}");
        let log = std::fs::read_to_string(&sync.log)?;
        assert!(
            log.contains(&format!("consumer {durable}")),
            "{durable}: the log names the task that ended:\n{log}"
        );
    }
    env.db.drop().await;
    Ok(())
}

/// A GitHub connection, active; returns (workspace, connection).
async fn connection(pool: &PgPool) -> Result<(Uuid, Uuid)> {
    let (instance, ws, conn) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'github')")
        .bind(instance)
        .execute(pool)
        .await?;
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
        .bind(ws)
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
         VALUES ($1, $2, 'github', 'active', $3)",
    )
    .bind(conn)
    .bind(ws)
    .bind(instance)
    .execute(pool)
    .await?;
    Ok((ws, conn))
}

async fn jobs_of(pool: &PgPool, conn: Uuid) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM sync_job WHERE connection_id = $1")
            .bind(conn)
            .fetch_one(pool)
            .await?,
    )
}

/// Holds `sync_job` locked so the activation handler blocks in flight on its insert; returns
/// once a session of the service waits on the lock.
async fn hold_jobs_table(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut lock = pool.begin().await?;
    sqlx::query("LOCK TABLE sync_job IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await?;
    Ok(lock)
}

async fn handler_blocked(pool: &PgPool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'
               AND pid <> pg_backend_pid()",
        )
        .fetch_one(pool)
        .await?;
        if waiting > 0 {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the activation never reached sync_job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn activate(env: &TestEnv, ws: Uuid, conn: Uuid, generation: i64) -> Result<()> {
    let provider_instance_id: Uuid =
        sqlx::query_scalar("SELECT provider_instance_id FROM connection WHERE id = $1")
            .bind(conn)
            .fetch_one(env.db.db.get_postgres_connection_pool())
            .await?;
    let transition = bus::contracts::LifecycleTransition {
        connection_id: conn,
        workspace_id: ws,
        kind: "github".into(),
        transition: "activated".into(),
        before_status: "pending".into(),
        status: "active".into(),
        version: generation,
        lifecycle_generation: generation,
        provider_instance_id,
        actor: "test".into(),
        at: "2026-12-01T00:00:00Z".into(),
    };
    env.bus
        .publish(
            &transition.subject(),
            &format!("activated:{conn}:{generation}"),
            async_nats::HeaderMap::new(),
            serde_json::to_vec(&transition)?.into(),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn sigterm_with_work_in_flight_ends_within_the_grace_finishing_or_leaving_it_unacked()
-> Result<()> {
    let env = TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();
    let (ws, conn) = connection(&pool).await?;
    let durable = env.bus.namespace().name("github-sync-lifecycle");
    let lifecycle = env
        .bus
        .jetstream()
        .get_stream(env.bus.namespace().name(Stream::Lifecycle.name()))
        .await?;

    // Finished: the work is released within the grace, commits and is acked; exit 0.
    let mut sync = Sync::start(&env, 5, LIFECYCLE).await?;
    let lock = hold_jobs_table(&pool).await?;
    activate(&env, ws, conn, 1).await?;
    handler_blocked(&pool).await?;
    sync.sigterm()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.rollback().await?;
    let (status, took) = sync.exit_within(Duration::from_secs(5)).await?;
    assert!(status.success(), "a clean stop exits 0, got {status}");
    assert!(took < Duration::from_secs(5), "within the grace: {took:?}");
    assert_eq!(
        jobs_of(&pool, conn).await?,
        1,
        "the in-flight work finished"
    );
    let info = lifecycle.consumer_info(&durable).await?;
    assert_eq!(
        (info.num_ack_pending, info.num_pending),
        (0, 0),
        "and was acked"
    );
    drop(sync);

    // Abandoned: the work is still stuck when the grace runs out; the process exits non-zero
    // within the grace, the message unacked, and a new replica does the work.
    let mut sync = Sync::start(&env, 1, LIFECYCLE).await?;
    let lock = hold_jobs_table(&pool).await?;
    activate(&env, ws, conn, 2).await?;
    handler_blocked(&pool).await?;
    sync.sigterm()?;
    let (status, took) = sync.exit_within(Duration::from_secs(3)).await?;
    assert!(
        !status.success(),
        "work abandoned at the grace fails the stop, got {status}"
    );
    assert!(
        took < Duration::from_millis(1800),
        "FORGESYNC_SHUTDOWN_GRACE=1 bounds the stop: {took:?}"
    );
    let log = std::fs::read_to_string(&sync.log)?;
    assert!(log.contains("shutdown grace"), "{log}");
    lock.rollback().await?;
    drop(sync);
    assert_eq!(jobs_of(&pool, conn).await?, 1, "nothing of it committed");
    let info = lifecycle.consumer_info(&durable).await?;
    // Aborted at the grace, the delivery is nak'ed as it drops, or left unacked when the process
    // ends first: either way it is not acked and comes back.
    assert_eq!(
        (
            info.delivered.consumer_sequence,
            info.ack_floor.consumer_sequence
        ),
        (2, 1),
        "the first activation acked, the second never: it is redelivered"
    );
    // Redelivered (after the nak's backoff, or the consumer's ack wait of 30 s) to the next
    // replica, which does it.
    let _next = Sync::start(&env, 5, LIFECYCLE).await?;
    let deadline = Instant::now() + Duration::from_secs(45);
    while jobs_of(&pool, conn).await? < 2 {
        ensure!(
            Instant::now() < deadline,
            "the abandoned activation was lost"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.db.drop().await;
    Ok(())
}
