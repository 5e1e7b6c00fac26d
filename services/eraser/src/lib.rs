//! eraser: disconnect and purge leave nothing of a tenant's third-party content. A connection's
//! disconnection erases its copy of everything, orphan-guarded for the shared SCM mirror; a
//! workspace's purge erases each of its connections the same way, then the workspace's own rows
//! and subjects, and marks it purged. Every holder of content declares what it holds
//! ([`store::erasure::Erasable`], collected from the one list of vendors by
//! [`vendors::holders`]); each erasure is a durable record that resumes where it stopped
//! ([`records`]); `vendors::scan` proves the result.
#![forbid(unsafe_code)]

pub mod erase;
pub mod handlers;
pub mod records;
pub mod retention;
pub mod streams;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bus::Stream;
use bus::consumer::ConsumerSpec;
use lifecycle_core::subject;
use tokio_util::sync::CancellationToken;

pub use erase::{EraseError, Eraser, Outcome};

/// The eraser's configuration.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "eraser", about = "forgesync eraser: disconnect and purge")]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// Erasures run at once by this replica (per trigger kind).
    #[arg(
        long,
        env = "FORGESYNC_ERASER_CONCURRENCY",
        value_name = "FORGESYNC_ERASER_CONCURRENCY",
        default_value_t = 2
    )]
    pub concurrency: usize,

    /// Seconds without a sign of life (the runner reports progress while an erasure runs) after
    /// which a crashed replica's erasure is handed to another, which resumes it.
    #[arg(
        long = "eraser-ack-wait",
        env = "FORGESYNC_ERASER_ACK_WAIT",
        value_name = "FORGESYNC_ERASER_ACK_WAIT",
        default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub ack_wait_secs: u64,

    /// Cron (with seconds) of the pass that drops stream-ledger rows of messages older than the
    /// streams' max age, UTC; `off` disables it.
    #[arg(
        long,
        env = "FORGESYNC_ERASER_LEDGER_PRUNE_CRON",
        value_name = "FORGESYNC_ERASER_LEDGER_PRUNE_CRON",
        default_value = "0 */10 * * * *"
    )]
    pub ledger_prune_cron: String,

    /// Finished sync jobs, and activity entries, kept per connection (they survive erasure);
    /// older ones are pruned on `FORGESYNC_ERASER_AUDIT_PRUNE_CRON`.
    #[arg(
        long,
        env = "FORGESYNC_SYNC_JOB_KEEP",
        value_name = "FORGESYNC_SYNC_JOB_KEEP",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub sync_job_keep: u64,

    /// Cron (with seconds) of the sync-job pruner, UTC; `off` disables it.
    #[arg(
        long,
        env = "FORGESYNC_ERASER_AUDIT_PRUNE_CRON",
        value_name = "FORGESYNC_ERASER_AUDIT_PRUNE_CRON",
        default_value = "0 30 * * * *"
    )]
    pub audit_prune_cron: String,
}

/// Deliveries of one trigger before it is recorded dead. Every delivery resumes the erasure where
/// the last one stopped, and a replica killed mid-erasure costs one, so the budget is larger than
/// other consumers': a large erasure outlives many restarts (at the 10-minute backoff, about
/// sixteen hours of failing attempts).
const MAX_DELIVERIES: i64 = 100;

/// Runs the eraser until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let eraser = Eraser {
        db: db.clone(),
        bus: bus.clone(),
        holders: vendors::holders(),
    };
    let mut service = runtime::Service::new("eraser", &config.common, &shutdown);
    // The eraser's three lifecycle consumers differ only in their filter and durable name (named
    // literally at each call: the chart check reads them from here).
    let spec = |filter: String, base: ConsumerSpec| ConsumerSpec {
        filter_subjects: vec![filter],
        concurrency: config.concurrency.max(1),
        ack_wait: Duration::from_secs(config.ack_wait_secs),
        max_deliveries: MAX_DELIVERIES,
        ..base
    };
    service.consumer(
        &bus,
        &db,
        spec(
            subject::lifecycle_any_kind_filter("disconnected"),
            ConsumerSpec::new(Stream::Lifecycle, "eraser-disconnections"),
        ),
        Arc::new(handlers::DisconnectHandler {
            eraser: eraser.clone(),
        }),
    );
    service.consumer(
        &bus,
        &db,
        spec(
            subject::lifecycle_filter("workspace", bus::contracts::WorkspacePurged::TRANSITION),
            ConsumerSpec::new(Stream::Lifecycle, "eraser-purges"),
        ),
        Arc::new(handlers::PurgeHandler {
            eraser: eraser.clone(),
        }),
    );
    service.consumer(
        &bus,
        &db,
        spec(
            subject::lifecycle_any_kind_filter(bus::contracts::RepositoriesReleased::TRANSITION),
            ConsumerSpec::new(Stream::Lifecycle, "eraser-releases"),
        ),
        Arc::new(handlers::ReleaseHandler {
            eraser: eraser.clone(),
        }),
    );
    let mut schedules =
        runtime::ScheduleRunner::new(db.clone(), runtime::schedule::default_replica_id());
    if config.ledger_prune_cron.trim() != "off" {
        let (prune_db, max_age) = (
            db.clone(),
            Duration::from_secs(config.common.stream_max_age_secs),
        );
        schedules
            .add(
                "eraser-ledger-prune",
                &config.ledger_prune_cron,
                Duration::from_secs(300),
                move |_| {
                    let db = prune_db.clone();
                    async move {
                        let mut pruned = 0;
                        loop {
                            let n = streams::prune_ledger(&db, max_age, 10_000).await?;
                            pruned += n;
                            if n < 10_000 {
                                break;
                            }
                        }
                        tracing::info!(pruned, "stream ledger pruned");
                        Ok(())
                    }
                },
            )
            .context("FORGESYNC_ERASER_LEDGER_PRUNE_CRON")?;
    }
    if config.audit_prune_cron.trim() != "off" {
        let (prune_db, keep) = (db.clone(), config.sync_job_keep);
        schedules
            .add(
                "eraser-sync-job-prune",
                &config.audit_prune_cron,
                Duration::from_secs(300),
                move |_| {
                    let db = prune_db.clone();
                    async move {
                        let mut pruned = 0;
                        loop {
                            let n = retention::prune(&db, keep, 10_000).await?;
                            pruned += n;
                            if n == 0 {
                                break;
                            }
                        }
                        tracing::info!(pruned, keep, "sync jobs and activity pruned");
                        Ok(())
                    }
                },
            )
            .context("FORGESYNC_ERASER_AUDIT_PRUNE_CRON")?;
    }
    service.schedules(schedules);
    // A purge disconnects connections, which announces them through the outbox.
    service.relay(&db, &bus);
    // Health and metrics only: progress is read through control-api.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "eraser", run);
