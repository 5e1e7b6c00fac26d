//! Outline webhook subscriptions: the team's whole `webhookSubscriptions.list` (every page, or
//! no proof), ours told by its id and the hash of the URL it calls, then
//! `webhookSubscriptions.delete` once, never retried inside the attempt (a retry is a new
//! attempt with its own permit).

use std::time::Duration;

use lifecycle_core::repair::{DispatchOutcome, Ownership};
use outline_client::types::WebhookSubscription;
use outline_client::{OUTLINE_CLOUD, OutlineClient, OutlineError, Settings};
use store::registration::ResourceKind;
use store::repair::Repair;
use uuid::Uuid;

use crate::{Inspected, Remover};

/// Pages of the team's subscriptions read before the listing counts as not whole.
pub const PAGE_CAP: u32 = 50;
/// Subscriptions asked for per page.
const PAGE_SIZE: u32 = 100;

/// Removes the webhook subscriptions outline-sync registered.
pub struct Subscriptions {
    /// Outline's root when the repair's instance names none (`FORGESYNC_OUTLINE_API_URL`).
    pub api_url: String,
    pub egress: vendor_http::egress::Egress,
    pub request_timeout: Duration,
    pub page_cap: u32,
}

impl Subscriptions {
    fn client(&self, repair: &Repair, credential: &[u8]) -> Result<OutlineClient, String> {
        let (token, base_url) =
            crate::token_and_base(repair, credential, &self.api_url, OUTLINE_CLOUD)?;
        let settings = Settings {
            base_url,
            retry: crate::one_attempt(),
            request_timeout: self.request_timeout,
            egress: self.egress.clone(),
            ..Settings::default()
        };
        OutlineClient::new(&settings, token).map_err(|e| e.to_string())
    }

    /// Every page of the team's subscriptions, or the error that left the listing partial.
    async fn whole_listing(
        &self,
        client: &OutlineClient,
    ) -> Result<Vec<WebhookSubscription>, Result<OutlineError, String>> {
        let mut items = Vec::new();
        let mut offset = 0u64;
        for _ in 0..self.page_cap {
            let page = client
                .webhook_subscriptions_list(offset, PAGE_SIZE)
                .await
                .map_err(Ok)?;
            let got = page.items.len();
            items.extend(page.items);
            // A short page is the end of the listing.
            if got < PAGE_SIZE as usize {
                return Ok(items);
            }
            offset += got as u64;
        }
        Err(Err(format!(
            "the listing reached the page cap ({})",
            self.page_cap
        )))
    }
}

fn refused_credential(e: &OutlineError) -> bool {
    matches!(
        e,
        OutlineError::BadCredentials { .. } | OutlineError::Forbidden { .. }
    )
}

#[async_trait::async_trait]
impl Remover for Subscriptions {
    fn kind(&self) -> ResourceKind {
        outline_mirror::SUBSCRIPTION
    }

    async fn inspect(&self, repair: &Repair, credential: &[u8]) -> Inspected {
        let unproven = |detail: String| Inspected {
            ownership: Ownership::Unproven,
            detail,
        };
        let Ok(id) = Uuid::parse_str(&repair.vendor_id) else {
            return unproven("the stored subscription id is not a UUID".into());
        };
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return unproven(e),
        };
        let listed = match self.whole_listing(&client).await {
            Ok(listed) => listed,
            // Expiry, revocation or a non-admin token prove nothing; the fence waits for one.
            Err(Ok(e)) if refused_credential(&e) => {
                return Inspected {
                    ownership: Ownership::CredentialRefused,
                    detail: format!("Outline refused the credential listing subscriptions: {e}"),
                };
            }
            // A partial listing (a failed page, a hidden 404, the cap) proves nothing.
            Err(Ok(e)) => {
                return unproven(format!(
                    "the team's subscriptions could not be listed whole: {e}"
                ));
            }
            Err(Err(why)) => {
                return unproven(format!(
                    "the team's subscriptions could not be listed whole: {why}"
                ));
            }
        };
        match listed.iter().find(|s| s.id == Some(id)) {
            // Ownership proof: the captured hash of the URL it calls.
            Some(s)
                if repair.url_hash.as_deref().is_some_and(|hash| {
                    s.url
                        .as_deref()
                        .is_some_and(|url| store::inbound::sha256_hex(url.as_bytes()) == hash)
                }) =>
            {
                Inspected {
                    ownership: Ownership::Ours,
                    detail: "listed with our URL".into(),
                }
            }
            Some(_) => Inspected {
                ownership: Ownership::ForeignOwner,
                detail: "a subscription of this id is listed calling another URL".into(),
            },
            None => Inspected {
                ownership: Ownership::VerifiedAbsent,
                detail: "not in the team's whole subscription listing".into(),
            },
        }
    }

    async fn remove(&self, repair: &Repair, credential: &[u8]) -> (DispatchOutcome, String) {
        let Ok(id) = Uuid::parse_str(&repair.vendor_id) else {
            return (
                DispatchOutcome::Refused,
                "the stored subscription id is not a UUID".into(),
            );
        };
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return (DispatchOutcome::Refused, e),
        };
        match client.webhook_subscriptions_delete(id).await {
            Ok(()) => (DispatchOutcome::TerminalReceipt, "deleted".into()),
            Err(e) => {
                let outcome = match &e {
                    OutlineError::BadCredentials { .. } | OutlineError::Forbidden { .. } => {
                        DispatchOutcome::Unauthorized
                    }
                    // A 404 is no receipt: it may be hidden from this token.
                    OutlineError::NotFound { .. } => DispatchOutcome::of_response(Some(404)),
                    OutlineError::RateLimited { .. } => DispatchOutcome::of_response(Some(429)),
                    OutlineError::Status { status, .. } => {
                        DispatchOutcome::of_response(Some(*status))
                    }
                    // Nothing was sent.
                    OutlineError::Refused { .. }
                    | OutlineError::Request { .. }
                    | OutlineError::BudgetExhausted { .. } => DispatchOutcome::Refused,
                    // No answer, a 5xx, or one we could not read: it may have landed.
                    OutlineError::Server { .. }
                    | OutlineError::Timeout { .. }
                    | OutlineError::DeadlinePassed { .. }
                    | OutlineError::Unreachable { .. }
                    | OutlineError::Decode { .. }
                    | OutlineError::TooLarge { .. } => DispatchOutcome::Uncertain,
                };
                (outcome, e.to_string())
            }
        }
    }
}
