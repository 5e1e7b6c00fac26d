//! The deletion gate: what a sweep may tombstone.
//!
//! Two independent guards must both hold: the job is a RECONCILIATION and the listing is a
//! [`CompleteListing`]. Candidates are captured before the listing starts, so rows created during
//! the pass are never candidates. Beyond that, a blast-radius hold turns an implausibly large plan
//! into a report an operator must confirm (a lost permission lists complete but empty).

use std::collections::BTreeSet;

use crate::Timestamp;
use crate::job::SyncJobType;
use crate::listing::{CompleteListing, IncompleteReason};
use crate::tombstone::Tombstone;

/// When a plan is held for an operator: more than `numerator/denominator` of the class AND more
/// than `min_rows` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlastRadius {
    /// Numerator of the share of the class above which a plan is held.
    pub numerator: u64,
    /// Denominator of that share (never zero).
    pub denominator: u64,
    /// Row count above which a plan is held.
    pub min_rows: u64,
}

impl Default for BlastRadius {
    /// More than half of a class and more than 100 rows.
    fn default() -> Self {
        Self {
            numerator: 1,
            denominator: 2,
            min_rows: 100,
        }
    }
}

impl BlastRadius {
    /// Whether tombstoning `rows` out of a class of `class_size` must wait for an operator.
    pub fn holds(&self, rows: u64, class_size: u64) -> bool {
        let share = u128::from(rows) * u128::from(self.denominator.max(1))
            > u128::from(class_size) * u128::from(self.numerator);
        share && rows > self.min_rows
    }
}

/// The stored live rows of one entity class, captured before the listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPass<Id> {
    job: SyncJobType,
    candidates: BTreeSet<Id>,
}

/// Why a sweep tombstones nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Only a RECONCILIATION infers deletion from absence.
    NotReconciliation(SyncJobType),
    /// The listing was not provably complete.
    IncompleteListing(IncompleteReason),
}

/// The outcome of a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepDecision<Id> {
    /// Tombstone nothing in this class.
    Skip(SkipReason),
    /// Tombstone these rows.
    Tombstone(TombstonePlan<Id>),
    /// The plan exceeds the blast radius; an operator must confirm it.
    Hold(HeldSweep<Id>),
}

/// Rows a sweep may tombstone. Only the gate makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TombstonePlan<Id> {
    ids: BTreeSet<Id>,
}

impl<Id: Ord + Clone> TombstonePlan<Id> {
    /// The rows to tombstone.
    pub fn ids(&self) -> &BTreeSet<Id> {
        &self.ids
    }

    /// The plan narrowed to the ids the vendor confirmed gone (confirm-before-tombstone): what
    /// it did not confirm stays, and an id the plan did not hold is never added.
    pub fn confirmed(self, confirmed: impl IntoIterator<Item = Id>) -> TombstonePlan<Id> {
        let confirmed: BTreeSet<Id> = confirmed.into_iter().collect();
        TombstonePlan {
            ids: self
                .ids
                .into_iter()
                .filter(|id| confirmed.contains(id))
                .collect(),
        }
    }

    /// The tombstone to write on each row.
    pub fn tombstones(&self, deleted_at: Timestamp) -> Vec<(Id, Tombstone)> {
        self.ids
            .iter()
            .map(|id| (id.clone(), Tombstone { deleted_at }))
            .collect()
    }
}

/// A plan held by the blast-radius rule, with the report an operator reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSweep<Id> {
    plan: TombstonePlan<Id>,
    class_size: u64,
}

/// An operator's confirmation of a held sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfirmation {
    /// Who confirmed it, for the audit trail.
    pub operator: String,
}

impl<Id: Ord + Clone> HeldSweep<Id> {
    /// How many rows the plan would tombstone.
    pub fn would_tombstone(&self) -> u64 {
        self.plan.ids.len() as u64
    }

    /// How many live rows the class had when the pass started.
    pub fn class_size(&self) -> u64 {
        self.class_size
    }

    /// The rows the plan would tombstone.
    pub fn ids(&self) -> &BTreeSet<Id> {
        &self.plan.ids
    }

    /// Releases the plan once an operator confirmed it.
    pub fn confirm(self, _confirmation: &OperatorConfirmation) -> TombstonePlan<Id> {
        self.plan
    }
}

impl<Id: Ord + Clone> SweepPass<Id> {
    /// Captures the class's stored live rows; call this before the listing starts.
    pub fn capture(job: SyncJobType, candidates: impl IntoIterator<Item = Id>) -> Self {
        Self {
            job,
            candidates: candidates.into_iter().collect(),
        }
    }

    /// The captured candidates.
    pub fn candidates(&self) -> &BTreeSet<Id> {
        &self.candidates
    }

    /// Decides the sweep from the listing's outcome.
    pub fn decide(
        self,
        listing: Result<CompleteListing<Id>, IncompleteReason>,
        radius: &BlastRadius,
    ) -> SweepDecision<Id> {
        // Reconciliation-only: no other job type infers deletion from absence.
        if !self.job.may_infer_deletion() {
            return SweepDecision::Skip(SkipReason::NotReconciliation(self.job));
        }
        // Fail-closed: an incomplete listing deletes nothing.
        let listing = match listing {
            Ok(listing) => listing,
            Err(reason) => return SweepDecision::Skip(SkipReason::IncompleteListing(reason)),
        };
        let class_size = self.candidates.len() as u64;
        // Captured candidates only: rows created during the pass are not candidates.
        let ids: BTreeSet<Id> = self
            .candidates
            .into_iter()
            .filter(|id| !listing.contains(id))
            .collect();
        let plan = TombstonePlan { ids };
        // Blast radius: a complete but implausible listing waits for an operator.
        if radius.holds(plan.ids.len() as u64, class_size) {
            SweepDecision::Hold(HeldSweep { plan, class_size })
        } else {
            SweepDecision::Tombstone(plan)
        }
    }
}

/// An upstream deletion the vendor announces as an event (no inference from absence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionSignal {
    /// Slack `message_deleted`.
    SlackMessageDeleted,
    /// Slack `channel_deleted`.
    SlackChannelDeleted,
    /// Slack `channel_archive`.
    SlackChannelArchived,
    /// Slack `channel_left`.
    SlackChannelLeft,
    /// Outline `documents.delete`.
    OutlineDocumentDeleted,
    /// Outline `documents.permanent_delete`.
    OutlineDocumentPermanentlyDeleted,
    /// GitHub `repository.deleted`.
    GithubRepositoryDeleted,
}

/// What an announced deletion does to the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalEffect {
    /// Tombstone the row now.
    Tombstone,
    /// Erase our copy of the channel.
    EraseChannel,
    /// Pause the channel's ingestion.
    PauseChannel,
    /// Remove the repository and its monitors.
    RemoveRepositoryAndMonitors,
}

impl DeletionSignal {
    /// The effect of this signal; signals need no job type or listing.
    pub fn effect(self) -> SignalEffect {
        match self {
            DeletionSignal::SlackMessageDeleted
            | DeletionSignal::OutlineDocumentDeleted
            | DeletionSignal::OutlineDocumentPermanentlyDeleted => SignalEffect::Tombstone,
            DeletionSignal::SlackChannelDeleted => SignalEffect::EraseChannel,
            DeletionSignal::SlackChannelArchived | DeletionSignal::SlackChannelLeft => {
                SignalEffect::PauseChannel
            }
            DeletionSignal::GithubRepositoryDeleted => SignalEffect::RemoveRepositoryAndMonitors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::ALL_JOB_TYPES;
    use crate::listing::{ListingFault, ListingPage, UpstreamListing};
    use proptest::prelude::*;

    fn complete(ids: &[u32]) -> Result<CompleteListing<u32>, IncompleteReason> {
        let mut listing = UpstreamListing::new(1);
        listing.accept_page(ListingPage {
            ids: ids.to_vec(),
            has_next_page: false,
            end_cursor: None,
            total_count: Some(ids.len() as u64),
        });
        listing.finish()
    }

    fn set(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_confirmed_plan_keeps_only_planned_ids_the_vendor_confirmed() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2, 3, 4]);
        let SweepDecision::Tombstone(plan) = pass.decide(complete(&[1]), &BlastRadius::default())
        else {
            panic!("expected a plan");
        };
        // 3 is not confirmed (still readable); 9 was never planned.
        assert_eq!(plan.confirmed([2, 4, 9]).ids(), &set(&[2, 4]));
    }

    #[test]
    fn reconciliation_tombstones_candidates_the_listing_omits() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        assert_eq!(pass.candidates(), &set(&[1, 2, 3]));
        let decision = pass.decide(complete(&[1, 3]), &BlastRadius::default());
        let SweepDecision::Tombstone(plan) = decision else {
            panic!("expected a plan, got {decision:?}");
        };
        assert_eq!(plan.ids(), &set(&[2]));
        let at = Timestamp::from_unix_timestamp(5).unwrap();
        assert_eq!(plan.tombstones(at), vec![(2, Tombstone { deleted_at: at })]);
    }

    #[test]
    fn rows_created_during_the_pass_survive() {
        // Row 4 was inserted after capture and is not yet listed upstream either.
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2]);
        let decision = pass.decide(complete(&[1, 2]), &BlastRadius::default());
        let SweepDecision::Tombstone(plan) = decision else {
            panic!("expected a plan");
        };
        assert!(!plan.ids().contains(&4));
        assert!(plan.ids().is_empty());
    }

    #[test]
    fn initial_and_backfill_never_tombstone() {
        for job in [SyncJobType::Initial, SyncJobType::Backfill] {
            let pass = SweepPass::capture(job, [1, 2, 3]);
            assert_eq!(
                pass.decide(complete(&[]), &BlastRadius::default()),
                SweepDecision::Skip(SkipReason::NotReconciliation(job))
            );
        }
    }

    #[test]
    fn fails_closed_on_an_incomplete_listing_even_on_a_reconcile() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        let reason = IncompleteReason::Fault(ListingFault::BudgetExhausted);
        assert_eq!(
            pass.decide(Err(reason.clone()), &BlastRadius::default()),
            SweepDecision::Skip(SkipReason::IncompleteListing(reason))
        );
    }

    #[test]
    fn blast_radius_holds_mass_deletion_until_confirmed() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, 0..200u32);
        let decision = pass.decide(complete(&[]), &BlastRadius::default());
        let SweepDecision::Hold(held) = decision else {
            panic!("expected a hold");
        };
        assert_eq!(held.would_tombstone(), 200);
        assert_eq!(held.class_size(), 200);
        assert_eq!(held.ids().len(), 200);
        let plan = held.confirm(&OperatorConfirmation {
            operator: "ops@example".into(),
        });
        assert_eq!(plan.ids().len(), 200);
    }

    #[test]
    fn blast_radius_needs_both_share_and_row_count() {
        let radius = BlastRadius::default();
        // More than half but only 100 rows: not held.
        assert!(!radius.holds(100, 150));
        assert!(radius.holds(101, 150));
        // Exactly half: not held.
        assert!(!radius.holds(150, 300));
        assert!(radius.holds(151, 300));
        // Many rows but a small share: not held.
        assert!(!radius.holds(400, 1000));
        let strict = BlastRadius {
            numerator: 1,
            denominator: 10,
            min_rows: 0,
        };
        assert!(strict.holds(2, 10));
        let two_thirds = BlastRadius {
            numerator: 2,
            denominator: 3,
            min_rows: 0,
        };
        assert!(two_thirds.holds(7, 10));
        assert!(!two_thirds.holds(6, 10));
        assert!(!strict.holds(1, 10));
    }

    #[test]
    fn deletion_signals_map_to_their_effects() {
        use DeletionSignal::*;
        assert_eq!(SlackMessageDeleted.effect(), SignalEffect::Tombstone);
        assert_eq!(OutlineDocumentDeleted.effect(), SignalEffect::Tombstone);
        assert_eq!(
            OutlineDocumentPermanentlyDeleted.effect(),
            SignalEffect::Tombstone
        );
        assert_eq!(SlackChannelDeleted.effect(), SignalEffect::EraseChannel);
        assert_eq!(SlackChannelArchived.effect(), SignalEffect::PauseChannel);
        assert_eq!(SlackChannelLeft.effect(), SignalEffect::PauseChannel);
        assert_eq!(
            GithubRepositoryDeleted.effect(),
            SignalEffect::RemoveRepositoryAndMonitors
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn gate_never_tombstones_new_rows_or_on_other_jobs(
            candidates in proptest::collection::btree_set(0u32..300, 0..250),
            listed in proptest::collection::btree_set(0u32..300, 0..250),
            created in proptest::collection::btree_set(300u32..400, 0..20),
            job_index in 0usize..3,
            fault in proptest::bool::ANY,
        ) {
            let job = ALL_JOB_TYPES[job_index];
            let pass = SweepPass::capture(job, candidates.iter().copied());
            // Rows created during the pass may or may not be listed upstream.
            let upstream: Vec<u32> = listed.iter().chain(created.iter().step_by(2)).copied().collect();
            let listing = if fault { Err(IncompleteReason::Fault(ListingFault::Cancelled)) } else { complete(&upstream) };
            let ids = match pass.decide(listing, &BlastRadius::default()) {
                SweepDecision::Skip(_) => BTreeSet::new(),
                SweepDecision::Tombstone(plan) => plan.ids().clone(),
                SweepDecision::Hold(held) => held.ids().clone(),
            };
            if job != SyncJobType::Reconciliation || fault {
                prop_assert!(ids.is_empty());
            } else {
                let expected: BTreeSet<u32> = candidates.difference(&listed).copied().collect();
                prop_assert_eq!(&ids, &expected);
            }
            prop_assert!(ids.is_disjoint(&created));
        }
    }
}
