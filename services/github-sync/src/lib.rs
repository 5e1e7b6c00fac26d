//! github-sync: mirrors GitHub repositories' issues and pull requests into Postgres with jobs
//! that never delete on doubt. INITIAL on activation, RECONCILIATION on a schedule and on demand,
//! BACKFILL on demand; any number of replicas share the work through the `sync_job` claims. The
//! jobs run on `sync-engine` with GitHub as its vendor ([`sync::GithubVendor`]); the rest is
//! GitHub's own: webhooks, check runs, misfiled work, redelivery.
#![forbid(unsafe_code)]

pub mod check_runs;
pub mod conversation;
pub mod github;
pub mod mirror;
pub mod redeliver;
pub mod source;
pub mod sync;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bus::Stream;
use bus::consumer::ConsumerSpec;
use lifecycle_core::deletion::BlastRadius;
use lifecycle_core::subject;
use store::entity::{JobType, connection};
use sync_engine::webhook::{WebhookConsumer, follow};
use sync_engine::{BackfillPolicy, Engine, JobSchedule, SyncJobs, SyncSettings};
use tokio_util::sync::CancellationToken;

pub use source::GithubSource;

/// Builds the GitHub reader for a connection (App installation or PAT, its server URL).
#[async_trait::async_trait]
pub trait SourceFactory: Send + Sync {
    async fn source(&self, connection: &connection::Model)
    -> anyhow::Result<Arc<dyn GithubSource>>;
}

/// github-sync's configuration.
#[derive(Clone, clap::Parser)]
#[command(name = "github-sync", about = "forgesync GitHub mirror worker")]
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

    /// Cron (with seconds) of the scheduled RECONCILIATION, UTC; `off` disables it. A replica
    /// that starts after a due instant runs that instant's reconcile once (claimed in Postgres).
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_RECONCILE_CRON",
        value_name = "FORGESYNC_GITHUB_RECONCILE_CRON",
        default_value = "0 0 3 * * *"
    )]
    pub reconcile_cron: String,

    /// Cron (with seconds) of a scheduled BACKFILL, UTC; `off` (the default) leaves backfills to
    /// operators.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_BACKFILL_CRON",
        value_name = "FORGESYNC_GITHUB_BACKFILL_CRON",
        default_value = "off"
    )]
    pub backfill_cron: String,

    /// Cron (with seconds) of the pass that asks GitHub to redeliver recently failed webhook
    /// deliveries of App connections, UTC; `off` disables it.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_REDELIVER_CRON",
        value_name = "FORGESYNC_GITHUB_REDELIVER_CRON",
        default_value = "0 */5 * * * *"
    )]
    pub redeliver_cron: String,

    /// Seconds after a complete reconcile during which the scheduled pass skips a repository
    /// (operators' on-demand reconciles always run).
    #[arg(
        long = "github-reconcile-cooldown",
        env = "FORGESYNC_GITHUB_RECONCILE_COOLDOWN",
        value_name = "FORGESYNC_GITHUB_RECONCILE_COOLDOWN",
        default_value_t = 12 * 3600
    )]
    pub reconcile_cooldown_secs: u64,

    /// Passes a manual BACKFILL may take; after the last incomplete one it fails with its reason.
    /// Unset (the default), it passes until one pass is complete or it is canceled.
    #[arg(
        long = "github-backfill-max-passes",
        env = "FORGESYNC_GITHUB_BACKFILL_MAX_PASSES",
        value_name = "FORGESYNC_GITHUB_BACKFILL_MAX_PASSES",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub backfill_max_passes: Option<u32>,

    /// Milliseconds a manual BACKFILL waits after its first incomplete pass; the wait doubles
    /// with every further pass, up to `FORGESYNC_GITHUB_BACKFILL_MAX_BACKOFF_MS`.
    #[arg(
        long = "github-backfill-backoff-ms",
        env = "FORGESYNC_GITHUB_BACKFILL_BACKOFF_MS",
        value_name = "FORGESYNC_GITHUB_BACKFILL_BACKOFF_MS",
        default_value_t = 5_000
    )]
    pub backfill_backoff_ms: u64,

    /// The longest wait, in milliseconds, between two passes of a manual BACKFILL (never below
    /// the first wait).
    #[arg(
        long = "github-backfill-max-backoff-ms",
        env = "FORGESYNC_GITHUB_BACKFILL_MAX_BACKOFF_MS",
        value_name = "FORGESYNC_GITHUB_BACKFILL_MAX_BACKOFF_MS",
        default_value_t = 300_000
    )]
    pub backfill_max_backoff_ms: u64,

    /// Nodes per GraphQL page (at most 100).
    #[arg(long, env = "FORGESYNC_GITHUB_PAGE_SIZE", value_name = "FORGESYNC_GITHUB_PAGE_SIZE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub page_size: u32,

    /// Milliseconds one GitHub request may take; a slower answer fails the read as `timeout`
    /// (retried like a transport failure first).
    #[arg(
        long = "github-request-timeout-ms",
        env = "FORGESYNC_GITHUB_REQUEST_TIMEOUT_MS",
        value_name = "FORGESYNC_GITHUB_REQUEST_TIMEOUT_MS",
        default_value_t = 30_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub request_timeout_ms: u64,

    /// Pages one listing may take before it counts as truncated.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_PAGE_CAP",
        value_name = "FORGESYNC_GITHUB_PAGE_CAP",
        default_value_t = 10_000
    )]
    pub page_cap: u32,

    /// Jobs run at once by this replica.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_JOB_CONCURRENCY",
        value_name = "FORGESYNC_GITHUB_JOB_CONCURRENCY",
        default_value_t = 2
    )]
    pub job_concurrency: usize,

    /// Webhook deliveries handled at once by this replica.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_WEBHOOK_CONCURRENCY",
        value_name = "FORGESYNC_GITHUB_WEBHOOK_CONCURRENCY",
        default_value_t = 16
    )]
    pub webhook_concurrency: usize,

    /// Milliseconds between checks of the monitors for the webhook consumer's filters.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_FILTER_REFRESH_MS",
        value_name = "FORGESYNC_GITHUB_FILTER_REFRESH_MS",
        default_value_t = 5_000
    )]
    pub filter_refresh_ms: u64,

    /// Our own GitHub App's id: its check suites and runs are left out of a head's runs. Unset,
    /// an App connection's `app_id` is ours.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_APP_ID",
        value_name = "FORGESYNC_GITHUB_APP_ID"
    )]
    pub app_id: Option<u64>,

    /// Seconds a job's claim lasts without a heartbeat before another replica may take it.
    #[arg(
        long = "job-lease",
        env = "FORGESYNC_JOB_LEASE",
        value_name = "FORGESYNC_JOB_LEASE",
        default_value_t = 60
    )]
    pub job_lease_secs: u64,
}

impl Config {
    /// The engine's tunables, as the flags set them.
    pub fn sync_settings(&self) -> SyncSettings {
        let first_backoff = Duration::from_millis(self.backfill_backoff_ms);
        SyncSettings {
            page_size: self.page_size,
            page_cap: self.page_cap,
            blast_radius: BlastRadius::default(),
            reconcile_cooldown: Duration::from_secs(self.reconcile_cooldown_secs),
            backfill: BackfillPolicy {
                max_passes: self.backfill_max_passes.and_then(std::num::NonZeroU32::new),
                first_backoff,
                max_backoff: first_backoff.max(Duration::from_millis(self.backfill_max_backoff_ms)),
            },
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("reconcile_cron", &self.reconcile_cron)
            .field("redeliver_cron", &self.redeliver_cron)
            .field("page_size", &self.page_size)
            .field("page_cap", &self.page_cap)
            .field("job_concurrency", &self.job_concurrency)
            .field("job_lease_secs", &self.job_lease_secs)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// Runs github-sync until `shutdown`, reading GitHub through github-client.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let secret_key = store::secrets::Keyring::parse(&config.secret_key)?;
    let db = config.common.connect_db().await?;
    let clients = Arc::new(github::ClientFactory {
        db: db.clone(),
        secret_key,
        app_id: config.app_id,
        readers: Default::default(),
        request_timeout: Duration::from_millis(config.request_timeout_ms),
    });
    let factory: Arc<dyn SourceFactory> = clients.clone();
    let bus = config.common.connect_bus().await?;
    let replica = runtime::schedule::default_replica_id();
    let engine = Engine::new(
        Arc::new(sync::GithubVendor {
            pool: db.get_postgres_connection_pool().clone(),
            factory: factory.clone(),
        }),
        db.get_postgres_connection_pool().clone(),
        replica.clone(),
        Duration::from_secs(config.job_lease_secs),
        config.sync_settings(),
    );

    let name = <Config as runtime::Launch>::NAME;
    let mut service = runtime::Service::new(name, &config.common, &shutdown);
    let mut schedules = runtime::ScheduleRunner::new(db.clone(), replica);
    SyncJobs {
        service: name,
        engine,
        concurrency: config.job_concurrency,
        schedules: &[
            JobSchedule {
                job_type: JobType::Reconciliation,
                cron: &config.reconcile_cron,
                variable: "FORGESYNC_GITHUB_RECONCILE_CRON",
            },
            JobSchedule {
                job_type: JobType::Backfill,
                cron: &config.backfill_cron,
                variable: "FORGESYNC_GITHUB_BACKFILL_CRON",
            },
        ],
    }
    .register(&mut service, &mut schedules, &bus, &db)?;
    let webhook_handler = Arc::new(WebhookConsumer::new(
        db.get_postgres_connection_pool().clone(),
        webhooks::GithubWebhooks {
            pool: db.get_postgres_connection_pool().clone(),
            readers: webhooks::Readers {
                db: db.clone(),
                factory,
            },
        },
    ));
    let owner_spec = ConsumerSpec {
        filter_subjects: vec![subject::github_owner_filter()],
        ..ConsumerSpec::new(Stream::WebhooksGithub, "github-sync-owner-events")
    };
    service.consumer(&bus, &db, owner_spec, webhook_handler.clone());
    let repository_spec = ConsumerSpec {
        concurrency: config.webhook_concurrency.max(1),
        ..ConsumerSpec::new(Stream::WebhooksGithub, "github-sync-repository-events")
    };
    service.task("repository webhook consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let refresh = Duration::from_millis(config.filter_refresh_ms);
        let filters =
            webhooks::filters::repository_filters(db.get_postgres_connection_pool().clone());
        move |stop| {
            follow::run(
                bus,
                db,
                repository_spec,
                webhook_handler,
                filters,
                refresh,
                stop,
            )
        }
    });
    if config.redeliver_cron.trim() != "off" {
        let (db, clients) = (db.clone(), clients.clone());
        schedules
            .add(
                "github-redeliver",
                &config.redeliver_cron,
                Duration::from_secs(300),
                move |run| {
                    let (db, clients) = (db.clone(), clients.clone());
                    async move {
                        let summary = redeliver::run_pass(
                            &db,
                            &clients,
                            time::OffsetDateTime::now_utc(),
                            &run.cancel,
                        )
                        .await?;
                        tracing::info!(?summary, "GitHub redelivery pass done");
                        Ok(())
                    }
                },
            )
            .context("FORGESYNC_GITHUB_REDELIVER_CRON")?;
    }
    service.schedules(schedules);
    service.relay(&db, &bus);
    // Health and metrics only: github-sync serves no API.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "github-sync", run);
