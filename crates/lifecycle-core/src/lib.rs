//! The lifecycle rules of the forgesync mirror as pure code: no tokio, no database, no network.
//! Services do I/O around these functions; the rules are tested here exhaustively.
//!
//! One module per rule family:
//! - [`connection`]: the connection lifecycle state machine.
//! - [`job`]: sync job types and what each may infer.
//! - [`listing`]: fail-closed upstream listings ([`listing::CompleteListing`]).
//! - [`deletion`]: the deletion gate with its blast-radius hold.
//! - [`tombstone`] and [`erasure`]: the two deletion semantics, sharing no code.
//! - [`partial`]: partial metadata (absent, unknown, known).
//! - [`forward`]: forward-only comparisons.
//! - [`source_key`]: one identity per lifecycle event, and the item-event ledger.
//! - [`snapshot`]: dated snapshots (reviewer lists, approvals).
//! - [`gitlab_review`]: GitLab review decision and approval acts.
//! - [`checks`]: head checks and check-run completeness.
//! - [`gitlab_notes`]: GitLab note listing completeness and removal confirmation.
//! - [`subject`]: the subject grammar and the consumer subject math.
//! - [`repair`]: provider repair fences.
//! - [`route_credential`]: GitLab route credentials for the hooks we register.
#![forbid(unsafe_code)]

pub mod checks;
pub mod connection;
pub mod deletion;
pub mod erasure;
pub mod forward;
pub mod gitlab_notes;
pub mod gitlab_review;
pub mod job;
pub mod listing;
pub mod partial;
pub mod repair;
pub mod route_credential;
pub mod snapshot;
pub mod source_key;
pub mod subject;
pub mod tombstone;

/// A point in time as the rules compare it: provider dates, JetStream store times, request times.
pub type Timestamp = time::OffsetDateTime;
