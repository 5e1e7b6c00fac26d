//! Monitors: a workspace's wish to mirror a repository, named by owner/name and bound to the
//! repository's native id. They materialise only from what a connection's own credentials
//! resolve (an App installation's repositories, a PAT's names resolved with the PAT), always
//! with the native id, and follow the repository by native id when its name moves; the webhook
//! consumer's filters follow the monitors. Only an id-bound monitor grants reads
//! (`store::scm_scope`), so a name is bound to an id only with its own connection's proof.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::repository::RepoRef;

/// A mirrored repository's stored name.
#[derive(sqlx::FromRow)]
struct RepoName {
    owner: String,
    name: String,
}

/// A monitor a re-key may move.
#[derive(sqlx::FromRow)]
struct MonitorRow {
    id: Uuid,
    connection_id: Uuid,
    owner: String,
    name: String,
    native_id: Option<i64>,
}

/// Another monitor of the connection holding a name.
#[derive(sqlx::FromRow)]
struct Holder {
    id: Uuid,
    native_id: Option<i64>,
}

/// A mirrored repository a removed monitor was bound to, with the connection's workspace and
/// kind.
#[derive(Clone, sqlx::FromRow)]
struct Released {
    repository_id: Uuid,
    workspace_id: Uuid,
    kind: String,
}

/// What a re-key did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rekeyed {
    /// Monitors now named as the repository is (or newly bound to its native id).
    pub moved: u64,
    /// Duplicates of a monitor that already had the new name, removed.
    pub merged: u64,
    /// Left alone: the new name is held by a monitor of another repository on that connection.
    pub blocked: u64,
}

/// Re-keys the repository `native_id` of a provider instance to `owner/name`: its mirrored row
/// (when there is one) and every monitor of it, on every connection of that instance. Monitors
/// are found by native id; a legacy monitor without one is found by a name the repository had:
/// `previous`, the mirrored row's stored name, or the current name. Only the monitors of
/// `verified_by`, the connection whose credentials reported the repository, are bound to the
/// native id; another connection's legacy monitor waits for its own sync. Runs in the caller's
/// transaction.
pub async fn rekey(
    conn: &mut PgConnection,
    verified_by: Uuid,
    provider_instance_id: Uuid,
    native_id: i64,
    owner: &str,
    name: &str,
    previous: &[(&str, &str)],
) -> Result<Rekeyed, sqlx::Error> {
    let stored: Option<RepoName> = sqlx::query_as(
        "SELECT owner, name FROM repository
          WHERE provider_instance_id = $1 AND native_id = $2 FOR UPDATE",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .fetch_optional(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE repository SET owner = $3, name = $4, updated_at = now()
          WHERE provider_instance_id = $1 AND native_id = $2 AND (owner <> $3 OR name <> $4)",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .bind(owner)
    .bind(name)
    .execute(&mut *conn)
    .await?;
    // Legacy monitors without a native id fall back to a name the repository had.
    let mut owners: Vec<String> = vec![owner.to_lowercase()];
    let mut names: Vec<String> = vec![name.to_lowercase()];
    for (o, n) in previous
        .iter()
        .copied()
        .chain(stored.as_ref().map(|r| (r.owner.as_str(), r.name.as_str())))
    {
        owners.push(o.to_lowercase());
        names.push(n.to_lowercase());
    }
    let monitors: Vec<MonitorRow> = sqlx::query_as(
        "SELECT m.id, m.connection_id, m.owner, m.name, m.native_id
           FROM repository_to_monitor m
           JOIN connection c ON c.id = m.connection_id
          JOIN provider_instance p ON p.id = c.provider_instance_id
          WHERE c.provider_instance_id = $1 AND c.kind = p.kind
            AND (m.native_id = $2
                 OR (m.native_id IS NULL AND (lower(m.owner), lower(m.name)) IN
                     (SELECT o, n FROM unnest($3::text[], $4::text[]) AS t (o, n))))
          ORDER BY m.id FOR UPDATE OF m",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .bind(&owners)
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?;
    let mut done = Rekeyed::default();
    for monitor in monitors {
        let MonitorRow {
            id, connection_id, ..
        } = monitor;
        if monitor.native_id == Some(native_id) && monitor.owner == owner && monitor.name == name {
            continue;
        }
        // A bound native id admits writes: only the connection that verified it gets one.
        if monitor.native_id.is_none() && connection_id != verified_by {
            continue;
        }
        let holder: Option<Holder> = sqlx::query_as(
            "SELECT id, native_id FROM repository_to_monitor
              WHERE connection_id = $1 AND lower(owner) = lower($2) AND lower(name) = lower($3)
                AND id <> $4
              FOR UPDATE",
        )
        .bind(connection_id)
        .bind(owner)
        .bind(name)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
        match holder {
            // The connection already monitors the repository under its new name.
            Some(Holder {
                native_id: Some(held),
                ..
            }) if held == native_id => {
                sqlx::query("DELETE FROM repository_to_monitor WHERE id = $1")
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                done.merged += 1;
                continue;
            }
            // A monitor of another repository holds the name: that one is stale, and the next
            // reconcile's listing moves it; this one keeps its name until then.
            Some(Holder {
                id: holder,
                native_id: Some(held),
            }) => {
                tracing::warn!(monitor = %id, %holder, native_id, held, "monitor not re-keyed: its new name is held by a monitor of another repository");
                done.blocked += 1;
                continue;
            }
            // A monitor by the new name without an id means this repository: one is enough.
            Some(Holder {
                id: holder,
                native_id: None,
            }) => {
                sqlx::query("DELETE FROM repository_to_monitor WHERE id = $1")
                    .bind(holder)
                    .execute(&mut *conn)
                    .await?;
                done.merged += 1;
            }
            None => {}
        }
        sqlx::query(
            "UPDATE repository_to_monitor
                SET owner = $2, name = $3, native_id = $4, updated_at = now()
              WHERE id = $1",
        )
        .bind(id)
        .bind(owner)
        .bind(name)
        .bind(native_id)
        .execute(&mut *conn)
        .await?;
        done.moved += 1;
    }
    Ok(done)
}

/// Materialises the monitors of a connection for `repos`, the repositories its own credentials
/// resolved. Each first re-keys the monitors it already has (a moved name never leaves a stale
/// monitor beside a new one); then every repository the connection does not monitor by name
/// gets a monitor bound to its native id. A repository without a native id gets none: only an
/// id-bound monitor grants reads. Monitors are never removed here.
pub async fn materialise(
    conn: &mut PgConnection,
    provider_instance_id: Uuid,
    workspace_id: Uuid,
    connection_id: Uuid,
    repos: &[RepoRef],
) -> Result<u64, sqlx::Error> {
    // Re-keys first, so a name a rename freed is free for the repository that took it.
    for repo in repos {
        if let Some(native_id) = repo.native_id {
            rekey(
                conn,
                connection_id,
                provider_instance_id,
                native_id,
                &repo.owner,
                &repo.name,
                &[],
            )
            .await?;
        }
    }
    let mut created = 0;
    for repo in repos {
        let Some(native_id) = repo.native_id else {
            tracing::warn!(repository = %format!("{}/{}", repo.owner, repo.name), %connection_id, "no native id: no monitor");
            continue;
        };
        created += sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name,
                                                native_id)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(Uuid::now_v7())
        .bind(workspace_id)
        .bind(connection_id)
        .bind(&repo.owner)
        .bind(&repo.name)
        .bind(native_id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    }
    Ok(created)
}

/// Removes the connection's monitors not bound to one of `native_ids` (legacy name-only ones
/// included): the connection's credentials reach nothing else. The repositories they were bound
/// to are released to the eraser's orphan guard.
pub async fn retain_only(
    conn: &mut PgConnection,
    connection_id: Uuid,
    native_ids: &[i64],
) -> Result<u64, sqlx::Error> {
    let removed: Vec<Option<i64>> = sqlx::query_scalar(
        "DELETE FROM repository_to_monitor
          WHERE connection_id = $1 AND (native_id IS NULL OR NOT native_id = ANY($2))
          RETURNING native_id",
    )
    .bind(connection_id)
    .bind(native_ids)
    .fetch_all(&mut *conn)
    .await?;
    release(conn, connection_id, &removed).await?;
    Ok(removed.len() as u64)
}

/// Removes the connection's monitors of `repo` (by native id, or by name for a monitor without
/// one). Mirror rows stay here: other workspaces may still monitor the repository; the
/// repository is released to the eraser, which deletes it if no monitor anywhere covers it.
pub async fn remove(
    conn: &mut PgConnection,
    connection_id: Uuid,
    repo: &RepoRef,
) -> Result<u64, sqlx::Error> {
    let removed: Vec<Option<i64>> = sqlx::query_scalar(
        "DELETE FROM repository_to_monitor
          WHERE connection_id = $1
            AND (native_id = $2
                 OR (native_id IS NULL AND lower(owner) = lower($3) AND lower(name) = lower($4)))
          RETURNING native_id",
    )
    .bind(connection_id)
    .bind(repo.native_id)
    .bind(&repo.owner)
    .bind(&repo.name)
    .fetch_all(&mut *conn)
    .await?;
    release(conn, connection_id, &removed).await?;
    Ok(removed.len() as u64)
}

/// Announces, in the caller's transaction, the mirrored repositories that removed monitors of
/// `connection_id` were bound to (their native ids on the connection's provider instance, the
/// binding half of the monitor-scope rule, captured before anything else changes), so the
/// eraser runs its orphan guard on each: a repository leaving a connection's reach is deleted
/// when no monitor anywhere covers it any more.
async fn release(
    conn: &mut PgConnection,
    connection_id: Uuid,
    native_ids: &[Option<i64>],
) -> Result<(), sqlx::Error> {
    let native_ids: Vec<i64> = native_ids.iter().flatten().copied().collect();
    if native_ids.is_empty() {
        return Ok(());
    }
    let bound: Vec<Released> = sqlx::query_as(
        "SELECT r.id AS repository_id, c.workspace_id, c.kind FROM repository r
           JOIN connection c ON c.id = $1 AND c.provider_instance_id = r.provider_instance_id
          WHERE r.native_id = ANY($2) ORDER BY r.id",
    )
    .bind(connection_id)
    .bind(&native_ids)
    .fetch_all(&mut *conn)
    .await?;
    let Some(Released {
        workspace_id, kind, ..
    }) = bound.first().cloned()
    else {
        return Ok(());
    };
    let message = store::contracts::RepositoriesReleased {
        connection_id,
        workspace_id,
        kind,
        repository_ids: bound.into_iter().map(|r| r.repository_id).collect(),
    };
    store::outbox::enqueue_contract(&mut *conn, &message).await?;
    Ok(())
}
