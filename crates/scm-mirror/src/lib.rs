//! The SCM mirror that every code-host sync (github-sync, later gitlab-sync) writes through:
//! repositories, issues, pull requests, comments and review comments, item events and their
//! activity fan-out. The forward-only lock-compare-write step lives here once; a service keeps
//! only what is specific to its vendor (payload shapes, listings, misfiled work).
#![forbid(unsafe_code)]

pub mod comments;
pub mod content;
pub mod events;
pub mod items;
pub mod monitors;
pub mod repository;
