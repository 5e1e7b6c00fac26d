//! Webhook ingress records, write side: endpoints and their secret rotation, and the one
//! transaction that makes a delivery durable (raw body, message, dedup keys and its dispatch
//! record in the outbox), plus retention and erasure of raw bodies.

use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DbBackend, DbErr, EntityTrait, Statement,
};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::entity::inbound_endpoint::{self, EndpointStatus, Registration};
use crate::entity::{ConnectionKind, inbound_message, inbound_message_body};
use crate::outbox::{self, OutboxMessage};
use crate::secrets::{self, SecretError, SecretKey};

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
    /// The vendor's event id (kept forever) and the body digest (kept for `digest_window`).
    Keys {
        event_id: Option<String>,
        digest_window: Duration,
    },
    /// An explicit replay of an earlier message: no dedup, and the replay is recorded.
    Replay { of: Uuid },
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
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Stored; the outbox row will publish `msg_id` on `subject`.
    Accepted(Accepted),
    /// The endpoint already accepted this event id or, within the window, this body.
    Duplicate,
}

/// A stored message and its dispatch record.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub message_id: Uuid,
    pub outbox_id: Uuid,
    pub msg_id: String,
    pub message: OutboxMessage,
}

fn to_offset(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
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
    let (msg_id, event_id, replay_of) = match &new.dedup {
        Dedup::Keys {
            event_id,
            digest_window,
        } => {
            let mut keys: Vec<(String, Option<OffsetDateTime>)> = Vec::with_capacity(2);
            // Provider event ids are recognised forever; body digests for a window.
            if let Some(id) = event_id {
                keys.push((format!("event:{id}"), None));
            }
            keys.push((
                format!("digest:{digest}"),
                Some(OffsetDateTime::now_utc() + to_offset(*digest_window)),
            ));
            if !insert_dedup_keys(db, ep.endpoint_id, message_id, &keys).await? {
                return Ok(Recorded::Duplicate);
            }
            // The stream deduplicates on the same key, so a republish after a crash is absorbed.
            (
                format!("{}:{}", ep.endpoint_id, keys[0].0),
                event_id.clone(),
                None,
            )
        }
        Dedup::Replay { of } => (format!("replay:{message_id}"), None, Some(*of)),
    };

    let mut message = OutboxMessage::bytes(
        new.subject.clone(),
        if new.body.len() <= new.inline_body_max {
            new.body.clone()
        } else {
            Vec::new()
        },
    )
    .msg_id(msg_id.clone())
    .header(crate::headers::WORKSPACE, ep.workspace_id.to_string())
    .header(crate::headers::CONNECTION, ep.connection_id.to_string())
    .header(DELIVERY_HEADER, message_id.to_string())
    .header(EVENT_HEADER, new.event.clone());
    if new.body.len() > new.inline_body_max {
        message = message.header(BODY_REF_HEADER, message_id.to_string());
    }
    if let Some(of) = replay_of {
        message = message.header(REPLAY_OF_HEADER, of.to_string());
    }

    // Raw body first, then the message that points at it, then its dispatch record.
    inbound_message_body::Entity::insert(inbound_message_body::ActiveModel {
        message_id: Set(message_id),
        connection_id: Set(ep.connection_id),
        body: Set(new.body),
        retain_until: Set(OffsetDateTime::now_utc() + to_offset(new.retention)),
    })
    .exec_without_returning(db)
    .await?;
    let outbox_id = Uuid::now_v7();
    let headers = serde_json::to_value(&new.headers)
        .map_err(|e| DbErr::Custom(format!("inbound headers: {e}")))?;
    inbound_message::Entity::insert(inbound_message::ActiveModel {
        id: Set(message_id),
        endpoint_id: Set(ep.endpoint_id),
        workspace_id: Set(ep.workspace_id),
        connection_id: Set(ep.connection_id),
        kind: Set(ep.kind),
        verification: Set(new.verification),
        headers: Set(headers),
        body_digest: Set(digest),
        provider_event_id: Set(event_id),
        event: Set(new.event),
        subject: Set(new.subject),
        msg_id: Set(msg_id.clone()),
        outbox_id: Set(outbox_id),
        replay_of: Set(replay_of),
        ..Default::default()
    })
    .exec_without_returning(db)
    .await?;
    let enqueued = outbox::enqueue_with_id(db, outbox_id, message.clone()).await?;
    Ok(Recorded::Accepted(Accepted {
        message_id,
        outbox_id: enqueued,
        msg_id,
        message,
    }))
}

/// Inserts every key or reports that one was already taken (and unexpired).
async fn insert_dedup_keys<C: ConnectionTrait>(
    db: &C,
    endpoint_id: Uuid,
    message_id: Uuid,
    keys: &[(String, Option<OffsetDateTime>)],
) -> Result<bool, DbErr> {
    let mut sql =
        String::from("INSERT INTO dedup_key (endpoint_id, key, message_id, expires_at) VALUES ");
    let mut values: Vec<sea_orm::Value> = Vec::with_capacity(keys.len() * 4);
    for (i, (key, expires)) in keys.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let b = i * 4;
        sql.push_str(&format!("(${}, ${}, ${}, ${})", b + 1, b + 2, b + 3, b + 4));
        values.push(endpoint_id.into());
        values.push(key.clone().into());
        values.push(message_id.into());
        values.push((*expires).into());
    }
    // An expired digest is taken over; an event id (no expiry) never is.
    sql.push_str(
        " ON CONFLICT (endpoint_id, key) DO UPDATE SET message_id = EXCLUDED.message_id, \
         expires_at = EXCLUDED.expires_at, created_at = now() \
         WHERE dedup_key.expires_at IS NOT NULL AND dedup_key.expires_at <= now() RETURNING key",
    );
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await?;
    Ok(rows.len() == keys.len())
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
}

fn secret_name(endpoint_id: Uuid) -> String {
    format!("webhook/{endpoint_id}/{}", Uuid::now_v7())
}

/// Creates an endpoint with `secret` sealed as its current secret.
pub async fn create_endpoint<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
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
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(row)
}

/// Replaces an endpoint's secret; the old one keeps verifying for `window`. The secret before
/// that is deleted. Lock the endpoint row first (the caller's transaction).
pub async fn rotate_secret<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
    endpoint: inbound_endpoint::Model,
    secret: &[u8],
    window: Duration,
) -> Result<inbound_endpoint::Model, SecretError> {
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
    active.previous_valid_until = Set(Some(now + to_offset(window)));
    active.secret_current = Set(name);
    active.previous_token_lookup = Set(endpoint.token_lookup.clone());
    active.token_lookup = Set(lookup);
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

/// Deletes up to `batch` raw bodies past their retention and expired digest keys; returns how
/// many rows went. Safe from every replica at once.
pub async fn prune_expired<C: ConnectionTrait>(db: &C, batch: u64) -> Result<u64, DbErr> {
    let bodies = db
        .execute_unprepared(&format!(
            "DELETE FROM inbound_message_body WHERE message_id IN (SELECT message_id \
             FROM inbound_message_body WHERE retain_until < now() LIMIT {batch} \
             FOR UPDATE SKIP LOCKED)"
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
    Db(#[from] DbErr),
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
            dedup: Dedup::Replay { of: message_id },
            retention: remaining,
            inline_body_max: DEFAULT_INLINE_BODY_MAX,
        },
    )
    .await?;
    match recorded {
        Recorded::Accepted(a) => Ok(a),
        Recorded::Duplicate => Err(ReplayError::Db(DbErr::Custom(
            "a replay is never a duplicate".into(),
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
