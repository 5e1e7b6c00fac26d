//! Slack-specific rules.
//!
//! - [`JOBS`]: the job types Slack connections run.

use crate::job::{JobSupport, SyncJobType};

/// Slack never backfills: history from before consent, or from a paused gap, is never fetched.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Slack",
    refused: &[(
        SyncJobType::Backfill,
        "history from before a channel's consent or from a paused gap is never fetched; \
         RECONCILIATION reads what is in scope",
    )],
};
