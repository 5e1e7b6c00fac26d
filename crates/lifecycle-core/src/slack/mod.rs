//! Slack-specific rules.
//!
//! - [`JOBS`]: the job types Slack connections run.
//! - [`SECRETS`]: the secrets a Slack connection holds.

use crate::job::{JobSupport, SyncJobType};

/// A Slack connection's one secret: its bot `token` (event signing secrets belong to its
/// endpoints).
pub const SECRETS: &[&str] = &["token"];

/// Slack runs no initial sync and never backfills: ingestion is per channel and forward-only
/// from its consent, so history from before consent, or from a paused gap, is never fetched.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Slack",
    refused: &[
        (
            SyncJobType::Initial,
            "nothing is read at connect; each channel is ingested forward-only from its consent",
        ),
        (
            SyncJobType::Backfill,
            "history from before a channel's consent or from a paused gap is never fetched; \
             RECONCILIATION reads what is in scope",
        ),
    ],
};
