//! Resumability: the real `eraser` binary, killed with SIGKILL 20 times during a large erasure
//! (each time once the restarted run has recorded progress of its own, plus a seeded few
//! milliseconds) and restarted each time, reaches exactly the end state (rows, stream copies, the
//! record's counts, the repositories kept) of an uninterrupted run over an identical world.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use bus::contracts::WebhookDelivery;
use reqwest::Method;
use sea_orm::TransactionTrait as _;
use serde_json::Value;
use uuid::Uuid;

use crate::support::{Repo, Tenant, World};

/// Kills during the erasure.
const KILLS: usize = 20;
/// Of which at least this many must find the erasure still running.
const MID_ERASURE: usize = 16;
/// Repositories A monitors; every third is shared with B. Each is a step of the erasure, so
/// there are more than enough steps for every kill to land in one.
const REPOSITORIES: i64 = 36;
/// Issues (and as many pull requests) per repository.
const ITEMS: i64 = 100;
/// Stream messages of A's connection, besides its webhooks.
const MESSAGES: usize = 150;

/// A small deterministic generator (splitmix64): the delays after progress are the same on every
/// run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

struct Large {
    world: World,
    a: Tenant,
    b: Tenant,
    repos: Vec<Repo>,
}

const NAMES: [&str; REPOSITORIES as usize] = [
    "r00", "r01", "r02", "r03", "r04", "r05", "r06", "r07", "r08", "r09", "r10", "r11", "r12",
    "r13", "r14", "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25",
    "r26", "r27", "r28", "r29", "r30", "r31", "r32", "r33", "r34", "r35",
];

async fn large() -> Result<Large> {
    let world = World::start().await?;
    let a = world.tenant("a").await?;
    let b = world.tenant("b").await?;
    let mut repos = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let repo = world.repository(1000 + i as i64, name, ITEMS).await?;
        world.monitor(&a, repo, 2).await?;
        if i % 3 == 0 {
            world.monitor(&b, repo, 1).await?;
        }
        repos.push(repo);
    }
    // A's bulk of stream copies, published by the relay like any delivery.
    let txn = world.env.db.db.begin().await?;
    for n in 0..MESSAGES {
        let repo = &repos[n % repos.len()];
        let delivery = WebhookDelivery {
            event: "issues".into(),
            workspace_id: Some(a.workspace),
            connection_id: Some(a.connection),
            delivery_id: None,
            body_ref: None,
            replay_of: None,
            body: format!("{} bulk {n}", crate::support::MARKER).into_bytes(),
        };
        store::outbox::enqueue(
            &txn,
            delivery.outbox_message(
                lifecycle_core::subject::github("acme", repo.name, "issues")?,
                format!("bulk-{n}"),
            ),
        )
        .await?;
    }
    txn.commit().await?;
    let shared = (REPOSITORIES as usize).div_ceil(3);
    let messages =
        MESSAGES + 2 * REPOSITORIES as usize + shared + 3 * (REPOSITORIES as usize + shared);
    world.ledgered(messages as i64).await?;
    Ok(Large { world, a, b, repos })
}

/// What an erasure of A leaves: the record's counts and steps, the repositories still there,
/// the scan of A, and whether B is unchanged.
async fn end_state(l: &Large, b_before: &str) -> Result<(Value, Vec<i64>, Value)> {
    let records = l.world.erased(l.a.workspace, 1).await?;
    let record = records[0].clone();
    let mut kept: Vec<i64> = Vec::new();
    for repo in &l.repos {
        if l.world.exists(*repo).await? {
            kept.push(repo.native_id);
        }
    }
    let scan = l.world.scan(l.a.workspace).await?;
    ensure!(scan["total"] == 0, "A remains after erasure: {scan}");
    let b_repos: Vec<Repo> = l.repos.iter().step_by(3).copied().collect();
    ensure!(
        l.world.snapshot(&l.b, &b_repos).await? == b_before,
        "B changed"
    );
    Ok((
        // Step names carry repository ids, which differ between worlds: their number is compared.
        serde_json::json!({
            "counts": record["counts"],
            "steps": record["steps_done"].as_array().map(Vec::len),
        }),
        kept,
        scan,
    ))
}

/// The erasure record of `connection`: its status, and its steps and counts as text (they change
/// with every step and every stream batch); `None` before the eraser opened it.
async fn progress(w: &World, connection: Uuid) -> Result<Option<(String, String)>> {
    Ok(sqlx::query_as(
        "SELECT status, steps_done::text || ' ' || counts::text FROM erasure
          WHERE connection_id = $1",
    )
    .bind(connection)
    .fetch_optional(&w.pool)
    .await?)
}

async fn disconnect(w: &World, t: &Tenant) -> Result<()> {
    let (status, body) = w
        .call(
            Method::POST,
            &format!(
                "/workspaces/{}/connections/{}/disconnect",
                t.workspace, t.connection
            ),
        )
        .await?;
    ensure!(status == 200, "disconnect: {status} {body}");
    Ok(())
}

/// The eraser child process; killed (SIGKILL) and reaped on every exit path.
struct Eraser {
    child: Option<Child>,
    env: Vec<(&'static str, String)>,
    port: u16,
    log: PathBuf,
}

impl Eraser {
    fn new(w: &World, port: u16, log: PathBuf) -> Eraser {
        Eraser {
            child: None,
            port,
            env: vec![
                ("DATABASE_URL", w.env.db.url.clone()),
                ("NATS_URL", w.env.nats_url.clone()),
                (
                    "FORGESYNC_NATS_PREFIX",
                    w.env
                        .bus
                        .namespace()
                        .prefix()
                        .unwrap_or_default()
                        .to_owned(),
                ),
                ("FORGESYNC_LISTEN", format!("127.0.0.1:{port}")),
                ("FORGESYNC_ERASER_LEDGER_PRUNE_CRON", "off".to_owned()),
                // A killed replica's trigger comes back quickly.
                ("FORGESYNC_ERASER_ACK_WAIT", "1".to_owned()),
                ("FORGESYNC_LOG_FORMAT", "pretty".to_owned()),
                ("RUST_LOG", "warn,eraser=info".to_owned()),
            ],
            log,
        }
    }

    async fn start(&mut self, http: &reqwest::Client) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_eraser"))
                .env_clear()
                .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("spawning the eraser binary")?,
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "the eraser exited during start ({status}); log: {}",
                    self.log.display()
                );
            }
            let up = http
                .get(format!("http://127.0.0.1:{}/healthz", self.port))
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the eraser did not start; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Eraser {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    Ok(l.local_addr()?.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erasure_killed_twenty_times_ends_as_an_uninterrupted_one() -> Result<()> {
    // The reference: one uninterrupted run.
    let reference = large().await?;
    let b_repos: Vec<Repo> = reference.repos.iter().step_by(3).copied().collect();
    let b_before = reference.world.snapshot(&reference.b, &b_repos).await?;
    let eraser = testkit::spawn(reference.world.eraser_config()).await?;
    disconnect(&reference.world, &reference.a).await?;
    let expected = end_state(&reference, &b_before).await?;
    eraser.stop().await?;
    drop(reference);

    // The same world, its eraser killed again and again.
    let crashed = large().await?;
    let w = &crashed.world;
    let b_repos: Vec<Repo> = crashed.repos.iter().step_by(3).copied().collect();
    let b_before = w.snapshot(&crashed.b, &b_repos).await?;
    let log = std::env::temp_dir().join(format!("eraser-crash-{}.log", Uuid::now_v7()));
    let mut child = Eraser::new(w, free_port()?, log.clone());
    child.start(&w.http).await?;
    disconnect(w, &crashed.a).await?;
    let mut rng = SplitMix(0x00e7_a5e5);
    let mut mid_erasure = 0;
    let mut at_last_kill = None;
    for kill in 0..KILLS {
        // Each run first makes progress of its own (a step or a stream batch recorded), so every
        // kill interrupts a resumed erasure; then a few seeded milliseconds into what follows.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = progress(w, crashed.a.connection).await?;
            if now.as_ref().is_some_and(|p| p.0 == "done") || (now.is_some() && now != at_last_kill)
            {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "run {kill} made no progress; log: {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.range(0, 20))).await;
        child.kill();
        at_last_kill = progress(w, crashed.a.connection).await?;
        if at_last_kill.as_ref().is_some_and(|p| p.0 == "running") {
            mid_erasure += 1;
        }
        child.start(&w.http).await?;
    }
    let got = end_state(&crashed, &b_before).await?;
    child.kill();
    assert!(
        mid_erasure >= MID_ERASURE,
        "only {mid_erasure} of {KILLS} kills landed during the erasure"
    );
    assert_eq!(
        got.0,
        expected.0,
        "the record differs; log: {}",
        log.display()
    );
    assert_eq!(got.1, expected.1, "other repositories kept");
    // Shared repositories are the ones kept.
    let shared: Vec<i64> = crashed
        .repos
        .iter()
        .step_by(3)
        .map(|r| r.native_id)
        .collect();
    assert_eq!(got.1, shared);
    let _ = std::fs::remove_file(log);
    Ok(())
}
