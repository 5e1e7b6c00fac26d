//! Which deliveries are claims. An endpoint whose secret a tenant chose, or was shown, signs
//! nothing a tenant could not have signed itself: its deliveries are hints the consumer confirms
//! by reading the vendor, never facts it writes. Each of an endpoint's two open secrets carries
//! that mark (a rotation by an operator does not make the secret it replaced unknown to the
//! tenant), and each stored delivery keeps the mark of the secret that verified it, so a replay
//! or a redelivery is as much a claim as the original.
//!
//! Endpoints that exist already: those only an operator could create (app endpoints, those a
//! shared route selects by vendor id or operator token) and those forgesync registered itself
//! are not tenant-keyed; every other one is, since its creator is not recorded. Deliveries stored
//! before this change were applied as facts and keep that mark.

/// Applied once, as is.
pub(crate) const UP: &str = r#"
ALTER TABLE inbound_endpoint
    ADD COLUMN IF NOT EXISTS tenant_keyed boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS previous_tenant_keyed boolean NOT NULL DEFAULT true;
UPDATE inbound_endpoint SET tenant_keyed = false, previous_tenant_keyed = false
 WHERE (registration IN ('app', 'registered')
        OR (kind IN ('github', 'slack') AND provider_ref IS NOT NULL)
        OR (kind = 'gitlab' AND registration = 'operator'))
   AND tenant_keyed;
ALTER TABLE inbound_message ADD COLUMN IF NOT EXISTS tenant_signed boolean NOT NULL DEFAULT false;
ALTER TABLE inbound_message ALTER COLUMN tenant_signed DROP DEFAULT;
"#;
