//! `provider_registration.resource_kind` is open: each vendor declares the kinds of resource it
//! creates in its own crate, so the column's list of allowed kinds (which grew per vendor) gives
//! way to a format check every declared kind meets.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE provider_registration
    DROP CONSTRAINT IF EXISTS provider_registration_resource_kind_check;
ALTER TABLE provider_registration
    DROP CONSTRAINT IF EXISTS provider_registration_resource_kind_format;
ALTER TABLE provider_registration
    ADD CONSTRAINT provider_registration_resource_kind_format
    CHECK (resource_kind ~ '^[a-z][a-z0-9_]*$');
"#;
