//! What each workspace stored a day, of deliveries it signed itself: the bytes its quota
//! bounds. Counts only; days before yesterday are pruned by ingress's retention.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS workspace_usage (
    workspace_id  uuid NOT NULL,
    day           date NOT NULL,
    stored_bytes  bigint NOT NULL DEFAULT 0,
    deliveries    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, day)
);
"#;
