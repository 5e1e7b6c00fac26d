//! GitHub-specific rules.
//!
//! - [`checks`]: the check runs behind a head's check state (list completeness, storage caps).
//! - [`JOBS`]: the job types GitHub connections run.
//! - [`SECRETS`]: the secrets a GitHub connection holds.

pub mod checks;

use crate::job::JobSupport;

/// A GitHub connection's secrets: `token` (a PAT) or `private_key` (a GitHub App's).
pub const SECRETS: &[&str] = &["token", "private_key"];

/// GitHub runs every job type; a manual BACKFILL repeats its pass until one lists everything.
pub const JOBS: JobSupport = JobSupport {
    vendor: "GitHub",
    refused: &[],
};
