//! What the simulated GitLab knows: groups in a tree, projects in groups, issues, merge
//! requests and their notes, group hooks, the accepted tokens and the rate-limit window. A change
//! of an issue, a merge request or a note made through the model's methods queues the hook
//! deliveries GitLab would make for it (see [`super::webhook`]).

use std::collections::{BTreeMap, BTreeSet};

use time::OffsetDateTime;

/// A group; `parent` is `None` for a top-level group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Native id (the global id is `gid://gitlab/Group/<id>`).
    pub id: u64,
    /// The parent group.
    pub parent: Option<u64>,
    /// Path segment.
    pub path: String,
    /// Display name.
    pub name: String,
}

/// A project in a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// Native id: stable across renames and moves.
    pub id: u64,
    /// The group it sits in directly.
    pub group: u64,
    /// Path segment.
    pub path: String,
    /// Display name.
    pub name: String,
    /// Archived.
    pub archived: bool,
}

/// What a new issue holds; the rest is defaulted.
#[derive(Debug, Clone)]
pub struct NewIssue {
    /// Title.
    pub title: String,
    /// Last update.
    pub updated_at: OffsetDateTime,
}

/// An issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Native id.
    pub id: u64,
    /// Project.
    pub project: u64,
    /// Number within the project.
    pub iid: u64,
    /// Title.
    pub title: String,
    /// Description.
    pub description: Option<String>,
    /// `opened`, `closed`.
    pub state: String,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Updated.
    pub updated_at: OffsetDateTime,
    /// Closed.
    pub closed_at: Option<OffsetDateTime>,
    /// Locked discussion.
    pub discussion_locked: bool,
    /// Author's username.
    pub author: String,
}

/// What a new merge request holds; the rest is defaulted.
#[derive(Debug, Clone)]
pub struct NewMergeRequest {
    /// Title.
    pub title: String,
    /// Last update.
    pub updated_at: OffsetDateTime,
}

/// A merge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    /// Native id.
    pub id: u64,
    /// Project.
    pub project: u64,
    /// Number within the project.
    pub iid: u64,
    /// Title.
    pub title: String,
    /// Description.
    pub description: Option<String>,
    /// `opened`, `closed`, `merged`.
    pub state: String,
    /// Draft.
    pub draft: bool,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Updated.
    pub updated_at: OffsetDateTime,
    /// Merged.
    pub merged_at: Option<OffsetDateTime>,
    /// Closed without a merge.
    pub closed_at: Option<OffsetDateTime>,
    /// Locked discussion.
    pub discussion_locked: bool,
    /// Source branch.
    pub source_branch: String,
    /// Target branch.
    pub target_branch: String,
    /// Head commit.
    pub diff_head_sha: Option<String>,
    /// `detailedMergeStatus` as GitLab spells it (`MERGEABLE`, `REQUESTED_CHANGES`, ...).
    pub detailed_merge_status: Option<String>,
    /// Approval rules met.
    pub approved: bool,
    /// Author's username.
    pub author: String,
    /// Reviewers with their review state (`APPROVED`, `UNREVIEWED`, ...).
    pub reviewers: Vec<(String, Option<String>)>,
    /// Whose approval stands, and since when, in the order given.
    pub approved_by: Vec<(String, OffsetDateTime)>,
    /// `mergeable`: whether it can be merged now.
    pub mergeable: bool,
    /// The merge commit, once merged.
    pub merge_commit_sha: Option<String>,
    /// Who merged it (`mergeUser`).
    pub merge_user: Option<String>,
}

/// Whose note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoteOn {
    /// An issue: (project, iid).
    Issue(u64, u64),
    /// A merge request: (project, iid).
    MergeRequest(u64, u64),
}

/// Where a diff note sits: a line of a file in the diff between the refs it was written on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffPosition {
    /// Path before the change.
    pub old_path: String,
    /// Path after the change (GraphQL's `filePath`).
    pub new_path: String,
    /// Line in the old file.
    pub old_line: Option<i32>,
    /// Line in the new file.
    pub new_line: Option<i32>,
    /// Merge base.
    pub base_sha: String,
    /// Start of the diff.
    pub start_sha: String,
    /// Head the note was written on.
    pub head_sha: String,
}

impl DiffPosition {
    /// A position on `new_line` of `path`, written on `head_sha`.
    pub fn line(path: &str, new_line: i32, head_sha: &str) -> Self {
        Self {
            old_path: path.to_owned(),
            new_path: path.to_owned(),
            old_line: None,
            new_line: Some(new_line),
            base_sha: format!("{:040x}", 0xba5e),
            start_sha: format!("{:040x}", 0x5747),
            head_sha: head_sha.to_owned(),
        }
    }
}

/// A note (user, system or diff). Every note belongs to a discussion: a lone note to its own,
/// a reply to its thread's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Note id.
    pub id: u64,
    /// Parent.
    pub on: NoteOn,
    /// `None`, `DiffNote` or `DiscussionNote`.
    pub kind: Option<String>,
    /// Body.
    pub body: String,
    /// Author's username.
    pub author: String,
    /// Written by GitLab.
    pub system: bool,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Updated (an edit moves it).
    pub updated_at: OffsetDateTime,
    /// Its discussion's id (40 hex digits, as GitLab's REST shows it).
    pub discussion: String,
    /// Set on a diff note (and on replies in a diff thread).
    pub position: Option<DiffPosition>,
}

/// Whether GitLab still executes a hook, as its API's `alert_status` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAlert {
    /// `executable`
    Executable,
    /// `temporarily_disabled`: not executed until `disabled_until`.
    TemporarilyDisabled,
    /// `disabled`: never executed again until re-enabled.
    Disabled,
}

impl HookAlert {
    /// As GitLab's API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            HookAlert::Executable => "executable",
            HookAlert::TemporarilyDisabled => "temporarily_disabled",
            HookAlert::Disabled => "disabled",
        }
    }
}

impl Note {
    /// Whether it can be resolved: a thread note (diff or discussion), never a lone or system
    /// note.
    pub fn resolvable(&self) -> bool {
        !self.system && self.kind.is_some()
    }
}

/// A group hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// Hook id.
    pub id: u64,
    /// Group.
    pub group: u64,
    /// Target URL.
    pub url: String,
    /// `X-Gitlab-Token` it sends.
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
    /// `X-Gitlab-Webhook-UUID`: the hook's own identity.
    pub uuid: String,
    /// Whether GitLab still executes it.
    pub alert_status: HookAlert,
    /// Until when a temporarily disabled hook rests.
    pub disabled_until: Option<OffsetDateTime>,
    /// Failed executions in a row.
    pub recent_failures: u32,
    /// How often it was disabled temporarily since its last success.
    pub backoff_count: u32,
    /// Project events (created, destroyed, renamed, transferred).
    pub project_events: bool,
    /// Subgroup events (renames).
    pub subgroup_events: bool,
    /// Member events.
    pub member_events: bool,
}

/// A pipeline run on a project's commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub id: u64,
    pub project: u64,
    /// The commit it runs on.
    pub sha: String,
    /// The branch it runs for.
    pub git_ref: String,
    /// The merge request of a merge request pipeline.
    pub merge_request: Option<u64>,
    /// GitLab's status (`pending`, `running`, `success`, `failed`, `canceled`, `skipped`).
    pub status: String,
    pub created_at: OffsetDateTime,
    /// When its status last changed.
    pub updated_at: OffsetDateTime,
}

/// The rate-limit window every call draws on (GitLab counts requests, one each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// `RateLimit-Limit`.
    pub limit: u32,
    /// `RateLimit-Remaining`.
    pub remaining: u32,
    /// `RateLimit-Reset`.
    pub reset_at: OffsetDateTime,
}

/// A fixed start for generated times, so runs are reproducible.
pub const EPOCH: OffsetDateTime = time::macros::datetime!(2026-01-01 00:00 UTC);

/// A new `updated_at` after `previous`: now (whole seconds, as GitLab's hooks state it), or a
/// second after `previous` when that is later.
pub(crate) fn later(previous: OffsetDateTime) -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.max(previous + time::Duration::seconds(1))
}

/// Notes by id, indexed by parent as GitLab's own tables are: a parent's notes (and its
/// `userNotesCount`) are found without reading every note of the instance. Reads go through
/// the map (`Deref`); writes through [`Notes::insert`], [`Notes::remove`] and
/// [`Notes::get_mut`], which keep the index (a note never changes parent).
#[derive(Debug, Clone, Default)]
pub struct Notes {
    by_id: BTreeMap<u64, Note>,
    by_parent: BTreeMap<NoteOn, BTreeSet<u64>>,
}

impl Notes {
    /// Adds or replaces a note.
    pub fn insert(&mut self, id: u64, note: Note) -> Option<Note> {
        let on = note.on;
        let old = self.by_id.insert(id, note);
        if let Some(old) = &old {
            self.unindex(old.on, id);
        }
        self.by_parent.entry(on).or_default().insert(id);
        old
    }

    /// Removes a note.
    pub fn remove(&mut self, id: &u64) -> Option<Note> {
        let old = self.by_id.remove(id)?;
        self.unindex(old.on, *id);
        Some(old)
    }

    /// A note to edit in place; its parent (`on`) must stay as it is.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut Note> {
        self.by_id.get_mut(id)
    }

    /// A parent's notes in id (creation) order.
    pub fn of(&self, on: NoteOn) -> impl Iterator<Item = &Note> {
        self.by_parent
            .get(&on)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
            .filter(move |n| n.on == on)
    }

    fn unindex(&mut self, on: NoteOn, id: u64) {
        if let Some(ids) = self.by_parent.get_mut(&on) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_parent.remove(&on);
            }
        }
    }
}

impl std::ops::Deref for Notes {
    type Target = BTreeMap<u64, Note>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

/// The simulated instance.
#[derive(Debug, Clone)]
pub struct Model {
    /// Groups by id.
    pub groups: BTreeMap<u64, Group>,
    /// Projects by id.
    pub projects: BTreeMap<u64, Project>,
    /// Issues by (project, iid).
    pub issues: BTreeMap<(u64, u64), Issue>,
    /// Merge requests by (project, iid).
    pub merge_requests: BTreeMap<(u64, u64), MergeRequest>,
    /// Notes by id (and by parent).
    pub notes: Notes,
    /// Group hooks by id.
    pub hooks: BTreeMap<u64, Hook>,
    /// Pipelines by id.
    pub pipelines: BTreeMap<u64, Pipeline>,
    /// Direct group members by (group, user id).
    pub members: BTreeMap<(u64, u64), super::groups::Member>,
    /// Resolved discussions by id.
    pub resolved_discussions: BTreeSet<String>,
    /// Tokens accepted (as `Authorization: Bearer` or `PRIVATE-TOKEN`).
    pub tokens: BTreeSet<String>,
    /// The rate-limit window.
    pub rate_limit: RateLimit,
    /// The instance's external URL (payload links, `X-Gitlab-Instance`); the server sets it.
    pub instance_url: String,
    /// Hook deliveries made by changes, not sent yet.
    pub(crate) pending_hooks: Vec<super::webhook::Pending>,
    next_id: u64,
    /// The latest time the model handed out: a note is saved after it, as at GitLab's "now".
    clock: OffsetDateTime,
}

impl Default for Model {
    fn default() -> Self {
        Self {
            groups: BTreeMap::new(),
            projects: BTreeMap::new(),
            issues: BTreeMap::new(),
            merge_requests: BTreeMap::new(),
            notes: Notes::default(),
            hooks: BTreeMap::new(),
            pipelines: BTreeMap::new(),
            members: BTreeMap::new(),
            resolved_discussions: BTreeSet::new(),
            tokens: BTreeSet::new(),
            rate_limit: RateLimit {
                limit: 2000,
                remaining: 2000,
                reset_at: OffsetDateTime::now_utc() + time::Duration::minutes(1),
            },
            instance_url: "https://gitlab.example.com".into(),
            pending_hooks: Vec::new(),
            next_id: 1,
            clock: EPOCH,
        }
    }
}

impl Model {
    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Accepts `token`.
    pub fn add_token(&mut self, token: &str) {
        self.tokens.insert(token.to_owned());
    }

    /// Adds a group under `parent`; returns its id.
    pub fn add_group(&mut self, parent: Option<u64>, path: &str) -> u64 {
        let id = self.id();
        self.groups.insert(
            id,
            Group {
                id,
                parent,
                path: path.to_owned(),
                name: path.to_owned(),
            },
        );
        id
    }

    /// Adds a project to `group`; returns its id.
    pub fn add_project(&mut self, group: u64, path: &str) -> u64 {
        let id = self.id();
        self.projects.insert(
            id,
            Project {
                id,
                group,
                path: path.to_owned(),
                name: path.to_owned(),
                archived: false,
            },
        );
        id
    }

    /// Renames project `id` (its path and name); its id stays. `false` when there is none.
    pub fn rename_project(&mut self, id: u64, path: &str) -> bool {
        let Some(p) = self.projects.get_mut(&id) else {
            return false;
        };
        p.path = path.to_owned();
        p.name = path.to_owned();
        true
    }

    /// Moves project `id` into `group` (a transfer, within or across root groups); its id
    /// stays. `false` when either is missing.
    pub fn move_project(&mut self, id: u64, group: u64) -> bool {
        if !self.groups.contains_key(&group) {
            return false;
        }
        let Some(p) = self.projects.get_mut(&id) else {
            return false;
        };
        p.group = group;
        true
    }

    fn next_iid(&self, project: u64) -> u64 {
        let issues = self.issues.keys().filter(|(p, _)| *p == project);
        let mrs = self.merge_requests.keys().filter(|(p, _)| *p == project);
        // Issues and merge requests number separately in GitLab; a shared counter is harmless.
        // Above every number in use, so deleting a row never makes the next one collide.
        issues.chain(mrs).map(|(_, iid)| *iid).max().unwrap_or(0) + 1
    }

    /// Adds an issue; returns its iid.
    pub fn add_issue(&mut self, project: u64, new: NewIssue) -> u64 {
        let id = self.id();
        let iid = self.next_iid(project);
        self.clock = self.clock.max(new.updated_at);
        self.issues.insert(
            (project, iid),
            Issue {
                id,
                project,
                iid,
                title: new.title,
                description: None,
                state: "opened".into(),
                created_at: EPOCH,
                updated_at: new.updated_at,
                closed_at: None,
                discussion_locked: false,
                author: "alice".into(),
            },
        );
        self.issue_changed(project, iid, "open", None);
        iid
    }

    /// Adds a merge request; returns its iid.
    pub fn add_merge_request(&mut self, project: u64, new: NewMergeRequest) -> u64 {
        let id = self.id();
        let iid = self.next_iid(project);
        self.clock = self.clock.max(new.updated_at);
        self.merge_requests.insert(
            (project, iid),
            MergeRequest {
                id,
                project,
                iid,
                title: new.title,
                description: None,
                state: "opened".into(),
                draft: false,
                created_at: EPOCH,
                updated_at: new.updated_at,
                merged_at: None,
                closed_at: None,
                discussion_locked: false,
                source_branch: format!("feature-{iid}"),
                target_branch: "main".into(),
                diff_head_sha: Some(format!("{iid:040x}")),
                detailed_merge_status: Some("MERGEABLE".into()),
                approved: true,
                author: "alice".into(),
                reviewers: Vec::new(),
                approved_by: Vec::new(),
                mergeable: true,
                merge_commit_sha: None,
                merge_user: None,
            },
        );
        self.merge_request_changed(project, iid, "open", None);
        iid
    }

    /// Adds a note starting its own discussion; returns its id. A `DiffNote` gets a position on
    /// line 1 of `README.md` at the merge request's head.
    pub fn add_note(&mut self, on: NoteOn, body: &str, system: bool, kind: Option<&str>) -> u64 {
        let position = (kind == Some("DiffNote")).then(|| {
            let head = match on {
                NoteOn::MergeRequest(p, i) => self
                    .merge_requests
                    .get(&(p, i))
                    .and_then(|mr| mr.diff_head_sha.clone()),
                NoteOn::Issue(..) => None,
            };
            DiffPosition::line(
                "README.md",
                1,
                &head.unwrap_or_else(|| format!("{:040x}", 1)),
            )
        });
        self.insert_note(on, body, system, kind, None, position)
    }

    /// Adds a diff note at `position`, starting a resolvable thread; returns its id.
    pub fn add_diff_note(&mut self, on: NoteOn, body: &str, position: DiffPosition) -> u64 {
        self.insert_note(on, body, false, Some("DiffNote"), None, Some(position))
    }

    /// Adds a reply to `to`'s discussion (a diff thread's reply is a diff note at the same
    /// position); returns its id, or `None` when `to` is unknown.
    pub fn add_reply(&mut self, to: u64, body: &str) -> Option<u64> {
        let first = self.notes.get(&to)?.clone();
        let kind = first
            .kind
            .clone()
            .unwrap_or_else(|| "DiscussionNote".into());
        Some(self.insert_note(
            first.on,
            body,
            false,
            Some(&kind),
            Some(first.discussion),
            first.position,
        ))
    }

    /// Edits note `id`'s body (GitLab sends an `update` note hook); `false` when it does not
    /// exist.
    pub fn edit_note(&mut self, id: u64, body: &str) -> bool {
        let Some(note) = self.notes.get_mut(&id) else {
            return false;
        };
        note.body = body.to_owned();
        note.updated_at = later(note.updated_at);
        self.note_changed(id, "update");
        true
    }

    /// `user` requests changes on merge request (`project`, `iid`): GitLab withdraws their
    /// approval (no hook of its own), moves them to `REQUESTED_CHANGES` if they review it, and
    /// writes its "requested changes" system note by them (a Note Hook). The note's id; `None`
    /// when the merge request does not exist.
    pub fn request_changes(&mut self, project: u64, iid: u64, user: &str) -> Option<u64> {
        let mr = self.merge_requests.get_mut(&(project, iid))?;
        // The note is saved after everything already done to the merge request.
        let touched = mr.updated_at;
        mr.approved_by.retain(|(u, _)| u != user);
        for (reviewer, state) in &mut mr.reviewers {
            if reviewer == user {
                *state = Some("REQUESTED_CHANGES".into());
            }
        }
        self.clock = self.clock.max(touched);
        let on = NoteOn::MergeRequest(project, iid);
        Some(self.insert_note_by(user, on, "requested changes", true, None, None, None))
    }

    fn insert_note(
        &mut self,
        on: NoteOn,
        body: &str,
        system: bool,
        kind: Option<&str>,
        discussion: Option<String>,
        position: Option<DiffPosition>,
    ) -> u64 {
        self.insert_note_by("bob", on, body, system, kind, discussion, position)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_note_by(
        &mut self,
        author: &str,
        on: NoteOn,
        body: &str,
        system: bool,
        kind: Option<&str>,
        discussion: Option<String>,
        position: Option<DiffPosition>,
    ) -> u64 {
        let id = self.id();
        let at =
            (EPOCH + time::Duration::seconds(id as i64)).max(self.clock + time::Duration::SECOND);
        self.clock = at;
        // Saving a note touches its parent (GitLab's `touch_noteable`).
        let touched = match on {
            NoteOn::Issue(p, i) => self.issues.get_mut(&(p, i)).map(|x| &mut x.updated_at),
            NoteOn::MergeRequest(p, i) => self
                .merge_requests
                .get_mut(&(p, i))
                .map(|x| &mut x.updated_at),
        };
        if let Some(updated_at) = touched {
            *updated_at = (*updated_at).max(at);
        }
        self.notes.insert(
            id,
            Note {
                id,
                on,
                kind: kind.map(str::to_owned),
                body: body.to_owned(),
                author: author.to_owned(),
                system,
                created_at: at,
                updated_at: at,
                discussion: discussion.unwrap_or_else(|| format!("{id:040x}")),
                position,
            },
        );
        self.note_changed(id, "create");
        id
    }

    /// Changes issue (`project`, `iid`) with `f` and sends the hook GitLab would (`close`,
    /// `reopen` or `update`); `updated_at` moves to now unless `f` set it. `false` when the
    /// issue does not exist.
    pub fn update_issue(&mut self, project: u64, iid: u64, f: impl FnOnce(&mut Issue)) -> bool {
        let Some(issue) = self.issues.get_mut(&(project, iid)) else {
            return false;
        };
        let before = issue.clone();
        f(issue);
        if issue.updated_at == before.updated_at {
            issue.updated_at = later(before.updated_at);
        }
        let action = match (before.state.as_str(), issue.state.as_str()) {
            ("opened", "closed") => {
                issue.closed_at.get_or_insert(issue.updated_at);
                "close"
            }
            ("closed", "opened") => {
                issue.closed_at = None;
                "reopen"
            }
            _ => "update",
        };
        self.issue_changed(project, iid, action, Some(&before));
        true
    }

    /// Changes merge request (`project`, `iid`) with `f` and sends the hook GitLab would
    /// (`merge`, `close`, `reopen` or `update`); `updated_at` moves to now unless `f` set it.
    /// `false` when the merge request does not exist.
    pub fn update_merge_request(
        &mut self,
        project: u64,
        iid: u64,
        f: impl FnOnce(&mut MergeRequest),
    ) -> bool {
        let Some(mr) = self.merge_requests.get_mut(&(project, iid)) else {
            return false;
        };
        let before = mr.clone();
        f(mr);
        if mr.updated_at == before.updated_at {
            mr.updated_at = later(before.updated_at);
        }
        let action = match (before.state.as_str(), mr.state.as_str()) {
            ("opened", "merged") => {
                mr.merged_at.get_or_insert(mr.updated_at);
                let commit = format!("{:040x}", 0xfeed_0000_u64 + mr.id);
                mr.merge_commit_sha.get_or_insert(commit);
                "merge"
            }
            ("opened", "closed") => {
                mr.closed_at.get_or_insert(mr.updated_at);
                "close"
            }
            ("closed", "opened") => {
                mr.closed_at = None;
                "reopen"
            }
            _ => "update",
        };
        self.merge_request_changed(project, iid, action, Some(&before));
        true
    }

    /// `user` approves merge request (`project`, `iid`) and GitLab sends its Merge Request Hook
    /// (`approved` for the first approval, `approval` after); `updated_at` moves to now. `false`
    /// when the merge request does not exist or `user` already approved it.
    pub fn approve_merge_request(&mut self, project: u64, iid: u64, user: &str) -> bool {
        let Some(mr) = self.merge_requests.get_mut(&(project, iid)) else {
            return false;
        };
        if mr.approved_by.iter().any(|(u, _)| u == user) {
            return false;
        }
        mr.updated_at = later(mr.updated_at);
        let action = if mr.approved_by.is_empty() {
            "approved"
        } else {
            "approval"
        };
        mr.approved_by.push((user.to_owned(), mr.updated_at));
        self.approval_changed(project, iid, action, user);
        true
    }

    /// `user` withdraws their approval of merge request (`project`, `iid`) and GitLab sends its
    /// Merge Request Hook (`unapproved` when no approval is left, `unapproval` otherwise).
    /// `false` when the merge request does not exist or `user` had not approved it.
    pub fn unapprove_merge_request(&mut self, project: u64, iid: u64, user: &str) -> bool {
        let Some(mr) = self.merge_requests.get_mut(&(project, iid)) else {
            return false;
        };
        let before = mr.approved_by.len();
        mr.approved_by.retain(|(u, _)| u != user);
        if mr.approved_by.len() == before {
            return false;
        }
        mr.updated_at = later(mr.updated_at);
        let action = if mr.approved_by.is_empty() {
            "unapproved"
        } else {
            "unapproval"
        };
        self.approval_changed(project, iid, action, user);
        true
    }

    /// Starts a `pending` pipeline on the head of merge request (`project`, `iid`) for its
    /// source branch and sends its Pipeline Hook; its id, `None` when the merge request does not
    /// exist or has no head.
    pub fn start_pipeline(&mut self, project: u64, iid: u64) -> Option<u64> {
        let mr = self.merge_requests.get(&(project, iid))?;
        let (sha, git_ref) = (mr.diff_head_sha.clone()?, mr.source_branch.clone());
        let id = self.id();
        let at = later(self.clock);
        self.clock = at;
        self.pipelines.insert(
            id,
            Pipeline {
                id,
                project,
                sha,
                git_ref,
                merge_request: Some(iid),
                status: "pending".into(),
                created_at: at,
                updated_at: at,
            },
        );
        self.pipeline_changed(id);
        Some(id)
    }

    /// Moves pipeline `id` to `status` and sends its Pipeline Hook; `false` when it does not
    /// exist.
    pub fn set_pipeline_status(&mut self, id: u64, status: &str) -> bool {
        let clock = self.clock;
        let Some(p) = self.pipelines.get_mut(&id) else {
            return false;
        };
        p.status = status.to_owned();
        p.updated_at = later(clock.max(p.updated_at));
        self.clock = p.updated_at;
        self.pipeline_changed(id);
        true
    }

    /// A parent's discussions, oldest first, each with its notes oldest first.
    pub fn discussions_of(&self, on: NoteOn) -> Vec<(String, Vec<&Note>)> {
        let mut out: Vec<(String, Vec<&Note>)> = Vec::new();
        for note in self.notes_of(on) {
            match out.iter_mut().find(|(id, _)| *id == note.discussion) {
                Some((_, notes)) => notes.push(note),
                None => out.push((note.discussion.clone(), vec![note])),
            }
        }
        out
    }

    /// A group's full path (`top/sub`).
    pub fn group_path(&self, id: u64) -> Option<String> {
        let group = self.groups.get(&id)?;
        Some(match group.parent {
            Some(parent) => format!("{}/{}", self.group_path(parent)?, group.path),
            None => group.path.clone(),
        })
    }

    /// A project's full path (`top/sub/project`).
    pub fn project_path(&self, id: u64) -> Option<String> {
        let project = self.projects.get(&id)?;
        Some(format!(
            "{}/{}",
            self.group_path(project.group)?,
            project.path
        ))
    }

    /// The group at `full_path`.
    pub fn group_by_path(&self, full_path: &str) -> Option<u64> {
        self.groups
            .keys()
            .copied()
            .find(|id| self.group_path(*id).as_deref() == Some(full_path))
    }

    /// The project at `full_path`.
    pub fn project_by_path(&self, full_path: &str) -> Option<u64> {
        self.projects
            .keys()
            .copied()
            .find(|id| self.project_path(*id).as_deref() == Some(full_path))
    }

    /// Every group below `id`, all levels, in id order.
    pub fn descendants(&self, id: u64) -> Vec<u64> {
        self.groups
            .values()
            .filter(|g| {
                let mut up = g.parent;
                while let Some(p) = up {
                    if p == id {
                        return true;
                    }
                    up = self.groups.get(&p).and_then(|g| g.parent);
                }
                false
            })
            .map(|g| g.id)
            .collect()
    }

    /// A parent's notes in creation order.
    pub fn notes_of(&self, on: NoteOn) -> Vec<&Note> {
        self.notes.of(on).collect()
    }

    /// User notes (not system) of a parent.
    pub fn user_notes_count(&self, on: NoteOn) -> usize {
        self.notes_of(on).iter().filter(|n| !n.system).count()
    }
}
