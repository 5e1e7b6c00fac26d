//! A connection's GitLab reader: gitlab-client with the connection's own token, against the
//! connection's instance, with a request budget kept in reserve, and its failures classed for
//! the sync engine (what a failed read stops).
//!
//! Connection settings: `{"group": "<root group full path>", "projects": ["<full path>", ...],
//! "min_remaining": N}` (`projects` absent: every project of the group); secret
//! `token` (a personal, group or OAuth token). The provider instance's server URL names the
//! GitLab instance (gitlab.com when unset).

use std::fmt;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use gitlab_client::{Budget, ClientConfig, Error, GitlabClient, RetryPolicy};
use lifecycle_core::vendor_error::VendorErrorClass;
use sea_orm::{DatabaseConnection, EntityTrait};
use serde::Deserialize;
use store::entity::{ConnectionStatus, connection, provider_instance};
use store::secrets::Keyring;
use sync_engine::{ReadError, ReadStop};
use uuid::Uuid;

/// GitLab's own instance, for a provider instance without a server URL.
pub const DEFAULT_SERVER: &str = "https://gitlab.com";

/// What a GitLab connection's settings hold.
#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    /// The connected (root) group's full path.
    pub group: String,
    /// The projects selected in the group, by full path; `None`: every project.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
    /// Requests kept in reserve for webhooks' follow-up reads (500 when unset).
    #[serde(default)]
    pub min_remaining: Option<u32>,
}

impl Settings {
    /// Reads a connection's settings; a missing or empty `group` is refused.
    pub fn from_settings(settings: &serde_json::Value) -> anyhow::Result<Settings> {
        let parsed: Settings = serde_json::from_value(settings.clone())
            .context("GitLab connection settings must name the connected `group`")?;
        anyhow::ensure!(
            !parsed.group.trim().is_empty(),
            "GitLab connection settings name an empty `group`"
        );
        Ok(parsed)
    }

    /// Whether the project at `full_path` is in the connected group: below it, at any depth.
    pub fn contains(&self, full_path: &str) -> bool {
        let (path, group) = (
            full_path.to_ascii_lowercase(),
            self.group.trim_end_matches('/').to_ascii_lowercase(),
        );
        !group.is_empty() && path.starts_with(&format!("{group}/"))
    }

    /// Whether the selection permits the project at `full_path`.
    pub fn selects(&self, full_path: &str) -> bool {
        match &self.projects {
            None => true,
            Some(list) => list.iter().any(|p| p.eq_ignore_ascii_case(full_path)),
        }
    }
}

/// A connection's reader: the client acting with its token, and the group it connects.
#[derive(Debug, Clone)]
pub struct GitlabSource {
    pub client: GitlabClient,
    pub settings: Settings,
}

/// Builds each connection's reader from its stored settings and sealed token.
#[derive(Clone)]
pub struct ClientFactory {
    pub db: DatabaseConnection,
    pub secret_key: Keyring,
    /// One request's time limit.
    pub request_timeout: Duration,
    /// Retries of 5xx, 429 and transport failures.
    pub retry: RetryPolicy,
    /// Where a connection's server may be reached (`FORGESYNC_EGRESS_ALLOW`).
    pub egress: vendor_http::egress::Egress,
}

impl fmt::Debug for ClientFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keyring never reaches logs.
        f.debug_struct("ClientFactory")
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientFactory {
    /// The connection's reader. Only an active or suspended connection reads: a pending or
    /// disconnected one has no verified credentials to read with.
    pub async fn source(&self, conn: &connection::Model) -> anyhow::Result<GitlabSource> {
        if !reads(conn.status) {
            return Err(anyhow!(
                "the connection is {:?}; it reads nothing from GitLab",
                conn.status
            ));
        }
        let settings = Settings::from_settings(&conn.settings)?;
        let instance = provider_instance::Entity::find_by_id(conn.provider_instance_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| anyhow!("the connection's provider instance is missing"))?;
        let token = store::secrets::get(&self.db, &self.secret_key, conn.id, "token")
            .await?
            .ok_or_else(|| anyhow!("the connection has no `token` secret"))?;
        self.build(conn.id, settings, instance.server_url.as_deref(), token)
    }

    /// The connection's reader from `cache` while what it is built from is unchanged (one
    /// query, no decryption, the same HTTP connections), else built anew and cached; `None` when
    /// the connection is gone. Only an active or suspended connection reads.
    pub async fn cached_source(
        &self,
        cache: &Readers,
        connection_id: Uuid,
    ) -> anyhow::Result<Option<GitlabSource>> {
        let inputs: Option<ReaderInputs> = sqlx::query_as(
            "SELECT c.status, c.settings, i.server_url, s.key_id, s.nonce, s.ciphertext
               FROM connection c
               JOIN provider_instance i ON i.id = c.provider_instance_id
               LEFT JOIN connection_secret s ON s.connection_id = c.id AND s.name = 'token'
              WHERE c.id = $1",
        )
        .bind(connection_id)
        .fetch_optional(self.db.get_postgres_connection_pool())
        .await?;
        let Some(inputs) = inputs else {
            cache.forget(connection_id);
            return Ok(None);
        };
        if !matches!(inputs.status.as_str(), "active" | "suspended") {
            // Its token leaves memory with its client.
            cache.forget(connection_id);
            return Err(anyhow!(
                "the connection is {}; it reads nothing from GitLab",
                inputs.status
            ));
        }
        cache
            .get_or_build(connection_id, inputs, |inputs| {
                let settings = Settings::from_settings(&inputs.settings)?;
                let (Some(key_id), Some(nonce), Some(ciphertext)) =
                    (&inputs.key_id, &inputs.nonce, &inputs.ciphertext)
                else {
                    return Err(anyhow!("the connection has no `token` secret"));
                };
                let token =
                    self.secret_key
                        .open(key_id, connection_id, "token", nonce, ciphertext)?;
                self.build(connection_id, settings, inputs.server_url.as_deref(), token)
            })
            .map(Some)
    }

    fn build(
        &self,
        connection_id: Uuid,
        settings: Settings,
        server_url: Option<&str>,
        token: Vec<u8>,
    ) -> anyhow::Result<GitlabSource> {
        let token = String::from_utf8(token).context("the connection's token is not text")?;
        let mut config = ClientConfig::new(server_url.unwrap_or(DEFAULT_SERVER))
            .with_egress(self.egress.clone());
        config.timeout = self.request_timeout;
        config.retry = self.retry;
        let budget = Budget::keep(settings.min_remaining.unwrap_or(500));
        let client = GitlabClient::new(&config, token)?.with_budget(budget);
        // What GitLab says is left, as `vendor_quota_remaining{vendor="gitlab",connection}`.
        client.report_quota_as(connection_id.to_string());
        Ok(GitlabSource { client, settings })
    }
}

/// Whether a connection in `status` reads GitLab.
fn reads(status: ConnectionStatus) -> bool {
    matches!(
        status,
        ConnectionStatus::Active | ConnectionStatus::Suspended
    )
}

/// What a connection's reader is built from, as stored now, its token still sealed: equal
/// inputs build an equal reader, so a cached one is reused only while these are unchanged.
#[derive(PartialEq, sqlx::FromRow)]
pub struct ReaderInputs {
    status: String,
    settings: serde_json::Value,
    server_url: Option<String>,
    key_id: Option<String>,
    nonce: Option<Vec<u8>>,
    ciphertext: Option<Vec<u8>>,
}

/// Webhook follow-up readers, per connection ([`ClientFactory::cached_source`]).
pub type Readers = sync_engine::clients::ClientCache<ReaderInputs, GitlabSource>;

/// A failed GitLab read, as the engine weighs it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReadFailure(#[from] pub Error);

impl ReadError for ReadFailure {
    fn class(&self) -> VendorErrorClass {
        match &self.0 {
            Error::Auth { .. } | Error::Http { status: 401, .. } => {
                VendorErrorClass::BadCredentials
            }
            Error::Http { status: 403, .. } => VendorErrorClass::Forbidden { permission: None },
            Error::Http { status: 404, .. } => VendorErrorClass::NotFound,
            Error::Http { status, .. } if *status >= 500 => VendorErrorClass::ServerError,
            Error::Http { .. } | Error::Decode { .. } | Error::Redirected { .. } => {
                VendorErrorClass::InvalidResponse
            }
            Error::TooLarge { .. } => VendorErrorClass::InvalidResponse,
            Error::Graphql { .. } => VendorErrorClass::GraphqlError("GITLAB".into()),
            Error::RateLimited { .. } => VendorErrorClass::RateLimited,
            Error::BudgetExhausted(_) => VendorErrorClass::BudgetExhausted,
            Error::Transport(e) if e.is_timeout() => VendorErrorClass::Timeout,
            Error::Transport(_) | Error::Unreachable(_) => VendorErrorClass::Unreachable,
            Error::Deadline { .. } => VendorErrorClass::Timeout,
        }
    }

    fn stops(&self) -> ReadStop {
        match &self.0 {
            // Quota: another pass would only spend what is left of it.
            Error::BudgetExhausted(stop) => {
                ReadStop::Job(format!("quota budget exhausted: {stop}"))
            }
            Error::RateLimited { .. } => {
                ReadStop::Job("GitLab's rate limit outlasted the retries".into())
            }
            Error::Auth { .. }
            | Error::Http {
                status: 401 | 403, ..
            } => ReadStop::Job(self.to_string()),
            // The project is gone or hidden, or a field failed: only this listing is in doubt.
            Error::Http { status: 404, .. } | Error::Graphql { .. } => ReadStop::Listing,
            Error::Http { status, .. } if *status >= 500 => {
                ReadStop::Pass(format!("GitLab is failing (HTTP {status} after retries)"))
            }
            _ => ReadStop::Pass(self.to_string()),
        }
    }
}
