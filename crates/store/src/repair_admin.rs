//! Provider repair as instance admins see and settle it: fences listed and shown with their
//! references, an admin's confirmation of an uncertain attempt or release of a fence (audited in
//! `provider_repair_audit`), and a removal credential handed in for a connection's unsettled
//! repairs.
//!
//! A settlement takes the fence's identity lock, then its row, like every removal
//! ([`crate::repair`]'s lock order), and stores the fence through [`crate::repair::write`], so
//! it clears credentials and marks registrations removed exactly as the dispatcher does.

use lifecycle_core::repair::{AdminError, FenceStatus, ProviderKind};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::repair::{REMOVAL_CREDENTIAL, Repair};
use crate::secrets::{Keyring, SecretError};

/// The transition token of the message that wakes provider-repair when a removal credential
/// arrives (`lifecycle.<kind>.<connectionId>.repair_credential`).
pub const CREDENTIAL_WAKE: &str = "repair_credential";

/// Which fences a listing shows, and the page.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub status: Option<FenceStatus>,
    pub provider: Option<ProviderKind>,
    /// Only fences one of this connection's references serves.
    pub connection_id: Option<Uuid>,
    /// Fences after this id (ids are time-ordered: by creation).
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// One fence with its times, as a listing shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub repair: Repair,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub settled_at: Option<OffsetDateTime>,
}

#[derive(sqlx::FromRow)]
struct Times {
    id: Uuid,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    settled_at: Option<OffsetDateTime>,
}

/// A page of fences, oldest first.
pub async fn list(pool: &sqlx::PgPool, filter: &Filter) -> Result<Vec<Listed>, sqlx::Error> {
    let rows: Vec<Times> = sqlx::query_as(
        "SELECT id, created_at, updated_at, settled_at FROM provider_resource_repair f
          WHERE ($1::text IS NULL OR f.status = $1)
            AND ($2::text IS NULL OR f.provider = $2)
            AND ($3::uuid IS NULL OR f.id IN (SELECT repair_id FROM connection_provider_repair
                                               WHERE connection_id = $3))
            AND ($4::uuid IS NULL OR f.id > $4)
          ORDER BY f.id LIMIT $5",
    )
    .bind(filter.status.map(FenceStatus::as_str))
    .bind(filter.provider.map(ProviderKind::as_str))
    .bind(filter.connection_id)
    .bind(filter.after)
    .bind(filter.limit.max(1))
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for t in rows {
        // A fence deleted between the two reads is simply not listed.
        if let Some(repair) = crate::repair::load(pool, t.id).await? {
            out.push(Listed {
                repair,
                created_at: t.created_at,
                updated_at: t.updated_at,
                settled_at: t.settled_at,
            });
        }
    }
    Ok(out)
}

/// One fence's times.
pub async fn listed(pool: &sqlx::PgPool, id: Uuid) -> Result<Option<Listed>, sqlx::Error> {
    let Some(t): Option<Times> = sqlx::query_as(
        "SELECT id, created_at, updated_at, settled_at FROM provider_resource_repair
          WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    Ok(crate::repair::load(pool, id).await?.map(|repair| Listed {
        repair,
        created_at: t.created_at,
        updated_at: t.updated_at,
        settled_at: t.settled_at,
    }))
}

/// A workspace's reference to a fence (never its credential, only whether it holds one).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Reference {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub registration_id: Option<Uuid>,
    /// The transition that captured it (`disconnected`, `suspended`, `late`, ...).
    pub transition: String,
    pub connection_version: i64,
    pub holds_credential: bool,
    pub created_at: OffsetDateTime,
}

/// The references of fence `id`, oldest first.
pub async fn references(pool: &sqlx::PgPool, id: Uuid) -> Result<Vec<Reference>, sqlx::Error> {
    sqlx::query_as(
        "SELECT workspace_id, connection_id, registration_id, transition, connection_version,
                credential_key_id IS NOT NULL AS holds_credential, created_at
           FROM connection_provider_repair WHERE repair_id = $1 ORDER BY created_at, id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
}

/// One admin action on a fence.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditEntry {
    pub id: Uuid,
    pub actor: String,
    pub action: String,
    pub attempt: Option<i64>,
    pub reason: String,
    pub before_status: String,
    pub after_status: String,
    pub created_at: OffsetDateTime,
}

/// The admin actions on fence `id`, oldest first.
pub async fn audit(pool: &sqlx::PgPool, id: Uuid) -> Result<Vec<AuditEntry>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, actor, action, attempt, reason, before_status, after_status, created_at
           FROM provider_repair_audit WHERE repair_id = $1 ORDER BY created_at, id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
}

/// What an instance admin does to a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminAction {
    /// Uncertain `attempt` removed the resource.
    Confirm { attempt: u64 },
    /// Give the fence up without proof of removal.
    Release,
}

impl AdminAction {
    fn name(self) -> &'static str {
        match self {
            Self::Confirm { .. } => "confirm",
            Self::Release => "release",
        }
    }
}

/// Why a settlement changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// No such fence.
    #[error("no such provider repair")]
    NotFound,
    /// The fence's rules refused it.
    #[error(transparent)]
    Refused(#[from] AdminError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Applies an admin's `action` to fence `id` in one transaction under its identity lock: the
/// fence moves by `lifecycle_core::repair`'s rules and is stored as the dispatcher stores it,
/// with an audit row naming `actor` and `reason`. A refusal writes nothing.
pub async fn settle(
    pool: &sqlx::PgPool,
    id: Uuid,
    action: AdminAction,
    actor: &str,
    reason: &str,
) -> Result<Repair, SettleError> {
    let mut tx = pool.begin().await?;
    let hash: Option<i64> =
        sqlx::query_scalar("SELECT identity_hash FROM provider_resource_repair WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(hash) = hash else {
        return Err(SettleError::NotFound);
    };
    // Identity lock before the row, as every adoption and removal takes them.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(hash)
        .execute(&mut *tx)
        .await?;
    let mut repair = crate::repair::load_locked(&mut tx, id).await?;
    let before = repair.fence.status();
    let (after, outcome) = match action {
        AdminAction::Confirm { attempt } => (
            repair.fence.admin_confirm(attempt)?,
            format!("an instance admin confirmed attempt {attempt}"),
        ),
        AdminAction::Release => (
            repair.fence.admin_release()?,
            "an instance admin released it without proof of removal".to_owned(),
        ),
    };
    crate::repair::write(&mut tx, id, &repair.fence, &outcome).await?;
    sqlx::query(
        "INSERT INTO provider_repair_audit (id, repair_id, actor, action, attempt, reason,
             before_status, after_status)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(Uuid::now_v7())
    .bind(id)
    .bind(actor)
    .bind(action.name())
    .bind(match action {
        AdminAction::Confirm { attempt } => Some(attempt as i64),
        AdminAction::Release => None,
    })
    .bind(reason)
    .bind(before.as_str())
    .bind(after.as_str())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    repair.last_outcome = Some(outcome);
    Ok(repair)
}

/// What handing in a removal credential did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CredentialReceipt {
    /// Unsettled fences the connection's references serve.
    pub unsettled: u64,
    /// Fences that waited for a credential and are due now.
    pub woken: u64,
    /// Whether one of those fences has an attempt whose outcome is still unrecorded: the
    /// credential is kept, but no new attempt starts before that outcome is known.
    pub unrecorded: bool,
}

/// The connection's unsettled fences, and whether any has an uncertain attempt.
pub async fn unsettled<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
) -> Result<CredentialReceipt, DbErr> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT count(*) AS unsettled,
                    coalesce(bool_or(cardinality(f.uncertain) > 0), false) AS unrecorded
               FROM provider_resource_repair f
              WHERE f.status NOT IN ('resolved', 'released')
                AND f.id IN (SELECT repair_id FROM connection_provider_repair
                              WHERE connection_id = $1)",
            vec![connection_id.into()],
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("a count returned no row".into()))?;
    Ok(CredentialReceipt {
        unsettled: row.try_get::<i64>("", "unsettled")?.max(0) as u64,
        woken: 0,
        unrecorded: row.try_get("", "unrecorded")?,
    })
}

/// Seals `plaintext` as connection `connection_id`'s removal credential straight into the
/// references of its unsettled fences (never into `connection_secret`: a disconnected
/// connection's credentials stay deleted), and makes the fences that waited for one due at
/// once; in the caller's transaction, the connection row locked.
pub async fn hand_in_credential<C: ConnectionTrait>(
    db: &C,
    ring: &Keyring,
    connection_id: Uuid,
    plaintext: &[u8],
) -> Result<CredentialReceipt, SecretError> {
    let key = ring.sealing();
    // Sealed as the connection's secret would be: its id and name are the associated data.
    let (nonce, ciphertext) = key.seal(connection_id, REMOVAL_CREDENTIAL, plaintext)?;
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "UPDATE connection_provider_repair p
            SET credential_name = $2, credential_key_id = $3, credential_nonce = $4,
                credential_ciphertext = $5, updated_at = now()
           FROM provider_resource_repair f
          WHERE p.connection_id = $1 AND f.id = p.repair_id
            AND f.status NOT IN ('resolved', 'released')",
        vec![
            connection_id.into(),
            REMOVAL_CREDENTIAL.into(),
            key.id().to_owned().into(),
            nonce.into(),
            ciphertext.into(),
        ],
    ))
    .await?;
    let mut receipt = unsettled(db, connection_id).await?;
    // The waking half of a replaced credential; with no connection secret to copy, only it acts.
    receipt.woken =
        crate::repair::credential_replaced(db, connection_id, REMOVAL_CREDENTIAL).await?;
    Ok(receipt)
}
