//! The flags every sync service shares, declared once: paging, the RECONCILIATION and BACKFILL
//! schedules, the reconcile cooldown, how a manual BACKFILL repeats, the job lease, concurrency,
//! the request timeout and the webhook filter refresh. A service flattens [`SyncArgs`] into its
//! clap `Config` (`#[command(flatten)] pub sync: SyncArgs<ItsFlags>`) and builds the engine's
//! settings with [`SyncArgs::sync_settings`].
//!
//! Deployments set each service's own variables (`FORGESYNC_GITHUB_PAGE_SIZE`,
//! `FORGESYNC_GITLAB_PAGE_SIZE`), so one struct must read different names per service. clap's
//! derive passes an attribute's value through as an expression, so [`SyncArgs`] is generic over
//! a [`SyncFlags`] type and reads its names from that type's constants (`env = F::PAGE_SIZE`).
//! The constants are written by [`sync_flags!`](crate::sync_flags) from the service's prefix
//! alone, with `concat!`, so every service spells every variable `FORGESYNC_<VENDOR>_<FLAG>` and
//! no name is typed twice. Four help texts name the vendor or its scope; the backfill schedule's
//! default and meaning differ per vendor on purpose, so a service states both. The BACKFILL flags
//! exist only for a vendor that runs BACKFILL: `SyncFlags::Backfill` is [`BackfillArgs`] (flattened
//! into [`SyncArgs`]) when the service declares a `backfill_cron`, and [`NoBackfill`] otherwise.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::time::Duration;

use lifecycle_core::deletion::BlastRadius;
use store::entity::JobType;

use crate::engine::{BackfillPolicy, SyncSettings};
use crate::service::JobSchedule;

/// One sync service's spelling of the shared flags: the environment variables (also the value
/// names), the flags that carry the vendor's name, and the help texts worded per vendor. Write it
/// with [`sync_flags!`](crate::sync_flags), never by hand.
pub trait SyncFlags: Debug + Clone + Send + Sync + 'static {
    /// The BACKFILL flags: [`BackfillArgs`] for a vendor that runs BACKFILL, [`NoBackfill`]
    /// (no flag at all) for one that refuses it.
    type Backfill: BackfillSettings;
    const RECONCILE_CRON: &'static str;
    /// The RECONCILIATION schedule when the variable is unset: the vendor's own.
    const RECONCILE_CRON_DEFAULT: &'static str;
    /// The reconcile cooldown, in seconds, when the variable is unset: the vendor's own. Text,
    /// as clap takes a default: a computed default of a generic field would be shared by every
    /// service's spelling in one process.
    const RECONCILE_COOLDOWN_DEFAULT: &'static str;
    const RECONCILE_COOLDOWN: &'static str;
    const RECONCILE_COOLDOWN_FLAG: &'static str;
    const RECONCILE_COOLDOWN_HELP: &'static str;
    const PAGE_SIZE: &'static str;
    const PAGE_CAP: &'static str;
    const REQUEST_TIMEOUT_MS: &'static str;
    const REQUEST_TIMEOUT_MS_FLAG: &'static str;
    const REQUEST_TIMEOUT_MS_HELP: &'static str;
    const JOB_CONCURRENCY: &'static str;
    const WEBHOOK_CONCURRENCY: &'static str;
    const FILTER_REFRESH_MS: &'static str;
    const CLOCK_SKEW: &'static str;
}

/// The spelling of the BACKFILL flags of a service whose vendor runs BACKFILL; written by
/// [`sync_flags!`](crate::sync_flags) when the service declares `backfill_cron`.
pub trait BackfillFlags: SyncFlags {
    const BACKFILL_CRON: &'static str;
    /// The BACKFILL schedule when the variable is unset.
    const BACKFILL_CRON_DEFAULT: &'static str;
    const BACKFILL_CRON_HELP: &'static str;
    const BACKFILL_MAX_PASSES: &'static str;
    const BACKFILL_MAX_PASSES_FLAG: &'static str;
    const BACKFILL_BACKOFF_MS: &'static str;
    const BACKFILL_BACKOFF_MS_FLAG: &'static str;
    const BACKFILL_BACKOFF_MS_HELP: &'static str;
    const BACKFILL_MAX_BACKOFF_MS: &'static str;
    const BACKFILL_MAX_BACKOFF_MS_FLAG: &'static str;
}

/// What the BACKFILL flags of a service give the engine: how a manual BACKFILL repeats, and the
/// BACKFILL schedule (none when the vendor does not backfill).
pub trait BackfillSettings:
    clap::Args + clap::FromArgMatches + Debug + Clone + Send + Sync + 'static
{
    /// How a manual BACKFILL repeats an incomplete pass.
    fn policy(&self) -> BackfillPolicy;
    /// The BACKFILL schedule, naming its variable.
    fn schedule(&self) -> Option<JobSchedule<'_>>;
}

/// Declares a service's [`SyncFlags`] type from its prefixes. `env: "GITHUB"` gives
/// `FORGESYNC_GITHUB_PAGE_SIZE` and the like; `flag: "github"` gives the flags that carry the
/// vendor's name (`--github-reconcile-cooldown`; the others, `--page-size`, are the same
/// everywhere); `vendor` and `scope` word the help ("one GitHub request", "skips a
/// repository"); `reconcile_cron` is the RECONCILIATION schedule's default (each vendor its own:
/// GitHub and GitLab 03:00, Slack 04:00) and `reconcile_cooldown` its cooldown's, in seconds
/// (a plain integer literal: 12 h, `43200`, for most; Outline's 5-minute catch-up, 6 h). A vendor that runs BACKFILL adds `backfill_cron`, the
/// BACKFILL schedule's default and help (without a final period, as clap shows help), and gets
/// the BACKFILL flags; a vendor without it has none.
///
/// ```
/// sync_engine::sync_flags! {
///     /// acme-sync's spelling of the shared sync flags (Acme does not backfill).
///     pub struct AcmeFlags {
///         env: "ACME",
///         flag: "acme",
///         vendor: "Acme",
///         scope: "space",
///         reconcile_cron: "0 0 4 * * *",
///         reconcile_cooldown: 43200,
///     }
/// }
/// use sync_engine::config::SyncFlags as _;
/// assert_eq!(AcmeFlags::PAGE_SIZE, "FORGESYNC_ACME_PAGE_SIZE");
/// assert_eq!(AcmeFlags::RECONCILE_COOLDOWN_FLAG, "acme-reconcile-cooldown");
/// assert_eq!(AcmeFlags::RECONCILE_CRON_DEFAULT, "0 0 4 * * *");
/// assert_eq!(AcmeFlags::RECONCILE_COOLDOWN_DEFAULT, "43200");
/// ```
#[macro_export]
macro_rules! sync_flags {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            env: $env:literal,
            flag: $flag:literal,
            vendor: $vendor:literal,
            scope: $scope:literal,
            reconcile_cron: $reconcile_default:literal,
            reconcile_cooldown: $cooldown_default:tt,
            backfill_cron: { default: $backfill_default:literal, help: $backfill_help:literal $(,)? } $(,)?
        }
    ) => {
        $crate::sync_flags!(@flags $(#[$meta])* $vis $name, $env, $flag, $vendor, $scope,
            $reconcile_default, $cooldown_default, $crate::config::BackfillArgs<$name>);

        impl $crate::config::BackfillFlags for $name {
            const BACKFILL_CRON: &'static str = concat!("FORGESYNC_", $env, "_BACKFILL_CRON");
            const BACKFILL_CRON_DEFAULT: &'static str = $backfill_default;
            const BACKFILL_CRON_HELP: &'static str = $backfill_help;
            const BACKFILL_MAX_PASSES: &'static str =
                concat!("FORGESYNC_", $env, "_BACKFILL_MAX_PASSES");
            const BACKFILL_MAX_PASSES_FLAG: &'static str = concat!($flag, "-backfill-max-passes");
            const BACKFILL_BACKOFF_MS: &'static str =
                concat!("FORGESYNC_", $env, "_BACKFILL_BACKOFF_MS");
            const BACKFILL_BACKOFF_MS_FLAG: &'static str = concat!($flag, "-backfill-backoff-ms");
            const BACKFILL_BACKOFF_MS_HELP: &'static str = concat!(
                "Milliseconds a manual BACKFILL waits after its first incomplete pass; the wait \
                 doubles with every further pass, up to `FORGESYNC_",
                $env,
                "_BACKFILL_MAX_BACKOFF_MS`"
            );
            const BACKFILL_MAX_BACKOFF_MS: &'static str =
                concat!("FORGESYNC_", $env, "_BACKFILL_MAX_BACKOFF_MS");
            const BACKFILL_MAX_BACKOFF_MS_FLAG: &'static str =
                concat!($flag, "-backfill-max-backoff-ms");
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            env: $env:literal,
            flag: $flag:literal,
            vendor: $vendor:literal,
            scope: $scope:literal,
            reconcile_cron: $reconcile_default:literal,
            reconcile_cooldown: $cooldown_default:tt $(,)?
        }
    ) => {
        $crate::sync_flags!(@flags $(#[$meta])* $vis $name, $env, $flag, $vendor, $scope,
            $reconcile_default, $cooldown_default, $crate::config::NoBackfill);
    };
    (@flags $(#[$meta:meta])* $vis:vis $name:ident, $env:literal, $flag:literal,
        $vendor:literal, $scope:literal, $reconcile_default:literal, $cooldown_default:tt,
        $backfill:ty) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default)]
        $vis struct $name;

        impl $crate::config::SyncFlags for $name {
            type Backfill = $backfill;
            const RECONCILE_CRON: &'static str = concat!("FORGESYNC_", $env, "_RECONCILE_CRON");
            const RECONCILE_CRON_DEFAULT: &'static str = $reconcile_default;
            const RECONCILE_COOLDOWN_DEFAULT: &'static str = stringify!($cooldown_default);
            const RECONCILE_COOLDOWN: &'static str =
                concat!("FORGESYNC_", $env, "_RECONCILE_COOLDOWN");
            const RECONCILE_COOLDOWN_FLAG: &'static str = concat!($flag, "-reconcile-cooldown");
            const RECONCILE_COOLDOWN_HELP: &'static str = concat!(
                "Seconds after a complete reconcile during which the scheduled pass skips a ",
                $scope,
                " (operators' on-demand reconciles always run)"
            );
            const PAGE_SIZE: &'static str = concat!("FORGESYNC_", $env, "_PAGE_SIZE");
            const PAGE_CAP: &'static str = concat!("FORGESYNC_", $env, "_PAGE_CAP");
            const REQUEST_TIMEOUT_MS: &'static str =
                concat!("FORGESYNC_", $env, "_REQUEST_TIMEOUT_MS");
            const REQUEST_TIMEOUT_MS_FLAG: &'static str = concat!($flag, "-request-timeout-ms");
            const REQUEST_TIMEOUT_MS_HELP: &'static str = concat!(
                "Milliseconds one ",
                $vendor,
                " request may take; a slower answer fails the read as `timeout` (retried like a \
                 transport failure first)"
            );
            const JOB_CONCURRENCY: &'static str = concat!("FORGESYNC_", $env, "_JOB_CONCURRENCY");
            const WEBHOOK_CONCURRENCY: &'static str =
                concat!("FORGESYNC_", $env, "_WEBHOOK_CONCURRENCY");
            const FILTER_REFRESH_MS: &'static str =
                concat!("FORGESYNC_", $env, "_FILTER_REFRESH_MS");
            const CLOCK_SKEW: &'static str = concat!("FORGESYNC_", $env, "_CLOCK_SKEW_SECS");
        }
    };
}

/// The sync flags of a service spelled by `F`. Every flag also reads its variable, whose name is
/// the flag's value name. Fields whose help names the vendor take it from `F` (`help = F::..`),
/// which clap shows instead of the doc comment.
#[derive(Debug, Clone, clap::Args)]
pub struct SyncArgs<F: SyncFlags> {
    /// Cron (with seconds) of the scheduled RECONCILIATION, UTC; `off` disables it. A replica
    /// that starts after a due instant runs that instant's reconcile once (claimed in Postgres).
    #[arg(
        long,
        env = F::RECONCILE_CRON,
        value_name = F::RECONCILE_CRON,
        default_value = F::RECONCILE_CRON_DEFAULT
    )]
    pub reconcile_cron: String,

    /// Seconds after a complete reconcile during which the scheduled pass skips a scope
    /// (operators' on-demand reconciles always run).
    #[arg(
        long = F::RECONCILE_COOLDOWN_FLAG,
        env = F::RECONCILE_COOLDOWN,
        value_name = F::RECONCILE_COOLDOWN,
        default_value = F::RECONCILE_COOLDOWN_DEFAULT,
        help = F::RECONCILE_COOLDOWN_HELP
    )]
    pub reconcile_cooldown_secs: u64,

    /// Items per page read from the vendor (at most 100).
    #[arg(
        long,
        env = F::PAGE_SIZE,
        value_name = F::PAGE_SIZE,
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub page_size: u32,

    /// Pages one listing may take before it counts as truncated.
    #[arg(
        long,
        env = F::PAGE_CAP,
        value_name = F::PAGE_CAP,
        default_value_t = 10_000
    )]
    pub page_cap: u32,

    /// Milliseconds one request to the vendor may take; a slower answer fails the read as
    /// `timeout` (retried like a transport failure first).
    #[arg(
        long = F::REQUEST_TIMEOUT_MS_FLAG,
        env = F::REQUEST_TIMEOUT_MS,
        value_name = F::REQUEST_TIMEOUT_MS,
        default_value_t = 30_000,
        value_parser = clap::value_parser!(u64).range(1..),
        help = F::REQUEST_TIMEOUT_MS_HELP
    )]
    pub request_timeout_ms: u64,

    /// Jobs run at once by this replica.
    #[arg(
        long,
        env = F::JOB_CONCURRENCY,
        value_name = F::JOB_CONCURRENCY,
        default_value_t = 2
    )]
    pub job_concurrency: usize,

    /// Webhook deliveries handled at once by this replica.
    #[arg(
        long,
        env = F::WEBHOOK_CONCURRENCY,
        value_name = F::WEBHOOK_CONCURRENCY,
        default_value_t = 16
    )]
    pub webhook_concurrency: usize,

    /// Milliseconds between checks of the monitors for the webhook consumer's filters.
    #[arg(
        long,
        env = F::FILTER_REFRESH_MS,
        value_name = F::FILTER_REFRESH_MS,
        default_value_t = 5_000
    )]
    pub filter_refresh_ms: u64,

    /// Seconds a vendor time may be past when we received or read it (a delivery's receipt by
    /// JetStream, a page's read); a later one would freeze its row, so it is refused with its
    /// reason.
    #[arg(
        long = "clock-skew-secs",
        env = F::CLOCK_SKEW,
        value_name = F::CLOCK_SKEW,
        default_value_t = lifecycle_core::forward::DEFAULT_CLOCK_SKEW.as_secs()
    )]
    pub clock_skew_secs: u64,

    /// Seconds a job's claim lasts without a heartbeat before another replica may take it.
    // One variable for every sync service, as it has always been (no vendor in its name).
    #[arg(
        long = "job-lease",
        env = "FORGESYNC_JOB_LEASE",
        value_name = "FORGESYNC_JOB_LEASE",
        default_value_t = 60
    )]
    pub job_lease_secs: u64,

    /// Jobs of one workspace run at once by all of this service's replicas together (a
    /// connection runs one at a time whatever this says), so no tenant holds every job slot;
    /// a job past it waits its turn without holding a slot.
    #[arg(
        long = "workspace-jobs",
        env = "FORGESYNC_WORKSPACE_JOBS",
        value_name = "FORGESYNC_WORKSPACE_JOBS",
        default_value_t = crate::jobs::DEFAULT_WORKSPACE_JOBS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub workspace_jobs: u32,

    /// The BACKFILL flags, when the vendor runs BACKFILL.
    #[command(flatten)]
    pub backfill: F::Backfill,

    #[arg(skip)]
    flags: PhantomData<F>,
}

impl<F: SyncFlags> SyncArgs<F> {
    /// The engine's tunables, as the flags set them.
    pub fn sync_settings(&self) -> SyncSettings {
        SyncSettings {
            page_size: self.page_size,
            page_cap: self.page_cap,
            blast_radius: BlastRadius::default(),
            reconcile_cooldown: Duration::from_secs(self.reconcile_cooldown_secs),
            backfill: self.backfill.policy(),
            clock_skew: self.clock_skew(),
            workspace_jobs: self.workspace_jobs,
        }
    }

    /// How far past its receipt or read a vendor time may be.
    pub fn clock_skew(&self) -> Duration {
        Duration::from_secs(self.clock_skew_secs)
    }

    /// How long a job's claim lasts without a heartbeat.
    pub fn job_lease(&self) -> Duration {
        Duration::from_secs(self.job_lease_secs)
    }

    /// One vendor request's time limit.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// How often a webhook consumer re-reads the monitors behind its filters.
    pub fn filter_refresh(&self) -> Duration {
        Duration::from_millis(self.filter_refresh_ms)
    }

    /// The RECONCILIATION schedule and, for a vendor that backfills, the BACKFILL one, each
    /// naming its variable when it is refused.
    pub fn job_schedules(&self) -> Vec<JobSchedule<'_>> {
        let reconcile = JobSchedule {
            job_type: JobType::Reconciliation,
            cron: &self.reconcile_cron,
            variable: F::RECONCILE_CRON,
        };
        std::iter::once(reconcile)
            .chain(self.backfill.schedule())
            .collect()
    }
}

/// The BACKFILL flags of a service whose vendor runs BACKFILL, spelled by `F`.
#[derive(Debug, Clone, clap::Args)]
pub struct BackfillArgs<F: BackfillFlags> {
    /// Cron (with seconds) of the scheduled BACKFILL, UTC; `off` disables it. What a scheduled
    /// BACKFILL does, and so its default, is the vendor's (`F::BACKFILL_CRON_HELP`).
    #[arg(
        long,
        env = F::BACKFILL_CRON,
        value_name = F::BACKFILL_CRON,
        default_value = F::BACKFILL_CRON_DEFAULT,
        help = F::BACKFILL_CRON_HELP
    )]
    pub backfill_cron: String,

    /// Passes a manual BACKFILL may take; after the last incomplete one it fails with its reason.
    /// Unset (the default), it passes until one pass is complete or it is canceled.
    #[arg(
        long = F::BACKFILL_MAX_PASSES_FLAG,
        env = F::BACKFILL_MAX_PASSES,
        value_name = F::BACKFILL_MAX_PASSES,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub backfill_max_passes: Option<u32>,

    /// Milliseconds a manual BACKFILL waits after its first incomplete pass; the wait doubles
    /// with every further pass, up to the maximum backoff.
    #[arg(
        long = F::BACKFILL_BACKOFF_MS_FLAG,
        env = F::BACKFILL_BACKOFF_MS,
        value_name = F::BACKFILL_BACKOFF_MS,
        default_value_t = 5_000,
        help = F::BACKFILL_BACKOFF_MS_HELP
    )]
    pub backfill_backoff_ms: u64,

    /// The longest wait, in milliseconds, between two passes of a manual BACKFILL (never below
    /// the first wait).
    #[arg(
        long = F::BACKFILL_MAX_BACKOFF_MS_FLAG,
        env = F::BACKFILL_MAX_BACKOFF_MS,
        value_name = F::BACKFILL_MAX_BACKOFF_MS,
        default_value_t = 300_000
    )]
    pub backfill_max_backoff_ms: u64,

    #[arg(skip)]
    flags: PhantomData<F>,
}

impl<F: BackfillFlags> BackfillSettings for BackfillArgs<F> {
    /// The longest wait is never below the first.
    fn policy(&self) -> BackfillPolicy {
        let first_backoff = Duration::from_millis(self.backfill_backoff_ms);
        BackfillPolicy {
            max_passes: self.backfill_max_passes.and_then(NonZeroU32::new),
            first_backoff,
            max_backoff: first_backoff.max(Duration::from_millis(self.backfill_max_backoff_ms)),
        }
    }

    fn schedule(&self) -> Option<JobSchedule<'_>> {
        Some(JobSchedule {
            job_type: JobType::Backfill,
            cron: &self.backfill_cron,
            variable: F::BACKFILL_CRON,
        })
    }
}

/// The BACKFILL flags of a service whose vendor refuses BACKFILL: none, and no schedule.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct NoBackfill {}

impl BackfillSettings for NoBackfill {
    /// Never used: the vendor refuses BACKFILL, so none is queued (`Vendor::JOBS`).
    fn policy(&self) -> BackfillPolicy {
        BackfillPolicy {
            max_passes: NonZeroU32::new(1),
            first_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        }
    }

    fn schedule(&self) -> Option<JobSchedule<'_>> {
        None
    }
}
