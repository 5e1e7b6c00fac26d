//! Slack-specific rules.
//!
//! - [`JOBS`]: the job types Slack connections run.
//! - [`SECRETS`]: the secrets a Slack connection holds.

use crate::job::{JobSupport, SyncJobType};

/// A Slack connection's one secret: its bot `token` (event signing secrets belong to its
/// endpoints).
pub const SECRETS: &[&str] = &["token"];

/// Slack never backfills: history from before consent, or from a paused gap, is never fetched.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Slack",
    refused: &[(
        SyncJobType::Backfill,
        "history from before a channel's consent or from a paused gap is never fetched; \
         RECONCILIATION reads what is in scope",
    )],
};
