//! OAuth authorization as stored: the state bound to a connection before the redirect
//! (`oauth_state`), and the Slack code exchange it starts (`slack_exchange`).
//!
//! The rules (provider repair's adoption rules applied to an exchange):
//! - a state is random, stored only as its hash, bound to the connection's version and
//!   lifecycle generation at the redirect, and spent once; an unknown, spent, expired or stale
//!   state is refused and stores nothing;
//! - the exchange's intent is committed (with the state spent) before the code is sent;
//! - what the vendor returned (team, bot user, token fingerprint) is committed before the token
//!   is checked;
//! - the token is adopted under its identity lock, then the connection row lock, and the
//!   exchange row goes in that same transaction; a deterministic refusal leaves nothing, and an
//!   exchange whose outcome is unknown stays for an admin.

use sqlx::{PgConnection, PgPool};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::inbound::sha256_hex;
use crate::registration::ResourceKind;
use crate::repair::{Kept, KeptResource};
use crate::secrets::{Keyring, SecretError};

/// How long a state stays usable after the redirect.
pub const STATE_TTL: Duration = Duration::minutes(10);

/// A state handed to the vendor with the redirect.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The state itself: only its hash is stored.
    pub state: String,
    pub expires_at: OffsetDateTime,
}

/// Binds a new state to the connection as it is now (its version and lifecycle generation).
pub async fn issue(
    pool: &PgPool,
    workspace_id: Uuid,
    connection_id: Uuid,
    redirect_uri: &str,
) -> Result<Option<Issued>, OAuthError> {
    let state = crate::inbound::random_token()?;
    let expires_at: Option<OffsetDateTime> = sqlx::query_scalar(
        "INSERT INTO oauth_state (id, state_hash, workspace_id, connection_id, connection_version,
             lifecycle_generation, redirect_uri, expires_at)
         SELECT $1, $2, c.workspace_id, c.id, c.version, c.lifecycle_generation, $4,
                now() + make_interval(secs => $5::bigint)
           FROM connection c WHERE c.id = $3 AND c.workspace_id = $6
         RETURNING expires_at",
    )
    .bind(Uuid::now_v7())
    .bind(sha256_hex(state.as_bytes()))
    .bind(connection_id)
    .bind(redirect_uri)
    .bind(STATE_TTL.whole_seconds())
    .bind(workspace_id)
    .fetch_optional(pool)
    .await?;
    Ok(expires_at.map(|expires_at| Issued { state, expires_at }))
}

/// Why a callback's state is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no authorization was started with this state")]
    Unknown,
    #[error("this state was already used")]
    Reused,
    #[error("this state has expired; start the authorization again")]
    Expired,
    #[error("the connection changed since this authorization was started; start it again")]
    Stale,
}

impl Refused {
    /// The code an API answers with.
    pub fn code(self) -> &'static str {
        match self {
            Refused::Unknown => "oauth_state_unknown",
            Refused::Reused => "oauth_state_reused",
            Refused::Expired => "oauth_state_expired",
            Refused::Stale => "oauth_state_stale",
        }
    }
}

/// A spent state and the exchange it started.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub exchange_id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub connection_version: i64,
    pub lifecycle_generation: i64,
    pub redirect_uri: String,
}

#[derive(sqlx::FromRow)]
struct StateRow {
    id: Uuid,
    workspace_id: Uuid,
    connection_id: Uuid,
    connection_version: i64,
    lifecycle_generation: i64,
    redirect_uri: String,
    expires_at: OffsetDateTime,
    used_at: Option<OffsetDateTime>,
}

/// Spends `state` and commits the exchange's intent, in one transaction: the code may be sent
/// once this returns. A refused state changes nothing.
pub async fn claim(pool: &PgPool, state: &str) -> Result<Result<Claimed, Refused>, OAuthError> {
    let mut tx = pool.begin().await?;
    let row: Option<StateRow> = sqlx::query_as(
        "SELECT id, workspace_id, connection_id, connection_version, lifecycle_generation,
                redirect_uri, expires_at, used_at
           FROM oauth_state WHERE state_hash = $1 FOR UPDATE",
    )
    .bind(sha256_hex(state.as_bytes()))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(StateRow {
        id,
        workspace_id,
        connection_id,
        connection_version: version,
        lifecycle_generation: generation,
        redirect_uri,
        expires_at: expires,
        used_at: used,
    }) = row
    else {
        return Ok(Err(Refused::Unknown));
    };
    if used.is_some() {
        return Ok(Err(Refused::Reused));
    }
    if expires <= OffsetDateTime::now_utc() {
        return Ok(Err(Refused::Expired));
    }
    let current: Option<(i64, i64, String)> = sqlx::query_as(
        "SELECT version, lifecycle_generation, status::text FROM connection WHERE id = $1",
    )
    .bind(connection_id)
    .fetch_optional(&mut *tx)
    .await?;
    match current {
        Some((v, g, status)) if v == version && g == generation && status != "disconnected" => {}
        _ => return Ok(Err(Refused::Stale)),
    }
    sqlx::query("UPDATE oauth_state SET used_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let exchange_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO slack_exchange (id, state_id, workspace_id, connection_id)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(exchange_id)
    .bind(id)
    .bind(workspace_id)
    .bind(connection_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(Claimed {
        exchange_id,
        workspace_id,
        connection_id,
        connection_version: version,
        lifecycle_generation: generation,
        redirect_uri,
    }))
}

/// Records what the vendor returned, before the token is checked.
pub async fn exchanged(
    pool: &PgPool,
    exchange_id: Uuid,
    team_id: &str,
    bot_user_id: &str,
    token_fingerprint: &str,
) -> Result<(), OAuthError> {
    sqlx::query(
        "UPDATE slack_exchange
            SET status = 'exchanged', team_id = $2, bot_user_id = $3, token_fingerprint = $4,
                updated_at = now()
          WHERE id = $1",
    )
    .bind(exchange_id)
    .bind(team_id)
    .bind(bot_user_id)
    .bind(token_fingerprint)
    .execute(pool)
    .await?;
    Ok(())
}

/// The vendor refused the code for certain: nothing exists to repair, the attempt goes.
pub async fn refused(pool: &PgPool, exchange_id: Uuid) -> Result<(), OAuthError> {
    sqlx::query("DELETE FROM slack_exchange WHERE id = $1 AND status = 'dispatched'")
        .bind(exchange_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// The exchange's outcome is unknown (no answer, or a token we could not adopt): kept for an
/// admin, with why.
pub async fn uncertain(pool: &PgPool, exchange_id: Uuid, detail: &str) -> Result<(), OAuthError> {
    sqlx::query(
        "UPDATE slack_exchange
            SET status = CASE WHEN status = 'exchanged' THEN status ELSE 'uncertain' END,
                detail = $2, updated_at = now()
          WHERE id = $1",
    )
    .bind(exchange_id)
    .bind(detail)
    .execute(pool)
    .await?;
    Ok(())
}

/// A token to adopt: the connection's secret `secret_name`, kept as `kept`.
pub struct Adoption<'a> {
    pub claimed: &'a Claimed,
    pub kind: ResourceKind,
    pub target: &'a str,
    pub vendor_id: &'a str,
    pub proof: &'a str,
    pub secret_name: &'a str,
    pub token: &'a [u8],
}

/// Why a token was not adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdopted {
    /// Its identity is fenced for removal.
    Fenced,
    /// The connection changed (a transition) since the state was issued.
    Stale,
}

/// Adopts the token in one transaction: the identity lock and the connection row lock
/// ([`crate::repair::keep`]), the connection checked again under them, the token stored as
/// the connection's secret, the exchange row deleted. Nothing is written when it is refused.
pub async fn adopt(
    pool: &PgPool,
    ring: &Keyring,
    a: &Adoption<'_>,
) -> Result<Result<Uuid, NotAdopted>, OAuthError> {
    let mut tx = pool.begin().await?;
    let kept = crate::repair::keep(
        &mut tx,
        &KeptResource {
            connection_id: a.claimed.connection_id,
            kind: a.kind,
            target: a.target,
            vendor_id: a.vendor_id,
            proof: a.proof,
        },
    )
    .await?;
    let registration = match kept {
        Kept::Recorded(id) => id,
        Kept::Fenced => return Ok(Err(NotAdopted::Fenced)),
    };
    // Under the row lock: the connection is still the one the state was bound to.
    let (version, generation, status): (i64, i64, String) = sqlx::query_as(
        "SELECT version, lifecycle_generation, status::text FROM connection WHERE id = $1
            FOR UPDATE",
    )
    .bind(a.claimed.connection_id)
    .fetch_one(&mut *tx)
    .await?;
    if version != a.claimed.connection_version
        || generation != a.claimed.lifecycle_generation
        || status == "disconnected"
    {
        return Ok(Err(NotAdopted::Stale));
    }
    put_secret(
        &mut tx,
        ring,
        a.claimed.connection_id,
        a.secret_name,
        a.token,
    )
    .await?;
    sqlx::query("DELETE FROM slack_exchange WHERE id = $1")
        .bind(a.claimed.exchange_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Ok(registration))
}

/// Stores a connection secret in the caller's transaction, sealed as [`crate::secrets::put`]
/// seals it.
async fn put_secret(
    conn: &mut PgConnection,
    ring: &Keyring,
    connection_id: Uuid,
    name: &str,
    plaintext: &[u8],
) -> Result<(), OAuthError> {
    let key = ring.sealing();
    let (nonce, ciphertext) = key.seal(connection_id, name, plaintext)?;
    sqlx::query(
        "INSERT INTO connection_secret (connection_id, name, key_id, nonce, ciphertext)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (connection_id, name)
         DO UPDATE SET key_id = EXCLUDED.key_id, nonce = EXCLUDED.nonce,
                       ciphertext = EXCLUDED.ciphertext",
    )
    .bind(connection_id)
    .bind(name)
    .bind(key.id())
    .bind(nonce)
    .bind(ciphertext)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A Slack exchange kept for an admin.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct Exchange {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub status: String,
    pub team_id: Option<String>,
    pub bot_user_id: Option<String>,
    pub token_fingerprint: Option<String>,
    pub detail: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// The exchanges whose outcome is unknown (or still in flight), oldest first, after `after`.
pub async fn exchanges(
    pool: &PgPool,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Exchange>, OAuthError> {
    Ok(sqlx::query_as(
        "SELECT id, workspace_id, connection_id, status, team_id, bot_user_id,
                token_fingerprint, detail, created_at, updated_at
           FROM slack_exchange
          WHERE $1::uuid IS NULL OR id > $1
          ORDER BY id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Secret(#[from] SecretError),
}
