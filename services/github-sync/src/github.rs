//! The production [`GithubSource`]: github-client's generated queries, with the connection's
//! credentials (a PAT, or an App installation) and a quota budget per job.
//!
//! Connection settings: `{"auth": "pat" | "app", "repositories": ["owner/name", ...] (PAT,
//! resolved with the PAT on every pass),
//! "app_id": N, "installation_id": N (App), "min_remaining": N}`; secrets `token` (PAT) or
//! `private_key` (App, PEM). The provider instance's server URL names the GitHub server
//! (github.com, or an Enterprise Server whose APIs live under `/api`). Our own App is
//! the configured one (`FORGESYNC_GITHUB_APP_ID`), else an App connection's `app_id`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow};
use github_client::queries::{
    self, CheckStatusState, PullRequestReviewState, RequestedReviewer, RollupContext, StatusState,
};
use github_client::{
    AppCredentials, Auth, Budget, ClientConfig, Error, GithubApp, GithubClient,
    PathSegment as ClientPath, RateLimitKind,
};
use lifecycle_core::forward::GithubReviewState;
use lifecycle_core::github::checks::{CheckRun, CheckSuite, CommitChecksRead, Rollup, RunStatus};
use lifecycle_core::partial::PathSegment;
use sea_orm::{DatabaseConnection, EntityTrait};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use store::entity::{connection, provider_instance};
use store::secrets::Keyring;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::SourceFactory;
use crate::mirror::ListedNode;
use crate::source::{
    CommentNode, Conversation, GithubSource, IssueNode, ItemFields, Nested, Page, PullRequestNode,
    Reach, RepoHeader, RepoRef, ReviewCommentNode, ReviewNode, Reviewer, SourceError, ThreadNode,
};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum AuthKind {
    Pat,
    App,
}

#[derive(Debug, Deserialize)]
struct Settings {
    auth: AuthKind,
    #[serde(default)]
    repositories: Vec<String>,
    app_id: Option<u64>,
    installation_id: Option<u64>,
    /// Rate-limit points a job leaves untouched (default 500).
    min_remaining: Option<u32>,
}

/// Pages of an App installation's repository listing read at most (100 repositories each).
const MAX_INSTALLATION_PAGES: u32 = 1_000;

/// Builds a [`ClientSource`] per connection and keeps it: every job and webhook of a connection
/// shares one reader, its installation token and its rate-limit ledger.
pub struct ClientFactory {
    pub db: DatabaseConnection,
    pub secret_key: Keyring,
    /// Our own GitHub App, when configured (overrides a connection's `app_id`).
    pub app_id: Option<u64>,
    /// Readers by connection.
    pub readers: ReaderCache,
    /// How long one GitHub request may take before it counts as a timeout.
    pub request_timeout: std::time::Duration,
    /// Where a connection's server may be reached (`FORGESYNC_EGRESS_ALLOW`).
    pub egress: vendor_http::egress::Egress,
}

/// A connection's GitHub App acting as itself (JWT calls), and the installation the connection
/// is for.
#[derive(Clone)]
pub struct ConnectionApp {
    pub app: Arc<GithubApp>,
    pub installation_id: u64,
}

/// The readers built per connection, each with a digest of what it was built from (settings,
/// server URL, secret): a reader is reused only while those are unchanged, so replaced
/// credentials are used at once.
#[derive(Default)]
pub struct ReaderCache {
    readers: Mutex<HashMap<Uuid, Reader>>,
}

#[derive(Clone)]
struct Reader {
    digest: [u8; 32],
    app: Option<ConnectionApp>,
    source: Arc<ClientSource>,
}

impl ReaderCache {
    fn get(&self, connection_id: Uuid, digest: &[u8; 32]) -> Option<Reader> {
        let readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        readers
            .get(&connection_id)
            .filter(|r| r.digest == *digest)
            .cloned()
    }

    /// Drops the connection's reader (its credentials are gone or unusable).
    fn forget(&self, connection_id: Uuid) {
        let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        readers.remove(&connection_id);
    }

    /// Keeps `reader` unless one built from the same inputs got in first (then that one is
    /// shared, with its token).
    fn keep(&self, connection_id: Uuid, reader: Reader) -> Reader {
        let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        match readers.get(&connection_id) {
            Some(kept) if kept.digest == reader.digest => kept.clone(),
            _ => {
                readers.insert(connection_id, reader.clone());
                reader
            }
        }
    }
}

impl ClientFactory {
    /// The connection's settings and its GitHub server URL.
    async fn settings(
        &self,
        conn: &connection::Model,
    ) -> anyhow::Result<(Settings, Option<String>)> {
        let settings: Settings = serde_json::from_value(conn.settings.clone())
            .context("connection settings must name `auth` (pat or app) and its fields")?;
        let instance = provider_instance::Entity::find_by_id(conn.provider_instance_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| anyhow!("the connection's provider instance is missing"))?;
        Ok((settings, instance.server_url))
    }

    /// The connection's reader: the kept one while its settings, server and secret are
    /// unchanged, else a new one.
    async fn reader(&self, conn: &connection::Model) -> anyhow::Result<Reader> {
        let built = self.build_reader(conn).await;
        if built.is_err() {
            // Erased or broken credentials leave no reader (nor key material) behind.
            self.readers.forget(conn.id);
        }
        built
    }

    async fn build_reader(&self, conn: &connection::Model) -> anyhow::Result<Reader> {
        let (settings, server_url) = self.settings(conn).await?;
        let secret_name = match settings.auth {
            AuthKind::Pat => "token",
            AuthKind::App => "private_key",
        };
        let secret = self.secret(conn, secret_name).await?;
        let digest: [u8; 32] = Sha256::new()
            .chain_update(conn.settings.to_string())
            .chain_update([0u8])
            .chain_update(server_url.as_deref().unwrap_or_default())
            .chain_update([0u8])
            .chain_update(&secret)
            .finalize()
            .into();
        if let Some(kept) = self.readers.get(conn.id, &digest) {
            return Ok(kept);
        }
        // github.com's API, or a GitHub Enterprise Server's REST and GraphQL bases.
        let mut config =
            ClientConfig::for_server(server_url.as_deref()).with_egress(self.egress.clone());
        config.timeout = self.request_timeout;
        let budget = Budget::keep(settings.min_remaining.unwrap_or(500));
        let own_app_id = self.app_id.or(settings.app_id);
        let (auth, repositories, app) = match settings.auth {
            AuthKind::Pat => {
                let token = String::from_utf8(secret)?;
                let names = settings
                    .repositories
                    .iter()
                    .map(|r| {
                        let (owner, name) = r
                            .split_once('/')
                            .ok_or_else(|| anyhow!("repository {r:?} is not owner/name"))?;
                        Ok((owner.to_owned(), name.to_owned()))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                (Auth::personal_token(token), Some(names), None)
            }
            AuthKind::App => {
                let app_id = settings
                    .app_id
                    .context("an App connection needs `app_id`")?;
                let installation_id = settings
                    .installation_id
                    .context("an App connection needs `installation_id`")?;
                // The token exchange draws on the App's pool under the same floor.
                let app = Arc::new(
                    GithubApp::new(&config, AppCredentials::from_pem(app_id, &secret)?)?
                        .with_budget(budget),
                );
                (
                    Auth::Installation {
                        app: app.clone(),
                        installation_id,
                    },
                    None,
                    Some(ConnectionApp {
                        app,
                        installation_id,
                    }),
                )
            }
        };
        let client = GithubClient::new(&config, auth)?.with_budget(budget);
        client.report_quota_as(conn.id.to_string());
        let source = Arc::new(ClientSource {
            client,
            repositories,
            own_app_id,
            installation: app.as_ref().map(|a| a.installation_id),
        });
        Ok(self.readers.keep(
            conn.id,
            Reader {
                digest,
                app,
                source,
            },
        ))
    }

    /// One of the connection's sealed secrets.
    async fn secret(
        &self,
        conn: &connection::Model,
        name: &'static str,
    ) -> anyhow::Result<Vec<u8>> {
        store::secrets::get(&self.db, &self.secret_key, conn.id, name)
            .await?
            .ok_or_else(|| anyhow!("the connection has no `{name}` secret"))
    }

    /// The connection's App, for calls made as the App itself; `None` for a PAT connection.
    pub async fn app(&self, conn: &connection::Model) -> anyhow::Result<Option<ConnectionApp>> {
        Ok(self.reader(conn).await?.app)
    }
}

#[async_trait::async_trait]
impl SourceFactory for ClientFactory {
    async fn source(&self, conn: &connection::Model) -> anyhow::Result<Arc<dyn GithubSource>> {
        Ok(self.reader(conn).await?.source)
    }
}

/// github-client behind the engine's interface.
pub struct ClientSource {
    client: GithubClient,
    /// A PAT's configured `(owner, name)`s, resolved on every pass; `None` lists the App
    /// installation's repositories.
    repositories: Option<Vec<(String, String)>>,
    own_app_id: Option<u64>,
    /// The App installation the client's tokens are issued for.
    installation: Option<u64>,
}

impl ClientSource {
    pub fn new(
        client: GithubClient,
        repositories: Option<Vec<(String, String)>>,
        own_app_id: Option<u64>,
    ) -> Self {
        ClientSource {
            client,
            repositories,
            own_app_id,
            installation: None,
        }
    }
}

/// The client's error as the engine classifies it: refused credentials, limits, timeouts and
/// GraphQL types stay distinct, so a reason never says less than GitHub did.
fn source_error(e: Error) -> SourceError {
    match e {
        Error::BudgetExhausted(stop) => SourceError::BudgetExhausted(stop.to_string()),
        Error::RateLimited {
            kind: RateLimitKind::Secondary,
            ..
        } => SourceError::SecondaryRateLimited,
        Error::RateLimited { .. } => SourceError::RateLimited,
        Error::Auth { message, .. } => SourceError::BadCredentials(message),
        Error::Forbidden {
            permissions,
            message,
        } => SourceError::Forbidden {
            permission: permissions,
            message,
        },
        Error::Http { status, .. } => SourceError::Http(status),
        Error::Graphql { errors } if errors.iter().any(|e| e.is_not_found()) => {
            SourceError::NotFound
        }
        Error::Graphql { errors } => SourceError::GraphQl {
            kind: errors.iter().find_map(|e| e.kind.clone()),
            message: errors
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        },
        Error::Transport(e) if e.is_timeout() => SourceError::Timeout(e.to_string()),
        Error::Transport(e) => SourceError::Unreachable(e.to_string()),
        Error::Unreachable(refused) => SourceError::Unreachable(refused.to_string()),
        e @ Error::Deadline { .. } => SourceError::Timeout(e.to_string()),
        other => SourceError::Other(other.to_string()),
    }
}

fn path(p: &[ClientPath]) -> Vec<PathSegment> {
    p.iter()
        .map(|s| match s {
            ClientPath::Field(f) => PathSegment::Key(f.clone()),
            ClientPath::Index(i) => PathSegment::Index(*i),
        })
        .collect()
}

fn header(h: &queries::RepositoryHeader) -> Result<RepoHeader, SourceError> {
    let (owner, name) = h
        .name_with_owner
        .split_once('/')
        .ok_or_else(|| SourceError::Other(format!("nameWithOwner {:?}", h.name_with_owner)))?;
    Ok(RepoHeader {
        native_id: h
            .database_id
            .map(i64::from)
            .ok_or_else(|| SourceError::Other("repository without databaseId".into()))?,
        node_id: h.id.inner().to_owned(),
        owner: owner.to_owned(),
        name: name.to_owned(),
        archived: Some(h.is_archived),
    })
}

/// A repository a name resolved to, by its current name and native id.
fn resolved(r: &queries::RepositoryRef) -> Result<RepoRef, SourceError> {
    let (owner, name) = r
        .name_with_owner
        .split_once('/')
        .ok_or_else(|| SourceError::Other(format!("nameWithOwner {:?}", r.name_with_owner)))?;
    Ok(RepoRef {
        owner: owner.to_owned(),
        name: name.to_owned(),
        native_id: Some(
            r.database_id
                .map(i64::from)
                .ok_or_else(|| SourceError::Other("repository without databaseId".into()))?,
        ),
    })
}

/// What an issue node and a pull request node share (two generated types with the same
/// fields), as the mirror stores it; `None` for a node without a native id.
macro_rules! item_fields {
    ($node:expr) => {{
        let n = $node;
        n.database_id.map(|id| ItemFields {
            native_id: i64::from(id),
            node_id: n.id.inner().to_owned(),
            number: n.number,
            title: n.title.clone(),
            body: n.body.clone(),
            state: lower(&n.state),
            author: n.author.as_ref().map(|a| a.login.clone()),
            locked: Some(n.locked),
            lock_reason: n.active_lock_reason.as_ref().map(lower),
            comment_count: Some(n.comments.total_count),
            created_at: n.created_at.0,
            updated_at: n.updated_at.0,
            closed_at: n.closed_at.as_ref().map(|t| t.0),
        })
    }};
}

/// A listing page as the engine reads it, each node mapped by `node` with what it read under
/// it (a node it cannot map is left out, as GitHub's failed nodes are).
fn listing_page<T, N>(
    read: github_client::Page<T>,
    read_at: OffsetDateTime,
    node: impl Fn(&T) -> Option<(N, Conversation)>,
) -> Result<Page<N>, SourceError> {
    let (nodes, conversations) = read.nodes.iter().flatten().filter_map(node).unzip();
    Ok(Page {
        repository: header(&read.repository)?,
        nodes,
        conversations,
        read_at,
        total_count: Some(u64::from(read.total_count)),
        has_next_page: read.page_info.has_next_page,
        end_cursor: read.page_info.end_cursor.clone(),
        error_paths: read.errors.iter().map(|e| path(&e.path)).collect(),
        cost: read.rate_limit.map_or(0, |r| r.cost),
    })
}

/// One item read by number as a page of one, so it is written exactly as a listing's node is:
/// its errors are moved to where that node's would sit (`repository.issue.comments` becomes
/// `repository.issues.nodes.0.comments`), so an errored count stays unknown. `None` when
/// GitHub has no such item for these credentials.
fn item_page<T, N: ListedNode>(
    read: github_client::Item<T>,
    read_at: OffsetDateTime,
    field: &str,
    node: impl Fn(&T) -> Option<(N, Conversation)>,
) -> Result<Option<Page<N>>, SourceError> {
    let Some(item) = &read.node else {
        let missing = read.errors.iter().any(|e| e.is_not_found());
        return match read.errors.first() {
            Some(first) if !missing => Err(SourceError::GraphQl {
                kind: first.kind.clone(),
                message: first.message.clone(),
            }),
            _ => Ok(None),
        };
    };
    let (node, conversation) =
        node(item).ok_or_else(|| SourceError::Other(format!("the {field} has no databaseId")))?;
    let error_paths = read
        .errors
        .iter()
        .map(|e| {
            let p = path(&e.path);
            match p.as_slice() {
                [PathSegment::Key(r), PathSegment::Key(f), rest @ ..]
                    if r == "repository" && f == field =>
                {
                    let mut moved = vec![
                        PathSegment::Key("repository".into()),
                        PathSegment::Key(N::CONNECTION.into()),
                        PathSegment::Key("nodes".into()),
                        PathSegment::Index(0),
                    ];
                    moved.extend_from_slice(rest);
                    moved
                }
                _ => p,
            }
        })
        .collect();
    Ok(Some(Page {
        repository: header(&read.repository)?,
        nodes: vec![node],
        conversations: vec![conversation],
        read_at,
        total_count: None,
        has_next_page: false,
        end_cursor: None,
        error_paths,
        cost: read.rate_limit.map_or(0, |r| r.cost),
    }))
}

fn login(a: Option<&queries::Actor>) -> Option<String> {
    a.map(|a| a.login.clone())
}

fn comment(c: &queries::IssueCommentNode) -> Option<CommentNode> {
    Some(CommentNode {
        native_id: i64::from(c.database_id?),
        node_id: c.id.inner().to_owned(),
        author: login(c.author.as_ref()),
        body: c.body.clone(),
        created_at: c.created_at.0,
        updated_at: c.updated_at.0,
    })
}

/// A nested first page: an entry without a native id counts as unresolved.
fn nested<T, N>(
    nodes: Option<&Vec<Option<T>>>,
    has_next_page: bool,
    total_count: i32,
    map: impl Fn(&T) -> Option<N>,
) -> Nested<N> {
    let nodes = nodes
        .map(|n| n.iter().map(|n| n.as_ref().and_then(&map)).collect())
        .unwrap_or_default();
    Nested::read(nodes, has_next_page, i64::from(total_count))
}

fn comments(c: &queries::CommentCount) -> Nested<CommentNode> {
    nested(
        c.nodes.as_ref(),
        c.page_info.has_next_page,
        c.total_count,
        comment,
    )
}

/// What a pull request node read under it.
fn pull_request_conversation(n: &queries::PullRequestNode) -> Conversation {
    let reviews = n.reviews.as_ref().map(|r| {
        nested(
            r.nodes.as_ref(),
            r.page_info.has_next_page,
            r.total_count,
            |r| {
                Some(ReviewNode {
                    native_id: i64::from(r.database_id?),
                    node_id: r.id.inner().to_owned(),
                    author: login(r.author.as_ref()),
                    body: r.body.clone(),
                    state: match r.state {
                        PullRequestReviewState::Pending => GithubReviewState::Pending,
                        PullRequestReviewState::Commented => GithubReviewState::Commented,
                        PullRequestReviewState::Approved => GithubReviewState::Approved,
                        PullRequestReviewState::ChangesRequested => {
                            GithubReviewState::ChangesRequested
                        }
                        PullRequestReviewState::Dismissed => GithubReviewState::Dismissed,
                        // A state this build does not know is not guessed: the review is left out.
                        PullRequestReviewState::Other(_) => return None,
                    },
                    commit_sha: r.commit.as_ref().map(|c| c.oid.0.clone()),
                    submitted_at: r.submitted_at.map(|t| t.0),
                    updated_at: r.updated_at.0,
                })
            },
        )
    });
    let t = &n.review_threads;
    let threads = nested(
        t.nodes.as_ref(),
        t.page_info.has_next_page,
        t.total_count,
        |t| {
            let c = &t.comments;
            Some(ThreadNode {
                node_id: t.id.inner().to_owned(),
                path: t.path.clone(),
                resolved: t.is_resolved,
                resolved_by: t.resolved_by.as_ref().map(|u| u.login.clone()),
                comments: nested(
                    c.nodes.as_ref(),
                    c.page_info.has_next_page,
                    c.total_count,
                    |c| {
                        Some(ReviewCommentNode {
                            comment: CommentNode {
                                native_id: i64::from(c.database_id?),
                                node_id: c.id.inner().to_owned(),
                                author: login(c.author.as_ref()),
                                body: c.body.clone(),
                                created_at: c.created_at.0,
                                updated_at: c.updated_at.0,
                            },
                            path: c.path.clone(),
                            line: c.line,
                            review_native_id: c
                                .pull_request_review
                                .as_ref()
                                .and_then(|r| r.database_id)
                                .map(i64::from),
                            in_reply_to: c
                                .reply_to
                                .as_ref()
                                .and_then(|r| r.database_id)
                                .map(i64::from),
                            commit_sha: c.commit.as_ref().map(|c| c.oid.0.clone()),
                        })
                    },
                ),
            })
        },
    );
    // GitHub's single page of requests: a longer list is never applied.
    let reviewers = n.review_requests.as_ref().map(|r| {
        nested(r.nodes.as_ref(), false, r.total_count, |r| {
            match r.requested_reviewer.as_ref()? {
                RequestedReviewer::User(u) => Some(Reviewer::User(u.login.clone())),
                RequestedReviewer::Team(t) => Some(Reviewer::Team(t.slug.clone())),
                RequestedReviewer::Other => None,
            }
        })
    });
    Conversation {
        comments: Some(comments(&n.comments)),
        reviews,
        threads: Some(threads),
        reviewers,
    }
}

fn lower<T: std::fmt::Debug>(v: &T) -> String {
    // Enum names as stored: `Open` → `open`, `NotPlanned` → `not_planned`, `Other("X")` → `x`.
    let raw = format!("{v:?}");
    let raw = raw
        .strip_prefix("Other(\"")
        .and_then(|r| r.strip_suffix("\")"))
        .unwrap_or(&raw);
    let mut out = String::new();
    for (i, c) in raw.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 && !raw.contains('_') {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn run_status(s: &CheckStatusState) -> RunStatus {
    match s {
        CheckStatusState::Completed => RunStatus::Completed,
        CheckStatusState::InProgress => RunStatus::InProgress,
        // Queued, requested, waiting, pending, and values this build does not know.
        _ => RunStatus::Waiting,
    }
}

/// The group of commit statuses (check runs are grouped by their App).
const STATUS_GROUP: &str = "status";

/// A `GetCommitCheckRuns` answer as the checks rules read it; any doubt is a failed read.
fn commit_checks_read(
    read: github_client::CommitCheckRuns,
) -> Result<CommitChecksRead, SourceError> {
    if !read.errors.is_empty() {
        // A failed field is unknown, never a value: the whole read fails.
        return Err(source_error(Error::Graphql {
            errors: read.errors,
        }));
    }
    let commit = read.commit.ok_or(SourceError::NotFound)?;
    let suites = match commit.check_suites {
        Some(suites) => {
            let nodes: Vec<_> = suites
                .nodes
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            if u64::try_from(suites.total_count).unwrap_or(u64::MAX) > nodes.len() as u64 {
                return Err(SourceError::Other(format!(
                    "the commit has {} check suites, more than one page",
                    suites.total_count
                )));
            }
            nodes
                .into_iter()
                .map(|suite| CheckSuite {
                    app_id: suite
                        .app
                        .and_then(|a| a.database_id)
                        .and_then(|id| u64::try_from(id).ok())
                        .unwrap_or(0),
                    status: run_status(&suite.status),
                    conclusion: suite.conclusion.as_ref().map(lower),
                    // An unknown run count must not let a running suite pass as empty.
                    run_count: suite
                        .check_runs
                        .map_or(1, |c| u32::try_from(c.total_count).unwrap_or(1)),
                })
                .collect()
        }
        None => {
            return Err(SourceError::Other(
                "GitHub did not list the check suites".into(),
            ));
        }
    };
    let Some(rollup) = commit.status_check_rollup else {
        return Ok(CommitChecksRead {
            runs: Vec::new(),
            total_count: 0,
            rollup: None,
            suites,
        });
    };
    let mut runs = Vec::new();
    for node in rollup.contexts.nodes.unwrap_or_default() {
        runs.push(match node {
            Some(RollupContext::CheckRun(run)) => CheckRun {
                name: run.name,
                group: run
                    .check_suite
                    .app
                    .as_ref()
                    .map(|a| a.name.clone())
                    .unwrap_or_default(),
                app_id: run
                    .check_suite
                    .app
                    .and_then(|a| a.database_id)
                    .and_then(|id| u64::try_from(id).ok()),
                status: run_status(&run.status),
                conclusion: run.conclusion.as_ref().map(lower),
                completed_at: run.completed_at.map(|t| t.0),
                details_url: run.details_url.map(|u| u.0),
            },
            Some(RollupContext::StatusContext(status)) => {
                // A commit status ends when it succeeds, fails or errors; its date is the end.
                let ended = matches!(
                    status.state,
                    StatusState::Success | StatusState::Failure | StatusState::Error
                );
                CheckRun {
                    name: status.context,
                    group: STATUS_GROUP.to_owned(),
                    app_id: None,
                    status: if ended {
                        RunStatus::Completed
                    } else {
                        RunStatus::Waiting
                    },
                    conclusion: ended.then(|| lower(&status.state)),
                    completed_at: ended.then_some(status.created_at.0),
                    details_url: status.target_url.map(|u| u.0),
                }
            }
            Some(RollupContext::Other) | None => {
                return Err(SourceError::Other(
                    "the rollup lists an entry this build cannot read".into(),
                ));
            }
        });
    }
    Ok(CommitChecksRead {
        runs,
        total_count: u64::try_from(rollup.contexts.total_count).unwrap_or(u64::MAX),
        rollup: Some(match rollup.state {
            StatusState::Success => Rollup::Success,
            StatusState::Failure => Rollup::Failure,
            StatusState::Error => Rollup::Error,
            StatusState::Expected => Rollup::Expected,
            // Pending, and a state this build does not know: nothing says it finished.
            StatusState::Pending | StatusState::Other(_) => Rollup::Pending,
        }),
        suites,
    })
}

#[async_trait::async_trait]
impl GithubSource for ClientSource {
    fn own_app_id(&self) -> Option<u64> {
        self.own_app_id
    }

    fn installation_id(&self) -> Option<u64> {
        self.installation
    }

    async fn repository(&self, native_id: i64) -> Result<Option<RepoRef>, SourceError> {
        let id = u64::try_from(native_id)
            .map_err(|_| SourceError::Other(format!("repository id {native_id}")))?;
        let found = self
            .client
            .repository_by_id(id)
            .await
            .map_err(source_error)?;
        Ok(found.map(|r| RepoRef {
            owner: r.owner.login,
            name: r.name,
            native_id: i64::try_from(r.id).ok(),
        }))
    }

    async fn commit_check_runs(
        &self,
        repo: &RepoRef,
        sha: &str,
    ) -> Result<CommitChecksRead, SourceError> {
        let read = self
            .client
            .commit_check_runs(&repo.owner, &repo.name, sha)
            .await
            .map_err(source_error)?;
        commit_checks_read(read)
    }

    async fn repositories(&self) -> Result<Reach, SourceError> {
        if let Some(names) = &self.repositories {
            // Only what these credentials resolve is reached; ids from settings are never trusted.
            let mut reach = Reach {
                exclusive: true,
                ..Reach::default()
            };
            for (owner, name) in names {
                match self
                    .client
                    .repository_by_name(owner, name)
                    .await
                    .map_err(source_error)?
                {
                    Some(found) => reach.repositories.push(resolved(&found)?),
                    None => reach.unresolved.push(format!("{owner}/{name}")),
                }
            }
            return Ok(reach);
        }
        // Bounded: a server that never stops answering `next` ends the listing as incomplete.
        let out = self
            .client
            .installation_repositories_all(MAX_INSTALLATION_PAGES)
            .await
            .map_err(source_error)?
            .into_iter()
            .map(|r| RepoRef {
                owner: r.owner.login,
                name: r.name,
                native_id: i64::try_from(r.id).ok(),
            })
            .collect();
        Ok(Reach {
            repositories: out,
            unresolved: Vec::new(),
            exclusive: false,
        })
    }

    async fn issues_page(
        &self,
        repo: &RepoRef,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<IssueNode>, SourceError> {
        let read_at = OffsetDateTime::now_utc();
        let read = self
            .client
            .issues_page(&repo.owner, &repo.name, first, after)
            .await
            .map_err(source_error)?;
        listing_page(read, read_at, issue_node)
    }

    async fn pull_requests_page(
        &self,
        repo: &RepoRef,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<PullRequestNode>, SourceError> {
        let read_at = OffsetDateTime::now_utc();
        let read = self
            .client
            .pull_requests_page(&repo.owner, &repo.name, first, after)
            .await
            .map_err(source_error)?;
        listing_page(read, read_at, pull_request_node)
    }

    async fn issue(
        &self,
        repo: &RepoRef,
        number: i32,
    ) -> Result<Option<Page<IssueNode>>, SourceError> {
        let read_at = OffsetDateTime::now_utc();
        let read = self
            .client
            .issue(&repo.owner, &repo.name, number)
            .await
            .map_err(source_error)?;
        item_page(read, read_at, "issue", issue_node)
    }

    async fn pull_request(
        &self,
        repo: &RepoRef,
        number: i32,
    ) -> Result<Option<Page<PullRequestNode>>, SourceError> {
        let read_at = OffsetDateTime::now_utc();
        let read = self
            .client
            .pull_request(&repo.owner, &repo.name, number)
            .await
            .map_err(source_error)?;
        item_page(read, read_at, "pullRequest", pull_request_node)
    }
}

/// An issue as the mirror stores it, with what was read under it; `None` without a native id.
fn issue_node(n: &queries::IssueNode) -> Option<(IssueNode, Conversation)> {
    let node = IssueNode {
        fields: item_fields!(n)?,
        state_reason: n.state_reason.as_ref().map(lower),
    };
    let conversation = Conversation {
        comments: Some(comments(&n.comments)),
        ..Conversation::default()
    };
    Some((node, conversation))
}

/// A pull request as the mirror stores it, with what was read under it.
fn pull_request_node(n: &queries::PullRequestNode) -> Option<(PullRequestNode, Conversation)> {
    let node = PullRequestNode {
        fields: item_fields!(n)?,
        draft: Some(n.is_draft),
        review_count: n.reviews.as_ref().map(|r| r.total_count),
        head_ref: Some(n.head_ref_name.clone()),
        head_sha: Some(n.head_ref_oid.0.clone()),
        base_ref: Some(n.base_ref_name.clone()),
        merged_at: n.merged_at.as_ref().map(|t| t.0),
    };
    Some((node, pull_request_conversation(n)))
}

#[cfg(test)]
mod tests {
    use super::lower;
    use github_client::queries::{IssueStateReason, LockReason, PullRequestState};

    #[test]
    fn enum_values_are_stored_in_snake_case() {
        assert_eq!(lower(&PullRequestState::Merged), "merged");
        assert_eq!(lower(&IssueStateReason::NotPlanned), "not_planned");
        assert_eq!(lower(&LockReason::TooHeated), "too_heated");
        assert_eq!(lower(&LockReason::Other("SOME_NEW".into())), "some_new");
    }
}
