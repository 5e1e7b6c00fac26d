//! Crash test: the real `ingress` binary, killed with SIGKILL at seeded moments while signed
//! GitHub deliveries pour in, and restarted each time. Every delivery that received a 2xx must be
//! in Postgres (one row), and once the outbox is drained, on its subject exactly once; nothing
//! that was stored without an answer may be on the stream twice either.
//!
//! Requests that fail during an outage (connection refused or reset, 5xx) are retried the way a
//! vendor would, so by the end every delivery has been answered with a 2xx; a retry of a delivery
//! whose first attempt committed but never got its answer out is a duplicate (200, nothing new).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use bus::Stream;
use sea_orm::{
    ActiveModelTrait as _, ActiveValue::Set, ConnectionTrait as _, DatabaseConnection, DbBackend,
    Statement,
};
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, ConnectionStatus, connection, provider_instance, workspace};
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use testkit::TestEnv;
use tokio::sync::Mutex;
use tokio::time::Instant;
use uuid::Uuid;

const DELIVERIES: usize = 600;
const CONCURRENCY: usize = 16;
const KILLS: usize = 3;
const SEED: u64 = 0x00c0_ffee_dead_beef;
const SECRET: &str = "gh-crash-secret";
const HOOK_ID: &str = "90210";
/// Everything, from setup to the last assertion.
const OVERALL: Duration = Duration::from_secs(100);
/// How long a restarted ingress may take to answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the relay may take to drain the outbox after the load.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A small deterministic generator (splitmix64): the kill moments are the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// The ingress child process; killed (SIGKILL) and reaped on every exit path, including panics.
struct Ingress {
    child: Option<Child>,
    port: u16,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
    starts: usize,
}

impl Ingress {
    fn new(env: &TestEnv, port: u16, log: PathBuf) -> Ingress {
        Ingress {
            child: None,
            port,
            env: vec![
                ("DATABASE_URL", env.db.url.clone()),
                ("NATS_URL", env.nats_url.clone()),
                (
                    "FORGESYNC_NATS_PREFIX",
                    env.bus.namespace().prefix().unwrap_or_default().to_owned(),
                ),
                ("FORGESYNC_LISTEN", format!("127.0.0.1:{port}")),
                ("FORGESYNC_SECRET_KEY", testkit::secret_key()),
                (
                    "FORGESYNC_WEBHOOK_ROUTING_KEYS",
                    testkit::ingress_config(env.common_args()).routing_keys,
                ),
                ("FORGESYNC_LOG_FORMAT", "pretty".to_owned()),
                ("RUST_LOG", "warn,ingress=info,bus=info".to_owned()),
            ],
            log,
            starts: 0,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the binary and waits until it answers `/healthz` (it binds only once Postgres and
    /// NATS are connected).
    async fn start(&mut self, http: &reqwest::Client) -> Result<()> {
        ensure!(self.child.is_none(), "ingress is already running");
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_ingress"))
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning the ingress binary")?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "ingress exited during start ({status}); log: {}",
                    self.log.display()
                );
            }
            let up = http
                .get(format!("{}/healthz", self.url()))
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "ingress did not answer /healthz within {START_TIMEOUT:?}; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILL (what `Child::kill` sends on unix), then reap.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Ingress {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port on 127.0.0.1 that was free a moment ago (bound, read, released).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    Ok(l.local_addr()?.port())
}

fn delivery_id(n: usize) -> String {
    format!("crash-{n:05}")
}

/// A `push` payload as GitHub sends it (the simulator's builder, checked against GitHub's
/// published schema in vendor-sim), distinct per delivery (so body digests never collide).
fn push_body(n: usize) -> Vec<u8> {
    use vendor_sim::github::Model;
    use vendor_sim::github::webhook::{Push, push_payload};
    let mut m = Model::new();
    let repo = m.add_repository(None, "acme", "api");
    let at = m.tick();
    let push = Push {
        branch: "main".into(),
        before: format!("{:040x}", n as u128 * 0x9e37_79b9),
        after: format!("{:040x}", (n as u128 + 1) * 0x9e37_79b9),
        pusher: "octocat".into(),
        message: format!("Change {n}"),
        at,
    };
    let payload = push_payload(&m, m.repository(repo).expect("just added"), &push);
    serde_json::to_vec(&payload).expect("a JSON body")
}

/// How one delivery ended from the vendor's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 2xx, stored by this attempt.
    Accepted,
    /// 2xx, an earlier attempt had already stored it.
    Duplicate,
}

#[derive(Default)]
struct Tally {
    answers: BTreeMap<usize, Answer>,
    /// Attempts that failed (connection error or 5xx) and were retried.
    failed_attempts: usize,
    /// Anything that is neither a 2xx nor retryable: the test fails on it.
    unexpected: Vec<String>,
}

/// Sends delivery `n` until it gets a 2xx, retrying connection errors and 5xx like a vendor.
async fn deliver(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    tally: &Mutex<Tally>,
    answered: &AtomicUsize,
) {
    let body = push_body(n);
    let signature = format!(
        "sha256={}",
        ingress::verify::sign_hex(SECRET.as_bytes(), &[&body])
    );
    loop {
        let sent = http
            .post(format!("{url}/webhooks/github"))
            .header("Content-Type", "application/json")
            .header("X-GitHub-Event", "push")
            .header("X-GitHub-Delivery", delivery_id(n))
            .header("X-GitHub-Hook-ID", HOOK_ID)
            .header("X-Hub-Signature-256", &signature)
            .header("User-Agent", "GitHub-Hookshot/crash")
            .timeout(Duration::from_secs(10))
            .body(body.clone())
            .send()
            .await;
        let outcome = match sent {
            Ok(res) if res.status().is_success() => {
                let status = res.status();
                match res.text().await {
                    // The 2xx status line arrived: that is the vendor's acknowledgement.
                    Ok(text) => Some(if text.contains("\"duplicate\"") {
                        Answer::Duplicate
                    } else if text.contains("\"accepted\"") {
                        Answer::Accepted
                    } else {
                        tally
                            .lock()
                            .await
                            .unexpected
                            .push(format!("{n}: {status} {text}"));
                        return;
                    }),
                    // Killed mid-body: count it as acknowledged only if we can tell which; we
                    // cannot, so treat it as the vendor would (status 2xx means delivered).
                    Err(_) => Some(Answer::Accepted),
                }
            }
            Ok(res) if res.status().is_server_error() => None,
            Ok(res) => {
                let status = res.status();
                let text = res.text().await.unwrap_or_default();
                tally
                    .lock()
                    .await
                    .unexpected
                    .push(format!("{n}: {status} {text}"));
                return;
            }
            Err(_) => None,
        };
        match outcome {
            Some(answer) => {
                tally.lock().await.answers.insert(n, answer);
                answered.fetch_add(1, Ordering::SeqCst);
                return;
            }
            None => {
                tally.lock().await.failed_attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn count(db: &DatabaseConnection, sql: &str) -> Result<i64> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await?
        .context("a count row")?;
    Ok(row.try_get_by_index(0)?)
}

/// A workspace, an active GitHub connection and its operator-created hook endpoint.
async fn github_endpoint(db: &DatabaseConnection) -> Result<Uuid> {
    let ws = workspace::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set("acme".into()),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let instance = provider_instance::ensure(db, ConnectionKind::Github, None).await?;
    let conn = connection::ActiveModel {
        id: Set(Uuid::now_v7()),
        workspace_id: Set(ws.id),
        kind: Set(ConnectionKind::Github),
        status: Set(ConnectionStatus::Active),
        version: Set(1),
        lifecycle_generation: Set(1),
        provider_instance_id: Set(instance.id),
        settings: Set(serde_json::json!({})),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let key = Keyring::parse(&testkit::secret_key())?;
    let ep = store::inbound::create_endpoint(
        db,
        &key,
        NewEndpoint {
            workspace_id: conn.workspace_id,
            connection_id: conn.id,
            kind: conn.kind,
            registration: Registration::Operator,
            provider_ref: Some(HOOK_ID.to_owned()),
            address_token: None,
            tenant_keyed: false,
        },
        SECRET.as_bytes(),
    )
    .await?;
    Ok(ep.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_delivery_survives_sigkill_and_lands_once() -> Result<()> {
    tokio::time::timeout(OVERALL, crash_test())
        .await
        .with_context(|| format!("the crash test did not finish within {OVERALL:?}"))?
}

async fn crash_test() -> Result<()> {
    let started = Instant::now();
    let env = TestEnv::new().await?;
    let db = env.db.db.clone();
    let endpoint_id = github_endpoint(&db).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()?;

    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("crash-{}.log", env.db.name));
    let mut ingress = Ingress::new(&env, free_port()?, log);
    ingress.start(&http).await?;
    let url = ingress.url();

    // Kill after a seeded number of answered deliveries, plus a seeded delay of a few ms, so the
    // kill lands with requests, transactions and inline publishes in flight.
    let mut rng = SplitMix(SEED);
    let mut kill_at: Vec<(usize, u64)> = (0..KILLS)
        .map(|_| {
            (
                rng.range(60, DELIVERIES as u64 - 60) as usize,
                rng.range(0, 15),
            )
        })
        .collect();
    kill_at.sort_unstable();

    let tally = Arc::new(Mutex::new(Tally::default()));
    let answered = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (http, url, tally, answered, next) = (
            http.clone(),
            url.clone(),
            tally.clone(),
            answered.clone(),
            next.clone(),
        );
        load.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= DELIVERIES {
                    return;
                }
                deliver(&http, &url, n, &tally, &answered).await;
            }
        });
    }

    let mut kills = Vec::new();
    for (at, delay_ms) in kill_at {
        while answered.load(Ordering::SeqCst) < at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let in_db_before = count(&db, "SELECT count(*) FROM inbound_message").await?;
        ingress.kill();
        let killed_at = answered.load(Ordering::SeqCst);
        ensure!(
            killed_at < DELIVERIES,
            "kill point {at} came after the load"
        );
        let down = Instant::now();
        // What the killed process left for the next relay: committed but not yet on the stream.
        let left = count(&db, "SELECT count(*) FROM outbox").await?;
        ingress.start(&http).await?;
        kills.push(format!(
            "after {killed_at} answered: {in_db_before} stored, {left} left unpublished, \
             down {:?}",
            down.elapsed()
        ));
    }
    while let Some(joined) = load.join_next().await {
        joined?;
    }
    let load_done = started.elapsed();

    // The last ingress keeps running until its relay has drained the outbox.
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let pending = count(&db, "SELECT count(*) FROM outbox").await?;
        if pending == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{pending} outbox rows still unpublished {DRAIN_TIMEOUT:?} after the load \
             (did the relay republish after the kills?)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let tally = std::mem::take(&mut *tally.lock().await);
    ensure!(
        tally.unexpected.is_empty(),
        "answers that are neither 2xx nor retryable: {:?}",
        tally.unexpected
    );
    ensure!(
        tally.answers.len() == DELIVERIES,
        "{} of {DELIVERIES} deliveries were answered with a 2xx",
        tally.answers.len()
    );
    let duplicates = tally
        .answers
        .values()
        .filter(|a| **a == Answer::Duplicate)
        .count();

    // Postgres: every acknowledged delivery has exactly one message, and every message is
    // dispatched.
    let mut rows: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for row in db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT provider_event_id, count(*), min(msg_id), \
             count(*) FILTER (WHERE s.processing_state <> 'dispatched') \
             FROM inbound_message m JOIN inbound_message_state s USING (id) \
             GROUP BY provider_event_id"
                .to_owned(),
        ))
        .await?
    {
        let event: Option<String> = row.try_get_by_index(0)?;
        let n: i64 = row.try_get_by_index(1)?;
        let msg_id: String = row.try_get_by_index(2)?;
        let undispatched: i64 = row.try_get_by_index(3)?;
        let event = event.context("a GitHub message without its delivery id")?;
        ensure!(
            undispatched == 0,
            "{event}: stored but not dispatched after the drain"
        );
        rows.insert(event, (n, msg_id));
    }
    for n in tally.answers.keys() {
        let id = delivery_id(*n);
        match rows.get(&id) {
            Some((1, msg_id)) => ensure!(
                *msg_id == format!("{endpoint_id}:event:{id}"),
                "{id}: unexpected msg_id {msg_id}"
            ),
            Some((k, _)) => bail!("{id}: acknowledged, but {k} messages stored"),
            None => bail!("{id}: acknowledged with a 2xx but not in inbound_message"),
        }
    }

    // The stream: each stored message exactly once under its dedup key, with the body sent.
    let stored = rows.len();
    let messages = testkit::read_stream(
        &env.bus,
        Stream::WebhooksGithub,
        ">",
        stored,
        Duration::from_secs(10),
    )
    .await?;
    let mut on_stream: BTreeMap<String, usize> = BTreeMap::new();
    for m in &messages {
        ensure!(
            m.subject == "github.acme.api.push",
            "unexpected subject {}",
            m.subject
        );
        let msg_id = m
            .msg_id
            .clone()
            .context("a stream message without Nats-Msg-Id")?;
        let n: usize = msg_id
            .rsplit_once(":event:crash-")
            .and_then(|(_, n)| n.parse().ok())
            .with_context(|| format!("unexpected msg_id {msg_id}"))?;
        ensure!(m.payload == push_body(n), "{msg_id}: payload differs");
        *on_stream.entry(msg_id).or_default() += 1;
    }
    let twice: Vec<_> = on_stream.iter().filter(|(_, k)| **k > 1).collect();
    ensure!(twice.is_empty(), "on the stream more than once: {twice:?}");
    let stored_ids: BTreeSet<&String> = rows.values().map(|(_, m)| m).collect();
    let stream_ids: BTreeSet<&String> = on_stream.keys().collect();
    let missing: Vec<_> = stored_ids.difference(&stream_ids).collect();
    ensure!(
        missing.is_empty(),
        "{} stored messages never reached the stream: {:?}",
        missing.len(),
        missing.iter().take(10).collect::<Vec<_>>()
    );
    let unstored: Vec<_> = stream_ids.difference(&stored_ids).collect();
    ensure!(
        unstored.is_empty(),
        "on the stream but not in Postgres: {unstored:?}"
    );
    ensure!(
        ingress.starts == KILLS + 1,
        "expected {KILLS} restarts, saw {}",
        ingress.starts - 1
    );

    eprintln!(
        "crash test: {DELIVERIES} deliveries ({CONCURRENCY} concurrent), kills {:?}, \
         {} failed attempts retried, {duplicates} answered as duplicates after a lost \
         answer, {stored} stored, {} on the stream; load {load_done:?}, total {:?}",
        kills,
        tally.failed_attempts,
        messages.len(),
        started.elapsed()
    );
    let log = ingress.log.clone();
    drop(ingress);
    // The child's log is kept only when the test fails.
    let _ = std::fs::remove_file(log);
    env.db.drop().await;
    Ok(())
}
