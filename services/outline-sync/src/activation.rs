//! Activation of an Outline connection, each step logged and recorded as connection activity:
//!
//! 1. `auth.info`: the token is good and names its team (a refused token is reported as bad
//!    credentials, and nothing is created).
//! 2. The team's webhook subscription, registered subscription-first by the shared
//!    [`Registrar`]: an endpoint of its own addressed by a random token, with a fresh secret of
//!    ours, and its `provider_registration` row (marker = the endpoint's id, carried in the
//!    subscription's name) committed before `webhookSubscriptions.create`. A create whose
//!    answer is lost is settled by the marker in `webhookSubscriptions.list`, never by creating
//!    again; once adopted, the endpoint's `provider_ref` is the subscription's id, the only one
//!    whose deliveries ingress and admission take. Nothing here deletes a subscription: one
//!    created for an older connection version or generation is left for provider repair.
//!
//! Every RECONCILIATION runs it again, so a missing subscription is retried and an adopted one
//! stays open.

use lifecycle_core::vendor_error::VendorErrorClass;
use outline_client::types::WebhookSubscription;
use outline_client::{OutlineClient, OutlineError};
use outline_mirror::SUBSCRIPTION;
use serde_json::json;
use sqlx::PgPool;
use store::entity::connection;
use store::registration::ResourceKind;
use sync_engine::subscription::{
    Address, CreateFailure, Registrar, Request, ResourceListing, ResourceState, VendorResource,
};
use uuid::Uuid;

use crate::source::ClientFactory;

/// The events a subscription takes: every document and collection event (the ones outline-sync
/// does not act on are acknowledged and counted as ignored, see [`crate::webhooks`]).
pub const EVENTS: &[&str] = &["documents", "collections"];

/// The most subscriptions one `webhookSubscriptions.list` page asks for (Outline's maximum).
const LIST_PAGE_SIZE: u32 = 100;

/// The name a subscription carries its marker in.
pub fn subscription_name(marker: &str) -> String {
    format!("forgesync {marker}")
}

/// Runs the activation steps of Outline connections.
#[derive(Clone)]
pub struct Activator {
    /// Registers the subscription, subscription first.
    pub registrar: Registrar,
    /// Builds each connection's client from its sealed token.
    pub factory: ClientFactory,
    /// Ingress's public base URL (`FORGESYNC_PUBLIC_WEBHOOK_URL`); `None`: no subscription is
    /// created.
    pub public_webhook_url: Option<String>,
    /// Pages of `webhookSubscriptions.list` one listing reads at most.
    pub page_cap: u32,
}

impl std::fmt::Debug for Activator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activator")
            .field("factory", &self.factory)
            .field("public_webhook_url", &self.public_webhook_url)
            .field("page_cap", &self.page_cap)
            .finish_non_exhaustive()
    }
}

impl Activator {
    /// The activator over `factory`'s database and keyring, subscriptions delivering to
    /// `public_webhook_url`, listings of at most `page_cap` pages.
    pub fn new(factory: ClientFactory, public_webhook_url: Option<String>, page_cap: u32) -> Self {
        let db = factory.db.clone();
        Activator {
            registrar: Registrar {
                pool: db.get_postgres_connection_pool().clone(),
                keyring: std::sync::Arc::new(factory.secret_key.clone()),
                db,
            },
            factory,
            public_webhook_url,
            page_cap: page_cap.max(1),
        }
    }

    fn pool(&self) -> &PgPool {
        &self.registrar.pool
    }

    /// Runs the steps for `conn` (see the module): where its subscription stands after them.
    /// A step Outline refused is a [`ResourceState::Missing`] with the reason, recorded; an
    /// error is a failure to record even that.
    #[tracing::instrument(skip_all, fields(connection_id = %conn.id, workspace_id = %conn.workspace_id))]
    pub async fn activate(&self, conn: &connection::Model) -> anyhow::Result<ResourceState> {
        // 1. Who the token is: its team is where the subscription goes.
        let team = match self.team(conn).await {
            Ok(team) => team,
            Err(failed) => {
                self.log(
                    conn,
                    "outline_activation_auth",
                    json!({"ok": false, "class": failed.class, "reason": failed.reason}),
                )
                .await?;
                return Ok(ResourceState::Missing(failed.reason));
            }
        };
        let (client, team_id) = team;
        self.log(
            conn,
            "outline_activation_auth",
            json!({"ok": true, "team_id": team_id}),
        )
        .await?;

        // 2. The subscription.
        let resource = OutlineSubscription {
            client: &client,
            public_url: self.public_webhook_url.as_deref(),
            page_cap: self.page_cap,
        };
        let state = self
            .registrar
            .ensure(
                &resource,
                Request {
                    conn,
                    target: Ok(team_id),
                    ready: Ok(()),
                    // Bound to the subscription's id once adopted (Outline assigns it).
                    provider_ref: None,
                },
            )
            .await?;
        self.log(
            conn,
            OutlineSubscription::ACTIVITY,
            match &state {
                ResourceState::Open(id) => json!({"open": true, "subscription_id": id}),
                ResourceState::Missing(reason) => json!({"open": false, "reason": reason}),
            },
        )
        .await?;
        Ok(state)
    }

    /// The connection's client and its team's id, by `auth.info`; why not.
    async fn team(&self, conn: &connection::Model) -> Result<(OutlineClient, String), AuthFailed> {
        let client = self.factory.client(conn).await.map_err(|e| AuthFailed {
            class: "no_client",
            reason: format!("the connection's Outline client could not be built: {e:#}"),
        })?;
        let auth = client.auth_info().await.map_err(|e| auth_failed(&e))?;
        let team_id = auth
            .team
            .and_then(|t| t.id)
            .map(|id| id.to_string())
            .ok_or_else(|| AuthFailed {
                class: "invalid_response",
                reason: "Outline's auth.info named no team".to_owned(),
            })?;
        Ok((client, team_id))
    }

    async fn log(
        &self,
        conn: &connection::Model,
        activity: &str,
        detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        tracing::info!(connection_id = %conn.id, workspace_id = %conn.workspace_id,
            step = activity, %detail, "activation step");
        store::activity::record(self.pool(), conn.id, conn.workspace_id, activity, detail).await
    }
}

/// Why `auth.info` gave no team.
struct AuthFailed {
    /// The vendor error class's name (`bad_credentials`, ...).
    class: &'static str,
    reason: String,
}

fn auth_failed(e: &OutlineError) -> AuthFailed {
    let class = e.class();
    let reason = if class == VendorErrorClass::BadCredentials {
        format!(
            "bad credentials: Outline refused the connection's API token ({e}); replace its \
             `token` secret with a team admin's API key"
        )
    } else {
        format!("Outline's auth.info failed: {e}")
    };
    AuthFailed {
        class: class.name(),
        reason,
    }
}

/// The team's webhook subscription, as the shared registration component creates and finds it.
struct OutlineSubscription<'a> {
    client: &'a OutlineClient,
    /// Ingress's public base URL.
    public_url: Option<&'a str>,
    page_cap: u32,
}

#[async_trait::async_trait]
impl VendorResource for OutlineSubscription<'_> {
    type Listed = WebhookSubscription;
    const NOUN: &'static str = "subscription";
    const ACTIVITY: &'static str = "outline_activation_subscription";
    // Ingress's Outline route names only the endpoint's token, and admission takes only the
    // deliveries naming the subscription Outline assigned.
    const ADDRESSED_BY_TOKEN: bool = true;
    const ENDPOINT_REF_IS_VENDOR_ID: bool = true;

    fn kind(&self) -> ResourceKind {
        SUBSCRIPTION
    }

    fn configured(&self) -> Result<(), String> {
        self.public_url.map(|_| ()).ok_or_else(|| {
            "subscription registration is not configured (FORGESYNC_PUBLIC_WEBHOOK_URL)".into()
        })
    }

    fn url(&self, _conn: &connection::Model, address: &Address<'_>) -> String {
        let base = self
            .public_url
            .expect("configured before a URL is asked for")
            .trim_end_matches('/');
        let token = address
            .token
            .expect("the subscription's endpoint is addressed by a token");
        format!("{base}/webhooks/outline/{token}")
    }

    async fn create(
        &self,
        _conn: &connection::Model,
        _target: &str,
        marker: &str,
        url: &str,
        secret: &str,
    ) -> Result<String, CreateFailure> {
        let events: Vec<String> = EVENTS.iter().map(|e| (*e).to_owned()).collect();
        match self
            .client
            .webhook_subscriptions_create(&subscription_name(marker), url, &events, Some(secret))
            .await
        {
            Ok(created) => match created.id {
                Some(id) => Ok(id.to_string()),
                // Created, but its id unread: its marker finds it.
                None => Err(CreateFailure::Unknown(
                    "Outline's answer to the create named no id".to_owned(),
                )),
            },
            Err(e) if certainly_not_created(&e) => Err(CreateFailure::Refused(format!(
                "Outline refused the subscription: {e}"
            ))),
            Err(e) => Err(CreateFailure::Unknown(e.to_string())),
        }
    }

    async fn list(&self, _target: &str) -> ResourceListing<WebhookSubscription> {
        list_subscriptions(self.client, self.page_cap).await
    }

    fn marked(
        &self,
        listed: &WebhookSubscription,
        _connection_id: Uuid,
        marker: &str,
    ) -> Option<String> {
        let named = listed
            .name
            .as_deref()
            .is_some_and(|n| n == subscription_name(marker));
        named
            .then_some(listed.id)
            .flatten()
            .map(|id| id.to_string())
    }
}

/// Whether a failed create certainly created nothing: Outline answered a refusal (4xx, a
/// redirect not followed), or the call was never sent. A 5xx, a timeout or a broken answer may
/// follow a create that happened.
fn certainly_not_created(e: &OutlineError) -> bool {
    match e {
        OutlineError::BadCredentials { .. }
        | OutlineError::Forbidden { .. }
        | OutlineError::NotFound { .. }
        | OutlineError::RateLimited { .. }
        | OutlineError::Status { .. }
        | OutlineError::Refused { .. }
        | OutlineError::Request { .. }
        | OutlineError::BudgetExhausted { .. } => true,
        OutlineError::Server { .. }
        | OutlineError::Timeout { .. }
        | OutlineError::DeadlinePassed { .. }
        | OutlineError::Unreachable { .. }
        | OutlineError::Decode { .. }
        | OutlineError::TooLarge { .. } => false,
    }
}

/// Every page of the team's subscriptions, up to `page_cap` pages; as far as it got and why
/// when a page fails or the cap is reached.
async fn list_subscriptions(
    client: &OutlineClient,
    page_cap: u32,
) -> ResourceListing<WebhookSubscription> {
    let mut items = Vec::new();
    let mut offset = 0u64;
    for _ in 0..page_cap {
        match client
            .webhook_subscriptions_list(offset, LIST_PAGE_SIZE)
            .await
        {
            Ok(page) => {
                let got = page.items.len();
                items.extend(page.items);
                if got < LIST_PAGE_SIZE as usize {
                    return ResourceListing::Whole(items);
                }
                offset += got as u64;
            }
            Err(e) => {
                return ResourceListing::Partial {
                    items,
                    why: format!("the subscription listing failed: {e}"),
                };
            }
        }
    }
    ResourceListing::Partial {
        items,
        why: format!("the subscription listing reached the page cap ({page_cap})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_answers_that_say_nothing_was_created_refuse() {
        let m = "webhookSubscriptions.create";
        for e in [
            OutlineError::Forbidden {
                method: m,
                message: String::new(),
            },
            OutlineError::Status {
                method: m,
                status: 400,
                error: "validation_error".into(),
                message: String::new(),
            },
            OutlineError::BudgetExhausted { method: m },
            OutlineError::Request {
                method: m,
                detail: String::new(),
            },
        ] {
            assert!(certainly_not_created(&e), "{e}");
        }
        for e in [
            OutlineError::Server {
                method: m,
                status: 502,
                retry_after: None,
            },
            OutlineError::Timeout { method: m },
            OutlineError::Unreachable {
                method: m,
                detail: "reset".into(),
            },
            OutlineError::Decode {
                method: m,
                detail: String::new(),
            },
        ] {
            assert!(!certainly_not_created(&e), "{e}");
        }
    }
}
