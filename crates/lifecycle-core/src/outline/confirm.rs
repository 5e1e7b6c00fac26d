//! Confirm before tombstone. Outline's listings have no total and shift as documents go, so a
//! document missing from a complete listing is only a candidate: the deletion gate
//! ([`crate::deletion::SweepPass::decide`]) plans candidates only from a RECONCILIATION's
//! [`CompleteListing`](crate::listing::CompleteListing), and each one is then read on its own
//! (`documents.info`, `collections.info`). Only a not-found answer, or one that dates a
//! deletion, tombstones it; a found item (moved, archived) or a failed read keeps it.

use std::collections::BTreeMap;

use crate::Timestamp;
use crate::deletion::TombstonePlan;

/// What Outline answered when a vanished candidate was read on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfoAnswer {
    /// Not found (or no longer readable with the connection's token).
    NotFound,
    /// Found, with its `deletedAt`: in the trash when set; otherwise alive (moved, archived).
    Found { deleted_at: Option<Timestamp> },
    /// The read failed (rate limited, 5xx, transport, budget spent).
    Failed,
}

/// Why a candidate stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Outline still has it (in another collection, archived): the listing missed it.
    StillThere,
    /// The read failed: no proof either way.
    Unconfirmed,
}

/// The verdict on one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Tombstone it, dated by Outline's `deletedAt` when it gave one, else when it was read.
    Gone { deleted_at: Option<Timestamp> },
    /// Keep it.
    Kept(Kept),
}

/// Judges one answer.
pub fn verdict(answer: InfoAnswer) -> Verdict {
    match answer {
        InfoAnswer::NotFound => Verdict::Gone { deleted_at: None },
        InfoAnswer::Found {
            deleted_at: Some(at),
        } => Verdict::Gone {
            deleted_at: Some(at),
        },
        InfoAnswer::Found { deleted_at: None } => Verdict::Kept(Kept::StillThere),
        // Fail-closed: an error proves nothing.
        InfoAnswer::Failed => Verdict::Kept(Kept::Unconfirmed),
    }
}

/// The candidates confirmed gone with their tombstone's date (`read_at` when Outline gave
/// none); a candidate without an answer is kept, and an answer for anything that is not a
/// candidate is ignored.
pub fn confirmed_gone<Id: Ord + Clone>(
    candidates: &[Id],
    answers: &BTreeMap<Id, InfoAnswer>,
    read_at: Timestamp,
) -> Vec<(Id, Timestamp)> {
    candidates
        .iter()
        .filter_map(|id| match verdict(*answers.get(id)?) {
            Verdict::Gone { deleted_at } => Some((id.clone(), deleted_at.unwrap_or(read_at))),
            Verdict::Kept(_) => None,
        })
        .collect()
}

/// A gate's plan narrowed to the candidates confirmed gone.
pub fn narrow<Id: Ord + Clone>(
    plan: TombstonePlan<Id>,
    answers: &BTreeMap<Id, InfoAnswer>,
) -> TombstonePlan<Id> {
    let candidates: Vec<Id> = plan.ids().iter().cloned().collect();
    let gone = confirmed_gone(&candidates, answers, Timestamp::UNIX_EPOCH);
    plan.confirmed(gone.into_iter().map(|(id, _)| id))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::deletion::{BlastRadius, SkipReason, SweepDecision, SweepPass};
    use crate::job::SyncJobType;
    use crate::listing::{ListingFault, ListingPage, TotalCount, UpstreamListing};
    use proptest::prelude::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    #[test]
    fn not_found_or_a_dated_deletion_tombstones() {
        assert_eq!(
            verdict(InfoAnswer::NotFound),
            Verdict::Gone { deleted_at: None }
        );
        assert_eq!(
            verdict(InfoAnswer::Found {
                deleted_at: Some(at(5))
            }),
            Verdict::Gone {
                deleted_at: Some(at(5))
            }
        );
    }

    #[test]
    fn found_or_a_failed_read_keeps_the_candidate() {
        assert_eq!(
            verdict(InfoAnswer::Found { deleted_at: None }),
            Verdict::Kept(Kept::StillThere)
        );
        assert_eq!(
            verdict(InfoAnswer::Failed),
            Verdict::Kept(Kept::Unconfirmed)
        );
    }

    #[test]
    fn the_tombstone_is_dated_by_outline_or_by_the_read() {
        let answers = BTreeMap::from([
            ("a", InfoAnswer::NotFound),
            (
                "b",
                InfoAnswer::Found {
                    deleted_at: Some(at(3)),
                },
            ),
            ("c", InfoAnswer::Found { deleted_at: None }),
            ("d", InfoAnswer::Failed),
            ("x", InfoAnswer::NotFound),
        ]);
        let gone = confirmed_gone(&["a", "b", "c", "d", "e"], &answers, at(100));
        // `e` was never asked, `x` was never a candidate.
        assert_eq!(gone, vec![("a", at(100)), ("b", at(3))]);
    }

    fn outline_listing(pages: &[&[u32]], fault: Option<ListingFault>) -> UpstreamListing<u32> {
        let mut listing = UpstreamListing::with_total_count(100, TotalCount::NotOffered);
        for (i, ids) in pages.iter().enumerate() {
            listing.accept_page(ListingPage {
                ids: ids.to_vec(),
                has_next_page: i + 1 < pages.len(),
                end_cursor: Some(format!("{}", i + 1)),
                total_count: None,
            });
        }
        if let Some(fault) = fault {
            listing.record_fault(fault);
        }
        listing
    }

    #[test]
    fn an_incomplete_listing_gives_no_candidate_to_confirm() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2, 3]);
        let listing = outline_listing(&[&[1]], Some(ListingFault::BudgetExhausted));
        assert!(matches!(
            pass.decide(listing.finish(), &BlastRadius::default()),
            SweepDecision::Skip(SkipReason::IncompleteListing(_))
        ));
        // An INITIAL never infers deletion, whole listing or not.
        let pass = SweepPass::capture(SyncJobType::Initial, [1, 2, 3]);
        let listing = outline_listing(&[&[1]], None);
        assert!(matches!(
            pass.decide(listing.finish(), &BlastRadius::default()),
            SweepDecision::Skip(SkipReason::NotReconciliation(_))
        ));
    }

    #[test]
    fn a_complete_listing_plans_its_vanished_and_only_confirmed_ones_go() {
        let pass = SweepPass::capture(SyncJobType::Reconciliation, [1, 2, 3, 4]);
        let listing = outline_listing(&[&[1], &[]], None);
        let SweepDecision::Tombstone(plan) = pass.decide(listing.finish(), &BlastRadius::default())
        else {
            panic!("a complete listing plans");
        };
        let answers = BTreeMap::from([
            (2, InfoAnswer::NotFound),
            (3, InfoAnswer::Found { deleted_at: None }),
            (4, InfoAnswer::Failed),
        ]);
        assert_eq!(narrow(plan, &answers).ids(), &BTreeSet::from([2]));
    }

    fn answer() -> impl Strategy<Value = InfoAnswer> {
        prop_oneof![
            Just(InfoAnswer::NotFound),
            Just(InfoAnswer::Failed),
            Just(InfoAnswer::Found { deleted_at: None }),
            (0i64..100).prop_map(|t| InfoAnswer::Found {
                deleted_at: Some(at(t))
            }),
        ]
    }

    proptest! {
        #[test]
        fn only_candidates_answered_gone_are_tombstoned(
            candidates in proptest::collection::btree_set(0u8..30, 0..15),
            answers in proptest::collection::btree_map(0u8..40, answer(), 0..30),
        ) {
            let candidates: Vec<u8> = candidates.into_iter().collect();
            let gone = confirmed_gone(&candidates, &answers, at(1000));
            for (id, _) in &gone {
                prop_assert!(candidates.contains(id));
                let gone_verdict = matches!(verdict(answers[id]), Verdict::Gone { .. });
                prop_assert!(gone_verdict);
            }
            for id in &candidates {
                let expected = matches!(
                    answers.get(id),
                    Some(InfoAnswer::NotFound | InfoAnswer::Found { deleted_at: Some(_) })
                );
                prop_assert_eq!(gone.iter().any(|(g, _)| g == id), expected);
            }
        }
    }
}
