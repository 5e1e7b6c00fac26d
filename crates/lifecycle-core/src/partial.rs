//! Partial metadata: a field of a vendor payload is absent, unknown or known.
//!
//! On an existing row, absent and unknown preserve what is stored; a known value (an explicit zero
//! or unlocked state included) replaces it. Insert defaults apply to new rows only. A GraphQL field
//! is unknown when the response carries an error at, above or below its path.

/// One field of a vendor payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field<T> {
    /// The payload does not carry the field.
    Absent,
    /// The vendor reported an error for the field: its value is not known.
    Unknown,
    /// The vendor's value.
    Known(T),
}

impl<T> Field<T> {
    /// A field read from a GraphQL response: errored → unknown, null → absent, else known.
    pub fn from_graphql(value: Option<T>, errored: bool) -> Self {
        match (errored, value) {
            (true, _) => Field::Unknown,
            (false, None) => Field::Absent,
            (false, Some(value)) => Field::Known(value),
        }
    }

    /// The value to store on an existing row: absent and unknown keep `stored`.
    pub fn merge(self, stored: T) -> T {
        match self {
            Field::Known(value) => value,
            // Partial metadata: absent or unknown preserves the stored value.
            Field::Absent | Field::Unknown => stored,
        }
    }

    /// The value to store on a new row: absent and unknown take the insert default.
    pub fn or_insert_default(self, default: T) -> T {
        match self {
            Field::Known(value) => value,
            Field::Absent | Field::Unknown => default,
        }
    }

    /// The known value, if any.
    pub fn known(self) -> Option<T> {
        match self {
            Field::Known(value) => Some(value),
            Field::Absent | Field::Unknown => None,
        }
    }
}

impl<T> Field<Option<T>> {
    /// A nullable GraphQL field where null is itself a value (e.g. `headPipeline: null` means no
    /// pipeline): errored → unknown, otherwise known, null included.
    pub fn from_nullable_graphql(value: Option<T>, errored: bool) -> Self {
        if errored {
            Field::Unknown
        } else {
            Field::Known(value)
        }
    }
}

/// One segment of a GraphQL response path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A field name.
    Key(String),
    /// A list index (`nodes[i]`).
    Index(usize),
}

/// Whether any error path touches `field`: at it, above it (an ancestor) or below it.
pub fn field_errored(error_paths: &[Vec<PathSegment>], field: &[PathSegment]) -> bool {
    error_paths.iter().any(|error| {
        let shared = error.len().min(field.len());
        error[..shared] == field[..shared]
    })
}

/// The partial counters and lock state of an issue, pull request or merge request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemMetadataPatch {
    /// Comment (or user note) count.
    pub comment_count: Field<u32>,
    /// Whether discussion is locked.
    pub discussion_locked: Field<bool>,
}

/// The stored counters and lock state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemMetadata {
    /// Comment (or user note) count.
    pub comment_count: u32,
    /// Whether discussion is locked.
    pub discussion_locked: bool,
}

impl ItemMetadataPatch {
    /// Applies the patch to an existing row.
    pub fn apply_to_existing(self, stored: ItemMetadata) -> ItemMetadata {
        ItemMetadata {
            comment_count: self.comment_count.merge(stored.comment_count),
            discussion_locked: self.discussion_locked.merge(stored.discussion_locked),
        }
    }

    /// The metadata of a new row: insert defaults fill what the patch lacks.
    pub fn to_new_row(self) -> ItemMetadata {
        let defaults = ItemMetadata::default();
        ItemMetadata {
            comment_count: self.comment_count.or_insert_default(defaults.comment_count),
            discussion_locked: self
                .discussion_locked
                .or_insert_default(defaults.discussion_locked),
        }
    }
}

/// Whether discussion sync may be skipped because the vendor's note count matches what is synced.
pub fn may_skip_discussion_sync(note_count: Field<u32>, synced_notes: Option<u32>) -> bool {
    // An unknown (or absent) count never skips discussion sync.
    match (note_count, synced_notes) {
        (Field::Known(count), Some(synced)) => count == synced,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(name: &str) -> PathSegment {
        PathSegment::Key(name.to_owned())
    }

    fn stored() -> ItemMetadata {
        ItemMetadata {
            comment_count: 7,
            discussion_locked: true,
        }
    }

    #[test]
    fn absent_preserves_the_stored_value() {
        let patch = ItemMetadataPatch {
            comment_count: Field::Absent,
            discussion_locked: Field::Absent,
        };
        assert_eq!(patch.apply_to_existing(stored()), stored());
    }

    #[test]
    fn unknown_preserves_the_stored_value() {
        let patch = ItemMetadataPatch {
            comment_count: Field::Unknown,
            discussion_locked: Field::Unknown,
        };
        assert_eq!(patch.apply_to_existing(stored()), stored());
    }

    #[test]
    fn explicit_zero_and_unlocked_replace() {
        let patch = ItemMetadataPatch {
            comment_count: Field::Known(0),
            discussion_locked: Field::Known(false),
        };
        assert_eq!(patch.apply_to_existing(stored()), ItemMetadata::default());
    }

    #[test]
    fn insert_defaults_apply_only_to_new_rows() {
        let patch = ItemMetadataPatch {
            comment_count: Field::Absent,
            discussion_locked: Field::Unknown,
        };
        assert_eq!(patch.to_new_row(), ItemMetadata::default());
        let known = ItemMetadataPatch {
            comment_count: Field::Known(3),
            discussion_locked: Field::Known(true),
        };
        assert_eq!(
            known.to_new_row(),
            ItemMetadata {
                comment_count: 3,
                discussion_locked: true
            }
        );
    }

    #[test]
    fn graphql_error_makes_a_field_unknown_not_a_value() {
        assert_eq!(Field::from_graphql(Some(false), true), Field::Unknown);
        assert_eq!(Field::<bool>::from_graphql(None, false), Field::Absent);
        assert_eq!(Field::from_graphql(Some(3), false), Field::Known(3));
        assert_eq!(
            Field::<Option<u8>>::from_nullable_graphql(None, false),
            Field::Known(None)
        );
        assert_eq!(
            Field::from_nullable_graphql(Some(1), true),
            Field::<Option<u8>>::Unknown
        );
        assert_eq!(Field::Known(4).known(), Some(4));
        assert_eq!(Field::<u8>::Unknown.known(), None);
        assert_eq!(Field::<u8>::Absent.known(), None);
    }

    #[test]
    fn errors_at_above_or_below_a_field_make_it_unknown() {
        let field = vec![key("project"), key("mergeRequest"), key("userNotesCount")];
        let at = vec![field.clone()];
        let above = vec![vec![key("project"), key("mergeRequest")]];
        let below = vec![vec![
            key("project"),
            key("mergeRequest"),
            key("userNotesCount"),
            key("x"),
        ]];
        let sibling = vec![vec![key("project"), key("mergeRequest"), key("approved")]];
        assert!(field_errored(&at, &field));
        assert!(field_errored(&above, &field));
        assert!(field_errored(&below, &field));
        assert!(!field_errored(&sibling, &field));
        assert!(!field_errored(&[], &field));
    }

    #[test]
    fn an_error_on_one_page_node_spares_its_siblings() {
        let node = |i| vec![key("nodes"), PathSegment::Index(i), key("approved")];
        let errors = vec![node(1)];
        assert!(field_errored(&errors, &node(1)));
        assert!(!field_errored(&errors, &node(0)));
    }

    #[test]
    fn unknown_count_never_skips_discussion_sync() {
        assert!(!may_skip_discussion_sync(Field::Unknown, Some(4)));
        assert!(!may_skip_discussion_sync(Field::Absent, Some(4)));
        assert!(!may_skip_discussion_sync(Field::Known(4), None));
        assert!(!may_skip_discussion_sync(Field::Known(5), Some(4)));
        assert!(may_skip_discussion_sync(Field::Known(4), Some(4)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn only_known_values_change_an_existing_row(stored in any::<u32>(), value in any::<u32>(), which in 0u8..3) {
            let field = match which { 0 => Field::Absent, 1 => Field::Unknown, _ => Field::Known(value) };
            let merged = field.merge(stored);
            prop_assert_eq!(merged, if which == 2 { value } else { stored });
        }
    }
}
