//! The one test harness: every integration test gets a fresh database cloned from a migrated
//! template and its own JetStream namespace on the shared NATS server, so tests run in parallel
//! under nextest against real Postgres and NATS.
//!
//! `DATABASE_URL` and `NATS_URL` come from `cargo xtask test`, which provisions both.
#![forbid(unsafe_code)]

pub mod http;
pub mod otlp;
mod own_nats;
pub mod promql;

pub use own_nats::{NatsSetup, OwnNats};

use anyhow::{Context as _, Result};
use bus::{Bus, Namespace, StreamSettings};
use migrations::{Migrator, MigratorTrait};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};

/// A database of one's own, cloned from the migrated template.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub db: DatabaseConnection,
}

fn env_url(var: &str) -> Result<String> {
    std::env::var(var).with_context(|| {
        format!("{var} is not set: run the tests through `cargo xtask test`, which provisions it")
    })
}

/// Replaces the database name in a Postgres URL.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let root = match base.rfind('/') {
        Some(i) if base[..i].contains("://") && i > base.find("://").unwrap_or(0) + 2 => &base[..i],
        _ => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

async fn connect(url: &str, max: u32) -> Result<DatabaseConnection> {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.max_connections(max)
        .min_connections(0)
        .sqlx_logging(false);
    Database::connect(opts)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// The template's name changes whenever the set of migrations does.
fn template_name() -> String {
    let names: Vec<String> = Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in names.join(",").bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("forgesync_template_{h:016x}")
}

impl TestDb {
    /// A fresh, migrated database.
    pub async fn new() -> Result<TestDb> {
        let admin_url = env_url("DATABASE_URL")?;
        let admin = connect(&admin_url, 2).await?;
        let template = template_name();
        // One process migrates the template; the others wait on the advisory lock.
        admin
            .execute_unprepared("SELECT pg_advisory_lock(7210451)")
            .await?;
        let exists = admin
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                format!("SELECT 1 FROM pg_database WHERE datname = '{template}'"),
            ))
            .await?
            .is_some();
        let made = async {
            if !exists {
                admin
                    .execute_unprepared(&format!("CREATE DATABASE {template}"))
                    .await?;
                let t = connect(&with_database(&admin_url, &template), 1).await?;
                Migrator::up(&t, None)
                    .await
                    .context("migrating the test template")?;
                t.close().await?;
            }
            anyhow::Ok(())
        }
        .await;
        admin
            .execute_unprepared("SELECT pg_advisory_unlock(7210451)")
            .await?;
        made?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .context("cloning the template (is another session connected to it?)")?;
        admin.close().await?;
        let url = with_database(&admin_url, &name);
        let db = connect(&url, 10).await?;
        Ok(TestDb { name, url, db })
    }
}

impl TestDb {
    /// Service flags pointed at this database and the shared NATS server, in no namespace of
    /// their own: for tests that parse a service's config (its defaults) and start nothing.
    pub fn common_args(&self) -> Result<runtime::CommonArgs> {
        Ok(common_args(&self.url, &env_url("NATS_URL")?, None))
    }

    /// A fresh database without any migration applied (for migration and readiness tests).
    pub async fn empty() -> Result<TestDb> {
        let admin_url = env_url("DATABASE_URL")?;
        let admin = connect(&admin_url, 1).await?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await?;
        admin.close().await?;
        let url = with_database(&admin_url, &name);
        let db = connect(&url, 10).await?;
        Ok(TestDb { name, url, db })
    }

    /// Closes the pool and drops the database (tests that can, tidy up after themselves).
    pub async fn drop(self) {
        let _ = self.db.close().await;
        let dropped = async {
            let admin = connect(&env_url("DATABASE_URL")?, 1).await?;
            admin
                .execute_unprepared(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await?;
            admin.close().await?;
            anyhow::Ok(())
        };
        if let Err(e) = dropped.await {
            eprintln!("could not drop test database {}: {e:#}", self.name);
        }
    }
}

/// A JetStream namespace of one's own with every stream declared.
pub async fn test_bus() -> Result<Bus> {
    let url = env_url("NATS_URL")?;
    let ns = Namespace::new(&format!(
        "t{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ))
    .map_err(anyhow::Error::msg)?;
    let bus = Bus::connect(&url, None, ns, StreamSettings::default()).await?;
    bus.declare_streams().await?;
    Ok(bus)
}

/// The HS256 key test and local-stack services sign bearer tokens with.
pub const JWT_SECRET: &str = "forgesync-local-jwt-secret-not-for-production-0001";
/// The `iss` of test and local-stack bearer tokens.
pub const JWT_ISSUER: &str = "forgesync-local";
/// The `aud` of test and local-stack bearer tokens.
pub const JWT_AUDIENCE: &str = "forgesync-control-api";

/// A fixed AES-256 key (base64) for connection secrets in tests and the local stack.
pub fn secret_key() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(*b"forgesync-local-key-32-bytes-ok!")
}

/// A new workspace with one active connection of `kind` on provider instance `instance`, with
/// `settings` and, when given, its API `token` sealed with [`secret_key`] as the services read
/// it: `(workspace_id, connection_id)`. What tests and benchmarks seed; production connections
/// are made through control-api.
pub async fn active_connection(
    db: &DatabaseConnection,
    kind: &str,
    instance: uuid::Uuid,
    settings: serde_json::Value,
    token: Option<&str>,
) -> Result<(uuid::Uuid, uuid::Uuid)> {
    let pool = db.get_postgres_connection_pool();
    let (workspace_id, connection_id) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
        .bind(workspace_id)
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings)
         VALUES ($1, $2, $3, 'active', $4, $5)",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(kind)
    .bind(instance)
    .bind(settings)
    .execute(pool)
    .await?;
    if let Some(token) = token {
        let keyring = store::secrets::Keyring::parse(&secret_key())?;
        store::secrets::put(db, &keyring, connection_id, "token", token.as_bytes()).await?;
    }
    Ok((workspace_id, connection_id))
}

/// A database and a NATS namespace of one's own, and the config that points services at them.
pub struct TestEnv {
    pub db: TestDb,
    pub bus: Bus,
    pub nats_url: String,
}

impl TestEnv {
    pub async fn new() -> Result<TestEnv> {
        runtime::install_crypto_provider();
        let db = TestDb::new().await?;
        let bus = test_bus().await?;
        Ok(TestEnv {
            db,
            bus,
            nats_url: env_url("NATS_URL")?,
        })
    }

    /// Flags for a service on port 0 against this environment.
    pub fn common_args(&self) -> runtime::CommonArgs {
        common_args(&self.db.url, &self.nats_url, self.bus.namespace().prefix())
    }
}

/// The ranges the local stack and the tests let vendor calls reach: loopback, where the
/// simulators listen.
pub const LOCAL_EGRESS: &str = "127.0.0.0/8,::1/128";

/// Service flags as the binaries parse them (clap's defaults, the environment), pointed at
/// `database_url`, `nats_url` and `prefix`, listening on an ephemeral port of 127.0.0.1, with a
/// short shutdown grace and a day of stream retention for tests.
pub fn common_args(
    database_url: &str,
    nats_url: &str,
    prefix: Option<&str>,
) -> runtime::CommonArgs {
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        common: runtime::CommonArgs,
    }
    let mut argv = vec![
        "service".to_owned(),
        format!("--database-url={database_url}"),
        format!("--nats-url={nats_url}"),
        "--listen=127.0.0.1:0".to_owned(),
        "--shutdown-grace=5".to_owned(),
        format!("--stream-max-age={}", 24 * 3600),
        // The simulators listen on loopback.
        format!("--egress-allow={LOCAL_EGRESS}"),
    ];
    argv.extend(prefix.map(|p| format!("--nats-prefix={p}")));
    <Flags as clap::Parser>::try_parse_from(argv)
        .expect("the common flags parse")
        .common
}

/// A service's config as its binary parses it from `args` (clap's defaults and the environment
/// fill the rest), with `common` for the shared flags. Tests override fields afterwards.
pub fn config<C: runtime::Launch + clap::Parser>(
    common: runtime::CommonArgs,
    args: &[String],
) -> Result<C> {
    let argv = [
        C::NAME.to_owned(),
        // Required by the parser; replaced by `common` below.
        format!("--database-url={}", common.database_url),
        format!("--nats-url={}", common.nats_url),
    ]
    .into_iter()
    .chain(args.iter().cloned());
    let mut config =
        C::try_parse_from(argv).with_context(|| format!("parsing {}'s flags", C::NAME))?;
    *config.common_mut() = common;
    Ok(config)
}

/// A service running in-process.
pub struct Running {
    pub addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl Running {
    /// `http://<addr>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How `run` ends by itself (nothing asks it to stop).
    pub async fn ended(self) -> Result<()> {
        self.task.await?
    }

    /// Shuts the service down gracefully and returns how its `run` ended.
    pub async fn stop(self) -> Result<()> {
        self.stop.cancel();
        self.task.await?
    }
}

/// control-api's config for the given flags, with the local stack's keys and a 64 KiB body limit.
pub fn control_api_config(common: runtime::CommonArgs) -> control_api::Config {
    config(
        common,
        &[
            format!("--jwt-secret={JWT_SECRET}"),
            format!("--jwt-issuer={JWT_ISSUER}"),
            format!("--jwt-audience={JWT_AUDIENCE}"),
            format!("--secret-key={}", secret_key()),
            format!("--max-body-bytes={}", 64 * 1024),
            // The simulators speak plain http.
            "--allow-insecure-server-urls".to_owned(),
        ],
    )
    .expect("control-api's test flags parse")
}

/// The keys that sign tokens [`control_api_config`]'s control-api accepts.
pub fn control_api_keys() -> Result<control_api::Keys> {
    control_api::Keys::hs256(JWT_SECRET.as_bytes())
}

/// Starts any service in-process from its config; returns once it listens (or how it failed).
pub async fn spawn<C: runtime::Launch>(config: C) -> Result<Running> {
    let stop = tokio_util::sync::CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(config.launch(
        stop.clone(),
        Box::new(move |addr| {
            let _ = tx.send(addr);
        }),
    ));
    let addr = match rx.await {
        Ok(addr) => addr,
        Err(_) => {
            // run() ended before listening: report why.
            task.await??;
            anyhow::bail!("{} stopped before listening", C::NAME);
        }
    };
    Ok(Running { addr, stop, task })
}

/// github-sync's config for the given flags, with the local stack's key, no schedules (tests
/// start the jobs they mean to see), short backfill backoffs and prompt filter refreshes.
pub fn github_sync_config(common: runtime::CommonArgs) -> github_sync::Config {
    config(
        common,
        &[
            format!("--secret-key={}", secret_key()),
            "--reconcile-cron=off".to_owned(),
            "--backfill-cron=off".to_owned(),
            "--redeliver-cron=off".to_owned(),
            "--github-backfill-backoff-ms=100".to_owned(),
            // Tests change monitors and expect the webhook consumer to follow promptly.
            "--filter-refresh-ms=200".to_owned(),
        ],
    )
    .expect("github-sync's test flags parse")
}

/// The eraser's config for the given flags, without its pruners (tests prune what they mean to
/// see pruned).
pub fn eraser_config(common: runtime::CommonArgs) -> eraser::Config {
    config(
        common,
        &[
            "--ledger-prune-cron=off".to_owned(),
            "--audit-prune-cron=off".to_owned(),
        ],
    )
    .expect("the eraser's test flags parse")
}

/// The routing key (`k1`) tests and the local stack sign GitLab route credentials with.
pub const ROUTING_KEY: &[u8; 32] = b"forgesync-local-routing-key-0001";

/// The `--routing-keys` flag of [`ROUTING_KEY`], as ingress and gitlab-sync take it.
fn routing_keys_flag() -> String {
    use base64::Engine as _;
    format!(
        "--routing-keys=k1={}",
        base64::engine::general_purpose::STANDARD.encode(ROUTING_KEY)
    )
}

/// ingress's config for the given flags, with the local stack's keys.
pub fn ingress_config(common: runtime::CommonArgs) -> ingress::Config {
    config(
        common,
        &[
            format!("--secret-key={}", secret_key()),
            routing_keys_flag(),
        ],
    )
    .expect("ingress's test flags parse")
}

/// gitlab-sync's config for the given flags, with the local stack's keys, no schedules and
/// prompt filter refreshes; it registers group hooks at `public_webhook_url` (ingress's URL)
/// when one is given.
pub fn gitlab_sync_config(
    common: runtime::CommonArgs,
    public_webhook_url: Option<&str>,
) -> gitlab_sync::Config {
    let mut flags = vec![
        format!("--secret-key={}", secret_key()),
        routing_keys_flag(),
        "--reconcile-cron=off".to_owned(),
        "--backfill-cron=off".to_owned(),
        "--filter-refresh-ms=200".to_owned(),
    ];
    if let Some(url) = public_webhook_url {
        flags.push(format!("--public-webhook-url={url}"));
    }
    config(common, &flags).expect("gitlab-sync's test flags parse")
}

/// slack-ingest's config for the given flags, with the local stack's keys, no schedules and
/// Slack's Web API at `api_url` (a simulator's `api_url()`).
pub fn slack_ingest_config(common: runtime::CommonArgs, api_url: &str) -> slack_ingest::Config {
    config(
        common,
        &[
            format!("--secret-key={}", secret_key()),
            format!("--slack-api-url={api_url}"),
            "--reconcile-cron=off".to_owned(),
        ],
    )
    .expect("slack-ingest's test flags parse")
}

/// outline-sync's config for the given flags, with the local stack's key, no schedules and
/// Outline at `api_url` (a simulator's `base_url()`); it creates each connection's webhook
/// subscription delivering to `public_webhook_url` (ingress's URL) when one is given.
pub fn outline_sync_config(
    common: runtime::CommonArgs,
    api_url: &str,
    public_webhook_url: Option<&str>,
) -> outline_sync::Config {
    let mut flags = vec![
        format!("--secret-key={}", secret_key()),
        format!("--outline-api-url={api_url}"),
        "--reconcile-cron=off".to_owned(),
    ];
    if let Some(url) = public_webhook_url {
        flags.push(format!("--public-webhook-url={url}"));
    }
    config(common, &flags).expect("outline-sync's test flags parse")
}

/// A bearer token valid for an hour: `role` is admin or viewer; `workspace` scopes it, and
/// without one it is an operator's.
pub fn token(
    keys: &control_api::Keys,
    role: control_api::Role,
    workspace: Option<uuid::Uuid>,
) -> Result<String> {
    Ok(keys.issue(&claims(role, workspace)?)?)
}

/// The claims [`token`] signs: the local issuer and audience, issued now, valid for an hour.
pub fn claims(
    role: control_api::Role,
    workspace: Option<uuid::Uuid>,
) -> Result<control_api::Claims> {
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    Ok(control_api::Claims {
        sub: format!("{role:?}").to_lowercase(),
        role,
        workspace_id: workspace,
        operator: workspace.is_none(),
        iss: JWT_ISSUER.to_owned(),
        aud: control_api::Audience::One(JWT_AUDIENCE.to_owned()),
        iat,
        exp: iat + 3600,
    })
}

/// One message read back from a stream.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Logical subject (namespace stripped).
    pub subject: String,
    pub msg_id: Option<String>,
    pub payload: Vec<u8>,
}

impl StoredMessage {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or(serde_json::Value::Null)
    }
}

/// Waits until `stream` holds at least `min` messages matching the logical `filter` (or the
/// timeout passes) and returns every matching message, oldest first.
pub async fn read_stream(
    bus: &Bus,
    stream: bus::Stream,
    filter: &str,
    min: usize,
    timeout: std::time::Duration,
) -> Result<Vec<StoredMessage>> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures::StreamExt as _;
    let js_stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(stream.name()))
        .await?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let consumer = js_stream
            .create_consumer(pull::Config {
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::None,
                filter_subject: bus.namespace().subject(filter),
                ..Default::default()
            })
            .await?;
        let pending = consumer.clone().info().await?.num_pending as usize;
        let mut out = Vec::with_capacity(pending);
        if pending > 0 {
            let mut messages = consumer.messages().await?;
            while out.len() < pending {
                let Some(m) = messages.next().await else {
                    break;
                };
                let m = m.map_err(anyhow::Error::msg)?;
                let full = m.subject.to_string();
                out.push(StoredMessage {
                    subject: bus.namespace().strip(&full).unwrap_or(&full).to_owned(),
                    msg_id: m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(bus::MSG_ID_HEADER))
                        .map(|v| v.to_string()),
                    payload: m.payload.to_vec(),
                });
            }
        }
        if out.len() >= min || tokio::time::Instant::now() >= deadline {
            return Ok(out);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Runs a service binary's `--help` with each of `secrets` set in the environment and fails if
/// any value shows in the output (every secret arg must hide its env value).
pub fn assert_help_hides_secrets(binary: &str, secrets: &[&str]) {
    let mut cmd = std::process::Command::new(binary);
    cmd.arg("--help");
    let values: Vec<(String, String)> = secrets
        .iter()
        .map(|name| (name.to_string(), format!("help-leak-marker-{name}-0f9e8d")))
        .collect();
    for (name, value) in &values {
        cmd.env(name, value);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{binary} --help: {e}"));
    assert!(out.status.success(), "{binary} --help failed: {out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, value) in &values {
        assert!(
            text.contains(name.as_str()),
            "{binary} --help does not name {name}"
        );
        assert!(
            !text.contains(value.as_str()),
            "{binary} --help shows {name}'s value"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced_keeping_the_query() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "t_1"),
            "postgres://postgres@127.0.0.1:5432/t_1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/db?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
    }
}

/// Everything logged in this test process from the call on (the services it runs in-process
/// included), as services format it for collectors (JSON lines), at the levels `filter` names
/// (`RUST_LOG` syntax). It installs the process's subscriber, so call it first in the test
/// (nextest runs every test in a process of its own); a second call fails.
pub fn capture_logs(filter: &str) -> Result<LogCapture> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let capture = LogCapture::default();
    let lines = capture.clone();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::try_new(filter)?)
        .with(runtime::telemetry::log_layer(
            runtime::LogFormat::Json,
            move || lines.clone(),
        ))
        .try_init()
        .context("a log subscriber is already installed in this process")?;
    Ok(capture)
}

/// The log text [`capture_logs`] collects.
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// What was logged so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut lines) = self.0.lock() {
            lines.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
