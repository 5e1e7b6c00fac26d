//! The one list of vendors. Each vendor declares what it holds where its own code lives
//! ([`store::declaration::VendorDeclaration`]); this crate collects the declarations, adds the
//! platform's own holders (ingress's raw copies, the generic event ledger, the bus's messages in
//! flight and dead), and serves what reads them across vendors: the eraser's holders
//! ([`holders`]), the erasure-completeness scan ([`scan`]) and the schema check ([`schema`]).
//!
//! Adding a vendor is one line in [`VENDORS`] (see docs/adding-a-vendor.md).
#![forbid(unsafe_code)]

pub mod scan;
pub mod schema;

use std::sync::LazyLock;

use store::declaration::VendorDeclaration;
use store::entity::ConnectionKind;
use store::erasure::Erasable;

/// Every vendor, as each declares itself.
pub const VENDORS: &[&VendorDeclaration] = &[
    &scm_mirror::vendors::GITHUB,
    &scm_mirror::vendors::GITLAB,
    &slack_mirror::SLACK,
    &outline_mirror::OUTLINE,
];

/// Holders of every vendor's content that belong to the platform, not to a vendor.
pub const PLATFORM: &[&Erasable] = &[
    &store::inbound::ERASABLE,
    &store::events::ERASABLE,
    &bus::dead::ERASABLE,
];

/// The declaration of `kind`, if a vendor declared it.
pub fn declaration(kind: ConnectionKind) -> Option<&'static VendorDeclaration> {
    VENDORS.iter().copied().find(|d| d.kind == kind)
}

/// Every holder of the platform and of [`VENDORS`], each once, in erasure order.
pub fn holders() -> &'static [&'static Erasable] {
    static ALL: LazyLock<Vec<&'static Erasable>> = LazyLock::new(|| collect(VENDORS));
    &ALL
}

/// Every holder of the platform and of `vendors`, each once (a holder two vendors declare runs
/// once), in erasure order. Tests that add a vendor of their own collect with it here.
pub fn collect(vendors: &[&'static VendorDeclaration]) -> Vec<&'static Erasable> {
    let mut all: Vec<&'static Erasable> = PLATFORM.to_vec();
    for holder in vendors.iter().flat_map(|v| v.holders.iter().copied()) {
        if !all.iter().any(|h| h.holder == holder.holder) {
            all.push(holder);
        }
    }
    all.sort_by_key(|h| h.order);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_two_vendors_share_is_collected_once() {
        let all = holders();
        let scm = all.iter().filter(|h| h.holder == "scm-mirror").count();
        assert_eq!(scm, 1);
        let names: Vec<&str> = all.iter().map(|h| h.holder).collect();
        for expected in ["ingress", "bus", "github", "gitlab", "slack", "outline"] {
            assert!(names.contains(&expected), "{names:?}");
        }
        assert!(all.windows(2).all(|w| w[0].order <= w[1].order));
    }

    #[test]
    fn holder_names_are_unique_across_declarations() {
        // Two different holders under one name would hide one of them from the eraser.
        let mut seen: Vec<&Erasable> = Vec::new();
        for holder in PLATFORM
            .iter()
            .copied()
            .chain(VENDORS.iter().flat_map(|v| v.holders.iter().copied()))
        {
            if let Some(same) = seen.iter().find(|h| h.holder == holder.holder) {
                assert!(
                    std::ptr::eq(*same, holder),
                    "two holders are named {}",
                    holder.holder
                );
            } else {
                seen.push(holder);
            }
        }
    }

    #[test]
    fn each_kind_is_declared_once_and_holds_its_holders() {
        for v in VENDORS {
            assert_eq!(VENDORS.iter().filter(|o| o.kind == v.kind).count(), 1);
            for h in v.holders {
                assert!(h.holds(v.kind), "{} does not hold {:?}", h.holder, v.kind);
            }
        }
    }
}
