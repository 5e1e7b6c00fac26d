//! The simulated GitHub's state: installations, repositories, issues and pull requests.
//!
//! Listings are keyed by `(createdAt, databaseId)` so a page is a range query and a cursor is a
//! position, not an offset: an item deleted or created between pages shifts nothing, as on GitHub.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use time::OffsetDateTime;
use time::macros::datetime;

/// An installation's id (`installation.id` on GitHub).
pub type InstallationId = u64;
/// A repository's `databaseId` (REST `id`).
pub type RepoId = u64;

/// Where a simulated item sits in its listing: `(createdAt as unix seconds, databaseId)`.
pub(crate) type ItemKey = (i64, u64);

/// `IssueState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IssueState {
    /// `OPEN`
    #[default]
    Open,
    /// `CLOSED`
    Closed,
}

/// `IssueStateReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueStateReason {
    /// `COMPLETED`
    Completed,
    /// `NOT_PLANNED`
    NotPlanned,
    /// `REOPENED`
    Reopened,
    /// `DUPLICATE` (only reported when the query asks for it)
    Duplicate,
}

/// `PullRequestState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PullRequestState {
    /// `OPEN`
    #[default]
    Open,
    /// `CLOSED`
    Closed,
    /// `MERGED`
    Merged,
}

/// `LockReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockReason {
    /// `OFF_TOPIC`
    OffTopic,
    /// `TOO_HEATED`
    TooHeated,
    /// `RESOLVED`
    Resolved,
    /// `SPAM`
    Spam,
}

/// The kind of account that owns a repository or an installation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OwnerKind {
    /// An organization (the default for new owners).
    #[default]
    Organization,
    /// A personal account.
    User,
}

/// An issue. `database_id`, `node_id` and `number` are assigned by [`Model::add_issue`].
#[derive(Clone, Debug, PartialEq)]
pub struct Issue {
    /// `databaseId`
    pub database_id: u64,
    /// `id`
    pub node_id: String,
    /// `number`, shared with pull requests within a repository.
    pub number: u64,
    /// `title`
    pub title: String,
    /// `body`
    pub body: String,
    /// `state`
    pub state: IssueState,
    /// `stateReason`
    pub state_reason: Option<IssueStateReason>,
    /// `createdAt` (whole seconds)
    pub created_at: OffsetDateTime,
    /// `updatedAt`
    pub updated_at: OffsetDateTime,
    /// `closedAt`
    pub closed_at: Option<OffsetDateTime>,
    /// `locked`
    pub locked: bool,
    /// `activeLockReason`
    pub active_lock_reason: Option<LockReason>,
    /// `author.login`; `None` is a deleted account ("ghost").
    pub author: Option<String>,
    /// `comments.totalCount`
    pub comments: u32,
}

/// A pull request. `database_id`, `node_id` and `number` are assigned by [`Model::add_pull_request`].
#[derive(Clone, Debug, PartialEq)]
pub struct PullRequest {
    /// `databaseId`
    pub database_id: u64,
    /// `id`
    pub node_id: String,
    /// `number`, shared with issues within a repository.
    pub number: u64,
    /// `title`
    pub title: String,
    /// `body`
    pub body: String,
    /// `state`
    pub state: PullRequestState,
    /// `isDraft`
    pub is_draft: bool,
    /// `createdAt`
    pub created_at: OffsetDateTime,
    /// `updatedAt`
    pub updated_at: OffsetDateTime,
    /// `closedAt`
    pub closed_at: Option<OffsetDateTime>,
    /// `mergedAt`
    pub merged_at: Option<OffsetDateTime>,
    /// `locked`
    pub locked: bool,
    /// `activeLockReason`
    pub active_lock_reason: Option<LockReason>,
    /// `headRefName`
    pub head_ref_name: String,
    /// `headRefOid`, 40 lowercase hex digits.
    pub head_ref_oid: String,
    /// `baseRefName`
    pub base_ref_name: String,
    /// `author.login`; `None` is a deleted account.
    pub author: Option<String>,
    /// `comments.totalCount`
    pub comments: u32,
    /// `reviews.totalCount`
    pub reviews: u32,
}

/// What a test gives to create an issue; the model assigns ids, number and missing times.
#[derive(Clone, Debug, Default)]
pub struct NewIssue {
    /// `title`
    pub title: String,
    /// `body`
    pub body: String,
    /// `state`
    pub state: IssueState,
    /// `stateReason`
    pub state_reason: Option<IssueStateReason>,
    /// `createdAt`; the model's clock when `None`.
    pub created_at: Option<OffsetDateTime>,
    /// `updatedAt`; `createdAt` when `None`.
    pub updated_at: Option<OffsetDateTime>,
    /// `closedAt`
    pub closed_at: Option<OffsetDateTime>,
    /// `activeLockReason`; `locked` follows it.
    pub lock_reason: Option<LockReason>,
    /// `author.login`
    pub author: Option<String>,
    /// `comments.totalCount`
    pub comments: u32,
}

/// What a test gives to create a pull request.
#[derive(Clone, Debug, Default)]
pub struct NewPullRequest {
    /// `title`
    pub title: String,
    /// `body`
    pub body: String,
    /// `state`
    pub state: PullRequestState,
    /// `isDraft`
    pub is_draft: bool,
    /// `createdAt`; the model's clock when `None`.
    pub created_at: Option<OffsetDateTime>,
    /// `updatedAt`; `createdAt` when `None`.
    pub updated_at: Option<OffsetDateTime>,
    /// `closedAt`
    pub closed_at: Option<OffsetDateTime>,
    /// `mergedAt`
    pub merged_at: Option<OffsetDateTime>,
    /// `activeLockReason`; `locked` follows it.
    pub lock_reason: Option<LockReason>,
    /// `headRefName`; `feature-<number>` when empty.
    pub head_ref_name: String,
    /// `headRefOid`; derived from the database id when empty.
    pub head_ref_oid: String,
    /// `baseRefName`; `main` when empty.
    pub base_ref_name: String,
    /// `author.login`
    pub author: Option<String>,
    /// `comments.totalCount`
    pub comments: u32,
    /// `reviews.totalCount`
    pub reviews: u32,
}

/// Items of one kind in a repository, in listing order, with a number index.
#[derive(Clone, Debug)]
pub(crate) struct Items<T> {
    pub(crate) by_key: BTreeMap<ItemKey, T>,
    pub(crate) by_number: HashMap<u64, ItemKey>,
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Self {
            by_key: BTreeMap::new(),
            by_number: HashMap::new(),
        }
    }
}

impl<T> Items<T> {
    fn insert(&mut self, key: ItemKey, number: u64, item: T) {
        self.by_number.insert(number, key);
        self.by_key.insert(key, item);
    }
    fn get(&self, number: u64) -> Option<&T> {
        self.by_key.get(self.by_number.get(&number)?)
    }
    fn remove(&mut self, number: u64) -> Option<T> {
        let key = self.by_number.remove(&number)?;
        self.by_key.remove(&key)
    }
}

/// A repository and its items.
#[derive(Clone, Debug)]
pub struct Repository {
    /// `databaseId` / REST `id`
    pub database_id: RepoId,
    /// `id` / REST `node_id`; kept across renames and transfers, as on GitHub.
    pub node_id: String,
    /// `owner.login`
    pub owner: String,
    /// `name`
    pub name: String,
    /// `isArchived`
    pub is_archived: bool,
    /// The installation that can see it (`None`: reachable with a personal access token only).
    pub installation: Option<InstallationId>,
    /// Private: only its installation, its owner's tokens and all-seeing tokens see it; anyone
    /// else is answered as if it did not exist.
    pub private: bool,
    /// `createdAt`
    pub created_at: OffsetDateTime,
    pub(crate) issues: Items<Issue>,
    pub(crate) pulls: Items<PullRequest>,
    next_number: u64,
}

impl Repository {
    /// `nameWithOwner`
    pub fn name_with_owner(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
    /// The repository's issues in listing order (`CREATED_AT ASC`).
    pub fn issues(&self) -> impl Iterator<Item = &Issue> {
        self.issues.by_key.values()
    }
    /// The repository's pull requests in listing order.
    pub fn pull_requests(&self) -> impl Iterator<Item = &PullRequest> {
        self.pulls.by_key.values()
    }
    /// One issue by number.
    pub fn issue(&self, number: u64) -> Option<&Issue> {
        self.issues.get(number)
    }
    /// One pull request by number.
    pub fn pull_request(&self, number: u64) -> Option<&PullRequest> {
        self.pulls.get(number)
    }
}

/// A GitHub App installation on one account.
#[derive(Clone, Debug)]
pub struct Installation {
    /// `installation.id`
    pub id: InstallationId,
    /// The account's login.
    pub account: String,
}

/// Which rate-limit budget: GraphQL points or REST calls (separate on GitHub).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateLimitResource {
    /// GraphQL, counted in cost points.
    Graphql,
    /// REST (`core`), counted in calls.
    Rest,
}

/// One rate-limit budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitBudget {
    /// `limit`
    pub limit: u32,
    /// `remaining`
    pub remaining: u32,
    /// `resetAt` (the budget does not refill by itself: tests set it)
    pub reset_at: OffsetDateTime,
}

/// A token the simulator accepts, and what it grants.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) installation: Option<InstallationId>,
    /// A personal token's user; `None` for an installation token or an all-seeing one.
    pub(crate) user: Option<String>,
    pub(crate) expires_at: Option<OffsetDateTime>,
}

/// Who is calling, as far as repository visibility goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// An installation token.
    Installation(InstallationId),
    /// A personal token of this user.
    User(String),
    /// A personal token that sees every repository.
    Everything,
}

impl Viewer {
    pub(crate) fn of(token: &Token) -> Viewer {
        match (&token.installation, &token.user) {
            (Some(installation), _) => Viewer::Installation(*installation),
            (None, Some(user)) => Viewer::User(user.clone()),
            (None, None) => Viewer::Everything,
        }
    }

    /// Whether this caller sees `repo`: a public one always; a private one only through its
    /// installation or its owner's personal token.
    pub(crate) fn sees(&self, repo: &Repository) -> bool {
        !repo.private
            || match self {
                Viewer::Installation(i) => repo.installation == Some(*i),
                Viewer::User(login) => repo.owner.eq_ignore_ascii_case(login),
                Viewer::Everything => true,
            }
    }
}

/// Everything the simulated GitHub knows. Mutate it before [`super::GithubSim::start`] or
/// through [`super::GithubSim::model`] while it runs.
#[derive(Clone, Debug)]
pub struct Model {
    pub(crate) installations: BTreeMap<InstallationId, Installation>,
    pub(crate) repos: BTreeMap<RepoId, Repository>,
    /// Check suites, check runs and commit statuses per repository.
    pub(crate) checks: BTreeMap<RepoId, super::checks::RepoChecks>,
    /// `owner/name` lowercased → repository, current names only.
    names: HashMap<String, RepoId>,
    /// Former `owner/name`s (lowercased) that GitHub still redirects (`followRenames`).
    redirects: HashMap<String, RepoId>,
    owners: HashMap<String, OwnerKind>,
    pub(crate) tokens: HashMap<String, Token>,
    pub(crate) budgets: HashMap<RateLimitResource, RateLimitBudget>,
    /// When set, App JWTs must carry this `iss`.
    pub(crate) app_id: Option<String>,
    pub(crate) token_lifetime: Duration,
    next_installation: u64,
    next_repo: u64,
    next_item: u64,
    next_token: u64,
    pub(crate) next_check: u64,
    /// Comments, reviews, threads and review requests, by their item's native id.
    pub(crate) conversations: HashMap<u64, super::conversation::Conversation>,
    pub(crate) next_nested: u64,
    clock: OffsetDateTime,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

/// The first timestamp the model's clock hands out.
pub const EPOCH: OffsetDateTime = datetime!(2024-01-01 00:00:00 UTC);

impl Model {
    /// An empty model; budgets 5,000 GraphQL points and 5,000 REST calls resetting in an hour.
    pub fn new() -> Self {
        let reset_at = now_seconds() + time::Duration::HOUR;
        let budget = RateLimitBudget {
            limit: 5000,
            remaining: 5000,
            reset_at,
        };
        Self {
            installations: BTreeMap::new(),
            repos: BTreeMap::new(),
            checks: BTreeMap::new(),
            names: HashMap::new(),
            redirects: HashMap::new(),
            owners: HashMap::new(),
            tokens: HashMap::new(),
            budgets: HashMap::from([
                (RateLimitResource::Graphql, budget),
                (RateLimitResource::Rest, budget),
            ]),
            app_id: None,
            token_lifetime: Duration::from_secs(3600),
            next_installation: 1,
            next_repo: 1_000,
            next_item: 1_000_000,
            next_token: 1,
            next_check: 5_000_000,
            conversations: HashMap::new(),
            next_nested: 50_000_000,
            clock: EPOCH,
        }
    }

    /// The time the next item created without an explicit time gets; each use advances it 1 s,
    /// so later creations sort later, deterministically.
    pub fn tick(&mut self) -> OffsetDateTime {
        let now = self.clock;
        self.clock += time::Duration::SECOND;
        now
    }

    /// Sets the model's clock (see [`Model::tick`]).
    pub fn set_clock(&mut self, at: OffsetDateTime) {
        self.clock = truncate(at);
    }

    /// Declares whether an account is a user or an organization (organizations by default).
    pub fn set_owner_kind(&mut self, login: &str, kind: OwnerKind) {
        self.owners.insert(login.to_ascii_lowercase(), kind);
    }

    pub(crate) fn owner_kind(&self, login: &str) -> OwnerKind {
        self.owners
            .get(&login.to_ascii_lowercase())
            .copied()
            .unwrap_or_default()
    }

    /// Requires App JWTs to carry this app id as `iss` (any `iss` is accepted otherwise).
    pub fn set_app_id(&mut self, app_id: impl Into<String>) {
        self.app_id = Some(app_id.into());
    }

    /// How long installation tokens issued from now on stay valid (an hour by default).
    pub fn set_token_lifetime(&mut self, lifetime: Duration) {
        self.token_lifetime = lifetime;
    }

    /// Accepts `token` as a personal access token that sees every repository.
    pub fn add_personal_access_token(&mut self, token: impl Into<String>) {
        self.tokens.insert(
            token.into(),
            Token {
                installation: None,
                user: None,
                expires_at: None,
            },
        );
    }

    /// Accepts `token` as `login`'s personal access token: it sees public repositories and the
    /// private ones `login` owns; other private repositories answer NOT_FOUND / 404 to it.
    pub fn add_user_token(&mut self, token: impl Into<String>, login: &str) {
        self.tokens.insert(
            token.into(),
            Token {
                installation: None,
                user: Some(login.to_owned()),
                expires_at: None,
            },
        );
    }

    /// Makes a repository private or public; `false` when there is no such repository.
    pub fn set_repository_private(&mut self, id: RepoId, private: bool) -> bool {
        self.repos
            .get_mut(&id)
            .map(|r| r.private = private)
            .is_some()
    }

    /// Forgets every issued or added token: later calls with them answer 401.
    pub fn revoke_tokens(&mut self) {
        self.tokens.clear();
    }

    pub(crate) fn issue_installation_token(
        &mut self,
        installation: InstallationId,
    ) -> (String, OffsetDateTime) {
        let token = format!("ghs_sim{:032}", self.next_token);
        self.next_token += 1;
        let lifetime =
            time::Duration::try_from(self.token_lifetime).unwrap_or(time::Duration::HOUR);
        let expires_at = now_seconds() + lifetime;
        self.tokens.insert(
            token.clone(),
            Token {
                installation: Some(installation),
                user: None,
                expires_at: Some(expires_at),
            },
        );
        (token, expires_at)
    }

    /// Replaces a rate-limit budget.
    pub fn set_rate_limit(&mut self, resource: RateLimitResource, budget: RateLimitBudget) {
        self.budgets.insert(resource, budget);
    }

    /// The current budget.
    pub fn rate_limit(&self, resource: RateLimitResource) -> RateLimitBudget {
        self.budgets[&resource]
    }

    /// Adds an installation on `account`.
    pub fn add_installation(&mut self, account: &str) -> InstallationId {
        let id = self.next_installation;
        self.next_installation += 1;
        self.installations.insert(
            id,
            Installation {
                id,
                account: account.to_owned(),
            },
        );
        id
    }

    /// Removes an installation (the account uninstalled the App); whether it was there.
    pub fn remove_installation(&mut self, id: InstallationId) -> bool {
        self.installations.remove(&id).is_some()
    }

    /// The installations, by id.
    pub fn installations(&self) -> impl Iterator<Item = &Installation> {
        self.installations.values()
    }

    /// Adds a repository `owner/name`, visible to `installation` when given.
    pub fn add_repository(
        &mut self,
        installation: Option<InstallationId>,
        owner: &str,
        name: &str,
    ) -> RepoId {
        let id = self.next_repo;
        self.next_repo += 1;
        let created_at = self.tick();
        let repo = Repository {
            database_id: id,
            node_id: encode_node_id("R", id),
            owner: owner.to_owned(),
            name: name.to_owned(),
            is_archived: false,
            installation,
            private: false,
            created_at,
            issues: Items::default(),
            pulls: Items::default(),
            next_number: 1,
        };
        self.names.insert(name_key(owner, name), id);
        self.repos.insert(id, repo);
        id
    }

    /// A repository by database id.
    pub fn repository(&self, id: RepoId) -> Option<&Repository> {
        self.repos.get(&id)
    }

    /// All repositories, by database id.
    pub fn repositories(&self) -> impl Iterator<Item = &Repository> {
        self.repos.values()
    }

    /// Resolves `owner/name` like GitHub: current names first, then former names when
    /// `follow_renames`.
    pub fn find_repository(&self, owner: &str, name: &str, follow_renames: bool) -> Option<RepoId> {
        let key = name_key(owner, name);
        self.names.get(&key).copied().or_else(|| {
            follow_renames
                .then(|| self.redirects.get(&key).copied())
                .flatten()
                .filter(|id| self.repos.contains_key(id))
        })
    }

    /// Archives or unarchives a repository.
    pub fn set_archived(&mut self, id: RepoId, archived: bool) -> bool {
        self.repos
            .get_mut(&id)
            .map(|r| r.is_archived = archived)
            .is_some()
    }

    /// Renames a repository; the former name keeps redirecting to it.
    pub fn rename_repository(&mut self, id: RepoId, new_name: &str) -> bool {
        let Some(repo) = self.repos.get_mut(&id) else {
            return false;
        };
        let old = name_key(&repo.owner, &repo.name);
        repo.name = new_name.to_owned();
        let new = name_key(&repo.owner, &repo.name);
        self.names.remove(&old);
        self.redirects.remove(&new);
        self.redirects.insert(old, id);
        self.names.insert(new, id);
        true
    }

    /// Moves a repository to `new_owner` (and to `installation`, `None` leaving every
    /// installation); the former `owner/name` keeps redirecting to it.
    pub fn transfer_repository(
        &mut self,
        id: RepoId,
        new_owner: &str,
        installation: Option<InstallationId>,
    ) -> bool {
        let Some(repo) = self.repos.get_mut(&id) else {
            return false;
        };
        let old = name_key(&repo.owner, &repo.name);
        repo.owner = new_owner.to_owned();
        repo.installation = installation;
        let new = name_key(&repo.owner, &repo.name);
        self.names.remove(&old);
        self.redirects.remove(&new);
        self.redirects.insert(old, id);
        self.names.insert(new, id);
        true
    }

    /// Renames the account `old` to `new`: its installations and repositories follow, and each
    /// former `owner/name` keeps redirecting.
    pub fn rename_account(&mut self, old: &str, new: &str) {
        let kind = self.owner_kind(old);
        self.set_owner_kind(new, kind);
        for installation in self.installations.values_mut() {
            if installation.account.eq_ignore_ascii_case(old) {
                installation.account = new.to_owned();
            }
        }
        let owned: Vec<(RepoId, Option<InstallationId>)> = self
            .repos
            .values()
            .filter(|r| r.owner.eq_ignore_ascii_case(old))
            .map(|r| (r.database_id, r.installation))
            .collect();
        for (id, installation) in owned {
            self.transfer_repository(id, new, installation);
        }
    }

    /// Grants or withdraws an installation's access to a repository (the installation's
    /// repository selection changed); `None` leaves every installation.
    pub fn set_repository_installation(
        &mut self,
        id: RepoId,
        installation: Option<InstallationId>,
    ) -> bool {
        self.repos
            .get_mut(&id)
            .map(|r| r.installation = installation)
            .is_some()
    }

    /// Deletes a repository and everything in it; its names stop resolving.
    pub fn delete_repository(&mut self, id: RepoId) -> Option<Repository> {
        let repo = self.repos.remove(&id)?;
        self.checks.remove(&id);
        self.names.remove(&name_key(&repo.owner, &repo.name));
        self.redirects.retain(|_, r| *r != id);
        Some(repo)
    }

    fn next_item_ids(&mut self, repo: RepoId, prefix: &str) -> Option<(u64, String, u64)> {
        let r = self.repos.get_mut(&repo)?;
        let number = r.next_number;
        r.next_number += 1;
        let id = self.next_item;
        self.next_item += 1;
        Some((id, encode_node_id(prefix, id), number))
    }

    /// Adds an issue; `None` when the repository does not exist.
    pub fn add_issue(&mut self, repo: RepoId, new: NewIssue) -> Option<Issue> {
        let (database_id, node_id, number) = self.next_item_ids(repo, "I")?;
        let created_at = new.created_at.map(truncate).unwrap_or_else(|| self.tick());
        let issue = Issue {
            database_id,
            node_id,
            number,
            title: new.title,
            body: new.body,
            state: new.state,
            state_reason: new.state_reason,
            created_at,
            updated_at: new.updated_at.map(truncate).unwrap_or(created_at),
            closed_at: new.closed_at.map(truncate),
            locked: new.lock_reason.is_some(),
            active_lock_reason: new.lock_reason,
            author: new.author,
            comments: new.comments,
        };
        let key = (created_at.unix_timestamp(), database_id);
        let r = self.repos.get_mut(&repo)?;
        r.issues.insert(key, number, issue.clone());
        Some(issue)
    }

    /// Adds a pull request; `None` when the repository does not exist.
    pub fn add_pull_request(&mut self, repo: RepoId, new: NewPullRequest) -> Option<PullRequest> {
        let (database_id, node_id, number) = self.next_item_ids(repo, "PR")?;
        let created_at = new.created_at.map(truncate).unwrap_or_else(|| self.tick());
        let or = |s: String, d: String| if s.is_empty() { d } else { s };
        let pr = PullRequest {
            database_id,
            node_id,
            number,
            title: new.title,
            body: new.body,
            state: new.state,
            is_draft: new.is_draft,
            created_at,
            updated_at: new.updated_at.map(truncate).unwrap_or(created_at),
            closed_at: new.closed_at.map(truncate),
            merged_at: new.merged_at.map(truncate),
            locked: new.lock_reason.is_some(),
            active_lock_reason: new.lock_reason,
            head_ref_name: or(new.head_ref_name, format!("feature-{number}")),
            head_ref_oid: or(new.head_ref_oid, object_id(database_id)),
            base_ref_name: or(new.base_ref_name, "main".to_owned()),
            author: new.author,
            comments: new.comments,
            reviews: new.reviews,
        };
        let key = (created_at.unix_timestamp(), database_id);
        let r = self.repos.get_mut(&repo)?;
        r.pulls.insert(key, number, pr.clone());
        Some(pr)
    }

    /// Changes an issue in place (ids and number are restored if the closure touches them).
    pub fn update_issue(&mut self, repo: RepoId, number: u64, f: impl FnOnce(&mut Issue)) -> bool {
        let Some(items) = self.repos.get_mut(&repo).map(|r| &mut r.issues) else {
            return false;
        };
        let Some(mut issue) = items.remove(number) else {
            return false;
        };
        let (database_id, node_id) = (issue.database_id, issue.node_id.clone());
        f(&mut issue);
        issue.database_id = database_id;
        issue.node_id = node_id;
        issue.number = number;
        issue.created_at = truncate(issue.created_at);
        issue.updated_at = truncate(issue.updated_at);
        let key = (issue.created_at.unix_timestamp(), database_id);
        items.insert(key, number, issue);
        true
    }

    /// Changes a pull request in place (ids and number are restored if the closure touches them).
    pub fn update_pull_request(
        &mut self,
        repo: RepoId,
        number: u64,
        f: impl FnOnce(&mut PullRequest),
    ) -> bool {
        let Some(items) = self.repos.get_mut(&repo).map(|r| &mut r.pulls) else {
            return false;
        };
        let Some(mut pr) = items.remove(number) else {
            return false;
        };
        let (database_id, node_id) = (pr.database_id, pr.node_id.clone());
        f(&mut pr);
        pr.database_id = database_id;
        pr.node_id = node_id;
        pr.number = number;
        pr.created_at = truncate(pr.created_at);
        pr.updated_at = truncate(pr.updated_at);
        let key = (pr.created_at.unix_timestamp(), database_id);
        items.insert(key, number, pr);
        true
    }

    /// Deletes an issue.
    pub fn delete_issue(&mut self, repo: RepoId, number: u64) -> Option<Issue> {
        self.repos.get_mut(&repo)?.issues.remove(number)
    }

    /// Puts an issue back as it was, ids and number included (an issue transferred away and back,
    /// or hidden and shown again): what a reconcile sees as a reappearance. `false` when the
    /// repository does not exist or the number is taken.
    pub fn restore_issue(&mut self, repo: RepoId, issue: Issue) -> bool {
        let Some(items) = self.repos.get_mut(&repo).map(|r| &mut r.issues) else {
            return false;
        };
        if items.get(issue.number).is_some() {
            return false;
        }
        let key = (issue.created_at.unix_timestamp(), issue.database_id);
        items.insert(key, issue.number, issue);
        true
    }

    /// Deletes a pull request (GitHub cannot, but a vanished item is what reconcile must handle).
    pub fn delete_pull_request(&mut self, repo: RepoId, number: u64) -> Option<PullRequest> {
        self.repos.get_mut(&repo)?.pulls.remove(number)
    }
}

fn name_key(owner: &str, name: &str) -> String {
    format!(
        "{}/{}",
        owner.to_ascii_lowercase(),
        name.to_ascii_lowercase()
    )
}

/// Drops sub-second precision: GitHub's `DateTime` has whole seconds.
pub(crate) fn truncate(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(0).unwrap_or(t)
}

pub(crate) fn now_seconds() -> OffsetDateTime {
    truncate(OffsetDateTime::now_utc())
}

/// An opaque global id shaped like GitHub's new ones (`R_kgDO...`), decodable by the simulator.
pub(crate) fn encode_node_id(prefix: &str, id: u64) -> String {
    format!("{prefix}_kgDO{}", URL_SAFE_NO_PAD.encode(id.to_be_bytes()))
}

/// The `(prefix, database id)` inside an id from [`encode_node_id`].
pub(crate) fn decode_node_id(id: &str) -> Option<(&str, u64)> {
    let (prefix, rest) = id.split_once("_kgDO")?;
    let bytes = URL_SAFE_NO_PAD.decode(rest).ok()?;
    Some((prefix, u64::from_be_bytes(bytes.try_into().ok()?)))
}

/// A deterministic 40-hex `GitObjectID`.
pub(crate) fn object_id(seed: u64) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(seed.to_be_bytes());
    hex::encode(&digest[..20])
}

/// RFC 3339 with whole seconds and `Z`, as GitHub prints `DateTime`.
pub(crate) fn format_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
