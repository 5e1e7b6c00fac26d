//! Group hooks as GitLab executes them: a change of an issue, a merge request or a note queues
//! one delivery per executable group hook of the project's group or an ancestor that subscribed
//! to the event; the server sends them to the hook's URL with GitLab's headers (`X-Gitlab-Event`,
//! `X-Gitlab-Token`, `X-Gitlab-Instance`, `X-Gitlab-Webhook-UUID`, `X-Gitlab-Event-UUID`,
//! `Idempotency-Key`) and a body shaped like GitLab's Issue, Merge Request and Note Hooks.
//!
//! A hook that keeps failing is disabled as GitLab does it: after [`TEMPORARY_AFTER`] failures
//! in a row it rests (`temporarily_disabled`, `disabled_until`) for a backoff that starts at a
//! minute and doubles up to a day; after [`DISABLED_AFTER`] failures in a row it is `disabled`
//! for good. A success makes it `executable` again. A resting or disabled hook is not executed.

use std::time::Duration;

use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::model::{Hook, HookAlert, Issue, MergeRequest, Model, Note, NoteOn, Pipeline, Project};

/// Failures in a row after which GitLab rests a hook.
pub const TEMPORARY_AFTER: u32 = 4;
/// Failures in a row after which GitLab disables a hook for good.
pub const DISABLED_AFTER: u32 = 40;
/// The first rest; each further one doubles, up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: time::Duration = time::Duration::minutes(1);
const MAX_BACKOFF: time::Duration = time::Duration::days(1);
/// How long GitLab waits for a receiver.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Which subscription of a hook an event needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    Issue,
    MergeRequest,
    Note,
    Pipeline,
    Push,
}

impl HookKind {
    /// `X-Gitlab-Event`.
    pub fn header(self) -> &'static str {
        match self {
            HookKind::Issue => "Issue Hook",
            HookKind::MergeRequest => "Merge Request Hook",
            HookKind::Note => "Note Hook",
            HookKind::Pipeline => "Pipeline Hook",
            HookKind::Push => "Push Hook",
        }
    }

    fn subscribed(self, hook: &Hook) -> bool {
        match self {
            HookKind::Issue => hook.issues_events,
            HookKind::MergeRequest => hook.merge_requests_events,
            HookKind::Note => hook.note_events,
            HookKind::Pipeline => hook.pipeline_events,
            HookKind::Push => hook.push_events,
        }
    }
}

/// One delivery queued by a change, for one hook.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub hook_id: u64,
    pub delivery: Delivery,
}

/// A delivery as GitLab sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `X-Gitlab-Event`.
    pub event: String,
    /// `X-Gitlab-Event-UUID`: one per event, shared by every hook it reaches.
    pub event_uuid: String,
    /// `Idempotency-Key`: one per event and hook, kept across retries.
    pub idempotency_key: String,
    /// The body.
    pub body: Vec<u8>,
}

impl Delivery {
    /// A delivery of `payload` as `event` (an `X-Gitlab-Event` value), with fresh ids.
    pub fn new(event: &str, payload: &Json) -> Delivery {
        Delivery {
            event: event.to_owned(),
            event_uuid: uuid::Uuid::new_v4().to_string(),
            idempotency_key: uuid::Uuid::new_v4().to_string(),
            body: serde_json::to_vec(payload).unwrap_or_default(),
        }
    }

    /// POSTs the delivery to `url` as GitLab does (10 s timeout) with `token` as
    /// `X-Gitlab-Token` (none when empty); the receiver's status.
    pub async fn send(
        &self,
        client: &reqwest::Client,
        url: &str,
        token: &str,
        hook_uuid: &str,
        instance: &str,
    ) -> Result<reqwest::StatusCode, reqwest::Error> {
        let mut request = client
            .post(url)
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header("user-agent", "GitLab/17.6.0")
            .header("x-gitlab-event", &self.event)
            .header("x-gitlab-instance", instance)
            .header("x-gitlab-webhook-uuid", hook_uuid)
            .header("x-gitlab-event-uuid", &self.event_uuid)
            .header("idempotency-key", &self.idempotency_key);
        if !token.is_empty() {
            request = request.header("x-gitlab-token", token);
        }
        let response = request.body(self.body.clone()).send().await?;
        let status = response.status();
        response.bytes().await?;
        Ok(status)
    }
}

/// One execution of a hook, as GitLab's "recent events" list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAttempt {
    pub hook_id: u64,
    /// `X-Gitlab-Event`.
    pub event: String,
    /// `X-Gitlab-Event-UUID`.
    pub event_uuid: String,
    /// The receiver's status; 0 when it could not be reached or timed out.
    pub status: u16,
    /// The body sent.
    pub body: Vec<u8>,
}

impl HookAttempt {
    /// Whether GitLab counts it as a success.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// GitLab's hook time format (`2026-01-01 10:00:00 UTC`).
pub fn hook_time(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    t.to_offset(time::UtcOffset::UTC)
        .format(&f)
        .unwrap_or_default()
}

fn opt_time(t: Option<OffsetDateTime>) -> Json {
    t.map_or(Json::Null, |t| json!(hook_time(t)))
}

/// A stable user id for a username.
fn user_id(username: &str) -> u64 {
    username
        .bytes()
        .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1_000_000
        + 1
}

fn user_json(m: &Model, username: &str) -> Json {
    json!({
        "id": user_id(username),
        "name": username,
        "username": username,
        "avatar_url": format!("{}/uploads/-/system/user/avatar/{}/avatar.png", m.instance_url, user_id(username)),
        "email": "[REDACTED]",
    })
}

fn project_json(m: &Model, p: &Project) -> Json {
    let path = m.project_path(p.id).unwrap_or_default();
    let web = format!("{}/{path}", m.instance_url);
    let host = m
        .instance_url
        .split("://")
        .nth(1)
        .unwrap_or(&m.instance_url)
        .to_owned();
    let ssh = format!("git@{host}:{path}.git");
    let http = format!("{web}.git");
    json!({
        "id": p.id,
        "name": p.name,
        "description": null,
        "web_url": web,
        "avatar_url": null,
        "git_ssh_url": ssh,
        "git_http_url": http,
        "namespace": m.groups.get(&p.group).map(|g| g.name.clone()).unwrap_or_default(),
        "visibility_level": 0,
        "path_with_namespace": path,
        "default_branch": "main",
        "ci_config_path": null,
        "homepage": web,
        "url": ssh,
        "ssh_url": ssh,
        "http_url": http,
    })
}

fn repository_json(m: &Model, p: &Project) -> Json {
    let project = project_json(m, p);
    json!({
        "name": p.name,
        "url": project["url"],
        "description": null,
        "homepage": project["homepage"],
    })
}

fn issue_attrs(m: &Model, i: &Issue) -> Json {
    let path = m.project_path(i.project).unwrap_or_default();
    json!({
        "author_id": user_id(&i.author),
        "closed_at": opt_time(i.closed_at),
        "confidential": false,
        "created_at": hook_time(i.created_at),
        "description": i.description.clone().unwrap_or_default(),
        "discussion_locked": i.discussion_locked,
        "due_date": null,
        "id": i.id,
        "iid": i.iid,
        "last_edited_at": null,
        "last_edited_by_id": null,
        "milestone_id": null,
        "moved_to_id": null,
        "duplicated_to_id": null,
        "project_id": i.project,
        "relative_position": 0,
        "state_id": if i.state == "closed" { 2 } else { 1 },
        "time_estimate": 0,
        "title": i.title,
        "updated_at": hook_time(i.updated_at),
        "updated_by_id": null,
        "type": "Issue",
        "url": format!("{}/{path}/-/issues/{}", m.instance_url, i.iid),
        "total_time_spent": 0,
        "time_change": 0,
        "human_total_time_spent": null,
        "human_time_change": null,
        "human_time_estimate": null,
        "assignee_ids": [],
        "assignee_id": null,
        "labels": [],
        "state": i.state,
        "severity": "unknown",
        "customer_relations_contacts": [],
    })
}

fn mr_attrs(m: &Model, r: &MergeRequest) -> Json {
    let path = m.project_path(r.project).unwrap_or_default();
    let project = m.projects.get(&r.project).map(|p| project_json(m, p));
    let url = format!("{}/{path}/-/merge_requests/{}", m.instance_url, r.iid);
    let state_id = match r.state.as_str() {
        "closed" => 2,
        "merged" => 3,
        _ => 1,
    };
    let last_commit = r.diff_head_sha.as_ref().map_or(Json::Null, |sha| {
        json!({
            "id": sha,
            "message": r.title,
            "title": r.title,
            "timestamp": hook_time(r.updated_at),
            "url": format!("{}/{path}/-/commit/{sha}", m.instance_url),
            "author": { "name": r.author, "email": "[REDACTED]" },
        })
    });
    json!({
        "assignee_id": null,
        "author_id": user_id(&r.author),
        "created_at": hook_time(r.created_at),
        "description": r.description.clone().unwrap_or_default(),
        "draft": r.draft,
        "head_pipeline_id": null,
        "id": r.id,
        "iid": r.iid,
        "last_edited_at": null,
        "last_edited_by_id": null,
        "merge_commit_sha": null,
        "merge_error": null,
        "merge_params": { "force_remove_source_branch": "1" },
        "merge_status": "can_be_merged",
        "merge_user_id": null,
        "merge_when_pipeline_succeeds": false,
        "milestone_id": null,
        "source_branch": r.source_branch,
        "source_project_id": r.project,
        "state_id": state_id,
        "target_branch": r.target_branch,
        "target_project_id": r.project,
        "time_estimate": 0,
        "title": r.title,
        "updated_at": hook_time(r.updated_at),
        "updated_by_id": null,
        "prepared_at": hook_time(r.created_at),
        "assignee_ids": [],
        "blocking_discussions_resolved": true,
        "detailed_merge_status": r.detailed_merge_status.as_deref().map(str::to_ascii_lowercase),
        "first_contribution": false,
        "human_time_change": null,
        "human_time_estimate": null,
        "human_total_time_spent": null,
        "labels": [],
        "last_commit": last_commit,
        "reviewer_ids": r.reviewers.iter().map(|(u, _)| user_id(u)).collect::<Vec<_>>(),
        "source": project,
        "state": r.state,
        "target": project,
        "time_change": 0,
        "total_time_spent": 0,
        "url": url,
        "work_in_progress": r.draft,
        "approval_rules": [],
    })
}

/// `changes` of an update: what differs from `before`, as `{previous, current}`.
fn changes(pairs: &[(&str, Json, Json)]) -> Json {
    let mut out = serde_json::Map::new();
    for (key, previous, current) in pairs {
        if previous != current {
            out.insert(
                (*key).to_owned(),
                json!({ "previous": previous, "current": current }),
            );
        }
    }
    Json::Object(out)
}

/// The Issue Hook body of `issue` for `action` (`open`, `close`, `reopen`, `update`).
pub fn issue_hook(m: &Model, issue: &Issue, action: &str, before: Option<&Issue>) -> Json {
    let Some(project) = m.projects.get(&issue.project) else {
        return Json::Null;
    };
    let mut attrs = issue_attrs(m, issue);
    attrs["action"] = json!(action);
    let changes = before.map_or(json!({}), |b| {
        changes(&[
            ("title", json!(b.title), json!(issue.title)),
            (
                "description",
                json!(b.description),
                json!(issue.description),
            ),
            (
                "state_id",
                json!(if b.state == "closed" { 2 } else { 1 }),
                attrs["state_id"].clone(),
            ),
            (
                "closed_at",
                opt_time(b.closed_at),
                opt_time(issue.closed_at),
            ),
            (
                "discussion_locked",
                json!(b.discussion_locked),
                json!(issue.discussion_locked),
            ),
            (
                "updated_at",
                json!(hook_time(b.updated_at)),
                json!(hook_time(issue.updated_at)),
            ),
        ])
    });
    json!({
        "object_kind": "issue",
        "event_type": "issue",
        "user": user_json(m, &issue.author),
        "project": project_json(m, project),
        "object_attributes": attrs,
        "labels": [],
        "changes": changes,
        "repository": repository_json(m, project),
        "assignees": [],
    })
}

/// The Merge Request Hook body of `mr` for `action` (`open`, `close`, `reopen`, `update`,
/// `merge`, ...).
pub fn merge_request_hook(
    m: &Model,
    mr: &MergeRequest,
    action: &str,
    before: Option<&MergeRequest>,
) -> Json {
    let Some(project) = m.projects.get(&mr.project) else {
        return Json::Null;
    };
    let mut attrs = mr_attrs(m, mr);
    attrs["action"] = json!(action);
    if let Some(b) = before
        && b.diff_head_sha != mr.diff_head_sha
        && let Some(old) = &b.diff_head_sha
    {
        // A push: the previous head.
        attrs["oldrev"] = json!(old);
    }
    let changes = before.map_or(json!({}), |b| {
        changes(&[
            ("title", json!(b.title), json!(mr.title)),
            ("description", json!(b.description), json!(mr.description)),
            ("draft", json!(b.draft), json!(mr.draft)),
            (
                "state_id",
                mr_attrs(m, b)["state_id"].clone(),
                attrs["state_id"].clone(),
            ),
            (
                "discussion_locked",
                json!(b.discussion_locked),
                json!(mr.discussion_locked),
            ),
            (
                "updated_at",
                json!(hook_time(b.updated_at)),
                json!(hook_time(mr.updated_at)),
            ),
        ])
    });
    let reviewers: Vec<Json> = mr
        .reviewers
        .iter()
        .map(|(u, state)| {
            let mut r = user_json(m, u);
            if let Some(state) = state {
                r["state"] = json!(state.to_ascii_lowercase());
            }
            r
        })
        .collect();
    json!({
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": user_json(m, &mr.author),
        "project": project_json(m, project),
        "object_attributes": attrs,
        "labels": [],
        "changes": changes,
        "repository": repository_json(m, project),
        "reviewers": reviewers,
    })
}

/// The Merge Request Hook body GitLab sends when `user` approves or unapproves `mr`
/// (`approved`, `approval`, `unapproved`, `unapproval`): the acting user is the approver.
pub fn approval_hook(m: &Model, mr: &MergeRequest, action: &str, user: &str) -> Json {
    let mut body = merge_request_hook(m, mr, action, None);
    if !body.is_null() {
        body["user"] = user_json(m, user);
    }
    body
}

/// The Merge Request Hook body GitLab sends when it resets `mr`'s approvals after `user` pushed:
/// a system `unapproved` naming the pusher (`approvals_reset_on_push`).
pub fn approvals_reset_hook(m: &Model, mr: &MergeRequest, user: &str) -> Json {
    let mut body = approval_hook(m, mr, "unapproved", user);
    if !body.is_null() {
        body["object_attributes"]["system"] = json!(true);
        body["object_attributes"]["system_action"] = json!("approvals_reset_on_push");
    }
    body
}

/// The Push Hook body of `user` pushing branch `branch` of `project` from `before` to `after`
/// (a commit dated `at`). It names no time of the push itself.
pub fn push_hook(
    m: &Model,
    project: &Project,
    branch: &str,
    (before, after): (&str, &str),
    user: &str,
    at: OffsetDateTime,
) -> Json {
    let project_body = project_json(m, project);
    let web = project_body["web_url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    json!({
        "object_kind": "push",
        "event_name": "push",
        "before": before,
        "after": after,
        "ref": format!("refs/heads/{branch}"),
        "ref_protected": false,
        "checkout_sha": after,
        "message": null,
        "user_id": user_id(user),
        "user_name": user,
        "user_username": user,
        "user_email": "[REDACTED]",
        "user_avatar": null,
        "project_id": project.id,
        "project": project_body,
        "commits": [{
            "id": after,
            "message": "pushed",
            "title": "pushed",
            "timestamp": hook_time(at),
            "url": format!("{web}/-/commit/{after}"),
            "author": { "name": user, "email": "[REDACTED]" },
            "added": [],
            "modified": ["README.md"],
            "removed": [],
        }],
        "total_commits_count": 1,
        "push_options": {},
        "repository": repository_json(m, project),
    })
}

/// The hooks GitLab sends for one push to a merge request's source branch, in its order.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The Push Hook.
    pub push: Json,
    /// The merge request's `update` hook, with `oldrev`.
    pub update: Json,
    /// The approvals reset, when approvals stood.
    pub reset: Option<Json>,
}

/// The Pipeline Hook body of `pipeline` in its current status.
pub fn pipeline_hook(m: &Model, pipeline: &Pipeline) -> Json {
    let Some(project) = m.projects.get(&pipeline.project) else {
        return Json::Null;
    };
    let finished = matches!(
        pipeline.status.as_str(),
        "success" | "failed" | "canceled" | "skipped"
    );
    let merge_request = pipeline
        .merge_request
        .and_then(|iid| m.merge_requests.get(&(pipeline.project, iid)))
        .map(|mr| {
            json!({
                "id": mr.id,
                "iid": mr.iid,
                "title": mr.title,
                "source_branch": mr.source_branch,
                "source_project_id": pipeline.project,
                "target_branch": "main",
                "target_project_id": pipeline.project,
                "state": mr.state,
                "merge_status": "can_be_merged",
                "detailed_merge_status": "mergeable",
                "url": format!("{}/-/merge_requests/{}", project_json(m, project)["web_url"].as_str().unwrap_or_default(), mr.iid),
            })
        });
    json!({
        "object_kind": "pipeline",
        "object_attributes": {
            "id": pipeline.id,
            "iid": pipeline.id,
            "name": null,
            "ref": pipeline.git_ref,
            "tag": false,
            "sha": pipeline.sha,
            "before_sha": "0000000000000000000000000000000000000000",
            "source": if pipeline.merge_request.is_some() { "merge_request_event" } else { "push" },
            "status": pipeline.status,
            "detailed_status": pipeline.status,
            "stages": ["test"],
            "created_at": hook_time(pipeline.created_at),
            "finished_at": finished.then(|| hook_time(pipeline.updated_at)),
            "duration": null,
            "queued_duration": null,
            "variables": [],
            "url": format!("{}/-/pipelines/{}", project_json(m, project)["web_url"].as_str().unwrap_or_default(), pipeline.id),
        },
        "merge_request": merge_request,
        "user": user_json(m, "alice"),
        "project": project_json(m, project),
        "commit": {
            "id": pipeline.sha,
            "message": "commit",
            "title": "commit",
            "timestamp": hook_time(pipeline.created_at),
            "url": format!("{}/-/commit/{}", project_json(m, project)["web_url"].as_str().unwrap_or_default(), pipeline.sha),
            "author": {"name": "alice", "email": "[REDACTED]"},
        },
        "source_pipeline": null,
        "builds": [],
    })
}

/// The Note Hook body of `note` for `action` (`create`, `update`).
pub fn note_hook(m: &Model, note: &Note, action: &str) -> Json {
    let (project_id, noteable_type, parent) = match note.on {
        NoteOn::Issue(p, iid) => (
            p,
            "Issue",
            m.issues
                .get(&(p, iid))
                .map(|i| ("issue", issue_attrs(m, i), i.id, i.iid)),
        ),
        NoteOn::MergeRequest(p, iid) => (
            p,
            "MergeRequest",
            m.merge_requests
                .get(&(p, iid))
                .map(|r| ("merge_request", mr_attrs(m, r), r.id, r.iid)),
        ),
    };
    let (Some(project), Some((parent_key, parent_attrs, noteable_id, iid))) =
        (m.projects.get(&project_id), parent)
    else {
        return Json::Null;
    };
    let path = m.project_path(project_id).unwrap_or_default();
    let kind_path = if noteable_type == "Issue" {
        "issues"
    } else {
        "merge_requests"
    };
    let position = note.position.as_ref().map_or(Json::Null, |pos| {
        json!({
            "base_sha": pos.base_sha,
            "start_sha": pos.start_sha,
            "head_sha": pos.head_sha,
            "old_path": pos.old_path,
            "new_path": pos.new_path,
            "position_type": "text",
            "old_line": pos.old_line,
            "new_line": pos.new_line,
            "line_range": null,
        })
    });
    let attrs = json!({
        "attachment": null,
        "author_id": user_id(&note.author),
        "change_position": null,
        "commit_id": null,
        "created_at": hook_time(note.created_at),
        "discussion_id": note.discussion,
        "id": note.id,
        "line_code": note.position.as_ref().and_then(|p| p.new_line).map(|l| format!("{}_0_{l}", note.discussion)),
        "note": note.body,
        "noteable_id": noteable_id,
        "noteable_type": noteable_type,
        "original_position": position,
        "position": position,
        "project_id": project_id,
        "resolved_at": null,
        "resolved_by_id": null,
        "resolved_by_push": null,
        "st_diff": null,
        "system": note.system,
        "type": note.kind,
        "updated_at": hook_time(note.updated_at),
        "updated_by_id": null,
        "description": note.body,
        "url": format!("{}/{path}/-/{kind_path}/{iid}#note_{}", m.instance_url, note.id),
        "action": action,
    });
    let mut body = json!({
        "object_kind": "note",
        "event_type": "note",
        "user": user_json(m, &note.author),
        "project_id": project_id,
        "project": project_json(m, project),
        "object_attributes": attrs,
        "repository": repository_json(m, project),
    });
    body[parent_key] = parent_attrs;
    body
}

impl Model {
    /// Adds a group hook sending issue, merge request and note events to `url` with `token`
    /// (as `POST /groups/{id}/hooks` does); returns its id.
    pub fn add_hook(&mut self, group: u64, url: &str, token: &str) -> u64 {
        let id = self.hooks.keys().next_back().copied().unwrap_or(0) + 1;
        self.hooks
            .insert(id, new_hook(id, group, url, token, [true; 5]));
        id
    }

    /// The hooks a change in `project` reaches: those of its group and every ancestor.
    fn hooks_of(&self, project: u64, kind: HookKind) -> Vec<u64> {
        if self.hooks.is_empty() {
            return Vec::new();
        }
        let Some(p) = self.projects.get(&project) else {
            return Vec::new();
        };
        let mut groups = Vec::new();
        let mut at = Some(p.group);
        while let Some(g) = at {
            groups.push(g);
            at = self.groups.get(&g).and_then(|g| g.parent);
        }
        self.hooks
            .values()
            .filter(|h| groups.contains(&h.group) && kind.subscribed(h))
            .map(|h| h.id)
            .collect()
    }

    fn queue(&mut self, project: u64, kind: HookKind, body: impl FnOnce(&Model) -> Json) {
        let hooks = self.hooks_of(project, kind);
        if hooks.is_empty() {
            return;
        }
        let delivery = Delivery::new(kind.header(), &body(self));
        for hook_id in hooks {
            let mut delivery = delivery.clone();
            delivery.idempotency_key = uuid::Uuid::new_v4().to_string();
            self.pending_hooks.push(Pending { hook_id, delivery });
        }
    }

    pub(crate) fn issue_changed(
        &mut self,
        project: u64,
        iid: u64,
        action: &str,
        before: Option<&Issue>,
    ) {
        let Some(issue) = self.issues.get(&(project, iid)).cloned() else {
            return;
        };
        self.queue(project, HookKind::Issue, |m| {
            issue_hook(m, &issue, action, before)
        });
    }

    pub(crate) fn merge_request_changed(
        &mut self,
        project: u64,
        iid: u64,
        action: &str,
        before: Option<&MergeRequest>,
    ) {
        let Some(mr) = self.merge_requests.get(&(project, iid)).cloned() else {
            return;
        };
        self.queue(project, HookKind::MergeRequest, |m| {
            merge_request_hook(m, &mr, action, before)
        });
    }

    pub(crate) fn approval_changed(&mut self, project: u64, iid: u64, action: &str, user: &str) {
        let Some(mr) = self.merge_requests.get(&(project, iid)).cloned() else {
            return;
        };
        self.queue(project, HookKind::MergeRequest, |m| {
            approval_hook(m, &mr, action, user)
        });
    }

    pub(crate) fn note_changed(&mut self, id: u64, action: &str) {
        let Some(note) = self.notes.get(&id).cloned() else {
            return;
        };
        let project = match note.on {
            NoteOn::Issue(p, _) | NoteOn::MergeRequest(p, _) => p,
        };
        self.queue(project, HookKind::Note, |m| note_hook(m, &note, action));
    }

    /// `user` pushes `sha` onto merge request (`project`, `iid`)'s source branch: its head moves
    /// and `updated_at` becomes `at` (`None`: now, after the previous one; an equal time is a
    /// push in the same second). GitLab sends the Push Hook, the merge request's `update` hook
    /// and, when approvals stood, resets them (all of them) with its system `unapproved` hook.
    /// `None` when the merge request does not exist.
    pub fn push_merge_request(
        &mut self,
        project: u64,
        iid: u64,
        sha: &str,
        user: &str,
        at: Option<OffsetDateTime>,
    ) -> Option<Pushed> {
        let mr = self.merge_requests.get_mut(&(project, iid))?;
        let before = mr.clone();
        mr.diff_head_sha = Some(sha.to_owned());
        mr.updated_at = at.unwrap_or_else(|| super::model::later(before.updated_at));
        let reset = !mr.approved_by.is_empty();
        mr.approved_by.clear();
        if reset {
            mr.approved = false;
        }
        let mr = mr.clone();
        let old = before.diff_head_sha.clone().unwrap_or_default();
        let branch = mr.source_branch.clone();
        let push = self
            .projects
            .get(&project)
            .map(|p| push_hook(self, p, &branch, (&old, sha), user, mr.updated_at))?;
        let update = merge_request_hook(self, &mr, "update", Some(&before));
        let reset = reset.then(|| approvals_reset_hook(self, &mr, user));
        self.queue(project, HookKind::Push, |_| push.clone());
        self.queue(project, HookKind::MergeRequest, |_| update.clone());
        if let Some(reset) = &reset {
            self.queue(project, HookKind::MergeRequest, |_| reset.clone());
        }
        Some(Pushed {
            push,
            update,
            reset,
        })
    }

    pub(crate) fn pipeline_changed(&mut self, id: u64) {
        let Some(pipeline) = self.pipelines.get(&id).cloned() else {
            return;
        };
        self.queue(pipeline.project, HookKind::Pipeline, |m| {
            pipeline_hook(m, &pipeline)
        });
    }

    /// Whether hook `id` is executed now.
    pub fn hook_executable(&self, id: u64, now: OffsetDateTime) -> bool {
        self.hooks.get(&id).is_some_and(|h| match h.alert_status {
            HookAlert::Executable => true,
            HookAlert::TemporarilyDisabled => h.disabled_until.is_none_or(|until| until <= now),
            HookAlert::Disabled => false,
        })
    }

    /// Records an execution of hook `id` at `now`: a success makes it executable again; a
    /// failure counts toward its rest and its disabling.
    pub fn record_hook_result(&mut self, id: u64, succeeded: bool, now: OffsetDateTime) {
        let Some(h) = self.hooks.get_mut(&id) else {
            return;
        };
        if succeeded {
            h.recent_failures = 0;
            h.backoff_count = 0;
            h.alert_status = HookAlert::Executable;
            h.disabled_until = None;
            return;
        }
        h.recent_failures += 1;
        if h.recent_failures >= DISABLED_AFTER {
            h.alert_status = HookAlert::Disabled;
            h.disabled_until = None;
        } else if h.recent_failures >= TEMPORARY_AFTER {
            let mut backoff = INITIAL_BACKOFF;
            for _ in 0..h.backoff_count {
                backoff = std::cmp::min(backoff * 2_i32, MAX_BACKOFF);
            }
            h.backoff_count += 1;
            h.alert_status = HookAlert::TemporarilyDisabled;
            h.disabled_until = Some(now + backoff);
        }
    }

    /// Takes the deliveries queued so far.
    pub(crate) fn take_pending_hooks(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending_hooks)
    }
}

/// A new executable hook.
pub(crate) fn new_hook(id: u64, group: u64, url: &str, token: &str, events: [bool; 5]) -> Hook {
    let [
        issues_events,
        merge_requests_events,
        note_events,
        pipeline_events,
        push_events,
    ] = events;
    Hook {
        id,
        group,
        url: url.to_owned(),
        token: token.to_owned(),
        issues_events,
        merge_requests_events,
        note_events,
        pipeline_events,
        push_events,
        uuid: uuid::Uuid::new_v4().to_string(),
        alert_status: HookAlert::Executable,
        disabled_until: None,
        recent_failures: 0,
        backoff_count: 0,
        // Set by whoever creates the hook ([`Model::add_hook`]: all of them).
        project_events: true,
        subgroup_events: true,
        member_events: true,
    }
}

/// The hook as `GET /groups/{id}/hooks` lists it.
pub(crate) fn hook_json(h: &Hook) -> Json {
    json!({
        "id": h.id,
        "url": h.url,
        "group_id": h.group,
        "issues_events": h.issues_events,
        "merge_requests_events": h.merge_requests_events,
        "note_events": h.note_events,
        "pipeline_events": h.pipeline_events,
        "push_events": h.push_events,
        "project_events": h.project_events,
        "subgroup_events": h.subgroup_events,
        "member_events": h.member_events,
        "alert_status": h.alert_status.as_str(),
        "disabled_until": h.disabled_until.map(|t| t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()),
    })
}
