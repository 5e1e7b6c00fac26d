//! GitHub check runs behind a head's check state: check-run list completeness, storage caps and
//! stored-run updates.

use time::Duration;

use crate::Timestamp;
use crate::checks::CheckState;
use crate::source_key::SettledRun;

/// The status of a GitHub check run or commit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Queued, requested, waiting or pending.
    Waiting,
    /// In progress.
    InProgress,
    /// Ended.
    Completed,
}

/// One GitHub check run or commit status of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    /// Its name (or a status's context).
    pub name: String,
    /// Its group (workflow or app name).
    pub group: String,
    /// The GitHub App that posted it (`None` for a commit status).
    pub app_id: Option<u64>,
    /// Its status.
    pub status: RunStatus,
    /// Its conclusion once completed.
    pub conclusion: Option<String>,
    /// When it ended.
    pub completed_at: Option<Timestamp>,
    /// Its link.
    pub details_url: Option<String>,
}

/// One GitHub check suite of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSuite {
    /// The GitHub App of the suite.
    pub app_id: u64,
    /// Its status.
    pub status: RunStatus,
    /// Its conclusion once completed (`action_required` awaits a maintainer's approval).
    pub conclusion: Option<String>,
    /// How many runs it has.
    pub run_count: u32,
}

/// The rollup state of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rollup {
    /// Success.
    Success,
    /// Failure (other runs may still go).
    Failure,
    /// Error.
    Error,
    /// Pending.
    Pending,
    /// Expected.
    Expected,
}

/// One read of a commit's runs (`GetCommitCheckRuns`: one page of 100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitChecksRead {
    /// The runs and statuses on the page.
    pub runs: Vec<CheckRun>,
    /// GitHub's count of runs and statuses.
    pub total_count: u64,
    /// The rollup; `None` when the head has none.
    pub rollup: Option<Rollup>,
    /// The commit's check suites.
    pub suites: Vec<CheckSuite>,
}

/// The page size of a check-run read.
pub const RUN_PAGE_SIZE: u64 = 100;

/// Why a run list does not show that the checks finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limitation {
    /// The head has no rollup.
    NoRollup,
    /// More runs than one page holds.
    MoreThanOnePage,
    /// The rollup is pending or expected.
    RollupPending,
    /// A listed run has not ended.
    RunNotEnded,
    /// A suite with runs has not completed.
    SuiteNotCompleted,
    /// A suite waits for a maintainer to approve its workflows.
    AwaitingApproval,
}

/// The assessed run list of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunList {
    /// The runs, our own app's left out.
    pub runs: Vec<CheckRun>,
    /// Why the list is not complete; empty when it is.
    pub limitations: Vec<Limitation>,
}

impl RunList {
    /// Whether nothing GitHub knows of is still to come.
    pub fn is_complete(&self) -> bool {
        self.limitations.is_empty()
    }

    /// The settled runs, when the list is complete.
    pub fn settled(&self) -> Option<Vec<SettledRun>> {
        if !self.is_complete() {
            return None;
        }
        self.runs
            .iter()
            .map(|run| {
                Some(SettledRun {
                    name: run.name.clone(),
                    group: run.group.clone(),
                    state: run.conclusion.clone().unwrap_or_default(),
                    ended_at: run.completed_at?,
                })
            })
            .collect()
    }
}

/// Assesses a read of a commit's runs; `own_app_id` is our GitHub App (if we have one), whose
/// suite and runs are left out.
pub fn assess_runs(read: CommitChecksRead, own_app_id: Option<u64>) -> RunList {
    let mut limitations = Vec::new();
    let mut push = |limitation| {
        if !limitations.contains(&limitation) {
            limitations.push(limitation);
        }
    };
    match read.rollup {
        None => push(Limitation::NoRollup),
        // A failed rollup is no sign of completion, but it does not block one either.
        Some(Rollup::Pending | Rollup::Expected) => push(Limitation::RollupPending),
        Some(Rollup::Success | Rollup::Failure | Rollup::Error) => {}
    }
    if read.total_count > RUN_PAGE_SIZE || (read.runs.len() as u64) < read.total_count {
        push(Limitation::MoreThanOnePage);
    }
    // Our own app's suite and runs are excluded.
    let runs: Vec<CheckRun> = read
        .runs
        .into_iter()
        .filter(|run| own_app_id.is_none() || run.app_id != own_app_id)
        .collect();
    if runs
        .iter()
        .any(|run| run.status != RunStatus::Completed || run.completed_at.is_none())
    {
        push(Limitation::RunNotEnded);
    }
    for suite in read.suites.iter().filter(|s| Some(s.app_id) != own_app_id) {
        if suite.conclusion.as_deref() == Some("action_required") {
            // Awaiting approval: completed with no runs, yet nothing has run.
            push(Limitation::AwaitingApproval);
        } else if suite.run_count > 0 && suite.status != RunStatus::Completed {
            // A suite without runs is left aside: an app that never posts stays queued.
            push(Limitation::SuiteNotCompleted);
        }
    }
    RunList { runs, limitations }
}

/// The head's check state from a GitHub read: a suite awaiting a maintainer's approval keeps it
/// pending (GitHub may still roll that head up as success); otherwise the rollup decides, and a
/// head without a rollup has none.
pub fn github_check_state(rollup: Option<Rollup>, list: &RunList) -> CheckState {
    if list.limitations.contains(&Limitation::AwaitingApproval) {
        return CheckState::Pending;
    }
    match rollup {
        None => CheckState::None,
        Some(Rollup::Success) => CheckState::Success,
        Some(Rollup::Failure | Rollup::Error) => CheckState::Failure,
        Some(Rollup::Pending | Rollup::Expected) => CheckState::Pending,
    }
}

/// At most this many runs are stored.
pub const MAX_STORED_RUNS: usize = 200;
/// Run names are cut to this many characters.
pub const MAX_RUN_NAME_CHARS: usize = 200;

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoredRun {
    /// Name, cut to [`MAX_RUN_NAME_CHARS`].
    pub name: String,
    /// Group.
    pub group: String,
    /// Conclusion (empty while running).
    pub state: String,
    /// End time.
    pub ended_at: Option<Timestamp>,
    /// Link without user information, query or fragment.
    pub link: Option<String>,
}

/// Removes user information, query and fragment from an http(s) link; other links are dropped.
pub fn sanitize_link(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.is_empty() {
        return None;
    }
    Some(format!("{}://{host}{path}", scheme.to_ascii_lowercase()))
}

/// Applies the storage caps to a run list.
pub fn cap_runs(runs: &[CheckRun]) -> Vec<StoredRun> {
    runs.iter()
        .take(MAX_STORED_RUNS)
        .map(|run| StoredRun {
            name: run.name.chars().take(MAX_RUN_NAME_CHARS).collect(),
            group: run.group.clone(),
            state: run.conclusion.clone().unwrap_or_default(),
            ended_at: run.completed_at,
            link: run.details_url.as_deref().and_then(sanitize_link),
        })
        .collect()
}

/// The stored runs of a pull request's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRuns {
    /// The commit.
    pub head: String,
    /// When the stored read was requested.
    pub read_at: Timestamp,
    /// When the runs last changed.
    pub changed_at: Timestamp,
    /// Whether the list was complete with every run ended.
    pub finished: bool,
    /// The runs.
    pub runs: Vec<StoredRun>,
}

/// What a run read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunReadOutcome {
    /// Older than the stored read of the same commit: nothing changed.
    Stale,
    /// The same runs: the stored read and its time stay.
    Unchanged,
    /// The runs changed; `checks_completed` says whether to record the event.
    Replaced {
        /// Every run of the head ended in a complete list.
        checks_completed: bool,
    },
}

/// Applies a successful read of a head's runs (a failed read records nothing).
pub fn apply_run_read(
    stored: &mut Option<StoredRuns>,
    head: &str,
    read_at: Timestamp,
    list: &RunList,
) -> RunReadOutcome {
    let mut runs = cap_runs(&list.runs);
    runs.sort();
    if let Some(current) = stored.as_ref().filter(|s| s.head == head) {
        if read_at < current.read_at {
            return RunReadOutcome::Stale;
        }
        let mut current_runs = current.runs.clone();
        current_runs.sort();
        if current_runs == runs {
            return RunReadOutcome::Unchanged;
        }
    }
    let finished = list.settled().is_some();
    *stored = Some(StoredRuns {
        head: head.to_owned(),
        read_at,
        changed_at: read_at,
        finished,
        runs,
    });
    // An incomplete list never records that the checks finished.
    RunReadOutcome::Replaced {
        checks_completed: finished,
    }
}

/// Whether scheduled sync reads the runs again: not finished, changed in the last 24 hours.
pub fn needs_rescan(stored: &StoredRuns, now: Timestamp) -> bool {
    !stored.finished && now - stored.changed_at <= Duration::hours(24)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_timestamp(secs).unwrap()
    }

    fn run(name: &str, status: RunStatus, ended: Option<i64>) -> CheckRun {
        CheckRun {
            name: name.into(),
            group: "ci".into(),
            app_id: Some(1),
            status,
            conclusion: ended.map(|_| "success".to_owned()),
            completed_at: ended.map(at),
            details_url: Some("https://ci.example/run/1?token=x".into()),
        }
    }

    fn suite(status: RunStatus, conclusion: Option<&str>, run_count: u32) -> CheckSuite {
        CheckSuite {
            app_id: 1,
            status,
            conclusion: conclusion.map(str::to_owned),
            run_count,
        }
    }

    fn read(
        runs: Vec<CheckRun>,
        rollup: Option<Rollup>,
        suites: Vec<CheckSuite>,
    ) -> CommitChecksRead {
        CommitChecksRead {
            total_count: runs.len() as u64,
            runs,
            rollup,
            suites,
        }
    }

    #[test]
    fn an_awaiting_approval_suite_keeps_the_head_pending_whatever_the_rollup() {
        let waiting = RunList {
            runs: Vec::new(),
            limitations: vec![Limitation::AwaitingApproval],
        };
        let settled = RunList {
            runs: Vec::new(),
            limitations: Vec::new(),
        };
        assert_eq!(
            github_check_state(Some(Rollup::Success), &waiting),
            CheckState::Pending
        );
        assert_eq!(
            github_check_state(Some(Rollup::Success), &settled),
            CheckState::Success
        );
        assert_eq!(
            github_check_state(Some(Rollup::Error), &settled),
            CheckState::Failure
        );
        assert_eq!(
            github_check_state(Some(Rollup::Expected), &settled),
            CheckState::Pending
        );
        assert_eq!(github_check_state(None, &settled), CheckState::None);
    }

    #[test]
    fn run_list_complete_when_everything_ended() {
        let list = assess_runs(
            read(
                vec![run("build", RunStatus::Completed, Some(5))],
                Some(Rollup::Success),
                vec![suite(RunStatus::Completed, Some("success"), 1)],
            ),
            Some(99),
        );
        assert!(list.is_complete());
        let settled = list.settled().unwrap();
        assert_eq!(settled[0].ended_at, at(5));
        assert_eq!(settled[0].state, "success");
        // A failed rollup still allows completion once everything ended.
        let failed = assess_runs(
            read(
                vec![run("b", RunStatus::Completed, Some(5))],
                Some(Rollup::Failure),
                vec![],
            ),
            Some(99),
        );
        assert!(failed.is_complete());
        let error = assess_runs(read(vec![], Some(Rollup::Error), vec![]), Some(99));
        assert!(error.is_complete());
    }

    #[test]
    fn fails_closed_on_more_than_one_page() {
        let mut r = read(
            vec![run("build", RunStatus::Completed, Some(5))],
            Some(Rollup::Success),
            vec![],
        );
        r.total_count = 2;
        assert_eq!(
            assess_runs(r.clone(), Some(99)).limitations,
            vec![Limitation::MoreThanOnePage]
        );
        r.runs = (0..101)
            .map(|i| run(&format!("r{i}"), RunStatus::Completed, Some(5)))
            .collect();
        r.total_count = 101;
        assert_eq!(
            assess_runs(r, Some(99)).limitations,
            vec![Limitation::MoreThanOnePage]
        );
    }

    #[test]
    fn exactly_one_full_page_is_complete() {
        let runs = (0..100)
            .map(|i| run(&format!("r{i}"), RunStatus::Completed, Some(5)))
            .collect();
        let list = assess_runs(read(runs, Some(Rollup::Success), vec![]), Some(99));
        assert!(list.is_complete());
    }

    #[test]
    fn read_at_the_same_instant_applies() {
        let mut stored = None;
        apply_run_read(&mut stored, "h", at(10), &complete_list(5));
        assert_eq!(
            apply_run_read(&mut stored, "h", at(10), &complete_list(6)),
            RunReadOutcome::Replaced {
                checks_completed: true
            }
        );
    }

    #[test]
    fn fails_closed_on_pending_or_expected_rollup_or_none() {
        for rollup in [Rollup::Pending, Rollup::Expected] {
            let list = assess_runs(read(vec![], Some(rollup), vec![]), Some(99));
            assert_eq!(list.limitations, vec![Limitation::RollupPending]);
            assert_eq!(list.settled(), None);
        }
        assert_eq!(
            assess_runs(read(vec![], None, vec![]), Some(99)).limitations,
            vec![Limitation::NoRollup]
        );
    }

    #[test]
    fn fails_closed_on_a_run_not_ended() {
        for status in [RunStatus::Waiting, RunStatus::InProgress] {
            let list = assess_runs(
                read(vec![run("b", status, None)], Some(Rollup::Success), vec![]),
                Some(99),
            );
            assert_eq!(list.limitations, vec![Limitation::RunNotEnded]);
        }
        let mut no_end = run("b", RunStatus::Completed, None);
        no_end.conclusion = Some("success".into());
        let list = assess_runs(read(vec![no_end], Some(Rollup::Success), vec![]), Some(99));
        assert_eq!(list.limitations, vec![Limitation::RunNotEnded]);
    }

    #[test]
    fn suite_with_runs_must_complete_but_suite_without_runs_is_ignored() {
        let incomplete = assess_runs(
            read(
                vec![],
                Some(Rollup::Success),
                vec![suite(RunStatus::InProgress, None, 2)],
            ),
            Some(99),
        );
        assert_eq!(incomplete.limitations, vec![Limitation::SuiteNotCompleted]);
        let ignored = assess_runs(
            read(
                vec![],
                Some(Rollup::Success),
                vec![suite(RunStatus::Waiting, None, 0)],
            ),
            Some(99),
        );
        assert!(ignored.is_complete());
    }

    #[test]
    fn awaiting_approval_suite_makes_the_list_incomplete() {
        let list = assess_runs(
            read(
                vec![],
                Some(Rollup::Success),
                vec![suite(RunStatus::Completed, Some("action_required"), 0)],
            ),
            Some(99),
        );
        assert_eq!(list.limitations, vec![Limitation::AwaitingApproval]);
    }

    #[test]
    fn our_own_apps_suite_and_runs_are_excluded() {
        let own = assess_runs(
            read(
                vec![run("ours", RunStatus::InProgress, None)],
                Some(Rollup::Success),
                vec![suite(RunStatus::InProgress, None, 1)],
            ),
            Some(1),
        );
        assert!(own.is_complete());
        assert!(own.runs.is_empty());
        // Without an App of our own, nothing is left out.
        let none_of_ours = assess_runs(
            read(
                vec![run("theirs", RunStatus::InProgress, None)],
                Some(Rollup::Success),
                vec![],
            ),
            None,
        );
        assert_eq!(none_of_ours.limitations, vec![Limitation::RunNotEnded]);
    }

    #[test]
    fn links_lose_user_information_query_and_fragment() {
        assert_eq!(
            sanitize_link("https://user:pw@ci.example/a/b?x=1#f").as_deref(),
            Some("https://ci.example/a/b")
        );
        assert_eq!(
            sanitize_link("HTTP://ci.example").as_deref(),
            Some("http://ci.example")
        );
        assert_eq!(
            sanitize_link("http://ci.example?q").as_deref(),
            Some("http://ci.example")
        );
        assert_eq!(sanitize_link("javascript://alert(1)"), None);
        assert_eq!(sanitize_link("ci.example/a"), None);
        assert_eq!(sanitize_link("https://user@/x"), None);
    }

    #[test]
    fn caps_limit_runs_and_name_length() {
        let long = "é".repeat(250);
        let runs: Vec<CheckRun> = (0..250)
            .map(|_| run(&long, RunStatus::Completed, Some(1)))
            .collect();
        let stored = cap_runs(&runs);
        assert_eq!(stored.len(), MAX_STORED_RUNS);
        assert_eq!(stored[0].name.chars().count(), MAX_RUN_NAME_CHARS);
        assert_eq!(stored[0].link.as_deref(), Some("https://ci.example/run/1"));
        assert_eq!(stored[0].state, "success");
        assert_eq!(stored[0].group, "ci");
        assert_eq!(stored[0].ended_at, Some(at(1)));
    }

    fn complete_list(ended: i64) -> RunList {
        assess_runs(
            read(
                vec![run("b", RunStatus::Completed, Some(ended))],
                Some(Rollup::Success),
                vec![],
            ),
            Some(99),
        )
    }

    #[test]
    fn stored_runs_change_records_completion_once() {
        let mut stored = None;
        assert_eq!(
            apply_run_read(&mut stored, "h", at(10), &complete_list(5)),
            RunReadOutcome::Replaced {
                checks_completed: true
            }
        );
        // Same runs: the stored read and its time stay.
        assert_eq!(
            apply_run_read(&mut stored, "h", at(20), &complete_list(5)),
            RunReadOutcome::Unchanged
        );
        assert_eq!(stored.as_ref().unwrap().read_at, at(10));
        // An older read of the same commit changes nothing.
        assert_eq!(
            apply_run_read(&mut stored, "h", at(9), &complete_list(7)),
            RunReadOutcome::Stale
        );
        // A re-run ends at another time.
        assert_eq!(
            apply_run_read(&mut stored, "h", at(30), &complete_list(25)),
            RunReadOutcome::Replaced {
                checks_completed: true
            }
        );
        assert_eq!(stored.as_ref().unwrap().changed_at, at(30));
        // Another head is a fresh list even if its read is older.
        assert_eq!(
            apply_run_read(&mut stored, "h2", at(1), &complete_list(25)),
            RunReadOutcome::Replaced {
                checks_completed: true
            }
        );
    }

    #[test]
    fn incomplete_list_never_records_completion() {
        let list = assess_runs(
            read(
                vec![run("b", RunStatus::InProgress, None)],
                Some(Rollup::Pending),
                vec![],
            ),
            Some(99),
        );
        let mut stored = None;
        assert_eq!(
            apply_run_read(&mut stored, "h", at(10), &list),
            RunReadOutcome::Replaced {
                checks_completed: false
            }
        );
        assert!(!stored.unwrap().finished);
    }

    #[test]
    fn rescan_only_unfinished_lists_changed_in_the_last_day() {
        let mut runs = StoredRuns {
            head: "h".into(),
            read_at: at(0),
            changed_at: at(0),
            finished: false,
            runs: vec![],
        };
        assert!(needs_rescan(&runs, at(24 * 3600)));
        assert!(!needs_rescan(&runs, at(24 * 3600 + 1)));
        runs.finished = true;
        assert!(!needs_rescan(&runs, at(1)));
    }
}
