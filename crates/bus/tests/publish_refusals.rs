//! What a NATS client cannot carry is refused with an error, never a panic or a dropped
//! connection: a message id with CR/LF, a publish line longer than the server reads, an outbox
//! message with such a header. The connection then still publishes.

use anyhow::Result;
use async_nats::HeaderMap;
use bus::{BusError, Stream};
use bytes::Bytes;
use sea_orm::ConnectionTrait as _;
use store::outbox::{OutboxMessage, enqueue};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublishable_messages_are_errors_and_the_connection_survives() -> Result<()> {
    let env = testkit::TestEnv::new().await?;
    let bus = &env.bus;
    let subject = "lifecycle.github.c1.activated";

    let bad_id = bus
        .publish(subject, "id\r\nPUB x 0", HeaderMap::new(), Bytes::new())
        .await;
    assert!(
        matches!(bad_id, Err(BusError::BadHeader { .. })),
        "{bad_id:?}"
    );
    let long = format!(
        "lifecycle.github.{}.activated",
        "c".repeat(bus::MAX_CONTROL_LINE)
    );
    assert!(long.len() > bus.max_subject_bytes());
    let too_long = bus
        .publish(&long, "id-1", HeaderMap::new(), Bytes::new())
        .await;
    assert!(
        matches!(too_long, Err(BusError::SubjectTooLong { .. })),
        "{too_long:?}"
    );

    // Nothing the relay could not publish reaches the outbox.
    let db = &env.db.db;
    let poisoned = OutboxMessage::bytes(subject, vec![]).header("Forgesync-Event", "a\r\nb");
    assert!(enqueue(db, poisoned).await.is_err());
    let rows = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) FROM outbox",
        ))
        .await?
        .expect("a count row")
        .try_get_by_index::<i64>(0)?;
    assert_eq!(rows, 0);

    // The same connection still publishes.
    let ok = bus
        .publish(subject, "id-2", HeaderMap::new(), Bytes::from_static(b"{}"))
        .await?;
    assert!(!ok.duplicate);
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(Stream::Lifecycle.name()))
        .await?;
    assert_eq!(stream.get_info().await?.state.messages, 1);
    env.db.drop().await;
    Ok(())
}
