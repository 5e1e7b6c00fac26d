//! A connection's Slack reader: slack-client with the connection's bot token, against the
//! operator's Slack API URL, with a per-job call budget, and its failures classed for the sync
//! engine (what a failed read stops).
//!
//! Connection settings: `{"team_id": "T..."}`; secret `token` (the bot token of the operator's
//! Slack app installed in that team).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, anyhow};
use lifecycle_core::vendor_error::VendorErrorClass;
use sea_orm::DatabaseConnection;
use slack_client::{SlackClient, SlackError};
use slack_mirror::Settings;
use store::entity::{ConnectionStatus, connection};
use store::secrets::Keyring;
use sync_engine::{ReadError, ReadStop};

/// A connection's reader: the client acting with its bot token, and its team.
#[derive(Clone)]
pub struct SlackSource {
    pub client: SlackClient,
    pub settings: Settings,
    /// Calls this reader may still make (one job's budget).
    budget: Arc<AtomicU64>,
}

impl fmt::Debug for SlackSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackSource")
            .field("team_id", &self.settings.team_id)
            .finish_non_exhaustive()
    }
}

impl SlackSource {
    /// Spends one call of the budget, or says it is spent (nothing is sent then).
    pub fn spend(&self) -> Result<(), ReadFailure> {
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .map(|_| ())
            .map_err(|_| ReadFailure::BudgetExhausted)
    }
}

/// Builds each connection's reader from its stored settings and sealed token.
#[derive(Clone)]
pub struct ClientFactory {
    pub db: DatabaseConnection,
    pub secret_key: Keyring,
    pub client: slack_client::Settings,
    /// Web API calls one job may make.
    pub calls_per_job: u64,
}

impl fmt::Debug for ClientFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keyring never reaches logs.
        f.debug_struct("ClientFactory")
            .field("api", &self.client.base_url)
            .finish_non_exhaustive()
    }
}

impl ClientFactory {
    /// The connection's reader. Only an active or suspended connection reads.
    pub async fn source(&self, conn: &connection::Model) -> anyhow::Result<SlackSource> {
        if !matches!(
            conn.status,
            ConnectionStatus::Active | ConnectionStatus::Suspended
        ) {
            return Err(anyhow!(
                "the connection is {:?}; it reads nothing from Slack",
                conn.status
            ));
        }
        let settings = Settings::from_settings(&conn.settings).map_err(|e| anyhow!(e))?;
        let token = store::secrets::get(&self.db, &self.secret_key, conn.id, "token")
            .await?
            .ok_or_else(|| anyhow!("the connection has no `token` secret"))?;
        let token = String::from_utf8(token).context("the connection's token is not text")?;
        let client = SlackClient::new(&self.client, &token)?;
        Ok(SlackSource {
            client,
            settings,
            budget: Arc::new(AtomicU64::new(self.calls_per_job)),
        })
    }
}

/// A failed Slack read, as the engine weighs it.
#[derive(Debug, thiserror::Error)]
pub enum ReadFailure {
    #[error(transparent)]
    Slack(#[from] SlackError),
    #[error("the job's Slack call budget is spent")]
    BudgetExhausted,
    #[error("Slack answered a page that breaks its contract: {0}")]
    Anomaly(String),
}

impl ReadError for ReadFailure {
    fn class(&self) -> VendorErrorClass {
        match self {
            ReadFailure::Slack(e) => e.class(),
            ReadFailure::BudgetExhausted => VendorErrorClass::BudgetExhausted,
            ReadFailure::Anomaly(_) => VendorErrorClass::InvalidResponse,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            ReadFailure::BudgetExhausted => ReadStop::Job(self.to_string()),
            ReadFailure::Anomaly(_) => ReadStop::Listing,
            ReadFailure::Slack(e) => match e.class() {
                // The bot was removed from this channel, or it is gone: that channel pauses,
                // the others go on, and the token is not flagged.
                VendorErrorClass::ScopeLost => ReadStop::Scope(format!(
                    "Slack answered `{}`: the bot no longer reads this channel",
                    e.code().unwrap_or("not_in_channel")
                )),
                VendorErrorClass::RateLimited => {
                    ReadStop::Job("Slack's rate limit outlasted the retries".into())
                }
                VendorErrorClass::BadCredentials | VendorErrorClass::Forbidden { .. } => {
                    ReadStop::Job(self.to_string())
                }
                VendorErrorClass::ServerError => ReadStop::Pass(format!("Slack is failing: {e}")),
                _ => ReadStop::Listing,
            },
        }
    }
}
