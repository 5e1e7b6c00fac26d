//! outline-sync: keeps each Outline connection's own copy of its team's collections and
//! documents. This step runs the webhook path: deliveries of the connection's own subscription
//! on the durable consumer `outline-sync-events`, admitted and written forward-only by
//! `updatedAt`, deletions as dated tombstones, one generic event per change ([`webhooks`]).
//!
//! To come, on `sync-engine` with Outline as its vendor: activation (`auth.info`, then the
//! subscription registered subscription-first), INITIAL to a horizon, RECONCILIATION per
//! collection with confirm-before-tombstone, their `SyncJobs` registration (`outline-sync-jobs`,
//! `-lifecycle`) and the confirming read of deliveries a tenant's secret signed (until then a
//! claim writes nothing).
#![forbid(unsafe_code)]

pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use bus::Stream;
use bus::consumer::ConsumerSpec;
use sync_engine::SyncArgs;
use sync_engine::webhook::WebhookConsumer;
use tokio_util::sync::CancellationToken;

sync_engine::sync_flags! {
    /// outline-sync's spelling of the shared sync flags: `FORGESYNC_OUTLINE_*`, `--outline-*`.
    pub struct OutlineFlags {
        env: "OUTLINE",
        flag: "outline",
        vendor: "Outline",
        scope: "collection",
        reconcile_cron: "0 */5 * * * *",
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
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("sync", &self.sync)
            .field("api_url", &self.api_url)
            .finish_non_exhaustive()
    }
}

/// Runs outline-sync until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    // Checked at start, so a bad keyring fails now rather than at the first sync job.
    store::secrets::Keyring::parse(&config.secret_key)?;
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let pool = db.get_postgres_connection_pool().clone();

    let name = <Config as runtime::Launch>::NAME;
    let mut service = runtime::Service::new(name, &config.common, &shutdown);
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
            },
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    service.consumer(&bus, &db, events_spec, webhooks);
    // Its NATS identity (`bus::permissions`) keeps the relay to the rows outline-sync may publish.
    service.relay(&db, &bus);
    // Health and metrics only: outline-sync serves no API.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "outline-sync", run);
