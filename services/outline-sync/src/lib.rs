//! outline-sync: keeps each Outline connection's own copy of its team's collections and
//! documents. Deliveries of the connection's own subscription arrive on the durable consumer
//! `outline-sync-events`, admitted and written forward-only by `updatedAt`, deletions as dated
//! tombstones, one generic event per change ([`webhooks`]). On `sync-engine` with Outline as its
//! vendor ([`sync`], jobs on `outline-sync-jobs` and `-lifecycle`): activation registers the
//! subscription first ([`activation`]), INITIAL reads recent documents to a horizon, and
//! RECONCILIATION lists each collection whole, tombstoning only what Outline confirms gone.
//! A claim signed by a tenant's secret writes nothing of its own: what it names is read from
//! Outline with the connection's token and that is written.
#![forbid(unsafe_code)]

pub mod activation;
pub mod source;
pub mod sync;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use bus::Stream;
use bus::consumer::ConsumerSpec;
use sync_engine::webhook::WebhookConsumer;
use sync_engine::{Engine, SyncArgs, SyncJobs};
use tokio_util::sync::CancellationToken;

sync_engine::sync_flags! {
    /// outline-sync's spelling of the shared sync flags: `FORGESYNC_OUTLINE_*`, `--outline-*`.
    pub struct OutlineFlags {
        env: "OUTLINE",
        flag: "outline",
        vendor: "Outline",
        scope: "collection",
        reconcile_cron: "0 */5 * * * *",
        reconcile_cooldown: 21600,
    }
}

/// outline-sync's configuration: the common and the shared sync flags, and Outline's own.
#[derive(Clone, clap::Parser)]
#[command(name = "outline-sync", about = "forgesync Outline sync worker")]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// Keyring of 32-byte AES-256-GCM keys for connection secrets: `id:base64,...` (the last
    /// seals, any opens) or one bare base64 key.
    #[arg(
        long,
        env = "FORGESYNC_SECRET_KEY",
        value_name = "FORGESYNC_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: String,

    #[command(flatten)]
    pub sync: SyncArgs<OutlineFlags>,

    /// Outline's base URL (the simulator's, locally); its API is under `/api/`.
    #[arg(
        long = "outline-api-url",
        env = "FORGESYNC_OUTLINE_API_URL",
        value_name = "FORGESYNC_OUTLINE_API_URL",
        default_value = "https://app.getoutline.com"
    )]
    pub api_url: String,

    /// Ingress's public base URL, where the webhook subscriptions we create at Outline deliver
    /// (`https://hooks.example.com`). Unset: no subscription is created.
    #[arg(
        long,
        env = "FORGESYNC_PUBLIC_WEBHOOK_URL",
        value_name = "FORGESYNC_PUBLIC_WEBHOOK_URL"
    )]
    pub public_webhook_url: Option<String>,

    /// Days of recent documents an INITIAL reads (by `updatedAt`); older ones wait for the
    /// collection's first clean RECONCILIATION.
    #[arg(
        long = "outline-horizon-days",
        env = "FORGESYNC_OUTLINE_HORIZON_DAYS",
        value_name = "FORGESYNC_OUTLINE_HORIZON_DAYS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3650)
    )]
    pub horizon_days: u64,

    /// Outline API attempts one job may send; a pass that spends them stops, deleting nothing,
    /// and the collections it did not finish keep awaiting a clean pass.
    #[arg(
        long = "outline-calls-per-job",
        env = "FORGESYNC_OUTLINE_CALLS_PER_JOB",
        value_name = "FORGESYNC_OUTLINE_CALLS_PER_JOB",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub calls_per_job: u64,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("sync", &self.sync)
            .field("api_url", &self.api_url)
            .field("public_webhook_url", &self.public_webhook_url)
            .field("horizon_days", &self.horizon_days)
            .field("calls_per_job", &self.calls_per_job)
            .finish_non_exhaustive()
    }
}

/// Runs outline-sync until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let secret_key = store::secrets::Keyring::parse(&config.secret_key)?;
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let replica = runtime::schedule::default_replica_id();
    let pool = db.get_postgres_connection_pool().clone();
    let factory = source::ClientFactory {
        db: db.clone(),
        secret_key: secret_key.clone(),
        client: outline_client::Settings {
            base_url: config.api_url.clone(),
            retry: vendor_http::RetryPolicy::default(),
            request_timeout: config.sync.request_timeout(),
            egress: config.common.egress.clone(),
            ..outline_client::Settings::default()
        },
        calls_per_job: config.calls_per_job,
    };
    let engine = Engine::new(
        Arc::new(sync::OutlineVendor {
            pool: pool.clone(),
            factory: factory.clone(),
            horizon: Duration::from_secs(config.horizon_days * 86_400),
            clock_skew: config.sync.clock_skew(),
            // An empty URL (the chart's default) registers nothing, like an unset one.
            activator: Some(activation::Activator::new(
                factory.clone(),
                config
                    .public_webhook_url
                    .clone()
                    .filter(|u| !u.trim().is_empty()),
                config.sync.page_cap,
            )),
        }),
        pool.clone(),
        replica.clone(),
        config.sync.job_lease(),
        config.sync.sync_settings(),
    );

    let name = <Config as runtime::Launch>::NAME;
    let mut service = runtime::Service::new(name, &config.common, &shutdown);
    let mut schedules = runtime::ScheduleRunner::new(db.clone(), replica);
    SyncJobs {
        service: name,
        engine,
        concurrency: config.sync.job_concurrency,
        schedules: &config.sync.job_schedules(),
    }
    .register(&mut service, &mut schedules, &bus, &db)?;
    // Every Outline subject is routed by connection (Outline assigns the subscription's id).
    let events_spec = ConsumerSpec {
        filter_subjects: vec![lifecycle_core::subject::by_connection_filter(
            Stream::WebhooksOutline.root_token(),
        )],
        concurrency: config.sync.webhook_concurrency.max(1),
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksOutline, format!("{name}-events"))
    };
    let webhooks = Arc::new(
        WebhookConsumer::new(
            pool.clone(),
            webhooks::OutlineWebhooks {
                pool,
                clock_skew: config.sync.clock_skew(),
                factory,
                confirmations: sync_engine::webhook::hint::Confirmations::for_workers(
                    "outline",
                    config.sync.webhook_concurrency.max(1),
                ),
            },
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    service.consumer(&bus, &db, events_spec, webhooks);
    service.schedules(schedules);
    // Its NATS identity (`bus::permissions`) keeps the relay to the rows outline-sync may publish.
    service.relay(&db, &bus);
    // Health and metrics only: outline-sync serves no API.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "outline-sync", run);
