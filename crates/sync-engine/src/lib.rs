//! The sync engine every vendor service runs on. A vendor implements the traits here (what its
//! connections reach, how one page of a class is read and written, how a webhook payload is
//! applied); the engine owns everything else: job claims and leases, passes and their
//! cancellation, backfill repetition, the deletion gate (for items, and per parent for nested
//! children: [`children`]), schedules with cooldown, the webhook front half that resolves a
//! delivery's body, connection and admission, and the flags that tune all of it
//! ([`config::SyncArgs`], flattened into each service's `Config`).
#![forbid(unsafe_code)]

pub mod children;
pub mod clients;
pub mod config;
pub mod consumers;
pub mod engine;
pub mod jobs;
pub mod listing_state;
pub mod service;
pub mod subscription;
pub mod vendor;
pub mod webhook;

pub use config::{BackfillArgs, BackfillFlags, NoBackfill, SyncArgs, SyncFlags};
pub use engine::{BackfillPolicy, Engine, SyncSettings};
pub use jobs::{ClaimedJob, JobControl, JobOutcome, Jobs};
pub use service::{JobSchedule, SyncJobs};
pub use vendor::{
    Listed, ListingEnd, ListingPlan, Moment, PageCheck, Pass, ReadError, ReadStop, Scopes,
    SweepEnd, Vendor,
};
