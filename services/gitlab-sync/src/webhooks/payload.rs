//! GitLab's Issue, Merge Request, Note, Pipeline and Push Hook bodies, as far as the mirror reads
//! them. Hooks carry fewer facts than GraphQL: no merge time, no note counts, an author only as
//! an id. A fact a hook lacks stays unknown (`None`), so the stored value is kept.

use serde::{Deserialize, Deserializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A hook time: GitLab writes `2026-01-01 10:00:00 UTC`; RFC 3339 is read too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookTime(pub OffsetDateTime);

impl HookTime {
    pub fn parse(text: &str) -> Option<HookTime> {
        if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
            return Some(HookTime(t));
        }
        let f =
            time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
        time::PrimitiveDateTime::parse(text, &f)
            .ok()
            .map(|t| HookTime(t.assume_utc()))
    }
}

impl<'de> Deserialize<'de> for HookTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        HookTime::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a GitLab time: {text:?}")))
    }
}

/// The project a hook is about.
#[derive(Debug, Clone, Deserialize)]
pub struct HookProject {
    /// Native id: what projects are matched by.
    pub id: i64,
    /// `group/sub/project` now.
    pub path_with_namespace: String,
}

/// Who acted.
#[derive(Debug, Clone, Deserialize)]
pub struct HookUser {
    /// GitLab's user id (a note's `author_id` names its author by it).
    #[serde(default)]
    pub id: Option<i64>,
    pub username: String,
}

/// `object_attributes` of an Issue Hook (also the `issue` of a Note Hook).
#[derive(Debug, Clone, Deserialize)]
pub struct IssueAttributes {
    pub id: i64,
    pub iid: i32,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `opened` or `closed`.
    pub state: String,
    pub created_at: HookTime,
    pub updated_at: HookTime,
    #[serde(default)]
    pub closed_at: Option<HookTime>,
    #[serde(default)]
    pub discussion_locked: Option<bool>,
    /// `open`, `close`, `reopen`, `update` (absent on a Note Hook's issue).
    #[serde(default)]
    pub action: Option<String>,
}

/// The head commit a merge request hook names.
#[derive(Debug, Clone, Deserialize)]
pub struct LastCommit {
    pub id: String,
}

/// `object_attributes` of a Merge Request Hook (also the `merge_request` of a Note Hook).
#[derive(Debug, Clone, Deserialize)]
pub struct MergeRequestAttributes {
    pub id: i64,
    pub iid: i32,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `opened`, `closed`, `merged` or `locked`.
    pub state: String,
    #[serde(default)]
    pub draft: Option<bool>,
    pub created_at: HookTime,
    pub updated_at: HookTime,
    #[serde(default)]
    pub source_branch: Option<String>,
    #[serde(default)]
    pub target_branch: Option<String>,
    #[serde(default)]
    pub last_commit: Option<LastCommit>,
    /// The previous head of a push (`update` with new commits).
    #[serde(default)]
    pub oldrev: Option<String>,
    /// `open`, `close`, `reopen`, `update`, `merge`, `approved`, ... (absent on a Note Hook's
    /// merge request).
    #[serde(default)]
    pub action: Option<String>,
    /// What GitLab itself did, on a system-started hook (`approvals_reset_on_push`,
    /// `code_owner_approvals_reset_on_push`).
    #[serde(default)]
    pub system_action: Option<String>,
}

/// A change an update hook reports: `{previous, current}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Change<T> {
    #[serde(default)]
    pub previous: Option<T>,
    #[serde(default)]
    pub current: Option<T>,
}

/// The `changes` of a merge request hook that the mirror reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MergeRequestChanges {
    #[serde(default)]
    pub draft: Option<Change<bool>>,
}

/// An Issue Hook.
#[derive(Debug, Clone, Deserialize)]
pub struct IssueHook {
    pub user: Option<HookUser>,
    pub project: HookProject,
    pub object_attributes: IssueAttributes,
}

/// A Merge Request Hook.
#[derive(Debug, Clone, Deserialize)]
pub struct MergeRequestHook {
    pub user: Option<HookUser>,
    pub project: HookProject,
    pub object_attributes: MergeRequestAttributes,
    #[serde(default)]
    pub changes: MergeRequestChanges,
    /// The whole reviewer list; `None` when the hook has none (not an empty list).
    #[serde(default)]
    pub reviewers: Option<Vec<HookReviewer>>,
}

/// A reviewer a Merge Request Hook names: with their review state from GitLab 18.6, without
/// before.
#[derive(Debug, Clone, Deserialize)]
pub struct HookReviewer {
    pub username: String,
    #[serde(default)]
    pub state: Option<String>,
}

/// A diff note's place.
#[derive(Debug, Clone, Deserialize)]
pub struct NotePosition {
    #[serde(default)]
    pub new_path: Option<String>,
    #[serde(default)]
    pub old_path: Option<String>,
    #[serde(default)]
    pub new_line: Option<i32>,
    #[serde(default)]
    pub old_line: Option<i32>,
    #[serde(default)]
    pub head_sha: Option<String>,
}

/// `object_attributes` of a Note Hook.
#[derive(Debug, Clone, Deserialize)]
pub struct NoteAttributes {
    pub id: i64,
    pub note: String,
    /// The note's author by user id (the hook's `user` is whoever acted).
    #[serde(default)]
    pub author_id: Option<i64>,
    /// `Issue`, `MergeRequest`, `Commit`, `Snippet`.
    pub noteable_type: String,
    #[serde(default)]
    pub system: bool,
    /// `null`, `DiffNote` or `DiscussionNote`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub created_at: HookTime,
    pub updated_at: HookTime,
    #[serde(default)]
    pub discussion_id: Option<String>,
    #[serde(default)]
    pub position: Option<NotePosition>,
    /// `create` or `update` (GitLab 16.11+; absent before: a creation).
    #[serde(default)]
    pub action: Option<String>,
}

/// A Note Hook: the note and the issue or merge request it is on.
#[derive(Debug, Clone, Deserialize)]
pub struct NoteHook {
    pub user: HookUser,
    pub project: HookProject,
    pub object_attributes: NoteAttributes,
    #[serde(default)]
    pub issue: Option<IssueAttributes>,
    #[serde(default)]
    pub merge_request: Option<MergeRequestAttributes>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gitlabs_hook_times_and_rfc3339() {
        let t = HookTime::parse("2026-01-02 03:04:05 UTC").unwrap().0;
        assert_eq!(t, time::macros::datetime!(2026-01-02 03:04:05 UTC));
        let r = HookTime::parse("2026-01-02T03:04:05.250Z").unwrap().0;
        assert_eq!(r, time::macros::datetime!(2026-01-02 03:04:05.25 UTC));
        assert!(HookTime::parse("yesterday").is_none());
    }
}

/// `object_attributes` of a Pipeline Hook: the pipeline, its commit and its branch.
#[derive(Debug, Clone, Deserialize)]
pub struct PipelineAttributes {
    pub id: i64,
    /// The branch (or tag) it ran for; a merge request pipeline's is the MR's ref.
    #[serde(rename = "ref", default)]
    pub git_ref: Option<String>,
    /// The commit it ran on.
    pub sha: String,
    /// GitLab's pipeline status (`pending`, `running`, `success`, `failed`, ...).
    pub status: String,
}

/// The merge request a merge request pipeline belongs to.
#[derive(Debug, Clone, Deserialize)]
pub struct PipelineMergeRequest {
    pub iid: i32,
}

/// A Pipeline Hook.
#[derive(Debug, Clone, Deserialize)]
pub struct PipelineHook {
    pub project: HookProject,
    pub object_attributes: PipelineAttributes,
    /// Set for a merge request pipeline.
    #[serde(default)]
    pub merge_request: Option<PipelineMergeRequest>,
}

/// A Push Hook: a branch of the project moved from `before` to `after`. Every field is optional
/// here so that a payload missing one is refused naming it ([`super::pushes`]).
#[derive(Debug, Clone, Deserialize)]
pub struct PushHook {
    pub project: HookProject,
    /// `refs/heads/<branch>`.
    #[serde(rename = "ref", default)]
    pub git_ref: Option<String>,
    /// The branch's head before the push (all zeros: the branch was created).
    #[serde(default)]
    pub before: Option<String>,
    /// The branch's head after the push (all zeros: the branch was deleted).
    #[serde(default)]
    pub after: Option<String>,
}
