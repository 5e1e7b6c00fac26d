//! Outline's webhook deliveries, on the fixed consumer `outline-sync-events` (every Outline
//! subject: each is routed by the connection whose endpoint received it). A delivery writes only
//! when it names the connection's own subscription (`outline_mirror::admission`), in the one
//! transaction that admits it, writes the row forward-only and records the change's one event.
//!
//! A document's versions (`documents.create`, `.update`, `.move`, `.restore`, ...) are written by
//! `updatedAt`; `documents.delete` tombstones it dated by its `deletedAt`, and
//! `documents.permanent_delete` (no model) by the delivery's `createdAt`. Collections are written
//! the same way, and `collections.delete` tombstones a collection with its documents. Any other
//! event is acknowledged and counted as ignored.
//!
//! A delivery signed by a secret a tenant chose or was shown is a claim, never a fact: once
//! admitted, nothing of it is written; the document or collection it names is read from Outline
//! with the connection's own token (`documents.info`, `collections.info`, coalesced per item by
//! `sync_engine::webhook::hint`), and what Outline shows goes through the same forward-only
//! writes; not found tombstones what the connection holds of it, as a reconcile's confirmation
//! would. A failed read writes nothing (`hint_unconfirmed`). The claim's body is erased.

use lifecycle_core::Timestamp;
use lifecycle_core::forward::TimeBound;
use outline_mirror::OutlineConnection;
use outline_mirror::admission::Subscription;
use outline_mirror::collection::CollectionPayload;
use outline_mirror::document::DocumentPayload;
use outline_mirror::events;
use sea_orm::EntityTrait as _;
use serde::Deserialize;
use serde_json::Value;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use sync_engine::webhook::hint::{Confirmation, Confirmations};
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::source::ClientFactory;
use crate::sync::{collection_payload, document_payload};

/// The events that carry a document's version as its model.
const DOCUMENT_VERSIONS: &[&str] = &[
    "documents.create",
    "documents.publish",
    "documents.update",
    "documents.move",
    "documents.archive",
    "documents.unarchive",
    "documents.restore",
    "documents.title_change",
];

/// A decoded delivery: what it changes, and the subscription it names.
#[derive(Debug)]
pub struct Payload {
    /// `webhookSubscriptionId`: admission checks it is the connection's own.
    pub subscription: String,
    pub change: Change,
}

/// What a delivery changes.
#[derive(Debug)]
pub enum Change {
    /// A document's version.
    Document(Box<DocumentPayload>),
    /// A document deleted at `at`; its collection when the delivery names it (a document never
    /// held then keeps an empty tombstone, so a late older version never inserts it).
    DocumentDeleted {
        outline_id: String,
        collection_outline_id: Option<String>,
        at: Timestamp,
    },
    /// A collection's version.
    Collection(CollectionPayload),
    /// A collection deleted at `at`, its documents with it.
    CollectionDeleted { outline_id: String, at: Timestamp },
}

impl Change {
    /// The deletion date a delivery names outside the version keys the front half bounds.
    fn deleted_at(&self) -> Option<Timestamp> {
        match self {
            Change::Document(d) => d.deleted_at,
            Change::Collection(c) => c.deleted_at,
            Change::DocumentDeleted { at, .. } | Change::CollectionDeleted { at, .. } => Some(*at),
        }
    }
}

/// The delivery body Outline POSTs (`WebhookDelivery` in `schemas/outline.json`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delivery {
    webhook_subscription_id: String,
    #[serde(with = "time::serde::rfc3339")]
    created_at: Timestamp,
    event: String,
    payload: DeliveryPayload,
}

#[derive(Deserialize)]
struct DeliveryPayload {
    id: Option<String>,
    #[serde(default)]
    model: Option<Value>,
}

/// A document as a delivery's model carries it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocumentModel {
    id: String,
    collection_id: Option<String>,
    parent_document_id: Option<String>,
    title: Option<String>,
    text: Option<String>,
    url_id: Option<String>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    created_at: Option<Timestamp>,
    #[serde(with = "time::serde::rfc3339")]
    updated_at: Timestamp,
    #[serde(default, with = "time::serde::rfc3339::option")]
    published_at: Option<Timestamp>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    archived_at: Option<Timestamp>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    deleted_at: Option<Timestamp>,
}

/// A collection as a delivery's model carries it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CollectionModel {
    id: String,
    name: Option<String>,
    url_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    updated_at: Timestamp,
    #[serde(default, with = "time::serde::rfc3339::option")]
    deleted_at: Option<Timestamp>,
}

fn invalid(e: impl std::fmt::Display) -> WebhookError {
    WebhookError::Invalid(format!("malformed Outline delivery: {e}"))
}

/// The model of the delivery's object `id`, decoded as `T`; `None` when the delivery has none.
fn model<T: serde::de::DeserializeOwned>(
    payload: &DeliveryPayload,
    id: &str,
    model_id: impl Fn(&T) -> &str,
) -> Result<Option<T>, WebhookError> {
    let Some(raw) = payload.model.clone().filter(|m| !m.is_null()) else {
        return Ok(None);
    };
    let model: T = serde_json::from_value(raw).map_err(invalid)?;
    // The model must be the object the delivery names.
    if model_id(&model) != id {
        return Err(invalid("the model is not the object the payload names"));
    }
    Ok(Some(model))
}

/// Outline's webhook side.
pub struct OutlineWebhooks {
    pub pool: PgPool,
    pub clock_skew: std::time::Duration,
    /// Builds the connection's client for the reads that confirm a tenant's claim.
    pub factory: ClientFactory,
    pub confirmations: Confirmations,
}

/// What Outline shows of a claim's object.
enum Shown {
    Document(Box<outline_client::types::Document>),
    Collection(Box<outline_client::types::Collection>),
    /// Not found for the connection's token.
    Nothing,
}

/// What a claim names, to be read from Outline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Document,
    Collection,
}

impl Change {
    /// The object a delivery names, and what it is.
    fn named(&self) -> (&str, Named) {
        match self {
            Change::Document(d) => (&d.outline_id, Named::Document),
            Change::DocumentDeleted { outline_id, .. } => (outline_id, Named::Document),
            Change::Collection(c) => (&c.outline_id, Named::Collection),
            Change::CollectionDeleted { outline_id, .. } => (outline_id, Named::Collection),
        }
    }
}

impl WebhookApply for OutlineWebhooks {
    const KIND: ConnectionKind = ConnectionKind::Outline;
    type Payload = Payload;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<Payload>, WebhookError> {
        let delivery: Delivery = serde_json::from_slice(hook.body).map_err(invalid)?;
        let id = delivery
            .payload
            .id
            .clone()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| invalid("the payload names no object id"))?;
        let payload = &delivery.payload;
        let event = delivery.event.as_str();
        let change = if DOCUMENT_VERSIONS.contains(&event) {
            let d = model::<DocumentModel>(payload, &id, |d| &d.id)?
                .ok_or_else(|| invalid(format!("{event} without its document")))?;
            // A document outside any collection (a private draft) is not mirrored.
            let Some(collection) = d.collection_id else {
                return Ok(None);
            };
            Change::Document(Box::new(DocumentPayload {
                outline_id: d.id,
                collection_outline_id: collection,
                parent_outline_id: d.parent_document_id,
                title: d.title,
                text: d.text,
                url_id: d.url_id,
                created_at: d.created_at,
                updated_at: d.updated_at,
                published_at: d.published_at,
                archived_at: d.archived_at,
                deleted_at: d.deleted_at,
            }))
        } else if event == "documents.delete" || event == "documents.permanent_delete" {
            let d = model::<DocumentModel>(payload, &id, |d| &d.id)?;
            // Dated by the document's deletion when the model says it, else by the delivery.
            let at = d
                .as_ref()
                .and_then(|d| d.deleted_at)
                .unwrap_or(delivery.created_at);
            Change::DocumentDeleted {
                outline_id: id,
                collection_outline_id: d.and_then(|d| d.collection_id),
                at,
            }
        } else if event == "collections.create" || event == "collections.update" {
            let c = model::<CollectionModel>(payload, &id, |c| &c.id)?
                .ok_or_else(|| invalid(format!("{event} without its collection")))?;
            Change::Collection(CollectionPayload {
                outline_id: c.id,
                name: c.name,
                url_id: c.url_id,
                updated_at: c.updated_at,
                deleted_at: c.deleted_at,
            })
        } else if event == "collections.delete" {
            let c = model::<CollectionModel>(payload, &id, |c| &c.id)?;
            let at = c.and_then(|c| c.deleted_at).unwrap_or(delivery.created_at);
            Change::CollectionDeleted { outline_id: id, at }
        } else {
            return Ok(None);
        };
        Ok(Some(Payload {
            subscription: delivery.webhook_subscription_id,
            change,
        }))
    }

    async fn apply(&self, hook: &Webhook<'_>, payload: Payload) -> Result<Outcome, WebhookError> {
        // A deletion dated past its receipt would outdate every genuine version after it; the
        // front half bounds the version keys only.
        let bound = TimeBound::after(hook.received_at, self.clock_skew);
        if let Some(Err(future)) = payload.change.deleted_at().map(|at| bound.check(at)) {
            return self.refused(hook, "future_time", future.to_string()).await;
        }
        let mut txn = self.pool.begin().await?;
        let admitted = hook
            .admit(
                &mut txn,
                Subscription {
                    id: &payload.subscription,
                },
            )
            .await;
        if let Err(WebhookError::OutOfScope(refusal)) = &admitted {
            txn.rollback().await?;
            self.refused(hook, refusal.as_str(), refusal.to_string())
                .await?;
            return Err(WebhookError::OutOfScope(*refusal));
        }
        admitted?;
        if hook.is_hint() {
            // A tenant's signature is a claim: admitted, nothing of it is written; Outline is
            // read instead. Nothing is held while Outline answers.
            txn.rollback().await?;
            let outcome = self.confirm(hook, &payload).await;
            // What a tenant claimed is never kept; a hint handed back to be tried again keeps
            // its body until then.
            if matches!(
                outcome,
                Ok(_) | Err(WebhookError::OutOfScope(_) | WebhookError::Invalid(_))
            ) {
                hook.erase().await?;
            }
            return outcome;
        }
        let Some(connection) = OutlineConnection::load(&mut *txn, hook.connection_id).await? else {
            return Ok(Outcome::Ignored);
        };
        let changed = match payload.change {
            Change::Document(d) => {
                let written = outline_mirror::apply_document(&mut txn, &connection, &d).await?;
                events::document(&mut txn, &connection, &written).await?;
                written.document().is_some()
            }
            Change::DocumentDeleted {
                outline_id,
                collection_outline_id,
                at,
            } => {
                let written = outline_mirror::tombstone_document(
                    &mut txn,
                    &connection,
                    &outline_id,
                    at,
                    collection_outline_id.as_deref(),
                )
                .await?;
                events::document(&mut txn, &connection, &written).await?;
                written.document().is_some()
            }
            Change::Collection(c) => {
                let written = outline_mirror::apply_collection(&mut txn, &connection, &c).await?;
                events::collection(&mut txn, &connection, &written).await?;
                written != outline_mirror::collection::CollectionWritten::Unchanged
            }
            Change::CollectionDeleted { outline_id, at } => {
                let written =
                    outline_mirror::tombstone_collection(&mut txn, &connection, &outline_id, at)
                        .await?;
                events::collection(&mut txn, &connection, &written).await?;
                written != outline_mirror::collection::CollectionWritten::Unchanged
            }
        };
        txn.commit().await?;
        Ok(Outcome::of_change(changed))
    }
}

impl OutlineWebhooks {
    /// A claim: the object it names as Outline shows it to the connection's token, written as
    /// a delivery from Outline would be (spec: a tenant's signature is a claim, never a fact).
    async fn confirm(
        &self,
        hook: &Webhook<'_>,
        payload: &Payload,
    ) -> Result<Outcome, WebhookError> {
        let (id, named) = payload.change.named();
        let key = format!("{}:{named:?}:{id}", hook.connection_id);
        self.confirmations
            .confirm(&self.pool, hook, key, || async {
                let read_at = OffsetDateTime::now_utc();
                let shown = match self.read(hook, id, named).await {
                    Ok(shown) => shown,
                    Err(reason) => return Ok(Confirmation::Unconfirmed(reason)),
                };
                // What Outline shows is written forward, under the same admission.
                let mut txn = self.pool.begin().await?;
                hook.admit(
                    &mut txn,
                    Subscription {
                        id: &payload.subscription,
                    },
                )
                .await?;
                let Some(connection) =
                    OutlineConnection::load(&mut *txn, hook.connection_id).await?
                else {
                    return Ok(Confirmation::Written(Outcome::Ignored));
                };
                let bound = TimeBound::after(read_at, self.clock_skew);
                let changed = match shown {
                    Shown::Document(d) => {
                        let Some(p) = document_payload(&d) else {
                            return Ok(Confirmation::Unconfirmed(
                                "Outline shows the document outside any collection, or undated"
                                    .into(),
                            ));
                        };
                        if let Err(future) = bound.check(p.updated_at) {
                            return Ok(Confirmation::Unconfirmed(future.to_string()));
                        }
                        let written =
                            outline_mirror::apply_document(&mut txn, &connection, &p).await?;
                        events::document(&mut txn, &connection, &written).await?;
                        written.document().is_some()
                    }
                    Shown::Collection(c) => {
                        let Some(p) = collection_payload(&c) else {
                            return Ok(Confirmation::Unconfirmed(
                                "Outline shows the collection undated".into(),
                            ));
                        };
                        if let Err(future) = bound.check(p.updated_at) {
                            return Ok(Confirmation::Unconfirmed(future.to_string()));
                        }
                        let written =
                            outline_mirror::apply_collection(&mut txn, &connection, &p).await?;
                        events::collection(&mut txn, &connection, &written).await?;
                        written != outline_mirror::collection::CollectionWritten::Unchanged
                    }
                    // Not found: gone for this token, as a reconcile's confirmation would judge
                    // it; only what the connection holds is tombstoned.
                    Shown::Nothing => match named {
                        Named::Document => {
                            let written = outline_mirror::tombstone_document(
                                &mut txn,
                                &connection,
                                id,
                                read_at,
                                None,
                            )
                            .await?;
                            events::document(&mut txn, &connection, &written).await?;
                            written.document().is_some()
                        }
                        Named::Collection => {
                            let written = outline_mirror::tombstone_collection(
                                &mut txn,
                                &connection,
                                id,
                                read_at,
                            )
                            .await?;
                            events::collection(&mut txn, &connection, &written).await?;
                            written != outline_mirror::collection::CollectionWritten::Unchanged
                        }
                    },
                };
                txn.commit().await?;
                Ok(Confirmation::Written(Outcome::of_change(changed)))
            })
            .await
    }

    /// The object `id` as Outline shows it to the delivering connection's token; a failed read
    /// is its reason.
    async fn read(&self, hook: &Webhook<'_>, id: &str, named: Named) -> Result<Shown, String> {
        let uuid: Uuid = id
            .parse()
            .map_err(|_| format!("{id:?} is not an Outline id"))?;
        let conn = store::entity::connection::Entity::find_by_id(hook.connection_id)
            .one(&self.factory.db)
            .await
            .map_err(|e| format!("loading the connection: {e}"))?
            .ok_or_else(|| "the connection is gone".to_owned())?;
        let client = self
            .factory
            .client(&conn)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let shown = match named {
            Named::Document => client
                .documents_info(uuid)
                .await
                .map(|d| Shown::Document(Box::new(d))),
            Named::Collection => client
                .collections_info(uuid)
                .await
                .map(|c| Shown::Collection(Box::new(c))),
        };
        match shown {
            Ok(shown) => Ok(shown),
            Err(e) if e.is_not_found() => Ok(Shown::Nothing),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Records why a delivery was refused on the connection's activity (nothing of it written).
    async fn refused(
        &self,
        hook: &Webhook<'_>,
        reason: &str,
        detail: String,
    ) -> Result<Outcome, WebhookError> {
        tracing::info!(connection_id = %hook.connection_id, event = hook.event,
            delivery_id = ?hook.origin.delivery_id, %reason, "Outline delivery refused; nothing written");
        store::activity::record_for_connection(
            &self.pool,
            hook.connection_id,
            "outline_delivery_refused",
            serde_json::json!({
                "event": hook.event,
                "delivery_id": hook.origin.delivery_id,
                "reason": reason,
                "detail": detail,
            }),
        )
        .await?;
        Ok(Outcome::Refused)
    }
}
