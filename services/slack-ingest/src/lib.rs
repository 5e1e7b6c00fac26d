//! slack-ingest: keeps the Slack channels a workspace consented to, forward-only from the
//! announcement that told their members, and nothing else. Events API deliveries are admitted
//! per message under the channel's consent ([`webhooks`]); operators' channel commands consent,
//! pause, resume and withdraw ([`commands`]); RECONCILIATION replays each ACTIVE channel's recent
//! history on `sync-engine` with Slack as its vendor ([`sync`]), never sweeping: deletions arrive
//! only as events. Activation checks the token's team and records the directory ([`directory`]).
#![forbid(unsafe_code)]

pub mod commands;
pub mod directory;
pub mod erase;
pub mod metrics;
pub mod source;
pub mod sync;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bus::Stream;
use bus::consumer::ConsumerSpec;
use lifecycle_core::forward::SlackTs;
use slack_mirror::channel::Channel;
use slack_mirror::events::{self, MessageChange};
use slack_mirror::message::Written;
use sync_engine::webhook::WebhookConsumer;
use sync_engine::{Engine, SyncArgs, SyncJobs};
use tokio_util::sync::CancellationToken;

sync_engine::sync_flags! {
    /// slack-ingest's spelling of the shared sync flags: `FORGESYNC_SLACK_*`, `--slack-*`.
    pub struct SlackFlags {
        env: "SLACK",
        flag: "slack",
        vendor: "Slack",
        scope: "channel",
        reconcile_cron: "0 0 4 * * *",
        reconcile_cooldown: 43200,
    }
}

/// slack-ingest's configuration: the common and the shared sync flags, and Slack's own.
#[derive(Clone, clap::Parser)]
#[command(name = "slack-ingest", about = "forgesync Slack ingest worker")]
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
    pub sync: SyncArgs<SlackFlags>,

    /// Slack's Web API base URL (the simulator's, locally).
    #[arg(
        long = "slack-api-url",
        env = "FORGESYNC_SLACK_API_URL",
        value_name = "FORGESYNC_SLACK_API_URL",
        default_value = "https://slack.com/api/"
    )]
    pub api_url: String,

    /// Days of a channel's history a RECONCILIATION replays at most (never before its consent).
    #[arg(
        long = "slack-lookback-days",
        env = "FORGESYNC_SLACK_LOOKBACK_DAYS",
        value_name = "FORGESYNC_SLACK_LOOKBACK_DAYS",
        default_value_t = 7,
        value_parser = clap::value_parser!(u64).range(1..=90)
    )]
    pub lookback_days: u64,

    /// Slack Web API calls one job may make; a replay that spends them stops, deleting nothing.
    #[arg(
        long = "slack-calls-per-job",
        env = "FORGESYNC_SLACK_CALLS_PER_JOB",
        value_name = "FORGESYNC_SLACK_CALLS_PER_JOB",
        default_value_t = 5_000,
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
            .field("lookback_days", &self.lookback_days)
            .field("calls_per_job", &self.calls_per_job)
            .finish_non_exhaustive()
    }
}

/// Records the generic event of a message write; returns whether the mirror changed.
pub(crate) async fn record_written(
    txn: &mut sqlx::PgConnection,
    channel: &Channel,
    ts: SlackTs,
    written: Written,
    edited: Option<SlackTs>,
) -> Result<bool, sqlx::Error> {
    let (id, change) = match written {
        Written::Unchanged => return Ok(false),
        Written::Inserted(id) => (id, MessageChange::Posted),
        Written::Edited(id) => match edited {
            Some(at) => (id, MessageChange::Edited(at)),
            None => return Ok(true),
        },
        Written::Tombstoned(id) => (id, MessageChange::Deleted),
    };
    events::message(txn, channel, id, ts, change).await?;
    Ok(true)
}

/// Runs slack-ingest until `shutdown`.
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
        secret_key,
        client: slack_client::Settings {
            base_url: config.api_url.clone(),
            retry: vendor_http::RetryPolicy::default(),
            request_timeout: config.sync.request_timeout(),
        },
        calls_per_job: config.calls_per_job,
    };
    metrics::register();
    let engine = Engine::new(
        Arc::new(sync::SlackVendor {
            pool: pool.clone(),
            factory: factory.clone(),
            replay: sync::Replay {
                lookback: Duration::from_secs(config.lookback_days * 86_400),
            },
            page_size: 200,
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
    let events_spec = ConsumerSpec {
        filter_subjects: vec!["slack.>".to_owned()],
        concurrency: config.sync.webhook_concurrency.max(1),
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksSlack, format!("{name}-events"))
    };
    let webhooks = Arc::new(
        WebhookConsumer::new(
            pool.clone(),
            webhooks::SlackWebhooks {
                pool: pool.clone(),
                bus: bus.clone(),
                clock_skew: config.sync.clock_skew(),
                factory: factory.clone(),
                confirmations: sync_engine::webhook::hint::Confirmations::for_workers(
                    "slack",
                    config.sync.webhook_concurrency.max(1),
                ),
            },
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    service.consumer(&bus, &db, events_spec, webhooks);
    let channels_spec = ConsumerSpec {
        filter_subjects: vec![
            lifecycle_core::subject::lifecycle_filter("slack", slack_mirror::command::TRANSITION),
            lifecycle_core::subject::lifecycle_filter("slack", "resumed"),
        ],
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::Lifecycle, format!("{name}-channels"))
    };
    service.consumer(
        &bus,
        &db,
        channels_spec,
        Arc::new(commands::Channels {
            pool,
            db: db.clone(),
            bus: bus.clone(),
            factory,
        }),
    );
    service.schedules(schedules);
    service.relay(&db, &bus);
    // Health and metrics only: slack-ingest serves no API.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "slack-ingest", run);
