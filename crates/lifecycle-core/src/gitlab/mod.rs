//! GitLab-specific rules.
//!
//! - [`checks`]: the check state a head pipeline reports.
//! - [`review`]: the review decision and approval acts.
//! - [`notes`]: note listing completeness and removal confirmation.
//! - [`route_credential`]: route credentials for the hooks we register.

pub mod checks;
pub mod notes;
pub mod review;
pub mod route_credential;
