//! Outline subscription ids are scoped to the workspace. An Outline delivery is addressed by its
//! endpoint's token, never selected by the subscription id, so the id need not be unique across
//! workspaces; kept globally unique, a workspace could claim another's subscription id first and
//! refuse it its own endpoint. The global rule (m0013) keeps the kinds a shared route selects by
//! id; Outline's ids are unique among one workspace's enabled endpoints.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
DROP INDEX IF EXISTS inbound_endpoint_provider_ref_enabled;
CREATE UNIQUE INDEX IF NOT EXISTS inbound_endpoint_provider_ref_enabled
    ON inbound_endpoint (kind, provider_ref)
    WHERE status <> 'disabled' AND provider_ref IS NOT NULL
      AND NOT (kind = 'gitlab' AND registration = 'registered')
      AND kind <> 'outline';
CREATE UNIQUE INDEX IF NOT EXISTS inbound_endpoint_outline_subscription
    ON inbound_endpoint (workspace_id, provider_ref)
    WHERE status <> 'disabled' AND provider_ref IS NOT NULL AND kind = 'outline';
"#;
