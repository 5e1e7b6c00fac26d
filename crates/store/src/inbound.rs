//! Webhook ingress records, write side: endpoints and their secret rotation, and the one
//! transaction that makes a delivery durable (raw body, message, dedup keys and its dispatch
//! record in the outbox), plus retention and erasure of raw bodies, by connection or of one
//! delivery.

use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DbBackend, DbErr, EntityTrait, Statement,
};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::contracts::WebhookDelivery;
use crate::entity::inbound_endpoint::{self, EndpointStatus, Registration};
use crate::entity::{ConnectionKind, inbound_message, inbound_message_body};
use crate::outbox::{self, OutboxMessage};
use crate::secrets::{self, Keyring, SecretError};

/// Header naming the inbound message a published webhook came from.
pub const DELIVERY_HEADER: &str = crate::headers::DELIVERY;
/// Header set when the body was too large to publish: read it from `inbound_message_body`.
pub const BODY_REF_HEADER: &str = crate::headers::BODY_REF;
/// Header naming the vendor event (`push`, `merge_request`, `message`, `documents.update`).
pub const EVENT_HEADER: &str = crate::headers::EVENT;
/// Header set on an explicit replay: the message replayed.
pub const REPLAY_OF_HEADER: &str = crate::headers::REPLAY_OF;

/// Hex SHA-256 of `bytes`: body digests and GitLab token lookups.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The endpoint a delivery was accepted on (the ids every record carries).
#[derive(Debug, Clone, Copy)]
pub struct EndpointIds {
    pub endpoint_id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub kind: ConnectionKind,
}

/// How a delivery is deduplicated.
#[derive(Debug, Clone)]
pub enum Dedup {
    /// The vendor's event id (kept forever) and the body digest (kept for `digest_window`), taken
    /// only while the endpoint is still open: enabled, its connection not disconnected, and the
    /// secret named `verified_by` (when the delivery was verified by one) still current, or
    /// previous inside its rotation window. The check and the keys are one statement, so a
    /// delivery verified against an endpoint read earlier (or cached) is stored exactly when the
    /// endpoint still accepts it.
    Keys {
        event_id: Option<String>,
        digest_window: Duration,
        verified_by: Option<String>,
    },
    /// An explicit replay of an earlier message: no dedup, and the replay is recorded. It is a
    /// claim exactly when the original was (`tenant_signed`).
    Replay { of: Uuid, tenant_signed: bool },
}

/// A verified delivery, ready to be made durable.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub endpoint: EndpointIds,
    pub verification: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub event: String,
    pub subject: String,
    pub dedup: Dedup,
    /// How long the raw body is kept.
    pub retention: Duration,
    /// Bodies larger than this are published as a reference, not inline.
    pub inline_body_max: usize,
    /// How long relays leave the dispatch record to the caller's inline publish.
    pub relay_hold: Duration,
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Stored; the outbox row will publish `msg_id` on `subject`.
    Accepted(Accepted),
    /// The endpoint already accepted this event id or, within the window, this body.
    Duplicate,
    /// The endpoint no longer accepts deliveries verified this way (disabled, disconnected, or
    /// the secret rotated out) since the caller read it. Nothing was written.
    EndpointClosed,
}

/// A stored message and its dispatch record.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub message_id: Uuid,
    pub outbox_id: Uuid,
    pub msg_id: String,
    pub message: OutboxMessage,
}

/// `now + d`, checked: a duration past the calendar's end is an error, never a panic.
pub fn now_plus(d: Duration) -> Result<OffsetDateTime, DbErr> {
    time::Duration::try_from(d)
        .ok()
        .and_then(|d| OffsetDateTime::now_utc().checked_add(d))
        .ok_or_else(|| DbErr::Custom(format!("{}s from now is past the end of time", d.as_secs())))
}

/// Makes one delivery durable inside the caller's transaction. Commit, then answer the vendor.
///
/// Dedup keys go in first with `INSERT ... ON CONFLICT`: a concurrent copy waits on the unique
/// index and then finds the key taken, so there is no check-then-insert race. A duplicate writes
/// nothing; the caller should roll back (dropping the transaction does).
pub async fn record<C: ConnectionTrait>(db: &C, new: NewMessage) -> Result<Recorded, DbErr> {
    let message_id = Uuid::now_v7();
    let digest = sha256_hex(&new.body);
    let ep = new.endpoint;
    let (msg_id, event_id, replay_of, tenant_signed) =
        match &new.dedup {
            Dedup::Keys {
                event_id,
                digest_window,
                verified_by,
            } => {
                let mut keys: Vec<(String, Option<OffsetDateTime>)> = Vec::with_capacity(2);
                // Provider event ids are recognised forever; body digests for a window.
                if let Some(id) = event_id {
                    keys.push((format!("event:{id}"), None));
                }
                keys.push((format!("digest:{digest}"), Some(now_plus(*digest_window)?)));
                let tenant_signed =
                    match insert_dedup_keys(db, ep.endpoint_id, message_id, &keys, verified_by)
                        .await?
                    {
                        Keys::Taken { tenant_signed } => tenant_signed,
                        Keys::Duplicate => return Ok(Recorded::Duplicate),
                        Keys::EndpointClosed => return Ok(Recorded::EndpointClosed),
                    };
                // The stream deduplicates on the same key, so a republish after a crash is absorbed.
                (
                    format!("{}:{}", ep.endpoint_id, keys[0].0),
                    event_id.clone(),
                    None,
                    tenant_signed,
                )
            }
            Dedup::Replay { of, tenant_signed } => (
                format!("replay:{message_id}"),
                None,
                Some(*of),
                *tenant_signed,
            ),
        };

    let inline = new.body.len() <= new.inline_body_max;
    let message = WebhookDelivery {
        event: new.event.clone(),
        workspace_id: Some(ep.workspace_id),
        connection_id: Some(ep.connection_id),
        delivery_id: Some(message_id),
        body_ref: (!inline).then_some(message_id),
        replay_of,
        body: if inline { new.body.clone() } else { Vec::new() },
    }
    .outbox_message(new.subject.clone(), msg_id.clone())
    // The delivery's trace travels with its dispatch record and message (inline publish too).
    .traced();
    // A replay is linked to the trace its original delivery travelled in.
    let message = match replay_of {
        Some(of) => match original_traceparent(db, of).await? {
            Some(original) => message.header(crate::trace::TRACE_LINK, original),
            None => message,
        },
        None => message,
    };

    // Raw body first, then the message that points at it, then its dispatch record.
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO inbound_message_body (message_id, connection_id, body, retain_until, \
         by_reference) VALUES ($1, $2, $3, $4, $5)",
        [
            message_id.into(),
            ep.connection_id.into(),
            new.body.into(),
            now_plus(new.retention)?.into(),
            (!inline).into(),
        ],
    ))
    .await?;
    let outbox_id = Uuid::now_v7();
    let headers = serde_json::to_string(&new.headers)
        .map_err(|e| DbErr::Custom(format!("inbound headers: {e}")))?;
    let trace_context = serde_json::to_string(&crate::trace::current())
        .map_err(|e| DbErr::Custom(format!("trace context: {e}")))?;
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO inbound_message (id, endpoint_id, workspace_id, connection_id, kind, \
         verification, headers, body_digest, provider_event_id, event, subject, msg_id, \
         outbox_id, replay_of, trace_context, tenant_signed) \
         VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11, $12, $13, $14, \
         NULLIF($15::jsonb, '{}'::jsonb), $16)",
        [
            message_id.into(),
            ep.endpoint_id.into(),
            ep.workspace_id.into(),
            ep.connection_id.into(),
            ep.kind.as_str().into(),
            new.verification.into(),
            headers.into(),
            digest.into(),
            event_id.into(),
            new.event.into(),
            new.subject.into(),
            msg_id.clone().into(),
            outbox_id.into(),
            replay_of.into(),
            trace_context.into(),
            tenant_signed.into(),
        ],
    ))
    .await?;
    let enqueued = outbox::enqueue_with_id(db, outbox_id, message.clone(), new.relay_hold).await?;
    Ok(Recorded::Accepted(Accepted {
        message_id,
        outbox_id: enqueued,
        msg_id,
        message,
    }))
}

/// The `traceparent` inbound message `id` was delivered in, if it was traced and it is valid.
async fn original_traceparent<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
) -> Result<Option<String>, DbErr> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT trace_context ->> 'traceparent' AS traceparent FROM inbound_message \
             WHERE id = $1",
            [id.into()],
        ))
        .await?;
    let value: Option<String> = match row {
        Some(row) => row.try_get("", "traceparent")?,
        None => None,
    };
    Ok(value.filter(|v| crate::trace::parse_traceparent(v).is_some()))
}

/// What [`insert_dedup_keys`] found.
enum Keys {
    /// Taken; `tenant_signed` when the secret that verified the delivery is one a tenant knows.
    Taken {
        tenant_signed: bool,
    },
    Duplicate,
    EndpointClosed,
}

/// An endpoint that accepts deliveries: `e` is the endpoint, `c` its connection. Disconnecting
/// a connection disables its endpoints; this is the rule both the endpoint read and the store
/// apply.
pub const ENDPOINT_DISABLED_SQL: &str =
    "(e.status = 'disabled' OR c.status IN ('disconnected', 'uninstalled'))";

/// Inserts every key, or reports that one was already taken (and unexpired), or that the
/// endpoint no longer accepts the delivery (then nothing is inserted).
async fn insert_dedup_keys<C: ConnectionTrait>(
    db: &C,
    endpoint_id: Uuid,
    message_id: Uuid,
    keys: &[(String, Option<OffsetDateTime>)],
    verified_by: &Option<String>,
) -> Result<Keys, DbErr> {
    let mut values: Vec<sea_orm::Value> = Vec::with_capacity(keys.len() * 2 + 3);
    values.push(endpoint_id.into());
    values.push(message_id.into());
    values.push(verified_by.clone().into());
    let mut rows = String::new();
    for (i, (key, expires)) in keys.iter().enumerate() {
        if i > 0 {
            rows.push_str(", ");
        }
        let b = 4 + i * 2;
        rows.push_str(&format!("(${b}::text, ${}::timestamptz)", b + 1));
        values.push(key.clone().into());
        values.push((*expires).into());
    }
    // Rotation: a previous secret verifies only inside its window, by the database's clock.
    // An expired digest is taken over; an event id (no expiry) never is.
    let sql = format!(
        "WITH open AS (SELECT CASE WHEN $3::text IS NOT NULL AND e.secret_current <> $3 \
             THEN e.previous_tenant_keyed ELSE e.tenant_keyed END AS tenant_signed \
           FROM inbound_endpoint e JOIN connection c ON c.id = e.connection_id \
           WHERE e.id = $1 AND NOT {ENDPOINT_DISABLED_SQL} AND ($3::text IS NULL \
             OR e.secret_current = $3 OR (e.secret_previous = $3 AND e.previous_valid_until > now()))), \
         taken AS (INSERT INTO dedup_key (endpoint_id, key, message_id, expires_at) \
           SELECT $1, k.key, $2, k.expires_at FROM (VALUES {rows}) AS k(key, expires_at) \
            WHERE EXISTS (SELECT 1 FROM open) \
           ON CONFLICT (endpoint_id, key) DO UPDATE SET message_id = EXCLUDED.message_id, \
             expires_at = EXCLUDED.expires_at, created_at = now() \
           WHERE dedup_key.expires_at IS NOT NULL AND dedup_key.expires_at <= now() RETURNING key) \
         SELECT EXISTS (SELECT 1 FROM open) AS open, (SELECT count(*) FROM taken) AS taken, \
           COALESCE((SELECT tenant_signed FROM open), true) AS tenant_signed"
    );
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("the dedup statement returned no row".into()))?;
    let open: bool = row.try_get("", "open")?;
    let taken: i64 = row.try_get("", "taken")?;
    let tenant_signed: bool = row.try_get("", "tenant_signed")?;
    Ok(if !open {
        Keys::EndpointClosed
    } else if taken as usize == keys.len() {
        Keys::Taken { tenant_signed }
    } else {
        Keys::Duplicate
    })
}

/// A new endpoint and its first secret.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub kind: ConnectionKind,
    pub registration: Registration,
    pub provider_ref: Option<String>,
    /// Gives the endpoint a token-addressed route.
    pub address_token: Option<String>,
    /// A tenant chose the secret or is shown it (anyone but an operator or forgesync itself):
    /// what the endpoint receives is a claim, confirmed with the vendor before it writes.
    pub tenant_keyed: bool,
}

impl NewEndpoint {
    /// Whether a shared vendor route can select this endpoint by something other than its own
    /// address (see [`on_shared_route`]). Such an endpoint is not scoped to one workspace, so
    /// only operators create it.
    pub fn on_shared_route(&self) -> bool {
        on_shared_route(self.registration, self.kind, self.provider_ref.is_some())
    }
}

/// Whether a shared vendor route can select an endpoint by something other than its own
/// address: Slack's app-level route, a GitHub hook id or Slack team id (`provider_ref`), or the
/// token of an operator-created GitLab hook.
pub fn on_shared_route(
    registration: Registration,
    kind: ConnectionKind,
    has_provider_ref: bool,
) -> bool {
    match (registration, kind) {
        (Registration::App, _) => true,
        (_, ConnectionKind::Github | ConnectionKind::Slack) => has_provider_ref,
        (Registration::Operator, ConnectionKind::Gitlab) => true,
        _ => false,
    }
}

/// The unique index that gives a `(kind, provider_ref)` to one enabled endpoint (m0013).
pub const PROVIDER_REF_INDEX: &str = "inbound_endpoint_provider_ref_enabled";

/// The unique index that gives an Outline subscription id to one enabled endpoint of a
/// workspace (m0031).
pub const OUTLINE_SUBSCRIPTION_INDEX: &str = "inbound_endpoint_outline_subscription";

fn secret_name(endpoint_id: Uuid) -> String {
    format!("webhook/{endpoint_id}/{}", Uuid::now_v7())
}

/// Creates an endpoint with `secret` sealed as its current secret.
pub async fn create_endpoint<C: ConnectionTrait>(
    db: &C,
    key: &Keyring,
    new: NewEndpoint,
    secret: &[u8],
) -> Result<inbound_endpoint::Model, SecretError> {
    let id = Uuid::now_v7();
    let name = secret_name(id);
    secrets::put(db, key, new.connection_id, &name, secret).await?;
    let lookup = (new.kind == ConnectionKind::Gitlab).then(|| sha256_hex(secret));
    let row = inbound_endpoint::ActiveModel {
        id: Set(id),
        workspace_id: Set(new.workspace_id),
        connection_id: Set(new.connection_id),
        kind: Set(new.kind),
        address_token: Set(new.address_token),
        registration: Set(new.registration),
        provider_ref: Set(new.provider_ref),
        secret_current: Set(name),
        token_lookup: Set(lookup),
        status: Set(EndpointStatus::Active),
        tenant_keyed: Set(new.tenant_keyed),
        previous_tenant_keyed: Set(new.tenant_keyed),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(row)
}

/// Replaces an endpoint's secret; the old one keeps verifying for `window`. The secret before
/// that is deleted. `tenant_keyed`: a tenant chose or is shown the new secret. Lock the endpoint
/// row first (the caller's transaction).
pub async fn rotate_secret<C: ConnectionTrait>(
    db: &C,
    key: &Keyring,
    endpoint: inbound_endpoint::Model,
    secret: &[u8],
    window: Duration,
    tenant_keyed: bool,
) -> Result<inbound_endpoint::Model, SecretError> {
    // Checked before anything is written: a window past the calendar changes nothing.
    let valid_until = now_plus(window)?;
    let name = secret_name(endpoint.id);
    secrets::put(db, key, endpoint.connection_id, &name, secret).await?;
    if let Some(old) = &endpoint.secret_previous {
        crate::entity::connection_secret::Entity::delete_by_id((
            endpoint.connection_id,
            old.clone(),
        ))
        .exec(db)
        .await?;
    }
    let now = OffsetDateTime::now_utc();
    let lookup = (endpoint.kind == ConnectionKind::Gitlab).then(|| sha256_hex(secret));
    let mut active: inbound_endpoint::ActiveModel = endpoint.clone().into();
    active.secret_previous = Set(Some(endpoint.secret_current.clone()));
    active.previous_valid_until = Set(Some(valid_until));
    active.secret_current = Set(name);
    active.previous_token_lookup = Set(endpoint.token_lookup.clone());
    active.token_lookup = Set(lookup);
    // The secret replaced stays as known to whoever knew it, for as long as it verifies.
    active.previous_tenant_keyed = Set(endpoint.tenant_keyed);
    active.tenant_keyed = Set(tenant_keyed);
    if endpoint.status != EndpointStatus::Disabled {
        active.status = Set(EndpointStatus::Rotating);
    }
    active.updated_at = Set(now);
    Ok(active.update(db).await?)
}

/// Disables every endpoint of a connection (on disconnect): deliveries then get 410.
pub async fn disable_endpoints<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
) -> Result<u64, DbErr> {
    let res = db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "UPDATE inbound_endpoint SET status = 'disabled', updated_at = now() \
             WHERE connection_id = $1 AND status <> 'disabled'",
            [connection_id.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}

/// Deletes every raw body of a connection (erasure); the message rows remain as history.
pub async fn erase_bodies<C: ConnectionTrait>(db: &C, connection_id: Uuid) -> Result<u64, DbErr> {
    let res = db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM inbound_message_body WHERE connection_id = $1",
            [connection_id.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}

/// One message's place in a stream, as the stream ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamCopy {
    /// The logical stream name (`WEBHOOKS_SLACK`, ...), without namespace.
    pub stream: String,
    pub sequence: u64,
}

/// What [`erase_delivery`] found and erased of one delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErasedDelivery {
    /// The delivery and its replays (copies of the same body), each now marked erased; empty
    /// when the connection has no such delivery (never had, or erased whole since).
    pub messages: Vec<Uuid>,
    /// Their copies the stream ledger records, still to be deleted from their streams (then
    /// forgotten with [`forget_stream_copies`]).
    pub stream_copies: Vec<StreamCopy>,
}

/// Erases one delivery of `connection_id` (and its replays, which carry the same body) in the
/// database, inside the caller's transaction: its raw body, its stored vendor headers, and its
/// dispatch record if it is still unpublished go; its message row stays as history, marked
/// `erased_at`. Returns the stream copies the ledger records, for the caller to delete by
/// sequence (`bus::erasure::erase_delivery` does all of it). Its dedup keys stay, so a vendor's
/// redelivery of the same event is still absorbed instead of storing the content again.
///
/// Idempotent: a second call finds nothing left to delete and keeps the first `erased_at`.
pub async fn erase_delivery<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
    delivery_id: Uuid,
) -> Result<ErasedDelivery, DbErr> {
    // A delivery of another connection is not found: the scope is an argument.
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "WITH RECURSIVE d AS ( \
               SELECT id, outbox_id FROM inbound_message WHERE id = $1 AND connection_id = $2 \
               UNION \
               SELECT m.id, m.outbox_id FROM inbound_message m JOIN d ON m.replay_of = d.id \
                WHERE m.connection_id = $2), \
             bodies AS (DELETE FROM inbound_message_body WHERE message_id IN (SELECT id FROM d)), \
             pending AS (DELETE FROM outbox WHERE id IN (SELECT outbox_id FROM d)), \
             marked AS (UPDATE inbound_message SET headers = '{}'::jsonb, \
                          erased_at = coalesce(erased_at, now()) \
                         WHERE id IN (SELECT id FROM d)) \
             SELECT id FROM d ORDER BY id",
            [delivery_id.into(), connection_id.into()],
        ))
        .await?;
    let messages = rows
        .iter()
        .map(|r| r.try_get::<Uuid>("", "id"))
        .collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Ok(ErasedDelivery::default());
    }
    // A separate statement, so a dispatch record a relay was publishing (the delete above
    // waited for it) has its ledger row visible here.
    let copies = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT stream, sequence FROM stream_message WHERE delivery_id = ANY($1::uuid[]) \
             ORDER BY stream, sequence",
            [crate::erasure::uuid_array(&messages).into()],
        ))
        .await?;
    let stream_copies = copies
        .iter()
        .map(|r| {
            Ok(StreamCopy {
                stream: r.try_get("", "stream")?,
                sequence: u64::try_from(r.try_get::<i64>("", "sequence")?).unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, DbErr>>()?;
    Ok(ErasedDelivery {
        messages,
        stream_copies,
    })
}

/// Drops the ledger rows of stream copies that were deleted from their streams.
pub async fn forget_stream_copies<C: ConnectionTrait>(
    db: &C,
    copies: &[StreamCopy],
) -> Result<u64, DbErr> {
    if copies.is_empty() {
        return Ok(0);
    }
    let streams = format!(
        "{{{}}}",
        copies
            .iter()
            .map(|c| c.stream.as_str())
            .collect::<Vec<_>>()
            .join(",")
    );
    let sequences = format!(
        "{{{}}}",
        copies
            .iter()
            .map(|c| c.sequence.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let res = db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "DELETE FROM stream_message WHERE (stream, sequence) IN \
               (SELECT * FROM unnest($1::text[], $2::bigint[]))",
            [streams.into(), sequences.into()],
        ))
        .await?;
    Ok(res.rows_affected())
}

/// Deletes raw bodies past their retention and expired digest keys, `batch` of each at most;
/// returns how many rows it deleted.
///
/// A body its message carries by reference is needed by whoever consumes the message, so past
/// its retention it stays until a consumer has marked it consumed or the stream can no longer
/// deliver the message. The latter is bounded without asking the stream: once the message's
/// dispatch record is gone (it was published before now), the stream drops it within
/// `stream_max_age` from now, and that moment is stamped as `stream_expires_at`.
pub async fn prune_expired<C: ConnectionTrait>(
    db: &C,
    batch: u64,
    stream_max_age: Duration,
) -> Result<u64, DbErr> {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        format!(
            "UPDATE inbound_message_body SET stream_expires_at = now() + make_interval(secs => $1) \
             WHERE message_id IN (SELECT b.message_id FROM inbound_message_body b \
             JOIN inbound_message m ON m.id = b.message_id \
             WHERE b.retain_until < now() AND b.by_reference AND b.consumed_at IS NULL \
             AND b.stream_expires_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.id = m.outbox_id) \
             LIMIT {batch} FOR UPDATE OF b SKIP LOCKED)"
        ),
        [stream_max_age.as_secs_f64().into()],
    ))
    .await?;
    // Retention never deletes a body a consumer may still need.
    let bodies = db
        .execute_unprepared(&format!(
            "DELETE FROM inbound_message_body WHERE message_id IN (SELECT message_id \
             FROM inbound_message_body WHERE retain_until < now() \
             AND (NOT by_reference OR consumed_at IS NOT NULL OR stream_expires_at < now()) \
             LIMIT {batch} FOR UPDATE SKIP LOCKED)"
        ))
        .await?;
    let keys = db
        .execute_unprepared(&format!(
            "DELETE FROM dedup_key WHERE (endpoint_id, key) IN (SELECT endpoint_id, key \
             FROM dedup_key WHERE expires_at < now() LIMIT {batch} FOR UPDATE SKIP LOCKED)"
        ))
        .await?;
    Ok(bodies.rows_affected() + keys.rows_affected())
}

/// Marks the body of `message_id` consumed (its message was handled and acked), so retention may
/// delete it once its retention has passed.
pub async fn mark_consumed<C: ConnectionTrait>(db: &C, message_id: Uuid) -> Result<(), DbErr> {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "UPDATE inbound_message_body SET consumed_at = now() \
         WHERE message_id = $1 AND consumed_at IS NULL",
        [message_id.into()],
    ))
    .await?;
    Ok(())
}

/// Bodies up to this size are published inline when the caller has no setting of its own.
pub const DEFAULT_INLINE_BODY_MAX: usize = 1024 * 1024;

/// A fresh random secret or address token: 32 random bytes as hex.
pub fn random_token() -> Result<String, SecretError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| SecretError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Why a replay could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("inbound message {0} not found")]
    NotFound(Uuid),
    #[error("the raw body of inbound message {0} was erased or expired")]
    BodyGone(Uuid),
    #[error(transparent)]
    Closed(#[from] ReplayClosed),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Why a replay may not go out: what it would deliver for no longer accepts anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayClosed {
    #[error("connection {0} no longer exists")]
    ConnectionGone(Uuid),
    #[error("connection {0} is {1}, not active")]
    ConnectionNotActive(Uuid, String),
    #[error("webhook endpoint {0} is disabled")]
    EndpointDisabled(Uuid),
}

/// Checks that a replay for `connection_id` (and, for a webhook delivery, the endpoint that
/// received `delivery`) may go out. The rows are locked for share until the caller's transaction
/// ends, so a disconnect either commits first and is seen, or waits for the replay.
pub async fn replay_refusal<C: ConnectionTrait>(
    db: &C,
    connection_id: Uuid,
    delivery: Option<Uuid>,
) -> Result<Option<ReplayClosed>, DbErr> {
    // Replay only into an active connection and an enabled endpoint.
    let conn = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT status FROM connection WHERE id = $1 FOR SHARE",
            [connection_id.into()],
        ))
        .await?;
    let Some(conn) = conn else {
        return Ok(Some(ReplayClosed::ConnectionGone(connection_id)));
    };
    let status: String = conn.try_get("", "status")?;
    if status != "active" {
        return Ok(Some(ReplayClosed::ConnectionNotActive(
            connection_id,
            status,
        )));
    }
    if let Some(delivery) = delivery {
        let ep = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT e.id, e.status FROM inbound_message m \
                 JOIN inbound_endpoint e ON e.id = m.endpoint_id WHERE m.id = $1 FOR SHARE OF e",
                [delivery.into()],
            ))
            .await?;
        if let Some(ep) = ep {
            let status: String = ep.try_get("", "status")?;
            if status == "disabled" {
                return Ok(Some(ReplayClosed::EndpointDisabled(ep.try_get("", "id")?)));
            }
        }
    }
    Ok(None)
}

/// Records an explicit replay of `message_id` (of `workspace_id`): a new message with the same
/// body, subject and endpoint, its origin recorded, bypassing dedup.
pub async fn replay<C: ConnectionTrait>(
    db: &C,
    workspace_id: Uuid,
    message_id: Uuid,
) -> Result<Accepted, ReplayError> {
    let original = inbound_message::find_in_workspace(db, workspace_id, message_id)
        .await?
        .ok_or(ReplayError::NotFound(message_id))?;
    if let Some(closed) = replay_refusal(db, original.connection_id, Some(message_id)).await? {
        return Err(closed.into());
    }
    let body = inbound_message_body::Entity::find_by_id(message_id)
        .one(db)
        .await?
        .ok_or(ReplayError::BodyGone(message_id))?;
    let remaining = (body.retain_until - OffsetDateTime::now_utc())
        .try_into()
        .unwrap_or(Duration::ZERO);
    let headers: BTreeMap<String, String> =
        serde_json::from_value(original.headers.clone()).unwrap_or_default();
    let recorded = record(
        db,
        NewMessage {
            endpoint: EndpointIds {
                endpoint_id: original.endpoint_id,
                workspace_id: original.workspace_id,
                connection_id: original.connection_id,
                kind: original.kind,
            },
            verification: "replay".into(),
            headers,
            body: body.body,
            event: original.event,
            subject: original.subject,
            // Explicit replay bypasses dedup and records where it came from.
            dedup: Dedup::Replay {
                of: message_id,
                tenant_signed: original.tenant_signed,
            },
            retention: remaining,
            inline_body_max: DEFAULT_INLINE_BODY_MAX,
            relay_hold: Duration::ZERO,
        },
    )
    .await?;
    match recorded {
        Recorded::Accepted(a) => Ok(a),
        Recorded::Duplicate | Recorded::EndpointClosed => Err(ReplayError::Db(DbErr::Custom(
            "a replay takes no dedup keys".into(),
        ))),
    }
}

/// The raw body a message carries by reference (`Forgesync-Body-Ref`); `None` once retention or
/// erasure removed it. Consumers read it here, beside the code that stores it.
pub async fn stored_body(
    pool: &sqlx::PgPool,
    message_id: Uuid,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let row: Option<(Vec<u8>,)> =
        sqlx::query_as("SELECT body FROM inbound_message_body WHERE message_id = $1")
            .bind(message_id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(body,)| body))
}

/// What ingress holds of a connection, for the eraser: raw bodies, the digest keys derived from
/// them, the received-message rows (replays included, `replay_of` stays inside a connection),
/// and the webhook messages it published. Subjects a vendor routes by connection alone are that
/// vendor's to declare.
pub static ERASABLE: crate::erasure::Erasable = {
    use crate::erasure::{ContentTable, ErasableTable, Selector::Connection};
    crate::erasure::Erasable {
        holder: "ingress",
        order: 200,
        kinds: &[],
        tables: &[
            ErasableTable {
                table: "inbound_message_body",
                selector: Connection("connection_id = $1"),
            },
            ErasableTable {
                table: "dedup_key",
                selector: Connection(
                    "endpoint_id IN (SELECT id FROM inbound_endpoint WHERE connection_id = $1)",
                ),
            },
            ErasableTable {
                table: "inbound_message",
                selector: Connection("connection_id = $1"),
            },
        ],
        content: &[ContentTable {
            table: "inbound_message_body",
            columns: &["body"],
        }],
        streams: &[
            "WEBHOOKS_GITHUB",
            "WEBHOOKS_GITLAB",
            "WEBHOOKS_SLACK",
            "WEBHOOKS_OUTLINE",
        ],
        repository_streams: &[],
        connection_subjects: crate::erasure::no_subjects,
        workspace_subjects: crate::erasure::no_workspace_subjects,
    }
};
