//! Slack's mirror: the channels a connection sees with where their consent stands
//! ([`channel`]), the messages of consented channels from the announcement on ([`message`]),
//! the admission rule every delivery passes ([`admission`]), the operators' channel commands
//! ([`command`]), the generic events it publishes ([`events`]) and Slack's declaration
//! ([`SLACK`]). slack-ingest writes these tables, control-api reads them; both go through here.
//!
//! Every row is keyed by the connection that read it and never shared: a second connection to
//! the same Slack team keeps its own copy under its own consent.
#![forbid(unsafe_code)]

pub mod admission;
pub mod channel;
pub mod command;
pub mod erasure;
pub mod events;
pub mod message;

use store::declaration::VendorDeclaration;
use store::entity::ConnectionKind;
use store::registration::ResourceKind;

/// The bot token a connection holds at Slack (the app's installation in the team): revoked by
/// provider repair once the connection is disconnected; a suspended holder keeps it.
pub const BOT_TOKEN: ResourceKind = ResourceKind::new("slack_bot_token");

/// How a bot token is kept for its removal (`store::repair::KeptResource`): its target
/// `<team>:<bot user>` (a replacement token of the same bot user holds it too), its vendor id
/// (the target and the first 16 hex digits of the token's SHA-256) and its proof (the whole
/// SHA-256, checked against the sealed token before revocation).
pub fn bot_token_resource(team_id: &str, bot_user: &str, token: &[u8]) -> (String, String, String) {
    let target = format!("{team_id}:{bot_user}");
    let proof = store::inbound::sha256_hex(token);
    let vendor_id = format!("{target}:{}", &proof[..16]);
    (target, vendor_id, proof)
}

/// Slack: its channels and messages, the bot token it holds, and the generic events it
/// publishes.
pub static SLACK: VendorDeclaration = VendorDeclaration {
    kind: ConnectionKind::Slack,
    holders: &[&erasure::ERASABLE],
    resource_kinds: &[BOT_TOKEN],
    event_types: events::EVENT_TYPES,
};

/// A connection's settings: `{"team_id": "T..."}`, the Slack team its bot token must belong to.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Settings {
    pub team_id: String,
}

impl Settings {
    /// Reads a connection's settings; a missing or empty `team_id` is refused.
    pub fn from_settings(settings: &serde_json::Value) -> Result<Settings, String> {
        let parsed: Settings = serde_json::from_value(settings.clone())
            .map_err(|_| "Slack connection settings must name the `team_id`".to_owned())?;
        if parsed.team_id.trim().is_empty() {
            return Err("Slack connection settings name an empty `team_id`".to_owned());
        }
        Ok(parsed)
    }

    /// Whether `team` is the connection's team (Slack ids compare without case).
    pub fn is_team(&self, team: &str) -> bool {
        self.team_id.eq_ignore_ascii_case(team)
    }
}
