//! Dated snapshots: reviewer lists, GitLab approvals and decisions arrive whole and are ordered by
//! when we received them (JetStream store time for a webhook, request time for a sync page).

use crate::Timestamp;

/// A list as read from the vendor: whole, or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListRead<T> {
    /// Every entry was read.
    Whole(Vec<T>),
    /// Some entries may be missing (a failed field, a truncated page).
    Partial,
}

impl<T> ListRead<T> {
    /// A single page of nodes with the vendor's total: whole only if it holds every entry.
    pub fn single_page(nodes: Vec<T>, total_count: u64) -> Self {
        if nodes.len() as u64 == total_count {
            ListRead::Whole(nodes)
        } else {
            // Incomplete list: more entries than the page holds leaves the page unused.
            ListRead::Partial
        }
    }

    /// Whether every entry was read.
    pub fn is_whole(&self) -> bool {
        matches!(self, ListRead::Whole(_))
    }
}

/// A stored snapshot and when it was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatedSnapshot<T> {
    /// When the snapshot was received.
    pub received_at: Timestamp,
    /// The entries.
    pub entries: Vec<T>,
}

/// What happened to an incoming snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotOutcome {
    /// Stored.
    Applied,
    /// Received earlier than the stored snapshot: nothing changed.
    Stale,
    /// Not whole: nothing changed.
    Incomplete,
}

/// Applies a snapshot received at `received_at` over the stored one.
pub fn apply<T>(
    stored: &mut Option<DatedSnapshot<T>>,
    received_at: Timestamp,
    read: ListRead<T>,
) -> SnapshotOutcome {
    let ListRead::Whole(entries) = read else {
        // An incomplete list is never applied.
        return SnapshotOutcome::Incomplete;
    };
    if let Some(current) = stored
        && received_at < current.received_at
    {
        // Dated snapshot: one received earlier changes nothing; the same instant applies.
        return SnapshotOutcome::Stale;
    }
    *stored = Some(DatedSnapshot {
        received_at,
        entries,
    });
    SnapshotOutcome::Applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    #[test]
    fn snapshot_received_earlier_changes_nothing() {
        let mut stored = Some(DatedSnapshot {
            received_at: at(10),
            entries: vec!["alice"],
        });
        assert_eq!(
            apply(&mut stored, at(9), ListRead::Whole(vec![])),
            SnapshotOutcome::Stale
        );
        assert_eq!(stored.unwrap().entries, vec!["alice"]);
    }

    #[test]
    fn same_instant_applies() {
        let mut stored = Some(DatedSnapshot {
            received_at: at(10),
            entries: vec!["alice"],
        });
        assert_eq!(
            apply(&mut stored, at(10), ListRead::Whole(vec!["bob"])),
            SnapshotOutcome::Applied
        );
        assert_eq!(stored.unwrap().entries, vec!["bob"]);
    }

    #[test]
    fn later_and_first_snapshots_apply() {
        let mut stored = None;
        assert_eq!(
            apply(&mut stored, at(1), ListRead::Whole(vec![1])),
            SnapshotOutcome::Applied
        );
        assert_eq!(
            apply(&mut stored, at(2), ListRead::Whole(vec![2])),
            SnapshotOutcome::Applied
        );
        assert_eq!(stored.unwrap().received_at, at(2));
    }

    #[test]
    fn incomplete_list_is_never_applied() {
        let mut stored = None;
        assert_eq!(
            apply::<u8>(&mut stored, at(1), ListRead::Partial),
            SnapshotOutcome::Incomplete
        );
        assert!(stored.is_none());
    }

    #[test]
    fn a_page_shorter_than_the_total_is_partial() {
        assert_eq!(ListRead::single_page(vec![1, 2], 3), ListRead::Partial);
        assert_eq!(
            ListRead::single_page(vec![1, 2], 2),
            ListRead::Whole(vec![1, 2])
        );
        assert!(ListRead::single_page(vec![1], 1).is_whole());
        assert!(!ListRead::<u8>::Partial.is_whole());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_order_of_whole_snapshots_ends_with_the_latest(
            mut times in proptest::collection::vec(0i64..1000, 1..10),
        ) {
            times.sort();
            times.dedup();
            let latest = *times.last().unwrap();
            let mut reversed = times.clone();
            reversed.reverse();
            for order in [times, reversed] {
                let mut stored = None;
                for t in order {
                    apply(&mut stored, at(t), ListRead::Whole(vec![t]));
                }
                prop_assert_eq!(stored.unwrap().entries, vec![latest]);
            }
        }
    }
}
