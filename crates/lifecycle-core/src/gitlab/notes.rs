//! GitLab note reconciliation for one parent (issue or merge request, diff notes included).
//!
//! The flat REST notes listing counts only with explicit `X-Page`, `X-Next-Page` and an unchanged
//! `X-Total` on every page, and a unique note count equal to that total. Candidates are captured
//! before listing, and every missing candidate must also be confirmed gone (404) before removal.

use std::collections::{BTreeMap, BTreeSet};

use super::paging::{ListingGap, OffsetListing, OffsetPageHeaders};
use crate::job::SyncJobType;

/// Why a parent's notes stay untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotesUnreconciled {
    /// Only a RECONCILIATION removes notes.
    NotReconciliation,
    /// A pagination header is missing (GitLab omits counts on large listings).
    MissingHeaders,
    /// `X-Page` is not the page asked for, or `X-Next-Page` does not follow it.
    InconsistentPages,
    /// `X-Total` changed between pages.
    TotalChanged,
    /// A note id appeared twice.
    DuplicateId,
    /// The unique note count differs from `X-Total`.
    CountMismatch,
    /// A page failed.
    FailedPage,
    /// The job was cancelled.
    Cancelled,
    /// The page cap was reached with pages left.
    PageCap,
    /// The listing never reached its last page.
    NotFinished,
    /// A missing note still reads, or its confirmation failed.
    NotConfirmedGone,
}

/// What to do after a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteStep {
    /// Fetch this page.
    FetchPage(u32),
    /// The last page arrived.
    Finished,
    /// Stop: the parent stays unchanged.
    Stopped(NotesUnreconciled),
}

/// A fault while listing notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteFault {
    /// A page request failed.
    FailedPage,
    /// The job was cancelled.
    Cancelled,
}

impl From<ListingGap> for NotesUnreconciled {
    fn from(gap: ListingGap) -> Self {
        match gap {
            ListingGap::MissingHeaders => NotesUnreconciled::MissingHeaders,
            ListingGap::InconsistentPages => NotesUnreconciled::InconsistentPages,
            ListingGap::TotalChanged => NotesUnreconciled::TotalChanged,
            ListingGap::DuplicateId => NotesUnreconciled::DuplicateId,
            ListingGap::CountMismatch => NotesUnreconciled::CountMismatch,
            ListingGap::FailedPage => NotesUnreconciled::FailedPage,
            ListingGap::PageCap => NotesUnreconciled::PageCap,
            ListingGap::NotFinished => NotesUnreconciled::NotFinished,
        }
    }
}

/// The note reconciliation of one parent.
#[derive(Debug, Clone)]
pub struct NoteReconciliation<Id> {
    candidates: BTreeSet<Id>,
    listing: OffsetListing<Id>,
    /// Why it stopped before the listing could decide (not a reconcile, cancelled).
    failed: Option<NotesUnreconciled>,
}

impl<Id: Ord + Clone> NoteReconciliation<Id> {
    /// Captures the parent's mirrored notes before listing starts.
    pub fn begin(
        job: SyncJobType,
        candidates: impl IntoIterator<Item = Id>,
        page_cap: u32,
    ) -> Self {
        Self {
            candidates: candidates.into_iter().collect(),
            listing: OffsetListing::new(page_cap),
            // Reconciliation-only: no other job removes notes.
            failed: (!job.may_infer_deletion()).then_some(NotesUnreconciled::NotReconciliation),
        }
    }

    /// Records a fault; the parent stays unchanged.
    pub fn record_fault(&mut self, fault: NoteFault) {
        match fault {
            NoteFault::FailedPage => self.listing.record_failed_page(),
            // The first reason stands.
            NoteFault::Cancelled if self.listing.gap().is_none() => {
                self.failed.get_or_insert(NotesUnreconciled::Cancelled);
            }
            NoteFault::Cancelled => {}
        }
    }

    fn step(&self) -> NoteStep {
        if let Some(reason) = self.failed.or(self.listing.gap().map(Into::into)) {
            return NoteStep::Stopped(reason);
        }
        match self.listing.next_page() {
            Some(page) => NoteStep::FetchPage(page),
            None => NoteStep::Finished,
        }
    }

    /// Accepts one page with its headers and note ids.
    pub fn accept_page(&mut self, headers: OffsetPageHeaders, ids: Vec<Id>) -> NoteStep {
        if self.failed.is_none() {
            self.listing.accept_page(headers, ids);
        }
        self.step()
    }

    /// Ends the listing: the missing candidates to confirm, or why the parent stays unchanged.
    pub fn finish(self) -> Result<MissingNotes<Id>, NotesUnreconciled> {
        if let Some(reason) = self.failed {
            return Err(reason);
        }
        let seen = self.listing.finish()?;
        // Captured candidates only: notes inserted during the pass survive.
        let ids = self.candidates.difference(&seen).cloned().collect();
        Ok(MissingNotes { ids })
    }
}

/// The result of a direct read of one missing note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// 404: the note is gone.
    Gone,
    /// The note still reads (offset pages shifted).
    StillThere,
    /// The read failed.
    Failed,
}

/// Candidates a complete listing omitted; each must be confirmed gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingNotes<Id> {
    ids: BTreeSet<Id>,
}

impl<Id: Ord + Clone> MissingNotes<Id> {
    /// The notes to read directly.
    pub fn to_confirm(&self) -> &BTreeSet<Id> {
        &self.ids
    }

    /// The notes to remove once every one is confirmed gone; otherwise the parent stays unchanged.
    pub fn confirm(
        self,
        results: &BTreeMap<Id, Confirmation>,
    ) -> Result<BTreeSet<Id>, NotesUnreconciled> {
        // Each missing note must read 404; any other answer keeps the whole parent unchanged.
        if self
            .ids
            .iter()
            .all(|id| results.get(id) == Some(&Confirmation::Gone))
        {
            Ok(self.ids)
        } else {
            Err(NotesUnreconciled::NotConfirmedGone)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(page: u32, next: Option<u32>, total: u64) -> OffsetPageHeaders {
        OffsetPageHeaders {
            page: Some(page),
            next_page: Some(next),
            total: Some(total),
        }
    }

    fn reconcile(candidates: &[u32]) -> NoteReconciliation<u32> {
        NoteReconciliation::begin(SyncJobType::Reconciliation, candidates.iter().copied(), 10)
    }

    #[test]
    fn complete_listing_yields_missing_candidates() {
        let mut r = reconcile(&[1, 2, 3]);
        assert_eq!(
            r.accept_page(headers(1, Some(2), 3), vec![1, 9]),
            NoteStep::FetchPage(2)
        );
        assert_eq!(
            r.accept_page(headers(2, None, 3), vec![3]),
            NoteStep::Finished
        );
        let missing = r.finish().unwrap();
        assert_eq!(missing.to_confirm(), &BTreeSet::from([2]));
    }

    #[test]
    fn notes_inserted_during_the_pass_survive() {
        // Note 7 was inserted after capture; it is neither a candidate nor removable.
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, None, 1), vec![1]);
        assert!(r.finish().unwrap().to_confirm().is_empty());
    }

    #[test]
    fn fails_closed_on_missing_headers() {
        for h in [
            OffsetPageHeaders {
                page: None,
                ..headers(1, None, 1)
            },
            OffsetPageHeaders {
                next_page: None,
                ..headers(1, None, 1)
            },
            OffsetPageHeaders {
                total: None,
                ..headers(1, None, 1)
            },
        ] {
            let mut r = reconcile(&[1]);
            assert_eq!(
                r.accept_page(h, vec![1]),
                NoteStep::Stopped(NotesUnreconciled::MissingHeaders)
            );
            assert_eq!(r.finish(), Err(NotesUnreconciled::MissingHeaders));
        }
    }

    #[test]
    fn fails_closed_on_inconsistent_pages() {
        let mut r = reconcile(&[1]);
        assert_eq!(
            r.accept_page(headers(2, None, 1), vec![1]),
            NoteStep::Stopped(NotesUnreconciled::InconsistentPages)
        );
        let mut r = reconcile(&[1]);
        assert_eq!(
            r.accept_page(headers(1, Some(3), 2), vec![1]),
            NoteStep::Stopped(NotesUnreconciled::InconsistentPages)
        );
    }

    #[test]
    fn fails_closed_when_the_total_changes() {
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, Some(2), 2), vec![1]);
        assert_eq!(
            r.accept_page(headers(2, None, 3), vec![2]),
            NoteStep::Stopped(NotesUnreconciled::TotalChanged)
        );
    }

    #[test]
    fn fails_closed_on_duplicates_and_count_mismatch() {
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, Some(2), 2), vec![1]);
        assert_eq!(
            r.accept_page(headers(2, None, 2), vec![1]),
            NoteStep::Stopped(NotesUnreconciled::DuplicateId)
        );
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, None, 2), vec![1]);
        assert_eq!(r.finish(), Err(NotesUnreconciled::CountMismatch));
    }

    #[test]
    fn fails_closed_on_failed_page_cancellation_and_page_cap() {
        let mut r = reconcile(&[1]);
        r.record_fault(NoteFault::FailedPage);
        assert_eq!(
            r.accept_page(headers(1, None, 1), vec![1]),
            NoteStep::Stopped(NotesUnreconciled::FailedPage)
        );
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, None, 1), vec![1]);
        r.record_fault(NoteFault::Cancelled);
        assert_eq!(r.finish(), Err(NotesUnreconciled::Cancelled));
        let mut r = NoteReconciliation::begin(SyncJobType::Reconciliation, [1u32], 1);
        assert_eq!(
            r.accept_page(headers(1, Some(2), 2), vec![1]),
            NoteStep::Stopped(NotesUnreconciled::PageCap)
        );
        let mut r = NoteReconciliation::begin(SyncJobType::Reconciliation, [1u32], 1);
        assert_eq!(
            r.accept_page(headers(1, None, 1), vec![1]),
            NoteStep::Finished
        );
    }

    #[test]
    fn fails_closed_before_the_last_page() {
        let mut r = reconcile(&[1]);
        r.accept_page(headers(1, Some(2), 2), vec![1]);
        assert_eq!(r.finish(), Err(NotesUnreconciled::NotFinished));
    }

    #[test]
    fn initial_and_backfill_never_remove_notes() {
        for job in [SyncJobType::Initial, SyncJobType::Backfill] {
            let mut r = NoteReconciliation::begin(job, [1u32, 2], 10);
            assert_eq!(
                r.accept_page(headers(1, None, 1), vec![1]),
                NoteStep::Stopped(NotesUnreconciled::NotReconciliation)
            );
            assert_eq!(r.finish(), Err(NotesUnreconciled::NotReconciliation));
        }
    }

    fn missing() -> MissingNotes<u32> {
        let mut r = reconcile(&[1, 2, 3]);
        r.accept_page(headers(1, None, 1), vec![1]);
        r.finish().unwrap()
    }

    #[test]
    fn every_missing_note_must_be_confirmed_gone() {
        let gone = BTreeMap::from([(2, Confirmation::Gone), (3, Confirmation::Gone)]);
        assert_eq!(missing().confirm(&gone), Ok(BTreeSet::from([2, 3])));
    }

    #[test]
    fn any_failed_or_positive_confirmation_keeps_the_parent_unchanged() {
        for other in [Confirmation::StillThere, Confirmation::Failed] {
            let results = BTreeMap::from([(2, Confirmation::Gone), (3, other)]);
            assert_eq!(
                missing().confirm(&results),
                Err(NotesUnreconciled::NotConfirmedGone)
            );
        }
        let unasked = BTreeMap::from([(2, Confirmation::Gone)]);
        assert_eq!(
            missing().confirm(&unasked),
            Err(NotesUnreconciled::NotConfirmedGone)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn removals_are_only_confirmed_missing_candidates(
            candidates in proptest::collection::btree_set(0u32..40, 0..30),
            listed in proptest::collection::btree_set(0u32..60, 0..30),
            gone in proptest::collection::btree_set(0u32..40, 0..40),
            per_page in 1usize..8,
        ) {
            let listed: Vec<u32> = listed.into_iter().collect();
            let chunks: Vec<&[u32]> = if listed.is_empty() { vec![&[]] } else { listed.chunks(per_page).collect() };
            let mut r = NoteReconciliation::begin(SyncJobType::Reconciliation, candidates.iter().copied(), 100);
            for (i, chunk) in chunks.iter().enumerate() {
                let page = i as u32 + 1;
                let next = (i + 1 < chunks.len()).then_some(page + 1);
                r.accept_page(headers(page, next, listed.len() as u64), chunk.to_vec());
            }
            let missing = r.finish().unwrap();
            let results: BTreeMap<u32, Confirmation> = missing.to_confirm().iter().map(|id| {
                (*id, if gone.contains(id) { Confirmation::Gone } else { Confirmation::StillThere })
            }).collect();
            let expected: BTreeSet<u32> = candidates.iter().filter(|id| !listed.contains(id)).copied().collect();
            prop_assert_eq!(missing.to_confirm(), &expected);
            match missing.confirm(&results) {
                Ok(removed) => {
                    prop_assert!(removed.is_subset(&gone));
                    prop_assert_eq!(removed, expected);
                }
                Err(_) => prop_assert!(!expected.is_subset(&gone)),
            }
        }
    }
}
