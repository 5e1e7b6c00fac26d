//! ingress: the only service vendors reach. Each webhook delivery is verified, made durable in
//! Postgres (raw body, selected headers, message, dedup keys and its dispatch record in one
//! transaction) before any 2xx, then published once to its JetStream subject; the outbox relay
//! publishes whatever the inline publish could not.
#![forbid(unsafe_code)]

pub mod accept;
pub mod budget;
pub mod endpoint;
pub mod published;
pub mod quota;
pub mod reject;
pub mod retention;
pub mod routes;
pub mod verify;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bus::Bus;
use sea_orm::DatabaseConnection;
use store::entity::ConnectionKind;
use store::secrets::Keyring;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::budget::{BodyBudget, Buffered};
use crate::endpoint::Endpoints;
use crate::published::Published;
use crate::quota::DeliveryQuota;

const MIB: usize = 1024 * 1024;

/// ingress's configuration: the common flags plus its own.
#[derive(Clone, clap::Parser)]
#[command(name = "ingress", about = "forgesync webhook receiver")]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// Keyring of 32-byte AES-256-GCM keys sealing connection secrets at rest: `id:base64,...`
    /// (the last seals, any opens) or one bare base64 key.
    #[arg(
        long,
        env = "FORGESYNC_SECRET_KEY",
        value_name = "FORGESYNC_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: String,

    /// Keys that sign GitLab route credentials, as `keyId=base64,keyId=base64`.
    #[arg(
        long,
        env = "FORGESYNC_WEBHOOK_ROUTING_KEYS",
        value_name = "FORGESYNC_WEBHOOK_ROUTING_KEYS",
        default_value = "",
        hide_env_values = true
    )]
    pub routing_keys: String,

    /// Largest GitHub webhook body, in bytes; larger ones get 413.
    #[arg(long, env = "FORGESYNC_INGRESS_GITHUB_MAX_BODY_BYTES", value_name = "FORGESYNC_INGRESS_GITHUB_MAX_BODY_BYTES", default_value_t = 25 * MIB)]
    pub github_max_body_bytes: usize,

    /// Largest GitLab webhook body, in bytes; larger ones get 413.
    #[arg(long, env = "FORGESYNC_INGRESS_GITLAB_MAX_BODY_BYTES", value_name = "FORGESYNC_INGRESS_GITLAB_MAX_BODY_BYTES", default_value_t = 25 * MIB)]
    pub gitlab_max_body_bytes: usize,

    /// Largest Slack request body, in bytes; larger ones get 413.
    #[arg(long, env = "FORGESYNC_INGRESS_SLACK_MAX_BODY_BYTES", value_name = "FORGESYNC_INGRESS_SLACK_MAX_BODY_BYTES", default_value_t = MIB)]
    pub slack_max_body_bytes: usize,

    /// Largest Outline webhook body, in bytes; larger ones get 413.
    #[arg(long, env = "FORGESYNC_INGRESS_OUTLINE_MAX_BODY_BYTES", value_name = "FORGESYNC_INGRESS_OUTLINE_MAX_BODY_BYTES", default_value_t = MIB)]
    pub outline_max_body_bytes: usize,

    /// Bytes all webhook bodies being read or handled may hold together; a request whose next
    /// chunk finds no room is answered 503 with Retry-After. Keep it well below the replica's
    /// memory limit.
    #[arg(
        long = "buffer-budget",
        env = "FORGESYNC_INGRESS_BUFFER_BUDGET_BYTES",
        value_name = "FORGESYNC_INGRESS_BUFFER_BUDGET_BYTES",
        default_value_t = 256 * MIB
    )]
    pub buffer_budget_bytes: usize,

    /// Deliveries a second one workspace may send on endpoints whose secret a tenant chose or
    /// was shown, sustained, per ingress replica; past it (and its burst) a delivery is
    /// answered 429 with Retry-After and nothing is stored. 0: no quota. The vendors' own
    /// deliveries (on endpoints keyed by the operator or by forgesync) are not counted.
    #[arg(
        long = "workspace-deliveries-per-sec",
        env = "FORGESYNC_INGRESS_WORKSPACE_DELIVERIES_PER_SEC",
        value_name = "FORGESYNC_INGRESS_WORKSPACE_DELIVERIES_PER_SEC",
        default_value_t = 50
    )]
    pub workspace_deliveries_per_sec: u32,

    /// Deliveries one workspace may send at once past its rate, per ingress replica (the
    /// bucket's size).
    #[arg(
        long = "workspace-delivery-burst",
        env = "FORGESYNC_INGRESS_WORKSPACE_DELIVERY_BURST",
        value_name = "FORGESYNC_INGRESS_WORKSPACE_DELIVERY_BURST",
        default_value_t = 500,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub workspace_delivery_burst: u32,

    /// Bytes of deliveries one workspace may store a day (UTC) on endpoints whose secret a
    /// tenant chose or was shown; past it a delivery is answered 429 with Retry-After until
    /// midnight UTC and nothing is stored. 0: no quota.
    #[arg(
        long = "workspace-bytes-per-day",
        env = "FORGESYNC_INGRESS_WORKSPACE_BYTES_PER_DAY",
        value_name = "FORGESYNC_INGRESS_WORKSPACE_BYTES_PER_DAY",
        default_value_t = 1024 * MIB as u64
    )]
    pub workspace_bytes_per_day: u64,

    /// Webhook requests handled at once; more wait for a slot (within the request timeout).
    #[arg(
        long,
        env = "FORGESYNC_INGRESS_CONCURRENCY",
        value_name = "FORGESYNC_INGRESS_CONCURRENCY",
        default_value_t = 512
    )]
    pub concurrency: usize,

    /// Seconds a webhook request may take in all (waiting for a slot included); then 408.
    #[arg(
        long = "request-timeout",
        env = "FORGESYNC_INGRESS_REQUEST_TIMEOUT",
        value_name = "FORGESYNC_INGRESS_REQUEST_TIMEOUT",
        default_value_t = 60
    )]
    pub request_timeout_secs: u64,

    /// Seconds a webhook body may take to arrive; then 408.
    #[arg(
        long = "body-timeout",
        env = "FORGESYNC_INGRESS_BODY_TIMEOUT",
        value_name = "FORGESYNC_INGRESS_BODY_TIMEOUT",
        default_value_t = 30
    )]
    pub body_timeout_secs: u64,

    /// Bodies up to this size travel on the subject, larger ones as a reference to Postgres.
    /// Unset: 1 MiB, lowered with a warning to what the server's `max_payload` leaves after
    /// headers. Set above that, ingress stops when it meets the server, naming both.
    #[arg(
        long,
        env = "FORGESYNC_INGRESS_INLINE_BODY_BYTES",
        value_name = "FORGESYNC_INGRESS_INLINE_BODY_BYTES"
    )]
    pub inline_body_bytes: Option<usize>,

    /// Seconds a body digest stays a dedup key.
    #[arg(
        long = "digest-window",
        env = "FORGESYNC_INGRESS_DIGEST_WINDOW",
        value_name = "FORGESYNC_INGRESS_DIGEST_WINDOW",
        default_value_t = 24 * 3600
    )]
    pub digest_window_secs: u64,

    /// Seconds a Slack request timestamp may be away from now.
    #[arg(
        long = "slack-tolerance",
        env = "FORGESYNC_INGRESS_SLACK_TOLERANCE",
        value_name = "FORGESYNC_INGRESS_SLACK_TOLERANCE",
        default_value_t = 300
    )]
    pub slack_tolerance_secs: u64,

    /// Hours raw GitHub bodies are kept.
    #[arg(long, env = "FORGESYNC_RETENTION_GITHUB_HOURS", value_name = "FORGESYNC_RETENTION_GITHUB_HOURS", default_value_t = 7 * 24)]
    pub retention_github_hours: u64,

    /// Hours raw GitLab bodies are kept.
    #[arg(long, env = "FORGESYNC_RETENTION_GITLAB_HOURS", value_name = "FORGESYNC_RETENTION_GITLAB_HOURS", default_value_t = 7 * 24)]
    pub retention_gitlab_hours: u64,

    /// Hours raw Slack bodies are kept.
    #[arg(
        long,
        env = "FORGESYNC_RETENTION_SLACK_HOURS",
        value_name = "FORGESYNC_RETENTION_SLACK_HOURS",
        default_value_t = 72
    )]
    pub retention_slack_hours: u64,

    /// Hours raw Outline bodies are kept.
    #[arg(
        long,
        env = "FORGESYNC_RETENTION_OUTLINE_HOURS",
        value_name = "FORGESYNC_RETENTION_OUTLINE_HOURS",
        default_value_t = 72
    )]
    pub retention_outline_hours: u64,

    /// Milliseconds an endpoint read is reused (0 reads it for every delivery). A disconnect or
    /// a rotation still applies from the moment it commits: the store re-checks the endpoint.
    #[arg(
        long = "endpoint-cache",
        env = "FORGESYNC_INGRESS_ENDPOINT_CACHE_MS",
        value_name = "FORGESYNC_INGRESS_ENDPOINT_CACHE_MS",
        default_value_t = 5_000
    )]
    pub endpoint_cache_ms: u64,

    /// Milliseconds the outbox relay leaves a new dispatch record to ingress's own publish
    /// (after a crash, its messages reach the stream this much later).
    #[arg(
        long = "relay-hold",
        env = "FORGESYNC_INGRESS_RELAY_HOLD_MS",
        value_name = "FORGESYNC_INGRESS_RELAY_HOLD_MS",
        default_value_t = 2_000
    )]
    pub relay_hold_ms: u64,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("github_max_body_bytes", &self.github_max_body_bytes)
            .field("gitlab_max_body_bytes", &self.gitlab_max_body_bytes)
            .field("slack_max_body_bytes", &self.slack_max_body_bytes)
            .field("outline_max_body_bytes", &self.outline_max_body_bytes)
            .field("concurrency", &self.concurrency)
            .field("buffer_budget_bytes", &self.buffer_budget_bytes)
            .field("digest_window_secs", &self.digest_window_secs)
            .finish_non_exhaustive()
    }
}

/// Parses `keyId=base64,...` routing keys.
pub fn parse_routing_keys(spec: &str) -> anyhow::Result<HashMap<String, Vec<u8>>> {
    use base64::Engine as _;
    let mut keys = HashMap::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, b64) = part.split_once('=').with_context(|| {
            "FORGESYNC_WEBHOOK_ROUTING_KEYS entries must be keyId=base64".to_owned()
        })?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .with_context(|| format!("FORGESYNC_WEBHOOK_ROUTING_KEYS: key {id:?} is not base64"))?;
        if key.len() < 32 {
            anyhow::bail!("FORGESYNC_WEBHOOK_ROUTING_KEYS: key {id:?} must be at least 32 bytes");
        }
        keys.insert(id.trim().to_owned(), key);
    }
    Ok(keys)
}

/// The largest body each vendor's route reads.
#[derive(Debug, Clone)]
pub struct BodyLimits {
    pub github: usize,
    pub gitlab: usize,
    pub slack: usize,
    pub outline: usize,
}

impl BodyLimits {
    /// The limit of `kind`'s deliveries.
    pub fn for_kind(&self, kind: ConnectionKind) -> usize {
        match kind {
            ConnectionKind::Github => self.github,
            ConnectionKind::Gitlab => self.gitlab,
            ConnectionKind::Slack => self.slack,
            ConnectionKind::Outline => self.outline,
        }
    }
}

/// Limits and windows the routes apply.
#[derive(Debug, Clone)]
pub struct Settings {
    pub body_limits: BodyLimits,
    /// Webhook requests handled at once.
    pub concurrency: usize,
    /// How long a request may take in all.
    pub request_timeout: Duration,
    /// How long a body may take to arrive.
    pub body_timeout: Duration,
    /// The configured inline limit; [`AppState::inline_body_max`] also bounds it by the server.
    pub inline_body_bytes: usize,
    pub digest_window: Duration,
    pub slack_tolerance: Duration,
    /// How long relays leave a new dispatch record to the inline publish.
    pub relay_hold: Duration,
    /// Bytes a workspace may store a day of what it signs itself; 0: no quota.
    pub workspace_bytes_per_day: u64,
    retention: [Duration; 4],
}

impl Settings {
    /// How long raw bodies of `kind` are kept.
    pub fn retention(&self, kind: ConnectionKind) -> Duration {
        self.retention[match kind {
            ConnectionKind::Github => 0,
            ConnectionKind::Gitlab => 1,
            ConnectionKind::Slack => 2,
            ConnectionKind::Outline => 3,
        }]
    }
}

/// Inline publishes in flight at most; past it the relay publishes. Each holds no database
/// connection, only its message, so a slow broker does not take connections from deliveries.
const INLINE_PUBLISHES: usize = 256;

/// What every route can reach.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub bus: Bus,
    pub secret_key: Keyring,
    pub routing_keys: Arc<HashMap<String, Vec<u8>>>,
    pub settings: Arc<Settings>,
    /// Bounds inline publishes; past it the relay publishes.
    pub inline_publish: Arc<Semaphore>,
    /// Deletes the dispatch records of inline-published messages, in batches.
    pub published: Published,
    /// Endpoint reads, reused for a short time.
    pub endpoints: Arc<Endpoints>,
    /// What all bodies being read or handled may hold together.
    pub budget: BodyBudget,
    /// Deliveries a second per workspace, of what tenants sign themselves.
    pub quota: Arc<DeliveryQuota>,
}

impl AppState {
    /// Reads a body whose endpoint is known, no further than `limit`, within the budget and the
    /// body-read deadline.
    pub async fn read_body(
        &self,
        headers: &axum::http::HeaderMap,
        body: axum::body::Body,
        limit: usize,
    ) -> Result<Buffered, crate::reject::Rejection> {
        self.budget
            .read(headers, body, limit, self.settings.body_timeout)
            .await
    }

    /// The largest body that travels inline: the configured limit, bounded by what the connected
    /// server's `max_payload` leaves after headers. While the server is not known yet every body
    /// goes by reference, which fits any server.
    pub fn inline_body_max(&self) -> usize {
        self.settings
            .inline_body_bytes
            .min(self.bus.max_body_bytes().unwrap_or(0))
    }
}

/// The inline limit against a server whose messages carry at most `max_body` bytes of body
/// (NATS prerequisite: `max_payload` large enough for inline bodies). An explicit setting above
/// it is an error naming the fix; the default is lowered to it with a warning.
pub fn check_inline_limit(setting: Option<usize>, max_body: usize) -> anyhow::Result<()> {
    match setting {
        Some(n) if n > max_body => anyhow::bail!(
            "FORGESYNC_INGRESS_INLINE_BODY_BYTES is {n}, more than the {max_body} bytes of body a \
             message may carry on this NATS server (its max_payload less {} bytes for headers): \
             lower the setting or unset it, or raise max_payload in the server's config \
             (docs/deploy.md, NATS prerequisites)",
            bus::HEADER_ROOM
        ),
        None if store::inbound::DEFAULT_INLINE_BODY_MAX > max_body => tracing::warn!(
            default = store::inbound::DEFAULT_INLINE_BODY_MAX,
            inline_body_bytes = max_body,
            "the NATS server's max_payload is below the inline default: bodies above \
             inline_body_bytes travel by reference (raise max_payload to 8MB, docs/deploy.md)"
        ),
        _ => {}
    }
    Ok(())
}

/// Runs ingress until `shutdown`; `on_listen` learns the bound address (port 0 in tests).
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let secret_key = Keyring::parse(&config.secret_key)?;
    let routing_keys = parse_routing_keys(&config.routing_keys)?;
    let db = config.common.connect_db().await?;
    // Ingress starts (and stays ready) while NATS is down: deliveries are durable in Postgres
    // first, and the streams are declared in the background once NATS answers.
    let bus = config.common.connect_bus_undeclared().await?;
    let hours = |h: u64| Duration::from_secs(h * 3600);
    let mut service = runtime::Service::new("ingress", &config.common, &shutdown);
    // The writer outlives the server so the last inline publishes lose their dispatch records too.
    let (published, published_writer) = Published::new(db.clone());
    service.draining_task("published-records writer", |stop| async move {
        published_writer(stop).await;
        Ok(())
    });
    let state = AppState {
        db: db.clone(),
        bus: bus.clone(),
        secret_key,
        routing_keys: Arc::new(routing_keys),
        settings: Arc::new(Settings {
            body_limits: BodyLimits {
                github: config.github_max_body_bytes,
                gitlab: config.gitlab_max_body_bytes,
                slack: config.slack_max_body_bytes,
                outline: config.outline_max_body_bytes,
            },
            concurrency: config.concurrency.max(1),
            request_timeout: Duration::from_secs(config.request_timeout_secs),
            body_timeout: Duration::from_secs(config.body_timeout_secs),
            inline_body_bytes: config
                .inline_body_bytes
                .unwrap_or(store::inbound::DEFAULT_INLINE_BODY_MAX),
            digest_window: Duration::from_secs(config.digest_window_secs),
            slack_tolerance: Duration::from_secs(config.slack_tolerance_secs),
            relay_hold: Duration::from_millis(config.relay_hold_ms),
            workspace_bytes_per_day: config.workspace_bytes_per_day,
            retention: [
                hours(config.retention_github_hours),
                hours(config.retention_gitlab_hours),
                hours(config.retention_slack_hours),
                hours(config.retention_outline_hours),
            ],
        }),
        inline_publish: Arc::new(Semaphore::new(INLINE_PUBLISHES)),
        published,
        endpoints: Arc::new(Endpoints::new(Duration::from_millis(
            config.endpoint_cache_ms,
        ))),
        budget: BodyBudget::new(config.buffer_budget_bytes),
        quota: Arc::new(DeliveryQuota::new(
            config.workspace_deliveries_per_sec,
            config.workspace_delivery_burst,
        )),
    };
    service.routes(routes::router(state));
    service.task("stream declaration", {
        let (bus, inline_setting) = (bus.clone(), config.inline_body_bytes);
        move |stop| async move {
            if bus.declare_streams_until_done(&stop).await {
                tracing::info!("JetStream streams declared");
                if let Some(max_body) = bus.max_body_bytes() {
                    check_inline_limit(inline_setting, max_body)?;
                }
            }
            // Done; idle so that only an unexpected end counts as one.
            stop.cancelled().await;
            Ok(())
        }
    });
    // The dispatch records this service writes are relayed by the one outbox relay.
    service.relay(&db, &bus);
    service.task("retention", {
        let (db, max_age) = (db.clone(), config.common.stream_settings().max_age);
        move |stop| async move {
            retention::run(db, max_age, stop).await;
            Ok(())
        }
    });
    // Readiness: Postgres and the supervised tasks, not NATS (a NATS outage must not take the
    // front door down).
    service.serve(&db, None, on_listen).await
}

runtime::launch!(Config, "ingress", run);
