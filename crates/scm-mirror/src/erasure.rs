//! What the SCM mirror registers with the eraser (for github-sync now, gitlab-sync later): the
//! connection's monitors, the workspace's activity entries of repositories it stops covering,
//! and, for a repository no monitor anywhere covers any more, everything under it, derived rows
//! first (activity entries, item events), then comments, reviews and threads, then the items,
//! then the repository. Tombstoned rows are selected like any other: erasure is a hard delete
//! and shares nothing with `items`' tombstones.

use store::entity::ConnectionKind;
use store::erasure::{Erasable, ErasableTable, Selector};

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
pub const ERASABLE: Erasable = Erasable {
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
        // gitlab-sync's listing state of the project (watermark, backfill progress).
        ErasableTable {
            table: "gitlab_listing_state",
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
        // The connection's own bookkeeping with GitHub.
        ErasableTable {
            table: "github_redelivery",
            selector: Selector::Connection("connection_id = $1"),
        },
        ErasableTable {
            table: "connection_grant",
            selector: Selector::Connection("connection_id = $1"),
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
