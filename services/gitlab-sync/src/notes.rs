//! Notes of a project's issues and merge requests on the SCM mirror, after its items in every
//! pass ([`sync_scope`]):
//!
//! - What a pass read (INITIAL, the incremental pass, a BACKFILL batch; saving a note touches
//!   its parent, so the incremental pass reads it) gets its notes mirrored: an issue's from the
//!   flat REST listing, a merge request's from its discussions, diff threads included. Lone
//!   notes go to `comment`; diff notes to `review_comment` filed under their `review_thread`.
//!   System notes are not mirrored; a merge request's "requested changes" system note records
//!   who requested changes (`scm_mirror::gitlab::requested_changes`).
//! - A RECONCILIATION (outside its cooldown) walks every live mirrored issue and merge request,
//!   not only the recent ones: discussions are mirrored again, then the flat REST listing is held
//!   to `lifecycle_core::gitlab::notes`. Notes are the engine's child class `note`
//!   ([`sync_engine::children`]): what that listing shows, once every missing note is confirmed
//!   gone, goes through the deletion gate and the blast-radius hold, and the notes it plans are
//!   tombstoned as a GitHub comment is (content cleared, `deleted_at` set, no late copy brings
//!   them back); their threads, reply references and item events stay. Any doubt leaves the
//!   parent as stored and is counted in `gitlab_notes_unreconciled_total{reason}`; a held
//!   parent is counted and recorded as a held sweep.
//! - The job's cancel and lease are checked before each parent and each further page of a
//!   parent's listing: a canceled job stops there (a reconcile it cuts removes nothing), and a
//!   replica that lost the lease writes nothing more.
//! - The parents whose notes were not read whole (a failed page, an incomplete discussion, a
//!   stopped pass) are the summary's `unread`: they hold the incremental pass's watermark
//!   ([`crate::sync`]), so that pass reads them again.

use std::collections::{BTreeMap, BTreeSet};

use gitlab_client::{
    Discussion, DiscussionNote, Error as ClientError, GitlabClient, Note, NoteParent, Page,
};
use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::gitlab::notes::{
    Confirmation, NoteReconciliation, NoteStep, NotesUnreconciled,
};
use lifecycle_core::gitlab::paging::OffsetPageHeaders;
use lifecycle_core::gitlab::review::requests_changes;
use lifecycle_core::job::SyncJobType;
use scm_mirror::comments::{self, Comment, ReviewComment};
use scm_mirror::events::{Item, Origin};
use scm_mirror::gitlab::requested_changes::{self, RequestedChanges};
use scm_mirror::reviews::Thread;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use time::OffsetDateTime;
use uuid::Uuid;

use sync_engine::children::{ChildClass, ChildListing, ChildOutcome, ChildTombstones};
use sync_engine::{JobControl, Pass};

use crate::mirror::VENDOR;
use crate::note_rows::{NoteRow, discussion_node_id};
use crate::sync::{ListedPage, Project};

/// The name of [`sync_scope`]'s span.
pub const NOTES_PASS_SPAN: &str = "notes pass";

/// Notes per REST page and discussions per GraphQL page: GitLab's largest.
const PAGE_SIZE: u32 = 100;
/// Notes, as a child class of their issue or merge request.
pub const NOTES: ChildClass = ChildClass {
    vendor: ConnectionKind::Gitlab,
    name: "note",
};

/// Pages of one parent's notes a pass reads at most: 10,000 notes, past which GitLab stops
/// counting them (no `X-Total`), so a longer listing could never reconcile anyway.
const PAGE_CAP: u32 = 100;

/// The project whose notes a pass mirrors.
#[derive(Debug, Clone)]
pub struct NoteScope {
    /// The mirrored `repository` row.
    pub repository_id: Uuid,
    /// GitLab's project id (REST paths).
    pub project_id: u64,
    /// `group/sub/project` now (GraphQL paths).
    pub full_path: String,
}

/// An issue or merge request whose notes are mirrored: its row and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Parent {
    Issue { row: Uuid, iid: u64 },
    MergeRequest { row: Uuid, iid: u64 },
}

impl Parent {
    fn rest(self, project: u64) -> NoteParent {
        match self {
            Parent::Issue { iid, .. } => NoteParent::Issue { project, iid },
            Parent::MergeRequest { iid, .. } => NoteParent::MergeRequest { project, iid },
        }
    }

    fn item(self, repository_id: Uuid) -> Item {
        match self {
            Parent::Issue { row, .. } => Item::issue(VENDOR, row, repository_id),
            Parent::MergeRequest { row, .. } => Item::pull_request(VENDOR, row, repository_id),
        }
    }
}

impl std::fmt::Display for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Parent::Issue { iid, .. } => write!(f, "#{iid}"),
            Parent::MergeRequest { iid, .. } => write!(f, "!{iid}"),
        }
    }
}

/// What a scope's notes pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NotesSummary {
    /// Notes written (new or newer).
    pub written: u64,
    /// Notes tombstoned as confirmed gone.
    pub tombstoned: u64,
    /// Parents whose notes were reconciled.
    pub reconciled: u64,
    /// Parents whose sweep the blast radius held (nothing tombstoned).
    pub held: u64,
    /// Parents left as stored, with why.
    pub unreconciled: Vec<(Parent, NotesUnreconciled)>,
    /// Parents whose notes could not be read whole (mirrored as far as read).
    pub unread: Vec<Parent>,
    /// Why the pass stopped early (rate limit, budget, the job), if it did.
    pub stopped: Option<String>,
    /// The job was canceled or lost its lease meanwhile (never `Continue`): the pass stopped.
    pub job: Option<JobControl>,
}

/// An issue (`merge_request: false`) or merge request a pass read, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Touched {
    pub merge_request: bool,
    pub iid: u64,
}

/// Remembers the items of a page the pass wrote: their notes follow after the scope.
pub(crate) fn touch(touched: &mut Vec<Touched>, page: &ListedPage) {
    match page {
        ListedPage::Issues(p) => touched.extend(p.nodes.iter().flatten().filter_map(|n| {
            Some(Touched {
                merge_request: false,
                iid: n.iid.inner().parse().ok()?,
            })
        })),
        ListedPage::MergeRequests(p) => touched.extend(p.nodes.iter().flatten().filter_map(|n| {
            Some(Touched {
                merge_request: true,
                iid: n.iid.parse().ok()?,
            })
        })),
    }
}

/// The engine's hook after a project's listings: its notes in this pass. A scheduled reconcile
/// within the project's cooldown reconciles no notes (it mirrors those of what it read).
pub(crate) async fn after_scope(
    pool: &PgPool,
    pass: &Pass<'_>,
    client: &GitlabClient,
    project: &mut Project,
    cooling: bool,
) -> Result<NotesSummary, sqlx::Error> {
    let touched = std::mem::take(&mut project.touched);
    let (Some(repository_id), Some(project_id)) = (
        project.repo.repository_id,
        project.repo.native_id.and_then(|n| u64::try_from(n).ok()),
    ) else {
        return Ok(NotesSummary::default());
    };
    let scope = NoteScope {
        repository_id,
        project_id,
        full_path: project.repo.full_path(),
    };
    let parents = parents_of(pool, repository_id, &touched).await?;
    let summary = sync_scope(pool, client, pass, !cooling, &scope, &parents).await?;
    tracing::info!(
        project = %scope.full_path,
        written = summary.written,
        tombstoned = summary.tombstoned,
        reconciled = summary.reconciled,
        held = summary.held,
        unreconciled = summary.unreconciled.len(),
        unread = summary.unread.len(),
        stopped = summary.stopped.as_deref(),
        "notes synced"
    );
    Ok(summary)
}

/// The metric label of a reason.
pub fn reason_label(reason: NotesUnreconciled) -> &'static str {
    match reason {
        NotesUnreconciled::NotReconciliation => "not_reconciliation",
        NotesUnreconciled::MissingHeaders => "missing_headers",
        NotesUnreconciled::InconsistentPages => "inconsistent_pages",
        NotesUnreconciled::TotalChanged => "total_changed",
        NotesUnreconciled::DuplicateId => "duplicate_id",
        NotesUnreconciled::CountMismatch => "count_mismatch",
        NotesUnreconciled::FailedPage => "failed_page",
        NotesUnreconciled::Cancelled => "cancelled",
        NotesUnreconciled::PageCap => "page_cap",
        NotesUnreconciled::NotFinished => "not_finished",
        NotesUnreconciled::NotConfirmedGone => "not_confirmed_gone",
    }
}

/// The live mirrored issues and merge requests of a repository.
pub async fn live_parents(pool: &PgPool, repository_id: Uuid) -> Result<Vec<Parent>, sqlx::Error> {
    let rows: Vec<(String, Uuid, i32)> = sqlx::query_as(
        "SELECT 'issue', id, number FROM issue WHERE repository_id = $1 AND deleted_at IS NULL
         UNION ALL
         SELECT 'mr', id, number FROM pull_request WHERE repository_id = $1 AND deleted_at IS NULL
         ORDER BY 1, 3",
    )
    .bind(repository_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(kind, row, number)| {
            let iid = u64::try_from(number).ok()?;
            Some(if kind == "issue" {
                Parent::Issue { row, iid }
            } else {
                Parent::MergeRequest { row, iid }
            })
        })
        .collect())
}

/// The mirrored issues and merge requests among `touched` (by number), one query per class.
pub async fn parents_of(
    pool: &PgPool,
    repository_id: Uuid,
    touched: &[Touched],
) -> Result<Vec<Parent>, sqlx::Error> {
    let mut parents = Vec::with_capacity(touched.len());
    for merge_request in [false, true] {
        let numbers: Vec<i32> = touched
            .iter()
            .filter(|t| t.merge_request == merge_request)
            .filter_map(|t| i32::try_from(t.iid).ok())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if numbers.is_empty() {
            continue;
        }
        let table = if merge_request {
            "pull_request"
        } else {
            "issue"
        };
        let sql = format!(
            "SELECT id, number FROM {table} WHERE repository_id = $1 AND number = ANY($2)
              ORDER BY number"
        );
        let rows: Vec<(Uuid, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(repository_id)
            .bind(&numbers)
            .fetch_all(pool)
            .await?;
        parents.extend(rows.into_iter().filter_map(|(row, number)| {
            let iid = u64::try_from(number).ok()?;
            Some(if merge_request {
                Parent::MergeRequest { row, iid }
            } else {
                Parent::Issue { row, iid }
            })
        }));
    }
    Ok(parents)
}

/// A scope's notes in one pass: a whole RECONCILIATION walks every live parent and reconciles
/// it; any other pass mirrors the notes of the parents it read (`touched`). Its span,
/// [`NOTES_PASS_SPAN`], is what `cargo xtask bench gitlab-sync` times.
#[tracing::instrument(name = "notes pass", skip_all, fields(project = %scope.full_path))]
pub async fn sync_scope(
    pool: &PgPool,
    client: &GitlabClient,
    pass: &Pass<'_>,
    reconcile: bool,
    scope: &NoteScope,
    touched: &[Parent],
) -> Result<NotesSummary, sqlx::Error> {
    let job = pass.job.job_type;
    let notes = Notes {
        pool,
        client,
        pass,
        scope,
    };
    let mut summary = NotesSummary::default();
    // Reconciliation-only: no other pass removes a note.
    let reconciling = reconcile && job == SyncJobType::Reconciliation;
    let parents: Vec<Parent> = if reconciling {
        live_parents(pool, scope.repository_id).await?
    } else {
        let set: BTreeSet<Parent> = touched.iter().copied().collect();
        set.into_iter().collect()
    };
    for (i, &parent) in parents.iter().enumerate() {
        // Cancel and lease per parent, as the engine checks them per page.
        let stop = match pass.heartbeat().await? {
            JobControl::Continue => notes
                .parent(parent, job, reconciling, &mut summary)
                .await?
                .err(),
            control => Some(Stop::Job(control)),
        };
        let Some(stop) = stop else { continue };
        // What the pass did not reach was not read: it holds the watermark too.
        summary.unread.extend_from_slice(&parents[i..]);
        match stop {
            Stop::Vendor(e) => {
                tracing::warn!(project = %scope.full_path, %parent, error = %e, "GitLab stopped the notes pass; the rest stay as stored");
                summary.stopped = Some(e.to_string());
            }
            Stop::Job(control) => {
                tracing::info!(project = %scope.full_path, %parent, ?control, "the job stopped the notes pass; the rest stay as stored");
                summary.stopped = Some(match control {
                    JobControl::Canceled => "the job was canceled".into(),
                    _ => "the job's lease was lost".into(),
                });
                summary.job = Some(control);
            }
        }
        break;
    }
    for (parent, reason) in &summary.unreconciled {
        tracing::info!(project = %scope.full_path, %parent, reason = reason_label(*reason), "notes left as stored");
    }
    Ok(summary)
}

struct Notes<'a> {
    pool: &'a PgPool,
    client: &'a GitlabClient,
    pass: &'a Pass<'a>,
    scope: &'a NoteScope,
}

/// Why the notes pass stops before its last parent.
enum Stop {
    /// GitLab's rate limit or budget, or refused credentials: every later read would fail too.
    Vendor(ClientError),
    /// The job was canceled or its lease lost.
    Job(JobControl),
}

/// A client error that ends the notes pass (the rate limit or budget: every later call would
/// fail too); other errors end only the parent's read.
fn stops_pass(e: &ClientError) -> bool {
    e.is_rate_limited() || matches!(e, ClientError::Auth { .. })
}

impl Notes<'_> {
    /// One parent: its discussions (a merge request), then its REST listing (an issue's notes,
    /// or any parent a reconcile holds to the rule). `Err` inside: the pass must stop.
    async fn parent(
        &self,
        parent: Parent,
        job: SyncJobType,
        reconciling: bool,
        summary: &mut NotesSummary,
    ) -> Result<Result<(), Stop>, sqlx::Error> {
        if let Parent::MergeRequest { row, iid } = parent {
            // Discussions never depend on the stored or reported note count.
            match self.discussions(row, iid, summary).await? {
                Ok(()) => {}
                Err(e) if stops_pass(&e) => return Ok(Err(Stop::Vendor(e))),
                Err(e) => {
                    tracing::warn!(project = %self.scope.full_path, %parent, error = %e, "discussions not read; mirrored as stored");
                    summary.unread.push(parent);
                }
            }
        }
        if !reconciling && matches!(parent, Parent::MergeRequest { .. }) {
            return Ok(Ok(()));
        }
        self.listing(parent, job, reconciling, summary).await
    }

    /// Every page of a merge request's discussions, then one write with the merge request
    /// locked. A discussion with an error anywhere in it is left as stored.
    async fn discussions(
        &self,
        row: Uuid,
        iid: u64,
        summary: &mut NotesSummary,
    ) -> Result<Result<(), ClientError>, sqlx::Error> {
        let mut known: Vec<(Discussion, OffsetDateTime)> = Vec::new();
        let mut after: Option<String> = None;
        let mut whole = true;
        for _ in 0..PAGE_CAP {
            let page: Page<Discussion> = match self
                .client
                .merge_request_discussions_page(
                    &self.scope.full_path,
                    iid,
                    PAGE_SIZE,
                    after.as_deref(),
                )
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    // What was read is still written.
                    self.write_discussions(row, &known, summary).await?;
                    return Ok(Err(e));
                }
            };
            for (i, d) in page.nodes.iter().enumerate() {
                match d {
                    // Partial metadata: an error inside a discussion leaves that one unknown.
                    Some(d) if !page.field_unknown(i, "notes") && !page.field_unknown(i, "id") => {
                        if d.notes.page_info.has_next_page {
                            whole = false;
                        }
                        known.push((d.clone(), page.fetched_at));
                    }
                    _ => whole = false,
                }
            }
            if !page.page_info.has_next_page {
                break;
            }
            after = page.page_info.end_cursor.clone();
            if after.is_none() {
                whole = false;
                break;
            }
        }
        self.write_discussions(row, &known, summary).await?;
        if !whole {
            summary.unread.push(Parent::MergeRequest { row, iid });
        }
        Ok(Ok(()))
    }

    async fn write_discussions(
        &self,
        pr: Uuid,
        discussions: &[(Discussion, OffsetDateTime)],
        summary: &mut NotesSummary,
    ) -> Result<(), sqlx::Error> {
        if discussions.is_empty() {
            return Ok(());
        }
        let repository_id = self.scope.repository_id;
        let item = Item::pull_request(VENDOR, pr, repository_id);
        let mut txn = self.pool.begin().await?;
        if !lock_parent(&mut txn, Parent::MergeRequest { row: pr, iid: 0 }).await? {
            return Ok(());
        }
        for (d, fetched_at) in discussions {
            // Requested changes are someone's only from the system note naming them; system
            // notes themselves stay unmirrored.
            for n in d.notes.nodes.iter().flatten().flatten() {
                if n.system
                    && requests_changes(&n.body)
                    && let Some(note_id) = n.id.number().and_then(|id| i64::try_from(id).ok())
                {
                    let request = RequestedChanges {
                        username: n.author.username.clone(),
                        note_id,
                        requested_at: n.created_at.0,
                    };
                    requested_changes::record(&mut txn, &item, &request, Origin::Sync).await?;
                }
            }
            let notes: Vec<&DiscussionNote> = d
                .notes
                .nodes
                .iter()
                .flatten()
                .flatten()
                .filter(|n| !n.system)
                .collect();
            let diff = notes.iter().any(|n| n.position.is_some());
            if diff {
                let path = notes
                    .iter()
                    .find_map(|n| n.position.as_ref().map(|p| p.file_path.as_str()));
                let node_id = discussion_node_id(d.id.tail());
                let thread = Thread {
                    pull_request_id: pr,
                    node_id: &node_id,
                    path,
                    resolved: d.resolved,
                    received_at: *fetched_at,
                    resolved_by: d.resolved_by.as_ref().map(|r| r.username.as_str()),
                    latest: notes.iter().map(|n| n.updated_at.0).max(),
                };
                // Dated state: an older read never restates a resolution a newer one replaced.
                match Thread::lock(&mut txn, pr, &node_id).await? {
                    Some(stored)
                        if stored
                            .resolution_received_at
                            .is_some_and(|at| at > *fetched_at) => {}
                    _ => {
                        thread.write(&mut txn).await?;
                    }
                }
            }
            for n in notes {
                let Some(row) = NoteRow::from_discussion(item, d, diff, n) else {
                    continue;
                };
                summary.written += u64::from(row.write(&mut txn, None).await?);
            }
        }
        txn.commit().await?;
        Ok(())
    }

    /// The REST listing of one parent: an issue's notes are written page by page; a reconcile
    /// holds the listing to the rule and tombstones what is confirmed gone, through the gate.
    async fn listing(
        &self,
        parent: Parent,
        job: SyncJobType,
        reconciling: bool,
        summary: &mut NotesSummary,
    ) -> Result<Result<(), Stop>, sqlx::Error> {
        let rest = parent.rest(self.scope.project_id);
        // Candidates before listing: notes inserted during the pass survive.
        let children = self.pass.children(NOTES);
        let mut rule = if reconciling {
            let candidates = live_notes(self.pool, parent).await?;
            let sweep = children.capture(candidates.iter().copied());
            Some((NoteReconciliation::begin(job, candidates, PAGE_CAP), sweep))
        } else {
            None
        };
        let mut next = Some(1u32);
        let mut pages = 0;
        let mut failure = None;
        let mut canceled = false;
        while let Some(number) = next.take() {
            // The first page follows the per-parent check; each further one checks again.
            if pages > 0 {
                match self.pass.heartbeat().await? {
                    JobControl::Continue => {}
                    JobControl::Canceled => {
                        // A cut listing reconciles nothing.
                        if let Some((rule, _)) = rule.as_mut() {
                            rule.record_fault(lifecycle_core::gitlab::notes::NoteFault::Cancelled);
                        }
                        canceled = true;
                        break;
                    }
                    // Another replica holds the job: nothing more is written.
                    JobControl::LostClaim => return Ok(Err(Stop::Job(JobControl::LostClaim))),
                }
            }
            let page = match self.client.notes_page(rest, number, PAGE_SIZE).await {
                Ok(page) => page,
                Err(e) => {
                    if let Some((rule, _)) = rule.as_mut() {
                        rule.record_fault(lifecycle_core::gitlab::notes::NoteFault::FailedPage);
                    }
                    failure = Some(e);
                    break;
                }
            };
            pages += 1;
            if let Parent::Issue { .. } = parent {
                summary.written += self.write_rest_notes(parent, &page.notes).await?;
            }
            let headers = OffsetPageHeaders::parse(
                page.headers.page.as_deref(),
                page.headers.next_page.as_deref(),
                page.headers.total.as_deref(),
            );
            next = match rule.as_mut() {
                Some((rule, _)) => {
                    match rule.accept_page(headers, page.notes.iter().map(|n| n.id).collect()) {
                        NoteStep::FetchPage(n) => Some(n),
                        NoteStep::Finished | NoteStep::Stopped(_) => None,
                    }
                }
                // Mirroring only: follow GitLab's next page while there is one.
                None => page.headers.next().flatten().filter(|_| pages < PAGE_CAP),
            };
        }
        if let Some(e) = &failure {
            tracing::warn!(project = %self.scope.full_path, %parent, error = %e, "notes page failed");
            summary.unread.push(parent);
        }
        if canceled {
            summary.unread.push(parent);
        }
        if let Some((rule, sweep)) = rule {
            let outcome = match rule.finish() {
                Ok(missing) => {
                    let mut results = BTreeMap::new();
                    for id in missing.to_confirm().iter().copied() {
                        // Offset pages can shift without changing their total: each missing
                        // note must read 404 itself.
                        let confirmation = match self.client.note(rest, id).await {
                            Ok(None) => Confirmation::Gone,
                            Ok(Some(_)) => Confirmation::StillThere,
                            Err(e) => {
                                tracing::warn!(%parent, note = id, error = %e, "note confirmation failed");
                                Confirmation::Failed
                            }
                        };
                        results.insert(id, confirmation);
                        if confirmation != Confirmation::Gone {
                            break;
                        }
                    }
                    missing.confirm(&results)
                }
                Err(reason) => Err(reason),
            };
            match outcome {
                Ok(gone) => {
                    // The listing, confirmed: every candidate but those read gone one by one.
                    let listed = sweep
                        .candidates()
                        .iter()
                        .filter(|id| !gone.contains(id))
                        .copied()
                        .collect();
                    let mut txn = self.pool.begin().await?;
                    if lock_parent(&mut txn, parent).await? {
                        let writer = NoteTombstones {
                            parent,
                            repository_id: self.scope.repository_id,
                            deleted_at: OffsetDateTime::now_utc(),
                        };
                        let mut detail = serde_json::Map::new();
                        detail.insert(
                            "repository_id".into(),
                            self.scope.repository_id.to_string().into(),
                        );
                        detail.insert("parent".into(), parent.to_string().into());
                        let listing = ChildListing::Whole(listed);
                        match children
                            .reconcile(&mut txn, detail, sweep, listing, &writer)
                            .await?
                        {
                            ChildOutcome::Tombstoned(n) => {
                                summary.tombstoned += n;
                                summary.reconciled += 1;
                            }
                            ChildOutcome::Held { .. } => summary.held += 1,
                            ChildOutcome::Skipped => {}
                        }
                    }
                    txn.commit().await?;
                }
                Err(reason) => {
                    metrics::counter!("gitlab_notes_unreconciled_total", "reason" => reason_label(reason))
                        .increment(1);
                    summary.unreconciled.push((parent, reason));
                }
            }
        }
        Ok(match failure {
            _ if canceled => Err(Stop::Job(JobControl::Canceled)),
            Some(e) if stops_pass(&e) => Err(Stop::Vendor(e)),
            _ => Ok(()),
        })
    }

    async fn write_rest_notes(&self, parent: Parent, notes: &[Note]) -> Result<u64, sqlx::Error> {
        let item = parent.item(self.scope.repository_id);
        let wanted: Vec<NoteRow> = notes
            .iter()
            .filter_map(|n| NoteRow::from_rest(item, n))
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        let mut txn = self.pool.begin().await?;
        if !lock_parent(&mut txn, parent).await? {
            return Ok(0);
        }
        let mut written = 0;
        for row in &wanted {
            written += u64::from(row.write(&mut txn, None).await?);
        }
        txn.commit().await?;
        Ok(written)
    }
}

/// Tombstones a parent's confirmed-gone notes, in whichever of its tables they are, dated
/// `deleted_at`.
struct NoteTombstones {
    parent: Parent,
    repository_id: Uuid,
    deleted_at: OffsetDateTime,
}

#[async_trait::async_trait]
impl ChildTombstones<u64> for NoteTombstones {
    async fn tombstone(
        &self,
        conn: &mut sqlx::PgConnection,
        plan: &TombstonePlan<u64>,
    ) -> Result<u64, sqlx::Error> {
        let ids: Vec<i64> = plan
            .ids()
            .iter()
            .filter_map(|id| i64::try_from(*id).ok())
            .collect();
        // Comment ids are unique per repository; the candidates were this parent's.
        let mut n = comments::tombstone_missing::<Comment<'_>>(
            &mut *conn,
            self.repository_id,
            &ids,
            self.deleted_at,
        )
        .await?;
        if let Parent::MergeRequest { row, .. } = self.parent {
            n += comments::tombstone_missing::<ReviewComment<'_>>(conn, row, &ids, self.deleted_at)
                .await?;
        }
        Ok(n)
    }
}

/// The native ids of a parent's live notes (comments and review comments).
async fn live_notes(pool: &PgPool, parent: Parent) -> Result<Vec<u64>, sqlx::Error> {
    let rows: Vec<(i64,)> =
        match parent {
            Parent::Issue { row, .. } => {
                sqlx::query_as(
                    "SELECT native_id FROM comment WHERE issue_id = $1 AND deleted_at IS NULL",
                )
                .bind(row)
                .fetch_all(pool)
                .await?
            }
            Parent::MergeRequest { row, .. } => sqlx::query_as(
                "SELECT native_id FROM comment WHERE pull_request_id = $1 AND deleted_at IS NULL
                 UNION SELECT native_id FROM review_comment
                  WHERE pull_request_id = $1 AND deleted_at IS NULL",
            )
            .bind(row)
            .fetch_all(pool)
            .await?,
        };
    Ok(rows
        .into_iter()
        .filter_map(|(id,)| u64::try_from(id).ok())
        .collect())
}

/// Locks the parent's row; `false` when it is gone (erased meanwhile).
async fn lock_parent(txn: &mut sqlx::PgConnection, parent: Parent) -> Result<bool, sqlx::Error> {
    let (sql, row) = match parent {
        Parent::Issue { row, .. } => ("SELECT id FROM issue WHERE id = $1 FOR UPDATE", row),
        Parent::MergeRequest { row, .. } => {
            ("SELECT id FROM pull_request WHERE id = $1 FOR UPDATE", row)
        }
    };
    let found: Option<(Uuid,)> = sqlx::query_as(sql)
        .bind(row)
        .fetch_optional(&mut *txn)
        .await?;
    Ok(found.is_some())
}
