//! The bus side of the eraser: a connection's disconnection and a workspace's purge, as their
//! typed contracts, each settled by the runner on what the erasure returned.

use bus::consumer::{Delivery, Handler, HandlerError, Settle};
use bus::contracts::{LifecycleTransition, RepositoriesReleased, WorkspacePurged};
use lifecycle_core::connection::Transition;
use lifecycle_core::erasure::ErasureTrigger;
use sea_orm::ActiveEnum as _;
use store::entity::ConnectionKind;

use crate::erase::{EraseError, Eraser, Outcome};

fn settle(result: Result<Outcome, EraseError>) -> Result<Settle, HandlerError> {
    match result {
        Ok(Outcome::Erased) => Ok(Settle::Applied("erased")),
        Ok(Outcome::AlreadyDone) => Ok(Settle::Unchanged("already erased")),
        // A crash or an outage resumes at the step it stopped in, on redelivery.
        Err(e @ (EraseError::Db(_) | EraseError::Sqlx(_) | EraseError::Stream(_))) => {
            Err(HandlerError::transient(e))
        }
        Err(e @ EraseError::Refused(_)) => Err(HandlerError::permanent(e)),
    }
}

/// `lifecycle.*.*.disconnected`: erase the connection.
pub struct DisconnectHandler {
    pub eraser: Eraser,
}

impl Handler for DisconnectHandler {
    type Message = LifecycleTransition;

    async fn handle(&self, msg: LifecycleTransition, _: &Delivery) -> Result<Settle, HandlerError> {
        if msg.transition != Transition::Disconnect.event_name() {
            return Ok(Settle::Ignored("not a disconnection"));
        }
        settle(
            self.eraser
                .erase_connection(msg.connection_id, ErasureTrigger::AdminDisconnect)
                .await,
        )
    }
}

/// `lifecycle.workspace.*.purged`: purge the workspace.
pub struct PurgeHandler {
    pub eraser: Eraser,
}

impl Handler for PurgeHandler {
    type Message = WorkspacePurged;

    async fn handle(&self, msg: WorkspacePurged, _: &Delivery) -> Result<Settle, HandlerError> {
        settle(self.eraser.purge_workspace(msg.workspace_id).await)
    }
}

/// `lifecycle.*.*.repositories_released`: the orphan guard on repositories that left a
/// connection's reach.
pub struct ReleaseHandler {
    pub eraser: Eraser,
}

impl Handler for ReleaseHandler {
    type Message = RepositoriesReleased;

    async fn handle(
        &self,
        msg: RepositoriesReleased,
        _: &Delivery,
    ) -> Result<Settle, HandlerError> {
        let kind = ConnectionKind::try_from_value(&msg.kind)
            .map_err(|_| HandlerError::permanent(format!("unknown kind {:?}", msg.kind)))?;
        settle(
            self.eraser
                .release(
                    msg.connection_id,
                    msg.workspace_id,
                    kind,
                    &msg.repository_ids,
                )
                .await
                .map(|_| Outcome::Erased),
        )
    }
}
