//! The client: one page per call, budgets checked before and recorded after, retries by policy.
//!
//! Pagination belongs to the caller (github-sync decides when a listing is complete), so every
//! listing call returns one page with everything needed to judge it: `totalCount`, `pageInfo`,
//! the repository header, the GraphQL errors with their paths, and the rate limit.
//!
//! reqwest is built without a rustls crypto provider: binaries install one at start
//! (`runtime::install_crypto_provider()`), tests install ring's themselves.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cynic::{Operation, QueryBuilder};
use reqwest::header::{ACCEPT, HeaderMap, LINK, LOCATION};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use vendor_http::egress::Egress;

use crate::auth::{AppCredentials, InstallationToken, Secret, TokenCache};
use crate::budget::{Budget, BudgetStop, Ledger, RateLimit, Resource};
use crate::error::{Error, GraphqlError, PathSegment, RateLimitKind};
use crate::queries::{
    CommitCheckRunsVariables, CommitChecks, CommitObject, GetCommitCheckRuns, GitObjectId,
    IssueNode, PageInfo, PullRequestNode, RateLimitFields, RepositoryById, RepositoryByIdVariables,
    RepositoryByName, RepositoryByNameVariables, RepositoryHeader, RepositoryIssue,
    RepositoryIssues, RepositoryItemVariables, RepositoryNode, RepositoryPageVariables,
    RepositoryPullRequest, RepositoryPullRequests, RepositoryRef, SelectsRateLimit,
};
use crate::rest::{
    AccessTokenBody, AppInstallation, HookDeliveriesPage, HookDelivery, InstallationDeleted,
    InstallationRepositoriesBody, InstallationRepositoriesPage, MessageBody, RestRepository,
    next_cursor, next_page,
};
use crate::retry::RetryPolicy;

/// GitHub's public API.
pub const GITHUB_API: &str = "https://api.github.com";
/// The REST API version we speak.
const API_VERSION: &str = "2022-11-28";
/// The largest page GitHub serves.
pub const MAX_PAGE_SIZE: u32 = 100;
/// The largest answer the client reads by default (a full GraphQL page is well under it).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Where and how to talk to GitHub.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// REST base: [`GITHUB_API`], a GHES `https://host/api/v3`, or the simulator's URL.
    pub base_url: String,
    /// GraphQL endpoint: `https://api.github.com/graphql`, a GHES `https://host/api/graphql`.
    pub graphql_url: String,
    /// GitHub refuses requests without a User-Agent.
    pub user_agent: String,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries of 5xx, secondary limits and transport failures.
    pub retry: RetryPolicy,
    /// The largest answer read; a larger one fails with [`Error::TooLarge`].
    pub max_response_bytes: usize,
    /// Where calls may connect: public addresses only unless the operator allows more; a call
    /// elsewhere fails with [`Error::Unreachable`].
    pub egress: Egress,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self::new(GITHUB_API)
    }
}

impl ClientConfig {
    /// Defaults for an API laid out as api.github.com's at `base_url`: REST at the base,
    /// GraphQL at `<base_url>/graphql`.
    pub fn new(base_url: impl Into<String>) -> Self {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Self {
            graphql_url: format!("{base_url}/graphql"),
            base_url,
            user_agent: "forgesync".to_owned(),
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            egress: Egress::default(),
        }
    }

    /// The same configuration connecting where `egress` permits.
    pub fn with_egress(self, egress: Egress) -> Self {
        Self { egress, ..self }
    }

    /// Defaults for the GitHub server a connection names: none, `github.com` or
    /// `api.github.com` is GitHub's public API; any other server is a GitHub Enterprise Server,
    /// whose REST API is at `<server_url>/api/v3` and GraphQL at `<server_url>/api/graphql`.
    pub fn for_server(server_url: Option<&str>) -> Self {
        let Some(server) = server_url
            .map(|u| u.trim().trim_end_matches('/'))
            .filter(|u| !u.is_empty())
        else {
            return Self::new(GITHUB_API);
        };
        let host = reqwest::Url::parse(server)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
        if matches!(
            host.as_deref(),
            Some("github.com" | "www.github.com" | "api.github.com")
        ) {
            return Self::new(GITHUB_API);
        }
        // GHES layout; a server URL given as its API base is taken as the server it belongs to.
        let server = server
            .strip_suffix("/api/v3")
            .or_else(|| server.strip_suffix("/api"))
            .unwrap_or(server);
        Self {
            graphql_url: format!("{server}/api/graphql"),
            ..Self::new(format!("{server}/api/v3"))
        }
    }

    fn http(&self) -> Result<reqwest::Client, Error> {
        let builder = reqwest::Client::builder()
            .user_agent(&self.user_agent)
            .timeout(self.timeout)
            // A redirect would carry our credentials to wherever it points: never followed.
            .redirect(reqwest::redirect::Policy::none());
        self.egress.apply(builder).build().map_err(Error::Transport)
    }
}

/// A GitHub App: mints and caches installation tokens. Its own calls (JWT) draw on the App's
/// REST pool, kept in its own ledger under its own floor.
#[derive(Debug)]
pub struct GithubApp {
    http: reqwest::Client,
    egress: Egress,
    base_url: String,
    retry: RetryPolicy,
    max_response_bytes: usize,
    credentials: AppCredentials,
    tokens: TokenCache,
    ledger: Mutex<Ledger>,
    budget: Budget,
}

impl GithubApp {
    /// An App talking to the API of `config`.
    pub fn new(config: &ClientConfig, credentials: AppCredentials) -> Result<Self, Error> {
        Ok(Self {
            http: config.http()?,
            egress: config.egress.clone(),
            base_url: config.base_url.clone(),
            retry: config.retry,
            max_response_bytes: config.max_response_bytes,
            credentials,
            tokens: TokenCache::default(),
            ledger: Mutex::default(),
            budget: Budget::unlimited(),
        })
    }

    /// The same App keeping `budget` in reserve of its own pool: a call that would go below
    /// it, a token exchange included, is not sent ([`Error::BudgetExhausted`]).
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// What GitHub last said about the App's own REST pool.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        lock(&self.ledger).window(Resource::Rest)
    }

    /// The App's credentials.
    pub fn credentials(&self) -> &AppCredentials {
        &self.credentials
    }

    /// A token for the installation: the cached one while it has more than
    /// [`crate::TOKEN_REFRESH_MARGIN`] left, else a new one (one request however many callers
    /// ask at once).
    pub async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<InstallationToken, Error> {
        self.tokens
            .get_or_mint(installation_id, || self.mint(installation_id))
            .await
    }

    /// Forgets a token GitHub refused, so the next call mints a new one.
    pub(crate) async fn refused(&self, installation_id: u64, token: &Secret) {
        self.tokens.invalidate(installation_id, token).await;
    }

    #[tracing::instrument(skip(self), fields(app_id = self.credentials.app_id()))]
    async fn mint(&self, installation_id: u64) -> Result<InstallationToken, Error> {
        const OPERATION: &str = "POST /app/installations/{id}/access_tokens";
        let url = format!(
            "{}/app/installations/{installation_id}/access_tokens",
            self.base_url
        );
        let (_, body) = self.app_call(OPERATION, Method::POST, &url).await?;
        let body: AccessTokenBody = decode_json(OPERATION, &body)?;
        let expires_at =
            OffsetDateTime::parse(&body.expires_at, &Rfc3339).map_err(|e| Error::Decode {
                operation: OPERATION,
                message: format!("expires_at {:?}: {e}", body.expires_at),
            })?;
        Ok(InstallationToken {
            token: Secret::new(body.token),
            expires_at,
        })
    }
}

impl GithubApp {
    /// One page of the App's webhook delivery attempts, newest first (100 per page); `cursor`
    /// is the previous page's [`HookDeliveriesPage::next_cursor`], `None` for the newest.
    #[tracing::instrument(skip(self), fields(app_id = self.credentials.app_id()))]
    pub async fn hook_deliveries(&self, cursor: Option<&str>) -> Result<HookDeliveriesPage, Error> {
        const OPERATION: &str = "GET /app/hook/deliveries";
        let mut url = format!(
            "{}/app/hook/deliveries?per_page={MAX_PAGE_SIZE}",
            self.base_url
        );
        if let Some(cursor) = cursor {
            // Opaque and already in query form: sent back as the Link header had it.
            url.push_str("&cursor=");
            url.push_str(cursor);
        }
        let (headers, body) = self.app_call(OPERATION, Method::GET, &url).await?;
        let deliveries: Vec<HookDelivery> = decode_json(OPERATION, &body)?;
        let next_cursor = headers
            .get(LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(next_cursor);
        Ok(HookDeliveriesPage {
            deliveries,
            next_cursor,
        })
    }

    /// Asks GitHub to deliver the attempt `delivery_id`'s event again (same guid). GitHub
    /// answers 202 and makes the attempt later; it shows up in [`GithubApp::hook_deliveries`].
    #[tracing::instrument(skip(self), fields(app_id = self.credentials.app_id()))]
    pub async fn redeliver(&self, delivery_id: u64) -> Result<(), Error> {
        const OPERATION: &str = "POST /app/hook/deliveries/{id}/attempts";
        let url = format!(
            "{}/app/hook/deliveries/{delivery_id}/attempts",
            self.base_url
        );
        self.app_call(OPERATION, Method::POST, &url).await?;
        Ok(())
    }

    /// `GET /app/installations/{id}` as the App: the installation, `None` when GitHub answers
    /// 404 (the App has no installation of that id).
    #[tracing::instrument(skip(self), fields(app_id = self.credentials.app_id()))]
    pub async fn installation(
        &self,
        installation_id: u64,
    ) -> Result<Option<AppInstallation>, Error> {
        const OPERATION: &str = "GET /app/installations/{id}";
        let url = format!("{}/app/installations/{installation_id}", self.base_url);
        match self.app_call(OPERATION, Method::GET, &url).await {
            Ok((_, body)) => Ok(Some(decode_json(OPERATION, &body)?)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `DELETE /app/installations/{id}` as the App: uninstalls it. Sent once, never retried: a
    /// retry after a lost answer would hide whether the first landed.
    #[tracing::instrument(skip(self), fields(app_id = self.credentials.app_id()))]
    pub async fn delete_installation(
        &self,
        installation_id: u64,
    ) -> Result<InstallationDeleted, Error> {
        const OPERATION: &str = "DELETE /app/installations/{id}";
        let url = format!("{}/app/installations/{installation_id}", self.base_url);
        admit(&self.ledger, Resource::Rest, OPERATION, self.budget)
            .map_err(Error::BudgetExhausted)?;
        let jwt = self.credentials.jwt(OffsetDateTime::now_utc())?;
        self.egress.check_str(&url).map_err(Error::Unreachable)?;
        let response = rest_request(&self.http, Method::DELETE, &url)
            .bearer_auth(jwt)
            .send()
            .await
            .map_err(Error::from_transport)?;
        let status = response.status();
        let answered = spent_on_limit(
            &self.ledger,
            Resource::Rest,
            read_success(response, self.max_response_bytes).await,
        );
        match answered {
            Ok((headers, _)) => {
                record_rest(&self.ledger, OPERATION, &headers);
                Ok(if status == StatusCode::NO_CONTENT {
                    InstallationDeleted::Deleted
                } else {
                    InstallationDeleted::Accepted(status.as_u16())
                })
            }
            Err(e) if e.is_not_found() => Ok(InstallationDeleted::NotFound),
            Err(e) => Err(e),
        }
    }

    /// A call authenticated as the App itself (JWT), budgeted like every call and retried by
    /// the policy.
    async fn app_call(
        &self,
        operation: &'static str,
        method: Method,
        url: &str,
    ) -> Result<(HeaderMap, Vec<u8>), Error> {
        let (headers, body) = self
            .retry
            .run(operation, || async {
                admit(&self.ledger, Resource::Rest, operation, self.budget).map_err(|stop| {
                    tracing::info!(%stop, "GitHub App budget reached; call not sent");
                    Error::BudgetExhausted(stop)
                })?;
                // A fresh JWT per attempt: a retry after a long Retry-After must not send a stale one.
                let jwt = self.credentials.jwt(OffsetDateTime::now_utc())?;
                self.egress.check_str(url).map_err(Error::Unreachable)?;
                let response = rest_request(&self.http, method.clone(), url)
                    .bearer_auth(jwt)
                    .send()
                    .await
                    .map_err(Error::from_transport)?;
                spent_on_limit(
                    &self.ledger,
                    Resource::Rest,
                    read_success(response, self.max_response_bytes).await,
                )
            })
            .await?;
        record_rest(&self.ledger, operation, &headers);
        Ok((headers, body))
    }
}

/// How a client authenticates its calls.
#[derive(Debug, Clone)]
pub enum Auth {
    /// A personal access token (or any fixed bearer token).
    Token(Secret),
    /// An App installation: tokens minted and cached by the App.
    Installation {
        /// The App.
        app: Arc<GithubApp>,
        /// The installation the calls act as.
        installation_id: u64,
    },
}

impl Auth {
    /// A personal access token.
    pub fn personal_token(token: impl Into<String>) -> Self {
        Auth::Token(Secret::new(token))
    }

    async fn bearer(&self) -> Result<Secret, Error> {
        match self {
            Auth::Token(token) => Ok(token.clone()),
            Auth::Installation {
                app,
                installation_id,
            } => Ok(app.installation_token(*installation_id).await?.token),
        }
    }

    async fn refused(&self, token: &Secret) {
        if let Auth::Installation {
            app,
            installation_id,
        } = self
        {
            app.refused(*installation_id, token).await;
        }
    }
}

/// One page of a repository's issues or pull requests.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The repository as GitHub names it now.
    pub repository: RepositoryHeader,
    /// What GitHub says the full listing holds.
    pub total_count: u32,
    /// Cursor state: whether GitHub says more follows, and the cursor for it.
    pub page_info: PageInfo,
    /// The items; `None` where GitHub failed to resolve one (its error is in `errors`).
    pub nodes: Vec<Option<T>>,
    /// GraphQL errors that left the rest of the page usable; see [`GraphqlError::node_index`].
    pub errors: Vec<GraphqlError>,
    /// The query's cost and what is left.
    pub rate_limit: Option<RateLimit>,
    /// When we asked (our clock): the page's observation time.
    pub fetched_at: OffsetDateTime,
}

impl<T> Page<T> {
    /// Whether the page came back whole: no errors and no unresolved item. A listing that
    /// contains a page that is not whole is incomplete.
    pub fn is_whole(&self) -> bool {
        self.errors.is_empty() && self.nodes.iter().all(Option::is_some)
    }
}

/// One item of a repository read by number.
#[derive(Debug, Clone)]
pub struct Item<T> {
    /// The repository as GitHub names it now.
    pub repository: RepositoryHeader,
    /// The item; `None` when the repository has no such item (GitHub's NOT_FOUND is among
    /// `errors`) or GitHub failed to resolve it.
    pub node: Option<T>,
    /// GraphQL errors of an otherwise usable response (paths under `repository.issue` or
    /// `repository.pullRequest`).
    pub errors: Vec<GraphqlError>,
    /// The query's cost and what is left.
    pub rate_limit: Option<RateLimit>,
    /// When we asked (our clock).
    pub fetched_at: OffsetDateTime,
}

/// One read of a commit's check runs, statuses and suites (`GetCommitCheckRuns`).
#[derive(Debug, Clone)]
pub struct CommitCheckRuns {
    /// The commit; `None` when the repository has no commit with that id.
    pub commit: Option<CommitChecks>,
    /// GraphQL errors that left the rest of the answer usable.
    pub errors: Vec<GraphqlError>,
    /// The query's cost and what is left.
    pub rate_limit: Option<RateLimit>,
    /// When we asked (our clock): the read's time.
    pub fetched_at: OffsetDateTime,
}

/// A GitHub API client for one identity (a PAT or an App installation).
///
/// Clones share the connection pool, the credentials and the rate-limit ledger;
/// [`GithubClient::with_budget`] gives a clone its own floor.
#[derive(Debug, Clone)]
pub struct GithubClient {
    shared: Arc<Shared>,
    budget: Budget,
}

#[derive(Debug)]
struct Shared {
    http: reqwest::Client,
    egress: Egress,
    base_url: String,
    graphql_url: String,
    retry: RetryPolicy,
    max_response_bytes: usize,
    auth: Auth,
    ledger: Mutex<Ledger>,
    last_stop: Mutex<Option<BudgetStop>>,
}

impl GithubClient {
    /// A client for `config`'s API acting as `auth`, with no budget floor.
    pub fn new(config: &ClientConfig, auth: Auth) -> Result<Self, Error> {
        Ok(Self {
            shared: Arc::new(Shared {
                http: config.http()?,
                egress: config.egress.clone(),
                base_url: config.base_url.clone(),
                graphql_url: config.graphql_url.clone(),
                retry: config.retry,
                max_response_bytes: config.max_response_bytes,
                auth,
                ledger: Mutex::default(),
                last_stop: Mutex::default(),
            }),
            budget: Budget::unlimited(),
        })
    }

    /// The same client keeping `budget` in reserve.
    pub fn with_budget(&self, budget: Budget) -> Self {
        Self {
            shared: self.shared.clone(),
            budget,
        }
    }

    /// Reports what GitHub says is left of this client's pools (and of its clones') as
    /// `vendor_quota_remaining{vendor="github", resource, connection}`; see
    /// [`vendor_http::quota`].
    pub fn report_quota_as(&self, connection: impl Into<String>) {
        lock(&self.shared.ledger).quota =
            Some(vendor_http::quota::QuotaGauge::new("github", connection));
    }

    /// The floor this client keeps.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Why the last call was refused by the budget, if one was (kept until the next refusal).
    pub fn last_budget_stop(&self) -> Option<BudgetStop> {
        lock(&self.shared.last_stop).clone()
    }

    /// What GitHub last said about a rate-limit pool.
    pub fn rate_limit(&self, resource: Resource) -> Option<RateLimit> {
        lock(&self.shared.ledger).window(resource)
    }

    /// A token for an installation of the App this client acts for.
    pub async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<InstallationToken, Error> {
        match &self.shared.auth {
            Auth::Installation { app, .. } => app.installation_token(installation_id).await,
            Auth::Token(_) => Err(Error::Auth {
                status: None,
                message: "installation tokens need GitHub App credentials, not a token".into(),
            }),
        }
    }

    /// One page of a repository's issues, oldest first. `first` is clamped to 1..=100.
    #[tracing::instrument(skip(self))]
    pub async fn issues_page(
        &self,
        owner: &str,
        name: &str,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<IssueNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let operation = RepositoryIssues::build(page_variables(owner, name, first, after));
        let (data, errors, rate_limit) = self.graphql("RepositoryIssues", operation).await?;
        let Some(repository) = data.repository else {
            return Err(repository_missing(owner, name, errors));
        };
        let connection = repository.issues;
        Ok(Page {
            repository: repository.header,
            total_count: count("RepositoryIssues", connection.total_count)?,
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            rate_limit,
            fetched_at,
        })
    }

    /// One page of a repository's pull requests, oldest first. `first` is clamped to 1..=100.
    #[tracing::instrument(skip(self))]
    pub async fn pull_requests_page(
        &self,
        owner: &str,
        name: &str,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<PullRequestNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let operation = RepositoryPullRequests::build(page_variables(owner, name, first, after));
        let (data, errors, rate_limit) = self.graphql("RepositoryPullRequests", operation).await?;
        let Some(repository) = data.repository else {
            return Err(repository_missing(owner, name, errors));
        };
        let connection = repository.pull_requests;
        Ok(Page {
            repository: repository.header,
            total_count: count("RepositoryPullRequests", connection.total_count)?,
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            rate_limit,
            fetched_at,
        })
    }

    /// One issue by number, with the first page of its comments (as an issues page has it).
    #[tracing::instrument(skip(self))]
    pub async fn issue(
        &self,
        owner: &str,
        name: &str,
        number: i32,
    ) -> Result<Item<IssueNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let operation = RepositoryIssue::build(item_variables(owner, name, number));
        let (data, errors, rate_limit) = self.graphql("RepositoryIssue", operation).await?;
        let Some(repository) = data.repository else {
            return Err(repository_missing(owner, name, errors));
        };
        Ok(Item {
            repository: repository.header,
            node: repository.issue,
            errors,
            rate_limit,
            fetched_at,
        })
    }

    /// One pull request by number, with the first pages of what a pull requests page reads
    /// under it.
    #[tracing::instrument(skip(self))]
    pub async fn pull_request(
        &self,
        owner: &str,
        name: &str,
        number: i32,
    ) -> Result<Item<PullRequestNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let operation = RepositoryPullRequest::build(item_variables(owner, name, number));
        let (data, errors, rate_limit) = self.graphql("RepositoryPullRequest", operation).await?;
        let Some(repository) = data.repository else {
            return Err(repository_missing(owner, name, errors));
        };
        Ok(Item {
            repository: repository.header,
            node: repository.pull_request,
            errors,
            rate_limit,
            fetched_at,
        })
    }

    /// A commit's check runs and statuses (one page of 100 through its status rollup) and its
    /// check suites (one page of 100).
    #[tracing::instrument(skip(self))]
    pub async fn commit_check_runs(
        &self,
        owner: &str,
        name: &str,
        oid: &str,
    ) -> Result<CommitCheckRuns, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let operation = GetCommitCheckRuns::build(CommitCheckRunsVariables {
            owner: owner.to_owned(),
            name: name.to_owned(),
            oid: GitObjectId(oid.to_owned()),
        });
        let (data, errors, rate_limit) = self.graphql("GetCommitCheckRuns", operation).await?;
        let Some(repository) = data.repository else {
            return Err(repository_missing(owner, name, errors));
        };
        let commit = match repository.object {
            Some(CommitObject::Commit(commit)) => Some(commit),
            Some(CommitObject::Other) | None => None,
        };
        Ok(CommitCheckRuns {
            commit,
            errors,
            rate_limit,
            fetched_at,
        })
    }

    /// A repository's current name and owner by node id; `None` when no repository has that id
    /// any more (or these credentials cannot see it).
    #[tracing::instrument(skip(self))]
    pub async fn repository_by_node_id(
        &self,
        node_id: &str,
    ) -> Result<Option<RepositoryRef>, Error> {
        let operation = RepositoryById::build(RepositoryByIdVariables {
            id: cynic::Id::new(node_id),
        });
        let (data, errors, _) = self.graphql("RepositoryById", operation).await?;
        match data.node {
            Some(RepositoryNode::Repository(repository)) => Ok(Some(repository)),
            // GitHub answers an unknown id with a null node and a NOT_FOUND error.
            None if errors.iter().all(GraphqlError::is_not_found) => Ok(None),
            None => Err(Error::Graphql { errors }),
            Some(RepositoryNode::Other) => Ok(None),
        }
    }

    /// A repository by `owner/name` as these credentials see it (renames followed); `None`
    /// when GitHub answers NOT_FOUND or FORBIDDEN: no such repository, or one these credentials
    /// may not see.
    #[tracing::instrument(skip(self))]
    pub async fn repository_by_name(
        &self,
        owner: &str,
        name: &str,
    ) -> Result<Option<RepositoryRef>, Error> {
        let operation = RepositoryByName::build(RepositoryByNameVariables {
            owner: owner.to_owned(),
            name: name.to_owned(),
        });
        let (data, errors, _) = self.graphql("RepositoryByName", operation).await?;
        match data.repository {
            Some(repository) if errors.is_empty() => Ok(Some(repository)),
            None if !errors.is_empty()
                && errors
                    .iter()
                    .all(|e| e.is_not_found() || e.kind.as_deref() == Some("FORBIDDEN")) =>
            {
                Ok(None)
            }
            // Anything else is doubt, never an answer.
            _ => Err(Error::Graphql { errors }),
        }
    }

    /// Page `page` (from 1) of the repositories the installation can reach, 100 per page.
    #[tracing::instrument(skip(self))]
    pub async fn installation_repositories(
        &self,
        page: u32,
    ) -> Result<InstallationRepositoriesPage, Error> {
        const OPERATION: &str = "GET /installation/repositories";
        let url = format!(
            "{}/installation/repositories?per_page={MAX_PAGE_SIZE}&page={}",
            self.shared.base_url,
            page.max(1)
        );
        let (headers, body) = self.rest_get(OPERATION, &url).await?;
        let body: InstallationRepositoriesBody = decode_json(OPERATION, &body)?;
        let next_page = headers
            .get(LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(next_page);
        Ok(InstallationRepositoriesPage {
            total_count: body.total_count,
            repositories: body.repositories,
            next_page,
        })
    }

    /// Every repository the installation can reach, one page at a time and at most `max_pages`
    /// pages: a listing that would go on past them, or past the total it states, is incomplete
    /// and fails as [`Error::Incomplete`] (never a partial answer taken for the whole).
    pub async fn installation_repositories_all(
        &self,
        max_pages: u32,
    ) -> Result<Vec<RestRepository>, Error> {
        const OPERATION: &str = "GET /installation/repositories";
        let mut out = Vec::new();
        let (mut page, mut read) = (1, 0);
        loop {
            if read >= max_pages {
                return Err(Error::Incomplete {
                    operation: OPERATION,
                    reason: format!("it goes on past {max_pages} pages, the most read"),
                });
            }
            let got = self.installation_repositories(page).await?;
            read += 1;
            out.extend(got.repositories);
            if out.len() as u64 > got.total_count {
                return Err(Error::Incomplete {
                    operation: OPERATION,
                    reason: format!(
                        "it lists more repositories than the {} it says it has",
                        got.total_count
                    ),
                });
            }
            match got.next_page {
                Some(next) if next > page => page = next,
                _ => return Ok(out),
            }
        }
    }

    /// A repository by native id (REST); `None` when GitHub answers 404.
    #[tracing::instrument(skip(self))]
    pub async fn repository_by_id(&self, id: u64) -> Result<Option<RestRepository>, Error> {
        const OPERATION: &str = "GET /repositories/{id}";
        let url = format!("{}/repositories/{id}", self.shared.base_url);
        match self.rest_get(OPERATION, &url).await {
            Ok((_, body)) => Ok(Some(decode_json(OPERATION, &body)?)),
            Err(Error::Http { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Admits a call against the budget, recording the refusal if there is one.
    fn admit(&self, resource: Resource, operation: &'static str) -> Result<(), Error> {
        admit(&self.shared.ledger, resource, operation, self.budget).map_err(|stop| {
            tracing::info!(%stop, "GitHub budget reached; call not sent");
            *lock(&self.shared.last_stop) = Some(stop.clone());
            Error::BudgetExhausted(stop)
        })
    }

    /// Sends a GraphQL operation and decodes what can be decoded: the data, the errors that did
    /// not prevent it, and the rate limit (already recorded in the ledger).
    async fn graphql<Q, V>(
        &self,
        name: &'static str,
        operation: Operation<Q, V>,
    ) -> Result<(Q, Vec<GraphqlError>, Option<RateLimit>), Error>
    where
        Q: DeserializeOwned + SelectsRateLimit,
        V: Serialize,
    {
        let url = &self.shared.graphql_url;
        // The call's client span, to record the query's cost on once it is decoded.
        let call = std::sync::OnceLock::new();
        let (headers, body) = self
            .shared
            .retry
            .run(name, || async {
                call.get_or_init(tracing::Span::current);
                self.admit(Resource::Graphql, name)?;
                self.send(Method::POST, url, Resource::Graphql, Some(&operation))
                    .await
            })
            .await?;
        let response: RawGraphqlResponse = decode_json(name, &body)?;
        let errors = response.errors.unwrap_or_default();
        if let Some(limited) = errors.iter().find(|e| e.is_rate_limited()) {
            let reset_at = reset_from(&headers)
                .or_else(|| self.rate_limit(Resource::Graphql).map(|w| w.reset_at))
                // Unknown reset: probe again in a minute rather than guess an hour.
                .unwrap_or_else(|| OffsetDateTime::now_utc() + time::Duration::minutes(1));
            lock(&self.shared.ledger).exhaust(Resource::Graphql, reset_at);
            return Err(Error::RateLimited {
                kind: RateLimitKind::Primary,
                reset_at: Some(reset_at),
                retry_after: vendor_http::retry_after(&headers),
                message: limited.message.clone(),
            });
        }
        let data = match response.data {
            Some(data) if !data.is_null() => data,
            _ if errors.is_empty() => {
                return Err(Error::Decode {
                    operation: name,
                    message: "neither data nor errors".into(),
                });
            }
            _ => return Err(Error::Graphql { errors }),
        };
        let data: Q = match serde_json::from_value(data) {
            Ok(data) => data,
            // An error nulled a field the query needs: the errors say why.
            Err(_) if !errors.is_empty() => return Err(Error::Graphql { errors }),
            Err(e) => {
                return Err(Error::Decode {
                    operation: name,
                    message: e.to_string(),
                });
            }
        };
        let rate_limit = match data.rate_limit() {
            Some(fields) => {
                let seen = rate_limit_from(name, fields)?;
                if let Some(span) = call.get() {
                    vendor_http::record_cost(span, seen.cost.into(), Some(seen.remaining.into()));
                }
                lock(&self.shared.ledger).record(Resource::Graphql, name, seen);
                Some(seen)
            }
            // Without it the budget cannot be kept: refuse the answer rather than fly blind.
            None if errors.is_empty() => {
                return Err(Error::Decode {
                    operation: name,
                    message: "the response has no rateLimit".into(),
                });
            }
            None => None,
        };
        Ok((data, errors, rate_limit))
    }

    async fn rest_get(
        &self,
        operation: &'static str,
        url: &str,
    ) -> Result<(HeaderMap, Vec<u8>), Error> {
        let (headers, body) = self
            .shared
            .retry
            .run(operation, || async {
                self.admit(Resource::Rest, operation)?;
                let answer = self
                    .send::<()>(Method::GET, url, Resource::Rest, None)
                    .await;
                if let Ok((headers, _)) = &answer {
                    // Each REST request costs one.
                    vendor_http::record_cost(
                        &tracing::Span::current(),
                        1,
                        vendor_http::header_number(headers, "x-ratelimit-remaining"),
                    );
                }
                answer
            })
            .await?;
        record_rest(&self.shared.ledger, operation, &headers);
        Ok((headers, body))
    }

    /// One attempt: authenticate, send, and turn a failure status into its error.
    async fn send<B: Serialize>(
        &self,
        method: Method,
        url: &str,
        resource: Resource,
        json: Option<&B>,
    ) -> Result<(HeaderMap, Vec<u8>), Error> {
        self.shared
            .egress
            .check_str(url)
            .map_err(Error::Unreachable)?;
        let token = self.shared.auth.bearer().await?;
        let mut request = rest_request(&self.shared.http, method, url).bearer_auth(token.expose());
        if let Some(json) = json {
            request = request.json(json);
        }
        let response = request.send().await.map_err(Error::from_transport)?;
        match spent_on_limit(
            &self.shared.ledger,
            resource,
            read_success(response, self.shared.max_response_bytes).await,
        ) {
            Err(err @ Error::Auth { .. }) => {
                self.shared.auth.refused(&token).await;
                Err(err)
            }
            other => other,
        }
    }
}

/// Admits a call against `ledger` under `budget`, or says why it is not sent.
fn admit(
    ledger: &Mutex<Ledger>,
    resource: Resource,
    operation: &'static str,
    budget: Budget,
) -> Result<(), BudgetStop> {
    lock(ledger).admit(resource, operation, budget, OffsetDateTime::now_utc())
}

/// Records a REST answer's pool from its headers; each request costs one.
fn record_rest(ledger: &Mutex<Ledger>, operation: &'static str, headers: &HeaderMap) {
    if let (Some(remaining), Some(reset_at)) = (
        vendor_http::header_number::<u32>(headers, "x-ratelimit-remaining"),
        reset_from(headers),
    ) {
        let seen = RateLimit {
            cost: 1,
            limit: vendor_http::header_number::<u32>(headers, "x-ratelimit-limit").unwrap_or(0),
            remaining,
            reset_at,
        };
        lock(ledger).record(Resource::Rest, operation, seen);
    }
}

/// Marks the pool spent until its reset when GitHub answered a primary rate limit.
fn spent_on_limit<T>(
    ledger: &Mutex<Ledger>,
    resource: Resource,
    answer: Result<T, Error>,
) -> Result<T, Error> {
    if let Err(Error::RateLimited {
        kind: RateLimitKind::Primary,
        reset_at: Some(reset_at),
        ..
    }) = &answer
    {
        lock(ledger).exhaust(resource, *reset_at);
    }
    answer
}

#[derive(serde::Deserialize)]
struct RawGraphqlResponse {
    data: Option<serde_json::Value>,
    errors: Option<Vec<GraphqlError>>,
}

fn rest_request(http: &reqwest::Client, method: Method, url: &str) -> reqwest::RequestBuilder {
    http.request(method, url)
        .header(ACCEPT, "application/vnd.github+json")
        .header("x-github-api-version", API_VERSION)
}

/// The headers and body of a 2xx answer, or the error its status means.
async fn read_success(
    response: reqwest::Response,
    max_bytes: usize,
) -> Result<(HeaderMap, Vec<u8>), Error> {
    let status = response.status();
    let headers = response.headers().clone();
    // Redirects are not followed (see `ClientConfig::http`): say so rather than fail to decode.
    if status.is_redirection() {
        let location = headers
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            // The query may carry a token: never repeat it.
            .map(|l| l.split(['?', '#']).next().unwrap_or_default().to_owned());
        return Err(Error::Redirected {
            status: status.as_u16(),
            location,
        });
    }
    let body = read_capped(response, max_bytes).await?;
    if status.is_success() {
        return Ok((headers, body));
    }
    let message = serde_json::from_slice::<MessageBody>(&body)
        .map(|m| m.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(200).collect());
    let retry_after = vendor_http::retry_after(&headers);
    Err(match status {
        StatusCode::UNAUTHORIZED => Error::Auth {
            status: Some(status.as_u16()),
            message,
        },
        StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS => {
            let spent =
                vendor_http::header_number::<u32>(&headers, "x-ratelimit-remaining") == Some(0);
            if spent && retry_after.is_none() {
                Error::RateLimited {
                    kind: RateLimitKind::Primary,
                    reset_at: reset_from(&headers),
                    retry_after,
                    message,
                }
            } else if retry_after.is_some()
                || status == StatusCode::TOO_MANY_REQUESTS
                || message
                    .to_ascii_lowercase()
                    .contains("secondary rate limit")
            {
                Error::RateLimited {
                    kind: RateLimitKind::Secondary,
                    reset_at: reset_from(&headers),
                    retry_after,
                    message,
                }
            } else if status == StatusCode::FORBIDDEN {
                // A plain 403: missing permission, named by GitHub's header when it sends one.
                Error::Forbidden {
                    permissions: headers
                        .get("x-accepted-github-permissions")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    message,
                }
            } else {
                Error::Http {
                    status: status.as_u16(),
                    message,
                    retry_after,
                }
            }
        }
        _ => Error::Http {
            status: status.as_u16(),
            message,
            retry_after,
        },
    })
}

fn decode_json<T: DeserializeOwned>(operation: &'static str, body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::Decode {
        operation,
        message: e.to_string(),
    })
}

/// `x-ratelimit-reset` (unix seconds).
fn reset_from(headers: &HeaderMap) -> Option<OffsetDateTime> {
    let seconds: i64 = headers
        .get("x-ratelimit-reset")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    OffsetDateTime::from_unix_timestamp(seconds).ok()
}

fn rate_limit_from(operation: &'static str, fields: &RateLimitFields) -> Result<RateLimit, Error> {
    let non_negative = |what: &str, value: i32| {
        u32::try_from(value).map_err(|_| Error::Decode {
            operation,
            message: format!("rateLimit.{what} is negative: {value}"),
        })
    };
    Ok(RateLimit {
        cost: non_negative("cost", fields.cost)?,
        limit: non_negative("limit", fields.limit)?,
        remaining: non_negative("remaining", fields.remaining)?,
        reset_at: fields.reset_at.0,
    })
}

fn count(operation: &'static str, total: i32) -> Result<u32, Error> {
    u32::try_from(total).map_err(|_| Error::Decode {
        operation,
        message: format!("totalCount is negative: {total}"),
    })
}

fn page_variables(
    owner: &str,
    name: &str,
    first: u32,
    after: Option<&str>,
) -> RepositoryPageVariables {
    RepositoryPageVariables {
        owner: owner.to_owned(),
        name: name.to_owned(),
        // Bounded to GitHub's 1..=100, so the cast cannot overflow.
        first: first.clamp(1, MAX_PAGE_SIZE) as i32,
        after: after.map(str::to_owned),
    }
}

fn item_variables(owner: &str, name: &str, number: i32) -> RepositoryItemVariables {
    RepositoryItemVariables {
        owner: owner.to_owned(),
        name: name.to_owned(),
        number,
    }
}

/// A null repository: GitHub's NOT_FOUND, or one we make up if it sent none.
fn repository_missing(owner: &str, name: &str, errors: Vec<GraphqlError>) -> Error {
    if !errors.is_empty() {
        return Error::Graphql { errors };
    }
    Error::Graphql {
        errors: vec![GraphqlError {
            message: format!("repository {owner}/{name} is null"),
            kind: Some("NOT_FOUND".into()),
            path: vec![PathSegment::Field("repository".into())],
        }],
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded values stay consistent at every await-free step; a panic elsewhere must not
    // take accounting down with it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The body under the client's cap, as the client's error.
async fn read_capped(response: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, Error> {
    vendor_http::read_capped(response, max_bytes)
        .await
        .map_err(|e| match e {
            vendor_http::BodyError::TooLarge => Error::TooLarge { limit: max_bytes },
            vendor_http::BodyError::Transport(e) => Error::Transport(e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_com_maps_to_the_public_api() {
        for server in [
            None,
            Some(""),
            Some("https://github.com"),
            Some("https://GitHub.com/"),
            Some("https://api.github.com"),
        ] {
            let config = ClientConfig::for_server(server);
            assert_eq!(config.base_url, "https://api.github.com", "{server:?}");
            assert_eq!(
                config.graphql_url, "https://api.github.com/graphql",
                "{server:?}"
            );
        }
    }

    #[test]
    fn an_enterprise_server_maps_to_its_api_v3_and_api_graphql() {
        for server in [
            "https://ghe.example.com",
            "https://ghe.example.com/",
            "https://ghe.example.com/api/v3",
            "https://ghe.example.com/api",
        ] {
            let config = ClientConfig::for_server(Some(server));
            assert_eq!(
                config.base_url, "https://ghe.example.com/api/v3",
                "{server}"
            );
            assert_eq!(
                config.graphql_url, "https://ghe.example.com/api/graphql",
                "{server}"
            );
        }
    }
}
