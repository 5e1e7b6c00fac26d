//! The simulated GitHub's checks: check suites (one per App per commit) with their check runs,
//! and commit statuses, per repository and commit; and the status rollup GitHub derives from them.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::model::{Model, RepoId, truncate};

/// A check suite's or check run's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CheckStatus {
    /// `queued`
    #[default]
    Queued,
    /// `in_progress`
    InProgress,
    /// `completed`
    Completed,
}

/// A check suite's or check run's conclusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckConclusion {
    /// `success`
    Success,
    /// `failure`
    Failure,
    /// `neutral`
    Neutral,
    /// `cancelled`
    Cancelled,
    /// `skipped`
    Skipped,
    /// `timed_out`
    TimedOut,
    /// `action_required`: a suite whose workflows wait for a maintainer's approval.
    ActionRequired,
}

/// A commit status's state (also the rollup's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusState {
    /// `pending`
    Pending,
    /// `success`
    Success,
    /// `failure`
    Failure,
    /// `error`
    Error,
}

/// One check run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRun {
    /// `id`
    pub id: u64,
    /// `name`
    pub name: String,
    /// `status`
    pub status: CheckStatus,
    /// `conclusion` once completed.
    pub conclusion: Option<CheckConclusion>,
    /// `started_at`
    pub started_at: OffsetDateTime,
    /// `completed_at`
    pub completed_at: Option<OffsetDateTime>,
    /// `details_url`
    pub details_url: Option<String>,
}

/// One check suite: an App's runs on one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckSuite {
    /// `id`
    pub id: u64,
    /// `head_sha`
    pub head_sha: String,
    /// `head_branch`
    pub head_branch: String,
    /// `app.id`
    pub app_id: u64,
    /// `app.name`
    pub app_name: String,
    /// `status`
    pub status: CheckStatus,
    /// `conclusion` once completed.
    pub conclusion: Option<CheckConclusion>,
    /// Its runs, in the order GitHub lists them.
    pub runs: Vec<CheckRun>,
    /// `created_at`
    pub created_at: OffsetDateTime,
    /// `updated_at`
    pub updated_at: OffsetDateTime,
}

/// One commit status (each report is a new status; the latest per context counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitStatus {
    /// `id`
    pub id: u64,
    /// `sha`
    pub sha: String,
    /// `context`
    pub context: String,
    /// `state`
    pub state: StatusState,
    /// `description`
    pub description: Option<String>,
    /// `target_url`
    pub target_url: Option<String>,
    /// `created_at`
    pub created_at: OffsetDateTime,
}

/// A repository's suites (by id) and statuses (in report order).
#[derive(Clone, Debug, Default)]
pub(crate) struct RepoChecks {
    pub(crate) suites: BTreeMap<u64, CheckSuite>,
    pub(crate) statuses: Vec<CommitStatus>,
}

/// What GitHub lists for one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitChecks {
    /// The commit's suites, by id.
    pub suites: Vec<CheckSuite>,
    /// The latest status of each context, in the order the contexts first reported.
    pub statuses: Vec<CommitStatus>,
}

impl CommitChecks {
    /// The rollup state; `None` when the commit has no suite and no status.
    pub fn rollup(&self) -> Option<StatusState> {
        if self.suites.is_empty() && self.statuses.is_empty() {
            return None;
        }
        let runs = self.suites.iter().flat_map(|s| &s.runs);
        let mut failed = false;
        let mut pending = false;
        let mut errored = false;
        for run in runs {
            match (run.status, run.conclusion) {
                (CheckStatus::Completed, Some(c)) => {
                    failed |= matches!(
                        c,
                        CheckConclusion::Failure
                            | CheckConclusion::Cancelled
                            | CheckConclusion::TimedOut
                            | CheckConclusion::ActionRequired
                    );
                }
                _ => pending = true,
            }
        }
        for status in &self.statuses {
            match status.state {
                StatusState::Pending => pending = true,
                StatusState::Failure => failed = true,
                StatusState::Error => errored = true,
                StatusState::Success => {}
            }
        }
        // GitHub reports a failure while other runs still go.
        Some(if errored {
            StatusState::Error
        } else if failed {
            StatusState::Failure
        } else if pending {
            StatusState::Pending
        } else {
            StatusState::Success
        })
    }
}

impl Model {
    fn repo_checks(&mut self, repo: RepoId) -> Option<&mut RepoChecks> {
        if !self.repos.contains_key(&repo) {
            return None;
        }
        Some(self.checks.entry(repo).or_default())
    }

    fn next_check_id(&mut self) -> u64 {
        let id = self.next_check;
        self.next_check += 1;
        id
    }

    /// Adds a queued check suite of `app_id` for `head_sha`; `None` when the repository does
    /// not exist.
    pub fn add_check_suite(
        &mut self,
        repo: RepoId,
        head_sha: &str,
        app_id: u64,
        app_name: &str,
    ) -> Option<u64> {
        let id = self.next_check_id();
        let now = self.tick();
        let suite = CheckSuite {
            id,
            head_sha: head_sha.to_owned(),
            head_branch: String::new(),
            app_id,
            app_name: app_name.to_owned(),
            status: CheckStatus::Queued,
            conclusion: None,
            runs: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        self.repo_checks(repo)?.suites.insert(id, suite);
        Some(id)
    }

    /// Adds an in-progress check run named `name` to a suite (which goes in progress too);
    /// `None` when there is no such suite.
    pub fn add_check_run(&mut self, repo: RepoId, suite: u64, name: &str) -> Option<u64> {
        let id = self.next_check_id();
        let now = self.tick();
        let suite = self.repo_checks(repo)?.suites.get_mut(&suite)?;
        suite.status = CheckStatus::InProgress;
        suite.conclusion = None;
        suite.updated_at = now;
        suite.runs.push(CheckRun {
            id,
            name: name.to_owned(),
            status: CheckStatus::InProgress,
            conclusion: None,
            started_at: now,
            completed_at: None,
            details_url: Some(format!("https://ci.example/runs/{id}?token=secret")),
        });
        Some(id)
    }

    /// Completes a check run at `at` with `conclusion`.
    pub fn complete_check_run(
        &mut self,
        repo: RepoId,
        run: u64,
        conclusion: CheckConclusion,
        at: OffsetDateTime,
    ) -> bool {
        self.update_check_run(repo, run, |r| {
            r.status = CheckStatus::Completed;
            r.conclusion = Some(conclusion);
            r.completed_at = Some(at);
        })
    }

    /// Changes a check run in place (its id is restored if the closure touches it).
    pub fn update_check_run(
        &mut self,
        repo: RepoId,
        run: u64,
        f: impl FnOnce(&mut CheckRun),
    ) -> bool {
        let Some(checks) = self.checks.get_mut(&repo) else {
            return false;
        };
        let Some(found) = checks
            .suites
            .values_mut()
            .flat_map(|s| s.runs.iter_mut())
            .find(|r| r.id == run)
        else {
            return false;
        };
        f(found);
        found.id = run;
        found.completed_at = found.completed_at.map(truncate);
        true
    }

    /// Completes a suite with `conclusion` (its runs stay as they are).
    pub fn complete_check_suite(
        &mut self,
        repo: RepoId,
        suite: u64,
        conclusion: CheckConclusion,
    ) -> bool {
        let now = self.tick();
        self.update_check_suite(repo, suite, |s| {
            s.status = CheckStatus::Completed;
            s.conclusion = Some(conclusion);
            s.updated_at = now;
        })
    }

    /// Changes a suite in place (its id is restored if the closure touches it).
    pub fn update_check_suite(
        &mut self,
        repo: RepoId,
        suite: u64,
        f: impl FnOnce(&mut CheckSuite),
    ) -> bool {
        let Some(found) = self
            .checks
            .get_mut(&repo)
            .and_then(|c| c.suites.get_mut(&suite))
        else {
            return false;
        };
        f(found);
        found.id = suite;
        true
    }

    /// A suite by id.
    pub fn check_suite(&self, repo: RepoId, suite: u64) -> Option<&CheckSuite> {
        self.checks.get(&repo)?.suites.get(&suite)
    }

    /// Reports a commit status of `sha` at `at`; returns the new status.
    pub fn add_commit_status(
        &mut self,
        repo: RepoId,
        sha: &str,
        context: &str,
        state: StatusState,
        at: OffsetDateTime,
    ) -> Option<CommitStatus> {
        let id = self.next_check_id();
        let status = CommitStatus {
            id,
            sha: sha.to_owned(),
            context: context.to_owned(),
            state,
            description: None,
            target_url: Some(format!("https://ci.example/status/{id}")),
            created_at: truncate(at),
        };
        self.repo_checks(repo)?.statuses.push(status.clone());
        Some(status)
    }

    /// What GitHub lists for a commit: its suites and the latest status of each context.
    pub fn commit_checks(&self, repo: RepoId, sha: &str) -> CommitChecks {
        let Some(checks) = self.checks.get(&repo) else {
            return CommitChecks {
                suites: Vec::new(),
                statuses: Vec::new(),
            };
        };
        let suites = checks
            .suites
            .values()
            .filter(|s| s.head_sha == sha)
            .cloned()
            .collect();
        let mut statuses: Vec<CommitStatus> = Vec::new();
        for status in checks.statuses.iter().filter(|s| s.sha == sha) {
            match statuses.iter_mut().find(|s| s.context == status.context) {
                Some(latest) => *latest = status.clone(),
                None => statuses.push(status.clone()),
            }
        }
        CommitChecks { suites, statuses }
    }
}
