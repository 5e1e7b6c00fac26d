//! What the SCM mirror holds for the eraser, declared by GitHub and GitLab alike
//! ([`crate::vendors`]): the connection's monitors, the workspace's activity entries of repositories it stops covering,
//! and, for a repository no monitor anywhere covers any more, everything under it, derived rows
//! first (activity entries, item events and their generic ledger rows), then comments, reviews and threads, then the items,
//! then the repository. Tombstoned rows are selected like any other: erasure is a hard delete
//! and shares nothing with `items`' tombstones.

use store::entity::ConnectionKind;
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector};
use uuid::Uuid;

/// Rows of an item (issue or pull request) of repository `$n`, for tables keyed by item.
macro_rules! of_items {
    ($n:literal) => {
        concat!(
            "(issue_id IN (SELECT id FROM issue WHERE repository_id = $",
            $n,
            ") OR pull_request_id IN (SELECT id FROM pull_request WHERE repository_id = $",
            $n,
            "))"
        )
    };
}

/// Rows of a pull request of repository `$1`.
const OF_PULL_REQUESTS: &str =
    "pull_request_id IN (SELECT id FROM pull_request WHERE repository_id = $1)";

/// The SCM mirror's registration.
pub static ERASABLE: Erasable = Erasable {
    holder: "scm-mirror",
    order: 100,
    kinds: &[ConnectionKind::Github, ConnectionKind::Gitlab],
    tables: &[
        ErasableTable {
            table: "repository_to_monitor",
            selector: Selector::Monitors("connection_id = $1"),
        },
        ErasableTable {
            table: "activity_event",
            selector: Selector::WorkspaceRepository(concat!(
                "workspace_id = $1 AND ",
                of_items!("2")
            )),
        },
        ErasableTable {
            table: "activity_event",
            selector: Selector::Repository(of_items!("1")),
        },
        ErasableTable {
            table: "item_event",
            selector: Selector::Repository(of_items!("1")),
        },
        ErasableTable {
            table: "integration_event",
            selector: Selector::Repository("subject_kind = 'repository' AND subject_id = $1"),
        },
        ErasableTable {
            table: "review_comment",
            selector: Selector::Repository(OF_PULL_REQUESTS),
        },
        ErasableTable {
            table: "review_thread",
            selector: Selector::Repository(OF_PULL_REQUESTS),
        },
        ErasableTable {
            table: "review",
            selector: Selector::Repository(OF_PULL_REQUESTS),
        },
        ErasableTable {
            table: "merge_request_approval",
            selector: Selector::Repository(OF_PULL_REQUESTS),
        },
        ErasableTable {
            table: "merge_request_requested_change",
            selector: Selector::Repository(OF_PULL_REQUESTS),
        },
        ErasableTable {
            table: "comment",
            selector: Selector::Repository("repository_id = $1"),
        },
        ErasableTable {
            table: "issue",
            selector: Selector::Repository("repository_id = $1"),
        },
        ErasableTable {
            table: "pull_request",
            selector: Selector::Repository("repository_id = $1"),
        },
        ErasableTable {
            table: "repository",
            selector: Selector::Repository("id = $1"),
        },
        ErasableTable {
            table: "activity_event",
            selector: Selector::Workspace("workspace_id = $1"),
        },
    ],
    content: &[
        ContentTable {
            table: "issue",
            columns: &["title", "body", "author"],
        },
        ContentTable {
            table: "pull_request",
            columns: &["title", "body", "author", "requested_reviewers"],
        },
        ContentTable {
            table: "comment",
            columns: &["body", "author"],
        },
        ContentTable {
            table: "review",
            columns: &["body", "author"],
        },
        ContentTable {
            table: "review_comment",
            columns: &["body", "author", "path"],
        },
        ContentTable {
            table: "review_thread",
            columns: &["path", "resolved_by"],
        },
        ContentTable {
            table: "merge_request_approval",
            columns: &["username"],
        },
        ContentTable {
            table: "merge_request_requested_change",
            columns: &["username"],
        },
    ],
    streams: &[],
    // Item events name their repository; a workspace's copies go with its activity entries.
    repository_streams: &["EVENTS"],
    connection_subjects: store::erasure::no_subjects,
    // A workspace's item events are its own subject.
    workspace_subjects: |workspace_id| {
        vec![lifecycle_core::subject::events_of_workspace(
            &workspace_id.to_string(),
        )]
    },
};

/// GitHub's own bookkeeping of a connection: the redelivery requests it made and the App
/// installation it verified. Ids and times, no content, but tied to the connection.
pub static GITHUB: Erasable = Erasable {
    holder: "github",
    order: 110,
    kinds: &[ConnectionKind::Github],
    tables: &[
        ErasableTable {
            table: "github_redelivery",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "connection_grant",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[],
    streams: &[],
    repository_streams: &[],
    connection_subjects: store::erasure::no_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};

/// GitLab's own rows of a connection: where its activation stands (discovery counts, the
/// reasons GitLab gave) and each project's listing state in the engine's `listing_state`
/// (watermark, backfill progress), which goes before the repository it belongs to. The hooks we registered deliver on subjects of the
/// connection alone, purged whole.
pub static GITLAB: Erasable = Erasable {
    holder: "gitlab",
    // Before the SCM mirror: its repository rows are deleted after this holder's.
    order: 90,
    kinds: &[ConnectionKind::Gitlab],
    tables: &[
        ErasableTable {
            table: "listing_state",
            selector: Selector::Repository("scope_kind = 'repository' AND scope_id = $1"),
        },
        // Empty since m0026 moved its rows to `listing_state`; declared until it is dropped.
        ErasableTable {
            table: "gitlab_listing_state",
            selector: Selector::Repository("repository_id = $1"),
        },
        ErasableTable {
            table: "gitlab_activation",
            selector: Selector::Connection("connection_id = $1"),
        },
    ],
    content: &[],
    streams: &[],
    repository_streams: &[],
    connection_subjects: gitlab_connection_subjects,
    workspace_subjects: store::erasure::no_workspace_subjects,
};

/// The subjects of the hooks a GitLab connection registered: routed by connection alone.
fn gitlab_connection_subjects(
    _: &sqlx::PgPool,
    connection_id: Uuid,
) -> store::erasure::SubjectsFuture<'_> {
    let subjects = lifecycle_core::subject::filter_subjects(&[
        lifecycle_core::subject::Monitor::GitlabConnection {
            connection_id: connection_id.to_string(),
        },
    ]);
    Box::pin(async move { Ok(subjects) })
}
