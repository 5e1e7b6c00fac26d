//! The client: one page per call, the budget checked before and recorded after, retries by
//! policy.
//!
//! Pagination belongs to the caller (gitlab-sync decides when a listing is complete), so every
//! listing call returns one page with everything needed to judge it: the count, `pageInfo` or
//! the raw paging headers, and the GraphQL errors with their paths.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cynic::{Operation, QueryBuilder};
use lifecycle_core::gitlab::paging::{OffsetListing, OffsetPageHeaders};
use reqwest::header::{ACCEPT, HeaderMap, LOCATION};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use vendor_http::egress::Egress;

use crate::budget::{Budget, BudgetStop, Ledger, RateLimit};
use crate::error::{Error, GraphqlError, PathSegment};
use crate::queries::{
    Discussion, DiscussionPageVariables, GroupNode, GroupPageVariables, GroupPathVariables,
    GroupProjectCount, GroupProjects, GroupSubgroups, IssueNode, MergeRequestDiscussions,
    MergeRequestNode, MergeRequestReadiness, MergeRequestReviewers, PageInfo, ProjectById,
    ProjectByIdVariables, ProjectIssue, ProjectIssues, ProjectItemVariables, ProjectMergeRequest,
    ProjectMergeRequests, ProjectNode, ProjectPageVariables, ReviewerConnection,
    ReviewerPageVariables, Time,
};
use crate::rest::{
    GroupHook, GroupHooksPage, MergeRequestApprovals, MessageBody, NewGroupHook, Note, NoteParent,
    NotesPage, PageHeaders, RestMergeRequest, RestProject,
};
use crate::retry::RetryPolicy;

/// The largest page GitLab serves (GraphQL `first` and REST `per_page`).
pub const MAX_PAGE_SIZE: u32 = 100;
/// The largest answer the client reads by default.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Where and how to talk to GitLab.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The instance: `https://gitlab.com`, a self-managed host, or the simulator's URL.
    pub base_url: String,
    /// Sent as User-Agent.
    pub user_agent: String,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries of 5xx, 429 and transport failures.
    pub retry: RetryPolicy,
    /// The largest answer read; a larger one fails with [`Error::TooLarge`].
    pub max_response_bytes: usize,
    /// Where calls may connect: public addresses only unless the operator allows more; a call
    /// elsewhere fails with [`Error::Unreachable`].
    pub egress: Egress,
}

impl ClientConfig {
    /// Defaults for the instance at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
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
}

/// One GraphQL page of a listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// What GitLab says the full listing holds; `None` where the connection has no count
    /// (subgroups).
    pub count: Option<u32>,
    /// Cursor state: whether GitLab says more follows, and the cursor for it.
    pub page_info: PageInfo,
    /// The items; `None` where GitLab failed to resolve one (its error is in `errors`).
    pub nodes: Vec<Option<T>>,
    /// GraphQL errors that left the rest of the page usable.
    pub errors: Vec<GraphqlError>,
    /// When we asked (our clock): the page's observation time.
    pub fetched_at: OffsetDateTime,
    /// The project a project listing (issues, merge requests) was read from, as GitLab
    /// answered it; `None` for other listings.
    pub project: Option<PageProject>,
}

/// The project a listing page names: its global id and full path now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageProject {
    /// `gid://gitlab/Project/<id>`.
    pub id: String,
    /// `group/subgroup/project`.
    pub full_path: String,
}

impl<T> Page<T> {
    /// Whether the page came back whole: no errors and no unresolved item.
    pub fn is_whole(&self) -> bool {
        self.errors.is_empty() && self.nodes.iter().all(Option::is_some)
    }

    /// Whether `nodes[index].field` is unknown: an error sits at, above or below it (a field
    /// error nulls the field, and an error at the node or the listing covers every field).
    // Partial metadata: each field is judged at its own error path, siblings stay known.
    pub fn field_unknown(&self, index: usize, field: &str) -> bool {
        self.errors.iter().any(|e| match e.node_index() {
            Some(i) => i == index && e.node_fields().first().is_none_or(|f| *f == field),
            // An error on the listing itself, not inside one node, covers them all.
            None => true,
        })
    }
}

/// What a whole listing read when it could not be read whole.
#[derive(Debug)]
pub struct PartialListing<T> {
    /// What the pages that answered listed.
    pub items: Vec<T>,
    /// Why the listing is not whole.
    pub why: String,
    /// The failed pages' errors, in page order.
    pub failures: Vec<Error>,
}

/// A GitLab API client for one token.
///
/// Clones share the connection pool, the token and the rate-limit ledger;
/// [`GitlabClient::with_budget`] gives a clone its own floor.
#[derive(Debug, Clone)]
pub struct GitlabClient {
    shared: Arc<Shared>,
    budget: Budget,
}

struct Shared {
    http: reqwest::Client,
    egress: Egress,
    base_url: String,
    retry: RetryPolicy,
    max_response_bytes: usize,
    token: String,
    ledger: Mutex<Ledger>,
    last_stop: Mutex<Option<BudgetStop>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token never reaches logs.
        f.debug_struct("Shared")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl GitlabClient {
    /// A client for `config`'s instance acting with `token` (personal, group or OAuth), with no
    /// budget floor.
    pub fn new(config: &ClientConfig, token: impl Into<String>) -> Result<Self, Error> {
        let builder = reqwest::Client::builder()
            .user_agent(&config.user_agent)
            .timeout(config.timeout)
            // A redirect would carry the token to wherever it points: never followed.
            .redirect(reqwest::redirect::Policy::none());
        let http = config
            .egress
            .apply(builder)
            .build()
            .map_err(Error::Transport)?;
        Ok(Self {
            shared: Arc::new(Shared {
                http,
                egress: config.egress.clone(),
                base_url: config.base_url.clone(),
                retry: config.retry,
                max_response_bytes: config.max_response_bytes,
                token: token.into(),
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

    /// Reports what GitLab says is left of this client's pool (and of its clones') as
    /// `vendor_quota_remaining{vendor="gitlab", resource="api", connection}`; see
    /// [`vendor_http::quota`].
    pub fn report_quota_as(&self, connection: impl Into<String>) {
        lock(&self.shared.ledger).quota =
            Some(vendor_http::quota::QuotaGauge::new("gitlab", connection));
    }

    /// Why the last call was refused by the budget, if one was.
    pub fn last_budget_stop(&self) -> Option<BudgetStop> {
        lock(&self.shared.last_stop).clone()
    }

    /// What GitLab's `RateLimit-*` headers last said.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        lock(&self.shared.ledger).window()
    }

    /// One page of every group below `group` (all levels).
    #[tracing::instrument(skip(self))]
    pub async fn subgroups_page(
        &self,
        group: &str,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<GroupNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = GroupSubgroups::build(group_variables(group, first, after));
        let (data, errors) = self.graphql("GroupSubgroups", op).await?;
        let group = data.group.ok_or_else(|| missing("group", group, &errors))?;
        let connection = group.descendant_groups.ok_or_else(|| {
            missing(
                "descendantGroups of",
                &group.full_path.into_inner(),
                &errors,
            )
        })?;
        Ok(Page {
            count: None,
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: None,
        })
    }

    /// One page of `group`'s direct projects, with GitLab's count of them.
    #[tracing::instrument(skip(self))]
    pub async fn group_projects_page(
        &self,
        group: &str,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<ProjectNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = GroupProjects::build(group_variables(group, first, after));
        let (data, errors) = self.graphql("GroupProjects", op).await?;
        let connection = data
            .group
            .ok_or_else(|| missing("group", group, &errors))?
            .projects;
        Ok(Page {
            count: Some(count("GroupProjects", connection.count)?),
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: None,
        })
    }

    /// How many projects `group` holds with all its subgroups.
    #[tracing::instrument(skip(self))]
    pub async fn group_project_count(&self, group: &str) -> Result<u32, Error> {
        let op = GroupProjectCount::build(GroupPathVariables {
            full_path: cynic::Id::new(group),
        });
        let (data, errors) = self.graphql("GroupProjectCount", op).await?;
        let group = data.group.ok_or_else(|| missing("group", group, &errors))?;
        count("GroupProjectCount", group.projects.count)
    }

    /// A project by native id; `None` when no project with that id is visible.
    #[tracing::instrument(skip(self))]
    pub async fn project_by_id(&self, id: u64) -> Result<Option<ProjectNode>, Error> {
        let gid = format!("gid://gitlab/Project/{id}");
        let op = ProjectById::build(ProjectByIdVariables {
            ids: Some(vec![cynic::Id::new(&gid)]),
        });
        let (data, errors) = self.graphql("ProjectById", op).await?;
        let nodes = data.projects.and_then(|p| p.nodes);
        // An error with no project is a failed read, not an absent project.
        if !errors.is_empty() && nodes.as_ref().is_none_or(|n| n.iter().all(Option::is_none)) {
            return Err(Error::Graphql { errors });
        }
        Ok(nodes
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .find(|p| p.id.inner() == gid))
    }

    /// One page of `project`'s issues updated after `updated_after`, least recently updated
    /// first.
    #[tracing::instrument(skip(self))]
    pub async fn issues_page(
        &self,
        project: &str,
        updated_after: Option<OffsetDateTime>,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<IssueNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = ProjectIssues::build(project_variables(project, updated_after, first, after));
        let (data, errors) = self.graphql("ProjectIssues", op).await?;
        let project = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?;
        let full_path = project.full_path.into_inner();
        let named = PageProject {
            id: project.id.into_inner(),
            full_path: full_path.clone(),
        };
        let connection = project
            .issues
            .ok_or_else(|| missing("issues of", &full_path, &errors))?;
        Ok(Page {
            count: Some(count("ProjectIssues", connection.count)?),
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: Some(named),
        })
    }

    /// One page of `project`'s merge requests updated after `updated_after`, least recently
    /// updated first.
    #[tracing::instrument(skip(self))]
    pub async fn merge_requests_page(
        &self,
        project: &str,
        updated_after: Option<OffsetDateTime>,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<MergeRequestNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op =
            ProjectMergeRequests::build(project_variables(project, updated_after, first, after));
        let (data, errors) = self.graphql("ProjectMergeRequests", op).await?;
        let project = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?;
        let full_path = project.full_path.into_inner();
        let named = PageProject {
            id: project.id.into_inner(),
            full_path: full_path.clone(),
        };
        let connection = project
            .merge_requests
            .ok_or_else(|| missing("mergeRequests of", &full_path, &errors))?;
        Ok(Page {
            count: Some(count("ProjectMergeRequests", connection.count)?),
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: Some(named),
        })
    }

    /// One issue of `project` by number, as a page of at most one (the listing's shape, so it
    /// is written as a listed node is).
    #[tracing::instrument(skip(self))]
    pub async fn issue_by_iid(&self, project: &str, iid: u64) -> Result<Page<IssueNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = ProjectIssue::build(item_variables(project, iid));
        let (data, errors) = self.graphql("ProjectIssue", op).await?;
        let project = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?;
        let full_path = project.full_path.into_inner();
        let named = PageProject {
            id: project.id.into_inner(),
            full_path: full_path.clone(),
        };
        let connection = project
            .issues
            .ok_or_else(|| missing("issues of", &full_path, &errors))?;
        Ok(Page {
            count: Some(count("ProjectIssue", connection.count)?),
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: Some(named),
        })
    }

    /// One merge request of `project` by number, as a page of at most one.
    #[tracing::instrument(skip(self))]
    pub async fn merge_request_by_iid(
        &self,
        project: &str,
        iid: u64,
    ) -> Result<Page<MergeRequestNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = ProjectMergeRequest::build(item_variables(project, iid));
        let (data, errors) = self.graphql("ProjectMergeRequest", op).await?;
        let project = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?;
        let full_path = project.full_path.into_inner();
        let named = PageProject {
            id: project.id.into_inner(),
            full_path: full_path.clone(),
        };
        let connection = project
            .merge_requests
            .ok_or_else(|| missing("mergeRequests of", &full_path, &errors))?;
        Ok(Page {
            count: Some(count("ProjectMergeRequest", connection.count)?),
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: Some(named),
        })
    }

    /// One merge request's readiness (`MergeRequestReadiness`), as a page of at most one: its
    /// errors' paths are re-rooted at `nodes.0`, so [`Page::field_unknown`]`(0, field)` judges
    /// each field as on a listing page. An error at the merge request itself leaves no node.
    #[tracing::instrument(skip(self))]
    pub async fn merge_request_readiness(
        &self,
        project: &str,
        iid: u64,
    ) -> Result<Page<MergeRequestNode>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = MergeRequestReadiness::build(item_variables(project, iid));
        let (data, errors) = self.graphql("MergeRequestReadiness", op).await?;
        let project = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?;
        let named = PageProject {
            id: project.id.into_inner(),
            full_path: project.full_path.into_inner(),
        };
        let errors = errors.into_iter().map(as_node_zero).collect();
        Ok(Page {
            count: Some(u32::from(project.merge_request.is_some())),
            page_info: PageInfo {
                has_next_page: false,
                end_cursor: None,
            },
            nodes: vec![project.merge_request],
            errors,
            fetched_at,
            project: Some(named),
        })
    }

    /// One page of a merge request's reviewers (`MergeRequestReviewers`), to complete a nested
    /// list a node left with `hasNextPage`; the errors as GitLab sent them.
    #[tracing::instrument(skip(self))]
    pub async fn merge_request_reviewers_page(
        &self,
        project: &str,
        iid: u64,
        first: u32,
        after: Option<&str>,
    ) -> Result<(Option<ReviewerConnection>, Vec<GraphqlError>), Error> {
        let op = MergeRequestReviewers::build(ReviewerPageVariables {
            full_path: cynic::Id::new(project),
            iid: iid.to_string(),
            first: first.clamp(1, MAX_PAGE_SIZE) as i32,
            after: after.map(str::to_owned),
        });
        let (data, errors) = self.graphql("MergeRequestReviewers", op).await?;
        let reviewers = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?
            .merge_request
            .ok_or_else(|| missing("mergeRequest of", &format!("{project}!{iid}"), &errors))?
            .reviewers;
        Ok((reviewers, errors))
    }

    /// A merge request's standing approvals over REST (`GET
    /// /projects/{id}/merge_requests/{iid}/approvals`), each with `approved_at` where GitLab
    /// names it; `None` on 404.
    #[tracing::instrument(skip(self))]
    pub async fn merge_request_approvals(
        &self,
        project_id: u64,
        iid: u64,
    ) -> Result<Option<MergeRequestApprovals>, Error> {
        let url = self.api(&format!(
            "projects/{project_id}/merge_requests/{iid}/approvals"
        ));
        self.rest_optional("GET merge request approvals", &url)
            .await
    }

    /// One page of a merge request's discussions (threads) with their notes, diff notes with
    /// their positions included, oldest first. A discussion whose notes continue past GitLab's
    /// nested page says so (`notes.page_info.has_next_page`); errors keep their paths
    /// (`...discussions.nodes[i]...`, see [`Page::field_unknown`]).
    #[tracing::instrument(skip(self))]
    pub async fn merge_request_discussions_page(
        &self,
        project: &str,
        iid: u64,
        first: u32,
        after: Option<&str>,
    ) -> Result<Page<Discussion>, Error> {
        let fetched_at = OffsetDateTime::now_utc();
        let op = MergeRequestDiscussions::build(DiscussionPageVariables {
            full_path: cynic::Id::new(project),
            iid: iid.to_string(),
            first: first.clamp(1, MAX_PAGE_SIZE) as i32,
            after: after.map(str::to_owned),
        });
        let (data, errors) = self.graphql("MergeRequestDiscussions", op).await?;
        let connection = data
            .project
            .ok_or_else(|| missing("project", project, &errors))?
            .merge_request
            .ok_or_else(|| missing("mergeRequest of", &format!("{project}!{iid}"), &errors))?
            .discussions;
        Ok(Page {
            count: None,
            page_info: connection.page_info,
            nodes: connection.nodes.unwrap_or_default(),
            errors,
            fetched_at,
            project: None,
        })
    }

    /// One page of a parent's notes from the flat notes endpoint (user, system and diff notes),
    /// oldest first, with the paging headers as GitLab sent them.
    #[tracing::instrument(skip(self))]
    pub async fn notes_page(
        &self,
        parent: NoteParent,
        page: u32,
        per_page: u32,
    ) -> Result<NotesPage, Error> {
        let url = format!(
            "{}?sort=asc&order_by=created_at&page={}&per_page={}",
            self.api(&parent.notes_path()),
            page.max(1),
            per_page.clamp(1, MAX_PAGE_SIZE)
        );
        let (headers, body) = self
            .rest("GET notes", Method::GET, &url, None::<&()>)
            .await?;
        let notes: Vec<Note> = decode_json("GET notes", &body)?;
        Ok(NotesPage {
            notes,
            headers: PageHeaders::from_map(&headers),
        })
    }

    /// One note by id; `None` when GitLab answers 404 (the note is gone).
    #[tracing::instrument(skip(self))]
    pub async fn note(&self, parent: NoteParent, note_id: u64) -> Result<Option<Note>, Error> {
        let url = self.api(&format!("{}/{note_id}", parent.notes_path()));
        self.rest_optional("GET note", &url).await
    }

    /// A project by native id over REST; `None` on 404.
    #[tracing::instrument(skip(self))]
    pub async fn project(&self, id: u64) -> Result<Option<RestProject>, Error> {
        let url = self.api(&format!("projects/{id}"));
        self.rest_optional("GET project", &url).await
    }

    /// A merge request by project id and number over REST (its `closed_at`); `None` on 404.
    #[tracing::instrument(skip(self))]
    pub async fn merge_request(
        &self,
        project_id: u64,
        iid: u64,
    ) -> Result<Option<RestMergeRequest>, Error> {
        let url = self.api(&format!("projects/{project_id}/merge_requests/{iid}"));
        self.rest_optional("GET merge request", &url).await
    }

    /// One page of a group's hooks with the paging headers as GitLab sent them (GitLab pages
    /// this list like any other: a group can hold more hooks than one page).
    #[tracing::instrument(skip(self))]
    pub async fn group_hooks_page(
        &self,
        group_id: u64,
        page: u32,
        per_page: u32,
    ) -> Result<GroupHooksPage, Error> {
        let url = format!(
            "{}?page={}&per_page={}",
            self.api(&format!("groups/{group_id}/hooks")),
            page.max(1),
            per_page.clamp(1, MAX_PAGE_SIZE)
        );
        let (headers, body) = self
            .rest("GET group hooks", Method::GET, &url, None::<&()>)
            .await?;
        Ok(GroupHooksPage {
            hooks: decode_json("GET group hooks", &body)?,
            headers: PageHeaders::from_map(&headers),
        })
    }

    /// A group's hooks read whole: every page, at most `page_cap`, under the offset paging rule
    /// (`lifecycle_core::gitlab::paging`), so a failed or inconsistent page makes the listing
    /// partial instead of silently short. What proves a hook absent or ours needs `Ok`.
    pub async fn all_group_hooks(
        &self,
        group_id: u64,
        page_cap: u32,
    ) -> Result<Vec<GroupHook>, PartialListing<GroupHook>> {
        let mut rule = OffsetListing::new(page_cap.max(1));
        let mut hooks = Vec::new();
        let mut failures = Vec::new();
        while let Some(page) = rule.next_page() {
            match self.group_hooks_page(group_id, page, MAX_PAGE_SIZE).await {
                Ok(listed) => {
                    let h = &listed.headers;
                    rule.accept_page(
                        OffsetPageHeaders::parse(
                            h.page.as_deref(),
                            h.next_page.as_deref(),
                            h.total.as_deref(),
                        ),
                        listed.hooks.iter().map(|hook| hook.id),
                    );
                    hooks.extend(listed.hooks);
                }
                Err(e) => {
                    rule.record_failed_page();
                    failures.push((page, e));
                }
            }
        }
        match rule.finish() {
            Ok(_) => Ok(hooks),
            Err(gap) => Err(PartialListing {
                why: match failures.last() {
                    Some((page, e)) => format!("page {page} failed: {e}"),
                    None => gap.to_string(),
                },
                items: hooks,
                failures: failures.into_iter().map(|(_, e)| e).collect(),
            }),
        }
    }

    /// Creates a group hook. Not retried: a create that timed out may have created the hook,
    /// which the caller finds by listing, never by creating again.
    #[tracing::instrument(skip(self, hook), fields(url = %hook.url))]
    pub async fn create_group_hook(
        &self,
        group_id: u64,
        hook: &NewGroupHook,
    ) -> Result<GroupHook, Error> {
        let url = self.api(&format!("groups/{group_id}/hooks"));
        self.admit("POST group hook")?;
        let (headers, body) = self.send(Method::POST, &url, Some(hook)).await?;
        self.record(&headers);
        decode_json("POST group hook", &body)
    }

    /// Deletes a group hook; `false` when it was already gone (404).
    #[tracing::instrument(skip(self))]
    pub async fn delete_group_hook(&self, group_id: u64, hook_id: u64) -> Result<bool, Error> {
        let url = self.api(&format!("groups/{group_id}/hooks/{hook_id}"));
        match self
            .rest("DELETE group hook", Method::DELETE, &url, None::<&()>)
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::Http { status: 404, .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{path}", self.shared.base_url)
    }

    async fn rest_optional<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        url: &str,
    ) -> Result<Option<T>, Error> {
        match self.rest(operation, Method::GET, url, None::<&()>).await {
            Ok((_, body)) => decode_json(operation, &body).map(Some),
            Err(Error::Http { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Admits a call against the budget, recording the refusal if there is one.
    fn admit(&self, operation: &'static str) -> Result<(), Error> {
        let admitted =
            lock(&self.shared.ledger).admit(operation, self.budget, OffsetDateTime::now_utc());
        admitted.map_err(|stop| {
            tracing::info!(%stop, "GitLab budget reached; call not sent");
            *lock(&self.shared.last_stop) = Some(stop.clone());
            Error::BudgetExhausted(stop)
        })
    }

    /// Records `RateLimit-*` when GitLab sent them (every answer, failures included).
    fn record(&self, headers: &HeaderMap) {
        if let Some(seen) = rate_limit_from(headers) {
            lock(&self.shared.ledger).record(seen);
        }
    }

    /// A REST call with retries; each attempt is admitted by the budget.
    async fn rest<B: Serialize>(
        &self,
        operation: &'static str,
        method: Method,
        url: &str,
        json: Option<&B>,
    ) -> Result<(HeaderMap, Vec<u8>), Error> {
        self.shared
            .retry
            .run(operation, || async {
                self.admit(operation)?;
                let answer = self.send(method.clone(), url, json).await;
                if let Ok((headers, _)) = &answer {
                    // GitLab counts requests: each GraphQL or REST call costs one.
                    vendor_http::record_cost(
                        &tracing::Span::current(),
                        1,
                        vendor_http::header_number(headers, "ratelimit-remaining"),
                    );
                }
                answer
            })
            .await
    }

    /// Sends a GraphQL operation and decodes what can be decoded: the data and the errors that
    /// did not prevent it.
    async fn graphql<Q, V>(
        &self,
        name: &'static str,
        operation: Operation<Q, V>,
    ) -> Result<(Q, Vec<GraphqlError>), Error>
    where
        Q: DeserializeOwned,
        V: Serialize,
    {
        let url = format!("{}/api/graphql", self.shared.base_url);
        let (_, body) = self
            .rest(name, Method::POST, &url, Some(&operation))
            .await?;
        let response: RawGraphqlResponse = decode_json(name, &body)?;
        let errors = response.errors.unwrap_or_default();
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
        match serde_json::from_value(data) {
            Ok(data) => Ok((data, errors)),
            // An error nulled a field the query needs: the errors say why.
            Err(_) if !errors.is_empty() => Err(Error::Graphql { errors }),
            Err(e) => Err(Error::Decode {
                operation: name,
                message: e.to_string(),
            }),
        }
    }

    /// One attempt: authenticate, send, record the rate limit, and turn a failure status into
    /// its error.
    async fn send<B: Serialize>(
        &self,
        method: Method,
        url: &str,
        json: Option<&B>,
    ) -> Result<(HeaderMap, Vec<u8>), Error> {
        self.shared
            .egress
            .check_str(url)
            .map_err(Error::Unreachable)?;
        let mut request = self
            .shared
            .http
            .request(method, url)
            .header(ACCEPT, "application/json")
            .bearer_auth(&self.shared.token);
        if let Some(json) = json {
            request = request.json(json);
        }
        let response = request.send().await.map_err(Error::from_transport)?;
        self.record(response.headers());
        read_success(response, self.shared.max_response_bytes).await
    }
}

#[derive(serde::Deserialize)]
struct RawGraphqlResponse {
    data: Option<serde_json::Value>,
    errors: Option<Vec<GraphqlError>>,
}

/// The headers and body of a 2xx answer, or the error its status means.
async fn read_success(
    response: reqwest::Response,
    max_bytes: usize,
) -> Result<(HeaderMap, Vec<u8>), Error> {
    let status = response.status();
    let headers = response.headers().clone();
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
        .ok()
        .and_then(MessageBody::text)
        .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
    let retry_after = vendor_http::retry_after(&headers);
    Err(match status {
        StatusCode::UNAUTHORIZED => Error::Auth { message },
        StatusCode::TOO_MANY_REQUESTS => Error::RateLimited {
            reset_at: rate_limit_from(&headers).map(|r| r.reset_at),
            retry_after,
            message,
        },
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

/// `RateLimit-Limit`, `-Remaining` and `-Reset` (unix seconds), when all three are sent.
fn rate_limit_from(headers: &HeaderMap) -> Option<RateLimit> {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    Some(RateLimit {
        limit: clamp(vendor_http::header_number::<u64>(
            headers,
            "ratelimit-limit",
        )?),
        remaining: clamp(vendor_http::header_number::<u64>(
            headers,
            "ratelimit-remaining",
        )?),
        reset_at: OffsetDateTime::from_unix_timestamp(
            i64::try_from(vendor_http::header_number::<u64>(
                headers,
                "ratelimit-reset",
            )?)
            .ok()?,
        )
        .ok()?,
    })
}

fn count(operation: &'static str, total: i32) -> Result<u32, Error> {
    u32::try_from(total).map_err(|_| Error::Decode {
        operation,
        message: format!("count is negative: {total}"),
    })
}

fn group_variables(group: &str, first: u32, after: Option<&str>) -> GroupPageVariables {
    GroupPageVariables {
        full_path: cynic::Id::new(group),
        // Bounded to 1..=100, so the cast cannot overflow.
        first: first.clamp(1, MAX_PAGE_SIZE) as i32,
        after: after.map(str::to_owned),
    }
}

fn item_variables(project: &str, iid: u64) -> ProjectItemVariables {
    ProjectItemVariables {
        full_path: cynic::Id::new(project),
        iid: iid.to_string(),
    }
}

fn project_variables(
    project: &str,
    updated_after: Option<OffsetDateTime>,
    first: u32,
    after: Option<&str>,
) -> ProjectPageVariables {
    ProjectPageVariables {
        full_path: cynic::Id::new(project),
        updated_after: updated_after.map(Time),
        first: first.clamp(1, MAX_PAGE_SIZE) as i32,
        after: after.map(str::to_owned),
    }
}

/// A null object: GitLab's errors when it sent some, else one saying what is missing.
/// A readiness read's error re-rooted as a page's: `project.mergeRequest.<field>...` becomes
/// `project.mergeRequest.nodes.0.<field>...`.
fn as_node_zero(mut error: GraphqlError) -> GraphqlError {
    let at = error
        .path
        .iter()
        .position(|s| matches!(s, PathSegment::Field(f) if f == "mergeRequest"));
    if let Some(at) = at
        && at + 1 < error.path.len()
    {
        error.path.splice(
            at + 1..at + 1,
            [PathSegment::Field("nodes".into()), PathSegment::Index(0)],
        );
    }
    error
}

fn missing(what: &str, path: &str, errors: &[GraphqlError]) -> Error {
    if !errors.is_empty() {
        return Error::Graphql {
            errors: errors.to_vec(),
        };
    }
    Error::Graphql {
        errors: vec![GraphqlError {
            message: format!("{what} {path} is null (gone, or not visible to this token)"),
            path: vec![PathSegment::Field(
                what.split(' ').next().unwrap_or(what).to_owned(),
            )],
        }],
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded values stay consistent at every await-free step.
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

mod members;
pub use members::{GroupMember, GroupMembersPage};
