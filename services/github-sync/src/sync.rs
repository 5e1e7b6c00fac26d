//! GitHub as the sync engine's vendor: a connection monitors repositories (materialised from
//! what its own credentials reach), each holding issues and pull requests read one GraphQL page
//! at a time and written forward-only through `mirror`. The engine owns the jobs, passes,
//! backfill and the deletion gate; what is GitHub's own stays here: each pass re-reads the check
//! runs of open pull requests whose stored list of their head has not finished and changed in
//! the last day, a monitored name that now belongs to another repository is skipped, and a
//! renamed repository's monitors are re-keyed by native id.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::job::SyncJobType;
use lifecycle_core::listing::ListingPage;
use scm_mirror::events::Origin;
use scm_mirror::items::{self, ItemClass};
use scm_mirror::monitors;
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::{Listed, PageCheck, Pass, Scopes, Vendor};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::SourceFactory;
use crate::check_runs;
use crate::conversation::Candidates;
use crate::mirror;
use crate::source::{
    GithubSource, IssueNode, Page, PullRequestNode, RepoHeader, RepoRef, SourceError,
};

/// GitHub's side of the sync engine.
pub struct GithubVendor {
    pub pool: PgPool,
    /// Builds each job's reader from its connection.
    pub factory: Arc<dyn SourceFactory>,
}

/// A monitor as a pass walks it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Monitor {
    id: Uuid,
    owner: String,
    name: String,
    native_id: Option<i64>,
    /// The mirrored repository row, once the pass knows it.
    #[sqlx(skip)]
    repository_id: Option<Uuid>,
    /// Whether this pass already re-keyed the monitor to the repository's current name.
    #[sqlx(skip)]
    healed: bool,
    /// A RECONCILIATION's comment candidates, captured before the repository's listings.
    #[sqlx(skip)]
    candidates: Option<Candidates>,
}

impl Monitor {
    fn repo_ref(&self) -> RepoRef {
        RepoRef {
            owner: self.owner.clone(),
            name: self.name.clone(),
            native_id: self.native_id,
        }
    }
}

impl fmt::Display for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// A page of one class, waiting to be written.
pub enum ListedPage {
    Issues(Page<IssueNode>),
    PullRequests(Page<PullRequestNode>),
}

impl ListedPage {
    fn repository(&self) -> &RepoHeader {
        match self {
            ListedPage::Issues(page) => &page.repository,
            ListedPage::PullRequests(page) => &page.repository,
        }
    }
}

fn listing_of<T>(page: &Page<T>, id: fn(&T) -> i64) -> ListingPage<i64> {
    ListingPage {
        ids: page.nodes.iter().map(id).collect(),
        has_next_page: page.has_next_page,
        end_cursor: page.end_cursor.clone(),
        total_count: page.total_count,
    }
}

impl Listed<i64> for ListedPage {
    fn listing(&self) -> ListingPage<i64> {
        match self {
            ListedPage::Issues(page) => listing_of(page, |n| n.fields.native_id),
            ListedPage::PullRequests(page) => listing_of(page, |n| n.fields.native_id),
        }
    }

    fn errored(&self) -> bool {
        match self {
            ListedPage::Issues(page) => !page.error_paths.is_empty(),
            ListedPage::PullRequests(page) => !page.error_paths.is_empty(),
        }
    }
}

impl GithubVendor {
    /// The mirrored repository of the monitor, remembered for the rest of the pass.
    async fn repository_id(
        &self,
        provider_instance_id: Uuid,
        monitor: &mut Monitor,
    ) -> Result<Option<Uuid>, sqlx::Error> {
        if monitor.repository_id.is_some() {
            return Ok(monitor.repository_id);
        }
        let Some(native_id) = monitor.native_id else {
            return Ok(None);
        };
        let row: Option<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(provider_instance_id)
        .bind(native_id)
        .fetch_optional(&self.pool)
        .await?;
        monitor.repository_id = row.map(|(id,)| id);
        Ok(monitor.repository_id)
    }

    /// Re-keys a monitor whose repository (by native id) is now called something else, with the
    /// repository's mirrored row and its other monitors, in one transaction.
    async fn heal_identity(
        &self,
        connection_id: Uuid,
        provider_instance_id: Uuid,
        monitor: &Monitor,
        current: &RepoHeader,
    ) -> Result<(), sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        // The page was read with this connection's credentials: its monitors may take the id.
        let done = monitors::rekey(
            &mut txn,
            connection_id,
            provider_instance_id,
            current.native_id,
            &current.owner,
            &current.name,
            &[(&monitor.owner, &monitor.name)],
        )
        .await?;
        txn.commit().await?;
        tracing::info!(
            monitor = %monitor.id,
            from = %monitor,
            to = %format!("{}/{}", current.owner, current.name),
            native_id = current.native_id,
            moved = done.moved,
            merged = done.merged,
            blocked = done.blocked,
            "repository moved upstream; monitors re-keyed by native id"
        );
        Ok(())
    }
}

#[async_trait::async_trait]
impl Vendor for GithubVendor {
    const KIND: ConnectionKind = ConnectionKind::Github;
    const SCOPES: &'static str = "repositories";
    const CLASSES: &'static [ItemClass] = &[ItemClass::Issue, ItemClass::PullRequest];

    type Source = Arc<dyn GithubSource>;
    type Scope = Monitor;
    type Class = ItemClass;
    type Id = i64;
    type Page = ListedPage;
    type Error = SourceError;

    fn class_name(class: ItemClass) -> &'static str {
        class.table()
    }

    async fn source(&self, conn: &connection::Model) -> anyhow::Result<Arc<dyn GithubSource>> {
        self.factory.source(conn).await
    }

    /// Monitors come from what the connection's own credentials resolve (App installation, or
    /// the PAT's names resolved with the PAT), bound to native ids. A PAT connection keeps no
    /// monitor of anything else; a configured name that no longer resolves is recorded as
    /// connection activity and fails the pass.
    async fn scopes(
        &self,
        pass: &Pass<'_>,
        source: &Arc<dyn GithubSource>,
    ) -> Result<Result<Scopes<Monitor>, SourceError>, sqlx::Error> {
        let job = pass.job;
        let reach = match source.repositories().await {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let mut txn = self.pool.begin().await?;
        // The installation just listed with its own token is verified for this connection:
        // installation webhooks are admitted against it (a typed setting is not verification).
        if let Some(installation_id) = source.installation_id() {
            scm_mirror::admission::record_github_installation(
                &mut txn,
                job.connection_id,
                installation_id,
            )
            .await?;
        }
        monitors::materialise(
            &mut txn,
            pass.provider_instance_id,
            job.workspace_id,
            job.connection_id,
            &reach.repositories,
        )
        .await?;
        // A PAT reaches only what it resolved now: any other monitor of it (an unresolved name,
        // one renamed since, a legacy name) has lost its proof.
        let dropped = if reach.exclusive {
            let ids: Vec<i64> = reach
                .repositories
                .iter()
                .filter_map(|r| r.native_id)
                .collect();
            monitors::retain_only(&mut txn, job.connection_id, &ids).await?
        } else {
            0
        };
        txn.commit().await?;
        if !reach.unresolved.is_empty() {
            tracing::warn!(connection_id = %job.connection_id, unresolved = ?reach.unresolved, dropped, "configured repositories no longer resolve with the connection's credentials; not monitored");
            job.record_activity(
                &self.pool,
                "repositories_unresolved",
                serde_json::json!({
                    "repositories": reach.unresolved, "monitors_removed": dropped,
                }),
            )
            .await?;
        }
        let monitors: Vec<Monitor> = sqlx::query_as(
            "SELECT id, owner, name, native_id FROM repository_to_monitor
              WHERE connection_id = $1 ORDER BY lower(owner), lower(name)",
        )
        .bind(job.connection_id)
        .fetch_all(&self.pool)
        .await?;
        let unresolved = (!reach.unresolved.is_empty()).then(|| {
            format!(
                "repositories no longer resolve with the connection's credentials (gone, or not visible to it): {}",
                reach.unresolved.join(", ")
            )
        });
        Ok(Ok(Scopes {
            scopes: monitors,
            unresolved,
        }))
    }

    async fn read_page(
        &self,
        source: &Arc<dyn GithubSource>,
        monitor: &Monitor,
        class: ItemClass,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<ListedPage, SourceError> {
        let repo = monitor.repo_ref();
        Ok(match class {
            ItemClass::Issue => {
                ListedPage::Issues(source.issues_page(&repo, page_size, after).await?)
            }
            ItemClass::PullRequest => {
                ListedPage::PullRequests(source.pull_requests_page(&repo, page_size, after).await?)
            }
        })
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        monitor: &mut Monitor,
        _class: ItemClass,
        page: &ListedPage,
    ) -> Result<u64, sqlx::Error> {
        let repo_id = match self
            .repository_id(pass.provider_instance_id, monitor)
            .await?
        {
            Some(id) => id,
            None => {
                let header = page.repository();
                let id = scm_mirror::repository::ensure_repository(
                    &self.pool,
                    pass.provider_instance_id,
                    header,
                )
                .await?;
                sqlx::query("UPDATE repository_to_monitor SET native_id = $2, updated_at = now() WHERE id = $1 AND native_id IS NULL")
                    .bind(monitor.id)
                    .bind(header.native_id)
                    .execute(&self.pool)
                    .await?;
                monitor.repository_id = Some(id);
                id
            }
        };
        // Reconciliation-only: no other job infers a comment's deletion.
        let removal = monitor
            .candidates
            .as_ref()
            .filter(|_| pass.job.job_type == SyncJobType::Reconciliation);
        let written = match page {
            ListedPage::Issues(page) => {
                mirror::upsert_page(&self.pool, repo_id, page, removal).await?
            }
            ListedPage::PullRequests(page) => {
                mirror::upsert_page(&self.pool, repo_id, page, removal).await?
            }
        };
        if written.nested.total() > 0 {
            // What webhooks lost and this page restored (or removed): the job's corrections.
            metrics::counter!("github_sync_nested_corrections_total")
                .increment(written.nested.total());
            pass.job
                .record_activity(
                    &self.pool,
                    "nested_corrected",
                    serde_json::json!({
                        "repository_id": repo_id, "corrections": written.nested,
                    }),
                )
                .await?;
        }
        Ok(written.applied)
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        monitor: &mut Monitor,
        class: ItemClass,
    ) -> Result<Vec<i64>, sqlx::Error> {
        match self
            .repository_id(pass.provider_instance_id, monitor)
            .await?
        {
            Some(id) => items::live_native_ids(&self.pool, class, id).await,
            None => Ok(Vec::new()),
        }
    }

    async fn tombstone(
        &self,
        _pass: &Pass<'_>,
        monitor: &Monitor,
        class: ItemClass,
        plan: &TombstonePlan<i64>,
    ) -> Result<u64, sqlx::Error> {
        let Some(repo) = monitor.repository_id else {
            return Ok(0);
        };
        let ids: Vec<i64> = plan.ids().iter().copied().collect();
        items::tombstone(&self.pool, class, repo, &ids, OffsetDateTime::now_utc()).await
    }

    fn scope_detail(&self, monitor: &Monitor) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert(
            "repository_id".into(),
            serde_json::json!(monitor.repository_id),
        );
        detail
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        monitor: &Monitor,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        let Some(native_id) = monitor.native_id else {
            return Ok(false);
        };
        let row: Option<(bool,)> = sqlx::query_as(
            "SELECT coalesce(reconciled_at > now() - make_interval(secs => $3), false)
               FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
        )
        .bind(pass.provider_instance_id)
        .bind(native_id)
        .bind(cooldown.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some_and(|(cooling,)| cooling))
    }

    async fn mark_reconciled(&self, pass: &Pass<'_>, monitor: &Monitor) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE repository SET reconciled_at = now()
              WHERE provider_instance_id = $1
                AND native_id = (SELECT native_id FROM repository_to_monitor WHERE id = $2)",
        )
        .bind(pass.provider_instance_id)
        .bind(monitor.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Re-reads the runs of each open pull request whose stored list of its head is unfinished
    /// and changed in the last 24 hours (a read that lagged the last hook settles here).
    async fn before_scope(
        &self,
        pass: &Pass<'_>,
        source: &Arc<dyn GithubSource>,
        monitor: &mut Monitor,
    ) -> Result<(), sqlx::Error> {
        let Some(repository_id) = self
            .repository_id(pass.provider_instance_id, monitor)
            .await?
        else {
            return Ok(());
        };
        // Deletion candidates are what was live before the listing started.
        if pass.job.job_type == SyncJobType::Reconciliation {
            monitor.candidates = Some(Candidates::capture(&self.pool, repository_id).await?);
        }
        let due = check_runs::due_for_rescan(&self.pool, repository_id, OffsetDateTime::now_utc())
            .await?;
        let repo = monitor.repo_ref();
        for (pull_request, head) in due {
            let read = check_runs::read_and_apply(
                &self.pool,
                source.as_ref(),
                &repo,
                &head,
                &[pull_request],
                Origin::Sync,
            )
            .await?;
            if let Err(
                SourceError::BudgetExhausted(_)
                | SourceError::RateLimited
                | SourceError::SecondaryRateLimited
                | SourceError::BadCredentials(_)
                | SourceError::Forbidden { .. },
            ) = read
            {
                // What stops one read stops the rest; the listings will say so too.
                break;
            }
        }
        Ok(())
    }

    async fn check_page(
        &self,
        pass: &Pass<'_>,
        monitor: &mut Monitor,
        page: &ListedPage,
    ) -> Result<PageCheck, sqlx::Error> {
        let current = page.repository();
        // A monitor keeps the repository it first resolved: a reused name is another repository.
        if let Some(expected) = monitor.native_id
            && expected != current.native_id
        {
            tracing::warn!(monitor = %monitor.id, expected, found = current.native_id, "monitored name now belongs to another repository; skipped");
            pass.job
                .record_activity(
                    &self.pool,
                    "monitor_name_reused",
                    serde_json::json!({
                        "monitor_id": monitor.id, "expected_native_id": expected,
                        "found_native_id": current.native_id,
                    }),
                )
                .await?;
            return Ok(PageCheck::SkipScope);
        }
        // A monitor resolves by native id (a legacy one by its name, which GitHub follows to the
        // repository's current one): a name that moved, within or across owners, is re-keyed
        // here, with the mirrored row and the other monitors of the repository.
        if !monitor.healed && (current.owner != monitor.owner || current.name != monitor.name) {
            self.heal_identity(
                pass.job.connection_id,
                pass.provider_instance_id,
                monitor,
                current,
            )
            .await?;
            monitor.healed = true;
        }
        Ok(PageCheck::Write)
    }
}
