//! `slack-ingest`: signed Events API `message` deliveries (envelopes the Slack simulator sent,
//! each given its own ts, text and event id) POSTed into a running ingress by several senders
//! while slack-ingest's events consumer applies them to one consented (ACTIVE) channel: ingress's
//! acks per second with their latency against Slack's 3 s timeout, and messages applied per
//! second (first send → last row). Beside it, in the same run, the ceiling: the same number of
//! rows written with raw SQL as the consumer writes them (per message one transaction: the
//! channel row `FOR UPDATE`, the message `INSERT … ON CONFLICT DO NOTHING`, its generic event and
//! the event's outbox row) at the consumer's concurrency. Path and ceiling alternate in rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt as _;
use lifecycle_core::slack::ChannelCommand;
use serde_json::{Value, json};
use slack_mirror::command::ChannelCommandMessage;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::outbox::OutboxMessage;
use store::secrets::Keyring;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::slack::{Model, RetrySchedule, SlackSim};

use crate::table::{Table, rate, ratio, thousands};

/// Deliveries in all, split evenly over the rounds (`FORGESYNC_BENCH_SLACK_MESSAGES`).
const MESSAGES: usize = 20_000;
/// Path/ceiling rounds, alternating (`FORGESYNC_BENCH_SLACK_ROUNDS`).
const ROUNDS: usize = 3;
/// Concurrent senders into ingress (`FORGESYNC_BENCH_SLACK_SENDERS`).
const SENDERS: usize = 16;
/// Slack's delivery timeout: an ack later than this is a failed delivery at Slack.
const SLACK_TIMEOUT: Duration = Duration::from_secs(3);
/// A round's path gives up after this.
const ROUND_CAP: Duration = Duration::from_secs(900);
/// The Slack app's signing secret (the operator's): its deliveries are facts.
const SECRET: &str = "bench-slack-signing-secret";
const TOKEN: &str = "xoxb-bench";

fn sized(var: &str, default: usize) -> Result<usize> {
    match std::env::var(var) {
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("{var} must be a positive number")),
        Err(_) => Ok(default),
    }
}

/// One message as both sides write it.
struct Prepared {
    /// The signed envelope's body, as the simulator sends it.
    body: Vec<u8>,
    ts: String,
    occurred_at: OffsetDateTime,
    user: String,
    text: String,
}

/// A consented channel: our id and Slack's.
#[derive(Clone)]
struct Consented {
    id: Uuid,
    slack_id: String,
}

/// What one round of the path measured.
struct PathRound {
    sent: usize,
    errors: usize,
    late: usize,
    first_error: Option<String>,
    acked: Duration,
    applied: Duration,
    latencies: Vec<Duration>,
}

impl PathRound {
    fn percentile_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.latencies, p)
    }
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1].as_secs_f64() * 1000.0
}

pub async fn run() -> Result<()> {
    let total = sized("FORGESYNC_BENCH_SLACK_MESSAGES", MESSAGES)?;
    let rounds = sized("FORGESYNC_BENCH_SLACK_ROUNDS", ROUNDS)?;
    let senders = sized("FORGESYNC_BENCH_SLACK_SENDERS", SENDERS)?;
    let per_round = total / rounds;
    ensure!(per_round > 0, "fewer messages than rounds");

    let env = testkit::TestEnv::new().await?;
    let pool = env.db.db.get_postgres_connection_pool().clone();

    // One team, two public channels with the bot in them: one for the path, one for the ceiling.
    let mut model = Model::default();
    let team = model.add_team("bench");
    model.add_token(TOKEN, &team);
    let mut channel_ids = Vec::new();
    for name in ["general", "ceiling"] {
        let id = model
            .add_channel(&team, name, false)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        model.join_bot(&id).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        channel_ids.push(id);
    }
    let user = model.add_user(&team);
    let sim = SlackSim::start(model).await?;

    // A workspace's Slack connection to the team, the app's endpoint for it, ingress, and
    // slack-ingest at its defaults (no schedules).
    let (workspace_id, connection_id, instance) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'slack')")
        .bind(instance)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'bench')")
        .bind(workspace_id)
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings)
         VALUES ($1, $2, 'slack', 'active', $3, $4)",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(instance)
    .bind(json!({ "team_id": team }))
    .execute(&pool)
    .await?;
    let keyring = Keyring::parse(&testkit::secret_key())?;
    store::secrets::put(
        &env.db.db,
        &keyring,
        connection_id,
        "token",
        TOKEN.as_bytes(),
    )
    .await?;
    store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Slack,
            registration: Registration::App,
            provider_ref: Some(team.clone()),
            address_token: None,
            tenant_keyed: false,
        },
        SECRET.as_bytes(),
    )
    .await?;
    let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
    let hook_url = format!("{}/webhooks/slack", ingress.url());
    sim.subscribe_events(&hook_url, SECRET);
    // No retries, and a long timeout so that a late ack is measured, not cut off; one later
    // than Slack's 3 s is counted as late.
    sim.set_retry_schedule(RetrySchedule {
        timeout: Duration::from_secs(60),
        delays: Vec::new(),
    });
    let config = testkit::slack_ingest_config(env.common_args(), &sim.api_url());
    let concurrency = config.sync.webhook_concurrency.max(1);
    let service = testkit::spawn(config).await?;

    // Activation (the directory), then each channel's consent, as control-api publishes them.
    let transition = bus::contracts::LifecycleTransition {
        connection_id,
        workspace_id,
        kind: "slack".into(),
        transition: "activated".into(),
        before_status: "pending".into(),
        status: "active".into(),
        version: 1,
        lifecycle_generation: 1,
        provider_instance_id: instance,
        actor: "bench".into(),
        at: store::events::rfc3339(OffsetDateTime::now_utc()),
    };
    env.bus
        .publish_outbox(Uuid::now_v7(), OutboxMessage::contract(&transition)?)
        .await?;
    let mut consented = Vec::new();
    for slack_id in &channel_ids {
        let id = until(&pool, "the directory was not recorded", || {
            sqlx::query_scalar::<_, Uuid>(
                "SELECT id FROM slack_channel WHERE connection_id = $1 AND slack_id = $2",
            )
            .bind(connection_id)
            .bind(slack_id)
        })
        .await?;
        let command = ChannelCommandMessage {
            id: Uuid::now_v7(),
            connection_id,
            workspace_id,
            channel_id: id,
            command: ChannelCommand::Consent,
            actor: "operator@bench".into(),
            at: store::events::rfc3339(OffsetDateTime::now_utc()),
        };
        env.bus
            .publish_outbox(Uuid::now_v7(), OutboxMessage::contract(&command)?)
            .await?;
        until(&pool, "the channel never became ACTIVE", || {
            sqlx::query_scalar::<_, Uuid>(
                "SELECT id FROM slack_channel WHERE id = $1 AND status = 'active'
                    AND reason IS DISTINCT FROM 'announcing' AND consent_ts IS NOT NULL",
            )
            .bind(id)
        })
        .await?;
        consented.push(Consented {
            id,
            slack_id: slack_id.clone(),
        });
    }
    let (path_channel, ceiling_channel) = (consented[0].clone(), consented[1].clone());

    // A real delivery of a user's message, recorded while the app's URL answers nowhere; every
    // delivery of the run is that envelope with its own ts, event id and text.
    sim.subscribe_events("http://127.0.0.1:9/nowhere", SECRET);
    sim.model(|m| {
        m.post(
            &path_channel.slack_id,
            &user,
            "the template: what a user's message looks like",
        )
    })
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    sim.settle().await;
    let template: Value = sim
        .deliveries()
        .iter()
        .rev()
        .find(|d| d.event_type == "message")
        .map(|d| serde_json::from_slice(&d.body))
        .context("the simulator recorded no message delivery")??;
    sim.subscribe_events(&hook_url, SECRET);
    let prepared = prepare(&template, total)?;
    let body_bytes = prepared.iter().map(|p| p.body.len()).sum::<usize>() / prepared.len();
    let prepared = Arc::new(prepared);
    settled(&env, &pool).await?;

    let sim = Arc::new(sim);
    let mut path_rounds = Vec::new();
    let mut ceiling_rounds = Vec::new();
    for round in 0..rounds {
        let range = round * per_round..(round + 1) * per_round;
        eprintln!(
            "bench: round {}: {per_round} deliveries into ingress, {senders} senders ...",
            round + 1
        );
        let path = path_round(
            &pool,
            &sim,
            &prepared,
            range.clone(),
            senders,
            &path_channel,
        )
        .await
        .with_context(|| format!("round {}'s path", round + 1))?;
        settled(&env, &pool).await?;
        eprintln!(
            "bench: round {}: ceiling, {per_round} row-locked transactions on {concurrency} \
             connections ...",
            round + 1
        );
        let ceiling = ceiling_round(
            &env.db.url,
            &prepared[range],
            concurrency,
            connection_id,
            &ceiling_channel,
        )
        .await?;
        // The ceiling's held outbox rows go, so the next path round finds the outbox as it left
        // it (untimed).
        sqlx::query("DELETE FROM outbox WHERE subject = $1")
            .bind(CEILING_SUBJECT)
            .execute(&pool)
            .await?;
        path_rounds.push(path);
        ceiling_rounds.push(ceiling);
    }

    let pg_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await?;
    let durability: (String, String) =
        sqlx::query_as("SELECT current_setting('fsync'), current_setting('synchronous_commit')")
            .fetch_one(&pool)
            .await?;
    // The bench's own messages (the channel also keeps its announcement).
    let kept: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM slack_message WHERE channel_id = $1 AND text LIKE 'bench message %'",
    )
    .bind(path_channel.id)
    .fetch_one(&pool)
    .await?;
    service.stop().await?;
    ingress.stop().await?;

    println!();
    println!(
        "slack-ingest: signed Events API `message` deliveries ({body_bytes} bytes on average) into \
         ingress, {senders} senders, one consented channel; {rounds} rounds of {} (path, then \
         ceiling)",
        thousands(per_round as u64)
    );
    println!(
        "machine: {}; PostgreSQL {pg_version} (fsync {}, synchronous_commit {})",
        crate::machine(),
        durability.0,
        durability.1
    );
    println!(
        "ceiling: per message one transaction on a pool of {concurrency} (slack-ingest's \
         webhook concurrency): SELECT the channel FOR UPDATE, INSERT the message ON CONFLICT DO \
         NOTHING, INSERT its integration_event and that event's outbox row, COMMIT"
    );
    println!();
    let mut t = Table::new(&[
        "round  path",
        "messages",
        "errors",
        "seconds",
        "per s",
        "p50 ms",
        "p99 ms",
        "applied ÷ ceiling",
    ]);
    let mut ratios = Vec::new();
    for (i, (p, c)) in path_rounds.iter().zip(&ceiling_rounds).enumerate() {
        let applied = p.sent as f64 / p.applied.as_secs_f64();
        let ceiling = c.written as f64 / c.took.as_secs_f64();
        ratios.push(applied / ceiling);
        t.row(vec![
            format!("{:>5}  ingress: POST /webhooks/slack → 2xx", i + 1),
            thousands(p.sent as u64),
            thousands(p.errors as u64),
            format!("{:.2}", p.acked.as_secs_f64()),
            rate(p.sent.saturating_sub(p.errors) as f64 / p.acked.as_secs_f64()),
            format!("{:.1}", p.percentile_ms(0.50)),
            format!("{:.1}", p.percentile_ms(0.99)),
            String::new(),
        ]);
        t.row(vec![
            "       slack-ingest: applied, first send → last row".into(),
            thousands(p.sent as u64),
            String::new(),
            format!("{:.2}", p.applied.as_secs_f64()),
            rate(applied),
            String::new(),
            String::new(),
            ratio(applied, ceiling),
        ]);
        t.row(vec![
            format!("       ceiling: row-locked 1-message txn, {concurrency} connections"),
            thousands(c.written as u64),
            "0".into(),
            format!("{:.2}", c.took.as_secs_f64()),
            rate(ceiling),
            format!("{:.1}", percentile_ms(&c.latencies, 0.50)),
            format!("{:.1}", percentile_ms(&c.latencies, 0.99)),
            "1.00×".into(),
        ]);
    }
    t.print();
    println!();
    let (median, low, high) = spread(&ratios);
    println!(
        "applied ÷ ceiling over {rounds} rounds: median {median:.2}× (spread {low:.2}×-{high:.2}×); \
         goal 0.5× → {}",
        if median >= 0.5 { "met" } else { "NOT met" }
    );
    let p99s: Vec<f64> = path_rounds.iter().map(|p| p.percentile_ms(0.99)).collect();
    let worst = p99s.iter().copied().fold(0.0_f64, f64::max);
    let late: usize = path_rounds.iter().map(|p| p.late + p.errors).sum();
    println!(
        "ack p99 against Slack's {} s timeout: worst round {worst:.1} ms, {late} acks late or failed → {}",
        SLACK_TIMEOUT.as_secs(),
        if worst < SLACK_TIMEOUT.as_secs_f64() * 1000.0 && late == 0 {
            "met"
        } else {
            "NOT met"
        }
    );
    let acks: Vec<f64> = path_rounds
        .iter()
        .map(|p| p.sent.saturating_sub(p.errors) as f64 / p.acked.as_secs_f64())
        .collect();
    let (ack_median, ack_low, ack_high) = spread(&acks);
    println!(
        "ingress acks/s: median {} (spread {}-{}); {} of {} deliveries kept in the channel",
        rate(ack_median),
        rate(ack_low),
        rate(ack_high),
        thousands(kept as u64),
        thousands((per_round * rounds) as u64),
    );
    for (i, p) in path_rounds.iter().enumerate() {
        if let Some(e) = &p.first_error {
            println!("first error, round {}: {e}", i + 1);
        }
    }
    drop(sim);
    env.db.drop().await;
    Ok(())
}

/// Median, lowest and highest of `values`.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mid = v.len() / 2;
    let median = if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    };
    (median, v[0], v[v.len() - 1])
}

/// `count` envelopes from `template`: each a new message a microsecond after the one before,
/// starting now (after the consents), with its own event id and text.
fn prepare(template: &Value, count: usize) -> Result<Vec<Prepared>> {
    let user = template
        .pointer("/event/user")
        .and_then(Value::as_str)
        .context("the template names no user")?
        .to_owned();
    let start = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000 + 1_000;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let micros = start + i as i128;
        let ts = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
        let text = format!(
            "bench message {i}: a line about the deploy, a link to the dashboard and a question \
             for whoever is on call"
        );
        let mut envelope = template.clone();
        envelope["event_id"] = json!(format!("Ev0BENCH{i:08X}"));
        envelope["event_time"] = json!((micros / 1_000_000) as i64);
        let event = envelope
            .get_mut("event")
            .context("the template has no event")?;
        event["ts"] = json!(ts);
        event["event_ts"] = json!(ts);
        event["text"] = json!(text);
        out.push(Prepared {
            body: serde_json::to_vec(&envelope)?,
            occurred_at: OffsetDateTime::from_unix_timestamp_nanos(micros * 1_000)?,
            ts,
            user: user.clone(),
            text,
        });
    }
    Ok(out)
}

/// Polls `query` every 50 ms for up to 60 s until it returns a row.
async fn until<'q, F>(pool: &PgPool, what: &str, query: F) -> Result<Uuid>
where
    F: Fn() -> sqlx::query::QueryScalar<'q, sqlx::Postgres, Uuid, sqlx::postgres::PgArguments>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(id) = query().fetch_optional(pool).await? {
            return Ok(id);
        }
        ensure!(Instant::now() < deadline, "{what} within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until nothing is left to do: no outbox row unpublished, slack-ingest's consumers with
/// nothing pending or in flight, three checks in a row.
async fn settled(env: &testkit::TestEnv, pool: &PgPool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let ns = env.bus.namespace();
    let mut quiet = 0;
    while quiet < 3 {
        ensure!(Instant::now() < deadline, "slack-ingest did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(pool)
            .await?;
        let mut busy = unpublished > 0;
        for (stream, durable) in [
            (bus::Stream::WebhooksSlack, "slack-ingest-events"),
            (bus::Stream::Lifecycle, "slack-ingest-channels"),
        ] {
            let stream = env
                .bus
                .jetstream()
                .get_stream(ns.name(stream.name()))
                .await?;
            if let Ok(info) = stream.consumer_info(ns.name(durable)).await {
                busy |= info.num_pending > 0 || info.num_ack_pending > 0;
            }
        }
        quiet = if busy { 0 } else { quiet + 1 };
    }
    Ok(())
}

/// Sends `range` of the prepared deliveries into ingress from `senders` closed-loop senders,
/// each signed at its send as Slack signs it, while polling the channel's rows every 10 ms until
/// every message of the range is kept.
async fn path_round(
    pool: &PgPool,
    sim: &Arc<SlackSim>,
    prepared: &Arc<Vec<Prepared>>,
    range: std::ops::Range<usize>,
    senders: usize,
    channel: &Consented,
) -> Result<PathRound> {
    let count_rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM slack_message WHERE channel_id = $1")
            .bind(channel.id)
            .fetch_one(pool)
            .await
    };
    let before = count_rows().await?;
    let n = range.len();
    let next = Arc::new(AtomicUsize::new(range.start));
    let started = Instant::now();
    let workers: Vec<_> = (0..senders)
        .map(|_| {
            let (sim, prepared, next) = (sim.clone(), prepared.clone(), next.clone());
            let end = range.end;
            tokio::spawn(async move {
                let mut out = (Vec::new(), 0usize, None::<String>, Duration::ZERO);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end || started.elapsed() > ROUND_CAP {
                        out.3 = started.elapsed();
                        return out;
                    }
                    let t = Instant::now();
                    match sim.send_event(&prepared[i].body, None).await {
                        Ok(status) if status.is_success() => out.0.push(t.elapsed()),
                        Ok(status) => {
                            out.1 += 1;
                            out.2
                                .get_or_insert_with(|| format!("ingress answered {status}"));
                        }
                        Err(e) => {
                            out.1 += 1;
                            out.2.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
            })
        })
        .collect();
    // The channel's rows, polled while the senders run and after.
    let mut applied = None;
    while applied.is_none() {
        ensure!(
            started.elapsed() < ROUND_CAP,
            "slack-ingest kept {} of {n} messages within {} s",
            count_rows().await? - before,
            ROUND_CAP.as_secs()
        );
        if count_rows().await? - before >= n as i64 {
            applied = Some(started.elapsed());
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut latencies = Vec::with_capacity(n);
    let (mut errors, mut first_error) = (0, None);
    let mut acked = Duration::ZERO;
    for w in workers {
        let (lat, e, first, done) = w.await?;
        latencies.extend(lat);
        errors += e;
        first_error = first_error.or(first);
        acked = acked.max(done);
    }
    if latencies.len() + errors < n {
        bail!("the senders stopped early");
    }
    latencies.sort();
    let late = latencies.iter().filter(|l| **l >= SLACK_TIMEOUT).count();
    Ok(PathRound {
        sent: n,
        errors,
        late,
        first_error,
        acked,
        applied: applied.unwrap_or_default(),
        latencies,
    })
}

/// What one round of the ceiling measured.
struct CeilingRound {
    written: usize,
    took: Duration,
    latencies: Vec<Duration>,
}

/// The subject of the ceiling's outbox rows (held from the relay, deleted after each round).
const CEILING_SUBJECT: &str = "bench.slack-ingest.ceiling";

/// The rows of `messages` written into `channel` as the consumer writes a new message: per
/// message one transaction, the channel row locked first, `concurrency` at a time on as many
/// connections.
async fn ceiling_round(
    database_url: &str,
    messages: &[Prepared],
    concurrency: usize,
    connection_id: Uuid,
    channel: &Consented,
) -> Result<CeilingRound> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(concurrency as u32)
        .min_connections(concurrency as u32)
        .connect(database_url)
        .await?;
    let workspace_id: Uuid =
        sqlx::query_scalar("SELECT workspace_id FROM slack_channel WHERE id = $1")
            .bind(channel.id)
            .fetch_one(&pool)
            .await?;
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(messages)
        .map(|m| {
            let (pool, channel) = (&pool, channel);
            async move {
                let t = Instant::now();
                let mut txn = pool.begin().await?;
                let _locked: (Uuid, String) = sqlx::query_as(
                    "SELECT id, status FROM slack_channel
                      WHERE connection_id = $1 AND slack_id = $2 FOR UPDATE",
                )
                .bind(connection_id)
                .bind(&channel.slack_id)
                .fetch_one(&mut *txn)
                .await?;
                let inserted: Option<(Uuid,)> = sqlx::query_as(
                    "INSERT INTO slack_message (id, channel_id, connection_id, ts, user_id, text)
                     VALUES ($1, $2, $3, $4::numeric, $5, $6)
                     ON CONFLICT (channel_id, ts) DO NOTHING
                     RETURNING id",
                )
                .bind(Uuid::now_v7())
                .bind(channel.id)
                .bind(connection_id)
                .bind(&m.ts)
                .bind(&m.user)
                .bind(&m.text)
                .fetch_optional(&mut *txn)
                .await?;
                let (message_id,) = inserted.context("the ceiling's message already existed")?;
                let event_id = Uuid::now_v7();
                sqlx::query(
                    "INSERT INTO integration_event (id, connection_id, subject_kind, subject_id,
                         item_kind, item_id, type, source_key, occurred_at, workspace_ids)
                     VALUES ($1, $2, 'slack_channel', $3, 'slack_message', $4,
                             'slack.message.posted', $5, $6, $7)
                     ON CONFLICT DO NOTHING",
                )
                .bind(event_id)
                .bind(connection_id)
                .bind(channel.id)
                .bind(message_id)
                .bind(format!("{}:{}", channel.slack_id, m.ts))
                .bind(m.occurred_at)
                .bind(vec![workspace_id])
                .execute(&mut *txn)
                .await?;
                let payload = json!({
                    "id": event_id,
                    "event_type": "slack.message.posted",
                    "workspace_id": workspace_id,
                    "item": {"kind": "slack_message", "id": message_id},
                    "source_key": format!("{}:{}", channel.slack_id, m.ts),
                    "occurred_at": store::events::rfc3339(m.occurred_at),
                    "detail": {"channel": channel.slack_id, "ts": m.ts,
                               "slack_channel_id": channel.id},
                    "connection_id": connection_id,
                });
                sqlx::query(
                    "INSERT INTO outbox (id, subject, headers, payload, msg_id, available_at)
                     VALUES ($1, $2, '{}'::jsonb, $3, $4, now() + interval '1 day')",
                )
                .bind(Uuid::now_v7())
                .bind(CEILING_SUBJECT)
                .bind(serde_json::to_vec(&payload)?)
                .bind(event_id.to_string())
                .execute(&mut *txn)
                .await?;
                txn.commit().await?;
                anyhow::Ok(t.elapsed())
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let took = started.elapsed();
    pool.close().await;
    latencies.sort();
    Ok(CeilingRound {
        written: messages.len(),
        took,
        latencies,
    })
}
