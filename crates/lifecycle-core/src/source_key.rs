//! Source keys: one identity per lifecycle event, whichever path reports it (webhook, late
//! delivery, redelivery, sync), and the item-event ledger whose unique keys absorb repeats.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::Timestamp;

/// The identity of one lifecycle event of an item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceKey(String);

impl SourceKey {
    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One settled check run, as the checks-completed digest covers it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SettledRun {
    /// The run's name.
    pub name: String,
    /// The run's group (workflow or app).
    pub group: String,
    /// The run's final state (conclusion).
    pub state: String,
    /// When the run ended.
    pub ended_at: Timestamp,
}

/// A lifecycle change, with the facts its identity rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleChange<'a> {
    /// Opened: the item's creation date, so every path reports the same opening.
    Opened {
        /// Provider createdAt.
        created_at: Timestamp,
    },
    /// A push: the move from one head to the next.
    Push {
        /// Head before.
        before: &'a str,
        /// Head after.
        after: &'a str,
    },
    /// Marked ready for review, at the provider's date.
    Ready {
        /// Provider date.
        at: Timestamp,
    },
    /// Converted to draft, at the provider's date.
    Draft {
        /// Provider date.
        at: Timestamp,
    },
    /// Reopened, at the provider's date.
    Reopen {
        /// Provider date.
        at: Timestamp,
    },
    /// Closed: the stored closedAt.
    Close {
        /// Stored closedAt.
        closed_at: Timestamp,
    },
    /// Merged: the stored mergedAt.
    Merge {
        /// Stored mergedAt.
        merged_at: Timestamp,
    },
    /// A comment edit: its updated_at and its text.
    CommentEdit {
        /// Which comment (its id): edits of two comments are two changes.
        comment: &'a str,
        /// The comment's updated_at.
        updated_at: Timestamp,
        /// The comment's new text.
        text: &'a str,
    },
    /// A review dismissal: the updated_at the review stores for it.
    Dismissal {
        /// Which review (its id): two reviews dismissed in one second are two dismissals.
        review: &'a str,
        /// The review's stored updated_at.
        review_updated_at: Timestamp,
    },
    /// A thread resolution: its resolvedAt.
    ThreadResolved {
        /// Which thread (its id).
        thread: &'a str,
        /// The thread's resolvedAt.
        resolved_at: Timestamp,
    },
    /// The head's checks completed: item, head and a digest of the settled runs.
    ChecksCompleted {
        /// The item.
        item: &'a str,
        /// The head commit.
        head: &'a str,
        /// The settled runs, in any order.
        runs: &'a [SettledRun],
    },
}

fn time_token(at: Timestamp) -> String {
    at.unix_timestamp_nanos().to_string()
}

fn digest(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        // Length-prefixed, so no two part lists hash the same concatenation.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}

/// The order-independent digest of settled runs (name, group, state and end time of each).
pub fn runs_digest(runs: &[SettledRun]) -> String {
    let mut sorted: Vec<&SettledRun> = runs.iter().collect();
    sorted.sort();
    let times: Vec<String> = sorted.iter().map(|run| time_token(run.ended_at)).collect();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(sorted.len() * 4);
    for (run, time) in sorted.iter().zip(&times) {
        parts.extend([
            run.name.as_bytes(),
            run.group.as_bytes(),
            run.state.as_bytes(),
            time.as_bytes(),
        ]);
    }
    digest(&parts)
}

impl LifecycleChange<'_> {
    /// The source key of this change.
    pub fn source_key(&self) -> SourceKey {
        let key = match self {
            LifecycleChange::Opened { created_at } => format!("opened:{}", time_token(*created_at)),
            // A force-push back to an earlier head is a new move, so the pair is the identity.
            LifecycleChange::Push { before, after } => format!("push:{before}..{after}"),
            LifecycleChange::Ready { at } => format!("ready:{}", time_token(*at)),
            LifecycleChange::Draft { at } => format!("draft:{}", time_token(*at)),
            LifecycleChange::Reopen { at } => format!("reopen:{}", time_token(*at)),
            LifecycleChange::Close { closed_at } => format!("close:{}", time_token(*closed_at)),
            LifecycleChange::Merge { merged_at } => format!("merge:{}", time_token(*merged_at)),
            // Two edits in one second are two edits: the text is part of the identity.
            LifecycleChange::CommentEdit {
                comment,
                updated_at,
                text,
            } => format!(
                "edit:{}:{}",
                time_token(*updated_at),
                digest(&[comment.as_bytes(), text.as_bytes()])
            ),
            LifecycleChange::Dismissal {
                review,
                review_updated_at,
            } => {
                format!("dismiss:{review}:{}", time_token(*review_updated_at))
            }
            LifecycleChange::ThreadResolved {
                thread,
                resolved_at,
            } => {
                format!("resolve:{thread}:{}", time_token(*resolved_at))
            }
            LifecycleChange::ChecksCompleted { item, head, runs } => format!(
                "checks:{}",
                digest(&[
                    item.as_bytes(),
                    head.as_bytes(),
                    runs_digest(runs).as_bytes()
                ])
            ),
        };
        SourceKey(key)
    }
}

/// Whether a close, reopen, ready or draft delivery publishes its item event: when the stored
/// state is the payload's state, also when the payload is older than the stored row.
pub fn state_event_publishes<S: PartialEq>(stored_state: &S, payload_state: &S) -> bool {
    stored_state == payload_state
}

/// [`state_event_publishes`] for a delivery whose forward-only step came to `freshness`: a
/// stale payload (older than the stored row) publishes too, so a first delivery after a later
/// change still records its event; a redelivery is absorbed by the source key.
pub fn state_change_publishes<S: PartialEq>(
    freshness: crate::forward::Freshness,
    stored_state: &S,
    payload_state: &S,
) -> bool {
    freshness == crate::forward::Freshness::Stale
        || state_event_publishes(stored_state, payload_state)
}

/// The name of an item event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ItemEventName {
    /// Opened.
    Opened,
    /// Pushed (synchronized).
    Synchronized,
    /// Ready for review.
    Ready,
    /// Converted to draft.
    Draft,
    /// Reopened.
    Reopened,
    /// Closed.
    Closed,
    /// Merged.
    Merged,
    /// A comment edited.
    CommentEdited,
    /// A review dismissed.
    ReviewDismissed,
    /// A thread resolved.
    ThreadResolved,
    /// The head's checks completed (may repeat at one version: a re-run ends at another time).
    ChecksCompleted,
}

impl ItemEventName {
    /// Whether the item holds at most one event of this name per version. A checks completion
    /// of another set of runs, a push (two pushes in one second are two moves), and the events
    /// of a comment, review or thread (two edits in one second are two edits), are told apart
    /// by their source key alone.
    pub fn one_per_version(self) -> bool {
        !matches!(
            self,
            ItemEventName::ChecksCompleted
                | ItemEventName::Synchronized
                | ItemEventName::CommentEdited
                | ItemEventName::ReviewDismissed
                | ItemEventName::ThreadResolved
        )
    }
}

/// What the ledger did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// A new event.
    Recorded,
    /// Absorbed: this item already has this event under this source key.
    DuplicateSourceKey,
    /// Absorbed: this item already has an event of this name at this version.
    DuplicateVersion,
}

/// The unique keys of `item_event`: (item, name, source key) and (item, name, version).
#[derive(Debug, Clone, Default)]
pub struct ItemEventLedger<Item> {
    by_key: BTreeSet<(Item, ItemEventName, SourceKey)>,
    by_version: BTreeSet<(Item, ItemEventName, Timestamp)>,
    events: usize,
}

impl<Item: Ord + Clone> ItemEventLedger<Item> {
    /// An empty ledger.
    pub fn new() -> Self {
        Self {
            by_key: BTreeSet::new(),
            by_version: BTreeSet::new(),
            events: 0,
        }
    }

    /// Records an event of `item` at `version`; `key` is `None` for events from before source keys.
    pub fn record(
        &mut self,
        item: &Item,
        name: ItemEventName,
        key: Option<&SourceKey>,
        version: Timestamp,
    ) -> RecordOutcome {
        if let Some(key) = key
            && self.by_key.contains(&(item.clone(), name, key.clone()))
        {
            return RecordOutcome::DuplicateSourceKey;
        }
        if name.one_per_version() && self.by_version.contains(&(item.clone(), name, version)) {
            return RecordOutcome::DuplicateVersion;
        }
        if let Some(key) = key {
            self.by_key.insert((item.clone(), name, key.clone()));
        }
        self.by_version.insert((item.clone(), name, version));
        self.events += 1;
        RecordOutcome::Recorded
    }

    /// How many events the ledger holds.
    pub fn len(&self) -> usize {
        self.events
    }

    /// Whether the ledger is empty.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{self, Freshness, Push, PushOutcome, StoredHead};
    use proptest::prelude::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn run(name: &str, state: &str, ended: i64) -> SettledRun {
        SettledRun {
            name: name.into(),
            group: "ci".into(),
            state: state.into(),
            ended_at: at(ended),
        }
    }

    fn key(change: LifecycleChange<'_>) -> SourceKey {
        change.source_key()
    }

    #[test]
    fn every_path_derives_the_same_key_for_the_same_change() {
        let webhook = key(LifecycleChange::Close { closed_at: at(5) });
        let sync = key(LifecycleChange::Close { closed_at: at(5) });
        assert_eq!(webhook, sync);
        assert_eq!(webhook.as_str(), "close:5000000000");
    }

    #[test]
    fn keys_of_different_changes_differ() {
        let keys = [
            key(LifecycleChange::Opened { created_at: at(5) }),
            key(LifecycleChange::Ready { at: at(5) }),
            key(LifecycleChange::Draft { at: at(5) }),
            key(LifecycleChange::Reopen { at: at(5) }),
            key(LifecycleChange::Close { closed_at: at(5) }),
            key(LifecycleChange::Merge { merged_at: at(5) }),
            key(LifecycleChange::Dismissal {
                review: "r",
                review_updated_at: at(5),
            }),
            key(LifecycleChange::ThreadResolved {
                thread: "t",
                resolved_at: at(5),
            }),
            key(LifecycleChange::CommentEdit {
                comment: "c",
                updated_at: at(5),
                text: "",
            }),
            key(LifecycleChange::Push {
                before: "a",
                after: "b",
            }),
            key(LifecycleChange::ChecksCompleted {
                item: "i",
                head: "h",
                runs: &[],
            }),
        ];
        let unique: BTreeSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
        assert_ne!(
            key(LifecycleChange::Ready { at: at(5) }),
            key(LifecycleChange::Ready { at: at(6) })
        );
    }

    #[test]
    fn force_push_back_is_a_new_move() {
        let forward = key(LifecycleChange::Push {
            before: "a",
            after: "b",
        });
        let back = key(LifecycleChange::Push {
            before: "b",
            after: "a",
        });
        let again = key(LifecycleChange::Push {
            before: "a",
            after: "b",
        });
        assert_ne!(forward, back);
        assert_eq!(forward, again);
    }

    #[test]
    fn two_comment_edits_in_one_second_are_two_edits() {
        let first = key(LifecycleChange::CommentEdit {
            comment: "c",
            updated_at: at(5),
            text: "one",
        });
        let second = key(LifecycleChange::CommentEdit {
            comment: "c",
            updated_at: at(5),
            text: "two",
        });
        assert_ne!(first, second);
    }

    #[test]
    fn the_same_change_of_two_comments_reviews_or_threads_is_two_changes() {
        let edit = |comment| {
            key(LifecycleChange::CommentEdit {
                comment,
                updated_at: at(5),
                text: "same",
            })
        };
        assert_ne!(edit("1"), edit("2"));
        let dismissal = |review| {
            key(LifecycleChange::Dismissal {
                review,
                review_updated_at: at(5),
            })
        };
        assert_ne!(dismissal("1"), dismissal("2"));
        let resolution = |thread| {
            key(LifecycleChange::ThreadResolved {
                thread,
                resolved_at: at(5),
            })
        };
        assert_ne!(resolution("a"), resolution("b"));
        assert_eq!(resolution("a"), resolution("a"));
    }

    #[test]
    fn checks_digest_ignores_order_but_not_end_time() {
        let a = [run("build", "success", 1), run("test", "failure", 2)];
        let b = [run("test", "failure", 2), run("build", "success", 1)];
        let rerun = [run("build", "success", 1), run("test", "failure", 3)];
        let completed = |runs| {
            key(LifecycleChange::ChecksCompleted {
                item: "pr1",
                head: "h",
                runs,
            })
        };
        assert_eq!(completed(&a), completed(&b));
        assert_ne!(completed(&a), completed(&rerun));
        assert_ne!(
            completed(&a),
            key(LifecycleChange::ChecksCompleted {
                item: "pr2",
                head: "h",
                runs: &a
            })
        );
        assert_ne!(
            completed(&a),
            key(LifecycleChange::ChecksCompleted {
                item: "pr1",
                head: "h2",
                runs: &a
            })
        );
        // Every covered field counts.
        let mut renamed = a.clone();
        renamed[0].name = "lint".into();
        let mut regrouped = a.clone();
        regrouped[0].group = "other".into();
        let mut restated = a.clone();
        restated[0].state = "failure".into();
        for changed in [renamed, regrouped, restated] {
            assert_ne!(runs_digest(&a), runs_digest(&changed));
        }
    }

    #[test]
    fn state_events_publish_when_stored_state_matches_payload() {
        assert!(state_event_publishes(&"closed", &"closed"));
        assert!(!state_event_publishes(&"open", &"closed"));
    }

    #[test]
    fn redelivery_changes_nothing_in_the_ledger() {
        let mut ledger = ItemEventLedger::new();
        assert!(ledger.is_empty());
        let k = key(LifecycleChange::Close { closed_at: at(5) });
        assert_eq!(
            ledger.record(&1, ItemEventName::Closed, Some(&k), at(5)),
            RecordOutcome::Recorded
        );
        // The work moved on since, but the same close is absorbed by its source key.
        assert_eq!(
            ledger.record(&1, ItemEventName::Closed, Some(&k), at(9)),
            RecordOutcome::DuplicateSourceKey
        );
        assert_eq!(ledger.len(), 1);
        assert!(!ledger.is_empty());
        // Another item records its own close.
        assert_eq!(
            ledger.record(&2, ItemEventName::Closed, Some(&k), at(5)),
            RecordOutcome::Recorded
        );
    }

    #[test]
    fn one_event_of_a_name_per_version() {
        let mut ledger = ItemEventLedger::new();
        let first = key(LifecycleChange::Ready { at: at(5) });
        let second = key(LifecycleChange::Ready { at: at(6) });
        ledger.record(&1, ItemEventName::Ready, Some(&first), at(7));
        assert_eq!(
            ledger.record(&1, ItemEventName::Ready, Some(&second), at(7)),
            RecordOutcome::DuplicateVersion
        );
        assert_eq!(
            ledger.record(&1, ItemEventName::Draft, Some(&second), at(7)),
            RecordOutcome::Recorded
        );
        // A legacy event without a key is still absorbed by its version.
        assert_eq!(
            ledger.record(&1, ItemEventName::Draft, None, at(7)),
            RecordOutcome::DuplicateVersion
        );
        assert_eq!(
            ledger.record(&1, ItemEventName::Draft, None, at(8)),
            RecordOutcome::Recorded
        );
        assert_eq!(ledger.len(), 3);
    }

    #[test]
    fn two_edits_in_one_second_at_one_version_are_two_events() {
        let mut ledger = ItemEventLedger::new();
        let name = ItemEventName::CommentEdited;
        for text in ["one", "two"] {
            let k = key(LifecycleChange::CommentEdit {
                comment: "c",
                updated_at: at(5),
                text,
            });
            assert_eq!(
                ledger.record(&1, name, Some(&k), at(5)),
                RecordOutcome::Recorded
            );
        }
        assert!(ItemEventName::Ready.one_per_version());
        assert!(!ItemEventName::Synchronized.one_per_version());
        assert!(!ItemEventName::ThreadResolved.one_per_version());
    }

    #[test]
    fn a_rerun_on_the_same_head_records_a_new_checks_event_at_the_same_version() {
        let mut ledger = ItemEventLedger::new();
        let first = [run("build", "failure", 1)];
        let rerun = [run("build", "failure", 2)];
        let k1 = key(LifecycleChange::ChecksCompleted {
            item: "pr",
            head: "h",
            runs: &first,
        });
        let k2 = key(LifecycleChange::ChecksCompleted {
            item: "pr",
            head: "h",
            runs: &rerun,
        });
        let name = ItemEventName::ChecksCompleted;
        assert_eq!(
            ledger.record(&1, name, Some(&k1), at(7)),
            RecordOutcome::Recorded
        );
        assert_eq!(
            ledger.record(&1, name, Some(&k2), at(7)),
            RecordOutcome::Recorded
        );
        assert_eq!(
            ledger.record(&1, name, Some(&k1), at(7)),
            RecordOutcome::DuplicateSourceKey
        );
        assert_eq!(ledger.len(), 2);
    }

    #[derive(Debug, Clone)]
    enum Update {
        Edit { secs: i64, text: String },
        Push { index: usize },
    }

    #[derive(Debug, Default, PartialEq)]
    struct Row {
        comment: Option<(Timestamp, String)>,
        head: Option<StoredHead>,
    }

    fn apply(row: &mut Row, ledger: &mut ItemEventLedger<u8>, update: &Update, chain: &[String]) {
        match update {
            Update::Edit { secs, text } => {
                let updated_at = at(*secs);
                let stored = row.comment.as_ref().map(|(t, _)| *t);
                if forward::by_updated_at(stored, updated_at) == Freshness::Apply {
                    row.comment = Some((updated_at, text.clone()));
                }
                let k = key(LifecycleChange::CommentEdit {
                    comment: "c",
                    updated_at,
                    text,
                });
                ledger.record(&1, ItemEventName::CommentEdited, Some(&k), updated_at);
            }
            Update::Push { index } => {
                let push = Push {
                    before: chain[*index].clone(),
                    after: chain[index + 1].clone(),
                    at: at(*index as i64),
                };
                let outcome = forward::push(row.head.as_ref(), &push);
                if outcome == PushOutcome::MoveHead {
                    row.head = Some(StoredHead {
                        sha: push.after.clone(),
                        changed_at: push.at,
                    });
                }
                let k = key(LifecycleChange::Push {
                    before: &push.before,
                    after: &push.after,
                });
                ledger.record(&2, ItemEventName::Synchronized, Some(&k), push.at);
            }
        }
    }

    fn arb_updates() -> impl Strategy<Value = (Vec<Update>, Vec<usize>)> {
        let edits = proptest::collection::btree_map(0i64..50, "[a-c]{0,3}", 0..6);
        (edits, 0usize..6)
            .prop_flat_map(|(edits, pushes)| {
                let mut updates: Vec<Update> = edits
                    .into_iter()
                    .map(|(secs, text)| Update::Edit { secs, text })
                    .collect();
                updates.extend((0..pushes).map(|index| Update::Push { index }));
                let n = updates.len();
                let picks = proptest::collection::vec(0..n.max(1), n..n * 3 + 1);
                (Just(updates), picks)
            })
            .prop_flat_map(|(updates, picks)| {
                let deliveries: Vec<Update> = updates
                    .iter()
                    .cloned()
                    .chain(picks.into_iter().filter_map(|i| updates.get(i).cloned()))
                    .collect();
                (Just(deliveries.clone()), Just(deliveries).prop_shuffle())
                    .prop_map(|(_, shuffled)| shuffled)
                    .prop_flat_map(move |shuffled| {
                        let n = shuffled.len();
                        (
                            Just(shuffled),
                            Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                        )
                    })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_permutation_with_duplicates_yields_one_state_and_one_event_per_key(
            (deliveries, order) in arb_updates(),
        ) {
            let chain: Vec<String> = (0..8).map(|i| format!("sha{i}")).collect();
            let mut row_a = Row::default();
            let mut ledger_a = ItemEventLedger::new();
            for update in &deliveries {
                apply(&mut row_a, &mut ledger_a, update, &chain);
            }
            let mut row_b = Row::default();
            let mut ledger_b = ItemEventLedger::new();
            for &i in &order {
                apply(&mut row_b, &mut ledger_b, &deliveries[i], &chain);
            }
            prop_assert_eq!(&row_a, &row_b);
            // The newest edit wins, whatever the order.
            let newest = deliveries.iter().filter_map(|u| match u {
                Update::Edit { secs, text } => Some((at(*secs), text.clone())),
                Update::Push { .. } => None,
            }).max();
            prop_assert_eq!(&row_a.comment, &newest);
            // One event per distinct source key, whatever the order.
            let distinct_edits: BTreeSet<i64> = deliveries.iter().filter_map(|u| match u {
                Update::Edit { secs, .. } => Some(*secs),
                Update::Push { .. } => None,
            }).collect();
            let pushes: BTreeSet<usize> = deliveries.iter().filter_map(|u| match u {
                Update::Push { index } => Some(*index),
                Update::Edit { .. } => None,
            }).collect();
            let max_push = pushes.iter().max().copied();
            prop_assert_eq!(row_a.head.as_ref().map(|h| h.sha.clone()), max_push.map(|i| chain[i + 1].clone()));
            prop_assert_eq!(ledger_a.len(), ledger_b.len());
            prop_assert_eq!(ledger_a.len(), distinct_edits.len() + pushes.len());
        }
    }
}
