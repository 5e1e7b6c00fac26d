//! Postgres-claimed schedules: each (schedule, due instant) runs exactly once across replicas,
//! and a dead replica's run is taken over after its lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime::ScheduleRunner;
use sea_orm::{ConnectionTrait as _, DatabaseConnection, DbBackend, Statement};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use testkit::TestDb;

/// Every 1 January at midnight UTC: the latest due instant stays the same for the whole test.
const YEARLY: &str = "0 0 0 1 1 *";

#[derive(Debug)]
struct Row {
    due_at: OffsetDateTime,
    claimed_by: String,
    attempts: i32,
    started_at: OffsetDateTime,
    lease_until: OffsetDateTime,
    finished_at: Option<OffsetDateTime>,
    error: Option<String>,
}

async fn rows(db: &DatabaseConnection, schedule: &str) -> Vec<Row> {
    db.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT due_at, claimed_by, attempts, started_at, lease_until, finished_at, error \
         FROM schedule_run WHERE schedule = $1 ORDER BY due_at",
        [schedule.into()],
    ))
    .await
    .unwrap()
    .into_iter()
    .map(|r| Row {
        due_at: r.try_get("", "due_at").unwrap(),
        claimed_by: r.try_get("", "claimed_by").unwrap(),
        attempts: r.try_get("", "attempts").unwrap(),
        started_at: r.try_get("", "started_at").unwrap(),
        lease_until: r.try_get("", "lease_until").unwrap(),
        finished_at: r.try_get("", "finished_at").unwrap(),
        error: r.try_get("", "error").unwrap(),
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_due_instant_runs_once_across_three_replicas() {
    let test = TestDb::new().await.unwrap();
    let runs: Arc<Mutex<HashMap<OffsetDateTime, u32>>> = Arc::default();
    let shutdown = CancellationToken::new();
    let mut replicas = Vec::new();
    for replica in ["a", "b", "c"] {
        let mut runner = ScheduleRunner::new(test.db.clone(), replica);
        let runs = runs.clone();
        runner
            .add("tick", "* * * * * *", Duration::from_secs(5), move |run| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap().entry(run.due_at).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(())
                }
            })
            .unwrap();
        replicas.push(tokio::spawn(runner.run(shutdown.clone())));
    }
    tokio::time::sleep(Duration::from_millis(4200)).await;
    shutdown.cancel();
    for replica in replicas {
        replica.await.unwrap().unwrap();
    }

    let rows = rows(&test.db, "tick").await;
    let runs = runs.lock().unwrap().clone();
    assert!(rows.len() >= 3, "expected a run per second, got {rows:?}");
    for row in &rows {
        assert!(row.finished_at.is_some(), "unfinished: {row:?}");
        assert_eq!(row.attempts, 1, "{row:?}");
        assert_eq!(runs.get(&row.due_at), Some(&1), "handler runs for {row:?}");
    }
    assert_eq!(
        runs.len(),
        rows.len(),
        "handler ran for instants without a row: {runs:?}"
    );
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_run_is_taken_over_after_its_lease() {
    let test = TestDb::new().await.unwrap();
    let lease = Duration::from_secs(3);

    // Replica "a" claims the run and hangs in its handler.
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let started_tx = Mutex::new(Some(started_tx));
    let mut a = ScheduleRunner::new(test.db.clone(), "a");
    a.add("yearly", YEARLY, lease, move |_run| {
        if let Some(tx) = started_tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
        std::future::pending()
    })
    .unwrap();
    let a_task = tokio::spawn(a.run(CancellationToken::new()));
    tokio::time::timeout(Duration::from_secs(10), started_rx)
        .await
        .expect("replica a claims the run")
        .unwrap();

    // Replica "b" starts while a is alive: a's heartbeat keeps the run a's past its lease.
    let b_attempts = Arc::new(Mutex::new(Vec::new()));
    let b_finished = Arc::new(tokio::sync::Notify::new());
    let mut b = ScheduleRunner::new(test.db.clone(), "b");
    {
        let b_attempts = b_attempts.clone();
        let b_finished = b_finished.clone();
        b.add("yearly", YEARLY, lease, move |run| {
            b_attempts.lock().unwrap().push(run.attempt);
            let b_finished = b_finished.clone();
            async move {
                b_finished.notify_one();
                Ok(())
            }
        })
        .unwrap();
    }
    let b_shutdown = CancellationToken::new();
    let b_task = tokio::spawn(b.run(b_shutdown.clone()));
    tokio::time::sleep(lease + Duration::from_secs(1)).await;
    assert!(
        b_attempts.lock().unwrap().is_empty(),
        "b took over a run whose owner was alive and heartbeating"
    );

    // Replica a dies without finishing or releasing.
    a_task.abort();
    let _ = a_task.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dead = rows(&test.db, "yearly").await.pop().unwrap();
    assert_eq!((dead.claimed_by.as_str(), dead.attempts), ("a", 1));
    assert!(dead.finished_at.is_none());

    tokio::time::timeout(Duration::from_secs(10), b_finished.notified())
        .await
        .expect("replica b takes the run over after the lease");
    b_shutdown.cancel();
    b_task.await.unwrap().unwrap();

    let rows = rows(&test.db, "yearly").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.claimed_by, "b");
    assert_eq!(row.attempts, 2);
    assert!(row.finished_at.is_some(), "{row:?}");
    assert!(
        row.started_at >= dead.lease_until,
        "taken over at {} before the lease ended at {}",
        row.started_at,
        dead.lease_until
    );
    assert_eq!(*b_attempts.lock().unwrap(), vec![2]);
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runs_are_retried_up_to_max_attempts() {
    let test = TestDb::new().await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let mut runner = ScheduleRunner::new(test.db.clone(), "a").with_max_attempts(2);
    {
        let calls = calls.clone();
        runner
            .add("flaky", YEARLY, Duration::from_secs(5), move |_run| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { anyhow::bail!("vendor said no") }
            })
            .unwrap();
    }
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(runner.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(4)).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let rows = rows(&test.db, "flaky").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].attempts, 2);
    assert!(rows[0].finished_at.is_none());
    assert!(
        rows[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("vendor said no"),
        "{:?}",
        rows[0]
    );
    test.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_latest_due_instant_runs_after_downtime() {
    let test = TestDb::new().await.unwrap();
    // The last recorded run was an hour ago: 3599 instants were missed since.
    test.db
        .execute_raw(Statement::from_string(
            DbBackend::Postgres,
            "INSERT INTO schedule_run (schedule, due_at, claimed_by, lease_until, attempts, started_at, finished_at) \
             VALUES ('tick', date_trunc('second', now()) - interval '1 hour', 'old', now(), 1, now(), now())",
        ))
        .await
        .unwrap();
    let started = OffsetDateTime::now_utc();
    let mut runner = ScheduleRunner::new(test.db.clone(), "a");
    runner
        .add(
            "tick",
            "* * * * * *",
            Duration::from_secs(5),
            |_run| async { Ok(()) },
        )
        .unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(runner.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(2000)).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();

    let rows = rows(&test.db, "tick").await;
    let new: Vec<_> = rows.iter().filter(|r| r.claimed_by == "a").collect();
    assert!(!new.is_empty() && new.len() <= 4, "{new:?}");
    for row in new {
        assert!(
            row.due_at >= started - time::Duration::seconds(2),
            "a missed instant was replayed: {row:?}"
        );
    }
    test.drop().await;
}
