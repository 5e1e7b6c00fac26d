//! A vendor's declaration: what the platform must know of a vendor without a shared enum, a
//! registry or a `match kind` to edit. Each vendor writes one, where its own code lives; the one
//! list of vendors (`crates/vendors`) collects them for the eraser, the erasure scan and the
//! schema check.
//!
//! What is declared as data here is what the platform reads across vendors. The vendor's
//! admission rule is a trait its webhook consumer calls ([`crate::admission`]), and its sync is
//! the engine's `Vendor` trait; neither needs a value in this list.

use crate::entity::ConnectionKind;
use crate::erasure::Erasable;
use crate::registration::ResourceKind;

/// One vendor, as it declares itself.
#[derive(Debug, Clone, Copy)]
pub struct VendorDeclaration {
    /// Its connections' kind.
    pub kind: ConnectionKind,
    /// Who holds its third-party content: every table, content column, stream and subject the
    /// eraser must reach for a connection of this kind. A holder two vendors share (the SCM
    /// mirror) is listed by both and runs once.
    pub holders: &'static [&'static Erasable],
    /// The kinds of resource it creates at the vendor (`provider_registration.resource_kind`),
    /// which provider repair removes.
    pub resource_kinds: &'static [ResourceKind],
    /// The item-event types it publishes on `events.<workspaceId>.<type>`: its event contract.
    pub event_types: &'static [&'static str],
}
