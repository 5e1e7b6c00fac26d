//! What instance admins did to provider repair fences: each confirmation or release, by whom,
//! why, and the fence's status before and after. Keyed by the fence only (no workspace or
//! connection column), so the record stays with the fence after a workspace is purged.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS provider_repair_audit (
    id             uuid PRIMARY KEY,
    repair_id      uuid NOT NULL REFERENCES provider_resource_repair (id) ON DELETE CASCADE,
    -- The operator token's subject.
    actor          text NOT NULL,
    action         text NOT NULL CHECK (action IN ('confirm', 'release')),
    -- The uncertain attempt a confirmation names.
    attempt        bigint CHECK (attempt IS NULL OR attempt >= 0),
    reason         text NOT NULL,
    before_status  text NOT NULL,
    after_status   text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((action = 'confirm') = (attempt IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS provider_repair_audit_repair
    ON provider_repair_audit (repair_id, created_at);
"#;
