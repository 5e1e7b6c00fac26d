//! The `repository` table: one row per repository of a provider instance, keyed by the
//! vendor's native id so a rename re-keys the row instead of forking it.

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
