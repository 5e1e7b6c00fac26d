//! Write admission: whether a vendor delivery may change the shared mirror. Mirrored rows carry
//! no workspace id, so a delivery writes only inside the scope the connection named on the
//! message (set by ingress from the endpoint that verified it) has verified with its own
//! credentials. Every vendor consumer asks here; a vendor adds a [`Scope`] variant.

use lifecycle_core::connection::ConnectionState;
use sea_orm::ActiveEnum as _;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::entity::ConnectionStatus;

/// What a delivery asks to write to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A GitHub repository, by the native id its payload reports.
    GithubRepository { native_id: i64 },
    /// A GitHub App installation (installation events), by its id.
    GithubInstallation { installation_id: i64 },
    /// A GitLab project, by the native id its payload reports.
    GitlabProject { native_id: i64 },
}

impl Scope {
    /// The connection kind this scope belongs to.
    fn kind(self) -> &'static str {
        match self {
            Scope::GithubRepository { .. } | Scope::GithubInstallation { .. } => "github",
            Scope::GitlabProject { .. } => "gitlab",
        }
    }
}

/// Where a delivery came from, as ingress stamped it on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The connection owning the endpoint that verified the delivery.
    pub connection_id: Uuid,
    /// The inbound message (ingress's record of the delivery), when the message names it.
    pub delivery_id: Option<Uuid>,
}

/// The connection a delivery was admitted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admitted {
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub provider_instance_id: Uuid,
}

/// Why a delivery was not admitted. Each is counted as out of scope and changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the connection is gone or of another kind")]
    NoConnection,
    #[error("the connection does not authorise writes now")]
    NotAuthorised,
    #[error("no monitor of the connection is bound to this native id")]
    NotMonitored,
    #[error("the delivery did not come through an App endpoint of the connection")]
    NotAppEndpoint,
    #[error("the connection has not verified this installation with its own credentials")]
    InstallationNotVerified,
}

impl Refusal {
    /// A short label for logs and activity records.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoConnection => "no_connection",
            Refusal::NotAuthorised => "not_authorised",
            Refusal::NotMonitored => "not_monitored",
            Refusal::NotAppEndpoint => "not_app_endpoint",
            Refusal::InstallationNotVerified => "installation_not_verified",
        }
    }
}

/// The delivering connection as admission reads it.
#[derive(sqlx::FromRow)]
struct Delivering {
    workspace_id: Uuid,
    provider_instance_id: Uuid,
    status: String,
}

/// Decides whether the delivery from `origin` may write to `scope`. Runs in the caller's
/// transaction and holds the connection row (`FOR SHARE`) until it commits, so a disconnect
/// cannot slip between the decision and the writes.
pub async fn admit(
    conn: &mut PgConnection,
    origin: &Origin,
    scope: Scope,
) -> Result<Result<Admitted, Refusal>, sqlx::Error> {
    let row: Option<Delivering> = sqlx::query_as(
        "SELECT workspace_id, provider_instance_id, status FROM connection
          WHERE id = $1 AND kind = $2 FOR SHARE",
    )
    .bind(origin.connection_id)
    .bind(scope.kind())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(Delivering {
        workspace_id,
        provider_instance_id,
        status,
    }) = row
    else {
        return Ok(Err(Refusal::NoConnection));
    };
    let admitted = Admitted {
        connection_id: origin.connection_id,
        workspace_id,
        provider_instance_id,
    };
    let Ok(state) = ConnectionStatus::try_from_value(&status).map(ConnectionState::from) else {
        return Ok(Err(Refusal::NotAuthorised));
    };
    match scope {
        // The SCM monitors (GitHub repositories, GitLab projects) share one table.
        Scope::GithubRepository { native_id } | Scope::GitlabProject { native_id } => {
            // Writes need a connection that may write (a paused one only keeps reading).
            if !state.authorises_writes() {
                return Ok(Err(Refusal::NotAuthorised));
            }
            // Only a monitor of this very connection bound to the native id admits: a name, or
            // another connection's monitor, admits nothing.
            let bound: Option<(i32,)> = sqlx::query_as(
                "SELECT 1 FROM repository_to_monitor
                  WHERE connection_id = $1 AND workspace_id = $2 AND native_id = $3 LIMIT 1",
            )
            .bind(origin.connection_id)
            .bind(workspace_id)
            .bind(native_id)
            .fetch_optional(&mut *conn)
            .await?;
            Ok(bound.map(|_| admitted).ok_or(Refusal::NotMonitored))
        }
        Scope::GithubInstallation { installation_id } => {
            // Installation events concern a connection until it has ended.
            if matches!(
                state,
                ConnectionState::Uninstalled | ConnectionState::Disconnected
            ) {
                return Ok(Err(Refusal::NotAuthorised));
            }
            // Installation events are trusted only from the connection's App endpoint, whose
            // secret the operator configured.
            let Some(delivery_id) = origin.delivery_id else {
                return Ok(Err(Refusal::NotAppEndpoint));
            };
            let app: Option<(i32,)> = sqlx::query_as(
                "SELECT 1 FROM inbound_message m
                   JOIN inbound_endpoint e ON e.id = m.endpoint_id
                  WHERE m.id = $1 AND m.connection_id = $2 AND e.connection_id = $2
                    AND e.kind = 'github' AND e.registration = 'app'",
            )
            .bind(delivery_id)
            .bind(origin.connection_id)
            .fetch_optional(&mut *conn)
            .await?;
            if app.is_none() {
                return Ok(Err(Refusal::NotAppEndpoint));
            }
            // The installation the connection obtained a token for, not the one it typed.
            let verified: Option<(i32,)> = sqlx::query_as(
                "SELECT 1 FROM connection_grant
                  WHERE connection_id = $1 AND kind = 'github_installation' AND grant_id = $2",
            )
            .bind(origin.connection_id)
            .bind(installation_id.to_string())
            .fetch_optional(&mut *conn)
            .await?;
            Ok(verified
                .map(|_| admitted)
                .ok_or(Refusal::InstallationNotVerified))
        }
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
