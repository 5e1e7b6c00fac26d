//! `provider_registration`: the one creation record of what we create at a vendor (a GitLab
//! group hook, or any kind a vendor declares as a [`ResourceKind`]), which provider repair reads.
//!
//! A row is written with its marker and URL hash before the create call, so an outcome we never
//! learn (a timeout) is resolved by listing the vendor's resources and finding the marker, never
//! by creating twice. A returned resource is adopted only by the connection version and
//! lifecycle generation that asked ([`lifecycle_core::repair::adopt`]); anything else the vendor
//! holds for a row stays `created`, a removal target.

use lifecycle_core::repair::{Adoption, Generation, ProviderKind, adopt, identity_hash};
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

/// What kind of resource a registration creates, as the vendor that creates it declares it (a
/// `const` in the vendor's crate, e.g. GitLab's group hook): an open name, so a vendor adds
/// one without editing a shared enum or a constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceKind(&'static str);

impl ResourceKind {
    /// Declares a kind by its stored name: lowercase ASCII letters, digits and `_`, starting
    /// with a letter (what the table's format check accepts). A malformed name in a `const`
    /// fails the build.
    pub const fn new(name: &'static str) -> Self {
        let b = name.as_bytes();
        assert!(
            !b.is_empty() && b[0].is_ascii_lowercase(),
            "a resource kind starts with a lowercase letter"
        );
        let mut i = 1;
        while i < b.len() {
            assert!(
                b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_',
                "a resource kind is lowercase letters, digits and '_'"
            );
            i += 1;
        }
        ResourceKind(name)
    }

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

/// Where a registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistrationState {
    /// Persisted before the create call; the outcome is unknown until resolved.
    Requested,
    /// The vendor holds it, but the generation that asked is no longer current: a removal target.
    Created,
    /// The connection's own resource.
    Adopted,
    /// The vendor refused the create; nothing exists.
    Failed,
    /// Provider repair removed it, with proof.
    Removed,
}

impl RegistrationState {
    fn parse(s: &str) -> Result<Self, sqlx::Error> {
        Ok(match s {
            "requested" => Self::Requested,
            "created" => Self::Created,
            "adopted" => Self::Adopted,
            "failed" => Self::Failed,
            "removed" => Self::Removed,
            other => {
                return Err(sqlx::Error::Decode(
                    format!("unknown registration state {other:?}").into(),
                ));
            }
        })
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    connection_id: Uuid,
    provider_instance_id: Uuid,
    resource_kind: String,
    target: String,
    marker: String,
    url_hash: String,
    connection_version: i64,
    lifecycle_generation: i64,
    state: String,
    vendor_id: Option<String>,
    failure: Option<String>,
    endpoint_id: Option<Uuid>,
    requested_at: OffsetDateTime,
    resolved_at: Option<OffsetDateTime>,
}

/// One creation record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub id: Uuid,
    pub connection_id: Uuid,
    pub provider_instance_id: Uuid,
    /// The stored name of its [`ResourceKind`], as read back (whatever vendor declared it).
    pub resource_kind: String,
    /// The vendor-side place (a GitLab group id).
    pub target: String,
    /// Found in the resource as the vendor lists it.
    pub marker: String,
    /// SHA-256 of the URL the resource calls.
    pub url_hash: String,
    /// The connection version and lifecycle generation that asked.
    pub generation: Generation,
    pub state: RegistrationState,
    /// The vendor's id, once known.
    pub vendor_id: Option<String>,
    /// Why the vendor refused.
    pub failure: Option<String>,
    pub endpoint_id: Option<Uuid>,
    pub requested_at: OffsetDateTime,
    pub resolved_at: Option<OffsetDateTime>,
}

impl TryFrom<Row> for Registration {
    type Error = sqlx::Error;

    fn try_from(r: Row) -> Result<Self, sqlx::Error> {
        Ok(Registration {
            id: r.id,
            connection_id: r.connection_id,
            provider_instance_id: r.provider_instance_id,
            resource_kind: r.resource_kind,
            target: r.target,
            marker: r.marker,
            url_hash: r.url_hash,
            generation: generation(r.connection_version, r.lifecycle_generation),
            state: RegistrationState::parse(&r.state)?,
            vendor_id: r.vendor_id,
            failure: r.failure,
            endpoint_id: r.endpoint_id,
            requested_at: r.requested_at,
            resolved_at: r.resolved_at,
        })
    }
}

/// The stored version and generation as [`Generation`] (both are never negative).
pub fn generation(connection_version: i64, lifecycle_generation: i64) -> Generation {
    Generation {
        connection_version: connection_version.max(0) as u64,
        lifecycle_generation: lifecycle_generation.max(0) as u64,
    }
}

/// A registration to persist before the create call.
#[derive(Debug, Clone)]
pub struct NewRegistration<'a> {
    pub connection_id: Uuid,
    pub provider_instance_id: Uuid,
    pub kind: ResourceKind,
    pub target: &'a str,
    pub marker: &'a str,
    /// The URL the resource will call (stored as its hash).
    pub url: &'a str,
    pub generation: Generation,
    pub endpoint_id: Option<Uuid>,
}

/// Records a request in the caller's transaction; `None` when the same connection version and
/// generation already has an unresolved or adopted resource of the kind at the target (one is
/// all it may ask for).
pub async fn request(
    conn: &mut PgConnection,
    new: &NewRegistration<'_>,
) -> Result<Option<Registration>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(
        "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
             resource_kind, target, marker, url_hash, connection_version, lifecycle_generation,
             endpoint_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT DO NOTHING RETURNING *",
    )
    .bind(Uuid::now_v7())
    .bind(new.connection_id)
    .bind(new.provider_instance_id)
    .bind(new.kind.as_str())
    .bind(new.target)
    .bind(new.marker)
    .bind(crate::inbound::sha256_hex(new.url.as_bytes()))
    .bind(new.generation.connection_version as i64)
    .bind(new.generation.lifecycle_generation as i64)
    .bind(new.endpoint_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(Registration::try_from).transpose()
}

/// The registrations of a connection, newest first.
pub async fn of_connection<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    kind: ResourceKind,
) -> Result<Vec<Registration>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT * FROM provider_registration
          WHERE connection_id = $1 AND resource_kind = $2
          ORDER BY requested_at DESC, id DESC",
    )
    .bind(connection_id)
    .bind(kind.as_str())
    .fetch_all(executor)
    .await?;
    rows.into_iter().map(Registration::try_from).collect()
}

/// The registration of `generation`'s lifecycle generation at `target` that is unresolved or
/// adopted, if any. An adopted resource stays the connection's own across a pause and a resume
/// (its version moves on, the resource does not) until a capture fences it, which makes it a
/// removal target; an unresolved one of an earlier version is settled (then a removal target).
pub async fn live<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    connection_id: Uuid,
    kind: ResourceKind,
    target: &str,
    generation: Generation,
) -> Result<Option<Registration>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT * FROM provider_registration
          WHERE connection_id = $1 AND resource_kind = $2 AND target = $3
            AND lifecycle_generation = $4 AND state IN ('requested', 'adopted')
          ORDER BY requested_at DESC, id DESC
          LIMIT 1",
    )
    .bind(connection_id)
    .bind(kind.as_str())
    .bind(target)
    .bind(generation.lifecycle_generation as i64)
    .fetch_optional(executor)
    .await?;
    row.map(Registration::try_from).transpose()
}

/// What [`resolve_created`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Adopted now by the generation that asked.
    Adopted(Registration),
    /// The vendor holds it but the connection moved on: a removal target.
    RemovalTarget(Registration),
    /// Resolved earlier (adopted, created or failed); nothing changed.
    Already(Registration),
}

/// Records that the vendor holds the resource of registration `id` as `vendor_id` (the create
/// returned it, or a listing found its marker). Locks the connection row, then the registration:
/// only the connection version and lifecycle generation that asked adopt it. Runs in its own
/// transaction on `pool`.
pub async fn resolve_created(
    pool: &sqlx::PgPool,
    id: Uuid,
    vendor_id: &str,
) -> Result<Resolved, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (connection_id, provider, instance, resource_kind): (Uuid, String, String, String) =
        sqlx::query_as(
            "SELECT r.connection_id, c.kind, coalesce(pi.server_url, ''), r.resource_kind
               FROM provider_registration r
               JOIN connection c ON c.id = r.connection_id
               JOIN provider_instance pi ON pi.id = r.provider_instance_id
              WHERE r.id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    // Lock order of every adoption and removal: the identity's advisory lock, then the
    // connection row. A fence on the identity (unsettled, or settled by a removal or a release)
    // is read under that lock, so no removal decision interleaves with this adoption.
    let identity = ProviderKind::parse(&provider)
        .map(|p| crate::repair::identity(p, &instance, &resource_kind, vendor_id));
    let mut fenced = false;
    if let Some(identity) = &identity {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(identity_hash(identity))
            .execute(&mut *tx)
            .await?;
        fenced = crate::repair::is_fenced(&mut tx, identity).await?;
    }
    let current: Option<(i64, i64, String)> = sqlx::query_as(
        "SELECT version, lifecycle_generation, status FROM connection WHERE id = $1 FOR UPDATE",
    )
    .bind(connection_id)
    .fetch_optional(&mut *tx)
    .await?;
    let row: Row = sqlx::query_as("SELECT * FROM provider_registration WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    let reg = Registration::try_from(row)?;
    if reg.state != RegistrationState::Requested {
        tx.commit().await?;
        return Ok(Resolved::Already(reg));
    }
    // Only the requesting version and generation adopt, and only while the connection is active;
    // an identity whose removal was ever fenced is never adopted (a reconnect or resume gets a
    // fresh resource), it stays a removal target.
    let adoption = match current {
        Some((version, lifecycle, status)) if status == "active" && !fenced => {
            adopt(reg.generation, generation(version, lifecycle))
        }
        _ => Adoption::RemovalTarget,
    };
    let state = match adoption {
        Adoption::Adopt => "adopted",
        Adoption::RemovalTarget => "created",
    };
    let row: Row = sqlx::query_as(
        "UPDATE provider_registration
            SET state = $2, vendor_id = $3, resolved_at = now(), updated_at = now()
          WHERE id = $1 RETURNING *",
    )
    .bind(id)
    .bind(state)
    .bind(vendor_id)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let reg = Registration::try_from(row)?;
    Ok(match adoption {
        Adoption::Adopt => Resolved::Adopted(reg),
        Adoption::RemovalTarget => Resolved::RemovalTarget(reg),
    })
}

/// Records that the vendor refused the create of a still unresolved registration: nothing
/// exists. `false` when it was already resolved.
pub async fn fail<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    id: Uuid,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE provider_registration
            SET state = 'failed', failure = $2, resolved_at = now(), updated_at = now()
          WHERE id = $1 AND state = 'requested'",
    )
    .bind(id)
    .bind(reason)
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use super::ResourceKind;

    #[test]
    fn a_resource_kind_is_declared_by_a_well_formed_name() {
        assert_eq!(
            ResourceKind::new("outline_subscription2").as_str(),
            "outline_subscription2"
        );
        for bad in ["", "Outline", "1hook", "outline-subscription", "_x"] {
            assert!(
                std::panic::catch_unwind(|| ResourceKind::new(bad)).is_err(),
                "{bad:?}"
            );
        }
    }
}
