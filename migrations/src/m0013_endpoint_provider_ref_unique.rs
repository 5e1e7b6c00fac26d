//! A vendor id that a shared route selects endpoints by (GitHub hook id, Slack team id, Outline
//! subscription id, GitLab group of an operator hook) belongs to one enabled endpoint at a time,
//! so one workspace cannot claim another's deliveries. Registered GitLab hooks are addressed by
//! their own route id and may share a group, so they stay out of the rule.
//!
//! Rows that already break the rule keep the first claim: among enabled endpoints sharing a
//! `(kind, provider_ref)`, every one but the oldest is disabled (never deleted, so its messages
//! and history remain) and each such change is written to `connection_audit`. The oldest is the
//! claim a later duplicate could have hijacked; re-enabling another is an operator's decision.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
WITH ranked AS (
    SELECT id, workspace_id, connection_id,
           row_number() OVER (PARTITION BY kind, provider_ref ORDER BY created_at, id) AS n
      FROM inbound_endpoint
     WHERE status <> 'disabled' AND provider_ref IS NOT NULL
       AND NOT (kind = 'gitlab' AND registration = 'registered')
),
disabled AS (
    UPDATE inbound_endpoint e SET status = 'disabled', updated_at = now()
      FROM ranked r
     WHERE r.id = e.id AND r.n > 1
    RETURNING e.id, e.workspace_id, e.connection_id
)
INSERT INTO connection_audit (id, connection_id, workspace_id, actor, action, before_status,
                              after_status, version)
SELECT gen_random_uuid(), d.connection_id, d.workspace_id, 'migration:m0013',
       'endpoint_disabled_duplicate_provider_ref:' || d.id::text, NULL, NULL, c.version
  FROM disabled d JOIN connection c ON c.id = d.connection_id;

CREATE UNIQUE INDEX IF NOT EXISTS inbound_endpoint_provider_ref_enabled
    ON inbound_endpoint (kind, provider_ref)
    WHERE status <> 'disabled' AND provider_ref IS NOT NULL
      AND NOT (kind = 'gitlab' AND registration = 'registered');
"#;
