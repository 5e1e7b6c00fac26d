//! A GitLab group of a given size, the same for the same arguments: the end-to-end test and the
//! benchmark build their model here, so both measure the same shape of data.

use time::OffsetDateTime;

use super::model::{DiffPosition, Model, NewIssue, NewMergeRequest, NoteOn};

/// What to build: `items` issues and merge requests spread over twelve projects of the group
/// `group`, with three notes each.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The top-level group's path.
    pub group: String,
    /// The token the model accepts.
    pub token: String,
    /// Issues and merge requests in total (a third of them merge requests).
    pub items: u64,
    /// The first item's `updatedAt`; each next one is a second later.
    pub first_update: OffsetDateTime,
}

/// The model, with its twelve projects' native ids in creation order.
#[derive(Debug)]
pub struct Generated {
    pub model: Model,
    pub projects: Vec<u64>,
}

/// Builds the group: `<group>` with subgroups `platform`, `platform/infra` and `apps`, three
/// projects in each of the four groups. Every issue holds two or three user notes (a fourth of
/// them a system note in place of the third); every merge request a lone note and a diff thread
/// answered by a reply (a fifth a system note in place of the reply). A seventh of the issues is
/// closed and every other round of merge requests merged. The rate-limit window is wide enough
/// for one INITIAL of the whole group.
pub fn generate(s: &Scenario) -> Generated {
    let mut m = Model::default();
    m.add_token(&s.token);
    // INITIAL reads every parent's notes: GitLab's default window would stop it.
    m.rate_limit.limit = 1_000_000;
    m.rate_limit.remaining = 1_000_000;
    let top = m.add_group(None, &s.group);
    let platform = m.add_group(Some(top), "platform");
    let infra = m.add_group(Some(platform), "infra");
    let apps = m.add_group(Some(top), "apps");
    let mut projects = Vec::new();
    for (group, prefix) in [
        (top, "core"),
        (platform, "plat"),
        (infra, "infra"),
        (apps, "app"),
    ] {
        for k in 0..3 {
            projects.push(m.add_project(group, &format!("{prefix}-{k}")));
        }
    }
    for i in 0..s.items {
        let project = projects[(i % 12) as usize];
        let updated_at = s.first_update + time::Duration::seconds(i as i64);
        if (i / 12).is_multiple_of(3) {
            merge_request(&mut m, project, i, updated_at);
        } else {
            issue(&mut m, project, i, updated_at);
        }
    }
    Generated { model: m, projects }
}

fn merge_request(m: &mut Model, project: u64, i: u64, updated_at: OffsetDateTime) {
    let iid = m.add_merge_request(
        project,
        NewMergeRequest {
            title: format!("MR {i}"),
            updated_at,
        },
    );
    let on = NoteOn::MergeRequest(project, iid);
    let head = m.merge_requests[&(project, iid)]
        .diff_head_sha
        .clone()
        .unwrap_or_default();
    m.add_note(on, &format!("looks fine {i}"), false, None);
    let diff = m.add_diff_note(
        on,
        &format!("off by one {i}"),
        DiffPosition::line(&format!("src/m{}.rs", i % 7), (i % 50) as i32 + 1, &head),
    );
    if i.is_multiple_of(5) {
        m.add_note(on, "approved this merge request", true, None);
    } else {
        m.add_reply(diff, &format!("fixed {i}"));
    }
    if (i / 12).is_multiple_of(2)
        && let Some(mr) = m.merge_requests.get_mut(&(project, iid))
    {
        mr.state = "merged".into();
    }
}

fn issue(m: &mut Model, project: u64, i: u64, updated_at: OffsetDateTime) {
    let iid = m.add_issue(
        project,
        NewIssue {
            title: format!("Issue {i}"),
            updated_at,
        },
    );
    let on = NoteOn::Issue(project, iid);
    m.add_note(on, &format!("first {i}"), false, None);
    m.add_note(on, &format!("second {i}"), false, None);
    if i % 4 == 1 {
        m.add_note(on, "changed the description", true, None);
    } else {
        m.add_note(on, &format!("third {i}"), false, None);
    }
    if i % 7 == 2
        && let Some(issue) = m.issues.get_mut(&(project, iid))
    {
        issue.state = "closed".into();
        issue.closed_at = Some(issue.updated_at);
    }
}
