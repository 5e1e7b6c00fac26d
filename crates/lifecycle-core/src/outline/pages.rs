//! Outline's enumeration as a fail-closed listing. `documents.list` and `collections.list` page by
//! `offset`/`limit` in a stable order and report no total, so the listing is an
//! [`UpstreamListing`] with [`TotalCount::NotOffered`] that ends only on an empty page. A page
//! longer than asked, or a non-empty page after a short one (documents moved under the offsets),
//! is a [`ListingFault::VendorPageAnomaly`]: the listing is not whole and tombstones nothing.

use crate::listing::{
    CompleteListing, IncompleteReason, ListingFault, ListingPage, NextStep, TotalCount,
    UpstreamListing,
};

/// What to do after a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetStep {
    /// Ask for the page at `offset`, `limit` long.
    Fetch { offset: u64, limit: u32 },
    /// The empty page arrived: call [`OffsetPages::finish`].
    Finished,
    /// Not whole; stop asking.
    Stopped(IncompleteReason),
}

/// An Outline enumeration in progress.
#[derive(Debug, Clone)]
pub struct OffsetPages<Id> {
    listing: UpstreamListing<Id>,
    limit: u32,
    offset: u64,
    short: bool,
}

impl<Id: Ord> OffsetPages<Id> {
    /// Starts at offset 0 with pages of `limit` (at least 1), at most `page_cap` pages.
    pub fn new(limit: u32, page_cap: u32) -> Self {
        OffsetPages {
            listing: UpstreamListing::with_total_count(page_cap, TotalCount::NotOffered),
            limit: limit.max(1),
            offset: 0,
            short: false,
        }
    }

    /// The first page to ask for.
    pub fn first(&self) -> OffsetStep {
        OffsetStep::Fetch {
            offset: self.offset,
            limit: self.limit,
        }
    }

    /// A read failed or was stopped: the listing can no longer complete.
    pub fn record_fault(&mut self, fault: ListingFault) {
        self.listing.record_fault(fault);
    }

    /// Accepts the ids of the page asked for last.
    pub fn accept(&mut self, ids: Vec<Id>) -> OffsetStep {
        let n = ids.len() as u64;
        // Fail-closed: more than asked, or more after a short page, means the offsets moved.
        if n > u64::from(self.limit) || (self.short && n > 0) {
            self.listing.record_fault(ListingFault::VendorPageAnomaly);
        }
        let last = n == 0;
        self.offset += n;
        self.short = n < u64::from(self.limit);
        let step = self.listing.accept_page(ListingPage {
            ids,
            has_next_page: !last,
            // The offset reached is the cursor; the empty last page needs none.
            end_cursor: (!last).then(|| self.offset.to_string()),
            total_count: None,
        });
        match step {
            NextStep::FetchAfter(_) => OffsetStep::Fetch {
                offset: self.offset,
                limit: self.limit,
            },
            NextStep::Finished => OffsetStep::Finished,
            NextStep::Stopped(reason) => OffsetStep::Stopped(reason),
        }
    }

    /// The whole listing after its empty page, otherwise why not.
    pub fn finish(self) -> Result<CompleteListing<Id>, IncompleteReason> {
        self.listing.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fetch(offset: u64) -> OffsetStep {
        OffsetStep::Fetch { offset, limit: 2 }
    }

    #[test]
    fn full_pages_then_an_empty_one_complete_the_listing() {
        let mut pages = OffsetPages::new(2, 10);
        assert_eq!(pages.first(), fetch(0));
        assert_eq!(pages.accept(vec![1, 2]), fetch(2));
        assert_eq!(pages.accept(vec![3]), fetch(3));
        assert_eq!(pages.accept(vec![]), OffsetStep::Finished);
        assert_eq!(pages.finish().unwrap().len(), 3);
    }

    #[test]
    fn a_page_after_a_short_one_is_an_anomaly() {
        let mut pages = OffsetPages::new(2, 10);
        pages.accept(vec![1]);
        assert_eq!(
            pages.accept(vec![2]),
            OffsetStep::Stopped(IncompleteReason::Fault(ListingFault::VendorPageAnomaly))
        );
        assert!(pages.finish().is_err());
    }

    #[test]
    fn a_longer_page_than_asked_or_a_repeated_id_is_not_whole() {
        let mut pages = OffsetPages::new(2, 10);
        assert!(matches!(
            pages.accept(vec![1, 2, 3]),
            OffsetStep::Stopped(_)
        ));
        let mut pages = OffsetPages::new(2, 10);
        pages.accept(vec![1, 2]);
        // A document moved back under the offsets shows up twice.
        assert_eq!(
            pages.accept(vec![2, 3]),
            OffsetStep::Stopped(IncompleteReason::DuplicateId)
        );
    }

    #[test]
    fn a_fault_or_the_page_cap_leaves_it_incomplete() {
        let mut pages = OffsetPages::new(2, 10);
        pages.accept(vec![1, 2]);
        pages.record_fault(ListingFault::BudgetExhausted);
        assert!(pages.finish().is_err());
        let mut pages = OffsetPages::new(1, 2);
        pages.accept(vec![1]);
        assert!(matches!(
            pages.accept(vec![2]),
            OffsetStep::Stopped(IncompleteReason::PageCapTruncated { cap: 2 })
        ));
        // Never reaching the empty page is not whole either.
        let mut pages = OffsetPages::new(2, 10);
        pages.accept(vec![1, 2]);
        assert_eq!(pages.finish(), Err(IncompleteReason::NotFinished));
    }

    proptest! {
        #[test]
        fn a_clean_enumeration_lists_every_id_once(n in 0u32..50, limit in 1u32..7) {
            let ids: Vec<u32> = (0..n).collect();
            let mut pages = OffsetPages::new(limit, 100);
            let mut step = pages.first();
            while let OffsetStep::Fetch { offset, limit } = step {
                let page: Vec<u32> = ids.iter().copied().skip(offset as usize).take(limit as usize).collect();
                step = pages.accept(page);
            }
            prop_assert_eq!(step, OffsetStep::Finished);
            prop_assert_eq!(pages.finish().unwrap().len(), n as usize);
        }
    }
}
