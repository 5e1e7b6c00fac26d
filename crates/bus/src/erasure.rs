//! Erasing messages from streams: by the sequence the stream ledger recorded (a secure erase,
//! the server overwrites the message), where a message already gone counts as erased; and one
//! delivery everywhere it is kept, for a vendor that must erase what arrived without consent.

use std::collections::BTreeMap;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::stream::DeleteMessageErrorKind;
use futures::StreamExt as _;
use sea_orm::{DatabaseConnection, DbErr, TransactionTrait as _};
use store::inbound::{ErasedDelivery, StreamCopy};
use uuid::Uuid;

use crate::{Bus, BusError};

/// Deletes in flight at once.
pub const IN_FLIGHT: usize = 64;

/// Why a delivery's erasure stopped; calling again resumes it.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    #[error("database: {0}")]
    Db(#[from] DbErr),
    #[error(transparent)]
    Bus(#[from] BusError),
    /// The message in hand names no delivery (or no connection): it is not a webhook delivery.
    #[error("the message carries no {0} header: it is not a webhook delivery")]
    NotADelivery(&'static str),
}

/// Whether the server refused a delete because the message is not there (deleted by an earlier,
/// interrupted run, or aged out of the stream).
pub fn already_gone(error: &async_nats::jetstream::Error) -> bool {
    let code = error.error_code();
    code == ErrorCode::NO_MESSAGE_FOUND
        || code == ErrorCode::SEQUENCE_NOT_FOUND
        || (code == ErrorCode::STREAM_MESSAGE_DELETE_FAILED && {
            let text = error.to_string();
            text.contains("not found") || text.contains("no message")
        })
}

/// Deletes each message from its stream ([`IN_FLIGHT`] at once); one already gone counts as
/// deleted.
pub async fn delete_stream_messages(bus: &Bus, copies: &[StreamCopy]) -> Result<(), BusError> {
    let mut handles = BTreeMap::new();
    for c in copies {
        if !handles.contains_key(&c.stream) {
            let name = bus.namespace().name(&c.stream);
            let stream = bus
                .jetstream()
                .get_stream(&name)
                .await
                .map_err(|e| BusError::Erase {
                    stream: name.clone(),
                    message: e.to_string(),
                })?;
            handles.insert(c.stream.clone(), stream);
        }
    }
    // Owned futures (a handle clone and the sequence each), so the batch runs concurrently.
    let deletes: Vec<_> = copies
        .iter()
        .map(|c| {
            let stream = handles[&c.stream].clone();
            let (name, sequence) = (c.stream.clone(), c.sequence);
            async move {
                match stream.delete_message(sequence).await {
                    Ok(_) => Ok(()),
                    Err(e) => match e.kind() {
                        DeleteMessageErrorKind::JetStream(js) if already_gone(&js) => Ok(()),
                        _ => Err(BusError::Erase {
                            stream: name,
                            message: format!("deleting message {sequence}: {e}"),
                        }),
                    },
                }
            }
        })
        .collect();
    let results: Vec<Result<(), BusError>> = futures::stream::iter(deletes)
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Erases one delivery of `connection_id` everywhere it is kept: its raw body, stored headers
/// and unpublished dispatch record (`store::inbound::erase_delivery`, which marks it erased),
/// its dead copies, and its copies in the streams, by the sequences the ledger recorded plus
/// `in_hand` (the copy a consumer is handling, whose ledger row may not be written yet). Its
/// replays go with it. Idempotent: a second call, or a stream copy already gone, is success.
#[tracing::instrument(skip(bus, db, in_hand))]
pub async fn erase_delivery(
    bus: &Bus,
    db: &DatabaseConnection,
    connection_id: Uuid,
    delivery_id: Uuid,
    in_hand: Option<StreamCopy>,
) -> Result<ErasedDelivery, EraseError> {
    let txn = db.begin().await?;
    let mut erased = store::inbound::erase_delivery(&txn, connection_id, delivery_id).await?;
    crate::dead::forget_deliveries(&txn, &erased.messages).await?;
    txn.commit().await?;
    // Database first, then the streams, then the ledger rows: a crash in between leaves the
    // ledger naming what a second call deletes again.
    let mut copies = erased.stream_copies.clone();
    copies.extend(in_hand);
    copies.sort();
    copies.dedup();
    delete_stream_messages(bus, &copies).await?;
    store::inbound::forget_stream_copies(db, &erased.stream_copies).await?;
    erased.stream_copies = copies;
    tracing::info!(
        %connection_id,
        %delivery_id,
        messages = erased.messages.len(),
        stream_copies = erased.stream_copies.len(),
        "delivery erased"
    );
    Ok(erased)
}
