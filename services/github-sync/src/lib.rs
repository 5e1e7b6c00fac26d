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
use lifecycle_core::subject;
use store::entity::connection;
use sync_engine::webhook::{WebhookConsumer, follow};
use sync_engine::{Engine, SyncArgs, SyncJobs};
use tokio_util::sync::CancellationToken;

pub use source::GithubSource;

/// Builds the GitHub reader for a connection (App installation or PAT, its server URL).
#[async_trait::async_trait]
pub trait SourceFactory: Send + Sync {
    async fn source(&self, connection: &connection::Model)
    -> anyhow::Result<Arc<dyn GithubSource>>;
}

sync_engine::sync_flags! {
    /// github-sync's spelling of the shared sync flags: `FORGESYNC_GITHUB_*`, `--github-*`.
    pub struct GithubFlags {
        env: "GITHUB",
        flag: "github",
        vendor: "GitHub",
        scope: "repository",
        reconcile_cron: "0 0 3 * * *",
        reconcile_cooldown: 43200,
        // GitHub leaves no pending batches to drain (GitLab's cycle does): a BACKFILL is run by
        // operators, or on a schedule they opt in to.
        backfill_cron: {
            default: "off",
            help: "Cron (with seconds) of a scheduled BACKFILL, UTC; `off` (the default) leaves \
                   backfills to operators",
        },
    }
}

/// github-sync's configuration: the common and the shared sync flags, and GitHub's own.
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

    #[command(flatten)]
    pub sync: SyncArgs<GithubFlags>,

    /// Cron (with seconds) of the pass that asks GitHub to redeliver recently failed webhook
    /// deliveries of App connections, UTC; `off` disables it.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_REDELIVER_CRON",
        value_name = "FORGESYNC_GITHUB_REDELIVER_CRON",
        default_value = "0 */5 * * * *"
    )]
    pub redeliver_cron: String,

    /// Our own GitHub App's id: its check suites and runs are left out of a head's runs. Unset,
    /// an App connection's `app_id` is ours.
    #[arg(
        long,
        env = "FORGESYNC_GITHUB_APP_ID",
        value_name = "FORGESYNC_GITHUB_APP_ID"
    )]
    pub app_id: Option<u64>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("sync", &self.sync)
            .field("redeliver_cron", &self.redeliver_cron)
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
        request_timeout: config.sync.request_timeout(),
        egress: config.common.egress.clone(),
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
    for class in [conversation::COMMENTS, conversation::REVIEW_COMMENTS] {
        class.register_metrics();
    }
    let webhook_handler = Arc::new(
        WebhookConsumer::new(
            db.get_postgres_connection_pool().clone(),
            webhooks::GithubWebhooks::new(
                db.get_postgres_connection_pool().clone(),
                webhooks::Readers {
                    db: db.clone(),
                    factory,
                },
                config.sync.webhook_concurrency.max(1),
                config.sync.clock_skew(),
            ),
        )
        .with_clock_skew(config.sync.clock_skew()),
    );
    let owner_spec = ConsumerSpec {
        filter_subjects: vec![subject::github_owner_filter()],
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksGithub, "github-sync-owner-events")
    };
    service.consumer(&bus, &db, owner_spec, webhook_handler.clone());
    let repository_spec = ConsumerSpec {
        concurrency: config.sync.webhook_concurrency.max(1),
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksGithub, "github-sync-repository-events")
    };
    service.task("repository webhook consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let refresh = config.sync.filter_refresh();
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
