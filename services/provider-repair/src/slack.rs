//! Slack bot tokens: the sealed token must be the one captured (its SHA-256), and `auth.test`
//! with it must name the captured team and bot user; then `auth.revoke` once, never retried
//! inside the attempt (a retry is a new attempt with its own permit).

use std::time::Duration;

use lifecycle_core::repair::{DispatchOutcome, Ownership};
use slack_client::{SLACK_API, Settings, SlackClient, SlackError};
use store::registration::ResourceKind;
use store::repair::Repair;

use crate::{Inspected, Remover};

/// Revokes the bot tokens of disconnected Slack connections.
pub struct BotTokens {
    /// The Web API base when the repair's instance names none (`FORGESYNC_SLACK_API_URL`).
    pub api_url: String,
    pub request_timeout: Duration,
}

/// Codes Slack answers a token it refuses (expired, invalid): no proof of anything.
const REFUSED: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_expired",
    "account_inactive",
];

/// Codes of Slack failing on its side: whatever was asked may have happened.
const SLACK_FAILED: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

impl BotTokens {
    fn client(&self, repair: &Repair, credential: &[u8]) -> Result<SlackClient, String> {
        let (token, base_url) =
            crate::token_and_base(repair, credential, &self.api_url, SLACK_API)?;
        let settings = Settings {
            base_url,
            retry: crate::one_attempt(),
            request_timeout: self.request_timeout,
        };
        SlackClient::new(&settings, token).map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl Remover for BotTokens {
    fn kind(&self) -> ResourceKind {
        slack_mirror::BOT_TOKEN
    }

    async fn inspect(&self, repair: &Repair, credential: &[u8]) -> Inspected {
        let unproven = |detail: String| Inspected {
            ownership: Ownership::Unproven,
            detail,
        };
        // Token identity: only the captured token may be revoked, never a replacement.
        if repair.url_hash.as_deref() != Some(store::inbound::sha256_hex(credential).as_str()) {
            return unproven("the sealed token is not the captured one".into());
        }
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return unproven(e),
        };
        match client.auth_test().await {
            // Team and bot-user identity, as captured.
            Ok(who) if format!("{}:{}", who.team_id, who.user_id) == repair.target => Inspected {
                ownership: Ownership::Ours,
                detail: "auth.test names the captured team and bot user".into(),
            },
            Ok(_) => Inspected {
                ownership: Ownership::ForeignOwner,
                detail: "auth.test names another team or bot user".into(),
            },
            // Slack says this very token is revoked: it is gone (by whoever revoked it).
            Err(e) if e.code() == Some("token_revoked") => Inspected {
                ownership: Ownership::VerifiedAbsent,
                detail: format!("{e}"),
            },
            // Expiry or refusal proves nothing; the fence waits for a credential.
            Err(e) if e.code().is_some_and(|c| REFUSED.contains(&c)) => Inspected {
                ownership: Ownership::CredentialRefused,
                detail: format!("Slack refused the token: {e}"),
            },
            Err(e) => unproven(format!("auth.test failed: {e}")),
        }
    }

    async fn remove(&self, repair: &Repair, credential: &[u8]) -> (DispatchOutcome, String) {
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return (DispatchOutcome::Refused, e),
        };
        match client.auth_revoke().await {
            Ok(true) => (DispatchOutcome::TerminalReceipt, "revoked".into()),
            Ok(false) => (
                DispatchOutcome::Refused,
                "Slack answered that nothing was revoked".into(),
            ),
            Err(e) => {
                let outcome = match &e {
                    // Revoked or refused before this call: this request did nothing.
                    SlackError::Api { error, .. }
                        if error == "token_revoked" || REFUSED.contains(&error.as_str()) =>
                    {
                        DispatchOutcome::Unauthorized
                    }
                    SlackError::Api { error, .. } if SLACK_FAILED.contains(&error.as_str()) => {
                        DispatchOutcome::Uncertain
                    }
                    SlackError::Api { .. } | SlackError::RateLimited { .. } => {
                        DispatchOutcome::Refused
                    }
                    // No answer, a 5xx, or one we could not read: it may have landed.
                    SlackError::Server { .. }
                    | SlackError::Timeout { .. }
                    | SlackError::DeadlinePassed { .. }
                    | SlackError::Unreachable { .. }
                    | SlackError::InvalidResponse { .. } => DispatchOutcome::Uncertain,
                };
                (outcome, e.to_string())
            }
        }
    }
}
