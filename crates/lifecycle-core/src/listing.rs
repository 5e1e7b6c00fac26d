//! Fail-closed upstream listings.
//!
//! An [`UpstreamListing`] starts incomplete and yields a [`CompleteListing`] only through
//! [`UpstreamListing::finish`] after one clean exit. Nothing else can build a `CompleteListing`, and
//! it offers no way to merge with another listing, so a sweep can only ever act on one whole pass.

use std::collections::BTreeSet;
use std::fmt;

use crate::vendor_error::VendorErrorClass;

/// One page of an upstream listing as the vendor returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingPage<Id> {
    /// The ids of the nodes on this page.
    pub ids: Vec<Id>,
    /// The vendor's `hasNextPage`.
    pub has_next_page: bool,
    /// The vendor's `endCursor`.
    pub end_cursor: Option<String>,
    /// The vendor's own `totalCount`, when the page reports one.
    pub total_count: Option<u64>,
}

/// Something that went wrong while listing; any of these leaves the listing incomplete.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListingFault {
    /// A read failed, as the vendor's client classified it.
    Vendor(VendorErrorClass),
    /// The vendor reported an error inside an otherwise usable page (a GraphQL error on a
    /// node, a partial answer): whatever the vendor, the listing is not whole.
    VendorPageAnomaly,
    /// The request failed with an HTTP status.
    HttpError(u16),
    /// The rate-limit accounting stopped the listing.
    RateLimitAbort,
    /// The job was cancelled.
    Cancelled,
    /// The quota budget of the pass is spent.
    BudgetExhausted,
    /// Anything else (a transport error, a decode failure).
    Exception,
}

// Reasons name a fault by its class, never by a Rust variant name.
impl fmt::Display for ListingFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListingFault::Vendor(class) => write!(f, "{class}"),
            ListingFault::VendorPageAnomaly => f.write_str("vendor_page_anomaly"),
            ListingFault::HttpError(status) => write!(f, "http_error: {status}"),
            ListingFault::RateLimitAbort => f.write_str("rate_limited"),
            ListingFault::Cancelled => f.write_str("canceled"),
            ListingFault::BudgetExhausted => f.write_str("budget_exhausted"),
            ListingFault::Exception => f.write_str("unclassified_error"),
        }
    }
}

/// Why a listing is not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncompleteReason {
    /// A fault stopped the listing.
    #[error("listing stopped by {0}")]
    Fault(ListingFault),
    /// The page cap was reached while the vendor still had pages.
    #[error("listing truncated at the page cap of {cap} pages")]
    PageCapTruncated {
        /// The cap in force.
        cap: u32,
    },
    /// A page announced a next page without a cursor.
    #[error("a page announced a next page without a cursor")]
    MissingCursor,
    /// A page returned the same cursor as the page before it.
    #[error("the cursor did not advance")]
    CursorDidNotAdvance,
    /// An id appeared twice.
    #[error("an id was listed twice")]
    DuplicateId,
    /// A page did not report the server's total count.
    #[error("a page did not report the total count")]
    MissingTotalCount,
    /// Pages disagreed on the server's total count.
    #[error("the total count changed from {first} to {now}")]
    TotalCountChanged {
        /// The total of the first page.
        first: u64,
        /// The total of a later page.
        now: u64,
    },
    /// The listed node count differs from the server's total.
    #[error("listed {listed} nodes but the server counts {total}")]
    CountMismatch {
        /// Unique nodes listed.
        listed: u64,
        /// The server's total count.
        total: u64,
    },
    /// A page arrived after the last page.
    #[error("a page arrived after the last page")]
    PageAfterLastPage,
    /// The listing was finished before its last page.
    #[error("the listing never reached its last page")]
    NotFinished,
}

/// What the caller should do after a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextStep {
    /// Fetch the page after this cursor.
    FetchAfter(String),
    /// The last page arrived; call [`UpstreamListing::finish`].
    Finished,
    /// The listing is incomplete; stop fetching.
    Stopped(IncompleteReason),
}

/// Whether the vendor's contract reports a total count for this listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TotalCount {
    /// Every page must report the total, unchanged, and the unique node count must equal it.
    Required,
    /// The endpoint has no total (Outline's enumeration); completeness rests on the other checks.
    NotOffered,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Paging,
    ReachedEnd,
    Failed(IncompleteReason),
}

/// A listing in progress. It is incomplete until [`finish`](Self::finish) proves otherwise.
#[derive(Debug, Clone)]
pub struct UpstreamListing<Id> {
    ids: BTreeSet<Id>,
    page_cap: u32,
    pages: u32,
    last_cursor: Option<String>,
    total: Option<u64>,
    total_count: TotalCount,
    state: State,
}

impl<Id: Ord> UpstreamListing<Id> {
    /// Starts a listing that may fetch at most `page_cap` pages and requires the server's total.
    pub fn new(page_cap: u32) -> Self {
        Self::with_total_count(page_cap, TotalCount::Required)
    }

    /// Starts a listing with an explicit total-count policy.
    pub fn with_total_count(page_cap: u32, total_count: TotalCount) -> Self {
        Self {
            ids: BTreeSet::new(),
            page_cap,
            pages: 0,
            last_cursor: None,
            total: None,
            total_count,
            state: State::Paging,
        }
    }

    /// Whether the listing has reached a clean end so far (false from the start).
    pub fn is_complete(&self) -> bool {
        self.state == State::ReachedEnd && self.count_check().is_ok()
    }

    /// Records a fault; the listing can no longer complete.
    pub fn record_fault(&mut self, fault: ListingFault) {
        self.fail(IncompleteReason::Fault(fault));
    }

    /// Accepts the next page and says what to do next.
    pub fn accept_page(&mut self, page: ListingPage<Id>) -> NextStep {
        match &self.state {
            State::Failed(reason) => return NextStep::Stopped(reason.clone()),
            State::ReachedEnd => {
                // Fail-closed: more data after the last page means we misread the end.
                self.fail(IncompleteReason::PageAfterLastPage);
                return self.step();
            }
            State::Paging => {}
        }
        self.pages += 1;
        if let Err(reason) = self.check_page(&page) {
            self.fail(reason);
            return self.step();
        }
        if self.total.is_none() {
            self.total = page.total_count;
        }
        for id in page.ids {
            if !self.ids.insert(id) {
                // Fail-closed: a repeated id means offsets shifted under us.
                self.fail(IncompleteReason::DuplicateId);
                return self.step();
            }
        }
        if let Some(cursor) = page.end_cursor {
            self.last_cursor = Some(cursor);
        }
        if !page.has_next_page {
            self.state = State::ReachedEnd;
        } else if self.pages >= self.page_cap {
            // Fail-closed: a page-cap truncation leaves the listing incomplete.
            self.fail(IncompleteReason::PageCapTruncated { cap: self.page_cap });
        }
        self.step()
    }

    fn check_page(&self, page: &ListingPage<Id>) -> Result<(), IncompleteReason> {
        if page.has_next_page && page.end_cursor.is_none() {
            return Err(IncompleteReason::MissingCursor);
        }
        if page.end_cursor.is_some() && page.end_cursor == self.last_cursor {
            // Fail-closed: a cursor that does not advance would repeat or skip nodes.
            return Err(IncompleteReason::CursorDidNotAdvance);
        }
        if self.total_count == TotalCount::Required {
            let total = page
                .total_count
                .ok_or(IncompleteReason::MissingTotalCount)?;
            if let Some(first) = self.total
                && first != total
            {
                return Err(IncompleteReason::TotalCountChanged { first, now: total });
            }
        }
        Ok(())
    }

    fn fail(&mut self, reason: IncompleteReason) {
        // The first reason is the one reported; a failed listing never recovers.
        if !matches!(self.state, State::Failed(_)) {
            self.state = State::Failed(reason);
        }
    }

    fn step(&self) -> NextStep {
        match &self.state {
            State::Failed(reason) => NextStep::Stopped(reason.clone()),
            State::ReachedEnd => NextStep::Finished,
            State::Paging => NextStep::FetchAfter(self.last_cursor.clone().unwrap_or_default()),
        }
    }

    fn count_check(&self) -> Result<(), IncompleteReason> {
        match (self.total_count, self.total) {
            (TotalCount::NotOffered, _) => Ok(()),
            (TotalCount::Required, None) => Err(IncompleteReason::MissingTotalCount),
            (TotalCount::Required, Some(total)) => {
                let listed = self.ids.len() as u64;
                if listed == total {
                    Ok(())
                } else {
                    Err(IncompleteReason::CountMismatch { listed, total })
                }
            }
        }
    }

    /// Ends the listing: a [`CompleteListing`] after one clean exit, otherwise why not.
    pub fn finish(self) -> Result<CompleteListing<Id>, IncompleteReason> {
        match self.state {
            State::Failed(reason) => Err(reason),
            State::Paging => Err(IncompleteReason::NotFinished),
            State::ReachedEnd => {
                self.count_check()?;
                Ok(CompleteListing { ids: self.ids })
            }
        }
    }
}

/// A provably complete upstream listing. Only [`UpstreamListing::finish`] makes one.
///
/// ```compile_fail
/// use lifecycle_core::listing::CompleteListing;
/// let forged: CompleteListing<u64> = CompleteListing { ids: Default::default() };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteListing<Id> {
    ids: BTreeSet<Id>,
}

impl<Id: Ord> CompleteListing<Id> {
    /// Whether the vendor listed this id.
    pub fn contains(&self, id: &Id) -> bool {
        self.ids.contains(id)
    }

    /// The listed ids, in order.
    pub fn ids(&self) -> &BTreeSet<Id> {
        &self.ids
    }

    /// How many unique ids were listed.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the vendor listed nothing.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn page(ids: &[u32], next: Option<&str>, total: u64) -> ListingPage<u32> {
        ListingPage {
            ids: ids.to_vec(),
            has_next_page: next.is_some(),
            end_cursor: next.map(str::to_owned).or_else(|| Some("end".to_owned())),
            total_count: Some(total),
        }
    }

    fn two_clean_pages() -> UpstreamListing<u32> {
        let mut listing = UpstreamListing::new(10);
        assert_eq!(
            listing.accept_page(page(&[1, 2], Some("c1"), 3)),
            NextStep::FetchAfter("c1".into())
        );
        assert!(!listing.is_complete());
        assert_eq!(listing.accept_page(page(&[3], None, 3)), NextStep::Finished);
        listing
    }

    #[test]
    fn clean_exit_completes() {
        let listing = two_clean_pages();
        assert!(listing.is_complete());
        let complete = listing.finish().unwrap();
        assert_eq!(complete.len(), 3);
        assert!(complete.contains(&2));
        assert!(!complete.contains(&4));
        assert!(!complete.is_empty());
        assert_eq!(
            complete.ids().iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn empty_listing_with_zero_total_completes() {
        let mut listing = UpstreamListing::<u32>::new(1);
        let step = listing.accept_page(ListingPage {
            ids: vec![],
            has_next_page: false,
            end_cursor: None,
            total_count: Some(0),
        });
        assert_eq!(step, NextStep::Finished);
        assert!(listing.finish().unwrap().is_empty());
    }

    #[test]
    fn fails_closed_on_a_fresh_listing() {
        let listing = UpstreamListing::<u32>::new(10);
        assert!(!listing.is_complete());
        assert_eq!(listing.finish(), Err(IncompleteReason::NotFinished));
    }

    #[test]
    fn fails_closed_before_the_last_page() {
        let mut listing = UpstreamListing::new(10);
        listing.accept_page(page(&[1, 2], Some("c1"), 3));
        assert_eq!(listing.finish(), Err(IncompleteReason::NotFinished));
    }

    #[test]
    fn fails_closed_on_every_fault() {
        let faults = [
            ListingFault::VendorPageAnomaly,
            ListingFault::HttpError(502),
            ListingFault::RateLimitAbort,
            ListingFault::Cancelled,
            ListingFault::BudgetExhausted,
            ListingFault::Exception,
            ListingFault::Vendor(VendorErrorClass::BadCredentials),
        ];
        for fault in faults {
            let mut listing = UpstreamListing::new(10);
            listing.accept_page(page(&[1, 2], Some("c1"), 3));
            listing.record_fault(fault.clone());
            assert_eq!(
                listing.accept_page(page(&[3], None, 3)),
                NextStep::Stopped(IncompleteReason::Fault(fault.clone()))
            );
            assert!(!listing.is_complete());
            assert_eq!(listing.finish(), Err(IncompleteReason::Fault(fault)));
        }
    }

    #[test]
    fn fails_closed_on_a_fault_after_the_last_page() {
        let mut listing = two_clean_pages();
        listing.record_fault(ListingFault::Cancelled);
        assert_eq!(
            listing.finish(),
            Err(IncompleteReason::Fault(ListingFault::Cancelled))
        );
    }

    #[test]
    fn fails_closed_on_page_cap_truncation() {
        let mut listing = UpstreamListing::new(1);
        assert_eq!(
            listing.accept_page(page(&[1, 2], Some("c1"), 3)),
            NextStep::Stopped(IncompleteReason::PageCapTruncated { cap: 1 })
        );
        assert!(listing.finish().is_err());
    }

    #[test]
    fn last_page_at_the_cap_still_completes() {
        let mut listing = UpstreamListing::new(2);
        listing.accept_page(page(&[1, 2], Some("c1"), 3));
        assert_eq!(listing.accept_page(page(&[3], None, 3)), NextStep::Finished);
        assert!(listing.finish().is_ok());
    }

    #[test]
    fn fails_closed_when_the_cursor_does_not_advance() {
        let mut listing = UpstreamListing::new(10);
        listing.accept_page(page(&[1], Some("c1"), 3));
        assert_eq!(
            listing.accept_page(page(&[2], Some("c1"), 3)),
            NextStep::Stopped(IncompleteReason::CursorDidNotAdvance)
        );
    }

    #[test]
    fn fails_closed_on_a_next_page_without_cursor() {
        let mut listing = UpstreamListing::new(10);
        let step = listing.accept_page(ListingPage {
            ids: vec![1],
            has_next_page: true,
            end_cursor: None,
            total_count: Some(2),
        });
        assert_eq!(step, NextStep::Stopped(IncompleteReason::MissingCursor));
    }

    #[test]
    fn fails_closed_on_duplicate_ids() {
        let mut listing = UpstreamListing::new(10);
        listing.accept_page(page(&[1, 2], Some("c1"), 3));
        assert_eq!(
            listing.accept_page(page(&[2, 3], None, 3)),
            NextStep::Stopped(IncompleteReason::DuplicateId)
        );
    }

    #[test]
    fn fails_closed_when_the_count_differs_from_the_total() {
        let mut listing = UpstreamListing::new(10);
        listing.accept_page(page(&[1, 2], None, 3));
        assert!(!listing.is_complete());
        assert_eq!(
            listing.finish(),
            Err(IncompleteReason::CountMismatch {
                listed: 2,
                total: 3
            })
        );
    }

    #[test]
    fn fails_closed_when_the_total_changes() {
        let mut listing = UpstreamListing::new(10);
        listing.accept_page(page(&[1, 2], Some("c1"), 3));
        assert_eq!(
            listing.accept_page(page(&[3, 4], None, 4)),
            NextStep::Stopped(IncompleteReason::TotalCountChanged { first: 3, now: 4 })
        );
    }

    #[test]
    fn fails_closed_without_a_total() {
        let mut listing = UpstreamListing::new(10);
        let step = listing.accept_page(ListingPage {
            ids: vec![1],
            has_next_page: false,
            end_cursor: None,
            total_count: None,
        });
        assert_eq!(step, NextStep::Stopped(IncompleteReason::MissingTotalCount));
    }

    #[test]
    fn uncounted_listing_completes_without_a_total() {
        let mut listing = UpstreamListing::with_total_count(10, TotalCount::NotOffered);
        listing.accept_page(ListingPage {
            ids: vec![1],
            has_next_page: true,
            end_cursor: Some("c1".into()),
            total_count: None,
        });
        listing.accept_page(ListingPage {
            ids: vec![2],
            has_next_page: false,
            end_cursor: None,
            total_count: None,
        });
        assert!(listing.is_complete());
        assert_eq!(listing.finish().unwrap().len(), 2);
    }

    #[test]
    fn fails_closed_on_a_page_after_the_last_page() {
        let mut listing = two_clean_pages();
        assert_eq!(
            listing.accept_page(page(&[9], None, 3)),
            NextStep::Stopped(IncompleteReason::PageAfterLastPage)
        );
        assert_eq!(listing.finish(), Err(IncompleteReason::PageAfterLastPage));
    }

    #[test]
    fn first_failure_is_the_reported_one() {
        let mut listing = UpstreamListing::<u32>::new(10);
        listing.record_fault(ListingFault::RateLimitAbort);
        listing.record_fault(ListingFault::Cancelled);
        assert_eq!(
            listing.finish(),
            Err(IncompleteReason::Fault(ListingFault::RateLimitAbort))
        );
    }

    #[derive(Debug, Clone)]
    enum Event {
        Page(ListingPage<u8>),
        Fault,
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        let page = (
            proptest::collection::vec(0u8..12, 0..4),
            proptest::bool::weighted(0.6),
            proptest::option::weighted(0.9, 0u8..6),
            proptest::option::weighted(0.9, 4u64..7),
        )
            .prop_map(|(ids, has_next_page, cursor, total_count)| {
                Event::Page(ListingPage {
                    ids,
                    has_next_page,
                    end_cursor: cursor.map(|c| format!("c{c}")),
                    total_count,
                })
            });
        prop_oneof![10 => page, 1 => Just(Event::Fault)]
    }

    /// An independent statement of a clean exit.
    fn clean(events: &[Event], cap: u32) -> bool {
        let mut pages = Vec::new();
        for event in events {
            match event {
                Event::Fault => return false,
                Event::Page(page) => pages.push(page),
            }
        }
        let Some((last, before)) = pages.split_last() else {
            return false;
        };
        if last.has_next_page || before.iter().any(|p| !p.has_next_page) {
            return false;
        }
        if pages.len() > cap as usize {
            return false;
        }
        let mut previous: Option<&String> = None;
        let mut seen = BTreeSet::new();
        for page in &pages {
            if page.has_next_page && page.end_cursor.is_none() {
                return false;
            }
            if let Some(cursor) = &page.end_cursor {
                if previous == Some(cursor) {
                    return false;
                }
                previous = Some(cursor);
            }
            if page.total_count.is_none() || page.total_count != pages[0].total_count {
                return false;
            }
            for id in &page.ids {
                if !seen.insert(*id) {
                    return false;
                }
            }
        }
        Some(seen.len() as u64) == pages[0].total_count
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn listings_under_random_faults_complete_only_when_clean(
            events in proptest::collection::vec(arb_event(), 0..6),
            cap in 1u32..5,
        ) {
            let mut listing = UpstreamListing::new(cap);
            for event in &events {
                match event {
                    Event::Fault => listing.record_fault(ListingFault::Exception),
                    Event::Page(page) => {
                        listing.accept_page(page.clone());
                    }
                }
            }
            let complete = listing.is_complete();
            let finished = listing.finish();
            prop_assert_eq!(finished.is_ok(), clean(&events, cap));
            prop_assert_eq!(complete, finished.is_ok());
        }

        #[test]
        fn clean_listings_always_complete(
            ids in proptest::collection::btree_set(any::<u16>(), 0..40),
            per_page in 1usize..7,
        ) {
            let ids: Vec<u16> = ids.into_iter().collect();
            let chunks: Vec<&[u16]> = if ids.is_empty() { vec![&[]] } else { ids.chunks(per_page).collect() };
            let mut listing = UpstreamListing::new(chunks.len() as u32);
            for (i, chunk) in chunks.iter().enumerate() {
                let last = i + 1 == chunks.len();
                listing.accept_page(ListingPage {
                    ids: chunk.to_vec(),
                    has_next_page: !last,
                    end_cursor: Some(format!("c{i}")),
                    total_count: Some(ids.len() as u64),
                });
            }
            let complete = listing.finish().unwrap();
            prop_assert_eq!(complete.len(), ids.len());
        }
    }
}
