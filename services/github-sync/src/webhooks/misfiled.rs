//! Misfiled work: an issue or pull request mirrored under another repository row of the same
//! instance than the one GitHub reports for it now (an earlier version filed work by name, and a
//! reused name could capture it). A webhook, or a sync page, moves such a row to the reported
//! repository before it locks the item, or skips the work when moving would break an invariant.

use std::collections::HashSet;

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use scm_mirror::admission::GithubRepository;

use super::{Outcome, Webhook, WebhookError};
use scm_mirror::items::ItemClass;

/// Why misfiled work stays where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The row already has item events: an item's parent never changes.
    ItemRegistered,
    /// The reported repository already has a row of this type for the number (or the id).
    IdHeldByAnotherRepository,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::ItemRegistered => "itemRegistered",
            SkipReason::IdHeldByAnotherRepository => "idHeldByAnotherRepository",
        }
    }
}

/// Moves the `class` row of the work `native_id` (number `number`) to `repository_id`, the
/// repository GitHub reports, when it is filed under another repository row of the same
/// provider instance. `Some(outcome)`: the work is skipped and the caller writes nothing (no
/// automatic repair: the row stays with its holding repository until a maintainer moves it).
/// Runs in the caller's transaction, before it locks the item.
pub async fn refile(
    txn: &mut PgConnection,
    class: ItemClass,
    provider_instance_id: Uuid,
    repository_id: Uuid,
    native_id: i64,
    number: i32,
) -> Result<Option<Outcome>, sqlx::Error> {
    let table = class.table();
    let misfiled: Vec<Misfiled> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT i.id, i.repository_id FROM {table} i
           JOIN repository r ON r.id = i.repository_id
          WHERE r.provider_instance_id = $1 AND i.native_id = $2 AND i.repository_id <> $3
          ORDER BY i.id FOR UPDATE OF i"
    )))
    .bind(provider_instance_id)
    .bind(native_id)
    .bind(repository_id)
    .fetch_all(&mut *txn)
    .await?;
    for Misfiled {
        id: row_id,
        repository_id: holding_repository_id,
    } in misfiled
    {
        let reason = skip_reason(txn, class, row_id, repository_id, native_id, number).await?;
        if reason.is_none() {
            move_row(txn, class, row_id, repository_id).await?;
        }
        metrics::counter!(
            "github_misfiled_work",
            "type" => table,
            "outcome" => if reason.is_some() { "skipped" } else { "moved" },
            "reason" => reason.map_or("none", SkipReason::as_str),
        )
        .increment(1);
        match reason {
            Some(reason) => {
                tracing::warn!(
                    r#type = table,
                    row_id = %row_id,
                    holding_repository_id = %holding_repository_id,
                    repository_id = %repository_id,
                    reason = reason.as_str(),
                    "misfiled work skipped: it stays under its holding repository until a maintainer moves the row and its items"
                );
                return Ok(Some(Outcome::Unchanged));
            }
            None => tracing::warn!(
                r#type = table,
                row_id = %row_id,
                holding_repository_id = %holding_repository_id,
                repository_id = %repository_id,
                "misfiled work moved to the repository GitHub reports"
            ),
        }
    }
    Ok(None)
}

/// The webhook's side of [`refile`]: a delivery moves work only out of repositories its
/// connection is admitted for too, so a payload about one repository cannot pull another
/// tenant's work into it ([`WebhookError::OutOfScope`] otherwise, and nothing is written).
pub async fn refile_admitted(
    txn: &mut PgConnection,
    class: ItemClass,
    hook: &Webhook<'_>,
    repository_id: Uuid,
    native_id: i64,
    number: i32,
) -> Result<Option<Outcome>, WebhookError> {
    let holders: Vec<(i64,)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT DISTINCT r.native_id FROM {} i
           JOIN repository r ON r.id = i.repository_id
          WHERE r.provider_instance_id = $1 AND i.native_id = $2 AND i.repository_id <> $3",
        class.table()
    )))
    .bind(hook.provider_instance_id)
    .bind(native_id)
    .bind(repository_id)
    .fetch_all(&mut *txn)
    .await?;
    for (holder,) in holders {
        // Moving work out of a repository writes to it: admission applies to it as well.
        hook.admit(&mut *txn, GithubRepository { native_id: holder })
            .await?;
    }
    Ok(refile(
        txn,
        class,
        hook.provider_instance_id,
        repository_id,
        native_id,
        number,
    )
    .await?)
}

/// The sync's side: before a page of `class` (`(native id, number)` per node) is written under
/// `repository_id`, refiles each node misfiled under another repository row of its instance.
/// An item row filed under another repository than the one reported.
#[derive(sqlx::FromRow)]
struct Misfiled {
    id: Uuid,
    /// The repository holding it.
    repository_id: Uuid,
}

/// A native id of a page that some other repository row of the same instance holds.
#[derive(sqlx::FromRow)]
struct Filed {
    native_id: i64,
    provider_instance_id: Uuid,
}

/// Returns the native ids skipped: the page leaves them alone and the rest of it is written.
pub async fn refile_page(
    txn: &mut PgConnection,
    class: ItemClass,
    repository_id: Uuid,
    nodes: &[(i64, i32)],
) -> Result<HashSet<i64>, sqlx::Error> {
    let native_ids: Vec<i64> = nodes.iter().map(|(id, _)| *id).collect();
    let found: Vec<Filed> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT DISTINCT i.native_id, reported.provider_instance_id FROM {} i
           JOIN repository r ON r.id = i.repository_id
           JOIN repository reported ON reported.id = $1
                                   AND reported.provider_instance_id = r.provider_instance_id
          WHERE i.native_id = ANY($2) AND i.repository_id <> $1",
        class.table()
    )))
    .bind(repository_id)
    .bind(&native_ids)
    .fetch_all(&mut *txn)
    .await?;
    let mut skipped = HashSet::new();
    for Filed {
        native_id,
        provider_instance_id,
    } in found
    {
        let Some(&(_, number)) = nodes.iter().find(|(id, _)| *id == native_id) else {
            continue;
        };
        let outcome = refile(
            txn,
            class,
            provider_instance_id,
            repository_id,
            native_id,
            number,
        )
        .await?;
        if outcome.is_some() {
            skipped.insert(native_id);
        }
    }
    Ok(skipped)
}

async fn skip_reason(
    txn: &mut PgConnection,
    class: ItemClass,
    row_id: Uuid,
    repository_id: Uuid,
    native_id: i64,
    number: i32,
) -> Result<Option<SkipReason>, sqlx::Error> {
    // An item's parent never changes: a row with item events stays where it is.
    let (registered,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM item_event WHERE item_id = $1)
             OR EXISTS (SELECT 1 FROM activity_event WHERE item_id = $1)",
    )
    .bind(row_id)
    .fetch_one(&mut *txn)
    .await?;
    if registered {
        return Ok(Some(SkipReason::ItemRegistered));
    }
    // The reported repository's number (or id) is taken by a row of its own.
    let (held,): (bool,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM {} WHERE repository_id = $1
                          AND (number = $2 OR native_id = $3))",
        class.table()
    )))
    .bind(repository_id)
    .bind(number)
    .bind(native_id)
    .fetch_one(&mut *txn)
    .await?;
    Ok(held.then_some(SkipReason::IdHeldByAnotherRepository))
}

/// Moves the row and the comments filed with it; reviews and threads hang off the row itself.
async fn move_row(
    txn: &mut PgConnection,
    class: ItemClass,
    row_id: Uuid,
    repository_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {} SET repository_id = $2, mirrored_at = now() WHERE id = $1",
        class.table()
    )))
    .bind(row_id)
    .bind(repository_id)
    .execute(&mut *txn)
    .await?;
    let parent = match class {
        ItemClass::Issue => "issue_id",
        ItemClass::PullRequest => "pull_request_id",
    };
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE comment SET repository_id = $2 WHERE {parent} = $1"
    )))
    .bind(row_id)
    .bind(repository_id)
    .execute(&mut *txn)
    .await?;
    Ok(())
}
