//! A group's life as GitLab runs it for group hooks (GitLab 18.x shapes): projects created,
//! destroyed, renamed and transferred (Project Hooks, `event_name` `project_*`, with
//! `old_path_with_namespace` on a rename or transfer), a subgroup renamed (`group_rename`, with
//! `old_full_path`) and members added, removed or given another access level (Member Hooks,
//! `user_add_to_group`, `user_remove_from_group`, `user_update_for_group`). Each reaches the
//! group hooks of the group concerned and its ancestors that subscribed to project, subgroup or
//! member events. Members are listed over REST (`GET /groups/{id}/members`, one by user id).

use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::model::Model;
use super::webhook::{Delivery, Pending, hook_time};

/// A direct member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub group: u64,
    pub user_id: u64,
    pub username: String,
    /// 10 guest, 20 reporter, 30 developer, 40 maintainer, 50 owner.
    pub access_level: i32,
    pub created_at: OffsetDateTime,
}

/// Which subscription of a group hook an event needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupEvents {
    Project,
    Subgroup,
    Member,
}

impl GroupEvents {
    fn header(self) -> &'static str {
        match self {
            GroupEvents::Project => "Project Hook",
            GroupEvents::Subgroup => "Subgroup Hook",
            GroupEvents::Member => "Member Hook",
        }
    }
}

/// GitLab's name of an access level.
fn access_name(level: i32) -> &'static str {
    match level {
        50 => "Owner",
        40 => "Maintainer",
        30 => "Developer",
        20 => "Reporter",
        10 => "Guest",
        5 => "Minimal Access",
        _ => "No access",
    }
}

/// A stable user id for a username (the one the simulator's other hooks name users by).
pub fn user_id(username: &str) -> u64 {
    username
        .bytes()
        .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1_000_000
        + 1
}

impl Model {
    /// Group `id`'s full path.
    fn full_group_path(&self, id: u64) -> String {
        self.group_path(id).unwrap_or_default()
    }

    /// Queues `body` to the hooks of `group` and its ancestors that take `events`.
    fn queue_group(&mut self, group: u64, events: GroupEvents, body: Json) {
        let mut groups = Vec::new();
        let mut at = Some(group);
        while let Some(g) = at {
            groups.push(g);
            at = self.groups.get(&g).and_then(|g| g.parent);
        }
        let hooks: Vec<u64> = self
            .hooks
            .values()
            .filter(|h| {
                groups.contains(&h.group)
                    && match events {
                        GroupEvents::Project => h.project_events,
                        GroupEvents::Subgroup => h.subgroup_events,
                        GroupEvents::Member => h.member_events,
                    }
            })
            .map(|h| h.id)
            .collect();
        let delivery = Delivery::new(events.header(), &body);
        for hook_id in hooks {
            let mut delivery = delivery.clone();
            delivery.idempotency_key = uuid::Uuid::new_v4().to_string();
            self.pending_hooks.push(Pending { hook_id, delivery });
        }
    }

    /// A Project Hook body for project `id` as it is now.
    pub fn project_event_hook(&self, id: u64, event: &str, old_path: Option<&str>) -> Json {
        let now = hook_time(OffsetDateTime::now_utc());
        let (name, path, group) = self
            .projects
            .get(&id)
            .map(|p| (p.name.clone(), p.path.clone(), p.group))
            .unwrap_or_default();
        let mut body = json!({
            "event_name": event,
            "created_at": now,
            "updated_at": now,
            "name": name,
            "path": path,
            "path_with_namespace": self.project_path(id).unwrap_or_default(),
            "project_id": id,
            "project_namespace_id": group,
            "owners": [],
            "owner_name": null,
            "owner_email": null,
            "project_visibility": "private",
        });
        if let Some(old) = old_path {
            body["old_path_with_namespace"] = json!(old);
        }
        body
    }

    /// Adds a project to `group` and sends its `project_create`; returns its id and the hook's
    /// body.
    pub fn create_project_with_hook(&mut self, group: u64, path: &str) -> (u64, Json) {
        let id = self.add_project(group, path);
        let body = self.project_event_hook(id, "project_create", None);
        self.queue_group(group, GroupEvents::Project, body.clone());
        (id, body)
    }

    /// Deletes project `id` (its issues and merge requests with it) and sends its
    /// `project_destroy`; the hook's body, `None` when there is none.
    pub fn destroy_project_with_hook(&mut self, id: u64) -> Option<Json> {
        let group = self.projects.get(&id).map(|p| p.group)?;
        let body = self.project_event_hook(id, "project_destroy", None);
        self.projects.remove(&id);
        self.issues.retain(|(p, _), _| *p != id);
        self.merge_requests.retain(|(p, _), _| *p != id);
        self.queue_group(group, GroupEvents::Project, body.clone());
        Some(body)
    }

    /// Renames project `id` and sends its `project_rename`; the hook's body, `None` when there
    /// is no such project.
    pub fn rename_project_with_hook(&mut self, id: u64, path: &str) -> Option<Json> {
        let old = self.project_path(id);
        if !self.rename_project(id, path) {
            return None;
        }
        let group = self.projects[&id].group;
        let body = self.project_event_hook(id, "project_rename", old.as_deref());
        self.queue_group(group, GroupEvents::Project, body.clone());
        Some(body)
    }

    /// Moves project `id` into `group` and sends its `project_transfer` (to the hooks of the
    /// group it moved into); the hook's body, `None` when either is missing.
    pub fn transfer_project_with_hook(&mut self, id: u64, group: u64) -> Option<Json> {
        let old = self.project_path(id);
        if !self.move_project(id, group) {
            return None;
        }
        let body = self.project_event_hook(id, "project_transfer", old.as_deref());
        self.queue_group(group, GroupEvents::Project, body.clone());
        Some(body)
    }

    /// Renames group `id` (its path segment) and sends its `group_rename`; the hook's body,
    /// `None` when there is no such group.
    pub fn rename_group_with_hook(&mut self, id: u64, path: &str) -> Option<Json> {
        let old = self.full_group_path(id);
        let g = self.groups.get_mut(&id)?;
        let old_path = std::mem::replace(&mut g.path, path.to_owned());
        g.name = path.to_owned();
        let now = hook_time(OffsetDateTime::now_utc());
        let body = json!({
            "event_name": "group_rename",
            "created_at": now,
            "updated_at": now,
            "name": path,
            "path": path,
            "full_path": self.full_group_path(id),
            "group_id": id,
            "owner_name": null,
            "owner_email": null,
            "old_path": old_path,
            "old_full_path": old,
        });
        self.queue_group(id, GroupEvents::Subgroup, body.clone());
        Some(body)
    }

    /// A Member Hook body for `member` as `event`: GitLab names the group by id, name and its
    /// own path segment (not its full path).
    pub fn member_hook(&self, member: &Member, event: &str) -> Json {
        let group = self.groups.get(&member.group);
        json!({
            "created_at": hook_time(member.created_at),
            "updated_at": hook_time(OffsetDateTime::now_utc()),
            "group_name": group.map(|g| g.name.clone()),
            "group_path": group.map(|g| g.path.clone()),
            "group_id": member.group,
            "user_username": member.username,
            "user_name": member.username,
            "user_email": "[REDACTED]",
            "user_id": member.user_id,
            "group_access": access_name(member.access_level),
            "group_plan": null,
            "expires_at": null,
            "event_name": event,
        })
    }

    /// Makes `username` a direct member of `group` at `access_level` and sends
    /// `user_add_to_group`; the hook's body.
    pub fn add_member(&mut self, group: u64, username: &str, access_level: i32) -> Json {
        let member = Member {
            group,
            user_id: user_id(username),
            username: username.to_owned(),
            access_level,
            created_at: OffsetDateTime::now_utc()
                .replace_nanosecond(0)
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
        };
        let body = self.member_hook(&member, "user_add_to_group");
        self.members.insert((group, member.user_id), member);
        self.queue_group(group, GroupEvents::Member, body.clone());
        body
    }

    /// Gives `username` another access level in `group` and sends `user_update_for_group`.
    /// The hook's body, `None` when they are not a member.
    pub fn update_member(&mut self, group: u64, username: &str, access_level: i32) -> Option<Json> {
        let member = self.members.get_mut(&(group, user_id(username)))?;
        member.access_level = access_level;
        let member = member.clone();
        let body = self.member_hook(&member, "user_update_for_group");
        self.queue_group(group, GroupEvents::Member, body.clone());
        Some(body)
    }

    /// Removes `username` from `group` and sends `user_remove_from_group`; the hook's body,
    /// `None` when they were not a member.
    pub fn remove_member(&mut self, group: u64, username: &str) -> Option<Json> {
        let member = self.members.remove(&(group, user_id(username)))?;
        let body = self.member_hook(&member, "user_remove_from_group");
        self.queue_group(group, GroupEvents::Member, body.clone());
        Some(body)
    }

    /// Group `group`'s direct members as `GET /groups/{id}/members` lists them.
    pub fn members_json(&self, group: u64) -> Vec<Json> {
        self.members
            .values()
            .filter(|m| m.group == group)
            .map(member_json)
            .collect()
    }
}

/// A member as the REST API answers.
pub(crate) fn member_json(m: &Member) -> Json {
    json!({
        "id": m.user_id,
        "username": m.username,
        "name": m.username,
        "state": "active",
        "access_level": m.access_level,
        "expires_at": null,
        "membership_state": "active",
    })
}
