//! GitHub-specific rules.
//!
//! - [`checks`]: the check runs behind a head's check state (list completeness, storage caps).
//! - [`JOBS`]: the job types GitHub connections run.

pub mod checks;

use crate::job::JobSupport;

/// GitHub runs every job type; a manual BACKFILL repeats its pass until one lists everything.
pub const JOBS: JobSupport = JobSupport {
    vendor: "GitHub",
    refused: &[],
};
