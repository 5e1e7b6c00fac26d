//! Finding the endpoint a delivery is addressed to, with its connection's state and its open
//! secrets (the previous one only while its rotation window lasts, by the database's clock).

use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::EndpointIds;
use store::secrets::SecretKey;
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
    /// Current secret first, then the previous one inside its window.
    secrets: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("ids", &self.ids)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

/// Which secret verified a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    Current,
    /// The previous secret, inside the rotation window.
    Previous,
}

impl Endpoint {
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
        for (i, secret) in self.secrets.iter().enumerate() {
            if check(secret) {
                return Ok(if i == 0 {
                    Verified::Current
                } else {
                    Verified::Previous
                });
            }
        }
        Err(Rejection::bad_signature())
    }
}

/// How the route names its endpoint.
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
    e.provider_ref, (e.status = 'disabled' OR c.status IN ('disconnected', 'uninstalled')) AS disabled, \
    pi.server_url, \
    e.secret_current, cur.key_id AS cur_key, cur.nonce AS cur_nonce, cur.ciphertext AS cur_ct, \
    e.secret_previous, prev.key_id AS prev_key, prev.nonce AS prev_nonce, prev.ciphertext AS prev_ct \
    FROM inbound_endpoint e \
    JOIN connection c ON c.id = e.connection_id \
    JOIN provider_instance pi ON pi.id = c.provider_instance_id \
    LEFT JOIN connection_secret cur ON cur.connection_id = e.connection_id AND cur.name = e.secret_current \
    LEFT JOIN connection_secret prev ON prev.connection_id = e.connection_id \
        AND prev.name = e.secret_previous AND e.previous_valid_until > now() ";

/// Finds the endpoints `lookup` names (at most `limit`), enabled ones first.
pub async fn find<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
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
    let sql = format!(
        "{SELECT} WHERE {cond} ORDER BY (e.status = 'disabled'), e.created_at DESC LIMIT {limit}"
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

/// The one endpoint `lookup` names, or 404.
pub async fn find_one<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
    lookup: Lookup<'_>,
) -> Result<Endpoint, Rejection> {
    find(db, key, lookup, 1)
        .await?
        .into_iter()
        .next()
        .ok_or_else(Rejection::unknown_endpoint)
}

fn from_row(r: &QueryResult, key: &SecretKey) -> Result<Endpoint, Rejection> {
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
        let (Some(name), Some(_)) = (name, key_id) else {
            continue;
        };
        let nonce: Vec<u8> = r.try_get("", &format!("{prefix}_nonce")).map_err(get_err)?;
        let ct: Vec<u8> = r.try_get("", &format!("{prefix}_ct")).map_err(get_err)?;
        match key.open(connection_id, &name, &nonce, &ct) {
            Ok(secret) => secrets.push(secret),
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
