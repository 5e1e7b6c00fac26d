//! Erasing one delivery over real Postgres and JetStream: a delivery stored as ingress stores it
//! and published by the relay (which records it in the stream ledger) is erased by the consumer
//! handling it: its body, stored headers and stream copy are gone, its row is marked erased, a
//! second erase succeeds (also when the stream copy is already gone), and another tenant's
//! delivery on the same stream is untouched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use bus::consumer::{self, ConsumerSpec, Delivery, Handler, HandlerError, Settle};
use bus::contracts::WebhookDelivery;
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Stream};
use sea_orm::{DatabaseConnection, TransactionTrait};
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A workspace with an active Slack connection and its webhook endpoint.
async fn tenant(db: &DatabaseConnection, instance: Uuid) -> Result<EndpointIds> {
    let pool = db.get_postgres_connection_pool();
    let (workspace_id, connection_id) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
        .bind(workspace_id)
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
         VALUES ($1, $2, 'slack', 'active', $3)",
    )
    .bind(connection_id)
    .bind(workspace_id)
    .bind(instance)
    .execute(pool)
    .await?;
    let endpoint = store::inbound::create_endpoint(
        db,
        &Keyring::parse(&testkit::secret_key())?,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Slack,
            registration: Registration::Registered,
            provider_ref: None,
            address_token: Some(Uuid::now_v7().simple().to_string()),
            tenant_keyed: false,
        },
        b"secret",
    )
    .await?;
    Ok(EndpointIds {
        endpoint_id: endpoint.id,
        workspace_id,
        connection_id,
        kind: ConnectionKind::Slack,
    })
}

/// Stores `body` as ingress does, with a vendor header kept beside it; returns the message id.
async fn deliver(db: &DatabaseConnection, endpoint: EndpointIds, body: &str) -> Result<Uuid> {
    let txn = db.begin().await?;
    let recorded = store::inbound::record(
        &txn,
        NewMessage {
            endpoint,
            verification: "signature".into(),
            headers: BTreeMap::from([("X-Slack-Request-Timestamp".into(), "1700000000".into())]),
            body: body.as_bytes().to_vec(),
            event: "message".into(),
            subject: "slack.t1.c1.message".into(),
            dedup: Dedup::Keys {
                event_id: Some(Uuid::now_v7().to_string()),
                digest_window: Duration::from_secs(3600),
                verified_by: None,
            },
            retention: Duration::from_secs(3600),
            inline_body_max: usize::MAX,
            relay_hold: Duration::ZERO,
        },
    )
    .await?;
    let Recorded::Accepted(accepted) = recorded else {
        panic!("not stored: {recorded:?}");
    };
    txn.commit().await?;
    Ok(accepted.message_id)
}

/// Erases every delivery whose body says `erase`, and counts what it handled.
struct ErasingHandler {
    handled: AtomicUsize,
    erased: AtomicUsize,
}

impl Handler for ErasingHandler {
    type Message = WebhookDelivery;

    async fn handle(
        &self,
        m: WebhookDelivery,
        delivery: &Delivery,
    ) -> Result<Settle, HandlerError> {
        let settle = if m.body.starts_with(b"erase") {
            delivery.erase().await.map_err(HandlerError::transient)?;
            self.erased.fetch_add(1, Ordering::SeqCst);
            Settle::Applied("erased")
        } else {
            Settle::Unchanged("kept")
        };
        self.handled.fetch_add(1, Ordering::SeqCst);
        Ok(settle)
    }
}

/// What is left of one delivery: (body rows, stored headers, erased, ledger rows).
async fn left(db: &DatabaseConnection, id: Uuid) -> Result<(i64, serde_json::Value, bool, i64)> {
    let pool = db.get_postgres_connection_pool();
    let bodies: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbound_message_body WHERE message_id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    let (headers, erased): (serde_json::Value, bool) =
        sqlx::query_as("SELECT headers, erased_at IS NOT NULL FROM inbound_message WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    let ledger: i64 =
        sqlx::query_scalar("SELECT count(*) FROM stream_message WHERE delivery_id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
    Ok((bodies, headers, erased, ledger))
}

/// The stream sequences of the Slack stream's messages, by the delivery each carries.
async fn stored(bus: &Bus) -> Result<BTreeMap<Uuid, u64>> {
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(Stream::WebhooksSlack.name()))
        .await?;
    let last = stream.get_info().await?.state.last_sequence;
    let mut out = BTreeMap::new();
    for sequence in 1..=last {
        let Ok(m) = stream.get_raw_message(sequence).await else {
            continue;
        };
        if let Some(id) = m
            .headers
            .get(store::headers::DELIVERY)
            .and_then(|v| v.as_str().parse().ok())
        {
            out.insert(id, sequence);
        }
    }
    Ok(out)
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_delivery_leaves_no_body_headers_or_stream_copy_and_others_stay() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let bus = testkit::test_bus().await?;
    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'slack')")
        .bind(instance)
        .execute(db.db.get_postgres_connection_pool())
        .await?;
    let (mine, other) = (
        tenant(&db.db, instance).await?,
        tenant(&db.db, instance).await?,
    );
    let erased = deliver(&db.db, mine, "erase: no consent").await?;
    let kept = deliver(&db.db, mine, "keep: consented").await?;
    let others = deliver(&db.db, other, "keep: another tenant").await?;
    let relay = Relay::new(db.db.clone(), bus.clone(), RelayConfig::default());
    assert_eq!(relay.publish_batch().await?, 3);
    // The ledger names the delivery each stream copy carries.
    assert_eq!(left(&db.db, erased).await?.3, 1);
    assert_eq!(stored(&bus).await?.len(), 3);

    let handler = Arc::new(ErasingHandler {
        handled: AtomicUsize::new(0),
        erased: AtomicUsize::new(0),
    });
    let stop = CancellationToken::new();
    let task = {
        let (bus, db, handler, stop) = (bus.clone(), db.db.clone(), handler.clone(), stop.clone());
        let spec = ConsumerSpec {
            backoff: vec![Duration::from_millis(100)],
            ..ConsumerSpec::new(Stream::WebhooksSlack, "slack-test")
        };
        tokio::spawn(async move { consumer::run(&bus, db, spec, handler, stop).await })
    };
    wait_for("three deliveries handled", || {
        handler.handled.load(Ordering::SeqCst) == 3
    })
    .await;
    stop.cancel();
    task.await??;
    assert_eq!(handler.erased.load(Ordering::SeqCst), 1);

    let (bodies, headers, is_erased, ledger) = left(&db.db, erased).await?;
    assert_eq!((bodies, ledger), (0, 0));
    assert_eq!(headers, serde_json::json!({}));
    assert!(is_erased);
    let in_stream = stored(&bus).await?;
    assert!(!in_stream.contains_key(&erased), "{in_stream:?}");
    for id in [kept, others] {
        let (bodies, headers, is_erased, ledger) = left(&db.db, id).await?;
        assert_eq!((bodies, ledger), (1, 1), "{id}");
        assert_eq!(headers["X-Slack-Request-Timestamp"], "1700000000");
        assert!(!is_erased);
        assert!(in_stream.contains_key(&id), "{id}");
    }

    // A second erase finds nothing left and succeeds.
    let again = bus::erase_delivery(&bus, &db.db, mine.connection_id, erased, None).await?;
    assert_eq!(again.messages, vec![erased]);
    assert!(again.stream_copies.is_empty());
    // Another connection cannot name this tenant's delivery.
    let foreign = bus::erase_delivery(&bus, &db.db, other.connection_id, kept, None).await?;
    assert!(foreign.messages.is_empty());
    assert_eq!(left(&db.db, kept).await?.0, 1);

    // A stream copy already gone (an erase interrupted after the stream delete) is success.
    let stream = bus
        .jetstream()
        .get_stream(bus.namespace().name(Stream::WebhooksSlack.name()))
        .await?;
    stream.delete_message(in_stream[&kept]).await?;
    let done = bus::erase_delivery(&bus, &db.db, mine.connection_id, kept, None).await?;
    assert_eq!(done.stream_copies.len(), 1);
    assert_eq!(left(&db.db, kept).await?.3, 0);
    let (bodies, _, _, ledger) = left(&db.db, others).await?;
    assert_eq!((bodies, ledger), (1, 1));
    assert!(stored(&bus).await?.contains_key(&others));
    Ok(())
}
