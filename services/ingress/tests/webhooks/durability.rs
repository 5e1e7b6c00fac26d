//! Durability: the dispatch record outlives a lost inline publish, the stream absorbs a
//! republish, raw bodies expire and are erasable, and a delivery that cannot be stored is 503.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use bus::relay::{Relay, RelayConfig};
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait as _, TransactionTrait as _};
use store::entity::inbound_endpoint::{self, Registration};
use store::entity::{ConnectionKind, connection};
use store::inbound::{Dedup, EndpointIds, NewMessage, Recorded};

use crate::support::{Harness, count, github_push, sign};

fn new_message(ep: EndpointIds, event_id: &str, retention: Duration) -> NewMessage {
    signed_message(ep, event_id, retention, None)
}

fn signed_message(
    ep: EndpointIds,
    event_id: &str,
    retention: Duration,
    verified_by: Option<String>,
) -> NewMessage {
    NewMessage {
        endpoint: ep,
        verification: "signature".into(),
        headers: BTreeMap::new(),
        body: format!("{{\"n\":\"{event_id}\"}}").into_bytes(),
        event: "push".into(),
        subject: lifecycle_core::subject::github("acme", "api", "push").expect("a short subject"),
        dedup: Dedup::Keys {
            event_id: Some(event_id.into()),
            digest_window: Duration::from_secs(86_400),
            verified_by,
        },
        retention,
        inline_body_max: 1024,
        relay_hold: Duration::ZERO,
    }
}

/// A GitHub connection, its endpoint (secret `s`), and the ids a stored delivery carries.
async fn github_endpoint(
    h: &Harness,
) -> Result<(connection::Model, inbound_endpoint::Model, EndpointIds)> {
    let conn = h.connection(ConnectionKind::Github, None).await?;
    let ep = h
        .endpoint(&conn, Registration::Operator, Some("1"), None, "s")
        .await?;
    let ids = EndpointIds {
        endpoint_id: ep.id,
        workspace_id: conn.workspace_id,
        connection_id: conn.id,
        kind: conn.kind,
    };
    Ok((conn, ep, ids))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_a_stored_delivery_once_under_its_dedup_key() -> Result<()> {
    let h = Harness::start().await?;
    let (_, _, ids) = github_endpoint(&h).await?;
    // Committed, never published inline (as if NATS was down or the process died after 2xx).
    let txn = h.db().begin().await?;
    let Recorded::Accepted(a) =
        store::inbound::record(&txn, new_message(ids, "e-1", Duration::from_secs(3600))).await?
    else {
        panic!("a new event is not a duplicate");
    };
    txn.commit().await?;

    // The stream already holds it (an inline publish that died before stamping the row). The
    // harness's own relay may have published the row first: then this copy is the duplicate.
    // Either way the stream must end with one.
    h.env
        .bus
        .publish(
            &a.message.subject,
            &a.msg_id,
            Default::default(),
            a.message.payload.clone().into(),
        )
        .await?;
    let relay = Relay::new(h.db().clone(), h.env.bus.clone(), RelayConfig::default());
    relay.publish_batch().await?;
    let got = h.settled(Stream::WebhooksGithub, 1).await?;
    assert_eq!(got.len(), 1, "the republish must be absorbed by the stream");
    assert_eq!(got[0].msg_id.as_deref(), Some(a.msg_id.as_str()));
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message_state WHERE processing_state = 'dispatched'"
        )
        .await?,
        1
    );
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_bodies_expire_by_retention_and_are_erasable_per_connection() -> Result<()> {
    let h = Harness::start().await?;
    let (conn, _, ids) = github_endpoint(&h).await?;
    for (id, keep) in [("old", Duration::ZERO), ("new", Duration::from_secs(3600))] {
        let txn = h.db().begin().await?;
        store::inbound::record(&txn, new_message(ids, id, keep)).await?;
        txn.commit().await?;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    store::inbound::prune_expired(h.db(), 100, Duration::from_secs(3600)).await?;
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message_body").await?,
        1
    );
    assert_eq!(store::inbound::erase_bodies(h.db(), conn.id).await?, 1);
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message_body").await?,
        0
    );
    // Message history stays until the eraser removes it.
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message").await?,
        2
    );
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_cannot_be_stored_is_503() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Github, None).await?;
    h.endpoint(&conn, Registration::Operator, Some("7"), None, "s")
        .await?;
    let body = github_push(1);
    let headers = vec![
        ("X-GitHub-Event", "push".to_owned()),
        ("X-GitHub-Delivery", "d".to_owned()),
        ("X-GitHub-Hook-ID", "7".to_owned()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign("s", &[&body])),
        ),
    ];
    // Postgres goes away for this database.
    let admin = sea_orm::Database::connect(std::env::var("DATABASE_URL")?).await?;
    let name = &h.env.db.name;
    admin
        .execute_unprepared(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .await?;
    admin
        .execute_unprepared(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        ))
        .await?;
    let (s, text) = h.post("/webhooks/github", &headers, body.clone()).await?;
    admin
        .execute_unprepared(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .await?;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    // Back up: the vendor's retry is accepted.
    let (s, text) = h.post("/webhooks/github", &headers, body).await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_takes_a_delivery_only_while_its_endpoint_accepts_it() -> Result<()> {
    let h = Harness::start().await?;
    let (conn, ep, ids) = github_endpoint(&h).await?;
    let keep = Duration::from_secs(3600);
    let attempt = |event: &str, by: Option<String>| {
        let new = signed_message(ids, event, keep, by);
        async {
            let txn = h.db().begin().await?;
            let r = store::inbound::record(&txn, new).await?;
            txn.commit().await?;
            anyhow::Ok(r)
        }
    };
    // A secret that is not (or no longer) the endpoint's verifies nothing here.
    assert_eq!(
        attempt("a", Some("webhook/gone".into())).await?,
        Recorded::EndpointClosed
    );
    assert_eq!(h.footprint().await?, [0, 0, 0, 0]);
    assert!(matches!(
        attempt("b", Some(ep.secret_current.clone())).await?,
        Recorded::Accepted(_)
    ));
    // Disconnected: closed whatever verified it, and no key is taken.
    store::inbound::disable_endpoints(h.db(), conn.id).await?;
    assert_eq!(
        attempt("c", Some(ep.secret_current.clone())).await?,
        Recorded::EndpointClosed
    );
    assert_eq!(attempt("d", None).await?, Recorded::EndpointClosed);
    assert_eq!(h.footprint().await?[..3], [1, 1, 2]);
    h.ingress.stop().await
}

/// Hands each delivery's body (read by reference when it has one) to the test, then acks.
struct ReadBody(
    tokio::sync::mpsc::UnboundedSender<Option<Vec<u8>>>,
    sea_orm::DatabaseConnection,
);

impl bus::consumer::Handler for ReadBody {
    type Message = bus::contracts::WebhookDelivery;

    async fn handle(
        &self,
        message: bus::contracts::WebhookDelivery,
        _: &bus::consumer::Delivery,
    ) -> Result<bus::consumer::Settle, bus::consumer::HandlerError> {
        let body = match message.body_ref {
            Some(id) => store::inbound::stored_body(self.1.get_postgres_connection_pool(), id)
                .await
                .expect("read the body"),
            None => Some(message.body),
        };
        let _ = self.0.send(body);
        Ok(bus::consumer::Settle::Applied("read"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_an_unconsumed_body_by_reference_until_its_message_is_consumed()
-> Result<()> {
    let h = Harness::start().await?;
    let (_, _, ids) = github_endpoint(&h).await?;
    // Both past their retention at once; one travels by reference (over 1024 bytes).
    let mut by_ref = new_message(ids, "by-ref", Duration::ZERO);
    by_ref.body = format!("{{\"pad\":\"{}\"}}", "x".repeat(4096)).into_bytes();
    let expected = by_ref.body.clone();
    let txn = h.db().begin().await?;
    store::inbound::record(&txn, by_ref).await?;
    store::inbound::record(&txn, new_message(ids, "inline", Duration::ZERO)).await?;
    txn.commit().await?;
    // Published (its dispatch record is gone), nobody has consumed it yet.
    Relay::new(h.db().clone(), h.env.bus.clone(), RelayConfig::default())
        .publish_batch()
        .await?;
    h.settled(Stream::WebhooksGithub, 2).await?;
    let max_age = Duration::from_secs(3600);
    for _ in 0..2 {
        store::inbound::prune_expired(h.db(), 100, max_age).await?;
    }
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message_body").await?,
        1,
        "the inline body goes, the unconsumed body by reference stays"
    );
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message_body WHERE by_reference \
             AND stream_expires_at > now() + interval '50 minutes'"
        )
        .await?,
        1,
        "kept until the stream can no longer deliver it"
    );

    // Consumed later: the body is still there for the consumer, then retention may take it.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let consumer = tokio::spawn({
        let (bus, db, stop) = (h.env.bus.clone(), h.db().clone(), stop.clone());
        let handler = std::sync::Arc::new(ReadBody(tx, db.clone()));
        async move {
            bus::consumer::run(
                &bus,
                db,
                bus::consumer::ConsumerSpec::new(Stream::WebhooksGithub, "retention-test"),
                handler,
                stop,
            )
            .await
        }
    });
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let body = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await?
            .expect("a delivery");
        bodies.push(body.expect("the body is still stored"));
    }
    assert!(
        bodies.contains(&expected),
        "the by-reference body is read whole"
    );
    stop.cancel();
    consumer.await??;
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM inbound_message_body WHERE consumed_at IS NOT NULL"
        )
        .await?,
        1
    );
    assert_eq!(count(h.db(), "SELECT count(*) FROM dead_message").await?, 0);
    store::inbound::prune_expired(h.db(), 100, max_age).await?;
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message_body").await?,
        0,
        "once consumed and past retention, it goes"
    );
    h.ingress.stop().await
}
