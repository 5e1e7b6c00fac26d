//! Finding the endpoint a delivery is addressed to, with its connection's state and its open
//! secrets (the previous one only while its rotation window lasts, by the database's clock).
//!
//! Reads are cached for a short time. A cached endpoint never decides alone: the store takes a
//! delivery only if, in the statement that takes its dedup keys, the endpoint is still enabled
//! and the secret that verified it still open; when it is not, or when a cached endpoint refuses
//! a delivery, the route runs again on a fresh read. So a disconnect or a rotation is exact from
//! the moment it commits, and a cache only spares the read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::EndpointIds;
use store::secrets::Keyring;
use uuid::Uuid;

use crate::reject::Rejection;

/// An endpoint ready to verify a delivery.
pub struct Endpoint {
    pub ids: EndpointIds,
    pub registration: Registration,
    pub provider_ref: Option<String>,
    /// The GitLab origin of the connection's provider instance.
    pub origin: String,
    disabled: bool,
    /// A tenant chose or was shown the current (previous) secret: what it signs is the tenant's
    /// claim (m0032), and counts toward the workspace's delivery quota.
    tenant_keyed: bool,
    previous_tenant_keyed: bool,
    /// Current secret first, then the previous one inside its window, each with its name.
    secrets: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("ids", &self.ids)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

/// How a delivery was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// By the previous secret, inside the rotation window.
    pub previous: bool,
    /// The endpoint secret that verified it; `None` when a credential of ours did (a GitLab route
    /// credential), and then only the endpoint's status must still hold when it is stored.
    pub secret: Option<String>,
}

impl Verified {
    /// Verified by something other than an endpoint secret.
    pub fn without_secret() -> Self {
        Verified {
            previous: false,
            secret: None,
        }
    }
}

impl Endpoint {
    /// Whether a delivery verified as `verified` is signed by a secret a tenant knows (as the
    /// store decides it when the delivery is recorded).
    pub fn tenant_signed(&self, verified: &Verified) -> bool {
        if verified.previous {
            self.previous_tenant_keyed
        } else {
            self.tenant_keyed
        }
    }

    /// Refuses a delivery to a disabled endpoint or a disconnected connection.
    pub fn ensure_enabled(&self) -> Result<(), Rejection> {
        // Disconnecting disables endpoints: 410 and nothing stored.
        if self.disabled {
            Err(Rejection::disabled())
        } else {
            Ok(())
        }
    }

    /// Tries each open secret with `check`.
    pub fn verify(&self, check: impl Fn(&[u8]) -> bool) -> Result<Verified, Rejection> {
        // Rotation: the previous secret verifies only inside its window.
        for (i, (name, secret)) in self.secrets.iter().enumerate() {
            if check(secret) {
                return Ok(Verified {
                    previous: i > 0,
                    secret: Some(name.clone()),
                });
            }
        }
        // A disconnection deletes the connection's secrets: with nothing left to verify against,
        // a disabled endpoint still answers 410 so the vendor stops delivering.
        if self.disabled && self.secrets.is_empty() {
            return Err(Rejection::disabled());
        }
        Err(Rejection::bad_signature())
    }
}

/// The endpoints among `candidates` that one of whose open secrets `check` accepts, checking each
/// distinct secret once and at most `max_secrets` of them (the rest count as not verifying, with a
/// warning: a route that must try many secrets is a route that costs an attacker nothing).
pub fn signed_by(
    candidates: &[Endpoint],
    max_secrets: usize,
    check: impl Fn(&[u8]) -> bool,
) -> Vec<&Endpoint> {
    let mut checked: HashMap<&[u8], bool> = HashMap::new();
    let mut verified = Vec::new();
    let mut skipped = false;
    for ep in candidates {
        for (_, secret) in &ep.secrets {
            let known = checked.len();
            let ok = *checked.entry(secret.as_slice()).or_insert_with(|| {
                skipped |= known >= max_secrets;
                known < max_secrets && check(secret)
            });
            if ok {
                verified.push(ep);
                break;
            }
        }
    }
    if skipped {
        tracing::warn!(
            max_secrets,
            "more distinct secrets than a delivery is checked against: give those endpoints their \
             token route"
        );
    }
    verified
}

/// How the route names its endpoint.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    Id(Uuid),
    AddressToken(&'a str),
    ProviderRef(ConnectionKind, &'a str),
    /// sha256 of an operator-created GitLab hook's token.
    GitlabToken(&'a str),
    /// Every enabled app-level endpoint of a kind (Slack's url_verification names no team).
    AppLevel(ConnectionKind),
}

const SELECT: &str = "SELECT e.id, e.workspace_id, e.connection_id, e.kind, e.registration, \
    e.provider_ref, {DISABLED} AS disabled, e.tenant_keyed, e.previous_tenant_keyed, \
    pi.server_url, \
    e.secret_current, cur.key_id AS cur_key, cur.nonce AS cur_nonce, cur.ciphertext AS cur_ct, \
    e.secret_previous, prev.key_id AS prev_key, prev.nonce AS prev_nonce, prev.ciphertext AS prev_ct \
    FROM inbound_endpoint e \
    JOIN connection c ON c.id = e.connection_id \
    JOIN provider_instance pi ON pi.id = c.provider_instance_id \
    LEFT JOIN connection_secret cur ON cur.connection_id = e.connection_id AND cur.name = e.secret_current \
    LEFT JOIN connection_secret prev ON prev.connection_id = e.connection_id \
        AND prev.name = e.secret_previous AND e.previous_valid_until > now() ";

/// Reads the endpoints `lookup` names (at most `limit`), enabled ones first.
async fn find<C: ConnectionTrait>(
    db: &C,
    key: &Keyring,
    lookup: Lookup<'_>,
    limit: u32,
) -> Result<Vec<Endpoint>, Rejection> {
    let (cond, values): (&str, Vec<Value>) = match lookup {
        Lookup::Id(id) => ("e.id = $1", vec![id.into()]),
        Lookup::AddressToken(t) => ("e.address_token = $1", vec![t.into()]),
        Lookup::ProviderRef(kind, r) => (
            "e.kind = $1 AND e.provider_ref = $2",
            vec![kind.as_str().into(), r.into()],
        ),
        Lookup::GitlabToken(token) => (
            "e.kind = 'gitlab' AND e.registration = 'operator' AND (e.token_lookup = $1 \
             OR (e.previous_token_lookup = $1 AND e.previous_valid_until > now()))",
            vec![store::inbound::sha256_hex(token.as_bytes()).into()],
        ),
        Lookup::AppLevel(kind) => (
            "e.kind = $1 AND e.registration = 'app' AND e.status <> 'disabled'",
            vec![kind.as_str().into()],
        ),
    };
    let select = SELECT.replace("{DISABLED}", store::inbound::ENDPOINT_DISABLED_SQL);
    let sql = format!(
        "{select} WHERE {cond} ORDER BY (e.status = 'disabled'), e.created_at DESC LIMIT {limit}"
    );
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await?;
    rows.iter().map(|r| from_row(r, key)).collect()
}

fn from_row(r: &QueryResult, key: &Keyring) -> Result<Endpoint, Rejection> {
    let get_err = |e: sea_orm::DbErr| Rejection::unavailable(&e);
    let connection_id: Uuid = r.try_get("", "connection_id").map_err(get_err)?;
    let kind: String = r.try_get("", "kind").map_err(get_err)?;
    let kind = match kind.as_str() {
        "github" => ConnectionKind::Github,
        "gitlab" => ConnectionKind::Gitlab,
        "slack" => ConnectionKind::Slack,
        _ => ConnectionKind::Outline,
    };
    let registration: String = r.try_get("", "registration").map_err(get_err)?;
    let registration = match registration.as_str() {
        "registered" => Registration::Registered,
        "app" => Registration::App,
        _ => Registration::Operator,
    };
    let mut secrets = Vec::with_capacity(2);
    for (name_col, prefix) in [("secret_current", "cur"), ("secret_previous", "prev")] {
        let name: Option<String> = r.try_get("", name_col).map_err(get_err)?;
        let key_id: Option<String> = r.try_get("", &format!("{prefix}_key")).map_err(get_err)?;
        let (Some(name), Some(key_id)) = (name, key_id) else {
            continue;
        };
        let nonce: Vec<u8> = r.try_get("", &format!("{prefix}_nonce")).map_err(get_err)?;
        let ct: Vec<u8> = r.try_get("", &format!("{prefix}_ct")).map_err(get_err)?;
        // Key rotation: the key id stored with the secret picks the key of the ring.
        match key.open(&key_id, connection_id, &name, &nonce, &ct) {
            Ok(secret) => secrets.push((name, secret)),
            // A secret that cannot be opened verifies nothing; the operator must re-issue it.
            Err(e) => {
                tracing::error!(%connection_id, error = %e, "endpoint secret cannot be opened")
            }
        }
    }
    let server_url: Option<String> = r.try_get("", "server_url").map_err(get_err)?;
    Ok(Endpoint {
        ids: EndpointIds {
            endpoint_id: r.try_get("", "id").map_err(get_err)?,
            workspace_id: r.try_get("", "workspace_id").map_err(get_err)?,
            connection_id,
            kind,
        },
        registration,
        provider_ref: r.try_get("", "provider_ref").map_err(get_err)?,
        origin: server_url.unwrap_or_else(|| default_origin(kind).to_owned()),
        disabled: r.try_get("", "disabled").map_err(get_err)?,
        tenant_keyed: r.try_get("", "tenant_keyed").map_err(get_err)?,
        previous_tenant_keyed: r.try_get("", "previous_tenant_keyed").map_err(get_err)?,
        secrets,
    })
}

/// The origin of a kind's default instance (a provider_instance with no URL).
pub fn default_origin(kind: ConnectionKind) -> &'static str {
    match kind {
        ConnectionKind::Github => "https://github.com",
        ConnectionKind::Gitlab => "https://gitlab.com",
        ConnectionKind::Slack => "https://slack.com",
        ConnectionKind::Outline => "https://app.getoutline.com",
    }
}

/// One route's attempt at a delivery: from the cache first, then, if a cached endpoint refused
/// it, from a fresh read.
#[derive(Debug, Default)]
pub struct Attempt {
    fresh: bool,
    used_cache: AtomicBool,
}

impl Attempt {
    fn cached() -> Self {
        Attempt::default()
    }

    fn fresh() -> Self {
        Attempt {
            fresh: true,
            used_cache: AtomicBool::new(false),
        }
    }
}

/// Runs a route's delivery with cached endpoints, and once more with fresh reads when a cached
/// endpoint refused it (bad signature, disabled) or changed before the delivery was stored.
pub async fn with_fresh_retry<F, Fut, T>(run: F) -> Result<T, Rejection>
where
    F: Fn(Arc<Attempt>) -> Fut,
    Fut: Future<Output = Result<T, Rejection>>,
{
    let first = Arc::new(Attempt::cached());
    match run(first.clone()).await {
        Err(r) if r.worth_a_fresh_read() && first.used_cache.load(Ordering::Relaxed) => {
            run(Arc::new(Attempt::fresh())).await
        }
        other => other,
    }
}

/// The endpoint reads of one ingress process, kept for `ttl` (zero keeps nothing).
#[derive(Debug)]
pub struct Endpoints {
    ttl: Duration,
    entries: Mutex<HashMap<(LookupKey, u32), Cached>>,
}

/// A read and when it was made.
type Cached = (Instant, Arc<Vec<Endpoint>>);

/// [`Lookup`] owned, as a cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LookupKey {
    Id(Uuid),
    AddressToken(String),
    ProviderRef(ConnectionKind, String),
    GitlabToken(String),
    AppLevel(ConnectionKind),
}

impl From<Lookup<'_>> for LookupKey {
    fn from(l: Lookup<'_>) -> Self {
        match l {
            Lookup::Id(id) => LookupKey::Id(id),
            Lookup::AddressToken(t) => LookupKey::AddressToken(t.to_owned()),
            Lookup::ProviderRef(k, r) => LookupKey::ProviderRef(k, r.to_owned()),
            // Keyed by the token's digest: the cache holds no plain token.
            Lookup::GitlabToken(t) => {
                LookupKey::GitlabToken(store::inbound::sha256_hex(t.as_bytes()))
            }
            Lookup::AppLevel(k) => LookupKey::AppLevel(k),
        }
    }
}

/// Entries kept at most; past it the cache starts again empty.
const CACHE_ENTRIES: usize = 10_000;

impl Endpoints {
    pub fn new(ttl: Duration) -> Self {
        Endpoints {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The endpoints `lookup` names (at most `limit`), enabled ones first; cached on a first
    /// attempt, read afresh on a retry. An empty answer is never cached.
    pub async fn find<C: ConnectionTrait>(
        &self,
        db: &C,
        key: &Keyring,
        lookup: Lookup<'_>,
        limit: u32,
        attempt: &Attempt,
    ) -> Result<Arc<Vec<Endpoint>>, Rejection> {
        // The limit is part of the key: a read of one endpoint never answers a read of many.
        let cache_key = (LookupKey::from(lookup), limit);
        if !attempt.fresh
            && !self.ttl.is_zero()
            && let Some((at, found)) = self.lock().get(&cache_key)
            && at.elapsed() < self.ttl
        {
            attempt.used_cache.store(true, Ordering::Relaxed);
            return Ok(found.clone());
        }
        let found = Arc::new(find(db, key, lookup, limit).await?);
        if !self.ttl.is_zero() {
            let mut entries = self.lock();
            if found.is_empty() {
                entries.remove(&cache_key);
            } else {
                if entries.len() >= CACHE_ENTRIES {
                    entries.clear();
                }
                entries.insert(cache_key, (Instant::now(), found.clone()));
            }
        }
        Ok(found)
    }

    /// The one endpoint `lookup` names, or 404.
    pub async fn find_one<C: ConnectionTrait>(
        &self,
        db: &C,
        key: &Keyring,
        lookup: Lookup<'_>,
        attempt: &Attempt,
    ) -> Result<One, Rejection> {
        let found = self.find(db, key, lookup, 1, attempt).await?;
        if found.is_empty() {
            return Err(Rejection::unknown_endpoint());
        }
        Ok(One(found))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(LookupKey, u32), Cached>> {
        // A panic while holding the lock leaves a map of complete entries: keep using it.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A found endpoint, shared with the cache.
#[derive(Debug, Clone)]
pub struct One(Arc<Vec<Endpoint>>);

impl std::ops::Deref for One {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.0[0]
    }
}
