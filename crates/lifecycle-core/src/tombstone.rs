//! Drift tombstones: the reversible `deleted_at` marker a reconcile sets on an item missing
//! upstream. It clears content-bearing fields and the next upsert undoes it. Erasure is a
//! different operation with its own module ([`crate::erasure`]); the two share no code.

use crate::Timestamp;

/// The fields of a mirrored row that carry third-party content.
pub trait ContentBearing {
    /// Clears every content-bearing field (title, body, ...), keeping identity and timestamps.
    fn clear_content(&mut self);
}

/// The tombstone a sweep writes for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tombstone {
    /// When the sweep observed the item missing upstream.
    pub deleted_at: Timestamp,
}

/// A mirrored issue, pull request, merge request or document together with its tombstone marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRow<C> {
    content: C,
    deleted_at: Option<Timestamp>,
}

impl<C: ContentBearing> MirrorRow<C> {
    /// A live row with this content.
    pub fn live(content: C) -> Self {
        Self {
            content,
            deleted_at: None,
        }
    }

    /// The row's content (cleared while tombstoned).
    pub fn content(&self) -> &C {
        &self.content
    }

    /// When the row was tombstoned, if it is.
    pub fn deleted_at(&self) -> Option<Timestamp> {
        self.deleted_at
    }

    /// Whether the row carries a tombstone.
    pub fn is_tombstoned(&self) -> bool {
        self.deleted_at.is_some()
    }

    /// Marks the row deleted and clears its content. A second tombstone keeps the first date.
    pub fn tombstone(&mut self, tombstone: Tombstone) {
        self.content.clear_content();
        if self.deleted_at.is_none() {
            self.deleted_at = Some(tombstone.deleted_at);
        }
    }

    /// Writes fresh content from the vendor; this undoes a tombstone.
    pub fn upsert(&mut self, content: C) {
        // Tombstone is reversible: the next sync clears deleted_at.
        self.content = content;
        self.deleted_at = None;
    }
}

/// The content-bearing fields of an SCM item (issue, pull request, merge request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScmItemContent {
    /// The title.
    pub title: Option<String>,
    /// The description body.
    pub body: Option<String>,
}

impl ContentBearing for ScmItemContent {
    fn clear_content(&mut self) {
        self.title = None;
        self.body = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn content() -> ScmItemContent {
        ScmItemContent {
            title: Some("Fix it".into()),
            body: Some("details".into()),
        }
    }

    #[test]
    fn tombstone_sets_deleted_at_and_clears_content() {
        let mut row = MirrorRow::live(content());
        assert!(!row.is_tombstoned());
        row.tombstone(Tombstone { deleted_at: at(10) });
        assert!(row.is_tombstoned());
        assert_eq!(row.deleted_at(), Some(at(10)));
        assert_eq!(row.content(), &ScmItemContent::default());
    }

    #[test]
    fn next_upsert_undoes_the_tombstone() {
        let mut row = MirrorRow::live(content());
        row.tombstone(Tombstone { deleted_at: at(10) });
        row.upsert(content());
        assert!(!row.is_tombstoned());
        assert_eq!(row.deleted_at(), None);
        assert_eq!(row.content(), &content());
    }

    #[test]
    fn redelivery_changes_nothing_on_a_second_tombstone() {
        let mut row = MirrorRow::live(content());
        row.tombstone(Tombstone { deleted_at: at(10) });
        row.tombstone(Tombstone { deleted_at: at(20) });
        assert_eq!(row.deleted_at(), Some(at(10)));
    }
}
