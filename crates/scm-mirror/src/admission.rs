//! The code hosts' write-admission rules ([`store::admission::AdmissionRule`]): a GitHub
//! repository or a GitLab project is written only through a monitor of the delivering connection
//! bound to its native id; a GitHub installation event only through the connection's App
//! endpoint and for the installation it verified. `store::admission::admit` reads and locks the
//! connection before any of them decides.

use lifecycle_core::connection::ConnectionState;
use sqlx::PgConnection;
use store::admission::{AdmissionRule, Delivering, Refusal, VendorRefusal};
use store::entity::ConnectionKind;
use uuid::Uuid;

/// Refused: the installation event did not arrive through the connection's App endpoint.
pub const NOT_APP_ENDPOINT: Refusal = Refusal::Vendor(VendorRefusal {
    label: "not_app_endpoint",
    reason: "the delivery did not come through an App endpoint of the connection",
});

/// Refused: the connection never obtained a token for the installation the event names.
pub const INSTALLATION_NOT_VERIFIED: Refusal = Refusal::Vendor(VendorRefusal {
    label: "installation_not_verified",
    reason: "the connection has not verified this installation with its own credentials",
});

/// A GitHub repository, by the native id its payload reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GithubRepository {
    pub native_id: i64,
}

/// A GitLab project, by the native id its payload reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitlabProject {
    pub native_id: i64,
}

/// A GitHub App installation (installation events), by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GithubInstallation {
    pub installation_id: i64,
}

impl AdmissionRule for GithubRepository {
    const KIND: ConnectionKind = ConnectionKind::Github;

    // Rule: only an id-bound monitor of the delivering connection admits a repository write.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        monitored(conn, delivering, self.native_id).await
    }
}

impl AdmissionRule for GitlabProject {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;

    // Rule: only an id-bound monitor of the delivering connection admits a project write.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        monitored(conn, delivering, self.native_id).await
    }
}

/// The SCM monitors (GitHub repositories, GitLab projects) share one table: a monitor of this
/// very connection bound to the native id admits; a name, or another connection's monitor,
/// admits nothing.
async fn monitored(
    conn: &mut PgConnection,
    delivering: &Delivering,
    native_id: i64,
) -> Result<Result<(), Refusal>, sqlx::Error> {
    let bound: Option<(i32,)> = sqlx::query_as(
        "SELECT 1 FROM repository_to_monitor
          WHERE connection_id = $1 AND workspace_id = $2 AND native_id = $3 LIMIT 1",
    )
    .bind(delivering.admitted.connection_id)
    .bind(delivering.admitted.workspace_id)
    .bind(native_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(bound.map(|_| ()).ok_or(Refusal::NotMonitored))
}

impl AdmissionRule for GithubInstallation {
    const KIND: ConnectionKind = ConnectionKind::Github;

    // Installation events concern a connection until it has ended (a pending or paused one
    // still hears about its installation).
    fn authorised(state: ConnectionState) -> bool {
        !matches!(
            state,
            ConnectionState::Uninstalled | ConnectionState::Disconnected
        )
    }

    // Rule: installation events are trusted only from the App endpoint (the operator's secret)
    // and only for the installation the connection verified, never the one it typed.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        let connection_id = delivering.admitted.connection_id;
        let Some(delivery_id) = delivering.origin.delivery_id else {
            return Ok(Err(NOT_APP_ENDPOINT));
        };
        let app: Option<(i32,)> = sqlx::query_as(
            "SELECT 1 FROM inbound_message m
               JOIN inbound_endpoint e ON e.id = m.endpoint_id
              WHERE m.id = $1 AND m.connection_id = $2 AND e.connection_id = $2
                AND e.kind = 'github' AND e.registration = 'app'",
        )
        .bind(delivery_id)
        .bind(connection_id)
        .fetch_optional(&mut *conn)
        .await?;
        if app.is_none() {
            return Ok(Err(NOT_APP_ENDPOINT));
        }
        let verified: Option<(i32,)> = sqlx::query_as(
            "SELECT 1 FROM connection_grant
              WHERE connection_id = $1 AND kind = 'github_installation' AND grant_id = $2",
        )
        .bind(connection_id)
        .bind(self.installation_id.to_string())
        .fetch_optional(&mut *conn)
        .await?;
        Ok(verified.map(|_| ()).ok_or(INSTALLATION_NOT_VERIFIED))
    }
}

/// Records that `connection_id` verified the GitHub App installation `installation_id` with its
/// own credentials (an installation token was issued and used for it). Replaces an earlier one.
pub async fn record_github_installation(
    conn: &mut PgConnection,
    connection_id: Uuid,
    installation_id: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO connection_grant (connection_id, kind, grant_id)
         VALUES ($1, 'github_installation', $2)
         ON CONFLICT (connection_id, kind)
         DO UPDATE SET grant_id = EXCLUDED.grant_id, verified_at = now()",
    )
    .bind(connection_id)
    .bind(installation_id.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
