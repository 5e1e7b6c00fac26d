//! The SCM mirror that every code-host sync (github-sync, later gitlab-sync) writes through:
//! repositories and monitors, issues, pull requests, comments, reviews, review comments and
//! threads, item events and their activity fan-out. The forward-only lock-compare-write step
//! lives here once; a service keeps only what is specific to its vendor (payload shapes,
//! listings, misfiled work, the vendor's review-state rules).
#![forbid(unsafe_code)]

pub mod admission;
pub mod comments;
pub mod erasure;
pub mod events;
pub mod github;
pub mod gitlab;
pub mod items;
pub mod monitors;
pub mod organization;
pub mod repository;
pub mod reviews;
pub mod scope;
pub mod upsert;
pub mod vendors;
