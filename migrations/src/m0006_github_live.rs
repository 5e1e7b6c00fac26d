//! Live GitHub webhooks: conversation comments, reviews, review threads and their comments,
//! reviewer snapshots and the head's check runs on pull requests, and the two event ledgers.
//!
//! `item_event` holds one row per lifecycle change of an issue or pull request; its unique keys
//! (item, name, source key) and (item, name, version) absorb a second report of the same change,
//! whichever path (webhook, late delivery, redelivery, sync) brings it. `activity_event` is the
//! per-workspace entry of the same change under the same source key. Both cascade with their
//! item, so erasing a repository's mirror takes its derived rows along.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
-- The provider date of the change that set the stored head (push ordering).
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_changed_at timestamptz;
-- Reviewer requests (people and teams) as a dated snapshot: when we received the list.
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS requested_reviewers jsonb;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS requested_reviewers_received_at timestamptz;
-- The runs behind the head's checks: which commit, when read, when they last changed, whether
-- every run of a complete list had ended.
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_runs jsonb;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_runs_sha text;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_runs_read_at timestamptz;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_runs_changed_at timestamptz;
ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_runs_finished boolean;
CREATE INDEX IF NOT EXISTS pull_request_number ON pull_request (repository_id, number);
CREATE INDEX IF NOT EXISTS issue_number ON issue (repository_id, number);

-- Conversation comments of an issue or a pull request (`issue_comment`).
CREATE TABLE IF NOT EXISTS comment (
    id                   uuid PRIMARY KEY,
    repository_id        uuid NOT NULL REFERENCES repository (id) ON DELETE CASCADE,
    issue_id             uuid REFERENCES issue (id) ON DELETE CASCADE,
    pull_request_id      uuid REFERENCES pull_request (id) ON DELETE CASCADE,
    native_id            bigint NOT NULL,
    node_id              text,
    author               text,
    body                 text,
    upstream_created_at  timestamptz NOT NULL,
    upstream_updated_at  timestamptz NOT NULL,
    deleted_at           timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    CHECK ((issue_id IS NULL) <> (pull_request_id IS NULL)),
    UNIQUE (repository_id, native_id)
);

CREATE TABLE IF NOT EXISTS review (
    id                   uuid PRIMARY KEY,
    pull_request_id      uuid NOT NULL REFERENCES pull_request (id) ON DELETE CASCADE,
    native_id            bigint NOT NULL,
    node_id              text,
    author               text,
    body                 text,
    state                text NOT NULL,
    commit_sha           text,
    submitted_at         timestamptz,
    upstream_updated_at  timestamptz NOT NULL,
    dismissed_at         timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pull_request_id, native_id)
);

CREATE TABLE IF NOT EXISTS review_thread (
    id                   uuid PRIMARY KEY,
    pull_request_id      uuid NOT NULL REFERENCES pull_request (id) ON DELETE CASCADE,
    node_id              text NOT NULL,
    path                 text,
    resolved             boolean,
    resolved_at          timestamptz,
    resolved_by          text,
    upstream_updated_at  timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pull_request_id, node_id)
);

CREATE TABLE IF NOT EXISTS review_comment (
    id                   uuid PRIMARY KEY,
    pull_request_id      uuid NOT NULL REFERENCES pull_request (id) ON DELETE CASCADE,
    thread_id            uuid REFERENCES review_thread (id) ON DELETE SET NULL,
    review_native_id     bigint,
    native_id            bigint NOT NULL,
    node_id              text,
    in_reply_to          bigint,
    path                 text,
    line                 integer,
    commit_sha           text,
    author               text,
    body                 text,
    upstream_created_at  timestamptz NOT NULL,
    upstream_updated_at  timestamptz NOT NULL,
    deleted_at           timestamptz,
    mirrored_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pull_request_id, native_id)
);

-- One row per lifecycle change of an item. `version` is the item's updated_at the change came
-- with; `source_key` its identity (NULL only for events from before source keys existed).
CREATE TABLE IF NOT EXISTS item_event (
    id               uuid PRIMARY KEY,
    issue_id         uuid REFERENCES issue (id) ON DELETE CASCADE,
    pull_request_id  uuid REFERENCES pull_request (id) ON DELETE CASCADE,
    item_id          uuid GENERATED ALWAYS AS (coalesce(issue_id, pull_request_id)) STORED,
    name             text NOT NULL,
    source_key       text,
    version          timestamptz NOT NULL,
    origin           text NOT NULL CHECK (origin IN ('webhook', 'sync')),
    occurred_at      timestamptz,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((issue_id IS NULL) <> (pull_request_id IS NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS item_event_source_key
    ON item_event (item_id, name, source_key) WHERE source_key IS NOT NULL;
-- A checks completion may repeat at one version (a re-run ends at another time).
CREATE UNIQUE INDEX IF NOT EXISTS item_event_version
    ON item_event (item_id, name, version) WHERE name <> 'scm.pull_request.checks_completed';

-- A workspace's activity entry of an item event, under the event's source key (a close or a
-- merge keeps its time key, the stored closedAt or mergedAt).
CREATE TABLE IF NOT EXISTS activity_event (
    id               uuid PRIMARY KEY,
    workspace_id     uuid NOT NULL REFERENCES workspace (id),
    issue_id         uuid REFERENCES issue (id) ON DELETE CASCADE,
    pull_request_id  uuid REFERENCES pull_request (id) ON DELETE CASCADE,
    item_id          uuid GENERATED ALWAYS AS (coalesce(issue_id, pull_request_id)) STORED,
    kind             text NOT NULL,
    source_key       text NOT NULL,
    item_event_id    uuid REFERENCES item_event (id) ON DELETE SET NULL,
    occurred_at      timestamptz,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((issue_id IS NULL) <> (pull_request_id IS NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS activity_event_source_key
    ON activity_event (workspace_id, item_id, kind, source_key);

-- Failed GitHub deliveries we asked GitHub to redeliver (each asked for once).
CREATE TABLE IF NOT EXISTS github_redelivery (
    connection_id  uuid NOT NULL REFERENCES connection (id),
    delivery_id    bigint NOT NULL,
    guid           text NOT NULL,
    event          text,
    delivered_at   timestamptz NOT NULL,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, delivery_id)
);
"#;
