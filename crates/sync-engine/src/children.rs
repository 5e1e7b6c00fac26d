//! Nested children (comments under an item, notes under an issue or merge request, replies under
//! a thread), reconciled per parent through the deletion gate and blast-radius hold that a class
//! of items goes through, with one semantics for every vendor: a child the gate plans is
//! tombstoned (content cleared, `deleted_at` set, no late copy brings it back), never erased.
//!
//! A vendor gives its reads and a [`ChildTombstones`] writer; the engine decides:
//!
//! 1. before the parent's listing, [`Children::capture`] takes the parent's live child ids (a
//!    child created during the listing is never a candidate);
//! 2. after it, [`Children::reconcile`] hands the gate the listing, whole or
//!    [`ChildListing::Partial`], and writes what it plans through the vendor's writer. Only a
//!    RECONCILIATION sweeps, a partial listing tombstones nothing, and a plan past the blast
//!    radius is held: counted in `sweeps_held_total{vendor, class}` and recorded as a
//!    `sweep_held` activity, as an item class's held sweep is, with the child class and the
//!    parent in its detail.

pub use lifecycle_core::children::ChildListing;
use lifecycle_core::children::ChildSweep;
use lifecycle_core::deletion::{BlastRadius, SweepDecision, TombstonePlan};
use store::entity::ConnectionKind;

use crate::jobs::ClaimedJob;
use crate::vendor::Pass;

/// A class of nested children a vendor reconciles under their parents (`comment`, `note`,
/// `thread_reply`). Its name labels metrics and activity, as an item class's does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildClass {
    pub vendor: ConnectionKind,
    pub name: &'static str,
}

impl ChildClass {
    /// Registers the class's held sweeps at zero, so alerts see the first one.
    pub fn register_metrics(&self) {
        metrics::counter!("sweeps_held_total", "vendor" => self.vendor.as_str(), "class" => self.name)
            .increment(0);
        metrics::counter!("sync_children_tombstoned_total", "vendor" => self.vendor.as_str(), "class" => self.name)
            .increment(0);
    }
}

/// Writes the tombstones the gate planned for one parent's children.
#[async_trait::async_trait]
pub trait ChildTombstones<Id>: Sync {
    /// Tombstones the planned children over `conn` (the caller holds their parent there): content
    /// cleared and `deleted_at` set, so that no late copy brings them back. Returns how many were
    /// live.
    async fn tombstone(
        &self,
        conn: &mut sqlx::PgConnection,
        plan: &TombstonePlan<Id>,
    ) -> Result<u64, sqlx::Error>;
}

/// What [`Children::reconcile`] did to one parent's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildOutcome {
    /// Nothing inferred: not a RECONCILIATION, or the listing was partial.
    Skipped,
    /// The gate's plan was written; this many children were live and are tombstoned now.
    Tombstoned(u64),
    /// The plan exceeded the blast radius: nothing was written, an operator must look.
    Held {
        would_tombstone: u64,
        class_size: u64,
    },
}

/// One child class's reconciliation in one pass.
#[derive(Debug, Clone, Copy)]
pub struct Children<'a> {
    job: &'a ClaimedJob,
    radius: BlastRadius,
    class: ChildClass,
}

impl<'a> Pass<'a> {
    /// Reconciles children of `class` in this pass, with the engine's blast radius.
    pub fn children(&self, class: ChildClass) -> Children<'a> {
        Children {
            job: self.job,
            radius: self.blast_radius,
            class,
        }
    }
}

impl Children<'_> {
    /// Captures a parent's live child ids; call this before the parent's listing starts.
    pub fn capture<Id: Ord + Clone>(&self, live: impl IntoIterator<Item = Id>) -> ChildSweep<Id> {
        ChildSweep::capture(self.job.job_type, live)
    }

    /// Decides the parent's sweep from its listing and carries it out over `conn`: the plan goes
    /// to `writer`, a hold is counted and recorded. `parent` joins a hold's activity detail
    /// (e.g. the parent's row id).
    pub async fn reconcile<Id, W>(
        &self,
        conn: &mut sqlx::PgConnection,
        parent: serde_json::Map<String, serde_json::Value>,
        sweep: ChildSweep<Id>,
        listing: ChildListing<Id>,
        writer: &W,
    ) -> Result<ChildOutcome, sqlx::Error>
    where
        Id: Ord + Clone + Send + Sync,
        W: ChildTombstones<Id> + ?Sized,
    {
        let vendor = self.class.vendor.as_str();
        match sweep.decide(listing, &self.radius) {
            SweepDecision::Skip(_) => Ok(ChildOutcome::Skipped),
            SweepDecision::Tombstone(plan) if plan.ids().is_empty() => {
                Ok(ChildOutcome::Tombstoned(0))
            }
            SweepDecision::Tombstone(plan) => {
                let n = writer.tombstone(conn, &plan).await?;
                metrics::counter!("sync_children_tombstoned_total", "vendor" => vendor, "class" => self.class.name)
                    .increment(n);
                Ok(ChildOutcome::Tombstoned(n))
            }
            // Blast radius: a parent losing most of its children waits for an operator.
            SweepDecision::Hold(held) => {
                let (would_tombstone, class_size) = (held.would_tombstone(), held.class_size());
                metrics::counter!("sweeps_held_total", "vendor" => vendor, "class" => self.class.name)
                    .increment(1);
                tracing::warn!(
                    class = self.class.name,
                    would_tombstone,
                    class_size,
                    "child sweep held for operator confirmation"
                );
                let mut detail = serde_json::Map::new();
                detail.insert("class".into(), self.class.name.into());
                detail.extend(parent);
                detail.insert("would_tombstone".into(), would_tombstone.into());
                detail.insert("class_size".into(), class_size.into());
                self.job
                    .record_activity(&mut *conn, "sweep_held", detail.into())
                    .await?;
                Ok(ChildOutcome::Held {
                    would_tombstone,
                    class_size,
                })
            }
        }
    }
}
