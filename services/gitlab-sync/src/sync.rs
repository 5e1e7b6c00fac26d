//! GitLab as the sync engine's vendor: a connection's scopes are its project monitors (found by
//! discovery, matched by native id), each holding issues and merge requests listed by
//! `updatedAfter`, least recently updated first, one GraphQL page at a time, and written
//! forward-only through [`crate::mirror`]. The engine owns the jobs, passes and the deletion
//! gate; GitLab's own plan per listing is here:
//!
//! - INITIAL and RECONCILIATION list each class whole (only a RECONCILIATION sweeps); a scheduled
//!   RECONCILIATION of a project reconciled within the cooldown reads only what changed since
//!   its watermark instead (hooks it missed), sweeping nothing.
//! - The watermark is the newest `updatedAt` a clean listing read, held back to the oldest
//!   `updatedAt` of an item whose notes the pass could not read whole; it moves only after a
//!   clean listing and the notes pass that follows it, never back, and the next filtered read
//!   starts one second before it.
//! - BACKFILL: a request marks the connection's projects pending and takes one batch of pages of
//!   each; the scheduled cycle drains the rest of every pending project whose last batch is
//!   older than the backfill cooldown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use gitlab_client::{GitlabClient, IssueNode, MergeRequestNode, MergeRequestState, Page};
use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::ListingPage;
use scm_mirror::items::ItemClass;
use scm_mirror::repository::RepoHeader;
use scm_mirror::scope::MonitoredRepository;
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::listing_state::{self, BatchEnd, ListingState, ScopeKey};
use sync_engine::{JobControl, Listed, ListingEnd, ListingPlan, PageCheck, Pass, Scopes, Vendor};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::mirror::{self, GitlabNode, gid_number, split_path};
use crate::source::{ClientFactory, GitlabSource, ReadFailure};

/// The overlap of a filtered read before the watermark: GitLab's times have second precision,
/// so an item updated in the watermark's second may not have been read yet.
pub const WATERMARK_OVERLAP: time::Duration = time::Duration::seconds(1);

/// How BACKFILL batches run.
#[derive(Debug, Clone, Copy)]
pub struct BackfillBatches {
    /// Pages of each class one request takes per pending project.
    pub pages: u32,
    /// The scheduled cycle leaves a project alone this long after its last batch.
    pub cooldown: Duration,
}

/// GitLab's side of the sync engine.
pub struct GitlabVendor {
    pub pool: PgPool,
    pub factory: ClientFactory,
    pub backfill: BackfillBatches,
    /// Discovery, the connection's consumer and its group hook before INITIAL and every
    /// RECONCILIATION; `None` runs jobs over the monitors as they stand (tests of the jobs alone).
    pub activator: Option<crate::activation::Activator>,
}

/// A project monitor as a pass walks it: the monitored repository every forge shares, and what
/// GitLab's listings carry beside it.
#[derive(Debug, Clone)]
pub struct Project {
    pub(crate) repo: MonitoredRepository,
    /// The current listing's `updatedAfter`, when it is filtered.
    updated_after: Option<OffsetDateTime>,
    /// The newest `updatedAt` the current listing wrote.
    newest: Option<OffsetDateTime>,
    /// The oldest `updatedAt` of a merge request whose close time the current listing failed
    /// to read: its watermark stays at or before it.
    close_unread: Option<OffsetDateTime>,
    /// The issues and merge requests this pass read, whose notes follow ([`crate::notes`]).
    pub(crate) touched: Vec<crate::notes::Touched>,
    /// The watermark each class's clean listing earned, written after the notes pass.
    earned: Vec<(ItemClass, OffsetDateTime)>,
}

impl From<MonitoredRepository> for Project {
    fn from(repo: MonitoredRepository) -> Self {
        Project {
            repo,
            updated_after: None,
            newest: None,
            close_unread: None,
            touched: Vec::new(),
            earned: Vec::new(),
        }
    }
}

impl fmt::Display for Project {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.repo.fmt(f)
    }
}

/// A page of one class, waiting to be written.
pub enum ListedPage {
    Issues(Page<IssueNode>),
    MergeRequests(Page<MergeRequestNode>),
}

/// One page with the project it was read from.
pub struct ProjectPage {
    /// The project's native id as GitLab answered it.
    pub project_id: Option<i64>,
    /// Its full path now.
    pub project_path: String,
    pub page: ListedPage,
    /// Close times read over REST for the page's closed merge requests, by native id.
    pub close_times: BTreeMap<i64, OffsetDateTime>,
    /// The oldest `updatedAt` of a closed merge request whose close time failed to read.
    pub close_unread: Option<OffsetDateTime>,
}

impl ProjectPage {
    fn of(page: ListedPage, asked: String) -> Self {
        let named = match &page {
            ListedPage::Issues(p) => p.project.clone(),
            ListedPage::MergeRequests(p) => p.project.clone(),
        };
        ProjectPage {
            project_id: named.as_ref().and_then(|p| gid_number(&p.id)),
            project_path: named.map_or(asked, |p| p.full_path),
            page,
            close_times: BTreeMap::new(),
            close_unread: None,
        }
    }
}

fn listing_of<T: GitlabNode>(page: &Page<T>) -> ListingPage<i64> {
    ListingPage {
        // A node GitLab failed to resolve has no id: the page is errored, so the listing is
        // incomplete whatever else it says.
        ids: page
            .nodes
            .iter()
            .flatten()
            .filter_map(GitlabNode::native_id)
            .collect(),
        has_next_page: page.page_info.has_next_page,
        end_cursor: page.page_info.end_cursor.clone(),
        total_count: page.count.map(u64::from),
    }
}

fn errored<T: GitlabNode>(page: &Page<T>) -> bool {
    !page.is_whole() || page.nodes.iter().flatten().any(|n| n.native_id().is_none())
}

impl Listed<i64> for ProjectPage {
    fn listing(&self) -> ListingPage<i64> {
        match &self.page {
            ListedPage::Issues(page) => listing_of(page),
            ListedPage::MergeRequests(page) => listing_of(page),
        }
    }

    fn errored(&self) -> bool {
        match &self.page {
            ListedPage::Issues(page) => errored(page),
            ListedPage::MergeRequests(page) => errored(page),
        }
    }
}

impl GitlabVendor {
    /// Writes the watermarks the project's clean listings earned in this pass, after its notes
    /// pass. Notes-held watermark: a class's watermark goes no further than the oldest stored
    /// `updatedAt` of its items whose notes were not read whole (`unread`), so the next filtered
    /// read (from a second before it) reads them again; it never moves back.
    async fn advance_watermarks(
        &self,
        project: &mut Project,
        unread: &[crate::notes::Parent],
    ) -> Result<(), sqlx::Error> {
        use crate::notes::Parent;
        let earned = std::mem::take(&mut project.earned);
        let Some(repository_id) = project.repo.repository_id else {
            return Ok(());
        };
        for (class, newest) in earned {
            let rows: Vec<Uuid> = unread
                .iter()
                .filter_map(|p| match (class, *p) {
                    (ItemClass::Issue, Parent::Issue { row, .. })
                    | (ItemClass::PullRequest, Parent::MergeRequest { row, .. }) => Some(row),
                    _ => None,
                })
                .collect();
            let held: Option<OffsetDateTime> = if rows.is_empty() {
                None
            } else {
                let sql = format!(
                    "SELECT min(upstream_updated_at) FROM {} WHERE id = ANY($1)",
                    class.table()
                );
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(&rows)
                    .fetch_one(&self.pool)
                    .await?
            };
            let watermark = listing_state::held_back(newest, held);
            if held.is_some() {
                tracing::info!(project = %project, class = Self::class_name(class), %watermark, %newest, "notes not read whole hold the watermark back");
            }
            listing_state::advance_watermark(
                &self.pool,
                ScopeKey::repository(repository_id),
                class.table(),
                watermark,
            )
            .await?;
        }
        Ok(())
    }

    /// Reads over REST the close time of each merge request `page` reports closed without a
    /// merge whose row stores none yet (a missing row stores none).
    // GraphQL's closedAt is newer than the oldest GitLab the contract serves, so no query selects
    // it. A stored close is kept by the write, so a request's close is read until it is known and
    // the calls are bounded by the page's closed requests without one. A failed read leaves the
    // close unknown and the page whole; the reads of the page stop there.
    async fn read_close_times(
        &self,
        client: &GitlabClient,
        project: &Project,
        page: &mut ProjectPage,
    ) {
        let ListedPage::MergeRequests(listed) = &page.page else {
            return;
        };
        // A page of another project is skipped by `check_page`: nothing of it is read.
        let Some(project_id) = page
            .project_id
            .filter(|id| project.repo.native_id.is_none_or(|n| n == *id))
        else {
            return;
        };
        let closed: Vec<(i64, u64, OffsetDateTime)> = listed
            .nodes
            .iter()
            .flatten()
            .filter(|n| n.state == MergeRequestState::Closed)
            .filter_map(|n| Some((n.native_id()?, n.iid.parse().ok()?, n.updated_at.0)))
            .collect();
        if closed.is_empty() {
            return;
        }
        let stored: BTreeSet<i64> = match project.repo.repository_id {
            None => BTreeSet::new(),
            Some(repository_id) => {
                let ids: Vec<i64> = closed.iter().map(|(id, ..)| *id).collect();
                let found = sqlx::query_scalar(
                    "SELECT native_id FROM pull_request
                      WHERE repository_id = $1 AND native_id = ANY($2)
                        AND state = 'closed' AND closed_at IS NOT NULL",
                )
                .bind(repository_id)
                .bind(&ids)
                .fetch_all(&self.pool)
                .await;
                match found {
                    Ok(found) => found.into_iter().collect(),
                    Err(error) => {
                        tracing::warn!(project = %project, %error, "stored close times unreadable; closes left unknown");
                        page.close_unread = closed.iter().map(|(.., at)| *at).min();
                        return;
                    }
                }
            }
        };
        let mut failed = false;
        let unread = closed.into_iter().filter(|(id, ..)| !stored.contains(id));
        for (native_id, iid, updated_at) in unread {
            let read = match failed {
                true => None,
                false => match client.merge_request(project_id as u64, iid).await {
                    Ok(found) => Some(found),
                    Err(error) => {
                        tracing::warn!(project = %project, iid, %error, "merge request close time unreadable; left unknown");
                        failed = true;
                        None
                    }
                },
            };
            match read {
                // Gone, or no longer closed: a later listing reads what it is now.
                Some(found) => {
                    if let Some(at) = found.and_then(|mr| mr.close_time()) {
                        page.close_times.insert(native_id, at);
                    }
                }
                None => {
                    page.close_unread =
                        Some(page.close_unread.map_or(updated_at, |u| u.min(updated_at)));
                }
            }
        }
    }

    async fn state(
        &self,
        repository_id: Uuid,
        class: ItemClass,
    ) -> Result<ListingState, sqlx::Error> {
        listing_state::load(
            &self.pool,
            ScopeKey::repository(repository_id),
            class.table(),
        )
        .await
    }

    /// A BACKFILL's plan for one class of a project.
    async fn backfill_plan(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        class: ItemClass,
    ) -> Result<ListingPlan, sqlx::Error> {
        let job = pass.job;
        let Some(repository_id) = project
            .repo
            .resolve(&self.pool, pass.provider_instance_id)
            .await?
        else {
            // Never mirrored: a request starts it from the first page (the row appears with it).
            return Ok(if job.scheduled {
                ListingPlan::Skip
            } else {
                ListingPlan::Batch {
                    after: None,
                    pages: self.backfill.pages,
                }
            });
        };
        let state = self.state(repository_id, class).await?;
        if job.scheduled {
            // The cycle drains what requests left pending, once a project's batch has cooled.
            let cooled = state
                .backfill_batch_at
                .is_none_or(|at| OffsetDateTime::now_utc() - at >= self.backfill.cooldown);
            return Ok(if state.backfill_pending && cooled {
                ListingPlan::Batch {
                    after: state.backfill_cursor,
                    pages: u32::MAX,
                }
            } else {
                ListingPlan::Skip
            });
        }
        // One batch per pending project per request: a later pass of the same request takes
        // no second one.
        if state.backfill_batch_job == Some(job.id) {
            return Ok(ListingPlan::Skip);
        }
        if !state.backfill_pending {
            if state.backfill_requested_by == Some(job.id) {
                // Finished within this request.
                return Ok(ListingPlan::Skip);
            }
            listing_state::request_backfill(
                &self.pool,
                ScopeKey::repository(repository_id),
                class.table(),
                job.id,
            )
            .await?;
            return Ok(ListingPlan::Batch {
                after: None,
                pages: self.backfill.pages,
            });
        }
        Ok(ListingPlan::Batch {
            after: state.backfill_cursor,
            pages: self.backfill.pages,
        })
    }
}

#[async_trait::async_trait]
impl Vendor for GitlabVendor {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
    const SCOPES: &'static str = "projects";
    const CLASSES: &'static [ItemClass] = &[ItemClass::Issue, ItemClass::PullRequest];

    type Source = GitlabSource;
    type Scope = Project;
    type Class = ItemClass;
    type Id = i64;

    // Activation order: discovery, then the consumer, then the hook, before INITIAL is queued;
    // every RECONCILIATION retries what an earlier activation left unfinished.
    async fn activate(
        &self,
        conn: &store::entity::connection::Model,
        moment: sync_engine::Moment,
    ) -> anyhow::Result<()> {
        match &self.activator {
            Some(activator) => activator.activate(conn, moment).await.map(|_| ()),
            None => Ok(()),
        }
    }
    type Page = ProjectPage;
    type Error = ReadFailure;

    fn class_name(class: ItemClass) -> &'static str {
        match class {
            ItemClass::Issue => "issue",
            ItemClass::PullRequest => "merge_request",
        }
    }

    async fn source(&self, conn: &connection::Model) -> anyhow::Result<GitlabSource> {
        self.factory.source(conn).await
    }

    /// The connection's project monitors, as discovery (with the connection's own token)
    /// recorded them; a project is matched by its native id once known.
    async fn scopes(
        &self,
        pass: &Pass<'_>,
        _source: &GitlabSource,
    ) -> Result<Result<Scopes<Project>, ReadFailure>, sqlx::Error> {
        let monitors = scm_mirror::scope::monitors_of(&self.pool, pass.job.connection_id).await?;
        Ok(Ok(Scopes {
            scopes: monitors.into_iter().map(Project::from).collect(),
            unresolved: None,
        }))
    }

    async fn plan_listing(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        class: ItemClass,
        cooling: bool,
    ) -> Result<ListingPlan, sqlx::Error> {
        project.updated_after = None;
        project.newest = None;
        project.close_unread = None;
        // Known before the pages are read: which closes are stored decides which are read.
        project
            .repo
            .resolve(&self.pool, pass.provider_instance_id)
            .await?;
        match pass.job.job_type {
            SyncJobType::Backfill => self.backfill_plan(pass, project, class).await,
            SyncJobType::Reconciliation if cooling => {
                // Within the cooldown: what changed since the watermark (missed hooks).
                let watermark = match project.repo.repository_id {
                    Some(id) => self.state(id, class).await?.watermark,
                    None => None,
                };
                project.updated_after = watermark.map(|w| w - WATERMARK_OVERLAP);
                Ok(ListingPlan::Filtered)
            }
            // INITIAL never sweeps: the engine's gate lets only a RECONCILIATION do that.
            SyncJobType::Initial | SyncJobType::Reconciliation => Ok(ListingPlan::Whole),
        }
    }

    async fn read_page(
        &self,
        source: &GitlabSource,
        project: &Project,
        class: ItemClass,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<ProjectPage, ReadFailure> {
        let path = project.repo.full_path();
        let client = &source.client;
        let since = project.updated_after;
        let page = match class {
            ItemClass::Issue => {
                ListedPage::Issues(client.issues_page(&path, since, page_size, after).await?)
            }
            ItemClass::PullRequest => {
                let mut page = client
                    .merge_requests_page(&path, since, page_size, after)
                    .await?;
                // An incomplete reviewer list is never applied: complete it first.
                crate::readiness::complete_reviewers(client, &path, &mut page).await;
                ListedPage::MergeRequests(page)
            }
        };
        let mut page = ProjectPage::of(page, path);
        self.read_close_times(client, project, &mut page).await;
        Ok(page)
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        class: ItemClass,
        page: &ProjectPage,
    ) -> Result<u64, sqlx::Error> {
        let repository_id = match project
            .repo
            .resolve(&self.pool, pass.provider_instance_id)
            .await?
        {
            Some(id) => id,
            None => {
                let Some(native_id) = page.project_id.or(project.repo.native_id) else {
                    return Ok(0);
                };
                let (owner, name) = split_path(&page.project_path)
                    .unwrap_or((project.repo.owner.as_str(), project.repo.name.as_str()));
                let header = RepoHeader {
                    native_id,
                    node_id: format!("gid://gitlab/Project/{native_id}"),
                    owner: owner.to_owned(),
                    name: name.to_owned(),
                    archived: None,
                };
                let id = scm_mirror::repository::ensure_repository(
                    &self.pool,
                    pass.provider_instance_id,
                    &header,
                )
                .await?;
                sqlx::query("UPDATE repository_to_monitor SET native_id = $2, updated_at = now() WHERE id = $1 AND native_id IS NULL")
                    .bind(project.repo.monitor_id)
                    .bind(native_id)
                    .execute(&self.pool)
                    .await?;
                project.repo.native_id = Some(native_id);
                project.repo.repository_id = Some(id);
                id
            }
        };
        let times = &page.close_times;
        // GitLab's pages carry no read time: they were read just now.
        let bound = pass.time_bound(OffsetDateTime::now_utc());
        let written = match &page.page {
            ListedPage::Issues(p) => {
                mirror::upsert_page(&self.pool, class, repository_id, p, times, bound).await?
            }
            ListedPage::MergeRequests(p) => {
                mirror::upsert_page(&self.pool, class, repository_id, p, times, bound).await?
            }
        };
        project.newest = project.newest.max(written.newest);
        project.close_unread = match (project.close_unread, page.close_unread) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        crate::notes::touch(&mut project.touched, &page.page);
        if written.unusable > 0 {
            tracing::warn!(project = %project, unusable = written.unusable, "nodes GitLab failed to resolve or this build cannot store; left as stored");
        }
        Ok(written.applied)
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        class: ItemClass,
    ) -> Result<Vec<i64>, sqlx::Error> {
        project
            .repo
            .live_ids(&self.pool, pass.provider_instance_id, class)
            .await
    }

    async fn tombstone(
        &self,
        _pass: &Pass<'_>,
        project: &Project,
        class: ItemClass,
        plan: &TombstonePlan<i64>,
    ) -> Result<u64, sqlx::Error> {
        project.repo.tombstone(&self.pool, class, plan).await
    }

    fn scope_detail(&self, project: &Project) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = project.repo.detail();
        detail.insert(
            "project_id".into(),
            serde_json::json!(project.repo.native_id),
        );
        detail
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        project: &Project,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        project
            .repo
            .reconciled_within(&self.pool, pass.provider_instance_id, cooldown)
            .await
    }

    async fn mark_reconciled(&self, pass: &Pass<'_>, project: &Project) -> Result<(), sqlx::Error> {
        project
            .repo
            .mark_reconciled(&self.pool, pass.provider_instance_id)
            .await
    }

    /// A monitor keeps the project it was matched to: a path now naming another project (by
    /// native id) ends the listing, inferring nothing.
    async fn check_page(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        page: &ProjectPage,
    ) -> Result<PageCheck, sqlx::Error> {
        if let (Some(expected), Some(found)) = (project.repo.native_id, page.project_id)
            && expected != found
        {
            tracing::warn!(monitor = %project.repo.monitor_id, expected, found, "monitored path now names another project; skipped");
            pass.job
                .record_activity(
                    &self.pool,
                    "monitor_path_reused",
                    serde_json::json!({
                        "monitor_id": project.repo.monitor_id, "expected_native_id": expected,
                        "found_native_id": found,
                    }),
                )
                .await?;
            return Ok(PageCheck::SkipScope);
        }
        Ok(PageCheck::Write)
    }

    async fn after_scope(
        &self,
        pass: &Pass<'_>,
        source: &GitlabSource,
        project: &mut Project,
        cooling: bool,
    ) -> Result<JobControl, sqlx::Error> {
        let notes =
            crate::notes::after_scope(&self.pool, pass, &source.client, project, cooling).await?;
        if notes.job == Some(JobControl::LostClaim) {
            // Another replica holds the job: not even the watermark is written.
            return Ok(JobControl::LostClaim);
        }
        self.advance_watermarks(project, &notes.unread).await?;
        Ok(notes.job.unwrap_or(JobControl::Continue))
    }

    async fn listing_ended(
        &self,
        pass: &Pass<'_>,
        project: &mut Project,
        class: ItemClass,
        end: &ListingEnd,
    ) -> Result<(), sqlx::Error> {
        let Some(repository_id) = project.repo.repository_id else {
            return Ok(());
        };
        match &end.plan {
            ListingPlan::Whole | ListingPlan::Filtered => {
                // Only a clean listing earns a watermark, never past a merge request whose close
                // time failed to read (the next pass reads it); the notes pass decides how much of
                // it is written ([`GitlabVendor::advance_watermarks`]).
                if end.complete
                    && let Some(newest) = project.newest
                {
                    let newest = project.close_unread.map_or(newest, |u| newest.min(u));
                    project.earned.push((class, newest));
                }
            }
            ListingPlan::Batch { .. } => {
                // Progress is kept page by page: a later batch resumes after the last written.
                listing_state::record_batch(
                    &self.pool,
                    ScopeKey::repository(repository_id),
                    class.table(),
                    &BatchEnd {
                        pending: !end.complete,
                        last_cursor: end.last_cursor.as_deref(),
                        job: pass.job.id,
                        batch_full: end.batch_full,
                    },
                )
                .await?;
            }
            ListingPlan::Skip => {}
        }
        Ok(())
    }
}
