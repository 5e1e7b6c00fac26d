//! GitLab-specific rules.
//!
//! - [`checks`]: the check state a head pipeline reports.
//! - [`review`]: the review decision and approval acts.
//! - [`paging`]: completeness of an offset-paged REST listing (notes, group hooks).
//! - [`notes`]: note listing completeness and removal confirmation.
//! - [`route_credential`]: route credentials for the hooks we register.
//! - [`JOBS`]: the job types GitLab connections run.
//! - [`SECRETS`]: the secrets a GitLab connection holds.

pub mod checks;
pub mod notes;
pub mod paging;
pub mod review;
pub mod route_credential;

use crate::job::JobSupport;

/// A GitLab connection's one secret: its access `token`.
pub const SECRETS: &[&str] = &["token"];

/// GitLab runs every job type (a BACKFILL takes one batch per pending repository).
pub const JOBS: JobSupport = JobSupport {
    vendor: "GitLab",
    refused: &[],
};
