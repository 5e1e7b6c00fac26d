//! The organization tier of the code hosts: an organization (a provider instance's root group,
//! global and never deleted), which connections bind it, its members, and its teams (GitLab's
//! subgroups) with theirs. Memberships carry the time the read that wrote them was requested,
//! so an older read changes nothing. No repository cascade reaches these rows: the tier is
//! erased by its own guard (no other live binding of the organization).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TABLE IF NOT EXISTS organization (
    id                    uuid PRIMARY KEY,
    provider_instance_id  uuid NOT NULL REFERENCES provider_instance (id),
    native_id             bigint NOT NULL,
    login                 text NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider_instance_id, native_id)
);

CREATE TABLE IF NOT EXISTS organization_binding (
    connection_id    uuid NOT NULL REFERENCES connection (id),
    workspace_id     uuid NOT NULL REFERENCES workspace (id),
    organization_id  uuid NOT NULL REFERENCES organization (id),
    bound_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, organization_id)
);
CREATE INDEX IF NOT EXISTS organization_binding_organization
    ON organization_binding (organization_id);

CREATE TABLE IF NOT EXISTS organization_membership (
    organization_id  uuid NOT NULL REFERENCES organization (id),
    user_native_id   bigint NOT NULL,
    username         text NOT NULL,
    access_level     integer NOT NULL,
    read_at          timestamptz NOT NULL,
    PRIMARY KEY (organization_id, user_native_id)
);

CREATE TABLE IF NOT EXISTS team (
    id               uuid PRIMARY KEY,
    organization_id  uuid NOT NULL REFERENCES organization (id),
    native_id        bigint NOT NULL,
    slug             text NOT NULL,
    UNIQUE (organization_id, native_id)
);

CREATE TABLE IF NOT EXISTS team_membership (
    team_id          uuid NOT NULL REFERENCES team (id) ON DELETE CASCADE,
    user_native_id   bigint NOT NULL,
    username         text NOT NULL,
    access_level     integer NOT NULL,
    read_at          timestamptz NOT NULL,
    PRIMARY KEY (team_id, user_native_id)
);
"#;
