//! Write admission: whether a vendor delivery may change the shared mirror. Mirrored rows carry
//! no workspace id, so a delivery writes only inside the scope the connection named on the
//! message (set by ingress from the endpoint that verified it) has verified with its own
//! credentials. Every vendor consumer asks [`admit`]; a vendor declares what its scopes need as
//! an [`AdmissionRule`] in its own crate, and nothing here names a vendor.

use std::future::Future;

use lifecycle_core::connection::ConnectionState;
use sea_orm::ActiveEnum as _;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::entity::{ConnectionKind, ConnectionStatus};

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

/// A refusal reason a vendor's rule names itself: a bounded label for logs and activity
/// records, and a sentence saying what was missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorRefusal {
    /// Short, `snake_case`, stable: it becomes a log field.
    pub label: &'static str,
    /// What the delivery lacked.
    pub reason: &'static str,
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
    /// A reason only one vendor's rule has.
    #[error("{}", .0.reason)]
    Vendor(VendorRefusal),
}

impl Refusal {
    /// A short label for logs and activity records.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoConnection => "no_connection",
            Refusal::NotAuthorised => "not_authorised",
            Refusal::NotMonitored => "not_monitored",
            Refusal::Vendor(v) => v.label,
        }
    }
}

/// The delivering connection, read and locked by [`admit`] before a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivering {
    /// What ingress stamped on the message.
    pub origin: Origin,
    /// The connection, should the rule admit.
    pub admitted: Admitted,
    /// Where the connection's lifecycle stands (one the rule authorises).
    pub state: ConnectionState,
}

/// A vendor's write-admission rule for one kind of scope. A value of the type is the scope a
/// delivery asks to write to (a repository by native id, a channel); the vendor's crate
/// implements it, and [`admit`] is the only caller.
pub trait AdmissionRule: Send {
    /// The connections this scope belongs to; a delivery of another kind is
    /// [`Refusal::NoConnection`].
    const KIND: ConnectionKind;

    /// Whether a connection in `state` may write to this kind of scope at all; any other state
    /// is [`Refusal::NotAuthorised`] and the rule is not asked.
    fn authorised(state: ConnectionState) -> bool {
        state.authorises_writes()
    }

    /// Decides, in the caller's transaction and while the connection row is held, whether the
    /// delivering connection covers this scope. `Ok(Err(_))` refuses; reads nothing the payload
    /// could have widened.
    fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> impl Future<Output = Result<Result<(), Refusal>, sqlx::Error>> + Send;
}

/// The delivering connection as admission reads it.
#[derive(sqlx::FromRow)]
struct Row {
    workspace_id: Uuid,
    provider_instance_id: Uuid,
    status: String,
}

/// Decides whether the delivery from `origin` may write to `scope`. Runs in the caller's
/// transaction and holds the connection row (`FOR SHARE`) until it commits, so a disconnect
/// cannot slip between the decision and the writes; the vendor's rule decides under that lock.
pub async fn admit<R: AdmissionRule>(
    conn: &mut PgConnection,
    origin: &Origin,
    scope: R,
) -> Result<Result<Admitted, Refusal>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT workspace_id, provider_instance_id, status FROM connection
          WHERE id = $1 AND kind = $2 FOR SHARE",
    )
    .bind(origin.connection_id)
    .bind(R::KIND.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(Row {
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
    // An unknown status authorises nothing.
    let Ok(state) = ConnectionStatus::try_from_value(&status).map(ConnectionState::from) else {
        return Ok(Err(Refusal::NotAuthorised));
    };
    if !R::authorised(state) {
        return Ok(Err(Refusal::NotAuthorised));
    }
    let delivering = Delivering {
        origin: *origin,
        admitted,
        state,
    };
    Ok(scope.decide(conn, &delivering).await?.map(|()| admitted))
}
