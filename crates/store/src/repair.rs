//! Provider repair as stored: the fence of each resource we created at a vendor and must remove
//! (`provider_resource_repair`, pseudonymous: no workspace, connection or person column), and
//! each workspace's reference to it with the sealed removal credential
//! (`connection_provider_repair`, gone with its workspace).
//!
//! Lock order, for every adoption and removal: the identity advisory locks
//! ([`lifecycle_core::repair::lock_order`]) first, then the connection row. A transition whose
//! caller can take the identity locks before it locks the connection row calls
//! [`lock_identities`] first (control-api's transitions, a workspace's purge); [`capture`] takes
//! them again (Postgres advisory locks are reentrant) for the callers that locked the row first.
//! The dispatcher takes the identity lock and never a connection row lock.

use lifecycle_core::connection::Transition;
use lifecycle_core::repair::{
    DispatchPermit, FenceStatus, HolderState, Inspection, Ownership, ProviderKind, RemovalFence,
    ResourceIdentity, StoredFence, identity_hash, lock_order, removal_may_start,
};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::entity::{ConnectionStatus, connection};
use crate::secrets::{Keyring, SecretError};

/// The connection secret a removal authenticates with, sealed into the repair's reference.
pub const REMOVAL_CREDENTIAL: &str = "token";

/// A resource a connection holds at its vendor, as its creation record tells it.
#[derive(Debug, Clone)]
struct Held {
    registration_id: Uuid,
    provider: ProviderKind,
    instance: String,
    resource_kind: String,
    target: String,
    vendor_id: String,
    marker: String,
    url_hash: String,
}

impl Held {
    fn identity(&self) -> ResourceIdentity {
        identity(
            self.provider,
            &self.instance,
            &self.resource_kind,
            &self.vendor_id,
        )
    }
}

/// The identity of a resource of `resource_kind` the vendor calls `vendor_id`, at `instance`
/// (a server URL, `""` for the kind's default): the same for capture, adoption and removal.
pub fn identity(
    provider: ProviderKind,
    instance: &str,
    resource_kind: &str,
    vendor_id: &str,
) -> ResourceIdentity {
    ResourceIdentity {
        provider,
        instance: instance.to_owned(),
        resource: format!("{resource_kind}:{vendor_id}"),
    }
}

fn stmt(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// What `connection_id` holds at its vendor: the registrations the vendor holds (adopted, or
/// created for a generation that moved on; with `only_created`, only the latter). Without
/// `disconnecting`, only what leaving active gives up (`captured_on = 'leaving_active'`): a
/// suspended or uninstalled holder keeps its Slack bot token and GitHub App installation. Read
/// without locks.
async fn held<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
    only_created: bool,
    disconnecting: bool,
) -> Result<Vec<Held>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT r.id, c.kind, coalesce(pi.server_url, '') AS instance, r.resource_kind,
                    r.target, r.vendor_id, r.marker, r.url_hash
               FROM provider_registration r
               JOIN connection c ON c.id = r.connection_id
               JOIN provider_instance pi ON pi.id = r.provider_instance_id
              WHERE r.connection_id = $1 AND r.vendor_id IS NOT NULL
                AND (r.state = 'created' OR (NOT $2 AND r.state = 'adopted'))
                AND (r.captured_on = 'leaving_active' OR $3)
              ORDER BY r.id",
            vec![
                connection_id.into(),
                only_created.into(),
                disconnecting.into(),
            ],
        ))
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let kind: String = r.try_get("", "kind")?;
        let Some(provider) = ProviderKind::parse(&kind) else {
            return Err(DbErr::Custom(format!(
                "connection kind {kind:?} is no provider"
            )));
        };
        out.push(Held {
            registration_id: r.try_get("", "id")?,
            provider,
            instance: r.try_get("", "instance")?,
            resource_kind: r.try_get("", "resource_kind")?,
            target: r.try_get("", "target")?,
            vendor_id: r.try_get("", "vendor_id")?,
            marker: r.try_get("", "marker")?,
            url_hash: r.try_get("", "url_hash")?,
        });
    }
    Ok(out)
}

async fn advisory_locks<C: ConnectionTrait>(db: &C, keys: &[i64]) -> Result<(), DbErr> {
    for key in keys {
        db.execute_raw(stmt(
            "SELECT pg_advisory_xact_lock($1)",
            vec![(*key).into()],
        ))
        .await?;
    }
    Ok(())
}

/// The message of the error [`capture`] fails with when an identity lock it did not hold is
/// taken by another transaction: retry the whole transaction.
const CONTENDED: &str = "provider repair: an identity lock is held by another transaction";

/// Whether `e` is [`capture`]'s contention: the transaction did nothing that lasts and should
/// be run again (its identity locks taken first, as the lock order says).
pub fn is_contended(e: &DbErr) -> bool {
    matches!(e, DbErr::Custom(m) if m == CONTENDED)
}

async fn try_advisory_locks<C: ConnectionTrait>(db: &C, keys: &[i64]) -> Result<(), DbErr> {
    for key in keys {
        let got = db
            .query_one_raw(stmt(
                "SELECT pg_try_advisory_xact_lock($1) AS got",
                vec![(*key).into()],
            ))
            .await?
            .map(|r| r.try_get::<bool>("", "got"))
            .transpose()?
            .unwrap_or(false);
        if !got {
            return Err(DbErr::Custom(CONTENDED.to_owned()));
        }
    }
    Ok(())
}

/// Takes the identity locks of everything `connection_ids` hold at their vendors, in hash
/// order, in the caller's transaction: call it before locking the connection rows.
pub async fn lock_identities<C: ConnectionTrait>(
    db: &C,
    connection_ids: &[Uuid],
) -> Result<(), DbErr> {
    let mut identities = Vec::new();
    for id in connection_ids {
        // Every identity it may capture, whichever transition follows.
        identities.extend(held(db, *id, false, true).await?.iter().map(Held::identity));
    }
    advisory_locks(db, &lock_order(&identities)).await
}

/// Whether a transition into `status` captures what the connection holds: registrations are
/// hooks and subscriptions, which neither a suspended nor an uninstalled holder keeps.
pub fn captures(before: ConnectionStatus, after: ConnectionStatus) -> bool {
    before != after
        && matches!(
            after,
            ConnectionStatus::Suspended
                | ConnectionStatus::Uninstalled
                | ConnectionStatus::Disconnected
        )
}

/// What [`capture`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The fences it referenced (new or still unsettled).
    pub repairs: Vec<Uuid>,
    /// Connection secrets it deleted (a disconnection deletes them all).
    pub secrets_deleted: u64,
}

/// Captures, in the transition's own transaction, what `row` (the connection as the transition
/// left it, its row locked) holds at its vendor: a fence per resource, a reference with the
/// removal credential sealed into it, an audit row. A disconnection then deletes the
/// connection's secrets. A settled fence is never recreated (a replayed wake, a second capture).
pub async fn capture<C: ConnectionTrait>(
    db: &C,
    row: &connection::Model,
    transition: Transition,
    actor: &str,
) -> Result<Captured, DbErr> {
    capture_as(db, row, transition.event_name(), false, actor).await
}

/// [`capture`] under the name `cause` (a transition's, or `late`), of the resources the vendor
/// holds for the connection (with `only_created`, only those no current generation adopted).
async fn capture_as<C: ConnectionTrait>(
    db: &C,
    row: &connection::Model,
    cause: &str,
    only_created: bool,
    actor: &str,
) -> Result<Captured, DbErr> {
    // Capture scope: suspension and uninstall give up hooks and subscriptions; only a
    // disconnection gives up the bot token and the App installation too.
    let disconnecting = row.status == ConnectionStatus::Disconnected;
    let held = held(db, row.id, only_created, disconnecting).await?;
    let identities: Vec<_> = held.iter().map(Held::identity).collect();
    // The row is locked already: waiting for an identity lock now would invert the lock order
    // (an adoption holds its identity lock and waits for this row). Those the caller took
    // first are ours again at once; one the connection came to hold since is only tried, and
    // a contended one fails the transaction for the caller to retry ([`is_contended`]).
    try_advisory_locks(db, &lock_order(&identities)).await?;
    // Sealed as the connection's secret was (its id and name are the associated data): moved,
    // never opened here. Once the secrets are gone (a late capture after a disconnection), the
    // one an earlier reference of the connection still holds.
    let credential = db
        .query_one_raw(stmt(
            "SELECT name, key_id, nonce, ciphertext FROM (
                 SELECT name, key_id, nonce, ciphertext, 0 AS preference, now() AS at
                   FROM connection_secret WHERE connection_id = $1 AND name = $2
                 UNION ALL
                 SELECT credential_name, credential_key_id, credential_nonce,
                        credential_ciphertext, 1, updated_at
                   FROM connection_provider_repair
                  WHERE connection_id = $1 AND credential_key_id IS NOT NULL
             ) c ORDER BY preference, at DESC LIMIT 1",
            vec![row.id.into(), REMOVAL_CREDENTIAL.into()],
        ))
        .await?;
    let (mut name, mut key_id, mut nonce, mut ciphertext) = (
        None::<String>,
        None::<String>,
        None::<Vec<u8>>,
        None::<Vec<u8>>,
    );
    if let Some(c) = &credential {
        name = Some(c.try_get("", "name")?);
        key_id = Some(c.try_get("", "key_id")?);
        nonce = Some(c.try_get("", "nonce")?);
        ciphertext = Some(c.try_get("", "ciphertext")?);
    }
    // The capture receipt: this fence was written by the transition itself.
    let receipt = Uuid::now_v7();
    let mut out = Captured::default();
    for (h, identity) in held.iter().zip(&identities) {
        let inserted = db
            .query_one_raw(stmt(
                "INSERT INTO provider_resource_repair (id, provider, instance, resource,
                     identity_hash, resource_kind, target, vendor_id, marker, url_hash,
                     next_attempt_at, capture_receipt)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), $11)
                 ON CONFLICT (provider, instance, resource) DO NOTHING
                 RETURNING id",
                vec![
                    Uuid::now_v7().into(),
                    h.provider.as_str().into(),
                    identity.instance.clone().into(),
                    identity.resource.clone().into(),
                    identity_hash(identity).into(),
                    h.resource_kind.clone().into(),
                    h.target.clone().into(),
                    h.vendor_id.clone().into(),
                    h.marker.clone().into(),
                    h.url_hash.clone().into(),
                    receipt.into(),
                ],
            ))
            .await?;
        let repair_id: Uuid = match inserted {
            Some(r) => r.try_get("", "id")?,
            None => {
                let existing = db
                    .query_one_raw(stmt(
                        "SELECT id, status FROM provider_resource_repair
                          WHERE provider = $1 AND instance = $2 AND resource = $3",
                        vec![
                            h.provider.as_str().into(),
                            identity.instance.clone().into(),
                            identity.resource.clone().into(),
                        ],
                    ))
                    .await?
                    .ok_or_else(|| DbErr::Custom("a conflicting fence vanished".into()))?;
                let status: String = existing.try_get("", "status")?;
                // A resolved or released fence stays settled: the capture receipt says so.
                if matches!(status.as_str(), "resolved" | "released") {
                    continue;
                }
                existing.try_get("", "id")?
            }
        };
        db.execute_raw(stmt(
            "INSERT INTO connection_provider_repair (id, repair_id, workspace_id, connection_id,
                 registration_id, transition, connection_version, credential_name,
                 credential_key_id, credential_nonce, credential_ciphertext)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (repair_id, connection_id) DO NOTHING",
            vec![
                Uuid::now_v7().into(),
                repair_id.into(),
                row.workspace_id.into(),
                row.id.into(),
                h.registration_id.into(),
                cause.into(),
                row.version.into(),
                name.clone().into(),
                key_id.clone().into(),
                nonce.clone().into(),
                ciphertext.clone().into(),
            ],
        ))
        .await?;
        out.repairs.push(repair_id);
    }
    // What a capture fenced is no longer the connection's own: a removal target, never live
    // again for it (a resume or a reconcile creates a fresh one) and no holder of its identity.
    for h in &held {
        db.execute_raw(stmt(
            "UPDATE provider_registration SET state = 'created', updated_at = now()
              WHERE id = $1 AND state = 'adopted'",
            vec![h.registration_id.into()],
        ))
        .await?;
    }
    if !out.repairs.is_empty() {
        crate::lifecycle::write_audit(db, row, actor, "provider_repair_captured", Some(row.status))
            .await?;
    }
    // Disconnection: the connection's credentials go now; the removal credential lives on
    // only in the references, until their fences settle.
    if row.status == ConnectionStatus::Disconnected {
        out.secrets_deleted = db
            .execute_raw(stmt(
                "DELETE FROM connection_secret WHERE connection_id = $1",
                vec![row.id.into()],
            ))
            .await?
            .rows_affected();
    }
    Ok(out)
}

/// Captures what no transition could (a lost wake's repair): a create that resolved after its
/// connection left active (a late result, `created`), or what a connection left before capture
/// existed. Each connection in its own transaction, identity locks before its row lock; the
/// connection's state is read again under the lock. How many fences it referenced.
pub async fn capture_late(
    db: &sea_orm::DatabaseConnection,
    limit: u64,
    actor: &str,
) -> Result<u64, DbErr> {
    use sea_orm::{EntityTrait as _, QuerySelect as _, TransactionTrait as _};
    let rows = db
        .query_all_raw(stmt(
            "SELECT DISTINCT r.connection_id
               FROM provider_registration r
               JOIN connection c ON c.id = r.connection_id
               JOIN provider_instance pi ON pi.id = r.provider_instance_id
              WHERE r.vendor_id IS NOT NULL
                AND (r.state = 'created'
                     OR (r.state = 'adopted'
                         AND c.status IN ('suspended', 'uninstalled', 'disconnected')))
                AND (r.captured_on = 'leaving_active' OR c.status = 'disconnected')
                AND NOT EXISTS (
                    SELECT 1 FROM provider_resource_repair f
                     WHERE f.provider = c.kind::text AND f.instance = coalesce(pi.server_url, '')
                       AND f.resource = r.resource_kind || ':' || r.vendor_id)
              LIMIT $1",
            vec![(limit as i64).into()],
        ))
        .await?;
    let mut captured = 0;
    for r in rows {
        let id: Uuid = r.try_get("", "connection_id")?;
        let txn = db.begin().await?;
        lock_identities(&txn, &[id]).await?;
        let Some(row) = connection::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            continue;
        };
        // An active (or paused) holder keeps what its current generation adopted.
        let only_created = !matches!(
            row.status,
            ConnectionStatus::Suspended
                | ConnectionStatus::Uninstalled
                | ConnectionStatus::Disconnected
        );
        let out = match capture_as(&txn, &row, "late", only_created, actor).await {
            Ok(out) => out,
            // It came to hold more meanwhile: the next pass captures it.
            Err(e) if is_contended(&e) => continue,
            Err(e) => return Err(e),
        };
        txn.commit().await?;
        captured += out.repairs.len() as u64;
    }
    Ok(captured)
}

/// A resource the vendor holds for a connection that no create call of ours made, recorded when
/// the connection binds it (a Slack bot token once stored, a GitHub App installation once
/// bound). Only a disconnection captures it: a suspended holder keeps it.
#[derive(Debug, Clone)]
pub struct KeptResource<'a> {
    pub connection_id: Uuid,
    pub kind: crate::registration::ResourceKind,
    /// Whose holders keep it from removal (Slack: `<team>:<bot user>`, so a replacement token
    /// of the same bot user holds it; GitHub: the installation id).
    pub target: &'a str,
    /// The vendor's id of exactly this resource (Slack: target and token fingerprint; GitHub:
    /// the installation id).
    pub vendor_id: &'a str,
    /// What its remover checks before removing (Slack: the token's SHA-256; GitHub: the App id).
    pub proof: &'a str,
}

/// What [`keep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Recorded (or already recorded) as the connection's, adopted by its current generation.
    Recorded(Uuid),
    /// Its identity is fenced (its removal captured, settled or not): never adopted again.
    Fenced,
}

/// The connection's adopted registration of exactly this kept resource.
async fn kept_already(
    conn: &mut sqlx::PgConnection,
    kept: &KeptResource<'_>,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM provider_registration
          WHERE connection_id = $1 AND resource_kind = $2 AND vendor_id = $3
            AND state = 'adopted'",
    )
    .bind(kept.connection_id)
    .bind(kept.kind.as_str())
    .bind(kept.vendor_id)
    .fetch_optional(&mut *conn)
    .await
}

/// Whether a removal of `identity` was ever fenced (settled or not): such an identity is never
/// adopted. Read under the identity's lock.
pub(crate) async fn is_fenced(
    conn: &mut sqlx::PgConnection,
    identity: &ResourceIdentity,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM provider_resource_repair
                         WHERE provider = $1 AND instance = $2 AND resource = $3)",
    )
    .bind(identity.provider.as_str())
    .bind(&identity.instance)
    .bind(&identity.resource)
    .fetch_one(&mut *conn)
    .await
}

/// Records a [`KeptResource`] in the caller's transaction: the identity lock, then the
/// connection row lock, then an adopted registration of the connection's current version and
/// generation (`captured_on = 'disconnect'`). An earlier resource of the same kind and target
/// the connection kept (a replaced token) becomes a removal target.
pub async fn keep(
    conn: &mut sqlx::PgConnection,
    kept: &KeptResource<'_>,
) -> Result<Kept, sqlx::Error> {
    let (kind, instance, instance_id): (String, String, Uuid) = sqlx::query_as(
        "SELECT c.kind::text, coalesce(pi.server_url, ''), c.provider_instance_id
           FROM connection c JOIN provider_instance pi ON pi.id = c.provider_instance_id
          WHERE c.id = $1",
    )
    .bind(kept.connection_id)
    .fetch_one(&mut *conn)
    .await?;
    let provider = ProviderKind::parse(&kind)
        .ok_or_else(|| sqlx::Error::Decode(format!("connection kind {kind:?}").into()))?;
    // Kept already (a pass that verifies it again): no locks taken. An adopted registration
    // has no fence, since a capture makes what it fences a removal target.
    if let Some(id) = kept_already(conn, kept).await? {
        return Ok(Kept::Recorded(id));
    }
    let identity = identity(provider, &instance, kept.kind.as_str(), kept.vendor_id);
    // Lock order: identity, then the connection row.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(identity_hash(&identity))
        .execute(&mut *conn)
        .await?;
    // A fenced identity is never adopted.
    if is_fenced(conn, &identity).await? {
        return Ok(Kept::Fenced);
    }
    let (version, generation): (i64, i64) = sqlx::query_as(
        "SELECT version, lifecycle_generation FROM connection WHERE id = $1 FOR UPDATE",
    )
    .bind(kept.connection_id)
    .fetch_one(&mut *conn)
    .await?;
    // A replaced resource of the same target stays at the vendor: a removal target.
    sqlx::query(
        "UPDATE provider_registration SET state = 'created', updated_at = now()
          WHERE connection_id = $1 AND resource_kind = $2 AND target = $3
            AND state = 'adopted' AND vendor_id <> $4",
    )
    .bind(kept.connection_id)
    .bind(kept.kind.as_str())
    .bind(kept.target)
    .bind(kept.vendor_id)
    .execute(&mut *conn)
    .await?;
    if let Some(id) = kept_already(conn, kept).await? {
        return Ok(Kept::Recorded(id));
    }
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
             resource_kind, target, marker, url_hash, connection_version, lifecycle_generation,
             state, vendor_id, resolved_at, captured_on)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'adopted', $10, now(), 'disconnect')",
    )
    .bind(id)
    .bind(kept.connection_id)
    .bind(instance_id)
    .bind(kept.kind.as_str())
    .bind(kept.target)
    // No marker of ours is part of it: a fresh one keeps the column's uniqueness.
    .bind(Uuid::now_v7().to_string())
    .bind(kept.proof)
    .bind(version)
    .bind(generation)
    .bind(kept.vendor_id)
    .execute(&mut *conn)
    .await?;
    Ok(Kept::Recorded(id))
}

/// A connection's removal credential was replaced (its secret `name` just stored, in the
/// caller's transaction, the connection row locked): sealed into the references of its
/// unsettled fences, and a fence waiting for a credential is due at once. How many fences it
/// woke.
pub async fn credential_replaced<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
    name: &str,
) -> Result<u64, DbErr> {
    if name != REMOVAL_CREDENTIAL {
        return Ok(0);
    }
    db.execute_raw(stmt(
        "UPDATE connection_provider_repair p
            SET credential_name = s.name, credential_key_id = s.key_id,
                credential_nonce = s.nonce, credential_ciphertext = s.ciphertext,
                updated_at = now()
           FROM connection_secret s, provider_resource_repair f
          WHERE s.connection_id = $1 AND s.name = $2 AND p.connection_id = $1
            AND f.id = p.repair_id AND f.status NOT IN ('resolved', 'released')",
        vec![connection_id.into(), name.into()],
    ))
    .await?;
    let waiting = db
        .query_all_raw(stmt(
            "SELECT f.id, f.epoch, f.attempts, f.failures, f.status
               FROM provider_resource_repair f
              WHERE f.status = 'needs_authorization'
                AND f.id IN (SELECT repair_id FROM connection_provider_repair
                              WHERE connection_id = $1)
              ORDER BY f.id FOR UPDATE",
            vec![connection_id.into()],
        ))
        .await?;
    let mut woken = 0;
    for r in waiting {
        let id: Uuid = r.try_get("", "id")?;
        let status: String = r.try_get("", "status")?;
        let Some(status) = FenceStatus::parse(&status) else {
            continue;
        };
        // Only status and failures move on a new credential; the rest is carried as stored.
        let mut fence = RemovalFence::from(StoredFence {
            epoch: r.try_get::<i64>("", "epoch")?.max(0) as u64,
            attempts: r.try_get::<i64>("", "attempts")?.max(0) as u64,
            uncertain: Default::default(),
            failures: r.try_get::<i32>("", "failures")?.max(0) as u32,
            status,
        });
        let status = fence.credential_replaced();
        let failures = fence.stored().failures as i32;
        let retry = fence.retry_after().map(|d| d.whole_seconds());
        db.execute_raw(stmt(
            "UPDATE provider_resource_repair
                SET status = $2, failures = $3, updated_at = now(),
                    last_outcome = 'a new credential arrived',
                    next_attempt_at = CASE WHEN $4::bigint IS NULL THEN NULL
                                           ELSE now() + make_interval(secs => $4::bigint) END
              WHERE id = $1",
            vec![
                id.into(),
                status.as_str().into(),
                failures.into(),
                retry.into(),
            ],
        ))
        .await?;
        woken += 1;
    }
    Ok(woken)
}

/// One fence as the dispatcher reads it.
#[derive(Debug, Clone)]
pub struct Repair {
    pub id: Uuid,
    pub provider: ProviderKind,
    pub instance: String,
    pub resource: String,
    pub identity_hash: i64,
    pub resource_kind: String,
    /// Where it lives at the vendor (a GitLab group id).
    pub target: String,
    pub vendor_id: String,
    /// The ownership proof: what only our resource carries.
    pub marker: Option<String>,
    pub url_hash: Option<String>,
    pub fence: RemovalFence,
    pub next_attempt_at: Option<OffsetDateTime>,
    pub capture_receipt: Option<Uuid>,
    pub last_outcome: Option<String>,
}

impl Repair {
    /// Its identity.
    pub fn identity(&self) -> ResourceIdentity {
        ResourceIdentity {
            provider: self.provider,
            instance: self.instance.clone(),
            resource: self.resource.clone(),
        }
    }
}

#[derive(sqlx::FromRow)]
struct RepairRow {
    id: Uuid,
    provider: String,
    instance: String,
    resource: String,
    identity_hash: i64,
    resource_kind: String,
    target: String,
    vendor_id: String,
    marker: Option<String>,
    url_hash: Option<String>,
    status: String,
    epoch: i64,
    attempts: i64,
    uncertain: Vec<i64>,
    failures: i32,
    next_attempt_at: Option<OffsetDateTime>,
    capture_receipt: Option<Uuid>,
    last_outcome: Option<String>,
}

impl TryFrom<RepairRow> for Repair {
    type Error = sqlx::Error;

    fn try_from(r: RepairRow) -> Result<Self, sqlx::Error> {
        let decode = |what: String| sqlx::Error::Decode(what.into());
        let provider = ProviderKind::parse(&r.provider)
            .ok_or_else(|| decode(format!("unknown provider {:?}", r.provider)))?;
        let status = FenceStatus::parse(&r.status)
            .ok_or_else(|| decode(format!("unknown fence status {:?}", r.status)))?;
        let fence = RemovalFence::from(StoredFence {
            epoch: r.epoch.max(0) as u64,
            attempts: r.attempts.max(0) as u64,
            uncertain: r.uncertain.iter().map(|a| (*a).max(0) as u64).collect(),
            failures: r.failures.max(0) as u32,
            status,
        });
        Ok(Repair {
            id: r.id,
            provider,
            instance: r.instance,
            resource: r.resource,
            identity_hash: r.identity_hash,
            resource_kind: r.resource_kind,
            target: r.target,
            vendor_id: r.vendor_id,
            marker: r.marker,
            url_hash: r.url_hash,
            fence,
            next_attempt_at: r.next_attempt_at,
            capture_receipt: r.capture_receipt,
            last_outcome: r.last_outcome,
        })
    }
}

const REPAIR_COLUMNS: &str = "id, provider, instance, resource, identity_hash, resource_kind, \
     target, vendor_id, marker, url_hash, status, epoch, attempts, uncertain, failures, \
     next_attempt_at, capture_receipt, last_outcome";

/// Reads one fence.
pub async fn load<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    id: Uuid,
) -> Result<Option<Repair>, sqlx::Error> {
    let row: Option<RepairRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {REPAIR_COLUMNS} FROM provider_resource_repair WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(executor)
    .await?;
    row.map(Repair::try_from).transpose()
}

/// Reads one fence and locks its row, in the caller's transaction (after the identity lock).
pub async fn load_locked(conn: &mut sqlx::PgConnection, id: Uuid) -> Result<Repair, sqlx::Error> {
    let row: RepairRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {REPAIR_COLUMNS} FROM provider_resource_repair WHERE id = $1 FOR UPDATE"
    )))
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    Repair::try_from(row)
}

/// The fences of a connection's references, oldest first.
pub async fn of_connection<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
) -> Result<Vec<Repair>, sqlx::Error> {
    let rows: Vec<RepairRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {REPAIR_COLUMNS} FROM provider_resource_repair
          WHERE id IN (SELECT repair_id FROM connection_provider_repair WHERE connection_id = $1)
          ORDER BY created_at, id"
    )))
    .bind(connection_id)
    .fetch_all(executor)
    .await?;
    rows.into_iter().map(Repair::try_from).collect()
}

/// Claims up to `limit` due fences for `lease` (another replica skips them meanwhile); the
/// claimed ids, most overdue first.
pub async fn claim_due(
    pool: &sqlx::PgPool,
    limit: i64,
    lease: time::Duration,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE provider_resource_repair
            SET next_attempt_at = now() + make_interval(secs => $2::bigint)
          WHERE id IN (SELECT id FROM provider_resource_repair
                        WHERE status IN ('pending', 'needs_authorization')
                          AND next_attempt_at <= now()
                        ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
          RETURNING id",
    )
    .bind(limit)
    .bind(lease.whole_seconds().max(1))
    .fetch_all(pool)
    .await
}

/// The removal credential a fence's references hold, still sealed.
#[derive(sqlx::FromRow)]
pub struct SealedCredential {
    connection_id: Uuid,
    name: String,
    key_id: String,
    nonce: Vec<u8>,
    ciphertext: Vec<u8>,
}

impl std::fmt::Debug for SealedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedCredential")
            .field("connection_id", &self.connection_id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SealedCredential {
    /// The connection it was a secret of.
    pub fn connection_id(&self) -> Uuid {
        self.connection_id
    }

    /// Opens it with the ring that sealed the connection's secrets.
    pub fn open(&self, ring: &Keyring) -> Result<Vec<u8>, SecretError> {
        ring.open(
            &self.key_id,
            self.connection_id,
            &self.name,
            &self.nonce,
            &self.ciphertext,
        )
    }
}

/// The newest removal credential any reference of fence `repair_id` holds.
pub async fn credential<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    repair_id: Uuid,
) -> Result<Option<SealedCredential>, sqlx::Error> {
    sqlx::query_as(
        "SELECT connection_id, credential_name AS name, credential_key_id AS key_id,
                credential_nonce AS nonce, credential_ciphertext AS ciphertext
           FROM connection_provider_repair
          WHERE repair_id = $1 AND credential_key_id IS NOT NULL
          ORDER BY updated_at DESC, id DESC LIMIT 1",
    )
    .bind(repair_id)
    .fetch_optional(executor)
    .await
}

/// The states of the connections that hold `repair`'s identity now: those whose current
/// version and generation adopted it.
async fn holders(
    conn: &mut sqlx::PgConnection,
    repair: &Repair,
) -> Result<Vec<HolderState>, sqlx::Error> {
    let statuses: Vec<String> = sqlx::query_scalar(
        "SELECT c.status FROM provider_registration r
           JOIN connection c ON c.id = r.connection_id
           JOIN provider_instance pi ON pi.id = r.provider_instance_id
          WHERE r.resource_kind = $1 AND coalesce(pi.server_url, '') = $3
            AND pi.kind = $4 AND r.state = 'adopted'
            -- A kept resource (a Slack bot token) is held by whoever holds its target (the same
            -- bot user): revoking one token can affect a replacement for that user.
            AND (r.vendor_id = $2 OR (r.captured_on = 'disconnect' AND r.target = $5))
            AND r.lifecycle_generation = c.lifecycle_generation",
    )
    .bind(&repair.resource_kind)
    .bind(&repair.vendor_id)
    .bind(&repair.instance)
    .bind(repair.provider.as_str())
    .bind(&repair.target)
    .fetch_all(&mut *conn)
    .await?;
    Ok(statuses
        .iter()
        .map(|s| match s.as_str() {
            // A pause gives nothing up (it captures nothing): its holder may resume any time.
            "active" | "paused" => HolderState::Active,
            "suspended" => HolderState::Suspended,
            _ => HolderState::Inactive,
        })
        .collect())
}

/// Stores `fence` as it now stands with `outcome` as its last outcome, in the caller's
/// transaction (the row locked). A resolved fence marks its registrations removed and closes
/// their endpoints on connections no longer active; a settled one clears its references'
/// credentials.
pub async fn write(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    fence: &RemovalFence,
    outcome: &str,
) -> Result<(), sqlx::Error> {
    let s = fence.stored();
    let retry = fence.retry_after();
    let uncertain: Vec<i64> = s.uncertain.iter().map(|a| *a as i64).collect();
    sqlx::query(
        "UPDATE provider_resource_repair
            SET status = $2, epoch = $3, attempts = $4, uncertain = $5, failures = $6,
                next_attempt_at = CASE WHEN $7::bigint IS NULL THEN NULL
                                       ELSE now() + make_interval(secs => $7::bigint) END,
                last_outcome = $8, updated_at = now(),
                settled_at = CASE WHEN $9 THEN coalesce(settled_at, now()) END
          WHERE id = $1",
    )
    .bind(id)
    .bind(s.status.as_str())
    .bind(s.epoch as i64)
    .bind(s.attempts as i64)
    .bind(uncertain)
    .bind(s.failures as i32)
    .bind(retry.map(|d| d.whole_seconds()))
    .bind(outcome)
    .bind(s.status.is_settled())
    .execute(&mut *conn)
    .await?;
    if s.status == FenceStatus::Resolved {
        // A proven removal: its registrations are removed, and the endpoints they delivered to
        // close, but only those of connections no longer active (an active replacement stays).
        sqlx::query(
            "UPDATE provider_registration SET state = 'removed', updated_at = now()
              WHERE id IN (SELECT registration_id FROM connection_provider_repair
                            WHERE repair_id = $1)
                AND state IN ('created', 'adopted')",
        )
        .bind(id)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE inbound_endpoint e SET status = 'disabled', updated_at = now()
               FROM provider_registration r, connection c
              WHERE r.id IN (SELECT registration_id FROM connection_provider_repair
                              WHERE repair_id = $1)
                AND e.id = r.endpoint_id AND c.id = e.connection_id AND c.status <> 'active'
                AND e.status <> 'disabled'",
        )
        .bind(id)
        .execute(&mut *conn)
        .await?;
    }
    if s.status.is_settled() {
        // The credential is kept only while a removal may still need it.
        sqlx::query(
            "UPDATE connection_provider_repair
                SET credential_name = NULL, credential_key_id = NULL, credential_nonce = NULL,
                    credential_ciphertext = NULL, updated_at = now()
              WHERE repair_id = $1 AND credential_key_id IS NOT NULL",
        )
        .bind(id)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// What [`decide`] concluded after an ownership check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Call the provider once with this permit, then [`record`] its outcome.
    Dispatch(DispatchPermit),
    /// Nothing to send now; the fence stands as recorded.
    Wait(FenceStatus),
    /// Another holder (an active connection) still holds the resource.
    Held,
    /// The fence changed since it was inspected; inspect again.
    Stale,
}

/// Applies an ownership check made after `inspection` and, when the resource is still ours and
/// no holder keeps it, takes the dispatch permit: one short transaction under the identity lock.
/// From its commit on the attempt counts as sent.
pub async fn decide(
    pool: &sqlx::PgPool,
    id: Uuid,
    inspection: Inspection,
    ownership: Ownership,
    outcome: &str,
) -> Result<Decision, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let hash: i64 =
        sqlx::query_scalar("SELECT identity_hash FROM provider_resource_repair WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    // Identity lock first, as every adoption and removal takes it.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(hash)
        .execute(&mut *tx)
        .await?;
    let repair = load_locked(&mut tx, id).await?;
    let mut fence = repair.fence.clone();
    if fence.inspect() != inspection {
        tx.commit().await?;
        return Ok(Decision::Stale);
    }
    let status = fence.check_ownership(ownership);
    if ownership == Ownership::Ours && !status.is_settled() {
        let holders = holders(&mut tx, &repair).await?;
        // A removal never starts under an active holder (or a suspended GitHub/Slack one).
        if !removal_may_start(repair.provider, &holders) {
            write(&mut tx, id, &fence, "held by an active connection").await?;
            // Revisited after the first backoff step, not at once: the holder may hold it for
            // long, and a due-at-once fence would keep the dispatcher busy with it.
            sqlx::query(
                "UPDATE provider_resource_repair
                    SET next_attempt_at = now() + make_interval(secs => $2::bigint)
                  WHERE id = $1",
            )
            .bind(id)
            .bind(lifecycle_core::repair::backoff(1).whole_seconds())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(Decision::Held);
        }
        if let Ok(permit) = fence.acquire_permit(inspection) {
            write(&mut tx, id, &fence, "dispatched").await?;
            tx.commit().await?;
            return Ok(Decision::Dispatch(permit));
        }
    }
    write(&mut tx, id, &fence, outcome).await?;
    tx.commit().await?;
    Ok(Decision::Wait(fence.status()))
}

/// Records the outcome of a dispatched attempt.
pub async fn record(
    pool: &sqlx::PgPool,
    id: Uuid,
    permit: DispatchPermit,
    outcome: lifecycle_core::repair::DispatchOutcome,
    detail: &str,
) -> Result<FenceStatus, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let repair = load_locked(&mut tx, id).await?;
    let mut fence = repair.fence;
    let status = fence.record(permit, outcome);
    write(&mut tx, id, &fence, detail).await?;
    tx.commit().await?;
    Ok(status)
}
