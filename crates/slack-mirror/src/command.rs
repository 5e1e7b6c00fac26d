//! `lifecycle.slack.<connectionId>.channel`: an operator's command on one channel (consent,
//! pause, resume, withdrawal), committed by control-api with its audit entry and carried out
//! by slack-ingest under the channel's lock.

use lifecycle_core::slack::ChannelCommand;
use serde::{Deserialize, Serialize};
use store::contracts::Contract;
use store::headers;
use uuid::Uuid;

/// The subject's transition token.
pub const TRANSITION: &str = "channel";

/// One command on one channel of a connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelCommandMessage {
    /// The request's id: the message's dedup key.
    pub id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    /// Our id of the channel (`slack_channel.id`).
    pub channel_id: Uuid,
    pub command: ChannelCommand,
    pub actor: String,
    /// RFC 3339: when the operator asked.
    pub at: String,
}

impl Contract for ChannelCommandMessage {
    fn subject(&self) -> String {
        lifecycle_core::subject::lifecycle("slack", &self.connection_id.to_string(), TRANSITION)
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (headers::WORKSPACE, self.workspace_id.to_string()),
            (headers::CONNECTION, self.connection_id.to_string()),
        ]
    }
    fn msg_id(&self) -> Option<String> {
        Some(format!("slack-channel-command:{}", self.id))
    }
}
