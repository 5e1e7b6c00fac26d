//! Nested children (comments and review comments under an item, notes under an issue or merge
//! request, replies under a thread): one parent's children are reconciled through the same
//! deletion gate and blast-radius hold as a class of items ([`crate::deletion`]), and what the
//! gate plans is tombstoned, never erased.
//!
//! A child sweep is per parent: its candidates are the parent's live children captured before
//! the parent's listing starts, and the listing is the vendor's nested listing of that parent,
//! whole (every child, every check clean) or partial.

use std::collections::BTreeSet;

use crate::deletion::{BlastRadius, SweepDecision, SweepPass};
use crate::job::SyncJobType;
use crate::listing::{IncompleteReason, ListingPage, TotalCount, UpstreamListing};

/// What one listing of a parent's children returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildListing<Id> {
    /// Every child of the parent, read with every check of the vendor's nested listing clean
    /// (its last page reached, no error in it, its counts consistent).
    Whole(Vec<Id>),
    /// Anything less: a nested page cut, an error in it, a count that disagrees.
    Partial,
}

/// One parent's children, captured before its listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSweep<Id> {
    pass: SweepPass<Id>,
}

impl<Id: Ord + Clone> ChildSweep<Id> {
    /// Captures the parent's live children in a job of type `job`; call this before the
    /// parent's listing starts.
    pub fn capture(job: SyncJobType, candidates: impl IntoIterator<Item = Id>) -> Self {
        Self {
            pass: SweepPass::capture(job, candidates),
        }
    }

    /// The captured candidates.
    pub fn candidates(&self) -> &BTreeSet<Id> {
        self.pass.candidates()
    }

    /// Decides the parent's sweep from its listing, through the items' deletion gate.
    pub fn decide(self, listing: ChildListing<Id>, radius: &BlastRadius) -> SweepDecision<Id> {
        let listing = match listing {
            // The whole nested listing is one page of an otherwise checked listing: a repeated
            // id still fails it closed.
            ChildListing::Whole(ids) => {
                let mut whole = UpstreamListing::with_total_count(1, TotalCount::NotOffered);
                whole.accept_page(ListingPage {
                    ids,
                    has_next_page: false,
                    end_cursor: None,
                    total_count: None,
                });
                whole.finish()
            }
            // Fail-closed: a partial listing of a parent tombstones none of its children.
            ChildListing::Partial => Err(IncompleteReason::NotFinished),
        };
        self.pass.decide(listing, radius)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deletion::SkipReason;
    use crate::job::ALL_JOB_TYPES;
    use proptest::prelude::*;

    fn set(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_whole_listing_tombstones_the_captured_children_it_omits() {
        let sweep = ChildSweep::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        assert_eq!(sweep.candidates(), &set(&[1, 2, 3]));
        let decision = sweep.decide(ChildListing::Whole(vec![3, 1, 9]), &BlastRadius::default());
        let SweepDecision::Tombstone(plan) = decision else {
            panic!("expected a plan, got {decision:?}");
        };
        assert_eq!(plan.ids(), &set(&[2]));
    }

    #[test]
    fn a_partial_listing_tombstones_nothing() {
        let sweep = ChildSweep::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        assert_eq!(
            sweep.decide(ChildListing::Partial, &BlastRadius::default()),
            SweepDecision::Skip(SkipReason::IncompleteListing(IncompleteReason::NotFinished))
        );
    }

    #[test]
    fn a_listing_that_repeats_a_child_tombstones_nothing() {
        let sweep = ChildSweep::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        assert_eq!(
            sweep.decide(ChildListing::Whole(vec![1, 1]), &BlastRadius::default()),
            SweepDecision::Skip(SkipReason::IncompleteListing(IncompleteReason::DuplicateId))
        );
    }

    #[test]
    fn only_a_reconciliation_sweeps_children() {
        for job in [SyncJobType::Initial, SyncJobType::Backfill] {
            let sweep = ChildSweep::capture(job, [1, 2]);
            assert_eq!(
                sweep.decide(ChildListing::Whole(vec![]), &BlastRadius::default()),
                SweepDecision::Skip(SkipReason::NotReconciliation(job))
            );
        }
    }

    #[test]
    fn the_blast_radius_holds_a_parent_losing_most_of_its_children() {
        let sweep = ChildSweep::capture(SyncJobType::Reconciliation, 0..150u32);
        let decision = sweep.decide(ChildListing::Whole(vec![0]), &BlastRadius::default());
        let SweepDecision::Hold(held) = decision else {
            panic!("expected a hold, got {decision:?}");
        };
        assert_eq!((held.would_tombstone(), held.class_size()), (149, 150));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_child_created_during_the_listing_is_never_tombstoned(
            candidates in proptest::collection::btree_set(0u32..300, 0..250),
            listed in proptest::collection::btree_set(0u32..300, 0..250),
            created in proptest::collection::btree_set(300u32..400, 0..20),
            job_index in 0usize..3,
            whole in proptest::bool::ANY,
        ) {
            let job = ALL_JOB_TYPES[job_index];
            let sweep = ChildSweep::capture(job, candidates.iter().copied());
            // A child created during the listing may or may not be listed.
            let ids: Vec<u32> = listed.iter().chain(created.iter().step_by(2)).copied().collect();
            let listing = if whole { ChildListing::Whole(ids) } else { ChildListing::Partial };
            let gone = match sweep.decide(listing, &BlastRadius::default()) {
                SweepDecision::Skip(_) => BTreeSet::new(),
                SweepDecision::Tombstone(plan) => plan.ids().clone(),
                SweepDecision::Hold(held) => held.ids().clone(),
            };
            if job != SyncJobType::Reconciliation || !whole {
                prop_assert!(gone.is_empty());
            } else {
                let expected: BTreeSet<u32> = candidates.difference(&listed).copied().collect();
                prop_assert_eq!(&gone, &expected);
            }
            prop_assert!(gone.is_disjoint(&created));
        }
    }
}
