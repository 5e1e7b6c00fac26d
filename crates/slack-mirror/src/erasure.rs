//! What Slack holds, for the eraser: a connection's messages and channels (consent included),
//! deleted whole. Raw deliveries and their stream copies are ingress's holder; the generic
//! events, the events holder's.

use store::entity::ConnectionKind;
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector};

pub static ERASABLE: Erasable = Erasable {
    holder: "slack",
    // Before the raw copies the mirror was built from (ingress, 200).
    order: 90,
    kinds: &[ConnectionKind::Slack],
    tables: &[
        ErasableTable {
            table: "slack_message",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "slack_channel",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[
        ContentTable {
            table: "slack_message",
            columns: &["text", "files", "user_id"],
        },
        ContentTable {
            table: "slack_channel",
            columns: &["name"],
        },
    ],
    streams: &[],
    repository_streams: &[],
    connection_subjects: store::erasure::no_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};
