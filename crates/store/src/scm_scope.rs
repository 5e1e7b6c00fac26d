//! What SCM mirror a workspace may read. Repositories carry no workspace id (one mirrored row
//! serves every workspace that monitors it), so every read goes through the monitor-scope rule
//! here and nowhere else: a repository is covered when one of the workspace's monitors is bound
//! to its native id (resolved with that connection's own credentials) on the provider instance
//! of that monitor's connection, and that connection currently authorises reads (active,
//! suspended or paused: a pause keeps the retained mirror). A monitor known only by name covers
//! nothing.

use lifecycle_core::connection::ConnectionState;
use sea_orm::{
    ActiveEnum as _, ConnectionTrait, DbBackend, DbErr, FromQueryResult, Iterable as _, Statement,
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::entity::{ConnectionKind, ConnectionStatus};

/// A mirrored repository the workspace's monitors cover. Only this module makes one, so a
/// function that takes one reads inside the scope.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct CoveredRepository {
    pub id: Uuid,
    pub provider_instance_id: Uuid,
    pub native_id: i64,
    pub owner: String,
    pub name: String,
    pub archived: Option<bool>,
    pub deleted_at: Option<OffsetDateTime>,
    pub reconciled_at: Option<OffsetDateTime>,
}

/// A mirrored issue of a covered repository; tombstoned rows included (`deleted_at` set, content
/// cleared), so a reader decides whether to honour the tombstone.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredIssue {
    pub id: Uuid,
    pub native_id: i64,
    pub number: i32,
    pub title: Option<String>,
    pub body: Option<String>,
    pub state: String,
    pub state_reason: Option<String>,
    pub author: Option<String>,
    pub locked: Option<bool>,
    pub comment_count: Option<i32>,
    pub upstream_created_at: OffsetDateTime,
    pub upstream_updated_at: OffsetDateTime,
    pub closed_at: Option<OffsetDateTime>,
    pub deleted_at: Option<OffsetDateTime>,
}

/// `'active', 'suspended', 'paused'`: the stored statuses whose connections authorise reads
/// (the rule itself is `ConnectionState::authorises_reads`). Literals of a closed enum, safe in
/// SQL.
pub fn reading_statuses() -> String {
    statuses(ConnectionState::authorises_reads)
}

/// `'active', 'suspended'`: the stored statuses whose connections may write the mirror
/// (`ConnectionState::authorises_writes`), e.g. the webhook consumer's filters.
pub fn writing_statuses() -> String {
    statuses(ConnectionState::authorises_writes)
}

fn statuses(rule: fn(ConnectionState) -> bool) -> String {
    ConnectionStatus::iter()
        .filter(|s| rule(ConnectionState::from(*s)))
        .map(|s| format!("'{}'", s.to_value()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The binding half of the monitor-scope rule over a monitor `m`, its connection `c` and a
/// repository `r`: the monitor is bound to the repository's native id on the provider instance
/// of the monitor's connection. The eraser captures a disconnected connection's repositories by
/// this alone (the connection no longer authorises anything, but its monitors still name them).
pub fn binds_predicate() -> &'static str {
    "c.id = m.connection_id AND c.workspace_id = m.workspace_id
     AND c.provider_instance_id = r.provider_instance_id
     -- Only a monitor bound to a resolved native id grants access; a name alone never does.
     AND m.native_id IS NOT NULL AND m.native_id = r.native_id"
}

/// The monitor-scope rule as SQL over a monitor `m`, its connection `c` and a repository `r`
/// (any row with `provider_instance_id` and `native_id`), for writers that
/// must decide coverage in their own statements (github-sync's event fan-out, webhook
/// admission, the eraser's orphan guard) without restating the rule.
pub fn covers_predicate() -> String {
    format!(
        "{binds} AND c.status IN ({statuses})",
        binds = binds_predicate(),
        statuses = reading_statuses(),
    )
}

/// Repositories of `kind` covered for the workspace `$1` (`$2` is the kind).
fn covered_sql(extra: &str) -> String {
    format!(
        "SELECT r.id, r.provider_instance_id, r.native_id, r.owner, r.name, r.archived,
                r.deleted_at, r.reconciled_at
           FROM repository r
           JOIN provider_instance p ON p.id = r.provider_instance_id AND p.kind = $2
          WHERE EXISTS (
                SELECT 1 FROM repository_to_monitor m, connection c
                 WHERE m.workspace_id = $1 AND {covers})
            {extra}
          ORDER BY lower(r.owner), lower(r.name), r.id",
        covers = covers_predicate(),
    )
}

/// A page of the workspace's covered repositories of `kind`, by owner and name: at most `limit`
/// after the repository `after` (keyset, so pages neither skip nor repeat as rows arrive).
pub async fn covered_repositories<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    kind: ConnectionKind,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<CoveredRepository>, DbErr> {
    let sql = format!(
        "{} LIMIT {limit}",
        covered_sql(
            "AND ($3::uuid IS NULL OR (lower(r.owner), lower(r.name), r.id) >
                 (SELECT lower(a.owner), lower(a.name), a.id FROM repository a WHERE a.id = $3))"
        )
    );
    CoveredRepository::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        sql,
        [workspace_id.into(), kind.to_value().into(), after.into()],
    ))
    .all(db)
    .await
}

/// One repository, if the workspace's monitors cover it.
pub async fn covered_repository<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    kind: ConnectionKind,
    repository_id: Uuid,
) -> Result<Option<CoveredRepository>, DbErr> {
    CoveredRepository::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        covered_sql("AND r.id = $3"),
        [
            workspace_id.into(),
            kind.to_value().into(),
            repository_id.into(),
        ],
    ))
    .one(db)
    .await
}

/// Issues of a covered repository by number, at most `limit` after `after_number`.
pub async fn issues<C: ConnectionTrait>(
    db: &C,
    repository: &CoveredRepository,
    after_number: Option<i32>,
    limit: u64,
) -> Result<Vec<MirroredIssue>, DbErr> {
    MirroredIssue::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id, native_id, number, title, body, state, state_reason, author, locked,
                comment_count, upstream_created_at, upstream_updated_at, closed_at, deleted_at
           FROM issue WHERE repository_id = $1 AND number > $2
          ORDER BY number LIMIT $3",
        [
            repository.id.into(),
            after_number.unwrap_or(i32::MIN).into(),
            i64::try_from(limit).unwrap_or(i64::MAX).into(),
        ],
    ))
    .all(db)
    .await
}

/// A mirrored pull request (GitLab: merge request) of a covered repository; tombstoned rows
/// included. Only this module makes one, so its comments and threads are read inside the scope.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredPullRequest {
    pub id: Uuid,
    pub native_id: i64,
    pub number: i32,
    pub title: Option<String>,
    pub body: Option<String>,
    pub state: String,
    pub draft: Option<bool>,
    pub author: Option<String>,
    pub locked: Option<bool>,
    pub comment_count: Option<i32>,
    pub head_ref: Option<String>,
    pub head_sha: Option<String>,
    pub base_ref: Option<String>,
    pub upstream_created_at: OffsetDateTime,
    pub upstream_updated_at: OffsetDateTime,
    pub closed_at: Option<OffsetDateTime>,
    pub merged_at: Option<OffsetDateTime>,
    pub deleted_at: Option<OffsetDateTime>,
    /// `approved`, `changes_requested` or `review_required`; `None` while unknown.
    pub review_decision: Option<String>,
}

const PULL_REQUEST_COLUMNS: &str = "id, native_id, number, title, body, state, draft, author,
    locked, comment_count, head_ref, head_sha, base_ref, upstream_created_at,
    upstream_updated_at, closed_at, merged_at, deleted_at, review_decision";

/// Pull requests of a covered repository by number, at most `limit` after `after_number`.
pub async fn pull_requests<C: ConnectionTrait>(
    db: &C,
    repository: &CoveredRepository,
    after_number: Option<i32>,
    limit: u64,
) -> Result<Vec<MirroredPullRequest>, DbErr> {
    MirroredPullRequest::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "SELECT {PULL_REQUEST_COLUMNS} FROM pull_request
              WHERE repository_id = $1 AND number > $2 ORDER BY number LIMIT $3"
        ),
        [
            repository.id.into(),
            after_number.unwrap_or(i32::MIN).into(),
            i64::try_from(limit).unwrap_or(i64::MAX).into(),
        ],
    ))
    .all(db)
    .await
}

/// One pull request of a covered repository, by our id.
pub async fn pull_request<C: ConnectionTrait>(
    db: &C,
    repository: &CoveredRepository,
    pull_request_id: Uuid,
) -> Result<Option<MirroredPullRequest>, DbErr> {
    MirroredPullRequest::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "SELECT {PULL_REQUEST_COLUMNS} FROM pull_request WHERE repository_id = $1 AND id = $2"
        ),
        [repository.id.into(), pull_request_id.into()],
    ))
    .one(db)
    .await
}

/// A mirrored conversation comment (GitLab: a note on the merge request itself).
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredComment {
    pub id: Uuid,
    pub native_id: i64,
    pub author: Option<String>,
    pub body: Option<String>,
    pub upstream_created_at: OffsetDateTime,
    pub upstream_updated_at: OffsetDateTime,
    pub deleted_at: Option<OffsetDateTime>,
}

/// The pull request's conversation comments, oldest first.
pub async fn pull_request_comments<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Vec<MirroredComment>, DbErr> {
    MirroredComment::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id, native_id, author, body, upstream_created_at, upstream_updated_at, deleted_at
           FROM comment WHERE pull_request_id = $1
          ORDER BY upstream_created_at, native_id",
        [pull_request.id.into()],
    ))
    .all(db)
    .await
}

/// A standing approval of a mirrored merge request (GitLab).
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredApproval {
    pub username: String,
    /// When GitLab or the approving hook dated it; `None` while unknown.
    pub approved_at: Option<OffsetDateTime>,
}

/// The pull request's standing approvals, oldest first.
pub async fn pull_request_approvals<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Vec<MirroredApproval>, DbErr> {
    MirroredApproval::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT username, approved_at FROM merge_request_approval WHERE pull_request_id = $1
          ORDER BY approved_at NULLS LAST, username",
        [pull_request.id.into()],
    ))
    .all(db)
    .await
}

/// A mirrored review thread (GitLab: a discussion on the diff).
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredThread {
    pub id: Uuid,
    pub node_id: String,
    pub path: Option<String>,
    pub resolved: Option<bool>,
    pub resolved_at: Option<OffsetDateTime>,
    pub resolved_by: Option<String>,
}

/// A mirrored review comment (GitLab: a diff note), in its thread when it has one.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredReviewComment {
    pub id: Uuid,
    pub thread_id: Option<Uuid>,
    pub native_id: i64,
    pub in_reply_to: Option<i64>,
    pub path: Option<String>,
    pub line: Option<i32>,
    pub commit_sha: Option<String>,
    pub author: Option<String>,
    pub body: Option<String>,
    pub upstream_created_at: OffsetDateTime,
    pub upstream_updated_at: OffsetDateTime,
    pub deleted_at: Option<OffsetDateTime>,
}

/// The pull request's review threads, by path and id.
pub async fn pull_request_threads<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Vec<MirroredThread>, DbErr> {
    MirroredThread::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id, node_id, path, resolved, resolved_at, resolved_by
           FROM review_thread WHERE pull_request_id = $1 ORDER BY path NULLS LAST, node_id",
        [pull_request.id.into()],
    ))
    .all(db)
    .await
}

/// The pull request's review comments, oldest first.
pub async fn pull_request_review_comments<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Vec<MirroredReviewComment>, DbErr> {
    MirroredReviewComment::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT id, thread_id, native_id, in_reply_to, path, line, commit_sha, author, body,
                upstream_created_at, upstream_updated_at, deleted_at
           FROM review_comment WHERE pull_request_id = $1
          ORDER BY upstream_created_at, native_id",
        [pull_request.id.into()],
    ))
    .all(db)
    .await
}

/// A pull request's head check as last observed (GitLab: its pipeline); unknown until one was.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredHeadCheck {
    /// `success`, `failure`, `pending`, `skipped`, `no_pipeline` or `none`.
    pub state: String,
    /// The commit the state is about.
    pub sha: Option<String>,
    /// When it was observed; `None` for an undated record.
    pub observed_at: Option<OffsetDateTime>,
}

/// The pull request's head check; `None` while unknown.
pub async fn pull_request_head_check<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Option<MirroredHeadCheck>, DbErr> {
    MirroredHeadCheck::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT head_check_state AS state, head_check_sha AS sha,
                head_check_observed_at AS observed_at
           FROM pull_request WHERE id = $1 AND head_check_state IS NOT NULL",
        [pull_request.id.into()],
    ))
    .one(db)
    .await
}

/// A merge request's readiness as its last read or sync page stated it (GitLab); each `None`
/// while unknown.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct MirroredReadiness {
    /// The reviewers as a JSON array of `{username, state}`, as stored.
    pub reviewers: Option<String>,
    pub mergeable: Option<bool>,
    /// GitLab's detailed merge status, lowercased.
    pub merge_status: Option<String>,
    /// When the standing approver list was last read whole.
    pub approval_read_at: Option<OffsetDateTime>,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
}

/// The pull request's readiness facts.
pub async fn pull_request_readiness<C: ConnectionTrait>(
    db: &C,
    pull_request: &MirroredPullRequest,
) -> Result<Option<MirroredReadiness>, DbErr> {
    MirroredReadiness::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT reviewers::text AS reviewers, mergeable, merge_status, approval_read_at,
                merge_commit_sha, merged_by
           FROM pull_request WHERE id = $1",
        [pull_request.id.into()],
    ))
    .one(db)
    .await
}
