//! The check runs of a pull request's head: one read of the commit's runs through the
//! connection's reader, applied to each pull request whose head it still is, with the row
//! locked. The stored list moves only forward (dated by the read's request time); when it
//! changes and every run of the head has ended, `scm.pull_request.checks_completed` records
//! under the digest of the settled runs. Both the webhook path and the scheduled re-read use it.

use lifecycle_core::checks::CheckState;
use lifecycle_core::github::checks::{
    RunList, RunReadOutcome, StoredRun, StoredRuns, apply_run_read, assess_runs, github_check_state,
};
use lifecycle_core::source_key::LifecycleChange;
use scm_mirror::events::{self, Item, Origin};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::source::{GithubSource, RepoRef, SourceError};

/// A run as `pull_request.head_check_runs` stores it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunRow {
    name: String,
    group: String,
    state: String,
    #[serde(with = "time::serde::rfc3339::option")]
    ended_at: Option<OffsetDateTime>,
    link: Option<String>,
}

impl From<&StoredRun> for RunRow {
    fn from(run: &StoredRun) -> Self {
        RunRow {
            name: run.name.clone(),
            group: run.group.clone(),
            state: run.state.clone(),
            ended_at: run.ended_at,
            link: run.link.clone(),
        }
    }
}

impl From<RunRow> for StoredRun {
    fn from(row: RunRow) -> Self {
        StoredRun {
            name: row.name,
            group: row.group,
            state: row.state,
            ended_at: row.ended_at,
            link: row.link,
        }
    }
}

/// What one read did across the pull requests it was about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Pull requests whose stored runs changed.
    pub stored: usize,
    /// `checks_completed` events recorded.
    pub completions: usize,
}

/// Reads `sha`'s runs once and applies the read to each of `pull_requests` whose head it still
/// is. `Err` is the failed read (nothing recorded, the stored runs stay); database failures are
/// the outer error.
#[tracing::instrument(skip(pool, source, pull_requests), fields(repository = %format!("{}/{}", repo.owner, repo.name)))]
pub async fn read_and_apply(
    pool: &PgPool,
    source: &dyn GithubSource,
    repo: &RepoRef,
    sha: &str,
    pull_requests: &[Uuid],
    origin: Origin,
) -> Result<Result<Applied, SourceError>, sqlx::Error> {
    // A read is dated by when we asked (our clock).
    let read_at = OffsetDateTime::now_utc();
    let read = match source.commit_check_runs(repo, sha).await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %e, "reading the head's check runs failed; nothing recorded");
            metrics::counter!("github_check_run_reads_total", "outcome" => "failed").increment(1);
            return Ok(Err(e));
        }
    };
    metrics::counter!("github_check_run_reads_total", "outcome" => "read").increment(1);
    let rollup = read.rollup;
    let list = assess_runs(read, source.own_app_id());
    let state = state_text(github_check_state(rollup, &list));
    let mut applied = Applied::default();
    for id in pull_requests {
        let (stored, recorded) = apply(pool, *id, sha, read_at, &list, state, origin).await?;
        applied.stored += usize::from(stored);
        applied.completions += usize::from(recorded);
    }
    Ok(Ok(applied))
}

type LockedRow = (
    Uuid,
    Option<String>,
    OffsetDateTime,
    Option<sqlx::types::Json<Vec<RunRow>>>,
    Option<String>,
    Option<OffsetDateTime>,
    Option<OffsetDateTime>,
    Option<bool>,
);

/// Applies one assessed read to one pull request, with its row locked. Returns (stored runs
/// changed, checks_completed recorded).
async fn apply(
    pool: &PgPool,
    pull_request_id: Uuid,
    sha: &str,
    read_at: OffsetDateTime,
    list: &RunList,
    state: &str,
    origin: Origin,
) -> Result<(bool, bool), sqlx::Error> {
    let mut txn = pool.begin().await?;
    let row: Option<LockedRow> = sqlx::query_as(
        "SELECT repository_id, head_sha, upstream_updated_at, head_check_runs,
                head_check_runs_sha, head_check_runs_read_at, head_check_runs_changed_at,
                head_check_runs_finished
           FROM pull_request WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
    )
    .bind(pull_request_id)
    .fetch_optional(&mut *txn)
    .await?;
    let Some((repository_id, head, version, runs, runs_sha, read_at_stored, changed_at, finished)) =
        row
    else {
        return Ok((false, false));
    };
    // The read is about one commit and never moves the head: a moved head takes nothing from it.
    if head.as_deref() != Some(sha) {
        tracing::info!(%pull_request_id, "the head moved since the read was asked; nothing recorded");
        return Ok((false, false));
    }
    let mut stored = match (runs, runs_sha, read_at_stored, changed_at, finished) {
        (Some(runs), Some(head), Some(read_at), Some(changed_at), Some(finished)) => {
            Some(StoredRuns {
                head,
                read_at,
                changed_at,
                finished,
                runs: runs.0.into_iter().map(StoredRun::from).collect(),
            })
        }
        _ => None,
    };
    let outcome = apply_run_read(&mut stored, sha, read_at, list);
    let completed = match outcome {
        RunReadOutcome::Stale => {
            tracing::info!(%pull_request_id, "the read is older than the stored read of this head; no completion recorded");
            return Ok((false, false));
        }
        RunReadOutcome::Unchanged => {
            tracing::info!(%pull_request_id, "the read shows the stored runs; no completion recorded");
            return Ok((false, false));
        }
        RunReadOutcome::Replaced { checks_completed } => checks_completed,
    };
    let Some(stored) = stored else {
        return Ok((false, false));
    };
    let rows: Vec<RunRow> = stored.runs.iter().map(RunRow::from).collect();
    sqlx::query(
        "UPDATE pull_request
            SET head_check_runs = $2, head_check_runs_sha = $3, head_check_runs_read_at = $4,
                head_check_runs_changed_at = $5, head_check_runs_finished = $6,
                head_check_state = $7
          WHERE id = $1",
    )
    .bind(pull_request_id)
    .bind(sqlx::types::Json(&rows))
    .bind(&stored.head)
    .bind(stored.read_at)
    .bind(stored.changed_at)
    .bind(stored.finished)
    .bind(state)
    .execute(&mut *txn)
    .await?;
    let recorded = match list.settled().filter(|_| completed) {
        Some(settled) => {
            let item_key = pull_request_id.to_string();
            let change = LifecycleChange::ChecksCompleted {
                item: &item_key,
                head: sha,
                runs: &settled,
            };
            // The runs are not part of the version: the event pins the pull request's current one.
            let item = Item::pull_request(crate::mirror::VENDOR, pull_request_id, repository_id);
            let recorded = events::record(&mut txn, &item, &change, version, origin).await?;
            if !recorded {
                tracing::info!(%pull_request_id, "these settled runs already recorded their completion");
            }
            recorded
        }
        None => {
            let why: Vec<String> = list.limitations.iter().map(|l| format!("{l:?}")).collect();
            // Incomplete list, a run not finished, or no rollup: say which.
            tracing::info!(%pull_request_id, limitations = %why.join(","), "the head's checks have not all finished; no completion recorded");
            false
        }
    };
    txn.commit().await?;
    Ok((true, recorded))
}

/// The check state as stored.
fn state_text(state: CheckState) -> &'static str {
    match state {
        CheckState::Success => "success",
        CheckState::Failure => "failure",
        CheckState::Pending => "pending",
        CheckState::Skipped => "skipped",
        CheckState::NoPipeline => "no_pipeline",
        CheckState::None => "none",
    }
}

/// The open pull requests of a repository whose head is `sha`.
pub async fn pull_requests_at_head(
    pool: &PgPool,
    repository_id: Uuid,
    sha: &str,
) -> Result<Vec<Uuid>, sqlx::Error> {
    let rows: Vec<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM pull_request
          WHERE repository_id = $1 AND head_sha = $2 AND state = 'open' AND deleted_at IS NULL
          ORDER BY id",
    )
    .bind(repository_id)
    .bind(sha)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The open pull requests of a repository whose stored runs of their head want another read:
/// unfinished, changed in the last 24 hours. Returns (pull request, head).
pub async fn due_for_rescan(
    pool: &PgPool,
    repository_id: Uuid,
    now: OffsetDateTime,
) -> Result<Vec<(Uuid, String)>, sqlx::Error> {
    type Row = (Uuid, String, OffsetDateTime, OffsetDateTime);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, head_check_runs_sha, head_check_runs_read_at, head_check_runs_changed_at
           FROM pull_request
          WHERE repository_id = $1 AND state = 'open' AND deleted_at IS NULL
            AND head_check_runs_finished = false AND head_check_runs_sha = head_sha
            AND head_check_runs_read_at IS NOT NULL AND head_check_runs_changed_at IS NOT NULL
          ORDER BY id",
    )
    .bind(repository_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, head, read_at, changed_at)| {
            // Re-read only unfinished lists whose runs changed in the last day.
            lifecycle_core::github::checks::needs_rescan(
                &StoredRuns {
                    head: head.clone(),
                    read_at: *read_at,
                    changed_at: *changed_at,
                    finished: false,
                    runs: Vec::new(),
                },
                now,
            )
        })
        .map(|(id, head, _, _)| (id, head))
        .collect())
}
