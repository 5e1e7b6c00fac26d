//! The REST objects of the contract: flat notes and group hooks with GitLab's paging headers, a
//! project, a merge request's close.

use serde::{Deserialize, Serialize};

/// Whose notes: an issue or a merge request of a project (by native ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoteParent {
    /// `/projects/{project}/issues/{iid}/notes`
    Issue {
        /// Project id.
        project: u64,
        /// Issue number within the project.
        iid: u64,
    },
    /// `/projects/{project}/merge_requests/{iid}/notes`
    MergeRequest {
        /// Project id.
        project: u64,
        /// Merge request number within the project.
        iid: u64,
    },
}

impl NoteParent {
    pub(crate) fn notes_path(self) -> String {
        match self {
            NoteParent::Issue { project, iid } => format!("projects/{project}/issues/{iid}/notes"),
            NoteParent::MergeRequest { project, iid } => {
                format!("projects/{project}/merge_requests/{iid}/notes")
            }
        }
    }
}

/// A note's author.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct NoteAuthor {
    /// User id.
    pub id: u64,
    /// Username.
    pub username: String,
}

/// One note as the flat notes endpoint lists it (user, system and diff notes alike).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Note {
    /// Note id.
    pub id: u64,
    /// `null` for a plain note, `DiffNote` or `DiscussionNote`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Markdown body.
    pub body: String,
    /// The author.
    pub author: NoteAuthor,
    /// Created (RFC 3339).
    pub created_at: String,
    /// Updated (RFC 3339).
    pub updated_at: String,
    /// Whether GitLab wrote it (state changes, approvals, review requests).
    pub system: bool,
}

/// GitLab's offset paging headers of one page, raw as sent: a missing header is `None`, never
/// a guess, and the text is kept so a caller can log exactly what GitLab said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageHeaders {
    /// `X-Page`.
    pub page: Option<String>,
    /// `X-Next-Page` (empty on the last page).
    pub next_page: Option<String>,
    /// `X-Total` (GitLab omits it past 10,000).
    pub total: Option<String>,
}

impl PageHeaders {
    /// `X-Total` as a number, when sent and numeric.
    pub fn total(&self) -> Option<u64> {
        self.total.as_deref()?.trim().parse().ok()
    }

    /// The next page: `Some(Some(n))` when one follows, `Some(None)` when `X-Next-Page` says
    /// this is the last, `None` when the header is missing or unreadable (the listing's end is
    /// then unknown).
    pub fn next(&self) -> Option<Option<u32>> {
        let text = self.next_page.as_deref()?.trim();
        if text.is_empty() {
            return Some(None);
        }
        text.parse().ok().map(Some)
    }

    /// `X-Page` as a number.
    pub fn page(&self) -> Option<u32> {
        self.page.as_deref()?.trim().parse().ok()
    }

    pub(crate) fn from_map(headers: &reqwest::header::HeaderMap) -> Self {
        let raw = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        PageHeaders {
            page: raw("x-page"),
            next_page: raw("x-next-page"),
            total: raw("x-total"),
        }
    }
}

/// One page of a parent's notes.
#[derive(Debug, Clone)]
pub struct NotesPage {
    /// The notes, in GitLab's order.
    pub notes: Vec<Note>,
    /// The paging headers as sent.
    pub headers: PageHeaders,
}

/// One page of a group's hooks.
#[derive(Debug, Clone)]
pub struct GroupHooksPage {
    /// The hooks, in GitLab's order.
    pub hooks: Vec<GroupHook>,
    /// The paging headers as sent.
    pub headers: PageHeaders,
}

/// A group hook as GitLab lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupHook {
    /// Hook id.
    pub id: u64,
    /// Where GitLab sends.
    pub url: String,
    /// The group.
    pub group_id: u64,
    /// Issue events.
    #[serde(default)]
    pub issues_events: bool,
    /// Merge request events.
    #[serde(default)]
    pub merge_requests_events: bool,
    /// Note events.
    #[serde(default)]
    pub note_events: bool,
    /// Set while GitLab has disabled the hook after failures (RFC 3339).
    #[serde(default)]
    pub disabled_until: Option<String>,
    /// `executable`, `temporarily_disabled` or `permanently_disabled` (16.x+); `None` if absent.
    #[serde(default)]
    pub alert_status: Option<String>,
}

/// A group hook to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewGroupHook {
    /// Where GitLab should send.
    pub url: String,
    /// Sent back as `X-Gitlab-Token`.
    pub token: String,
    /// Issue events.
    pub issues_events: bool,
    /// Merge request events.
    pub merge_requests_events: bool,
    /// Note events.
    pub note_events: bool,
    /// Pipeline events.
    pub pipeline_events: bool,
    /// Push events.
    pub push_events: bool,
    /// TLS verification of our endpoint.
    pub enable_ssl_verification: bool,
    /// Project events: created, destroyed, renamed, transferred.
    pub project_events: bool,
    /// Subgroup events.
    pub subgroup_events: bool,
    /// Member events.
    pub member_events: bool,
}

/// A project as `GET /projects/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RestProject {
    /// Native id.
    pub id: u64,
    /// Path segment.
    pub path: String,
    /// `group/sub/project`.
    pub path_with_namespace: String,
    /// Archived.
    #[serde(default)]
    pub archived: bool,
    /// The namespace it sits in.
    pub namespace: RestNamespace,
}

/// A project's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RestNamespace {
    /// Namespace (group) id.
    pub id: u64,
    /// Full path.
    pub full_path: String,
    /// `group` or `user`.
    pub kind: String,
}

/// A merge request as `GET /projects/{id}/merge_requests/{iid}` answers, reduced to what
/// GraphQL cannot give every supported instance: its close time (GraphQL's `closedAt` is
/// GitLab 17.4 and later; REST's `closed_at` is much older).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RestMergeRequest {
    /// Native id.
    pub id: u64,
    /// Number within the project.
    pub iid: u64,
    /// `opened`, `closed`, `locked` or `merged`.
    pub state: String,
    /// When it was last closed; `None` while it is not closed.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub closed_at: Option<time::OffsetDateTime>,
}

impl RestMergeRequest {
    /// Its close time, when it is closed without a merge and GitLab names the time.
    pub fn close_time(&self) -> Option<time::OffsetDateTime> {
        self.closed_at.filter(|_| self.state == "closed")
    }
}

/// A merge request's approvals as `GET /projects/{id}/merge_requests/{iid}/approvals` answers,
/// reduced to whose approval stands and since when. `approvals_required` is not read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct MergeRequestApprovals {
    /// Native id of the merge request.
    pub id: u64,
    /// Number within the project.
    pub iid: u64,
    /// Its state (`opened`, `merged`, ...).
    #[serde(default)]
    pub state: Option<String>,
    /// Its `updated_at`.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub updated_at: Option<time::OffsetDateTime>,
    /// Whose approval stands.
    #[serde(default)]
    pub approved_by: Vec<RestApproval>,
}

/// One standing approval.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RestApproval {
    /// The approver.
    pub user: RestUser,
    /// When the standing approval was created; `None` where GitLab does not say (older GitLab).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub approved_at: Option<time::OffsetDateTime>,
}

/// A user as REST names one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RestUser {
    /// Username.
    pub username: String,
}

/// GitLab's REST error body: `message` (string or object) or `error`.
#[derive(Deserialize)]
pub(crate) struct MessageBody {
    #[serde(default)]
    pub(crate) message: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) error: Option<String>,
}

impl MessageBody {
    pub(crate) fn text(self) -> Option<String> {
        match (self.message, self.error) {
            (Some(serde_json::Value::String(s)), _) => Some(s),
            (Some(other), _) => Some(other.to_string()),
            (None, error) => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_sent_and_missing_ones_stay_unknown() {
        let last = PageHeaders {
            page: Some("3".into()),
            next_page: Some(String::new()),
            total: Some("42".into()),
        };
        assert_eq!(
            (last.page(), last.next(), last.total()),
            (Some(3), Some(None), Some(42))
        );
        let bare = PageHeaders::default();
        assert_eq!((bare.page(), bare.next(), bare.total()), (None, None, None));
        let garbled = PageHeaders {
            next_page: Some("x".into()),
            ..PageHeaders::default()
        };
        assert_eq!(garbled.next(), None);
    }
}
