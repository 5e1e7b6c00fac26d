//! provider-repair: removes what forgesync created at a vendor once the connection that holds
//! it leaves active (a suspension, an uninstall, a disconnection), and never claims a removal it
//! cannot prove.
//!
//! The fences captured by the lifecycle transition (`store::repair`) are the truth; a lifecycle
//! message only wakes the dispatcher, and a schedule revisits due fences whatever woke them. An
//! schedule also captures what resolved after its connection left active (a late creation). An
//! attempt inspects the fence (its epoch), checks ownership at the vendor, takes the dispatch
//! permit in a short transaction under the identity lock (from then on the attempt counts as
//! sent), calls the vendor outside any transaction, and records the outcome. The rules are
//! `lifecycle_core::repair`'s; each kind of resource is removed by the [`Remover`] its vendor
//! path provides ([`gitlab::GroupHooks`]).
#![forbid(unsafe_code)]

pub mod github;
pub mod gitlab;
pub mod metrics;
pub mod outline;
pub mod slack;
mod vendors;

pub use vendors::VendorArgs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bus::Stream;
use bus::consumer::{ConsumerSpec, Delivery, Handler, HandlerError, Settle};
use bus::contracts::LifecycleTransition;
use lifecycle_core::repair::{DispatchOutcome, FenceStatus, Ownership};
use lifecycle_core::subject;
use sqlx::PgPool;
use store::registration::ResourceKind;
use store::repair::{Decision, Repair};
use store::secrets::Keyring;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// provider-repair's configuration.
#[derive(Clone, clap::Parser)]
#[command(
    name = "provider-repair",
    about = "forgesync provider repair: removes what we created at vendors"
)]
pub struct Config {
    #[command(flatten)]
    pub common: runtime::CommonArgs,

    /// Keyring of connection secrets (`id:base64,...` or one bare base64 key): it opens the
    /// removal credentials sealed into repair references.
    #[arg(
        long,
        env = "FORGESYNC_SECRET_KEY",
        value_name = "FORGESYNC_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: String,

    /// Cron (with seconds) of the pass that revisits due fences, UTC; `off` disables it (then
    /// only lifecycle messages wake the dispatcher).
    #[arg(
        long = "provider-repair-cron",
        env = "FORGESYNC_PROVIDER_REPAIR_CRON",
        value_name = "FORGESYNC_PROVIDER_REPAIR_CRON",
        default_value = "*/30 * * * * *"
    )]
    pub cron: String,

    /// Seconds a vendor call may take before its outcome counts as unknown.
    #[arg(
        long = "provider-repair-request-timeout",
        env = "FORGESYNC_PROVIDER_REPAIR_REQUEST_TIMEOUT",
        value_name = "FORGESYNC_PROVIDER_REPAIR_REQUEST_TIMEOUT",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub request_timeout_secs: u64,

    /// The API bases of Outline and Slack, and our GitHub App.
    #[command(flatten)]
    pub vendors: VendorArgs,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("common", &self.common)
            .field("cron", &self.cron)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("vendors", &self.vendors)
            .finish_non_exhaustive()
    }
}

/// What an ownership check at the vendor found, and why, for the record.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub ownership: Ownership,
    pub detail: String,
}

/// Removes one kind of resource at its vendor. Never proves more than the vendor said: an
/// unreadable or partial listing is [`Ownership::Unproven`], a refused credential
/// [`Ownership::CredentialRefused`].
#[async_trait::async_trait]
pub trait Remover: Send + Sync {
    /// The kind it removes, as its vendor declares it.
    fn kind(&self) -> ResourceKind;

    /// Whether it removes with a credential sealed into the repair's reference; without one
    /// (a GitHub App's own), `inspect` and `remove` get an empty credential.
    fn needs_credential(&self) -> bool {
        true
    }

    /// Checks who holds the resource now, with the removal credential.
    async fn inspect(&self, repair: &Repair, credential: &[u8]) -> Inspected;

    /// Removes it once; the outcome and a detail for the record.
    async fn remove(&self, repair: &Repair, credential: &[u8]) -> (DispatchOutcome, String);
}

/// A token-authenticated vendor's client inputs for one repair: the removal credential as the
/// token it is, and the API base (the instance the resource was captured at, else `configured`,
/// else the vendor's `default`).
pub(crate) fn token_and_base<'c>(
    repair: &Repair,
    credential: &'c [u8],
    configured: &str,
    default: &str,
) -> Result<(&'c str, String), String> {
    let token = std::str::from_utf8(credential)
        .map_err(|_| "the removal credential is not UTF-8".to_owned())?;
    let base = [repair.instance.as_str(), configured]
        .into_iter()
        .find(|b| !b.is_empty())
        .unwrap_or(default)
        .to_owned();
    Ok((token, base))
}

/// One request per vendor call: a retried removal would hide whether the first one landed.
pub(crate) fn one_attempt() -> vendor_http::RetryPolicy {
    vendor_http::RetryPolicy {
        max_retries: 0,
        ..vendor_http::RetryPolicy::default()
    }
}

/// Claims due fences and attempts each.
#[derive(Clone)]
pub struct Dispatcher {
    pub db: sea_orm::DatabaseConnection,
    pub pool: PgPool,
    pub keyring: Keyring,
    pub removers: Vec<Arc<dyn Remover>>,
    /// Fences claimed at once.
    pub batch: i64,
    /// How long a claim keeps other replicas off a fence.
    pub lease: time::Duration,
}

impl Dispatcher {
    /// Captures what no transition captured (a creation that resolved after its connection left
    /// active, a lost wake), then attempts every due fence; how many it attempted.
    pub async fn revisit(&self) -> anyhow::Result<u64> {
        let late = store::repair::capture_late(&self.db, 100, "provider-repair").await?;
        if late > 0 {
            tracing::info!(late, "late provider resources captured");
        }
        self.run_due().await
    }

    /// Attempts every due fence, batch by batch, until none is due; how many it attempted.
    pub async fn run_due(&self) -> anyhow::Result<u64> {
        let mut attempted = 0;
        loop {
            let ids = store::repair::claim_due(&self.pool, self.batch, self.lease).await?;
            if ids.is_empty() {
                if attempted > 0
                    && let Err(e) = metrics::observe(&self.pool).await
                {
                    tracing::debug!(error = %e, "reading the fences for metrics failed");
                }
                return Ok(attempted);
            }
            for id in ids {
                self.attempt(id).await?;
                attempted += 1;
            }
        }
    }

    /// One attempt at fence `id`: inspect, check ownership, permit, call, record. `None` when
    /// the fence is gone or nothing removes its kind.
    #[tracing::instrument(skip(self), fields(repair_id = %id))]
    pub async fn attempt(&self, id: Uuid) -> anyhow::Result<Option<FenceStatus>> {
        let Some(repair) = store::repair::load(&self.pool, id).await? else {
            return Ok(None);
        };
        let status = repair.fence.status();
        if status.is_settled() || status == FenceStatus::AwaitingAdmin {
            return Ok(Some(status));
        }
        let Some(remover) = self
            .removers
            .iter()
            .find(|r| r.kind().as_str() == repair.resource_kind)
        else {
            tracing::warn!(kind = %repair.resource_kind, "no remover for this kind of resource");
            return Ok(None);
        };
        let inspection = repair.fence.inspect();
        let credential = if !remover.needs_credential() {
            Some(Vec::new())
        } else {
            self.sealed_credential(id).await?
        };
        let Some(credential) = credential else {
            // No credential proves nothing: the fence waits for one.
            let decision = store::repair::decide(
                &self.pool,
                id,
                inspection,
                Ownership::CredentialRefused,
                "no removal credential can be opened",
            )
            .await?;
            return Ok(Some(status_of(&decision, status)));
        };
        let inspected = remover.inspect(&repair, &credential).await;
        let decision = store::repair::decide(
            &self.pool,
            id,
            inspection,
            inspected.ownership,
            &inspected.detail,
        )
        .await?;
        tracing::info!(ownership = ?inspected.ownership, detail = %inspected.detail, ?decision, "provider repair inspected");
        let Decision::Dispatch(permit) = decision else {
            return Ok(Some(status_of(&decision, status)));
        };
        // Outside any transaction: the permit is recorded, so a crash from here on leaves the
        // attempt uncertain.
        let (outcome, detail) = remover.remove(&repair, &credential).await;
        metrics::attempted(repair.provider, outcome);
        let status = store::repair::record(&self.pool, id, permit, outcome, &detail).await?;
        tracing::info!(attempt = permit.attempt, ?outcome, %detail, ?status, "provider repair attempt recorded");
        Ok(Some(status))
    }

    /// The removal credential of fence `id`'s references, opened; `None` when none can be.
    async fn sealed_credential(&self, id: Uuid) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(match store::repair::credential(&self.pool, id).await? {
            Some(sealed) => sealed
                .open(&self.keyring)
                .map_err(|e| tracing::error!(error = %e, "the removal credential cannot be opened"))
                .ok(),
            None => None,
        })
    }
}

fn status_of(decision: &Decision, before: FenceStatus) -> FenceStatus {
    match decision {
        Decision::Wait(status) => *status,
        Decision::Dispatch(_) | Decision::Held | Decision::Stale => before,
    }
}

/// `lifecycle.*.*.{suspended,uninstalled,disconnected,repair_credential}`: a capture may have
/// been written, or a credential arrived; the fences are the truth, the message only wakes the
/// dispatcher.
pub struct WakeHandler {
    pub dispatcher: Dispatcher,
}

impl Handler for WakeHandler {
    type Message = LifecycleTransition;

    async fn handle(&self, msg: LifecycleTransition, _: &Delivery) -> Result<Settle, HandlerError> {
        tracing::debug!(connection_id = %msg.connection_id, transition = %msg.transition, "provider repair woken");
        match self.dispatcher.run_due().await {
            Ok(0) => Ok(Settle::Unchanged("nothing due")),
            Ok(_) => Ok(Settle::Applied("attempted")),
            Err(e) => Err(HandlerError::transient(e)),
        }
    }
}

/// Every vendor's remover, each calling its vendor through `egress` with `request_timeout` per
/// call: a vendor's removal plugs in here with one line.
pub fn removers(
    egress: &vendor_http::egress::Egress,
    request_timeout: Duration,
) -> Vec<Arc<dyn Remover>> {
    vec![Arc::new(gitlab::GroupHooks {
        egress: egress.clone(),
        request_timeout,
        page_cap: gitlab::PAGE_CAP,
    })]
}

/// The transitions after which a connection may have left something to remove, and the
/// message control-api sends when a removal credential arrives for its repairs.
pub const WAKING_TRANSITIONS: [&str; 4] = [
    "suspended",
    "uninstalled",
    "disconnected",
    store::repair_admin::CREDENTIAL_WAKE,
];

/// Runs provider-repair until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> anyhow::Result<()> {
    let keyring = Keyring::parse(&config.secret_key)?;
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let pool = db.get_postgres_connection_pool().clone();
    let request_timeout = Duration::from_secs(config.request_timeout_secs);
    let dispatcher = Dispatcher {
        db: db.clone(),
        pool,
        keyring,
        removers: [
            removers(&config.common.egress, request_timeout),
            config
                .vendors
                .removers(&config.common.egress, request_timeout)?,
        ]
        .concat(),
        batch: 20,
        // Longer than an attempt's two calls can take: another replica never overlaps it.
        lease: time::Duration::seconds(
            i64::try_from(config.request_timeout_secs.saturating_mul(4)).unwrap_or(i64::MAX),
        ),
    };
    let mut service = runtime::Service::new("provider-repair", &config.common, &shutdown);
    metrics::register();
    let observed = dispatcher.pool.clone();
    service.task("provider repair metrics", move |stop| {
        metrics::run(observed, stop)
    });
    service.consumer(
        &bus,
        &db,
        ConsumerSpec {
            filter_subjects: WAKING_TRANSITIONS
                .iter()
                .map(|t| subject::lifecycle_any_kind_filter(t))
                .collect(),
            ..ConsumerSpec::new(Stream::Lifecycle, "provider-repair-wakes")
        },
        Arc::new(WakeHandler {
            dispatcher: dispatcher.clone(),
        }),
    );
    let mut schedules =
        runtime::ScheduleRunner::new(db.clone(), runtime::schedule::default_replica_id());
    if config.cron.trim() != "off" {
        let due = dispatcher.clone();
        schedules
            .add(
                "provider-repair-due",
                &config.cron,
                Duration::from_secs(300),
                move |_| {
                    let due = due.clone();
                    async move {
                        let attempted = due.revisit().await?;
                        if attempted > 0 {
                            tracing::info!(attempted, "due provider repairs attempted");
                        }
                        Ok(())
                    }
                },
            )
            .context("FORGESYNC_PROVIDER_REPAIR_CRON")?;
    }
    service.schedules(schedules);
    // Health and metrics only.
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

runtime::launch!(Config, "provider-repair", run);
