//! The engine driven by a vendor that exists only here (`scripted`): one scope, one item class,
//! string ids. Each test proves one processing rule; none needed an engine change for this vendor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use store::entity::{ConnectionKind, JobType};
use sync_engine::consumers::queue_scheduled;
use sync_engine::{JobOutcome, Jobs};

use crate::scripted::{self, Fault, Fixture, Gitlab, Hook, Outline, ScriptedSource, item};

async fn fixture() -> Result<Fixture> {
    Fixture::new(ConnectionKind::Gitlab).await
}

#[tokio::test]
async fn initial_writes_every_item_and_never_tombstones() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(35);
    assert_eq!(
        f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(f.live().await?, 35);
    assert_eq!(source.calls(), 4, "four pages of ten");
    let (done, status): (i64, String) =
        sqlx::query_as("SELECT progress_done, status FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((done, status.as_str()), (35, "succeeded"));

    // Absence upstream is no deletion for INITIAL.
    source.with(|s| s.items.truncate(20));
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    assert!(f.tombstoned().await?.is_empty());
    assert!(f.activities("not_reconciled").await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_complete_reconciliation_tombstones_exactly_what_vanished() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(30);
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    source.with(|s| {
        s.items
            .retain(|i| i.id != "note-0004" && i.id != "note-0017")
    });
    assert_eq!(
        f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(f.tombstoned().await?, ["note-0004", "note-0017"]);
    let recorded = f.activities("tombstoned").await?;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["count"], 2);
    assert_eq!(recorded[0]["class"], "note");
    assert_eq!(recorded[0]["scope"], scripted::SCOPE);

    // A reappearance is written back.
    source.with(|s| s.items.push(item(4)));
    f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    assert_eq!(f.tombstoned().await?, ["note-0017"]);
    Ok(())
}

#[tokio::test]
async fn an_incomplete_reconciliation_tombstones_nothing_and_says_so() -> Result<()> {
    for fault in [
        Fault::Unavailable,
        Fault::Gone,
        Fault::Errored,
        Fault::LyingNoNextPage,
        Fault::WrongTotal,
    ] {
        let f = fixture().await?;
        let source = ScriptedSource::new(30);
        f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
        source.with(|s| {
            s.items.retain(|i| i.id != "note-0009");
            s.faults = vec![(s.calls + 1, fault.clone())];
        });
        f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
        assert!(
            f.tombstoned().await?.is_empty(),
            "{fault:?} must tombstone nothing"
        );
        let skipped = f.activities("not_reconciled").await?;
        assert_eq!(skipped.len(), 1, "{fault:?}: the skipped sweep is recorded");
        assert_eq!(skipped[0]["scope"], scripted::SCOPE);
        let stamped = f
            .count("SELECT count(*) FROM scripted_scope WHERE reconciled_at IS NOT NULL")
            .await?;
        assert_eq!(
            stamped, 0,
            "{fault:?}: an incomplete reconcile is not stamped"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_vendor_failure_fails_a_reconciliation_and_a_spent_quota_ends_it() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(30);
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    source.with(|s| s.faults = vec![(s.calls + 1, Fault::Unavailable)]);
    let outcome = f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.starts_with("server_error: failing:")),
        "{outcome:?}"
    );
    source.with(|s| s.faults = vec![(s.calls + 1, Fault::Quota)]);
    let outcome = f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.starts_with("budget_exhausted: quota:")),
        "{outcome:?}"
    );
    // A scope-level failure ends only its listing: the job itself succeeds.
    source.with(|s| s.faults = vec![(s.calls + 1, Fault::Gone)]);
    assert_eq!(
        f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    assert!(f.tombstoned().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn the_blast_radius_holds_an_implausible_sweep_for_an_operator() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(150);
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    // A complete listing that lost 120 of 150 rows (a lost permission lists complete but empty).
    source.with(|s| s.items.truncate(30));
    assert_eq!(
        f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    assert!(
        f.tombstoned().await?.is_empty(),
        "the plan is held, not run"
    );
    let held = f.activities("sweep_held").await?;
    assert_eq!(held.len(), 1);
    assert_eq!(
        (
            held[0]["would_tombstone"].as_u64(),
            held[0]["class_size"].as_u64()
        ),
        (Some(120), Some(150))
    );
    Ok(())
}

#[tokio::test]
async fn a_manual_backfill_passes_again_with_backoff_until_complete() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(30);
    // The first pass's second page disagrees on the total, the second pass fails at its first
    // page; the third pass is clean.
    source.with(|s| s.faults = vec![(1, Fault::WrongTotal), (2, Fault::Unavailable)]);
    let started = Instant::now();
    assert_eq!(
        f.run::<Gitlab>("BACKFILL", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    let waited = started.elapsed();
    let settings = scripted::settings().backfill;
    assert!(
        waited >= settings.first_backoff * 3,
        "two waits, the second longer: {waited:?}"
    );
    let (passes,): (i32,) = sqlx::query_as("SELECT passes FROM sync_job")
        .fetch_one(&f.pool)
        .await?;
    assert_eq!(passes, 3);
    let incomplete = f.activities("backfill_pass_incomplete").await?;
    assert_eq!(incomplete.len(), 2);
    assert!(
        incomplete[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("server_error: failing:"),
        "{incomplete:?}"
    );
    assert_eq!(f.live().await?, 30);
    assert!(f.tombstoned().await?.is_empty(), "a backfill never sweeps");

    // Out of passes, it fails with the last pass's reason.
    let f = fixture().await?;
    let source = ScriptedSource::new(30);
    source.with(|s| s.faults = (0..100).map(|c| (c, Fault::LyingNoNextPage)).collect());
    let outcome = f.run::<Gitlab>("BACKFILL", "manual", &source).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.contains("after 3 passes")),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_cancel_stops_the_job_at_the_next_page() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(50);
    let id = f.queue("BACKFILL", "manual").await?;
    // An operator cancels while the second page is read.
    let pool = f.pool.clone();
    let cancel: Hook = Box::new(move || {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE id = $1")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
        })
    });
    source.with(|s| s.during = vec![(1, Arc::new(cancel))]);
    let engine = f.engine::<Gitlab>(&source, "replica-a", Duration::from_secs(30));
    let job = engine.jobs.claim(id).await?.job().expect("claimable");
    let outcome = engine
        .run(&job, f.provider_instance_id, source.clone())
        .await?;
    assert_eq!(outcome, JobOutcome::Canceled);
    assert_eq!(source.calls(), 2, "no page is read after the cancel");
    assert_eq!(f.live().await?, 20, "the page in hand was written");
    let (status, finished): (String, bool) =
        sqlx::query_as("SELECT status, finished_at IS NOT NULL FROM sync_job")
            .fetch_one(&f.pool)
            .await?;
    assert_eq!((status.as_str(), finished), ("canceled", true));
    assert!(
        f.activities("backfill_pass_incomplete").await?.is_empty(),
        "a canceled backfill does not pass again"
    );
    Ok(())
}

#[tokio::test]
async fn a_lapsed_lease_is_taken_over_and_the_first_replica_writes_nothing_more() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(50);
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    source.with(|s| {
        s.items.truncate(40);
        s.calls = 0;
    });
    let id = f.queue("RECONCILIATION", "manual").await?;
    let a = f.engine::<Gitlab>(&source, "replica-a", Duration::from_millis(300));
    let b = Jobs::new(
        ConnectionKind::Gitlab,
        f.pool.clone(),
        "replica-b",
        Duration::from_secs(30),
    );
    let job = a.jobs.claim(id).await?.job().expect("a claims");
    assert!(
        b.claim(id).await?.job().is_none(),
        "a live claim is not taken"
    );
    // Replica a stalls in its second page past its lease; b takes the job over meanwhile.
    let taken = {
        let b = b.clone();
        let hook: Hook = Box::new(move || {
            let b = b.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                assert!(b.claim(id).await.unwrap().job().is_some(), "b takes over");
            })
        });
        Arc::new(hook)
    };
    source.with(|s| s.during = vec![(1, taken)]);
    let outcome = a.run(&job, f.provider_instance_id, source.clone()).await?;
    assert_eq!(
        outcome,
        JobOutcome::Failed("lost the job's lease".into()),
        "a learns at its next heartbeat"
    );
    assert_eq!(source.calls(), 2, "a reads no page after losing the lease");
    assert!(
        f.tombstoned().await?.is_empty(),
        "a decides no sweep for a job it no longer holds"
    );
    assert!(f.activities("not_reconciled").await?.is_empty());
    let (status, claimed_by): (String, String) =
        sqlx::query_as("SELECT status, claimed_by FROM sync_job WHERE id = $1")
            .bind(id)
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(
        (status.as_str(), claimed_by.as_str()),
        ("running", "replica-b"),
        "a's finish does not overwrite b's claim"
    );
    Ok(())
}

/// Jobs take turns: a connection runs one job at a time, a workspace at most its limit; a job
/// that must wait is deferred (its message settled), and its turn comes when a job of its
/// workspace ends or, behind a replica that died, when the sweep finds the lease lapsed. Another
/// workspace's job never waits for this one's.
#[tokio::test]
async fn jobs_take_turns_per_connection_and_workspace_and_the_deferred_are_woken() -> Result<()> {
    use sync_engine::jobs::{Claim, Wait};
    let f = fixture().await?;
    let pool = &f.pool;
    // A second connection of the same workspace, and another workspace's connection.
    let sibling = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
         VALUES ($1, $2, 'gitlab', 'active', $3)",
    )
    .bind(sibling)
    .bind(f.tenant.workspace_id)
    .bind(f.provider_instance_id)
    .execute(pool)
    .await?;
    let other = f.tenant(ConnectionKind::Gitlab, "active").await?;
    let queue = |connection: uuid::Uuid, workspace: uuid::Uuid, job_type: &'static str| async move {
        let id = uuid::Uuid::now_v7();
        sqlx::query(
            "INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger)
             VALUES ($1, $2, $3, 'gitlab', $4, 'manual')",
        )
        .bind(id)
        .bind(connection)
        .bind(workspace)
        .bind(job_type)
        .execute(pool)
        .await?;
        anyhow::Ok(id)
    };
    let woken_messages = |id: uuid::Uuid| async move {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM outbox WHERE subject LIKE '%jobs.gitlab.%'
                AND convert_from(payload, 'UTF8')::jsonb ->> 'job_id' = $1::text",
        )
        .bind(id)
        .fetch_one(pool)
        .await?;
        anyhow::Ok(n)
    };
    let a = Jobs::new(
        ConnectionKind::Gitlab,
        pool.clone(),
        "replica-a",
        Duration::from_millis(300),
    );
    let (ws, conn) = (f.tenant.workspace_id, f.tenant.connection_id);
    let first = queue(conn, ws, "RECONCILIATION").await?;
    let second = queue(conn, ws, "INITIAL").await?;
    let third = queue(sibling, ws, "RECONCILIATION").await?;
    let others = queue(other.connection_id, other.workspace_id, "RECONCILIATION").await?;
    let first_job = a.claim(first).await?.job().expect("first claims");
    assert!(matches!(
        a.claim(second).await?,
        Claim::Deferred(Wait::Connection)
    ));
    assert!(matches!(
        a.claim(third).await?,
        Claim::Deferred(Wait::Workspace)
    ));
    assert!(
        a.claim(others).await?.job().is_some(),
        "another workspace's job does not wait"
    );
    assert_eq!(
        a.wake_deferred(None).await?,
        0,
        "the first job's lease is live"
    );
    // The replica running the first job dies: the sweep finds its lease lapsed.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Replica b lives on, with a lease no test step outlasts.
    let b = Jobs::new(
        ConnectionKind::Gitlab,
        pool.clone(),
        "replica-b",
        Duration::from_secs(30),
    );
    assert_eq!(b.wake_deferred(None).await?, 2, "one per idle connection");
    assert_eq!(
        (woken_messages(second).await?, woken_messages(third).await?),
        (1, 1)
    );
    let second_job = b.claim(second).await?.job().expect("the second's turn");
    assert!(
        matches!(b.claim(third).await?, Claim::Deferred(Wait::Workspace)),
        "the workspace runs one job at a time"
    );
    assert!(
        matches!(b.claim(first).await?, Claim::Deferred(Wait::Connection)),
        "a lapsed job taken over waits its turn too"
    );
    // The second ends: the same transaction wakes one job per connection of the workspace.
    b.finish(&second_job, &JobOutcome::Succeeded, 0).await?;
    assert_eq!(
        (woken_messages(first).await?, woken_messages(third).await?),
        (1, 2)
    );
    assert!(b.claim(third).await?.job().is_some());
    assert!(matches!(
        b.claim(first).await?,
        Claim::Deferred(Wait::Workspace)
    ));
    drop(first_job);
    // A job that is not waiting is never woken, and a canceled one neither.
    sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE id = $1")
        .bind(first)
        .execute(pool)
        .await?;
    sqlx::query("UPDATE sync_job SET lease_until = now() WHERE status = 'running'")
        .execute(pool)
        .await?;
    assert_eq!(a.wake_deferred(None).await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_replica_claims_only_its_vendors_jobs() -> Result<()> {
    let f = fixture().await?;
    let id = f.queue("RECONCILIATION", "manual").await?;
    let other = Jobs::new(
        ConnectionKind::Slack,
        f.pool.clone(),
        "replica-slack",
        Duration::from_secs(30),
    );
    assert!(other.claim(id).await?.job().is_none());
    let own = Jobs::new(
        ConnectionKind::Gitlab,
        f.pool.clone(),
        "replica-gitlab",
        Duration::from_secs(30),
    );
    assert!(own.claim(id).await?.job().is_some());
    Ok(())
}

#[tokio::test]
async fn a_job_type_the_vendor_refuses_fails_with_its_reason_and_reads_nothing() -> Result<()> {
    let f = Fixture::new(ConnectionKind::Outline).await?;
    let source = ScriptedSource::new(10);
    let outcome = f.run::<Outline>("BACKFILL", "manual", &source).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.starts_with("Outline connections do not backfill: ")),
        "{outcome:?}"
    );
    assert_eq!(source.calls(), 0);
    assert_eq!(f.live().await?, 0);
    // What it runs, it runs.
    assert_eq!(
        f.run::<Outline>("RECONCILIATION", "manual", &source)
            .await?,
        JobOutcome::Succeeded
    );
    assert_eq!(f.live().await?, 10);
    Ok(())
}

#[tokio::test]
async fn a_scheduled_reconciliation_skips_a_scope_within_its_cooldown() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(20);
    f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    let calls = source.calls();
    source.with(|s| s.items.truncate(15));
    f.run::<Gitlab>("RECONCILIATION", "scheduled", &source)
        .await?;
    assert_eq!(source.calls(), calls, "the scheduled pass read nothing");
    f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    assert_eq!(
        f.tombstoned().await?.len(),
        5,
        "an operator's reconcile runs"
    );
    Ok(())
}

#[tokio::test]
async fn refused_credentials_fail_the_job_flag_the_connection_and_stop_its_schedules() -> Result<()>
{
    let f = fixture().await?;
    let source = ScriptedSource::new(30);
    f.run::<Gitlab>("INITIAL", "lifecycle", &source).await?;
    source.with(|s| {
        s.items.retain(|i| i.id != "note-0004");
        // Every read from the next one on is refused, as a revoked token is.
        s.faults = (s.calls..s.calls + 100)
            .map(|c| (c, Fault::Refused))
            .collect();
    });
    // The vendor says the refusal stops only its listing; the engine ends the job anyway.
    let outcome = f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?;
    assert!(
        matches!(&outcome, JobOutcome::Failed(r) if r.starts_with("bad_credentials: ")),
        "{outcome:?}"
    );
    assert!(
        f.tombstoned().await?.is_empty(),
        "a refused read deletes nothing"
    );
    let (refused_at, refusal): (Option<time::OffsetDateTime>, Option<String>) = sqlx::query_as(
        "SELECT credentials_refused_at, credentials_refusal FROM connection WHERE id = $1",
    )
    .bind(f.tenant.connection_id)
    .fetch_one(&f.pool)
    .await?;
    assert!(refused_at.is_some());
    assert!(refusal.unwrap().starts_with("bad_credentials: "));
    let refused = f.activities("credentials_refused").await?;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["class"], "bad_credentials");

    // The schedules skip the flagged connection; a scheduled job queued before the refusal
    // reads nothing.
    let now = time::OffsetDateTime::now_utc();
    let queued =
        queue_scheduled(&f.db, ConnectionKind::Gitlab, JobType::Reconciliation, now).await?;
    assert_eq!(queued, 0, "a flagged connection gets no scheduled job");
    let calls = source.calls();
    let scheduled = f.queue("RECONCILIATION", "scheduled").await?;
    let engine = f.engine::<Gitlab>(&source, "replica-a", Duration::from_secs(30));
    let handler = sync_engine::consumers::JobHandler {
        db: f.db.clone(),
        engine,
    };
    handler.run_job(scheduled).await.expect("settled");
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, error FROM sync_job WHERE id = $1")
            .bind(scheduled)
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(status, "failed");
    assert!(error.unwrap().contains("needs new credentials"));
    assert_eq!(
        source.calls(),
        calls,
        "nothing was read with refused credentials"
    );

    // Replaced credentials clear the flag and the schedule takes the connection again.
    source.with(|s| s.faults.clear());
    store::credentials::replaced(&f.db, f.tenant.connection_id).await?;
    let queued =
        queue_scheduled(&f.db, ConnectionKind::Gitlab, JobType::Reconciliation, now).await?;
    assert_eq!(queued, 1);
    // That job waits; an operator's reconcile runs here in its place (one job per type waits).
    sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE status = 'queued'")
        .execute(&f.pool)
        .await?;
    assert_eq!(
        f.run::<Gitlab>("RECONCILIATION", "manual", &source).await?,
        JobOutcome::Succeeded
    );
    assert_eq!(f.tombstoned().await?, ["note-0004"]);
    Ok(())
}

#[tokio::test]
async fn a_refusal_of_replaced_credentials_does_not_flag_the_new_ones() -> Result<()> {
    let f = fixture().await?;
    let source = ScriptedSource::new(10);
    let id = f.queue("RECONCILIATION", "manual").await?;
    let engine = f.engine::<Gitlab>(&source, "replica-a", Duration::from_secs(30));
    let job = engine.jobs.claim(id).await?.job().expect("claimable");
    // The operator replaces the secrets after the job read the old ones.
    store::credentials::replaced(&f.db, f.tenant.connection_id).await?;
    source.with(|s| s.faults = vec![(s.calls, Fault::Refused)]);
    let outcome = engine
        .run(&job, f.provider_instance_id, source.clone())
        .await?;
    assert!(matches!(&outcome, JobOutcome::Failed(r) if r.starts_with("bad_credentials: ")));
    let (refused_at,): (Option<time::OffsetDateTime>,) =
        sqlx::query_as("SELECT credentials_refused_at FROM connection WHERE id = $1")
            .bind(f.tenant.connection_id)
            .fetch_one(&f.pool)
            .await?;
    assert_eq!(refused_at, None, "the new credentials are not flagged");
    Ok(())
}

/// A vendor's own work after the listings (GitLab's notes) heartbeats too: what it meets ends
/// the job as a page's heartbeat would, and the scope is not stamped reconciled.
#[tokio::test]
async fn a_cancel_or_a_lost_lease_met_after_the_listings_ends_the_job_there() -> Result<()> {
    for lose_lease in [false, true] {
        let f = fixture().await?;
        let source = ScriptedSource::new(5);
        let id = f.queue("RECONCILIATION", "manual").await?;
        let pool = f.pool.clone();
        let b = Jobs::new(
            ConnectionKind::Gitlab,
            f.pool.clone(),
            "replica-b",
            Duration::from_secs(30),
        );
        let hook: Hook = Box::new(move || {
            let (pool, b) = (pool.clone(), b.clone());
            Box::pin(async move {
                if lose_lease {
                    sqlx::query("UPDATE sync_job SET lease_until = now() - interval '1 second' WHERE id = $1")
                        .bind(id).execute(&pool).await.unwrap();
                    assert!(b.claim(id).await.unwrap().job().is_some(), "b takes over");
                } else {
                    sqlx::query("UPDATE sync_job SET status = 'canceled' WHERE id = $1")
                        .bind(id)
                        .execute(&pool)
                        .await
                        .unwrap();
                }
            })
        });
        source.with(|s| s.after_scope = Some(Arc::new(hook)));
        let engine = f.engine::<Gitlab>(&source, "replica-a", Duration::from_secs(30));
        let job = engine.jobs.claim(id).await?.job().expect("claimable");
        let outcome = engine
            .run(&job, f.provider_instance_id, source.clone())
            .await?;
        let (status, claimed_by): (String, String) =
            sqlx::query_as("SELECT status, claimed_by FROM sync_job WHERE id = $1")
                .bind(id)
                .fetch_one(&f.pool)
                .await?;
        if lose_lease {
            assert_eq!(outcome, JobOutcome::Failed("lost the job's lease".into()));
            assert_eq!(
                (status.as_str(), claimed_by.as_str()),
                ("running", "replica-b")
            );
        } else {
            assert_eq!(outcome, JobOutcome::Canceled);
            assert_eq!(status, "canceled");
        }
        assert_eq!(
            f.count("SELECT count(*) FROM scripted_scope WHERE reconciled_at IS NOT NULL")
                .await?,
            0,
            "a stopped scope is not stamped reconciled (lost lease: {lose_lease})"
        );
    }
    Ok(())
}
