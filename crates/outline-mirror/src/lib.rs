//! Outline's mirror: the collections a connection reads ([`collection`]) and their documents
//! ([`document`]), the admission every delivery passes ([`admission`]), the generic events it
//! publishes ([`events`]) and Outline's declaration ([`OUTLINE`]). outline-sync writes these
//! tables, control-api reads them; both go through here.
//!
//! Every row is keyed by the connection that read it and never shared: a second connection to
//! the same Outline team keeps its own copy. Every write takes an [`OutlineConnection`], and every
//! read a workspace, so no query can reach another tenant's rows.
#![forbid(unsafe_code)]

pub mod admission;
pub mod collection;
pub mod document;
pub mod erasure;
pub mod events;

pub use collection::{apply as apply_collection, tombstone as tombstone_collection};
pub use document::{apply as apply_document, tombstone as tombstone_document};

use store::declaration::VendorDeclaration;
use store::entity::ConnectionKind;
use store::registration::ResourceKind;
use uuid::Uuid;

/// The webhook subscription forgesync creates at Outline for a connection.
pub const SUBSCRIPTION: ResourceKind = ResourceKind::new("outline_subscription");

/// The engine's scope kinds for Outline (`sync_engine::listing_state::ScopeKey::kind`): the team
/// (its collections; the scope id is the connection's) and one collection (its documents; the
/// scope id is the `outline_collection` row's). Their listing state is erased with the
/// connection.
pub mod scope {
    pub const TEAM: &str = "outline_team";
    pub const COLLECTION: &str = "outline_collection";
}

/// Outline: its collections and documents, the subscription it creates at Outline, and the
/// generic events it publishes.
pub static OUTLINE: VendorDeclaration = VendorDeclaration {
    kind: ConnectionKind::Outline,
    holders: &[&erasure::ERASABLE],
    resource_kinds: &[SUBSCRIPTION],
    event_types: events::EVENT_TYPES,
};

/// An Outline connection, as every write is bound to it. Only [`OutlineConnection::load`] makes
/// one, from a connection row of kind `outline`, so a write cannot name another tenant's
/// connection or another vendor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlineConnection {
    id: Uuid,
    workspace_id: Uuid,
}

impl OutlineConnection {
    /// The Outline connection `connection_id`; `None` when there is none of that kind.
    pub async fn load<'e, E: sqlx::PgExecutor<'e>>(
        db: E,
        connection_id: Uuid,
    ) -> Result<Option<OutlineConnection>, sqlx::Error> {
        let row: Option<(Uuid, Uuid)> = sqlx::query_as(
            "SELECT id, workspace_id FROM connection WHERE id = $1 AND kind = 'outline'",
        )
        .bind(connection_id)
        .fetch_optional(db)
        .await?;
        Ok(row.map(|(id, workspace_id)| OutlineConnection { id, workspace_id }))
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    pub fn workspace_id(&self) -> Uuid {
        self.workspace_id
    }
}
