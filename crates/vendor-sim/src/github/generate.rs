//! Deterministic models from a seed: "an installation with 5 repositories and 10,000 items".

use time::Duration;

use super::model::{
    EPOCH, IssueState, IssueStateReason, LockReason, Model, NewIssue, NewPullRequest,
    PullRequestState, RepoId,
};

/// What to generate. The same spec always gives the same model.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Seeds every random choice.
    pub seed: u64,
    /// The installation's account (owner of every repository).
    pub owner: String,
    /// Repositories, named `repo-0`, `repo-1`, ...
    pub repositories: usize,
    /// Issues and pull requests in total, spread evenly over the repositories.
    pub items: usize,
    /// Share of items that are pull requests, in percent.
    pub pull_request_percent: u8,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            seed: 1,
            owner: "acme".to_owned(),
            repositories: 5,
            items: 10_000,
            pull_request_percent: 30,
        }
    }
}

/// The generated model with the ids tests need.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The model, ready for [`super::GithubSim::start`].
    pub model: Model,
    /// The installation every repository belongs to.
    pub installation: u64,
    /// Repository ids in name order.
    pub repositories: Vec<RepoId>,
}

/// splitmix64: small, fast and stable across platforms and crate versions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const AUTHORS: &[&str] = &["octocat", "hubot", "monalisa", "mojombo", "defunkt"];

/// Builds the model `scenario` describes.
pub fn generate(scenario: &Scenario) -> Generated {
    let mut rng = Rng(scenario.seed);
    let mut model = Model::new();
    let installation = model.add_installation(&scenario.owner);
    let repositories: Vec<RepoId> = (0..scenario.repositories)
        .map(|i| model.add_repository(Some(installation), &scenario.owner, &format!("repo-{i}")))
        .collect();
    let mut at = EPOCH + Duration::days(1);
    for n in 0..scenario.items {
        let Some(&repo) = repositories.get(n % repositories.len().max(1)) else {
            break;
        };
        // Items are spaced a few seconds apart; some share a second to exercise tie-breaks.
        at += Duration::seconds(i64::try_from(rng.below(4)).unwrap_or(0));
        let updated = at + Duration::minutes(i64::try_from(rng.below(10_000)).unwrap_or(0));
        let author = (!rng.chance(2)).then(|| {
            AUTHORS[usize::try_from(rng.below(AUTHORS.len() as u64)).unwrap_or(0)].to_owned()
        });
        let lock_reason = rng.chance(3).then(|| {
            [
                LockReason::OffTopic,
                LockReason::TooHeated,
                LockReason::Resolved,
                LockReason::Spam,
            ][usize::try_from(rng.below(4)).unwrap_or(0)]
        });
        let closed = rng.chance(40);
        let comments = u32::try_from(rng.below(20)).unwrap_or(0);
        if rng.chance(u64::from(scenario.pull_request_percent)) {
            let merged = closed && rng.chance(70);
            // Drawn in the order the fields always were, so a seed still gives the same model.
            let is_draft = !closed && rng.chance(15);
            let reviews = u32::try_from(rng.below(5)).unwrap_or(0);
            let pr = model.add_pull_request(
                repo,
                NewPullRequest {
                    title: format!("Change {n}"),
                    body: format!("Pull request body {n}"),
                    state: if merged {
                        PullRequestState::Merged
                    } else if closed {
                        PullRequestState::Closed
                    } else {
                        PullRequestState::Open
                    },
                    is_draft,
                    created_at: Some(at),
                    updated_at: Some(updated),
                    closed_at: closed.then_some(updated),
                    merged_at: merged.then_some(updated),
                    lock_reason,
                    author,
                    comments,
                    reviews,
                    ..NewPullRequest::default()
                },
            );
            // The comments and reviews the counts announce, listed with the item.
            if let Some(pr) = pr {
                model.seed_conversation(pr.database_id, comments, reviews, updated);
            }
        } else {
            let issue = model.add_issue(
                repo,
                NewIssue {
                    title: format!("Issue {n}"),
                    body: format!("Issue body {n}"),
                    state: if closed {
                        IssueState::Closed
                    } else {
                        IssueState::Open
                    },
                    state_reason: closed.then(|| {
                        if rng.chance(80) {
                            IssueStateReason::Completed
                        } else {
                            IssueStateReason::NotPlanned
                        }
                    }),
                    created_at: Some(at),
                    updated_at: Some(updated),
                    closed_at: closed.then_some(updated),
                    lock_reason,
                    author,
                    comments,
                },
            );
            if let Some(issue) = issue {
                model.seed_conversation(issue.database_id, comments, 0, updated);
            }
        }
    }
    // Later items made through the model's clock sort after every generated one.
    model.set_clock(at + Duration::days(1));
    Generated {
        model,
        installation,
        repositories,
    }
}
