//! Completeness of a GitLab REST listing paged by offset (`page`/`per_page`), as notes and group
//! hooks are listed.
//!
//! A listing counts as whole only when every page carried `X-Page` (the page asked for),
//! `X-Next-Page` (empty on the last page, else the next one) and the same `X-Total`, no id came
//! twice, it reached its last page within the cap, and the unique ids equal the total. Anything
//! less tells nothing about what is absent.

use std::collections::BTreeSet;
use std::fmt;

/// The paging headers of one page, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPageHeaders {
    /// `X-Page`.
    pub page: Option<u32>,
    /// `X-Next-Page`: `Some(None)` when present and empty (the last page).
    pub next_page: Option<Option<u32>>,
    /// `X-Total`.
    pub total: Option<u64>,
}

impl OffsetPageHeaders {
    /// Parses the raw header values; a malformed value counts as missing.
    pub fn parse(page: Option<&str>, next_page: Option<&str>, total: Option<&str>) -> Self {
        fn number<T: std::str::FromStr>(v: Option<&str>) -> Option<T> {
            v.and_then(|v| v.trim().parse().ok())
        }
        let next_page = next_page.and_then(|v| {
            let v = v.trim();
            if v.is_empty() {
                Some(None)
            } else {
                v.parse().ok().map(Some)
            }
        });
        Self {
            page: number(page),
            next_page,
            total: number(total),
        }
    }
}

/// Why a listing is not whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingGap {
    /// A paging header is missing (GitLab omits counts on large listings).
    MissingHeaders,
    /// `X-Page` is not the page asked for, or `X-Next-Page` does not follow it.
    InconsistentPages,
    /// `X-Total` changed between pages.
    TotalChanged,
    /// An id appeared twice.
    DuplicateId,
    /// The unique id count differs from `X-Total`.
    CountMismatch,
    /// A page failed.
    FailedPage,
    /// The page cap was reached with pages left.
    PageCap,
    /// The listing never reached its last page.
    NotFinished,
}

impl fmt::Display for ListingGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListingGap::MissingHeaders => "a page came without its paging headers",
            ListingGap::InconsistentPages => "a page's X-Page or X-Next-Page did not follow",
            ListingGap::TotalChanged => "X-Total changed during the listing",
            ListingGap::DuplicateId => "an item was listed twice",
            ListingGap::CountMismatch => "the items listed differ from X-Total",
            ListingGap::FailedPage => "a page could not be read",
            ListingGap::PageCap => "the listing reached its page cap",
            ListingGap::NotFinished => "the listing did not reach its last page",
        })
    }
}

/// One offset-paged listing, page by page.
#[derive(Debug, Clone)]
pub struct OffsetListing<Id> {
    seen: BTreeSet<Id>,
    next_page: Option<u32>,
    total: Option<u64>,
    page_cap: u32,
    pages: u32,
    gap: Option<ListingGap>,
}

impl<Id: Ord> OffsetListing<Id> {
    /// A listing from page 1, at most `page_cap` pages.
    pub fn new(page_cap: u32) -> Self {
        Self {
            seen: BTreeSet::new(),
            next_page: Some(1),
            total: None,
            page_cap,
            pages: 0,
            gap: None,
        }
    }

    /// The page to fetch next; `None` once the last page arrived or the listing stopped.
    pub fn next_page(&self) -> Option<u32> {
        match self.gap {
            Some(_) => None,
            None => self.next_page,
        }
    }

    /// Why the listing stopped short, as soon as it did.
    pub fn gap(&self) -> Option<ListingGap> {
        self.gap
    }

    /// Records that the page asked for could not be read.
    pub fn record_failed_page(&mut self) {
        self.gap.get_or_insert(ListingGap::FailedPage);
    }

    /// Accepts the page asked for, with its headers and ids.
    pub fn accept_page(&mut self, headers: OffsetPageHeaders, ids: impl IntoIterator<Item = Id>) {
        if self.gap.is_some() {
            return;
        }
        if let Err(gap) = self.check(headers, ids) {
            self.gap = Some(gap);
        }
    }

    fn check(
        &mut self,
        headers: OffsetPageHeaders,
        ids: impl IntoIterator<Item = Id>,
    ) -> Result<(), ListingGap> {
        let (Some(page), Some(next), Some(total)) =
            (headers.page, headers.next_page, headers.total)
        else {
            return Err(ListingGap::MissingHeaders);
        };
        if Some(page) != self.next_page || next.is_some_and(|n| Some(n) != page.checked_add(1)) {
            return Err(ListingGap::InconsistentPages);
        }
        if self.total.is_some_and(|first| first != total) {
            return Err(ListingGap::TotalChanged);
        }
        self.total = Some(total);
        for id in ids {
            if !self.seen.insert(id) {
                return Err(ListingGap::DuplicateId);
            }
        }
        self.pages += 1;
        self.next_page = next;
        if next.is_some() && self.pages >= self.page_cap {
            return Err(ListingGap::PageCap);
        }
        Ok(())
    }

    /// The ids of the whole listing, or why it is not whole.
    pub fn finish(self) -> Result<BTreeSet<Id>, ListingGap> {
        if let Some(gap) = self.gap {
            return Err(gap);
        }
        if self.next_page.is_some() {
            return Err(ListingGap::NotFinished);
        }
        if Some(self.seen.len() as u64) != self.total {
            return Err(ListingGap::CountMismatch);
        }
        Ok(self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(page: u32, next: Option<u32>, total: u64) -> OffsetPageHeaders {
        OffsetPageHeaders {
            page: Some(page),
            next_page: Some(next),
            total: Some(total),
        }
    }

    #[test]
    fn headers_parse_with_empty_next_page_as_last() {
        assert_eq!(
            OffsetPageHeaders::parse(Some("2"), Some(""), Some("40")),
            headers(2, None, 40)
        );
        assert_eq!(
            OffsetPageHeaders::parse(Some("1"), Some("2"), Some("40")),
            headers(1, Some(2), 40)
        );
        let missing = OffsetPageHeaders::parse(Some("1"), None, Some("x"));
        assert_eq!(missing.next_page, None);
        assert_eq!(missing.total, None);
        assert_eq!(
            OffsetPageHeaders::parse(None, Some("z"), None).next_page,
            None
        );
    }

    #[test]
    fn a_clean_listing_yields_every_id() {
        let mut l = OffsetListing::new(10);
        l.accept_page(headers(1, Some(2), 3), [1, 9]);
        assert_eq!(l.next_page(), Some(2));
        l.accept_page(headers(2, None, 3), [3]);
        assert_eq!(l.next_page(), None);
        assert_eq!(l.finish(), Ok(BTreeSet::from([1, 3, 9])));
    }

    #[test]
    fn a_failed_page_or_a_bad_header_stops_the_listing_with_its_reason() {
        let mut l = OffsetListing::new(10);
        l.accept_page(headers(1, Some(2), 3), [1, 2]);
        l.record_failed_page();
        assert_eq!(l.next_page(), None);
        assert_eq!(l.finish(), Err(ListingGap::FailedPage));

        let mut l = OffsetListing::new(10);
        l.accept_page(headers(1, Some(3), 3), [1]);
        assert_eq!(l.gap(), Some(ListingGap::InconsistentPages));

        let mut l = OffsetListing::<u32>::new(10);
        l.accept_page(
            OffsetPageHeaders {
                total: None,
                ..headers(1, None, 0)
            },
            [],
        );
        assert_eq!(l.finish(), Err(ListingGap::MissingHeaders));
    }
}
