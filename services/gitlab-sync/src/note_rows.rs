//! The one mapping of a GitLab note onto the mirror and its one forward-only write, whichever
//! path read the note (a Note Hook, an issue's REST listing, a merge request's discussions), so
//! a note becomes the same row on every path:
//!
//! - a note is known by `gid://gitlab/Note/<id>` and a thread by
//!   `gid://gitlab/Discussion/<hex>`, whatever global id type GitLab named it by;
//! - a diff note of a merge request is a `review_comment` filed under the `review_thread` of its
//!   discussion, replying to the thread's first comment; every other note is a `comment` of its
//!   issue or merge request; system notes are not mirrored;
//! - the author is the note's author; a reader that cannot tell who wrote it (a hook whose actor
//!   is not the author) keeps the stored one.

use gitlab_client::{Discussion, DiscussionNote};
use scm_mirror::comments::{self, Comment, CommentAction, CommentFields, ReviewComment};
use scm_mirror::events::{Item, ItemKind};
use scm_mirror::reviews::Thread;
use sqlx::AssertSqlSafe;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::webhooks::payload::{HookUser, NoteAttributes};

/// A note's node id: GitLab's global id of a note by its number (a diff or discussion note is a
/// note too).
pub fn note_node_id(id: i64) -> String {
    format!("gid://gitlab/Note/{id}")
}

/// A thread's node id: GitLab's global id of a discussion by its hex id (hooks name the hex id
/// alone, GraphQL the global id).
pub fn discussion_node_id(discussion: &str) -> String {
    let hex = discussion.rsplit('/').next().unwrap_or(discussion);
    format!("gid://gitlab/Discussion/{hex}")
}

/// A diff note's place in its merge request's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffPlace {
    /// The node id of its discussion: the review thread's.
    pub thread_node_id: String,
    /// The file (its new path, or the old one for a removed file).
    pub path: Option<String>,
    /// The line (in the new file, or the old one for a removed line).
    pub line: Option<i32>,
    /// The head it was written on.
    pub commit_sha: Option<String>,
}

/// A GitLab note as the mirror stores it.
#[derive(Debug, Clone)]
pub struct NoteRow {
    /// The issue or merge request it is on, locked by the writer.
    pub parent: Item,
    pub native_id: i64,
    pub node_id: String,
    /// `None`: the reader could not tell (the stored author stays).
    pub author: Option<String>,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    /// Set for a diff note of a merge request.
    pub diff: Option<DiffPlace>,
}

impl NoteRow {
    /// A Note Hook's note; `None` for a system note. The hook names its actor, who is the
    /// author only when the ids match (an edit can be someone else's).
    pub fn from_hook(parent: Item, n: &NoteAttributes, actor: &HookUser) -> Option<Self> {
        if n.system {
            return None;
        }
        let author = match (n.author_id, actor.id) {
            (Some(author), Some(actor_id)) if author != actor_id => None,
            _ => Some(actor.username.clone()),
        };
        let position = n.position.as_ref();
        let diff = (n.kind.as_deref() == Some("DiffNote")).then(|| DiffPlace {
            thread_node_id: n
                .discussion_id
                .as_deref()
                .map_or_else(|| note_node_id(n.id), discussion_node_id),
            path: position.and_then(|p| p.new_path.clone().or_else(|| p.old_path.clone())),
            line: position.and_then(|p| p.new_line.or(p.old_line)),
            commit_sha: position.and_then(|p| p.head_sha.clone()),
        });
        Some(NoteRow {
            parent,
            native_id: n.id,
            node_id: note_node_id(n.id),
            author,
            body: n.note.clone(),
            created_at: n.created_at.0,
            updated_at: n.updated_at.0,
            diff,
        })
    }

    /// A note of a REST listing (an issue's: no diff); `None` for a system note or one whose
    /// id or dates do not parse.
    pub fn from_rest(parent: Item, n: &gitlab_client::Note) -> Option<Self> {
        if n.system {
            return None;
        }
        let native_id = i64::try_from(n.id).ok()?;
        Some(NoteRow {
            parent,
            native_id,
            node_id: note_node_id(native_id),
            author: Some(n.author.username.clone()),
            body: n.body.clone(),
            created_at: OffsetDateTime::parse(&n.created_at, &Rfc3339).ok()?,
            updated_at: OffsetDateTime::parse(&n.updated_at, &Rfc3339).ok()?,
            diff: None,
        })
    }

    /// A note of merge request discussion `d`; `diff`: whether `d` is a diff thread. `None` for
    /// a system note or one whose global id names no number.
    pub fn from_discussion(
        parent: Item,
        d: &Discussion,
        diff: bool,
        n: &DiscussionNote,
    ) -> Option<Self> {
        if n.system {
            return None;
        }
        let native_id = i64::try_from(n.id.number()?).ok()?;
        let position = n.position.as_ref();
        let diff = diff.then(|| DiffPlace {
            thread_node_id: discussion_node_id(d.id.tail()),
            path: position.map(|p| p.file_path.clone()),
            line: position.and_then(|p| p.new_line.or(p.old_line)),
            commit_sha: position.map(|p| p.diff_refs.head_sha.clone()),
        });
        Some(NoteRow {
            parent,
            native_id,
            node_id: note_node_id(native_id),
            author: Some(n.author.username.clone()),
            body: n.body.clone(),
            created_at: n.created_at.0,
            updated_at: n.updated_at.0,
            diff,
        })
    }

    /// Writes the note forward-only over its row (the caller holds the parent locked); whether
    /// anything changed. `edit_at`: the parent's version when a hook reports an edit, which
    /// records one `comment_edited` event; a read or a creation records none.
    pub async fn write(
        &self,
        txn: &mut sqlx::PgConnection,
        edit_at: Option<OffsetDateTime>,
    ) -> Result<bool, sqlx::Error> {
        let (action, version) = match edit_at {
            Some(at) => (CommentAction::Edited, at),
            None => (CommentAction::Created, self.updated_at),
        };
        // A note is never deleted through this write: the tombstone date is unused.
        let unused_deleted_at = self.updated_at;
        let item = &self.parent;
        let table = match (&self.diff, item.kind) {
            (Some(_), ItemKind::PullRequest) => "review_comment",
            _ => "comment",
        };
        let author = match &self.author {
            Some(author) => Some(author.clone()),
            None => self.stored_author(txn, table).await?,
        };
        let fields = CommentFields {
            native_id: self.native_id,
            node_id: &self.node_id,
            author: author.as_deref(),
            body: Some(&self.body),
            created_at: self.created_at,
            updated_at: self.updated_at,
        };
        match (&self.diff, item.kind, item.columns()) {
            (Some(diff), ItemKind::PullRequest, (None, Some(pull_request_id))) => {
                let thread_id = Thread::ensure(
                    &mut *txn,
                    pull_request_id,
                    &diff.thread_node_id,
                    diff.path.as_deref(),
                    self.updated_at,
                )
                .await?;
                // A reply refers to the first comment of its thread, whatever order the
                // thread's notes arrive in (the merge request's lock orders its writers).
                let key = (self.created_at, self.native_id);
                let first: Option<i64> = sqlx::query_scalar(
                    "SELECT native_id FROM review_comment
                      WHERE thread_id = $1 AND (upstream_created_at, native_id) < ($2, $3)
                      ORDER BY upstream_created_at, native_id LIMIT 1",
                )
                .bind(thread_id)
                .bind(key.0)
                .bind(key.1)
                .fetch_optional(&mut *txn)
                .await?;
                let row = ReviewComment {
                    pull_request_id,
                    thread_id: Some(thread_id),
                    review_native_id: None,
                    in_reply_to: first,
                    path: diff.path.as_deref(),
                    line: diff.line,
                    commit_sha: diff.commit_sha.as_deref(),
                    fields,
                };
                let changed =
                    comments::apply(txn, item, action, &row, version, unused_deleted_at).await?;
                // A note stored before its thread was known is filed under it now.
                row.file_under(txn, thread_id).await?;
                if first.is_none() {
                    // The thread's first comment arrived after replies: they refer to it.
                    sqlx::query(
                        "UPDATE review_comment SET in_reply_to = $3
                          WHERE thread_id = $1 AND (upstream_created_at, native_id) > ($2, $3)",
                    )
                    .bind(thread_id)
                    .bind(key.0)
                    .bind(key.1)
                    .execute(&mut *txn)
                    .await?;
                }
                Ok(changed)
            }
            _ => {
                let row = Comment {
                    parent: *item,
                    fields,
                };
                comments::apply(txn, item, action, &row, version, unused_deleted_at).await
            }
        }
    }

    /// The author stored for this note in `table` (a literal of [`Self::write`]), if any.
    async fn stored_author(
        &self,
        txn: &mut sqlx::PgConnection,
        table: &'static str,
    ) -> Result<Option<String>, sqlx::Error> {
        let (scope, scope_id) = match (table, self.parent.columns()) {
            ("review_comment", (_, Some(pull_request_id))) => ("pull_request_id", pull_request_id),
            _ => ("repository_id", self.parent.repository_id),
        };
        let sql = format!("SELECT author FROM {table} WHERE {scope} = $1 AND native_id = $2");
        let author: Option<Option<String>> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(scope_id)
            .bind(self.native_id)
            .fetch_optional(&mut *txn)
            .await?;
        Ok(author.flatten())
    }
}
