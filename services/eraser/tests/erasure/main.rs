//! The eraser end to end: control-api, ingress and the eraser running against real Postgres and
//! NATS, two workspaces monitoring overlapping repositories.

mod crash;
mod support;

use anyhow::Result;
use reqwest::Method;
use serde_json::Value;
use support::{World, count};

/// Two workspaces: `shared` repositories both monitor, one of A's own and one of B's own, and
/// two that github-sync's INITIAL syncs mirrored: `synced_shared` (both name it) and `synced_a`
/// (A's alone).
struct Overlap {
    world: World,
    a: support::Tenant,
    b: support::Tenant,
    shared: [support::Repo; 2],
    a_only: support::Repo,
    b_only: support::Repo,
    synced_shared: support::Repo,
    synced_a: support::Repo,
}

/// Webhooks each tenant receives per monitored repository.
const WEBHOOKS: usize = 3;
/// Item events each tenant's monitor puts on the stream.
const EVENTS: usize = 3;

async fn overlap() -> Result<Overlap> {
    let world = World::start().await?;
    let a = world
        .tenant_reading("a", &["acme/repo-0", "acme/repo-1"])
        .await?;
    let b = world.tenant_reading("b", &["acme/repo-0"]).await?;
    world.sync().await?;
    let (synced_shared, synced_a) = (world.synced("repo-0").await?, world.synced("repo-1").await?);
    let shared = [
        world.repository(101, "shared-one", 10).await?,
        world.repository(102, "shared-two", 10).await?,
    ];
    let a_only = world.repository(201, "a-only", 10).await?;
    let b_only = world.repository(301, "b-only", 10).await?;
    for repo in [shared[0], shared[1], a_only] {
        world.monitor(&a, repo, WEBHOOKS).await?;
    }
    for repo in [shared[0], shared[1], b_only] {
        world.monitor(&b, repo, WEBHOOKS).await?;
    }
    world.ledgered((6 * (WEBHOOKS + EVENTS)) as i64).await?;
    Ok(Overlap {
        world,
        a,
        b,
        shared,
        a_only,
        b_only,
        synced_shared,
        synced_a,
    })
}

fn place(scan: &Value, name: &str) -> i64 {
    scan["places"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["place"] == name)
        .and_then(|p| p["count"].as_i64())
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disconnect_then_purge_leave_nothing_and_spare_what_others_monitor() -> Result<()> {
    // Every service's log from here on (ingress, control-api, the relays, the eraser), at debug.
    let logs = testkit::capture_logs("debug")?;
    let o = overlap().await?;
    let w = &o.world;
    let eraser = testkit::spawn(w.eraser_config()).await?;

    // Before: the scan finds A's content everywhere.
    let before = w.scan(o.a.workspace).await?;
    assert!(place(&before, "table:issue") > 0, "{before}");
    assert_eq!(
        place(&before, "stream:WEBHOOKS_GITHUB"),
        (3 * WEBHOOKS) as i64
    );
    assert_eq!(place(&before, "stream:EVENTS"), (3 * EVENTS) as i64);
    assert!(place(&before, "table:dead_message") > 0);
    let b_repos = [o.shared[0], o.shared[1], o.b_only, o.synced_shared];
    let b_before = w.snapshot(&o.b, &b_repos).await?;
    // What the syncs wrote is there to erase.
    for repo in [o.synced_shared, o.synced_a] {
        for table in ["issue", "pull_request"] {
            let n = count(
                &w.pool,
                &format!(
                    "SELECT count(*) FROM {table} WHERE repository_id = '{}'",
                    repo.id
                ),
            )
            .await?;
            assert!(n > 0, "the sync mirrored no {table} of {}", repo.name);
        }
    }
    // The snapshot holds each message's headers, so B's messages keep theirs too.
    let b_header = format!("{}=[\"{}\"]", store::headers::CONNECTION, o.b.connection);
    assert!(b_before.contains(&b_header), "{b_before}");
    let a_messages = w.ledgered_of(&o.a).await?;
    let b_messages = w.ledgered_of(&o.b).await?;
    assert_eq!(a_messages.len(), 3 * (WEBHOOKS + EVENTS), "{a_messages:?}");
    assert_eq!(b_messages.len(), 3 * (WEBHOOKS + EVENTS), "{b_messages:?}");

    // Disconnect A.
    let (status, body) = w
        .call(
            Method::POST,
            &format!(
                "/workspaces/{}/connections/{}/disconnect",
                o.a.workspace, o.a.connection
            ),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    let records = w.erased(o.a.workspace, 1).await?;
    assert_eq!(records[0]["trigger"], "disconnect", "{records}");
    assert_eq!(records[0]["counts"]["repositories_deleted"], 2, "{records}");
    assert_eq!(records[0]["counts"]["repositories_kept"], 3, "{records}");
    let after = w.scan(o.a.workspace).await?;
    assert_eq!(after["total"], 0, "{after}");
    // Shared repositories survive with B's copy byte for byte; A's own is gone.
    assert!(w.exists(o.shared[0]).await? && w.exists(o.shared[1]).await?);
    assert!(w.exists(o.synced_shared).await?);
    assert!(!w.exists(o.a_only).await?);
    assert!(!w.exists(o.synced_a).await?);
    assert!(w.exists(o.b_only).await?);
    assert_eq!(w.snapshot(&o.b, &b_repos).await?, b_before);
    // The server itself no longer holds A's stream copies; it still holds every one of B's.
    for (stream, sequence) in &a_messages {
        assert!(
            w.stored(stream, *sequence).await?.is_none(),
            "A's message {sequence} is still on {stream}"
        );
    }
    for (stream, sequence) in &b_messages {
        assert!(
            w.stored(stream, *sequence).await?.is_some(),
            "B's message {sequence} left {stream}"
        );
    }
    // The generic event ledger's rows of an erased repository went with it.
    for repo in [o.a_only, o.synced_a] {
        assert_eq!(
            count(
                &w.pool,
                &format!(
                    "SELECT count(*) FROM integration_event
                      WHERE subject_kind = 'repository' AND subject_id = '{}'",
                    repo.id
                )
            )
            .await?,
            0
        );
    }
    // Tombstoned rows went with the rest: nothing of A's repository is left at all.
    assert_eq!(
        count(
            &w.pool,
            &format!(
                "SELECT count(*) FROM issue WHERE repository_id = '{}'",
                o.a_only.id
            )
        )
        .await?,
        0
    );

    // A repeated trigger is a no-op.
    let again = w
        .eraser()
        .erase_connection(
            o.a.connection,
            lifecycle_core::erasure::ErasureTrigger::AdminDisconnect,
        )
        .await?;
    assert_eq!(again, eraser::Outcome::AlreadyDone);
    assert_eq!(w.erased(o.a.workspace, 1).await?, records);

    // Purge B: once answered, B's endpoint takes nothing more.
    let (status, body) = w
        .call(
            Method::POST,
            &format!("/workspaces/{}/purge", o.b.workspace),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    assert_eq!(w.webhook(&o.b, o.b_only).await?, 410);
    let records = w.erased(o.b.workspace, 2).await?;
    let (_, ws) = w
        .call(Method::GET, &format!("/workspaces/{}", o.b.workspace))
        .await?;
    assert_eq!(ws["status"], "purged", "{ws}");
    let after = w.scan(o.b.workspace).await?;
    assert_eq!(after["total"], 0, "{after}");
    assert_eq!(records.as_array().map(Vec::len), Some(2), "{records}");
    // Nobody monitors anything now: every repository is gone.
    for repo in [o.shared[0], o.shared[1], o.b_only, o.synced_shared] {
        assert!(!w.exists(repo).await?);
    }
    assert_eq!(w.webhook(&o.b, o.b_only).await?, 410);
    // Audit rows and jobs' history remain.
    for t in [&o.a, &o.b] {
        let audit = count(
            &w.pool,
            &format!(
                "SELECT count(*) FROM connection_audit WHERE connection_id = '{}'",
                t.connection
            ),
        )
        .await?;
        assert!(audit >= 3, "audit rows of {} remain: {audit}", t.connection);
    }
    // And B's stream copies are gone from the server too.
    for (stream, sequence) in &b_messages {
        assert!(
            w.stored(stream, *sequence).await?.is_none(),
            "B's message {sequence} is still on {stream}"
        );
    }
    eraser.stop().await?;

    // Logs carry ids and counts, never the content that passed through: the capture holds what
    // ingress accepted and what the eraser did, and no fixture title, body or payload.
    let text = logs.text();
    for expected in ["connection erased", "workspace purged"] {
        assert!(text.contains(expected), "the capture misses {expected:?}");
    }
    support::assert_no_content(&text, "the services' logs");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scan_finds_a_content_table_nobody_registered() -> Result<()> {
    let o = overlap().await?;
    let w = &o.world;
    // A new content table that no holder registers with the eraser.
    sqlx::query("CREATE TABLE scratch_note (id uuid PRIMARY KEY, connection_id uuid, body text)")
        .execute(&w.pool)
        .await?;
    sqlx::query("INSERT INTO scratch_note VALUES (gen_random_uuid(), $1, 'fixture-secret note')")
        .bind(o.a.connection)
        .execute(&w.pool)
        .await?;
    let eraser = testkit::spawn(w.eraser_config()).await?;
    w.call(
        Method::POST,
        &format!(
            "/workspaces/{}/connections/{}/disconnect",
            o.a.workspace, o.a.connection
        ),
    )
    .await?;
    w.erased(o.a.workspace, 1).await?;
    let scan = w.scan(o.a.workspace).await?;
    assert_eq!(scan["total"], 1, "{scan}");
    let found: Vec<&Value> = scan["places"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["count"].as_i64() > Some(0))
        .collect();
    assert_eq!(found.len(), 1, "{scan}");
    assert_eq!(found[0]["place"], "table:scratch_note");
    assert_eq!(found[0]["registered"], false);
    // Only operators may scan.
    let viewer = testkit::token(
        &testkit::control_api_keys()?,
        control_api::Role::Viewer,
        Some(o.b.workspace),
    )?;
    let res = w
        .http
        .get(format!(
            "{}/workspaces/{}/erasure-scan",
            w.api, o.b.workspace
        ))
        .bearer_auth(viewer)
        .send()
        .await?;
    assert_eq!(res.status().as_u16(), 403);
    eraser.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_leaving_an_installation_goes_only_when_orphaned() -> Result<()> {
    let o = overlap().await?;
    let w = &o.world;
    let eraser = testkit::spawn(w.eraser_config()).await?;
    let b_repos = [o.shared[0], o.shared[1], o.b_only];
    let b_before = w.snapshot(&o.b, &b_repos).await?;
    // What github-sync's installation handler does when GitHub reports repositories removed
    // from A's installation: A's monitors of them go, in the handler's transaction.
    let mut txn = w.pool.begin().await?;
    for repo in [o.shared[0], o.a_only] {
        let removed = scm_mirror::monitors::remove(
            &mut txn,
            o.a.connection,
            &scm_mirror::repository::RepoRef {
                owner: "acme".into(),
                name: repo.name.into(),
                native_id: Some(repo.native_id),
            },
        )
        .await?;
        assert_eq!(removed, 1);
    }
    txn.commit().await?;
    // The orphan goes with its cascade and A's activity of it; the shared one stays for B.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while w.exists(o.a_only).await? {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the orphaned repository was not deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(w.exists(o.shared[0]).await?);
    assert_eq!(
        count(
            &w.pool,
            &format!(
                "SELECT count(*) FROM activity_event a JOIN issue i ON i.id = a.issue_id
                  WHERE a.workspace_id = '{}' AND i.repository_id = '{}'",
                o.a.workspace, o.shared[0].id
            ),
        )
        .await?,
        0,
        "A's activity of a repository it no longer covers"
    );
    // A still covers the other shared repository, with its activity.
    assert!(
        count(
            &w.pool,
            &format!(
                "SELECT count(*) FROM activity_event a JOIN issue i ON i.id = a.issue_id
                  WHERE a.workspace_id = '{}' AND i.repository_id = '{}'",
                o.a.workspace, o.shared[1].id
            ),
        )
        .await?
            > 0
    );
    assert_eq!(w.snapshot(&o.b, &b_repos).await?, b_before);
    eraser.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pruner_keeps_the_newest_finished_jobs_and_every_running_one() -> Result<()> {
    let w = World::start().await?;
    let t = w.tenant("p").await?;
    for (i, status) in ["succeeded", "failed", "succeeded", "running", "canceled"]
        .into_iter()
        .enumerate()
    {
        sqlx::query(
            "INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger, status,
                                   created_at)
             VALUES (gen_random_uuid(), $1, $2, 'github', 'RECONCILIATION', 'manual', $3,
                     now() - make_interval(mins => $4))",
        )
        .bind(t.connection)
        .bind(t.workspace)
        .bind(status)
        .bind(10 - i as i32)
        .execute(&w.pool)
        .await?;
    }
    eraser::retention::prune(&w.env.db.db, 2, 100).await?;
    let left: Vec<String> = sqlx::query_scalar(
        "SELECT status FROM sync_job WHERE connection_id = $1 ORDER BY created_at",
    )
    .bind(t.connection)
    .fetch_all(&w.pool)
    .await?;
    assert_eq!(left, ["succeeded", "running", "canceled"]);
    Ok(())
}
