//! Outline's deliveries through ingress to the mirror: versions forward by `updatedAt`,
//! deletions dated tombstones, one event per change, repeats and shuffles changing nothing the
//! in-order application would not, and a delivery naming another subscription refused.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use common::{World, eventually};
use outline_mirror::events::{DELETED, MOVED, PUBLISHED, RESTORED, UPDATED};
use serde_json::json;
use store::contracts::WebhookDelivery;
use uuid::Uuid;
use vendor_sim::outline::{DeliveryPlan, NewDocument, Order};

#[tokio::test]
async fn a_documents_life_is_applied_through_ingress_one_event_per_change() -> Result<()> {
    let w = World::start().await?;
    let [eng, handbook] = w.collections.clone();
    let id = w
        .sim
        .model(|m| m.add_document(NewDocument::new(&eng, "Runbook").text("v1")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("created")?;
    assert_eq!(row.3.as_deref(), Some("Runbook"));

    w.sim
        .model(|m| m.update_document(&id, Some("Runbook 2"), Some("v2")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("updated")?;
    assert_eq!(
        (row.3.as_deref(), row.4.as_deref()),
        (Some("Runbook 2"), Some("v2"))
    );

    w.sim
        .model(|m| m.move_document(&id, &handbook, None))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("moved")?;
    assert_eq!(row.1, handbook, "a move is metadata of the same row");

    w.sim
        .model(|m| m.delete_document(&id))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("deleted")?;
    assert!(row.6.is_some(), "tombstoned");
    assert_eq!((row.3, row.4), (None, None), "title and text cleared");

    w.sim
        .model(|m| m.restore_document(&id, None))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("restored")?;
    assert_eq!(row.6, None, "a newer version restores it");
    assert_eq!(row.3.as_deref(), Some("Runbook 2"));

    w.sim
        .model(|m| {
            m.delete_document(&id)?;
            m.permanently_delete_document(&id)
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let row = w.document(&w.a, &id).await?.context("gone")?;
    assert!(row.6.is_some(), "permanently deleted stays tombstoned");
    assert_eq!((row.3, row.4), (None, None));

    let mut counts = BTreeMap::new();
    for (ty, _) in w.events(&w.a).await? {
        *counts.entry(ty).or_insert(0) += 1;
    }
    let expected: BTreeMap<String, usize> = [
        (PUBLISHED, 1),
        (UPDATED, 1),
        (MOVED, 1),
        (DELETED, 2),
        (RESTORED, 1),
    ]
    .into_iter()
    .map(|(t, n)| (t.to_owned(), n))
    .collect();
    assert_eq!(counts, expected, "one event per change");
    assert!(w.dead().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn redelivered_and_shuffled_copies_leave_the_in_order_mirror() -> Result<()> {
    let w = World::start().await?;
    let [eng, handbook] = w.collections.clone();
    w.sim.set_delivery_plan(DeliveryPlan {
        copies: 3,
        fresh_copy_ids: true,
        hold: true,
        ..DeliveryPlan::default()
    });
    let changes = w
        .sim
        .model(|m| -> Result<(), vendor_sim::outline::OutlineError> {
            // About 300 changes, each delivered three times.
            for n in 0..44 {
                let home = if n % 2 == 0 { &eng } else { &handbook };
                let other = if n % 2 == 0 { &handbook } else { &eng };
                let id = m.add_document(NewDocument::new(home, &format!("doc {n}")))?;
                for v in 0..3 {
                    m.update_document(&id, None, Some(&format!("text {n}.{v}")))?;
                }
                match n % 4 {
                    // Moved, then edited there.
                    0 => {
                        m.move_document(&id, other, None)?;
                        m.update_document(&id, Some(&format!("moved {n}")), None)?;
                    }
                    // Deleted and left deleted: no older copy may bring it back.
                    1 => m.delete_document(&id)?,
                    // Deleted, restored (newer), edited.
                    2 => {
                        m.delete_document(&id)?;
                        m.restore_document(&id, None)?;
                        m.update_document(&id, None, Some(&format!("back {n}")))?;
                    }
                    // Deleted for good.
                    _ => {
                        m.delete_document(&id)?;
                        m.permanently_delete_document(&id)?;
                    }
                }
            }
            Ok(())
        });
    changes.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let held = w.sim.release(Order::Shuffled(7)).await;
    assert!(
        held >= 300,
        "{held} changes held, each to be delivered three times"
    );
    w.drained().await?;
    assert!(w.dead().await?.is_empty(), "{:?}", w.dead().await?);

    // In-order application leaves what Outline holds: each live document at its last version,
    // each deleted one tombstoned at its deletion, each permanently deleted one tombstoned.
    let rows = w.documents(&w.a).await?;
    assert_eq!(rows.len(), 44);
    let upstream = w.sim.model(|m| {
        m.documents()
            .map(|d| (d.id.clone(), d.clone()))
            .collect::<BTreeMap<_, _>>()
    });
    for (id, collection, parent, title, text, updated_at, deleted_at) in rows {
        match upstream.get(&id) {
            Some(d) if d.deleted_at.is_none() => {
                assert_eq!(deleted_at, None, "{id}: no stale deletion");
                assert_eq!(title.as_deref(), Some(d.title.as_str()), "{id}");
                assert_eq!(text.as_deref(), Some(d.text.as_str()), "{id}");
                assert_eq!(collection, d.collection_id, "{id}");
                assert_eq!(parent, d.parent_document_id, "{id}");
                assert_eq!(updated_at, Some(d.updated_at), "{id}");
            }
            Some(d) => {
                assert_eq!(deleted_at, d.deleted_at, "{id}: dated by its deletion");
                assert_eq!((title, text), (None, None), "{id}: no stale resurrection");
            }
            None => {
                assert!(deleted_at.is_some(), "{id}: permanently deleted");
                assert_eq!((title, text), (None, None), "{id}: no stale resurrection");
            }
        }
    }
    // Every change announced at most once, and a document published at most once (a deletion
    // that arrived before any version leaves nothing to announce for the older versions).
    let events = w.events(&w.a).await?;
    let mut keys: Vec<_> = events.iter().map(|(t, k)| (t, k)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), events.len(), "one event per change");
    let mut published: Vec<&str> = events
        .iter()
        .filter(|(t, _)| t == PUBLISHED)
        .filter_map(|(_, k)| k.split_once(':').map(|(id, _)| id))
        .collect();
    let announced = published.len();
    published.sort();
    published.dedup();
    assert_eq!(published.len(), announced, "published once at most");
    assert!(announced > 0);
    Ok(())
}

#[tokio::test]
async fn a_delivery_naming_another_tenants_subscription_changes_nothing_of_it() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = w.collections.clone();
    let id = w
        .sim
        .model(|m| m.add_document(NewDocument::new(&eng, "Secret plan").text("v1")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let a_rows = w.documents(&w.a).await?;
    let a_events = w.events(&w.a).await?;
    assert_eq!(a_rows.len(), 1);

    // B: its own workspace, Outline team, subscription and endpoint.
    let (b_sim, [b_collection, _]) = common::team().await?;
    let b = common::tenant(&w.env, &w.ingress, &b_sim, w.provider_instance_id).await?;
    b_sim
        .model(|m| m.add_document(NewDocument::new(&b_collection, "B's own")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    b_sim.settle().await;
    w.drained().await?;
    let b_own = w.documents(&b).await?;
    assert_eq!(b_own.len(), 1, "B's own delivery applied");

    // B signs deliveries naming A's subscription and A's document, newer than A's copy.
    let now = time::OffsetDateTime::now_utc();
    let forged = |event: &str, model: serde_json::Value| {
        json!({
            "id": Uuid::new_v4().to_string(),
            "actorId": null,
            "webhookSubscriptionId": w.a.subscription,
            "createdAt": vendor_sim::outline::date(now),
            "event": event,
            "payload": {"id": id, "model": model},
        })
    };
    let doc = json!({
        "id": id, "collectionId": eng, "parentDocumentId": null, "title": "pwned",
        "text": "pwned", "urlId": "x", "createdAt": vendor_sim::outline::date(now),
        "updatedAt": vendor_sim::outline::date(now), "publishedAt": vendor_sim::outline::date(now),
        "archivedAt": null, "deletedAt": null,
    });
    let stored_before = w.stored(&b).await?;
    for body in [
        forged("documents.update", doc.clone()),
        forged("documents.delete", doc.clone()),
    ] {
        // ingress takes on B's endpoint only B's subscription.
        let status = w.post_signed(&b, &body).await?;
        assert!((400..500).contains(&status), "{status}");
    }
    assert_eq!(w.stored(&b).await?, stored_before, "nothing stored");

    // Past ingress (a replay, a stream publisher) the consumer refuses it too: the delivery came
    // through B's endpoint, whose subscription is not the one it names.
    let b_delivery: Uuid = sqlx::query_scalar(
        "SELECT id FROM inbound_message WHERE connection_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(b.connection_id)
    .fetch_one(&w.pool)
    .await?;
    for body in [
        forged("documents.update", doc.clone()),
        forged("documents.delete", doc),
    ] {
        let delivery = WebhookDelivery {
            event: body["event"].as_str().unwrap_or_default().to_owned(),
            workspace_id: Some(b.workspace_id),
            connection_id: Some(b.connection_id),
            delivery_id: Some(b_delivery),
            body_ref: None,
            replay_of: None,
            body: serde_json::to_vec(&body)?,
        };
        let subject =
            lifecycle_core::subject::outline(&b.connection_id.to_string(), &delivery.event)?;
        w.env
            .bus
            .publish_outbox(
                Uuid::now_v7(),
                delivery.outbox_message(subject, Uuid::now_v7().to_string()),
            )
            .await?;
    }
    eventually("B's forged deliveries were not refused", || async {
        let refused = w.refusals(&b).await?;
        Ok((refused.len() >= 2).then_some(refused))
    })
    .await
    .map(|refused| {
        assert!(
            refused.iter().all(|r| r == "foreign_subscription"),
            "{refused:?}"
        )
    })?;
    w.drained().await?;

    assert_eq!(w.documents(&w.a).await?, a_rows, "A's rows unchanged");
    assert_eq!(w.events(&w.a).await?, a_events, "A's events unchanged");
    assert_eq!(w.documents(&b).await?, b_own, "nothing written for B");
    assert_eq!(w.events(&b).await?.len(), 1, "B's own publish only");
    Ok(())
}

#[tokio::test]
async fn a_malformed_delivery_is_refused_and_changes_nothing() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = w.collections.clone();
    let id = w
        .sim
        .model(|m| m.add_document(NewDocument::new(&eng, "Runbook").text("v1")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let rows = w.documents(&w.a).await?;
    let events = w.events(&w.a).await?;

    let now = vendor_sim::outline::date(time::OffsetDateTime::now_utc());
    let envelope = |payload: serde_json::Value| {
        json!({
            "id": Uuid::new_v4().to_string(),
            "actorId": null,
            "webhookSubscriptionId": w.a.subscription,
            "createdAt": now,
            "event": "documents.update",
            "payload": payload,
        })
    };
    let bodies = [
        // No id.
        envelope(json!({"model": {"id": id, "collectionId": eng, "title": "x", "updatedAt": now}})),
        // A model without its version.
        envelope(json!({"id": id, "model": {"id": id, "collectionId": eng, "title": "x"}})),
        // A model that is not the object named.
        envelope(
            json!({"id": id, "model": {"id": "other", "collectionId": eng, "updatedAt": now}}),
        ),
    ];
    for body in &bodies {
        assert_eq!(w.post_signed(&w.a, body).await?, 200, "ingress stores it");
    }
    let dead = eventually("the malformed deliveries are not dead", || async {
        let dead = w.dead().await?;
        Ok((dead.len() >= bodies.len()).then_some(dead))
    })
    .await?;
    assert!(
        dead.iter()
            .all(|r| r.contains("malformed Outline delivery")),
        "{dead:?}"
    );
    w.drained().await?;
    assert_eq!(w.documents(&w.a).await?, rows, "nothing written");
    assert_eq!(w.events(&w.a).await?, events, "nothing announced");
    Ok(())
}

#[tokio::test]
async fn a_collections_deletion_tombstones_it_with_its_documents() -> Result<()> {
    let w = World::start().await?;
    let [eng, handbook] = w.collections.clone();
    let (kept, gone) = w
        .sim
        .model(|m| -> Result<_, vendor_sim::outline::OutlineError> {
            m.rename_collection(&eng, "Engineering 2")?;
            let kept = m.add_document(NewDocument::new(&handbook, "Kept"))?;
            let gone = m.add_document(NewDocument::new(&eng, "Gone"))?;
            Ok((kept, gone))
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let name: Option<String> = sqlx::query_scalar(
        "SELECT name FROM outline_collection WHERE connection_id = $1 AND outline_id = $2",
    )
    .bind(w.a.connection_id)
    .bind(&eng)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(name.as_deref(), Some("Engineering 2"));

    w.sim
        .model(|m| m.delete_collection(&eng))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let deleted: Option<time::OffsetDateTime> = sqlx::query_scalar(
        "SELECT deleted_at FROM outline_collection WHERE connection_id = $1 AND outline_id = $2",
    )
    .bind(w.a.connection_id)
    .bind(&eng)
    .fetch_one(&w.pool)
    .await?;
    assert!(deleted.is_some(), "the collection is tombstoned");
    let gone = w.document(&w.a, &gone).await?.context("gone")?;
    assert!(gone.6.is_some() && gone.3.is_none(), "its document with it");
    let kept = w.document(&w.a, &kept).await?.context("kept")?;
    assert_eq!(kept.6, None, "another collection's document stays");
    assert_eq!(
        w.count(&w.a, outline_mirror::events::COLLECTION_DELETED)
            .await?,
        1
    );
    assert_eq!(w.count(&w.a, DELETED).await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_deletion_dated_past_its_receipt_is_refused_and_changes_nothing() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = w.collections.clone();
    let id = w
        .sim
        .model(|m| m.add_document(NewDocument::new(&eng, "Runbook")))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    let rows = w.documents(&w.a).await?;
    let now = vendor_sim::outline::date(time::OffsetDateTime::now_utc());
    // Its version is now, its deletion in 2099: tombstoned so, it would outdate every version.
    let body = json!({
        "id": Uuid::new_v4().to_string(),
        "actorId": null,
        "webhookSubscriptionId": w.a.subscription,
        "createdAt": now,
        "event": "documents.delete",
        "payload": {"id": id, "model": {
            "id": id, "collectionId": eng, "title": "Runbook", "updatedAt": now,
            "deletedAt": "2099-01-01T00:00:00.000Z",
        }},
    });
    assert_eq!(w.post_signed(&w.a, &body).await?, 200);
    let refused = eventually("the future deletion was not refused", || async {
        let refused = w.refusals(&w.a).await?;
        Ok((!refused.is_empty()).then_some(refused))
    })
    .await?;
    assert_eq!(refused, ["future_time"]);
    w.drained().await?;
    assert_eq!(w.documents(&w.a).await?, rows, "nothing written");
    assert_eq!(w.count(&w.a, DELETED).await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_claim_signed_by_a_tenant_writes_only_what_outline_shows() -> Result<()> {
    let w = World::start().await?;
    let [eng, _] = w.collections.clone();
    let (kept, gone) = w
        .sim
        .model(|m| {
            Ok::<_, vendor_sim::outline::OutlineError>((
                m.add_document(NewDocument::new(&eng, "Secret plan").text("v1"))?,
                m.add_document(NewDocument::new(&eng, "Old notes").text("v1"))?,
            ))
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    w.drained().await?;
    // At Outline, without a delivery: one renamed, the other deleted.
    w.sim
        .model(|m| {
            m.quietly(|m| {
                m.update_document(&kept, Some("Renamed at Outline"), None)?;
                m.delete_document(&gone)
            })
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;

    // The workspace's admin made an endpoint with a secret of their own: what it signs is a
    // claim about the connection's own subscription.
    let token = store::inbound::random_token()?;
    let tenant = common::Tenant {
        subscription: "tenant-made-subscription".to_owned(),
        route: format!("{}/webhooks/outline/{token}", w.ingress.url()),
        secret: store::inbound::random_token()?,
        ..w.a.clone()
    };
    store::inbound::create_endpoint(
        &w.env.db.db,
        &store::secrets::Keyring::parse(&testkit::secret_key())?,
        store::inbound::NewEndpoint {
            workspace_id: w.a.workspace_id,
            connection_id: w.a.connection_id,
            kind: store::entity::ConnectionKind::Outline,
            registration: store::entity::inbound_endpoint::Registration::Registered,
            provider_ref: Some(tenant.subscription.clone()),
            address_token: Some(token),
            tenant_keyed: true,
        },
        tenant.secret.as_bytes(),
    )
    .await?;
    let now = time::OffsetDateTime::now_utc();
    let claim = |event: &str, id: &str| {
        let doc = json!({
            "id": id, "collectionId": eng, "parentDocumentId": null, "title": "pwned",
            "text": "pwned", "urlId": "x", "createdAt": vendor_sim::outline::date(now),
            "updatedAt": vendor_sim::outline::date(now),
            "publishedAt": vendor_sim::outline::date(now), "archivedAt": null, "deletedAt": null,
        });
        json!({
            "id": Uuid::new_v4().to_string(),
            "actorId": null,
            "webhookSubscriptionId": tenant.subscription,
            "createdAt": vendor_sim::outline::date(now),
            "event": event,
            "payload": {"id": id, "model": doc},
        })
    };
    for body in [
        claim("documents.update", &kept),
        claim("documents.delete", &kept),
        claim("documents.update", &gone),
    ] {
        let status = w.post_signed(&tenant, &body).await?;
        assert_eq!(status, 200, "{body}");
    }
    w.drained().await?;

    let kept_row = w.document(&w.a, &kept).await?.context("kept")?;
    assert_eq!(
        (kept_row.3.as_deref(), kept_row.6),
        (Some("Renamed at Outline"), None),
        "Outline's version, never the claim's; a claimed deletion Outline denies changes nothing"
    );
    let gone_row = w.document(&w.a, &gone).await?.context("gone")?;
    assert!(gone_row.6.is_some(), "Outline confirms the deletion");
    let rows = w.documents(&w.a).await?;
    assert!(
        rows.iter()
            .all(|r| r.3.as_deref() != Some("pwned") && r.4.as_deref() != Some("pwned")),
        "nothing of a claim is written"
    );
    // The claims' bodies are not kept (their deliveries' records are).
    let claims: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message m JOIN inbound_endpoint e ON e.id = m.endpoint_id
          WHERE e.tenant_keyed AND m.connection_id = $1",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(claims, 3);
    let bodies: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbound_message_body b JOIN inbound_message m ON m.id = b.message_id
          JOIN inbound_endpoint e ON e.id = m.endpoint_id
         WHERE e.tenant_keyed AND m.connection_id = $1",
    )
    .bind(w.a.connection_id)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(bodies, 0);
    assert!(w.dead().await?.is_empty());
    Ok(())
}
