//! Forward-only writes: stored work only moves forward, so a redelivered or older payload changes
//! nothing. Each function compares a payload with the row the writer holds locked.

use std::cmp::Ordering;
use std::str::FromStr;

use crate::Timestamp;

/// What a writer does with a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The payload is not older than the stored row: write it.
    Apply,
    /// The payload is older than the stored row: change nothing.
    Stale,
}

/// The entities that follow the `updated_at` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardEntity {
    /// An issue.
    Issue,
    /// A GitHub pull request.
    PullRequest,
    /// A GitLab merge request.
    MergeRequest,
    /// An issue or pull request comment.
    Comment,
    /// A pull request review.
    Review,
    /// A review comment.
    ReviewComment,
    /// A GitLab note.
    Note,
    /// A GitLab diff note.
    DiffNote,
    /// An Outline document.
    OutlineDocument,
}

/// The clock skew allowed between a vendor and us when no setting says otherwise.
pub const DEFAULT_CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(300);

/// The latest vendor time a write may carry: when we observed what carries it (a delivery's
/// receipt by JetStream, a page's read) plus the clock skew allowed. A version past it would
/// freeze its row, since forward-only writes refuse everything older, so it is refused with its
/// reason instead of written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBound {
    observed: Timestamp,
    skew: std::time::Duration,
}

impl TimeBound {
    /// The bound of something observed at `observed`, allowing `skew`.
    pub fn after(observed: Timestamp, skew: std::time::Duration) -> Self {
        TimeBound { observed, skew }
    }

    /// The latest time admitted.
    pub fn limit(&self) -> Timestamp {
        self.observed + self.skew
    }

    /// `Ok` when `at` is not past the limit; otherwise why it is refused.
    pub fn check(&self, at: Timestamp) -> Result<(), FutureTime> {
        if at > self.limit() {
            Err(FutureTime {
                at,
                observed: self.observed,
                skew: self.skew,
            })
        } else {
            Ok(())
        }
    }
}

/// A vendor time later than when it was observed plus the skew allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the vendor time {at} is later than the {observed} it was received or read at plus the {} s \
     of clock skew allowed",
    .skew.as_secs()
)]
pub struct FutureTime {
    pub at: Timestamp,
    pub observed: Timestamp,
    pub skew: std::time::Duration,
}

/// Compares a payload's `updated_at` with the stored row's (`None` when the row is new).
pub fn by_updated_at(stored: Option<Timestamp>, payload: Timestamp) -> Freshness {
    match stored {
        // Forward-only: an older payload changes nothing.
        Some(stored) if payload < stored => Freshness::Stale,
        _ => Freshness::Apply,
    }
}

/// A Slack message timestamp (`"1712345678.000200"`), ordered numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlackTs {
    seconds: u64,
    micros: u32,
}

/// A Slack timestamp that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Slack timestamp: {0:?}")]
pub struct SlackTsError(pub String);

impl FromStr for SlackTs {
    type Err = SlackTsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || SlackTsError(s.to_owned());
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let (seconds, fraction) = match s.split_once('.') {
            Some((seconds, fraction)) if digits(fraction) => (seconds, fraction),
            Some(_) => return Err(err()),
            None => (s, ""),
        };
        if !digits(seconds) || fraction.len() > 6 {
            return Err(err());
        }
        let seconds = seconds.parse().map_err(|_| err())?;
        let micros = format!("{fraction:0<6}").parse().map_err(|_| err())?;
        Ok(SlackTs { seconds, micros })
    }
}

impl SlackTs {
    /// The instant `at`, to the microsecond, as Slack would stamp it; `None` before 1970.
    pub fn at(at: Timestamp) -> Option<SlackTs> {
        let seconds = u64::try_from(at.unix_timestamp()).ok()?;
        Some(SlackTs {
            seconds,
            micros: at.microsecond(),
        })
    }

    /// The instant it stands for (its whole seconds and microseconds).
    pub fn time(self) -> Timestamp {
        let seconds = i64::try_from(self.seconds).unwrap_or(i64::MAX);
        Timestamp::from_unix_timestamp(seconds)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .replace_microsecond(self.micros)
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// Slack's own spelling: seconds, a dot, six digits of microseconds.
impl std::fmt::Display for SlackTs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:06}", self.seconds, self.micros)
    }
}

/// Whether a Slack `message_changed` applies to the stored message.
pub fn slack_edit(stored_edited: Option<SlackTs>, incoming_edited: Option<SlackTs>) -> Freshness {
    match (incoming_edited, stored_edited) {
        // A change without edited.ts is a new reply or an unfurl: it changes nothing.
        (None, _) => Freshness::Stale,
        (Some(_), None) => Freshness::Apply,
        // Only a strictly later edit applies.
        (Some(incoming), Some(stored)) if incoming > stored => Freshness::Apply,
        (Some(_), Some(_)) => Freshness::Stale,
    }
}

/// The state of a GitHub review as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GithubReviewState {
    /// Pending (not submitted).
    Pending,
    /// Commented.
    Commented,
    /// Approved.
    Approved,
    /// Changes requested.
    ChangesRequested,
    /// Dismissed: final.
    Dismissed,
}

/// What a GitHub review webhook does to the stored review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewTransition {
    /// Store the new state (and publish a dismissal, if it is one).
    Apply(GithubReviewState),
    /// Change and publish nothing.
    Unchanged,
}

/// Applies a review state from a payload to the stored review.
pub fn github_review_state(
    stored: GithubReviewState,
    incoming: GithubReviewState,
) -> ReviewTransition {
    // A GitHub dismissal is final: nothing moves a dismissed review, a second dismissal included.
    if stored == GithubReviewState::Dismissed || stored == incoming {
        ReviewTransition::Unchanged
    } else {
        ReviewTransition::Apply(incoming)
    }
}

/// The stored head of a pull or merge request and when it last changed (provider date).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHead {
    /// The head commit.
    pub sha: String,
    /// The provider date of the change that set it.
    pub changed_at: Timestamp,
}

/// A push as a payload reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    /// The head before the push.
    pub before: String,
    /// The head after the push.
    pub after: String,
    /// The provider date of the push (second precision).
    pub at: Timestamp,
}

/// What a push does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Move the head and record the push's item event.
    MoveHead,
    /// Keep the head; record only the push's own item event (absorbed if already recorded).
    RecordOnly,
}

/// Decides a push against the stored head.
pub fn push(stored: Option<&StoredHead>, push: &Push) -> PushOutcome {
    let Some(stored) = stored else {
        return PushOutcome::MoveHead;
    };
    if push.after == stored.sha {
        // Redelivery: the head is already there.
        return PushOutcome::RecordOnly;
    }
    match push.at.cmp(&stored.changed_at) {
        // Forward-only: an older push never moves the head back.
        Ordering::Less => PushOutcome::RecordOnly,
        Ordering::Greater => PushOutcome::MoveHead,
        // Same second: only a push that continues from the stored head moves it; an older one
        // records its own event and never moves the head back.
        Ordering::Equal if push.before == stored.sha => PushOutcome::MoveHead,
        Ordering::Equal => PushOutcome::RecordOnly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn ts(s: &str) -> SlackTs {
        s.parse().unwrap()
    }

    #[test]
    fn a_time_past_the_observation_plus_the_skew_is_refused_with_both() {
        let observed = time::macros::datetime!(2026-12-03 12:00 UTC);
        let bound = TimeBound::after(observed, DEFAULT_CLOCK_SKEW);
        assert!(bound.check(observed).is_ok());
        assert!(bound.check(observed + time::Duration::minutes(5)).is_ok());
        let far = time::macros::datetime!(2099-01-01 00:00 UTC);
        let refused = bound.check(far).unwrap_err();
        let text = refused.to_string();
        assert!(text.contains("2099") && text.contains("300 s"), "{text}");
        assert!(bound.check(observed + time::Duration::minutes(6)).is_err());
    }

    #[test]
    fn redelivery_changes_nothing_when_older_than_stored() {
        assert_eq!(by_updated_at(Some(at(10)), at(9)), Freshness::Stale);
    }

    #[test]
    fn same_or_newer_updated_at_applies() {
        assert_eq!(by_updated_at(Some(at(10)), at(10)), Freshness::Apply);
        assert_eq!(by_updated_at(Some(at(10)), at(11)), Freshness::Apply);
        assert_eq!(by_updated_at(None, at(1)), Freshness::Apply);
    }

    #[test]
    fn slack_ts_prints_as_slack_spells_it_and_maps_to_its_instant() {
        let t = ts("1700000000.0002");
        assert_eq!(t.to_string(), "1700000000.000200");
        assert_eq!(t.to_string().parse::<SlackTs>().unwrap(), t);
        assert_eq!(SlackTs::at(t.time()), Some(t));
        assert_eq!(t.time().unix_timestamp(), 1_700_000_000);
    }

    #[test]
    fn slack_ts_orders_numerically() {
        assert!(ts("1700000000.9") > ts("1700000000.000200"));
        assert!(ts("1700000001.000001") > ts("1700000000.999999"));
        assert_eq!(ts("1700000000.1"), ts("1700000000.100000"));
        assert_eq!(ts("17"), ts("17.000000"));
        for bad in ["", ".1", "1.", "1.2.3", "a.1", "1.1234567", "1.-2"] {
            assert!(bad.parse::<SlackTs>().is_err(), "{bad}");
        }
    }

    #[test]
    fn slack_edit_applies_only_when_later() {
        let stored = Some(ts("1700000000.000200"));
        assert_eq!(
            slack_edit(stored, Some(ts("1700000000.000300"))),
            Freshness::Apply
        );
        assert_eq!(
            slack_edit(stored, Some(ts("1700000000.000200"))),
            Freshness::Stale
        );
        assert_eq!(
            slack_edit(stored, Some(ts("1700000000.000100"))),
            Freshness::Stale
        );
        assert_eq!(slack_edit(None, Some(ts("1.0"))), Freshness::Apply);
    }

    #[test]
    fn slack_change_without_edited_ts_changes_nothing() {
        assert_eq!(slack_edit(None, None), Freshness::Stale);
        assert_eq!(slack_edit(Some(ts("1.0")), None), Freshness::Stale);
    }

    #[test]
    fn github_dismissal_is_final() {
        use GithubReviewState::*;
        assert_eq!(
            github_review_state(Approved, Dismissed),
            ReviewTransition::Apply(Dismissed)
        );
        assert_eq!(
            github_review_state(Dismissed, Dismissed),
            ReviewTransition::Unchanged
        );
        assert_eq!(
            github_review_state(Dismissed, Approved),
            ReviewTransition::Unchanged
        );
        assert_eq!(
            github_review_state(Approved, Approved),
            ReviewTransition::Unchanged
        );
        assert_eq!(
            github_review_state(Pending, Commented),
            ReviewTransition::Apply(Commented)
        );
        assert_eq!(
            github_review_state(Commented, ChangesRequested),
            ReviewTransition::Apply(ChangesRequested)
        );
    }

    fn head(sha: &str, secs: i64) -> StoredHead {
        StoredHead {
            sha: sha.into(),
            changed_at: at(secs),
        }
    }

    fn push_of(before: &str, after: &str, secs: i64) -> Push {
        Push {
            before: before.into(),
            after: after.into(),
            at: at(secs),
        }
    }

    #[test]
    fn same_second_push_applies_only_when_continuing_from_the_stored_head() {
        let stored = head("b", 10);
        assert_eq!(
            push(Some(&stored), &push_of("b", "c", 10)),
            PushOutcome::MoveHead
        );
        // The earlier push a→b arrives after b→c's head was stored in the same second.
        assert_eq!(
            push(Some(&stored), &push_of("a", "x", 10)),
            PushOutcome::RecordOnly
        );
    }

    #[test]
    fn push_never_moves_the_head_back() {
        let stored = head("c", 10);
        assert_eq!(
            push(Some(&stored), &push_of("a", "b", 9)),
            PushOutcome::RecordOnly
        );
        assert_eq!(
            push(Some(&stored), &push_of("c", "d", 9)),
            PushOutcome::RecordOnly
        );
        assert_eq!(
            push(Some(&stored), &push_of("b", "c", 10)),
            PushOutcome::RecordOnly
        );
    }

    #[test]
    fn later_push_moves_the_head_and_a_first_push_sets_it() {
        assert_eq!(
            push(Some(&head("c", 10)), &push_of("z", "d", 11)),
            PushOutcome::MoveHead
        );
        assert_eq!(push(None, &push_of("a", "b", 1)), PushOutcome::MoveHead);
    }
}
