//! The `repository` table: one row per repository of a provider instance, keyed by the
//! vendor's native id so a rename re-keys the row instead of forking it.

use time::OffsetDateTime;
use uuid::Uuid;

/// `owner/name` of a repository as the vendor reports it now, with its native id when known (a
/// repository the credentials reach always carries it; a webhook's may not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    pub owner: String,
    pub name: String,
    pub native_id: Option<i64>,
}

/// The repository header every listing page and webhook carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoHeader {
    pub native_id: i64,
    pub node_id: String,
    pub owner: String,
    pub name: String,
    pub archived: Option<bool>,
}

/// Upserts the repository by native id (a rename re-keys the row) and returns its id.
pub async fn ensure_repository<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    provider_instance_id: Uuid,
    header: &RepoHeader,
) -> Result<Uuid, sqlx::Error> {
    let (id,): (Uuid,) = sqlx::query_as(
        "INSERT INTO repository (id, provider_instance_id, native_id, node_id, owner, name, archived)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (provider_instance_id, native_id) DO UPDATE
            SET node_id = EXCLUDED.node_id, owner = EXCLUDED.owner, name = EXCLUDED.name,
                archived = coalesce(EXCLUDED.archived, repository.archived),
                deleted_at = NULL, updated_at = now()
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(provider_instance_id)
    .bind(header.native_id)
    .bind(&header.node_id)
    .bind(&header.owner)
    .bind(&header.name)
    .bind(header.archived)
    .fetch_one(executor)
    .await?;
    Ok(id)
}

/// The mirrored repository of `native_id` on a provider instance, with its stored name (the
/// name to ask the vendor by, never one a payload claims); `None` when not mirrored.
pub async fn stored<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    provider_instance_id: Uuid,
    native_id: i64,
) -> Result<Option<(Uuid, RepoRef)>, sqlx::Error> {
    let row: Option<(Uuid, String, String)> = sqlx::query_as(
        "SELECT id, owner, name FROM repository WHERE provider_instance_id = $1 AND native_id = $2",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|(id, owner, name)| {
        let native_id = Some(native_id);
        (
            id,
            RepoRef {
                owner,
                name,
                native_id,
            },
        )
    }))
}

/// Whether a rename received at `received_at` may set repository `native_id`'s name, locking its
/// row: `false` when the stored name was set by a rename received later. A repository not
/// mirrored yet has no stored name to protect.
pub async fn rename_is_current(
    conn: &mut sqlx::PgConnection,
    provider_instance_id: Uuid,
    native_id: i64,
    received_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let stored: Option<(Option<OffsetDateTime>,)> = sqlx::query_as(
        "SELECT renamed_at FROM repository
          WHERE provider_instance_id = $1 AND native_id = $2 FOR UPDATE",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .fetch_optional(&mut *conn)
    .await?;
    // Dated state: an older rename never restores a name a later one replaced.
    Ok(!matches!(stored, Some((Some(at),)) if received_at < at))
}

/// Dates repository `native_id`'s stored name by the rename received at `received_at` (never
/// moving the date back), in the caller's transaction.
pub async fn date_rename(
    conn: &mut sqlx::PgConnection,
    provider_instance_id: Uuid,
    native_id: i64,
    received_at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE repository SET renamed_at = GREATEST(renamed_at, $3)
          WHERE provider_instance_id = $1 AND native_id = $2",
    )
    .bind(provider_instance_id)
    .bind(native_id)
    .bind(received_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
