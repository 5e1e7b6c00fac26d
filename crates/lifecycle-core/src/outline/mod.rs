//! Outline-specific rules.
//!
//! - [`JOBS`]: the job types Outline connections run.
//! - [`SECRETS`]: the secrets an Outline connection holds.
//! - [`document`]: a document's writes move forward by `updatedAt`; a deletion tombstones it,
//!   dated, until a strictly newer version restores it.
//! - [`pages`]: the offset enumeration's cursor; a listing is whole only when it ends on an empty
//!   page with no page longer than asked or after a short one.
//! - [`confirm`]: a document a complete listing omitted is tombstoned only once Outline confirms
//!   it gone.

pub mod confirm;
pub mod document;
pub mod pages;

use crate::job::{JobSupport, SyncJobType};

/// An Outline connection's one secret: its API `token` (webhook signing secrets belong to its
/// endpoints).
pub const SECRETS: &[&str] = &["token"];

/// Outline never backfills: its reconcile enumerates everything, so no older horizon is left.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Outline",
    refused: &[(
        SyncJobType::Backfill,
        "a RECONCILIATION enumerates every document, so there is no older history to walk",
    )],
};
