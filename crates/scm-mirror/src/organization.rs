//! The organization tier: an organization (a provider instance's root group or owner, global:
//! unlinked, never deleted), the connections that bind it, its members, and its teams (GitLab's
//! subgroups) with theirs. Only what the vendor answered a connection's own read is written
//! here, each membership dated by when that read was requested: an older read changes nothing.
//!
//! Erasure ([`ERASABLE`]): the tier of an organization is erased with the last live binding of
//! it (`lifecycle_core::erasure::ErasureStep::EraseOrganizationTier`); a connection's binding
//! always goes; the organization row stays.

use sqlx::PgConnection;
use store::entity::ConnectionKind;
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector};
use time::OffsetDateTime;
use uuid::Uuid;

/// A member as a read reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub user_native_id: i64,
    pub username: String,
    pub access_level: i32,
}

/// Whose members: the organization's own, or one of its teams'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembersOf {
    Organization(Uuid),
    Team(Uuid),
}

impl MembersOf {
    fn table_and_key(self) -> (&'static str, &'static str, Uuid) {
        match self {
            MembersOf::Organization(id) => ("organization_membership", "organization_id", id),
            MembersOf::Team(id) => ("team_membership", "team_id", id),
        }
    }
}

/// Records that `connection_id` binds the organization `native_id` of its provider instance,
/// now named `login` (its row created when missing); returns the organization's id.
pub async fn bind(
    conn: &mut PgConnection,
    connection_id: Uuid,
    workspace_id: Uuid,
    provider_instance_id: Uuid,
    native_id: i64,
    login: &str,
) -> Result<Uuid, sqlx::Error> {
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO organization (id, provider_instance_id, native_id, login)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (provider_instance_id, native_id) DO UPDATE
            SET login = EXCLUDED.login,
                updated_at = CASE WHEN organization.login = EXCLUDED.login
                                  THEN organization.updated_at ELSE now() END
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(provider_instance_id)
    .bind(native_id)
    .bind(login)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO organization_binding (connection_id, workspace_id, organization_id)
         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(id)
}

/// The team `native_id` of `organization_id`, now at `slug` (created when missing).
pub async fn team(
    conn: &mut PgConnection,
    organization_id: Uuid,
    native_id: i64,
    slug: &str,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO team (id, organization_id, native_id, slug) VALUES ($1, $2, $3, $4)
         ON CONFLICT (organization_id, native_id) DO UPDATE SET slug = EXCLUDED.slug
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(organization_id)
    .bind(native_id)
    .bind(slug)
    .fetch_one(&mut *conn)
    .await
}

/// Removes the teams of `organization_id` whose native id is not in `found` (their members go
/// with them); for a listing of the organization's subgroups read whole. Returns how many.
pub async fn retain_teams(
    conn: &mut PgConnection,
    organization_id: Uuid,
    found: &[i64],
) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query("DELETE FROM team WHERE organization_id = $1 AND NOT native_id = ANY($2)")
            .bind(organization_id)
            .bind(found)
            .execute(&mut *conn)
            .await?
            .rows_affected(),
    )
}

/// What the delivering connection's organization holds under the group `native_id`: the
/// organization itself or one of its teams; `None` when the group is neither (another
/// workspace's organization, or a team not listed yet).
pub async fn of_connection(
    conn: &mut PgConnection,
    connection_id: Uuid,
    native_id: i64,
) -> Result<Option<MembersOf>, sqlx::Error> {
    let found: Option<(Uuid, Option<Uuid>)> = sqlx::query_as(
        "SELECT o.id, t.id FROM organization_binding b
           JOIN organization o ON o.id = b.organization_id
           LEFT JOIN team t ON t.organization_id = o.id AND t.native_id = $2
          WHERE b.connection_id = $1 AND (o.native_id = $2 OR t.id IS NOT NULL)
          LIMIT 1",
    )
    .bind(connection_id)
    .bind(native_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.map(|(org, team)| match team {
        Some(team) => MembersOf::Team(team),
        None => MembersOf::Organization(org),
    }))
}

/// Applies one member as a read requested at `read_at` found them (`None`: not a member):
/// nothing changes when a newer read is stored. `true` when a row was written or removed.
pub async fn apply_member(
    conn: &mut PgConnection,
    of: MembersOf,
    user_native_id: i64,
    found: Option<&Member>,
    read_at: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let (table, key, id) = of.table_and_key();
    let changed = match found {
        Some(m) => sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} ({key}, user_native_id, username, access_level, read_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT ({key}, user_native_id) DO UPDATE
                SET username = EXCLUDED.username, access_level = EXCLUDED.access_level,
                    read_at = EXCLUDED.read_at
              WHERE {table}.read_at <= EXCLUDED.read_at"
        )))
        .bind(id)
        .bind(user_native_id)
        .bind(&m.username)
        .bind(m.access_level)
        .bind(read_at)
        .execute(&mut *conn)
        .await?
        .rows_affected(),
        None => sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE {key} = $1 AND user_native_id = $2 AND read_at <= $3"
        )))
        .bind(id)
        .bind(user_native_id)
        .bind(read_at)
        .execute(&mut *conn)
        .await?
        .rows_affected(),
    };
    Ok(changed > 0)
}

/// Applies a members listing requested at `read_at`: each listed member as [`apply_member`];
/// a `complete` listing also removes the members it does not name (older than it). An
/// incomplete one removes nothing. Returns how many rows changed.
pub async fn apply_listing(
    conn: &mut PgConnection,
    of: MembersOf,
    members: &[Member],
    complete: bool,
    read_at: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let mut changed = 0;
    for m in members {
        changed += u64::from(apply_member(conn, of, m.user_native_id, Some(m), read_at).await?);
    }
    // Fail closed: only a listing read whole proves someone left.
    if complete {
        let (table, key, id) = of.table_and_key();
        let listed: Vec<i64> = members.iter().map(|m| m.user_native_id).collect();
        changed += sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE {key} = $1 AND NOT user_native_id = ANY($2)
                AND read_at <= $3"
        )))
        .bind(id)
        .bind(&listed)
        .bind(read_at)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    }
    Ok(changed)
}

/// The organization tier's registration: memberships and teams of an organization no other
/// live workspace binds, then the connection's bindings. The organization rows are global and
/// never erased.
pub static ERASABLE: Erasable = Erasable {
    holder: "organization-tier",
    order: 95,
    kinds: &[ConnectionKind::Github, ConnectionKind::Gitlab],
    tables: &[
        // Org-tier guard: the eraser selects these only for an organization no other live
        // workspace binds (lifecycle_core::erasure::plan_scm_erasure).
        ErasableTable {
            table: "team_membership",
            selector: Selector::Organization(
                "team_id IN (SELECT id FROM team WHERE organization_id = $1)",
            ),
        },
        ErasableTable {
            table: "team",
            selector: Selector::Organization("organization_id = $1"),
        },
        ErasableTable {
            table: "organization_membership",
            selector: Selector::Organization("organization_id = $1"),
        },
        // Unlinked after the tier, so an erasure resumed after a crash still finds what it
        // guards.
        ErasableTable {
            table: "organization_binding",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[
        ContentTable {
            table: "organization_membership",
            columns: &["username"],
        },
        ContentTable {
            table: "team_membership",
            columns: &["username"],
        },
        ContentTable {
            table: "team",
            columns: &["slug"],
        },
    ],
    streams: &[],
    repository_streams: &[],
    connection_subjects: store::erasure::no_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};
