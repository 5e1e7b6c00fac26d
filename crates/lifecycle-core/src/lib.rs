//! The lifecycle rules of the forgesync mirror as pure code: no tokio, no database, no network.
//! Services do I/O around these functions; the rules are tested here exhaustively.
//!
//! One module per rule family; rules that only one vendor has live in that vendor's module
//! ([`github`], [`gitlab`]), beside the generic ones:
//! - [`connection`]: the connection lifecycle state machine.
//! - [`job`]: sync job types and what each may infer.
//! - [`listing`]: fail-closed upstream listings ([`listing::CompleteListing`]).
//! - [`deletion`]: the deletion gate with its blast-radius hold.
//! - [`children`]: nested children reconciled per parent through that gate.
//! - [`tombstone`] and [`erasure`]: the two deletion semantics, sharing no code.
//! - [`partial`]: partial metadata (absent, unknown, known).
//! - [`forward`]: forward-only comparisons.
//! - [`source_key`]: one identity per lifecycle event, and the item-event ledger.
//! - [`snapshot`]: dated snapshots (reviewer lists, approvals).
//! - [`checks`]: a head's check state as dated observations.
//! - [`subject`]: the subject grammar and the consumer subject math.
//! - [`repair`]: provider repair fences.
//! - [`github`]: GitHub check runs, its job support.
//! - [`gitlab`]: GitLab head pipelines, review decision and approval acts, note reconciliation,
//!   route credentials, its job support.
//! - [`slack`]: channel consent, message kinds, its job support.
//! - [`outline`]: documents forward by `updatedAt`, tombstones, confirm-before-tombstone, its job
//!   support.
//! - [`vendor_error`]: the classes of a vendor's failed answer, named alike for every vendor.
#![forbid(unsafe_code)]

pub mod checks;
pub mod children;
pub mod connection;
pub mod deletion;
pub mod erasure;
pub mod forward;
pub mod github;
pub mod gitlab;
pub mod job;
pub mod listing;
pub mod outline;
pub mod partial;
pub mod repair;
pub mod slack;
pub mod snapshot;
pub mod source_key;
pub mod subject;
pub mod tombstone;
pub mod vendor_error;

/// A point in time as the rules compare it: provider dates, JetStream store times, request times.
pub type Timestamp = time::OffsetDateTime;
