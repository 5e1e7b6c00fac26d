//! Outline-specific rules.
//!
//! - [`JOBS`]: the job types Outline connections run.

use crate::job::{JobSupport, SyncJobType};

/// Outline never backfills: its reconcile enumerates everything, so no older horizon is left.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Outline",
    refused: &[(
        SyncJobType::Backfill,
        "a RECONCILIATION enumerates every document, so there is no older history to walk",
    )],
};
