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
use scm_mirror::items::ItemClass;
use scm_mirror::monitors;
use scm_mirror::scope::{self, MonitoredRepository};
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::{Listed, PageCheck, Pass, Scopes, Vendor};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::SourceFactory;
use crate::check_runs;
use crate::conversation::{Candidates, Removal};
use crate::mirror;
use crate::source::{GithubSource, IssueNode, Page, PullRequestNode, RepoHeader, SourceError};

/// GitHub's side of the sync engine.
pub struct GithubVendor {
    pub pool: PgPool,
    /// Builds each job's reader from its connection.
    pub factory: Arc<dyn SourceFactory>,
}

/// A monitor as a pass walks it: the shared SCM scope, and what GitHub's pass adds to it.
#[derive(Debug, Clone)]
pub struct Monitor {
    repo: MonitoredRepository,
    /// Whether this pass already re-keyed the monitor to the repository's current name.
    healed: bool,
    /// A RECONCILIATION's comment candidates, captured before the repository's listings.
    candidates: Option<Candidates>,
}

impl From<MonitoredRepository> for Monitor {
    fn from(repo: MonitoredRepository) -> Self {
        Monitor {
            repo,
            healed: false,
            candidates: None,
        }
    }
}

impl fmt::Display for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.repo.fmt(f)
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
            &[(&monitor.repo.owner, &monitor.repo.name)],
        )
        .await?;
        txn.commit().await?;
        tracing::info!(
            monitor = %monitor.repo.monitor_id,
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
        // The installation just listed is held for this connection: uninstalled by provider
        // repair once it is disconnected. First in the transaction: identity lock, then the
        // connection row.
        if let (Some(installation_id), Some(app_id)) =
            (source.installation_id(), source.own_app_id())
        {
            let id = installation_id.to_string();
            let kept = store::repair::keep(
                &mut txn,
                &store::repair::KeptResource {
                    connection_id: job.connection_id,
                    kind: scm_mirror::github::APP_INSTALLATION,
                    target: &id,
                    vendor_id: &id,
                    proof: &app_id.to_string(),
                },
            )
            .await?;
            if kept == store::repair::Kept::Fenced {
                tracing::warn!(connection_id = %job.connection_id, installation_id,
                    "the installation's removal is fenced; it is not adopted again");
            }
        }
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
        let monitors: Vec<Monitor> = scope::monitors_of(&self.pool, job.connection_id)
            .await?
            .into_iter()
            .map(Monitor::from)
            .collect();
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
        let repo = monitor.repo.repo_ref();
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
        let repo_id = match monitor
            .repo
            .resolve(&self.pool, pass.provider_instance_id)
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
                    .bind(monitor.repo.monitor_id)
                    .bind(header.native_id)
                    .execute(&self.pool)
                    .await?;
                monitor.repo.repository_id = Some(id);
                id
            }
        };
        // Reconciliation-only: no other job infers a comment's deletion.
        let removal = monitor
            .candidates
            .as_ref()
            .filter(|_| pass.job.job_type == SyncJobType::Reconciliation)
            .map(|candidates| Removal {
                candidates,
                pass: *pass,
            });
        let written = match page {
            ListedPage::Issues(page) => {
                let bound = pass.time_bound(page.read_at);
                mirror::upsert_page(&self.pool, repo_id, page, removal.as_ref(), bound).await?
            }
            ListedPage::PullRequests(page) => {
                let bound = pass.time_bound(page.read_at);
                mirror::upsert_page(&self.pool, repo_id, page, removal.as_ref(), bound).await?
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
        monitor
            .repo
            .live_ids(&self.pool, pass.provider_instance_id, class)
            .await
    }

    async fn tombstone(
        &self,
        _pass: &Pass<'_>,
        monitor: &Monitor,
        class: ItemClass,
        plan: &TombstonePlan<i64>,
    ) -> Result<u64, sqlx::Error> {
        monitor.repo.tombstone(&self.pool, class, plan).await
    }

    fn scope_detail(&self, monitor: &Monitor) -> serde_json::Map<String, serde_json::Value> {
        monitor.repo.detail()
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        monitor: &Monitor,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        monitor
            .repo
            .reconciled_within(&self.pool, pass.provider_instance_id, cooldown)
            .await
    }

    async fn mark_reconciled(&self, pass: &Pass<'_>, monitor: &Monitor) -> Result<(), sqlx::Error> {
        monitor
            .repo
            .mark_reconciled(&self.pool, pass.provider_instance_id)
            .await
    }

    /// Re-reads the runs of each open pull request whose stored list of its head is unfinished
    /// and changed in the last 24 hours (a read that lagged the last hook settles here).
    async fn before_scope(
        &self,
        pass: &Pass<'_>,
        source: &Arc<dyn GithubSource>,
        monitor: &mut Monitor,
    ) -> Result<(), sqlx::Error> {
        let Some(repository_id) = monitor
            .repo
            .resolve(&self.pool, pass.provider_instance_id)
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
        let repo = monitor.repo.repo_ref();
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
        if let Some(expected) = monitor.repo.native_id
            && expected != current.native_id
        {
            tracing::warn!(monitor = %monitor.repo.monitor_id, expected, found = current.native_id, "monitored name now belongs to another repository; skipped");
            pass.job
                .record_activity(
                    &self.pool,
                    "monitor_name_reused",
                    serde_json::json!({
                        "monitor_id": monitor.repo.monitor_id, "expected_native_id": expected,
                        "found_native_id": current.native_id,
                    }),
                )
                .await?;
            return Ok(PageCheck::SkipScope);
        }
        // A monitor resolves by native id (a legacy one by its name, which GitHub follows to the
        // repository's current one): a name that moved, within or across owners, is re-keyed
        // here, with the mirrored row and the other monitors of the repository.
        if !monitor.healed
            && (current.owner != monitor.repo.owner || current.name != monitor.repo.name)
        {
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
