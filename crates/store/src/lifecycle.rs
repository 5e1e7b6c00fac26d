//! Connection transitions as one write, and a workspace's purge closing it to the outside. A
//! transition locks nothing itself (the caller holds the row lock in its transaction): the state
//! machine of `lifecycle_core::connection` decides, the version moves, an audit row and the
//! `lifecycle.<kind>.<id>.<transition>` outbox message are written, a disconnection disables
//! the connection's webhook endpoints, and leaving active for suspended, uninstalled or
//! disconnected captures what the connection created at its vendor ([`crate::repair::capture`]),
//! all in the caller's transaction. Callers that can take the identity locks before the row lock
//! do ([`crate::repair::lock_identities`]).

use lifecycle_core::connection::{ConnectionState, IllegalTransition, Transition};
use sea_orm::{
    ActiveEnum as _, ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend,
    DbErr, QueryFilter, QueryOrder, QuerySelect, Statement,
};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::contracts::LifecycleTransition;
use crate::entity::{ConnectionStatus, connection, connection_audit};
use crate::outbox;

/// The stored name of a status (`active`, `disconnected`, ...).
pub fn status_name(status: ConnectionStatus) -> String {
    status.to_value()
}

/// Writes an audit row for `row` as it now stands.
pub async fn write_audit<C: ConnectionTrait>(
    db: &C,
    row: &connection::Model,
    actor: &str,
    action: &str,
    before: Option<ConnectionStatus>,
) -> Result<(), DbErr> {
    connection_audit::ActiveModel {
        id: Set(Uuid::now_v7()),
        connection_id: Set(row.id),
        workspace_id: Set(row.workspace_id),
        actor: Set(actor.to_owned()),
        action: Set(action.to_owned()),
        before_status: Set(before.map(status_name)),
        after_status: Set(Some(status_name(row.status))),
        version: Set(row.version),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(())
}

/// Applies `transition` to `row` (locked by the caller), audited as `action` by `actor`; an
/// illegal transition writes nothing and says why.
pub async fn apply<C: ConnectionTrait + Sync>(
    db: &C,
    row: connection::Model,
    transition: Transition,
    actor: &str,
    action: &str,
) -> Result<Result<connection::Model, IllegalTransition>, DbErr> {
    let before = row.status;
    let next = match ConnectionState::from(before).apply(transition) {
        Ok(next) => next,
        Err(illegal) => return Ok(Err(illegal)),
    };
    let mut active: connection::ActiveModel = row.clone().into();
    active.status = Set(next.into());
    active.version = Set(row.version + 1);
    if transition.starts_generation() {
        active.lifecycle_generation = Set(row.lifecycle_generation + 1);
    }
    active.updated_at = Set(OffsetDateTime::now_utc());
    let row = active.update(db).await?;
    write_audit(db, &row, actor, action, Some(before)).await?;
    // Disconnection disables the connection's webhook endpoints in the same transaction.
    if row.status == ConnectionStatus::Disconnected {
        crate::inbound::disable_endpoints(db, row.id).await?;
    }
    // Capture before the change commits: what the connection created at its vendor is fenced
    // for removal (and a disconnection's credentials deleted) in this same transaction.
    if crate::repair::captures(before, row.status) {
        crate::repair::capture(db, &row, transition, actor).await?;
    }
    let message = LifecycleTransition {
        connection_id: row.id,
        workspace_id: row.workspace_id,
        kind: row.kind.as_str().to_owned(),
        transition: transition.event_name().to_owned(),
        before_status: status_name(before),
        status: status_name(row.status),
        version: row.version,
        lifecycle_generation: row.lifecycle_generation,
        provider_instance_id: row.provider_instance_id,
        actor: actor.to_owned(),
        at: row.updated_at.format(&Rfc3339).unwrap_or_default(),
    };
    outbox::enqueue_contract(db, &message).await?;
    Ok(Ok(row))
}

/// Closes a purged workspace to the outside in the caller's transaction: every endpoint of it
/// is disabled and every connection not yet disconnected is disconnected (audited as `purge`,
/// announced like any disconnection). Once this commits, ingress accepts no delivery for the
/// workspace. Safe to repeat; returns the connections it disconnected.
pub async fn close_workspace<C: ConnectionTrait + Sync>(
    db: &C,
    workspace_id: Uuid,
    actor: &str,
) -> Result<Vec<Uuid>, DbErr> {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "UPDATE inbound_endpoint SET status = 'disabled', updated_at = now() \
         WHERE workspace_id = $1 AND status <> 'disabled'",
        [workspace_id.into()],
    ))
    .await?;
    // Identity locks before the connection row locks (provider repair's lock order).
    let ids: Vec<Uuid> = connection::in_workspace(workspace_id)
        .filter(connection::Column::Status.ne(ConnectionStatus::Disconnected))
        .all(db)
        .await?
        .into_iter()
        .map(|c| c.id)
        .collect();
    crate::repair::lock_identities(db, &ids).await?;
    let open = connection::in_workspace(workspace_id)
        .filter(connection::Column::Status.ne(ConnectionStatus::Disconnected))
        .order_by_asc(connection::Column::Id)
        .lock_exclusive()
        .all(db)
        .await?;
    let mut disconnected = Vec::with_capacity(open.len());
    for row in open {
        // Every state but disconnected may disconnect.
        if let Ok(row) = apply(db, row, Transition::Disconnect, actor, "purge").await? {
            disconnected.push(row.id);
        }
    }
    Ok(disconnected)
}
