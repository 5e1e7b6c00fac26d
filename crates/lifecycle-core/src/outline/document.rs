//! An Outline document's (or collection's) writes. A row moves forward only: a version applies
//! when its `updatedAt` is strictly newer than what the row reflects, so a redelivered or older
//! payload changes nothing. A deletion tombstones the row at once, dated; only a version strictly
//! newer than the deletion clears it (a restore). Every path (webhook, listing, `documents.info`)
//! decides through [`on_version`] and [`on_deletion`] with the row held locked.

use crate::Timestamp;

/// The row as the writer holds it locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Outline's `updatedAt` of the version held; `None` when no version was ever held (a
    /// collection only a document named, a document known only by its deletion).
    pub updated_at: Option<Timestamp>,
    /// The tombstone's date.
    pub deleted_at: Option<Timestamp>,
}

impl Stored {
    /// The newest change the row reflects: its version, or its deletion when that is later.
    pub fn version(&self) -> Option<Timestamp> {
        match (self.updated_at, self.deleted_at) {
            (Some(u), Some(d)) => Some(u.max(d)),
            (u, d) => u.or(d),
        }
    }

    /// Whether the row carries a tombstone.
    pub fn is_tombstoned(&self) -> bool {
        self.deleted_at.is_some()
    }
}

/// What a version (a payload with its `updatedAt`) does to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionWrite {
    /// No row yet: insert it.
    Insert,
    /// Newer than the live row: write it.
    Update,
    /// Newer than the tombstone: write it and clear the tombstone.
    Restore,
    /// Newer than the version a tombstoned row holds but not than its deletion: write its
    /// metadata (collection, parent, dates) and keep the tombstone and the cleared content, so a
    /// row ends where in-order application would have left it. Nothing to announce.
    Behind,
    /// Equal or older: change nothing.
    Unchanged,
}

/// Decides a version reported at `updated_at` against the locked row.
pub fn on_version(stored: Option<&Stored>, updated_at: Timestamp) -> VersionWrite {
    let Some(stored) = stored else {
        return VersionWrite::Insert;
    };
    // Forward-only: an equal (redelivered) or older version changes nothing.
    let newer_than_held = stored.updated_at.is_none_or(|held| updated_at > held);
    match stored.deleted_at {
        None if newer_than_held => VersionWrite::Update,
        // Only a version strictly newer than the deletion restores.
        Some(deleted) if updated_at > deleted && newer_than_held => VersionWrite::Restore,
        Some(_) if newer_than_held => VersionWrite::Behind,
        _ => VersionWrite::Unchanged,
    }
}

/// What a deletion dated `at` does to the row (a tombstoned row's version is never newer than its
/// deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionWrite {
    /// Never held: keep an empty tombstone, so a late older copy is never inserted.
    InsertTombstone,
    /// Tombstone the live row: content cleared, dated `at`.
    Tombstone,
    /// Already tombstoned, by an earlier deletion (a restore between them was missed): move the
    /// date forward, so that versions from before this deletion stay refused. Nothing to announce.
    Redate,
    /// Older than the row's version (restored since), or the tombstone already held.
    Unchanged,
}

/// Decides a deletion dated `at` against the locked row.
pub fn on_deletion(stored: Option<&Stored>, at: Timestamp) -> DeletionWrite {
    let Some(stored) = stored else {
        return DeletionWrite::InsertTombstone;
    };
    // A version newer than the deletion means the document came back after it.
    if stored.updated_at.is_some_and(|u| at < u) {
        return DeletionWrite::Unchanged;
    }
    match stored.deleted_at {
        None => DeletionWrite::Tombstone,
        Some(held) if at > held => DeletionWrite::Redate,
        Some(_) => DeletionWrite::Unchanged,
    }
}

/// The row after a decision: what the mirror's writes must leave (the model the tests hold the
/// database against).
pub fn after_version(stored: Option<&Stored>, updated_at: Timestamp) -> Option<Stored> {
    match on_version(stored, updated_at) {
        VersionWrite::Insert | VersionWrite::Update | VersionWrite::Restore => Some(Stored {
            updated_at: Some(updated_at),
            deleted_at: None,
        }),
        VersionWrite::Behind => stored.map(|s| Stored {
            updated_at: Some(updated_at),
            deleted_at: s.deleted_at,
        }),
        VersionWrite::Unchanged => stored.copied(),
    }
}

/// The row after a deletion dated `at`.
pub fn after_deletion(stored: Option<&Stored>, at: Timestamp) -> Option<Stored> {
    match on_deletion(stored, at) {
        DeletionWrite::InsertTombstone => Some(Stored {
            updated_at: None,
            deleted_at: Some(at),
        }),
        DeletionWrite::Tombstone | DeletionWrite::Redate => Some(Stored {
            updated_at: stored.and_then(|s| s.updated_at),
            deleted_at: Some(at),
        }),
        DeletionWrite::Unchanged => stored.copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn live(secs: i64) -> Stored {
        Stored {
            updated_at: Some(at(secs)),
            deleted_at: None,
        }
    }

    fn tombstoned(updated: i64, deleted: i64) -> Stored {
        Stored {
            updated_at: Some(at(updated)),
            deleted_at: Some(at(deleted)),
        }
    }

    #[test]
    fn redelivery_changes_nothing_an_equal_or_older_version() {
        assert_eq!(on_version(Some(&live(10)), at(10)), VersionWrite::Unchanged);
        assert_eq!(on_version(Some(&live(10)), at(9)), VersionWrite::Unchanged);
    }

    #[test]
    fn a_newer_version_applies_and_a_first_one_inserts() {
        assert_eq!(on_version(Some(&live(10)), at(11)), VersionWrite::Update);
        assert_eq!(on_version(None, at(1)), VersionWrite::Insert);
        // A collection only a document named has no version yet: the first one applies.
        let stub = Stored {
            updated_at: None,
            deleted_at: None,
        };
        assert_eq!(on_version(Some(&stub), at(1)), VersionWrite::Update);
    }

    #[test]
    fn only_a_strictly_newer_version_restores_a_tombstone() {
        let row = tombstoned(10, 20);
        assert_eq!(on_version(Some(&row), at(9)), VersionWrite::Unchanged);
        assert_eq!(on_version(Some(&row), at(10)), VersionWrite::Unchanged);
        // Between the version held and the deletion: metadata only, still tombstoned.
        assert_eq!(on_version(Some(&row), at(15)), VersionWrite::Behind);
        assert_eq!(on_version(Some(&row), at(20)), VersionWrite::Behind);
        assert!(after_version(Some(&row), at(20)).unwrap().is_tombstoned());
        assert_eq!(on_version(Some(&row), at(21)), VersionWrite::Restore);
    }

    #[test]
    fn a_deletion_tombstones_at_once_unless_the_row_is_newer() {
        assert_eq!(
            on_deletion(Some(&live(10)), at(10)),
            DeletionWrite::Tombstone
        );
        assert_eq!(
            on_deletion(Some(&live(10)), at(12)),
            DeletionWrite::Tombstone
        );
        // Restored and edited after this deletion: the deletion is stale.
        assert_eq!(
            on_deletion(Some(&live(10)), at(9)),
            DeletionWrite::Unchanged
        );
        assert_eq!(on_deletion(None, at(5)), DeletionWrite::InsertTombstone);
    }

    #[test]
    fn a_second_deletion_is_absorbed_and_a_later_one_only_redates() {
        let row = tombstoned(10, 20);
        assert_eq!(on_deletion(Some(&row), at(20)), DeletionWrite::Unchanged);
        assert_eq!(on_deletion(Some(&row), at(15)), DeletionWrite::Unchanged);
        assert_eq!(on_deletion(Some(&row), at(30)), DeletionWrite::Redate);
        let redated = after_deletion(Some(&row), at(30)).unwrap();
        // A version from between the two deletions does not restore.
        assert_ne!(on_version(Some(&redated), at(25)), VersionWrite::Restore);
        assert!(
            after_version(Some(&redated), at(25))
                .unwrap()
                .is_tombstoned()
        );
    }

    #[derive(Debug, Clone, Copy)]
    enum Report {
        Version(i64),
        Deleted(i64),
    }

    fn fold(reports: &[Report]) -> Option<Stored> {
        reports.iter().fold(None, |row, r| match *r {
            Report::Version(t) => after_version(row.as_ref(), at(t)),
            Report::Deleted(t) => after_deletion(row.as_ref(), at(t)),
        })
    }

    fn report() -> impl Strategy<Value = Report> {
        prop_oneof![
            (0i64..40).prop_map(Report::Version),
            (0i64..40).prop_map(Report::Deleted),
        ]
    }

    proptest! {
        #[test]
        fn out_of_order_and_repeated_reports_end_where_in_order_ones_do(
            reports in proptest::collection::vec(report(), 0..12),
            seed in any::<u64>(),
        ) {
            // In order: by date, a deletion after a version of the same second.
            let mut ordered = reports.clone();
            ordered.sort_by_key(|r| match *r {
                Report::Version(t) => (t, 0),
                Report::Deleted(t) => (t, 1),
            });
            // Shuffled and each delivered twice.
            let mut shuffled: Vec<Report> = reports.iter().chain(reports.iter()).copied().collect();
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            prop_assert_eq!(fold(&shuffled), fold(&ordered));
        }

        #[test]
        fn the_version_held_never_goes_back(
            reports in proptest::collection::vec(report(), 1..12),
        ) {
            let mut row: Option<Stored> = None;
            for r in reports {
                let before = row.and_then(|s| s.version());
                row = match r {
                    Report::Version(t) => after_version(row.as_ref(), at(t)),
                    Report::Deleted(t) => after_deletion(row.as_ref(), at(t)),
                };
                let now = row.and_then(|s| s.version());
                prop_assert!(now >= before);
            }
        }
    }
}
