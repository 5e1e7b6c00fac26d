//! The webhook front half every vendor consumer shares. It takes a delivery as ingress published
//! it, reads its stored body (inline or by reference), resolves the connection named on the
//! message and that connection's provider instance, then hands the decoded payload to the
//! vendor's [`WebhookApply`]. The vendor admits the delivery ([`Webhook::admit`]: the shared
//! `store::admission` entry under the vendor's own rule) inside the transaction that writes;
//! the front half settles what it returns and counts it in `webhooks_total{vendor, event,
//! outcome}`.
//!
//! How a delivery settles:
//! - applied, unchanged, ignored (an event the vendor does not act on, or a connection that is
//!   gone or of another kind: nothing of it may be written): acknowledged;
//! - out of the delivering connection's scope: acknowledged, nothing written, counted in
//!   `webhooks_rejected_total{vendor, reason="out_of_scope"}`;
//! - invalid (malformed payload, no connection header, a body no longer stored): dead message;
//! - database failure, or a vendor API the connection cannot reach now: redelivered with backoff.

pub mod follow;
pub mod hint;

use std::future::Future;

use bus::consumer::{Delivery, Handler, HandlerError, Settle, headers};
use bus::contracts::WebhookDelivery;
use lifecycle_core::forward::{FutureTime, TimeBound};
use sqlx::{PgConnection, PgPool};
use store::admission::{self, AdmissionRule, Admitted, Origin, Refusal};
use store::entity::ConnectionKind;
use time::OffsetDateTime;
use tracing::Instrument as _;
use uuid::Uuid;

/// What applying a delivery came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The mirror changed (or an event was recorded).
    Applied,
    /// Older than the mirror, or already there: nothing changed.
    Unchanged,
    /// Not for us: an event or action we do not act on.
    Ignored,
    /// Refused with its reason recorded on the connection's activity (a fact dated past its
    /// receipt): acknowledged, nothing written.
    Refused,
}

impl Outcome {
    /// `Applied` when the delivery changed the mirror or recorded an event, else `Unchanged`.
    pub fn of_change(changed: bool) -> Self {
        if changed {
            Outcome::Applied
        } else {
            Outcome::Unchanged
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Unchanged => "unchanged",
            Outcome::Ignored => "ignored",
            Outcome::Refused => "refused",
        }
    }

    fn settle(self) -> Settle {
        match self {
            Outcome::Applied => Settle::Applied("webhook"),
            Outcome::Unchanged => Settle::Unchanged("webhook"),
            Outcome::Ignored => Settle::Ignored("webhook"),
            Outcome::Refused => Settle::Ignored("webhook refused"),
        }
    }
}

/// Why a delivery was not applied.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Can never succeed (malformed payload, missing routing header, body no longer stored):
    /// recorded dead.
    #[error("{0}")]
    Invalid(String),
    /// May succeed later (database unavailable): redelivered with backoff.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The same, through sea-orm.
    #[error("database: {0}")]
    Store(#[from] sea_orm::DbErr),
    /// Needs the vendor's API, which the connection cannot reach now (its reader cannot be
    /// built: credentials, connection state): redelivered with backoff.
    #[error("vendor unavailable: {0}")]
    Unavailable(String),
    /// Outside what the delivering connection verifiably covers: acknowledged, counted, and
    /// nothing written.
    #[error("out of scope: {0}")]
    OutOfScope(Refusal),
}

/// A delivery as a vendor's [`WebhookApply`] sees it.
pub struct Webhook<'a> {
    /// The vendor's event name (e.g. `X-GitHub-Event`).
    pub event: &'a str,
    pub body: &'a [u8],
    /// The connection whose endpoint received it.
    pub connection_id: Uuid,
    /// That connection and ingress's record of the delivery: what admission decides on.
    pub origin: Origin,
    /// The provider instance of that connection.
    pub provider_instance_id: Uuid,
    /// When JetStream stored it (the NATS server's clock): the date of dated snapshots.
    pub received_at: OffsetDateTime,
    /// Whether its signature proves it came from the vendor, or only that a tenant sent it.
    pub claim: Claim,
    /// The message as the bus delivered it.
    pub delivery: &'a Delivery,
}

/// What a delivery's signature proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Signed by a secret no tenant knows (the App's, set by the operator, or one forgesync
    /// generated for a hook it created): the vendor sent it, and its payload may be written.
    Fact,
    /// Signed by a secret a tenant chose or was shown: anyone in that workspace could have
    /// written it. Its payload only names what to re-read; see [`hint`].
    Hint,
}

impl Webhook<'_> {
    /// Whether the payload is only a claim: the vendor must confirm what it names before
    /// anything is written ([`hint::Confirmations`]).
    pub fn is_hint(&self) -> bool {
        self.claim == Claim::Hint
    }

    /// Admits the delivery for `scope` under the vendor's rule (see [`store::admission`]) in
    /// the caller's transaction, which then holds the connection row until it commits. Call it
    /// before anything the payload names is read or written; a refusal is
    /// [`WebhookError::OutOfScope`].
    pub async fn admit<R: AdmissionRule>(
        &self,
        conn: &mut PgConnection,
        scope: R,
    ) -> Result<Admitted, WebhookError> {
        admission::admit(conn, &self.origin, scope)
            .await?
            .map_err(WebhookError::OutOfScope)
    }

    /// Erases this delivery everywhere it is kept (its raw body and headers, its copies in the
    /// streams, the one in hand included), for a vendor that must not keep what it refused (a
    /// message from a channel without consent). Idempotent; call it outside the writing
    /// transaction.
    pub async fn erase(&self) -> Result<(), WebhookError> {
        self.delivery
            .erase()
            .await
            .map(|_| ())
            .map_err(|e| WebhookError::Unavailable(format!("erasing the delivery: {e}")))
    }
}

/// Parses a payload, or says which event it failed to be.
pub fn parse<'a, T: serde::Deserialize<'a>>(hook: &Webhook<'a>) -> Result<T, WebhookError> {
    serde_json::from_slice(hook.body)
        .map_err(|e| WebhookError::Invalid(format!("malformed {} payload: {e}", hook.event)))
}

/// What a vendor implements to consume its webhooks: decode a payload, then apply it.
pub trait WebhookApply: Send + Sync + 'static {
    /// The connections whose deliveries this applies; also the `vendor` label of the metrics.
    const KIND: ConnectionKind;
    /// A payload decoded for its event.
    type Payload: Send;

    /// Decodes the delivery's body for its event (with [`parse`]); `None` for an event the
    /// vendor does not act on. A malformed body is [`WebhookError::Invalid`].
    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<Self::Payload>, WebhookError>;

    /// Applies a decoded payload in a transaction it opens, admitting the delivery
    /// ([`Webhook::admit`]) in that transaction before it writes. A vendor that must read the
    /// vendor's API first admits before the read and again in the transaction that writes.
    fn apply(
        &self,
        hook: &Webhook<'_>,
        payload: Self::Payload,
    ) -> impl Future<Output = Result<Outcome, WebhookError>> + Send;
}

/// The front half: consumes a vendor's webhook deliveries and settles what its
/// [`WebhookApply`] returns.
pub struct WebhookConsumer<A> {
    pool: PgPool,
    vendor: A,
    clock_skew: std::time::Duration,
}

impl<A: WebhookApply> WebhookConsumer<A> {
    /// A consumer allowing the default clock skew.
    pub fn new(pool: PgPool, vendor: A) -> Self {
        WebhookConsumer {
            pool,
            vendor,
            clock_skew: lifecycle_core::forward::DEFAULT_CLOCK_SKEW,
        }
    }

    /// The same consumer refusing vendor times more than `skew` past a delivery's receipt.
    pub fn with_clock_skew(self, skew: std::time::Duration) -> Self {
        WebhookConsumer {
            clock_skew: skew,
            ..self
        }
    }

    /// Sets `known` once the vendor decoded the delivery's event (one it acts on).
    async fn consume(
        &self,
        message: WebhookDelivery,
        delivery: &Delivery,
        known: &mut bool,
    ) -> Result<Outcome, WebhookError> {
        let connection_header = message.connection_id;
        let delivery_id = message.delivery_id;
        let event = message.event.clone();
        let Some(body) = body(&self.pool, message, delivery).await? else {
            // Erased with its connection, or past retention: it can never be applied.
            return Err(WebhookError::Invalid(
                "the delivery's body is no longer stored".into(),
            ));
        };
        let connection_id = connection_header
            .ok_or_else(|| WebhookError::Invalid("no connection header".into()))?;
        let Some((provider_instance_id, claim)) =
            provider_instance(&self.pool, connection_id, delivery_id, A::KIND).await?
        else {
            // The connection is gone (erased) or not this vendor's: nothing of it may be written.
            return Ok(Outcome::Ignored);
        };
        let hook = Webhook {
            event: &event,
            body: &body,
            connection_id,
            origin: Origin {
                connection_id,
                delivery_id,
            },
            provider_instance_id,
            received_at: delivery.stored_at(),
            claim,
            delivery,
        };
        // No row may be dated past when its delivery arrived (plus the skew allowed): forward-only
        // writes would then refuse every genuine update after it. Checked for every vendor before
        // its decode, so no writer can forget it. A hint's dates are never written (the vendor's
        // answer is, bounded by its read), so a hint is confirmed whatever it claims.
        let bound = TimeBound::after(hook.received_at, self.clock_skew);
        // Refused with its reason on the connection's activity and acknowledged: the vendor's
        // clock is wrong, not the message, so replaying it would be refused again; the next
        // reconcile writes the item once the vendor dates it sanely.
        if let (Claim::Fact, Some(future)) = (claim, future_time(&body, bound)) {
            metrics::counter!("webhooks_rejected_total", "vendor" => A::KIND.as_str(), "reason" => "future_time")
                .increment(1);
            tracing::warn!(vendor = A::KIND.as_str(), %connection_id, %event, reason = %future,
                "a delivery dated past its receipt; nothing written");
            store::activity::record_for_connection(
                &self.pool,
                connection_id,
                "webhook_future_time",
                serde_json::json!({
                    "event": event,
                    "delivery_id": delivery_id,
                    "reason": future.to_string(),
                }),
            )
            .await?;
            return Ok(Outcome::Refused);
        }
        match self.vendor.decode(&hook)? {
            Some(payload) => {
                *known = true;
                // The mirror write: admission and the vendor's transaction.
                let span = tracing::info_span!(
                    "mirror write",
                    vendor = A::KIND.as_str(),
                    event = %event,
                    outcome = tracing::field::Empty,
                    otel.status_code = tracing::field::Empty,
                );
                let applied = self
                    .vendor
                    .apply(&hook, payload)
                    .instrument(span.clone())
                    .await;
                match &applied {
                    Ok(outcome) => span.record("outcome", outcome.as_str()),
                    Err(_) => span.record("otel.status_code", "ERROR"),
                };
                applied
            }
            None => Ok(Outcome::Ignored),
        }
    }
}

/// The longest one webhook handling may take (a vendor call's deadline is 60 s; a handler makes
/// at most a few): past it the handling is dropped and the delivery tried again later, so a
/// tenant's slow server cannot hold the webhook workers every tenant shares.
pub const HANDLER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(90);

/// The keys under which vendors carry the times that version a record or date its lifecycle
/// (GitHub and GitLab in snake case, Outline in camel case). Future dates of other kinds (a
/// milestone's due date) are legitimate and not among them.
const VERSION_TIME_KEYS: &[&str] = &[
    "updated_at",
    "updatedAt",
    "created_at",
    "createdAt",
    "closed_at",
    "closedAt",
    "merged_at",
    "mergedAt",
    "submitted_at",
    "submittedAt",
    "last_edited_at",
];

/// The first version time in a JSON `body` past `bound`; `None` when none is (or the body is no
/// JSON: the vendor's decode refuses that).
fn future_time(body: &[u8], bound: TimeBound) -> Option<FutureTime> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut pending = vec![&value];
    while let Some(v) = pending.pop() {
        match v {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    if VERSION_TIME_KEYS.contains(&key.as_str())
                        && let Some(at) = v.as_str().and_then(vendor_time)
                        && let Err(future) = bound.check(at)
                    {
                        return Some(future);
                    }
                    pending.push(v);
                }
            }
            serde_json::Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    None
}

/// A vendor's time text: RFC 3339, or GitLab's `2024-01-02 03:04:05 UTC` and
/// `2024-01-02 03:04:05 +0000`.
fn vendor_time(text: &str) -> Option<OffsetDateTime> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Some(at);
    }
    let utc =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    if let Ok(at) = time::PrimitiveDateTime::parse(text, &utc) {
        return Some(at.assume_utc());
    }
    let offset = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]"
    );
    OffsetDateTime::parse(text, &offset).ok()
}

/// The delivery's body: inline, or by reference to the stored raw body (`None`: erased).
async fn body(
    pool: &PgPool,
    message: WebhookDelivery,
    delivery: &Delivery,
) -> Result<Option<Vec<u8>>, WebhookError> {
    let Some(reference) = delivery.header(store::headers::BODY_REF) else {
        return Ok(Some(message.body));
    };
    let message_id = message
        .body_ref
        .ok_or_else(|| WebhookError::Invalid(format!("malformed body reference {reference:?}")))?;
    Ok(store::inbound::stored_body(pool, message_id).await?)
}

/// The provider instance of `connection_id` when it is a connection of `kind`, and what the
/// delivery's signature proves, as ingress recorded it when it verified the delivery. A delivery
/// ingress has no record of (none named, or another connection's) is a claim: nothing on the
/// message itself can make it a fact.
async fn provider_instance(
    pool: &PgPool,
    connection_id: Uuid,
    delivery_id: Option<Uuid>,
    kind: ConnectionKind,
) -> Result<Option<(Uuid, Claim)>, sqlx::Error> {
    let row: Option<(Uuid, Option<bool>)> = sqlx::query_as(
        "SELECT c.provider_instance_id, \
                (SELECT m.tenant_signed FROM inbound_message m \
                  WHERE m.id = $3 AND m.connection_id = c.id) \
           FROM connection c WHERE c.id = $1 AND c.kind = $2",
    )
    .bind(connection_id)
    .bind(kind.as_str())
    .bind(delivery_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id, tenant_signed)| {
        let claim = match tenant_signed {
            Some(false) => Claim::Fact,
            Some(true) | None => Claim::Hint,
        };
        (id, claim)
    }))
}

impl<A: WebhookApply> Handler for WebhookConsumer<A> {
    type Message = WebhookDelivery;

    async fn handle(
        &self,
        message: WebhookDelivery,
        delivery: &Delivery,
    ) -> Result<Settle, HandlerError> {
        let vendor = A::KIND.as_str();
        let event = message.event.clone();
        let mut known = false;
        let result = self.consume(message, delivery, &mut known).await;
        // Any signed sender names the event: only events the vendor acts on become label
        // values, the rest are `other`, so no sender can grow the series without bound.
        let event_label = if known { event.as_str() } else { "other" };
        let counted = |outcome: &'static str| {
            metrics::counter!("webhooks_total", "vendor" => vendor, "event" => event_label.to_owned(), "outcome" => outcome)
                .increment(1);
        };
        match result {
            Ok(outcome) => {
                counted(outcome.as_str());
                tracing::debug!(vendor, %event, outcome = outcome.as_str(), "webhook handled");
                Ok(outcome.settle())
            }
            Err(WebhookError::Invalid(reason)) => {
                counted("invalid");
                Err(HandlerError::Permanent(reason))
            }
            Err(WebhookError::OutOfScope(refusal)) => {
                // Never retried: what the connection covers decides, and it was asked.
                metrics::counter!("webhooks_rejected_total", "vendor" => vendor, "reason" => "out_of_scope")
                    .increment(1);
                counted("out_of_scope");
                tracing::info!(
                    vendor,
                    %event,
                    connection_id = delivery.header(headers::CONNECTION).unwrap_or_default(),
                    delivery_id = delivery.header(headers::DELIVERY).unwrap_or_default(),
                    reason = refusal.as_str(),
                    "webhook out of the connection's scope; acknowledged, nothing written"
                );
                Ok(Settle::Ignored("out of the connection's scope"))
            }
            Err(
                e @ (WebhookError::Database(_)
                | WebhookError::Store(_)
                | WebhookError::Unavailable(_)),
            ) => Err(HandlerError::transient(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_time_past_the_receipt_is_found_wherever_it_sits() {
        let received = time::macros::datetime!(2026-12-03 12:00 UTC);
        let bound = TimeBound::after(received, lifecycle_core::forward::DEFAULT_CLOCK_SKEW);
        let body = |v: serde_json::Value| serde_json::to_vec(&v).unwrap();
        // GitHub's, nested; GitLab's two text forms; Outline's camel case.
        for future in [
            serde_json::json!({"issue": {"updated_at": "2099-01-01T00:00:00Z"}}),
            serde_json::json!({"object_attributes": {"updated_at": "2099-01-01 00:00:00 UTC"}}),
            serde_json::json!({"commits": [{"created_at": "2099-01-01 00:00:00 +0000"}]}),
            serde_json::json!({"payload": {"model": {"updatedAt": "2099-01-01T00:00:00.000Z"}}}),
        ] {
            let found = future_time(&body(future.clone()), bound);
            assert!(found.is_some_and(|f| f.at.year() == 2099), "{future}");
        }
        // Times within the skew, due dates, unparsable text and non-JSON pass.
        for fine in [
            serde_json::json!({"issue": {"updated_at": "2026-12-03T12:04:00Z"}}),
            serde_json::json!({"milestone": {"due_on": "2099-01-01T00:00:00Z"}}),
            serde_json::json!({"issue": {"updated_at": "tomorrow"}}),
            serde_json::json!({"repository": {"created_at": 4102444800_u64}}),
        ] {
            assert_eq!(future_time(&body(fine.clone()), bound), None, "{fine}");
        }
        assert_eq!(future_time(b"not json", bound), None);
    }
}
