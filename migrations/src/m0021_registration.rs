//! What we create at a vendor, recorded before the create call (`provider_registration`), and
//! where a GitLab connection's activation stands (`gitlab_activation`).
//!
//! A registration row is the one creation record provider repair reads: it carries the marker
//! the resource can be found by when the create's outcome is unknown, and the connection version
//! and lifecycle generation that asked (only they adopt the result; any other result is a removal
//! target). It has no workspace pointer and outlives the connection's erasure.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS provider_registration (
    id                    uuid PRIMARY KEY,
    connection_id         uuid NOT NULL,
    provider_instance_id  uuid NOT NULL REFERENCES provider_instance (id),
    resource_kind         text NOT NULL CHECK (resource_kind IN ('gitlab_group_hook')),
    -- The vendor-side place the resource is created in (a GitLab group id).
    target                text NOT NULL,
    -- Unguessable, and part of the resource as the vendor lists it (the hook URL).
    marker                text NOT NULL UNIQUE,
    url_hash              text NOT NULL,
    connection_version    bigint NOT NULL,
    lifecycle_generation  bigint NOT NULL,
    -- requested: sent or about to be, outcome unknown; created: the vendor holds it (vendor_id)
    -- but no current generation adopted it, so it is a removal target; adopted: the connection's
    -- own; failed: the vendor refused, nothing exists.
    state                 text NOT NULL DEFAULT 'requested'
                              CHECK (state IN ('requested', 'created', 'adopted', 'failed')),
    vendor_id             text,
    failure               text,
    -- The inbound endpoint the resource delivers to, when it has one.
    endpoint_id           uuid,
    requested_at          timestamptz NOT NULL DEFAULT now(),
    resolved_at           timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK ((state IN ('created', 'adopted')) = (vendor_id IS NOT NULL)),
    CHECK ((state = 'failed') = (failure IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS provider_registration_connection
    ON provider_registration (connection_id, requested_at DESC);
-- One resource of a kind per target for each connection version and generation: a second
-- request while one is unresolved or adopted is refused by the database. An unknown request of
-- an older generation stays visible for repair without blocking the current one.
CREATE UNIQUE INDEX IF NOT EXISTS provider_registration_one_live
    ON provider_registration (connection_id, resource_kind, target, connection_version,
                              lifecycle_generation)
    WHERE state IN ('requested', 'adopted');

CREATE TABLE IF NOT EXISTS gitlab_activation (
    connection_id          uuid PRIMARY KEY,
    workspace_id           uuid NOT NULL,
    discovery_complete     boolean NOT NULL DEFAULT false,
    discovery_reason       text,
    groups_found           bigint,
    projects_found         bigint,
    project_count          bigint,
    discovered_at          timestamptz,
    consumer               text,
    consumer_confirmed_at  timestamptz,
    consumer_reason        text,
    hook_reason            text,
    hook_disabled_until    timestamptz,
    hook_alert_status      text,
    hook_checked_at        timestamptz,
    updated_at             timestamptz NOT NULL DEFAULT now()
);
"#;
