//! gitlab-sync: mirrors GitLab projects' issues, merge requests and notes into Postgres. A
//! connection is activated in order (discovery, consumer, group hook, INITIAL: [`activation`]);
//! its hooks are applied by [`webhooks`]; its jobs (INITIAL, RECONCILIATION, BACKFILL) run on
//! `sync-engine` with GitLab as its vendor ([`sync`]); notes are reconciled by [`notes`]. Any
//! number of replicas share the work through the `sync_job` claims.
#![forbid(unsafe_code)]

pub mod activation;
pub mod mirror;
pub mod note_rows;
pub mod notes;
pub mod source;
pub mod sync;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gitlab_client::RetryPolicy;
use lifecycle_core::deletion::BlastRadius;
use store::entity::JobType;
use sync_engine::{BackfillPolicy, Engine, JobSchedule, SyncJobs, SyncSettings};
use tokio_util::sync::CancellationToken;

/// gitlab-sync's configuration.
#[derive(Clone, clap::Parser)]
#[command(name = "gitlab-sync", about = "forgesync GitLab mirror worker")]
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
        env = "FORGESYNC_GITLAB_RECONCILE_CRON",
        value_name = "FORGESYNC_GITLAB_RECONCILE_CRON",
        default_value = "0 0 3 * * *"
    )]
    pub reconcile_cron: String,

    /// Cron (with seconds) of the scheduled BACKFILL cycle, UTC, which drains the projects a
    /// requested backfill left pending; `off` disables it.
    #[arg(
        long,
        env = "FORGESYNC_GITLAB_BACKFILL_CRON",
        value_name = "FORGESYNC_GITLAB_BACKFILL_CRON",
        default_value = "0 */5 * * * *"
    )]
    pub backfill_cron: String,

    /// Seconds after a complete reconcile during which the scheduled pass skips a project
    /// (operators' on-demand reconciles always run).
    #[arg(
        long = "gitlab-reconcile-cooldown",
        env = "FORGESYNC_GITLAB_RECONCILE_COOLDOWN",
        value_name = "FORGESYNC_GITLAB_RECONCILE_COOLDOWN",
        default_value_t = 12 * 3600
    )]
    pub reconcile_cooldown_secs: u64,

    /// Passes a manual BACKFILL may take; after the last incomplete one it fails with its reason.
    /// Unset (the default), it passes until one pass is complete or it is canceled.
    #[arg(
        long = "gitlab-backfill-max-passes",
        env = "FORGESYNC_GITLAB_BACKFILL_MAX_PASSES",
        value_name = "FORGESYNC_GITLAB_BACKFILL_MAX_PASSES",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub backfill_max_passes: Option<u32>,

    /// Milliseconds a manual BACKFILL waits after its first incomplete pass; the wait doubles
    /// with every further pass, up to `FORGESYNC_GITLAB_BACKFILL_MAX_BACKOFF_MS`.
    #[arg(
        long = "gitlab-backfill-backoff-ms",
        env = "FORGESYNC_GITLAB_BACKFILL_BACKOFF_MS",
        value_name = "FORGESYNC_GITLAB_BACKFILL_BACKOFF_MS",
        default_value_t = 5_000
    )]
    pub backfill_backoff_ms: u64,

    /// The longest wait, in milliseconds, between two passes of a manual BACKFILL (never below
    /// the first wait).
    #[arg(
        long = "gitlab-backfill-max-backoff-ms",
        env = "FORGESYNC_GITLAB_BACKFILL_MAX_BACKOFF_MS",
        value_name = "FORGESYNC_GITLAB_BACKFILL_MAX_BACKOFF_MS",
        default_value_t = 300_000
    )]
    pub backfill_max_backoff_ms: u64,

    /// Pages of each class one BACKFILL request takes per pending project; the scheduled
    /// cycle drains the rest.
    #[arg(
        long = "gitlab-backfill-batch-pages",
        env = "FORGESYNC_GITLAB_BACKFILL_BATCH_PAGES",
        value_name = "FORGESYNC_GITLAB_BACKFILL_BATCH_PAGES",
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub backfill_batch_pages: u32,

    /// Seconds after a project's last backfill batch during which the scheduled cycle leaves it
    /// alone.
    #[arg(
        long = "gitlab-backfill-cooldown",
        env = "FORGESYNC_GITLAB_BACKFILL_COOLDOWN",
        value_name = "FORGESYNC_GITLAB_BACKFILL_COOLDOWN",
        default_value_t = 300
    )]
    pub backfill_cooldown_secs: u64,

    /// Nodes per GraphQL page (at most 100).
    #[arg(long, env = "FORGESYNC_GITLAB_PAGE_SIZE", value_name = "FORGESYNC_GITLAB_PAGE_SIZE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub page_size: u32,

    /// Pages one listing may take before it counts as truncated.
    #[arg(
        long,
        env = "FORGESYNC_GITLAB_PAGE_CAP",
        value_name = "FORGESYNC_GITLAB_PAGE_CAP",
        default_value_t = 10_000
    )]
    pub page_cap: u32,

    /// Milliseconds one GitLab request may take; a slower answer fails the read as `timeout`
    /// (retried like a transport failure first).
    #[arg(
        long = "gitlab-request-timeout-ms",
        env = "FORGESYNC_GITLAB_REQUEST_TIMEOUT_MS",
        value_name = "FORGESYNC_GITLAB_REQUEST_TIMEOUT_MS",
        default_value_t = 30_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub request_timeout_ms: u64,

    /// Jobs run at once by this replica.
    #[arg(
        long,
        env = "FORGESYNC_GITLAB_JOB_CONCURRENCY",
        value_name = "FORGESYNC_GITLAB_JOB_CONCURRENCY",
        default_value_t = 2
    )]
    pub job_concurrency: usize,

    /// Webhook deliveries handled at once by this replica.
    #[arg(
        long,
        env = "FORGESYNC_GITLAB_WEBHOOK_CONCURRENCY",
        value_name = "FORGESYNC_GITLAB_WEBHOOK_CONCURRENCY",
        default_value_t = 16
    )]
    pub webhook_concurrency: usize,

    /// Milliseconds between checks of the monitors for the webhook consumer's filters.
    #[arg(
        long,
        env = "FORGESYNC_GITLAB_FILTER_REFRESH_MS",
        value_name = "FORGESYNC_GITLAB_FILTER_REFRESH_MS",
        default_value_t = 5_000
    )]
    pub filter_refresh_ms: u64,

    /// Ingress's public base URL, where the group hooks we register deliver
    /// (`https://hooks.example.com`). Unset: no hook is registered.
    #[arg(
        long,
        env = "FORGESYNC_PUBLIC_WEBHOOK_URL",
        value_name = "FORGESYNC_PUBLIC_WEBHOOK_URL"
    )]
    pub public_webhook_url: Option<String>,

    /// `keyId=base64,...` route-credential keys, as ingress has them; the last signs the hooks
    /// we register.
    #[arg(
        long,
        env = "FORGESYNC_WEBHOOK_ROUTING_KEYS",
        value_name = "FORGESYNC_WEBHOOK_ROUTING_KEYS",
        hide_env_values = true
    )]
    pub routing_keys: Option<String>,

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
    /// One GitLab request's time limit.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

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

    /// How BACKFILL batches run, as the flags set them.
    pub fn backfill_batches(&self) -> sync::BackfillBatches {
        sync::BackfillBatches {
            pages: self.backfill_batch_pages,
            cooldown: Duration::from_secs(self.backfill_cooldown_secs),
        }
    }

    /// How hooks are registered; `None` without a public URL or routing keys.
    pub fn hook_settings(&self) -> anyhow::Result<Option<activation::HookSettings>> {
        match (&self.public_webhook_url, &self.routing_keys) {
            (Some(url), Some(keys)) => activation::HookSettings::new(url, keys).map(Some),
            _ => Ok(None),
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("reconcile_cron", &self.reconcile_cron)
            .field("backfill_cron", &self.backfill_cron)
            .field("page_size", &self.page_size)
            .field("page_cap", &self.page_cap)
            .field("job_concurrency", &self.job_concurrency)
            .field("job_lease_secs", &self.job_lease_secs)
            .finish_non_exhaustive()
    }
}

/// Runs gitlab-sync until `shutdown`, reading GitLab through gitlab-client.
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
        request_timeout: config.request_timeout(),
        retry: RetryPolicy::default(),
    };
    let factory_for_hooks = factory.clone();
    let activator = activation::Activator::new(
        &config,
        db.clone(),
        bus.clone(),
        Arc::new(factory.secret_key.clone()),
    )?;
    let engine = Engine::new(
        Arc::new(sync::GitlabVendor {
            pool: pool.clone(),
            factory,
            backfill: config.backfill_batches(),
            activator: Some(activator),
        }),
        pool,
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
                variable: "FORGESYNC_GITLAB_RECONCILE_CRON",
            },
            JobSchedule {
                job_type: JobType::Backfill,
                cron: &config.backfill_cron,
                variable: "FORGESYNC_GITLAB_BACKFILL_CRON",
            },
        ],
    }
    .register(&mut service, &mut schedules, &bus, &db)?;
    webhook_consumers(&config, &mut service, &bus, &db, factory_for_hooks);
    service.schedules(schedules);
    service.relay(&db, &bus);
    // Health and metrics only: gitlab-sync serves no API.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

/// Declares the webhook consumers: the hooks we registered (with route admission of undiscovered
/// projects) and operator-created hooks, each following its filters.
fn webhook_consumers(
    config: &Config,
    service: &mut runtime::Service,
    bus: &bus::Bus,
    db: &sea_orm::DatabaseConnection,
    factory: source::ClientFactory,
) {
    use sync_engine::webhook::{WebhookConsumer, follow};
    let pool = db.get_postgres_connection_pool().clone();
    let refresh = Duration::from_millis(config.filter_refresh_ms);
    let registered = Arc::new(WebhookConsumer::new(
        pool.clone(),
        webhooks::GitlabWebhooks {
            pool: pool.clone(),
            route: Some(webhooks::route::RouteAdmission {
                db: db.clone(),
                factory,
            }),
        },
    ));
    let operator = Arc::new(WebhookConsumer::new(
        pool.clone(),
        webhooks::GitlabWebhooks {
            pool: pool.clone(),
            route: None,
        },
    ));
    let registered_spec = webhooks::filters::connection_events_spec(config.webhook_concurrency);
    let operator_spec = webhooks::filters::project_events_spec(config.webhook_concurrency);
    service.task("registered hooks consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let filters = webhooks::filters::connection_filters(pool.clone());
        move |stop| follow::run(bus, db, registered_spec, registered, filters, refresh, stop)
    });
    service.task("operator hooks consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let filters = webhooks::filters::project_filters(pool);
        move |stop| follow::run(bus, db, operator_spec, operator, filters, refresh, stop)
    });
}

runtime::launch!(Config, "gitlab-sync", run);
