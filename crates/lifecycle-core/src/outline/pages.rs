//! Outline's enumeration as a fail-closed listing. `documents.list` and `collections.list` page by
//! `offset`/`limit` in a stable order and report no total, so the listing is an
//! [`UpstreamListing`](crate::listing::UpstreamListing) with [`TotalCount::NotOffered`](crate::listing::TotalCount)
//! that ends only on an empty page. The listing's cursor is an [`OffsetCursor`]: the offset
//! reached, and whether the page that reached it was short. A page longer than asked, or a
//! non-empty page after a short one (documents moved under the offsets), is an anomaly: the
//! listing is not whole and tombstones nothing.

use std::fmt;

use crate::listing::ListingPage;

/// Where the next page of an offset enumeration starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetCursor {
    /// Items read so far.
    pub offset: u64,
    /// The page that reached `offset` was shorter than asked: only an empty page may follow.
    pub after_short: bool,
}

/// A cursor that is not one [`OffsetCursor`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an offset cursor: {0:?}")]
pub struct BadCursor(pub String);

/// One page read at a cursor, as the listing takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetPage<Id> {
    /// Its ids, ending the listing when empty; its cursor is the next page's.
    pub listing: ListingPage<Id>,
    /// Longer than asked, or items after a short page: the offsets moved under the listing.
    pub anomaly: bool,
}

impl OffsetCursor {
    /// The cursor the engine passed (`None`: the first page).
    pub fn parse(cursor: Option<&str>) -> Result<OffsetCursor, BadCursor> {
        let Some(raw) = cursor else {
            return Ok(OffsetCursor::default());
        };
        let (digits, after_short) = match raw.strip_suffix('s') {
            Some(digits) => (digits, true),
            None => (raw, false),
        };
        let offset = digits.parse().map_err(|_| BadCursor(raw.to_owned()))?;
        Ok(OffsetCursor {
            offset,
            after_short,
        })
    }

    /// The page of `ids` read here with `limit`: the listing ends on an empty page, and the
    /// cursor after it records where it ended and whether it was short.
    pub fn page<Id>(self, ids: Vec<Id>, limit: u32) -> OffsetPage<Id> {
        let n = ids.len() as u64;
        let limit = u64::from(limit.max(1));
        // Fail-closed: more than asked, or more after a short page, means the offsets moved.
        let anomaly = n > limit || (self.after_short && n > 0);
        let next = OffsetCursor {
            offset: self.offset + n,
            after_short: n < limit,
        };
        OffsetPage {
            listing: ListingPage {
                has_next_page: n > 0,
                end_cursor: (n > 0).then(|| next.to_string()),
                total_count: None,
                ids,
            },
            anomaly,
        }
    }
}

impl fmt::Display for OffsetCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}",
            self.offset,
            if self.after_short { "s" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::{
        CompleteListing, IncompleteReason, ListingFault, NextStep, TotalCount, UpstreamListing,
    };
    use proptest::prelude::*;

    /// Lists `pages` (each the answer at the cursor reached) as the engine does.
    fn list(
        limit: u32,
        cap: u32,
        pages: &[Vec<u32>],
    ) -> Result<CompleteListing<u32>, IncompleteReason> {
        let mut listing = UpstreamListing::with_total_count(cap, TotalCount::NotOffered);
        let mut cursor: Option<String> = None;
        for ids in pages {
            let page = OffsetCursor::parse(cursor.as_deref())
                .unwrap()
                .page(ids.clone(), limit);
            if page.anomaly {
                listing.record_fault(ListingFault::VendorPageAnomaly);
            }
            match listing.accept_page(page.listing) {
                NextStep::FetchAfter(next) => cursor = Some(next),
                NextStep::Finished | NextStep::Stopped(_) => break,
            }
        }
        listing.finish()
    }

    #[test]
    fn full_pages_then_an_empty_one_complete_the_listing() {
        assert_eq!(
            list(2, 10, &[vec![1, 2], vec![3], vec![]]).unwrap().len(),
            3
        );
        let second = OffsetCursor::parse(Some("2")).unwrap();
        assert_eq!(
            second,
            OffsetCursor {
                offset: 2,
                after_short: false
            }
        );
        assert_eq!(
            second.page(vec![3], 2).listing.end_cursor.as_deref(),
            Some("3s")
        );
    }

    #[test]
    fn a_page_after_a_short_one_is_an_anomaly() {
        let after_short = OffsetCursor::parse(Some("1s")).unwrap();
        assert!(after_short.page(vec![2], 2).anomaly);
        assert!(!after_short.page(Vec::<u32>::new(), 2).anomaly);
        assert!(list(2, 10, &[vec![1], vec![2], vec![]]).is_err());
    }

    #[test]
    fn a_longer_page_than_asked_or_a_repeated_id_is_not_whole() {
        assert!(OffsetCursor::default().page(vec![1, 2, 3], 2).anomaly);
        assert!(list(2, 10, &[vec![1, 2, 3], vec![]]).is_err());
        // A document moved back under the offsets shows up twice.
        assert_eq!(
            list(2, 10, &[vec![1, 2], vec![2, 3], vec![]]),
            Err(IncompleteReason::DuplicateId)
        );
    }

    #[test]
    fn the_page_cap_or_no_empty_page_leaves_it_incomplete() {
        assert!(matches!(
            list(1, 2, &[vec![1], vec![2], vec![]]),
            Err(IncompleteReason::PageCapTruncated { cap: 2 })
        ));
        assert_eq!(
            list(2, 10, &[vec![1, 2]]),
            Err(IncompleteReason::NotFinished)
        );
    }

    #[test]
    fn a_foreign_cursor_is_refused() {
        assert!(OffsetCursor::parse(Some("abc")).is_err());
        assert!(OffsetCursor::parse(Some("s")).is_err());
    }

    proptest! {
        #[test]
        fn a_clean_enumeration_lists_every_id_once(n in 0u32..50, limit in 1u32..7) {
            let ids: Vec<u32> = (0..n).collect();
            let mut pages = Vec::new();
            let mut offset = 0usize;
            loop {
                let page: Vec<u32> = ids.iter().copied().skip(offset).take(limit as usize).collect();
                offset += page.len();
                let last = page.is_empty();
                pages.push(page);
                if last { break; }
            }
            prop_assert_eq!(list(limit, 100, &pages).unwrap().len(), n as usize);
        }
    }
}
