//! Head checks: the check state of a head as dated observations, whichever vendor reports it.
//! The vendor readings of a head's checks are in [`crate::github::checks`] (check runs) and
//! [`crate::gitlab::checks`] (head pipelines).

use crate::Timestamp;

/// The check state of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckState {
    /// Every check passed.
    Success,
    /// A check failed.
    Failure,
    /// Checks are still running or waiting (an awaiting-approval suite included).
    Pending,
    /// GitLab reports a skipped pipeline.
    Skipped,
    /// GitLab reports no pipeline for the head (not whether CI is configured).
    NoPipeline,
    /// GitHub's empty rollup, or NO_PIPELINE/SKIPPED on GitLab records from before they existed.
    None,
}

/// A head's check state and when it was observed (`None`: unknown age, or GitHub's undated path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadCheck {
    /// The state.
    pub state: CheckState,
    /// The commit the state is about.
    pub head: String,
    /// When the provider was asked or sent it.
    pub observed_at: Option<Timestamp>,
}

/// Applies an observation; returns whether it was stored.
pub fn observe(stored: &mut Option<HeadCheck>, observation: HeadCheck) -> bool {
    if let (Some(current), Some(at)) = (stored.as_ref(), observation.observed_at)
        && current.observed_at.is_some_and(|stored_at| at < stored_at)
    {
        // Dated observation: an older one changes nothing, whatever its commit.
        return false;
    }
    *stored = Some(observation);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn check(state: CheckState, head: &str, observed: Option<i64>) -> HeadCheck {
        HeadCheck {
            state,
            head: head.into(),
            observed_at: observed.map(at),
        }
    }

    #[test]
    fn older_observation_changes_nothing_whatever_its_commit() {
        let mut stored = Some(check(CheckState::Success, "h2", Some(10)));
        assert!(!observe(
            &mut stored,
            check(CheckState::Failure, "h1", Some(9))
        ));
        assert_eq!(stored.as_ref().unwrap().state, CheckState::Success);
        assert!(observe(
            &mut stored,
            check(CheckState::Failure, "h2", Some(10))
        ));
        assert!(observe(
            &mut stored,
            check(CheckState::Success, "h2", Some(11))
        ));
        assert_eq!(stored.unwrap().observed_at, Some(at(11)));
    }

    #[test]
    fn record_of_unknown_age_accepts_any_dated_observation() {
        let mut stored = Some(check(CheckState::Success, "h", None));
        assert!(observe(
            &mut stored,
            check(CheckState::Pending, "h", Some(1))
        ));
        let mut empty = None;
        assert!(observe(
            &mut empty,
            check(CheckState::Pending, "h", Some(1))
        ));
        // GitHub's undated path replaces as before.
        let mut dated = Some(check(CheckState::Pending, "h", Some(5)));
        assert!(observe(&mut dated, check(CheckState::Success, "h", None)));
    }
}
