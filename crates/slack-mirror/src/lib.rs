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

/// Slack: its channels and messages, and the generic events it publishes. The bot token is the
/// operator's app installation; forgesync creates nothing else at Slack.
pub static SLACK: VendorDeclaration = VendorDeclaration {
    kind: ConnectionKind::Slack,
    holders: &[&erasure::ERASABLE],
    resource_kinds: &[],
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
