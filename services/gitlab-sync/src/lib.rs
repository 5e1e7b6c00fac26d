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
pub mod org;
pub mod readiness;
pub mod source;
pub mod sync;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gitlab_client::RetryPolicy;
use sync_engine::{Engine, SyncArgs, SyncJobs};
use tokio_util::sync::CancellationToken;

sync_engine::sync_flags! {
    /// gitlab-sync's spelling of the shared sync flags: `FORGESYNC_GITLAB_*`, `--gitlab-*`.
    pub struct GitlabFlags {
        env: "GITLAB",
        flag: "gitlab",
        vendor: "GitLab",
        scope: "project",
        reconcile_cron: "0 0 3 * * *",
        reconcile_cooldown: 43200,
        // A BACKFILL request takes a batch per project and leaves the rest pending: the scheduled
        // cycle drains it, so it runs by default.
        backfill_cron: {
            default: "0 */5 * * * *",
            help: "Cron (with seconds) of the scheduled BACKFILL cycle, UTC, which drains the \
                   projects a requested backfill left pending; `off` disables it",
        },
    }
}

/// gitlab-sync's configuration: the common and the shared sync flags, and GitLab's own.
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

    #[command(flatten)]
    pub sync: SyncArgs<GitlabFlags>,

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
}

impl Config {
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
            .field("sync", &self.sync)
            .field("backfill_batch_pages", &self.backfill_batch_pages)
            .field("backfill_cooldown_secs", &self.backfill_cooldown_secs)
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
        request_timeout: config.sync.request_timeout(),
        retry: RetryPolicy::default(),
        egress: config.common.egress.clone(),
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
    notes::NOTES.register_metrics();
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
    use sync_engine::webhook::hint::Confirmations;
    use sync_engine::webhook::{WebhookConsumer, follow};
    let pool = db.get_postgres_connection_pool().clone();
    let refresh = config.sync.filter_refresh();
    // One cache of readers for both consumers: a connection's client serves its hooks on either.
    let clients = Arc::new(source::Readers::default());
    let registered = Arc::new(
        WebhookConsumer::new(
            pool.clone(),
            webhooks::GitlabWebhooks {
                pool: pool.clone(),
                route: Some(webhooks::route::RouteAdmission {
                    db: db.clone(),
                    factory: factory.clone(),
                }),
                readers: factory.clone(),
                clients: clients.clone(),
                confirmations: Confirmations::for_workers(
                    "gitlab",
                    config.sync.webhook_concurrency.max(1),
                ),
                clock_skew: config.sync.clock_skew(),
            },
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    let operator = Arc::new(
        WebhookConsumer::new(
            pool.clone(),
            webhooks::GitlabWebhooks {
                pool: pool.clone(),
                route: None,
                readers: factory,
                clients,
                confirmations: Confirmations::for_workers(
                    "gitlab",
                    config.sync.webhook_concurrency.max(1),
                ),
                clock_skew: config.sync.clock_skew(),
            },
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    let registered_spec =
        webhooks::filters::connection_events_spec(config.sync.webhook_concurrency);
    let operator_spec = webhooks::filters::project_events_spec(config.sync.webhook_concurrency);
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
