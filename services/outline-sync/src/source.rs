//! A connection's Outline reader: outline-client with the connection's API token, against the
//! operator's Outline URL, spending one job's call budget, and its failures classed for the sync
//! engine (what a failed read stops).
//!
//! Connection secret `token`: an Outline API key of a team admin (listing and creating webhook
//! subscriptions needs one).

use std::fmt;

use anyhow::{Context as _, anyhow};
use lifecycle_core::vendor_error::VendorErrorClass;
use outline_client::{CallBudget, OutlineClient, OutlineError};
use sea_orm::DatabaseConnection;
use store::entity::{ConnectionStatus, connection};
use store::secrets::Keyring;
use sync_engine::{ReadError, ReadStop};

/// Builds each connection's client from its sealed token.
#[derive(Clone)]
pub struct ClientFactory {
    pub db: DatabaseConnection,
    pub secret_key: Keyring,
    pub client: outline_client::Settings,
    /// HTTP attempts one job may send.
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
    /// The connection's client, without a budget. Only an active or suspended connection reads.
    pub async fn client(&self, conn: &connection::Model) -> anyhow::Result<OutlineClient> {
        if !matches!(
            conn.status,
            ConnectionStatus::Active | ConnectionStatus::Suspended
        ) {
            return Err(anyhow!(
                "the connection is {:?}; it reads nothing from Outline",
                conn.status
            ));
        }
        let token = store::secrets::get(&self.db, &self.secret_key, conn.id, "token")
            .await?
            .ok_or_else(|| anyhow!("the connection has no `token` secret"))?;
        let token = String::from_utf8(token).context("the connection's token is not text")?;
        let client = OutlineClient::new(&self.client, &token)?;
        client.report_quota_as(conn.id.to_string());
        Ok(client)
    }

    /// The connection's reader for one job: its client spending the job's call budget.
    pub async fn source(&self, conn: &connection::Model) -> anyhow::Result<OutlineClient> {
        Ok(self
            .client(conn)
            .await?
            .with_budget(CallBudget::new(self.calls_per_job)))
    }
}

/// A failed Outline read, as the engine weighs it.
#[derive(Debug, thiserror::Error)]
pub enum ReadFailure {
    #[error(transparent)]
    Outline(#[from] OutlineError),
    /// A document or collection without a usable id or date: the page breaks the contract.
    #[error("Outline answered a page that breaks its contract: {0}")]
    Anomaly(String),
    /// Outline refused one collection's listing (deleted or hidden since it was listed): that
    /// listing ends inferring nothing; the token is not at fault.
    #[error("the collection cannot be listed: {0}")]
    CollectionUnreadable(String),
}

impl ReadError for ReadFailure {
    fn class(&self) -> VendorErrorClass {
        match self {
            ReadFailure::Outline(e) => e.class(),
            ReadFailure::Anomaly(_) => VendorErrorClass::InvalidResponse,
            ReadFailure::CollectionUnreadable(_) => VendorErrorClass::NotFound,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            ReadFailure::Anomaly(_) | ReadFailure::CollectionUnreadable(_) => ReadStop::Listing,
            ReadFailure::Outline(e) => match e.class() {
                // Another pass would only spend more of what is spent.
                VendorErrorClass::BudgetExhausted => ReadStop::Job(self.to_string()),
                VendorErrorClass::RateLimited => {
                    ReadStop::Job("Outline's rate limit outlasted the retries".into())
                }
                VendorErrorClass::BadCredentials | VendorErrorClass::Forbidden { .. } => {
                    ReadStop::Job(self.to_string())
                }
                // A failing or slow answer holds back this collection only: the others go on,
                // and it keeps awaiting a clean pass.
                _ => ReadStop::Listing,
            },
        }
    }
}
