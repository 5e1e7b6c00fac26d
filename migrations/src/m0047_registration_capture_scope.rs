//! Which lifecycle transitions capture a registration for removal (`captured_on`): what a
//! suspended or uninstalled holder must give up (GitLab hooks, Outline subscriptions:
//! `leaving_active`, every row so far), or what it keeps until it is disconnected (a Slack bot
//! token, a GitHub App installation: `disconnect`). Such a resource is recorded when the
//! connection binds it, as an adopted registration of the current generation; it has no marker
//! of ours, so its `marker` is a fresh id and `url_hash` the proof its remover checks (a token's
//! fingerprint).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
ALTER TABLE provider_registration
    ADD COLUMN IF NOT EXISTS captured_on text NOT NULL DEFAULT 'leaving_active';
ALTER TABLE provider_registration
    DROP CONSTRAINT IF EXISTS provider_registration_captured_on_known;
ALTER TABLE provider_registration
    ADD CONSTRAINT provider_registration_captured_on_known
    CHECK (captured_on IN ('leaving_active', 'disconnect'));
"#;
