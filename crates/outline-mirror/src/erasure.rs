//! What Outline holds, for the eraser: a connection's documents, collections and the engine's
//! listing state of its scopes, deleted whole; and the subjects its subscription delivers on,
//! which belong to the connection alone. Raw deliveries and their stream copies are ingress's
//! holder; the generic events, the events holder's. The subscription itself is provider
//! repair's to delete (its registration is retained).

use store::entity::ConnectionKind;
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector, SubjectsFuture};
use uuid::Uuid;

pub static ERASABLE: Erasable = Erasable {
    holder: "outline",
    // Before the raw copies the mirror was built from (ingress, 200).
    order: 90,
    kinds: &[ConnectionKind::Outline],
    tables: &[
        // Scope rows name the collections they belong to: before them.
        ErasableTable {
            table: "listing_state",
            selector: Selector::Connection(
                "(scope_kind = 'outline_team' AND scope_id = $1)
                 OR (scope_kind = 'outline_collection'
                     AND scope_id IN (SELECT id FROM outline_collection WHERE connection_id = $1))",
            ),
        },
        ErasableTable {
            table: "outline_document",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "outline_collection",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[
        ContentTable {
            table: "outline_document",
            columns: &["title", "text"],
        },
        ContentTable {
            table: "outline_collection",
            columns: &["name"],
        },
    ],
    streams: &[],
    repository_streams: &[],
    connection_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};

/// The subjects an Outline connection's subscription delivers on: routed by connection alone.
fn connection_subjects(_: &sqlx::PgPool, connection_id: Uuid) -> SubjectsFuture<'_> {
    let subjects = lifecycle_core::subject::filter_subjects(&[
        lifecycle_core::subject::Monitor::OutlineConnection {
            connection_id: connection_id.to_string(),
        },
    ]);
    Box::pin(async move { Ok(subjects) })
}
