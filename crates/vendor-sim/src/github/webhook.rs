//! Webhooks as GitHub sends them: real-shaped `issues`, `pull_request`, `repository`,
//! `installation`, `installation_repositories`, `check_suite`, `check_run` and `status`
//! payloads built from the model, signed with `X-Hub-Signature-256`.
//!
//! Shapes are GitHub's: every payload validates against the published schema of its event and
//! action (`schemas/github-webhooks.json`, from `@octokit/webhooks-schemas`; see
//! `tests/github_webhook_payloads.rs`). Values the model does not keep are GitHub's defaults
//! for a plain public repository (no labels, no milestone, zero stars, empty `changes` of an
//! edit); URLs point at `github.com` and `api.github.com` like the real ones.

use std::time::Duration;

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value as Json, json};

pub mod reviews;

use super::checks::{
    CheckConclusion, CheckRun, CheckStatus, CheckSuite, CommitStatus, StatusState,
};
use super::model::{
    self, InstallationId, Issue, IssueState, IssueStateReason, LockReason, Model, OwnerKind,
    PullRequest, PullRequestState, RepoId, Repository,
};

/// A stable numeric account id derived from a login (GitHub's account ids are opaque numbers).
fn account_number(login: &str) -> u64 {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(login.to_ascii_lowercase().as_bytes());
    u64::from_be_bytes(d[..8].try_into().unwrap_or_default()) >> 40
}

/// The REST API root of every `url` GitHub writes.
const API: &str = "https://api.github.com";

/// A REST user object (`user`, `owner`, `sender`, `account`; organizations too, by `type`).
fn user_json(login: &str, kind: OwnerKind) -> Json {
    let id = account_number(login);
    let (ty, prefix) = match kind {
        OwnerKind::Organization => ("Organization", "O"),
        OwnerKind::User => ("User", "U"),
    };
    let api = format!("{API}/users/{login}");
    json!({
        "login": login,
        "id": id,
        "node_id": model::encode_node_id(prefix, id),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
        "gravatar_id": "",
        "url": api,
        "html_url": format!("https://github.com/{login}"),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": ty,
        "site_admin": false,
    })
}

/// The deleted-account placeholder GitHub shows for authors that are gone.
fn author_json(author: Option<&str>) -> Json {
    user_json(author.unwrap_or("ghost"), OwnerKind::User)
}

/// The `organization` object of an organization's events.
fn organization_json(login: &str) -> Json {
    let id = account_number(login);
    let api = format!("{API}/orgs/{login}");
    json!({
        "login": login,
        "id": id,
        "node_id": model::encode_node_id("O", id),
        "url": api,
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events"),
        "hooks_url": format!("{api}/hooks"),
        "issues_url": format!("{api}/issues"),
        "members_url": format!("{api}/members{{/member}}"),
        "public_members_url": format!("{api}/public_members{{/member}}"),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
        "description": null,
    })
}

/// A `reactions` rollup with no reactions, as GitHub attaches it to issues and comments.
fn reactions_json(url: String) -> Json {
    json!({
        "url": url,
        "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "hooray": 0,
        "confused": 0, "heart": 0, "rocket": 0, "eyes": 0,
    })
}

fn time_json(t: Option<time::OffsetDateTime>) -> Json {
    t.map(model::format_time).map_or(Json::Null, Json::String)
}

fn lock_reason_json(r: Option<LockReason>) -> Json {
    match r {
        None => Json::Null,
        Some(LockReason::OffTopic) => json!("off-topic"),
        Some(LockReason::TooHeated) => json!("too heated"),
        Some(LockReason::Resolved) => json!("resolved"),
        Some(LockReason::Spam) => json!("spam"),
    }
}

/// The REST repository object (webhooks, `GET /repositories/{id}`, installation listings).
/// Counts the model does not keep (stars, forks, open issues, size) are 0.
pub fn repository_json(model: &Model, repo: &Repository) -> Json {
    let full_name = repo.name_with_owner();
    let api = format!("{API}/repos/{full_name}");
    let created = model::format_time(repo.created_at);
    let mut body = json!({
        "id": repo.database_id,
        "node_id": repo.node_id,
        "name": repo.name,
        "full_name": full_name,
        "private": repo.private,
        "owner": user_json(&repo.owner, model.owner_kind(&repo.owner)),
        "html_url": format!("https://github.com/{full_name}"),
        "description": null,
        "fork": false,
        "created_at": created,
        "updated_at": created,
        "pushed_at": created,
        "git_url": format!("git://github.com/{full_name}.git"),
        "ssh_url": format!("git@github.com:{full_name}.git"),
        "clone_url": format!("https://github.com/{full_name}.git"),
        "svn_url": format!("https://github.com/{full_name}"),
        "homepage": null,
        "size": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": null,
        "has_issues": true,
        "has_projects": true,
        "has_downloads": true,
        "has_wiki": true,
        "has_pages": false,
        "has_discussions": false,
        "forks_count": 0,
        "mirror_url": null,
        "archived": repo.is_archived,
        "disabled": false,
        "open_issues_count": 0,
        "license": null,
        "allow_forking": true,
        "is_template": false,
        "web_commit_signoff_required": false,
        "topics": [],
        "visibility": if repo.private { "private" } else { "public" },
        "forks": 0,
        "open_issues": 0,
        "watchers": 0,
        "default_branch": "main",
        "custom_properties": {},
    });
    // The API links of the repository's resources.
    let links = json!({
        "url": api,
        "forks_url": format!("{api}/forks"),
        "keys_url": format!("{api}/keys{{/key_id}}"),
        "collaborators_url": format!("{api}/collaborators{{/collaborator}}"),
        "teams_url": format!("{api}/teams"),
        "hooks_url": format!("{api}/hooks"),
        "issue_events_url": format!("{api}/issues/events{{/number}}"),
        "events_url": format!("{api}/events"),
        "assignees_url": format!("{api}/assignees{{/user}}"),
        "branches_url": format!("{api}/branches{{/branch}}"),
        "tags_url": format!("{api}/tags"),
        "blobs_url": format!("{api}/git/blobs{{/sha}}"),
        "git_tags_url": format!("{api}/git/tags{{/sha}}"),
        "git_refs_url": format!("{api}/git/refs{{/sha}}"),
        "trees_url": format!("{api}/git/trees{{/sha}}"),
        "statuses_url": format!("{api}/statuses/{{sha}}"),
        "languages_url": format!("{api}/languages"),
        "stargazers_url": format!("{api}/stargazers"),
        "contributors_url": format!("{api}/contributors"),
        "subscribers_url": format!("{api}/subscribers"),
        "subscription_url": format!("{api}/subscription"),
        "commits_url": format!("{api}/commits{{/sha}}"),
        "git_commits_url": format!("{api}/git/commits{{/sha}}"),
        "comments_url": format!("{api}/comments{{/number}}"),
        "issue_comment_url": format!("{api}/issues/comments{{/number}}"),
        "contents_url": format!("{api}/contents/{{+path}}"),
        "compare_url": format!("{api}/compare/{{base}}...{{head}}"),
        "merges_url": format!("{api}/merges"),
        "archive_url": format!("{api}/{{archive_format}}{{/ref}}"),
        "downloads_url": format!("{api}/downloads"),
        "issues_url": format!("{api}/issues{{/number}}"),
        "pulls_url": format!("{api}/pulls{{/number}}"),
        "milestones_url": format!("{api}/milestones{{/number}}"),
        "notifications_url": format!("{api}/notifications{{?since,all,participating}}"),
        "labels_url": format!("{api}/labels{{/name}}"),
        "releases_url": format!("{api}/releases{{/id}}"),
        "deployments_url": format!("{api}/deployments"),
    });
    if let (Some(body), Json::Object(links)) = (body.as_object_mut(), links) {
        body.extend(links);
    }
    body
}

/// The REST issue object.
pub fn issue_json(repo: &Repository, issue: &Issue) -> Json {
    let full_name = repo.name_with_owner();
    let n = issue.number;
    let url = format!("{API}/repos/{full_name}/issues/{n}");
    json!({
        "url": url,
        "repository_url": format!("{API}/repos/{full_name}"),
        "labels_url": format!("{url}/labels{{/name}}"),
        "comments_url": format!("{url}/comments"),
        "events_url": format!("{url}/events"),
        "timeline_url": format!("{url}/timeline"),
        "html_url": format!("https://github.com/{full_name}/issues/{n}"),
        "id": issue.database_id,
        "node_id": issue.node_id,
        "number": n,
        "title": issue.title,
        "user": author_json(issue.author.as_deref()),
        "labels": [],
        "state": match issue.state { IssueState::Open => "open", IssueState::Closed => "closed" },
        "state_reason": match issue.state_reason {
            None => Json::Null,
            Some(IssueStateReason::Completed) => json!("completed"),
            Some(IssueStateReason::NotPlanned) => json!("not_planned"),
            Some(IssueStateReason::Reopened) => json!("reopened"),
            Some(IssueStateReason::Duplicate) => json!("duplicate"),
        },
        "locked": issue.locked,
        "active_lock_reason": lock_reason_json(issue.active_lock_reason),
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "comments": issue.comments,
        "created_at": model::format_time(issue.created_at),
        "updated_at": model::format_time(issue.updated_at),
        "closed_at": time_json(issue.closed_at),
        "author_association": "CONTRIBUTOR",
        "body": if issue.body.is_empty() { Json::Null } else { json!(issue.body) },
        "reactions": reactions_json(format!("{url}/reactions")),
        "performed_via_github_app": null,
    })
}

/// The REST pull request object, as `pull_request` events carry it.
pub fn pull_request_json(model: &Model, repo: &Repository, pr: &PullRequest) -> Json {
    let full_name = repo.name_with_owner();
    let n = pr.number;
    let repo_json = repository_json(model, repo);
    let branch = |name: &str, sha: String| {
        json!({
            "label": format!("{}:{name}", repo.owner),
            "ref": name,
            "sha": sha,
            "user": user_json(&repo.owner, model.owner_kind(&repo.owner)),
            "repo": repo_json,
        })
    };
    let merged = pr.state == PullRequestState::Merged;
    let api = format!("{API}/repos/{full_name}");
    let url = format!("{api}/pulls/{n}");
    let html_url = format!("https://github.com/{full_name}/pull/{n}");
    let issue_url = format!("{api}/issues/{n}");
    let links = json!({
        "self": { "href": url },
        "html": { "href": html_url },
        "issue": { "href": issue_url },
        "comments": { "href": format!("{issue_url}/comments") },
        "review_comments": { "href": format!("{url}/comments") },
        "review_comment": { "href": format!("{api}/pulls/comments{{/number}}") },
        "commits": { "href": format!("{url}/commits") },
        "statuses": { "href": format!("{api}/statuses/{}", pr.head_ref_oid) },
    });
    json!({
        "url": url,
        "id": pr.database_id,
        "node_id": pr.node_id,
        "html_url": html_url,
        "diff_url": format!("{html_url}.diff"),
        "patch_url": format!("{html_url}.patch"),
        "issue_url": issue_url,
        "commits_url": format!("{url}/commits"),
        "review_comments_url": format!("{url}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{issue_url}/comments"),
        "statuses_url": format!("{api}/statuses/{}", pr.head_ref_oid),
        "_links": links,
        "number": n,
        // REST has no MERGED state: a merged pull request is closed with `merged: true`.
        "state": if pr.state == PullRequestState::Open { "open" } else { "closed" },
        "locked": pr.locked,
        "active_lock_reason": lock_reason_json(pr.active_lock_reason),
        "title": pr.title,
        "user": author_json(pr.author.as_deref()),
        "body": if pr.body.is_empty() { Json::Null } else { json!(pr.body) },
        "created_at": model::format_time(pr.created_at),
        "updated_at": model::format_time(pr.updated_at),
        "closed_at": time_json(pr.closed_at),
        "merged_at": time_json(pr.merged_at),
        "merge_commit_sha": if merged { json!(model::object_id(pr.database_id ^ 0xffff)) } else { Json::Null },
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "labels": [],
        "milestone": null,
        "draft": pr.is_draft,
        "head": branch(&pr.head_ref_name, pr.head_ref_oid.clone()),
        "base": branch(&pr.base_ref_name, model::object_id(pr.database_id ^ 0xbeef)),
        "author_association": "CONTRIBUTOR",
        "auto_merge": null,
        "merged": merged,
        // GitHub computes mergeability in the background; a webhook usually names it unknown.
        "mergeable": null,
        "rebaseable": null,
        "mergeable_state": "unknown",
        // The model keeps no merger: the author merged it (the deleted-account one if gone).
        "merged_by": if merged { author_json(pr.author.as_deref()) } else { Json::Null },
        "maintainer_can_modify": false,
        "comments": pr.comments,
        "review_comments": 0,
        "commits": 1,
        "additions": 1,
        "deletions": 0,
        "changed_files": 1,
    })
}

/// The fields only the full pull request object has: review, review comment and review thread
/// events carry the simple one without them.
const FULL_PULL_REQUEST_ONLY: [&str; 12] = [
    "merged",
    "mergeable",
    "rebaseable",
    "mergeable_state",
    "merged_by",
    "maintainer_can_modify",
    "comments",
    "review_comments",
    "commits",
    "additions",
    "deletions",
    "changed_files",
];

/// The simple pull request object of review events.
pub fn simple_pull_request_json(model: &Model, repo: &Repository, pr: &PullRequest) -> Json {
    let mut body = pull_request_json(model, repo, pr);
    if let Some(map) = body.as_object_mut() {
        for key in FULL_PULL_REQUEST_ONLY {
            map.remove(key);
        }
    }
    body
}

/// The envelope every event shares: `repository`, `sender`, `installation`, `organization`.
fn envelope(model: &Model, action: &str, repo: &Repository, sender: Option<&str>) -> Json {
    let owner_kind = model.owner_kind(&repo.owner);
    let mut body = json!({
        "action": action,
        "repository": repository_json(model, repo),
        "sender": user_json(sender.unwrap_or(&repo.owner), OwnerKind::User),
    });
    if let Some(installation) = repo.installation {
        body["installation"] = json!({
            "id": installation,
            // GitHub's legacy global id: base64("023:IntegrationInstallation<id>").
            "node_id": base64::engine::general_purpose::STANDARD
                .encode(format!("023:IntegrationInstallation{installation}")),
        });
    }
    if owner_kind == OwnerKind::Organization {
        body["organization"] = organization_json(&repo.owner);
    }
    if action == "edited" {
        // GitHub lists the previous value of each changed field; the model keeps none.
        body["changes"] = json!({});
    }
    body
}

/// An `issues` event (`opened`, `edited`, `closed`, `reopened`, `deleted`, `locked`,
/// `unlocked`): the issue must be in the state the action leaves it in.
pub fn issues_payload(model: &Model, action: &str, repo: &Repository, issue: &Issue) -> Json {
    let mut body = envelope(model, action, repo, issue.author.as_deref());
    body["issue"] = issue_json(repo, issue);
    body
}

/// A `pull_request` event (`opened`, `edited`, `closed`, `reopened`, `converted_to_draft`,
/// `ready_for_review`, `locked`, `unlocked`); `synchronize` is
/// [`pull_request_synchronize_payload`], the review request actions
/// [`reviews::review_request_payload`].
pub fn pull_request_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
) -> Json {
    let mut body = envelope(model, action, repo, pr.author.as_deref());
    body["number"] = json!(pr.number);
    body["pull_request"] = pull_request_json(model, repo, pr);
    body
}

/// A `pull_request` `synchronize` event: the head moved from `before` to the pull request's
/// current head.
pub fn pull_request_synchronize_payload(
    model: &Model,
    repo: &Repository,
    pr: &PullRequest,
    before: &str,
) -> Json {
    let mut body = pull_request_payload(model, "synchronize", repo, pr);
    body["before"] = json!(before);
    body["after"] = json!(pr.head_ref_oid);
    body
}

/// One push of one commit to a branch (the model keeps no commits: a test states them).
#[derive(Debug, Clone)]
pub struct Push {
    /// The branch name, without `refs/heads/`.
    pub branch: String,
    /// The former head; forty zeros when the push created the branch.
    pub before: String,
    /// The new head; forty zeros when the push deleted the branch.
    pub after: String,
    /// The login that pushed (and authored the commit).
    pub pusher: String,
    /// The pushed commit's message.
    pub message: String,
    /// When the commit was made.
    pub at: time::OffsetDateTime,
}

/// The sha git writes for "no commit".
const NO_COMMIT: &str = "0000000000000000000000000000000000000000";

/// A `push` event (it has no `action`).
pub fn push_payload(model: &Model, repo: &Repository, push: &Push) -> Json {
    let full_name = repo.name_with_owner();
    let mut body = envelope(model, "", repo, Some(&push.pusher));
    if let Some(map) = body.as_object_mut() {
        map.remove("action");
    }
    let short = |sha: &str| sha[..sha.len().min(12)].to_owned();
    let (created, deleted) = (push.before == NO_COMMIT, push.after == NO_COMMIT);
    let head = (!deleted).then(|| {
        json!({
            "id": push.after,
            "tree_id": tree_id(&push.after),
            "distinct": true,
            "message": push.message,
            "timestamp": model::format_time(push.at),
            "url": format!("https://github.com/{full_name}/commit/{}", push.after),
            "author": committer_json(&push.pusher),
            "committer": committer_json(&push.pusher),
            "added": [],
            "removed": [],
            "modified": [],
        })
    });
    body["ref"] = json!(format!("refs/heads/{}", push.branch));
    body["before"] = json!(push.before);
    body["after"] = json!(push.after);
    body["created"] = json!(created);
    body["deleted"] = json!(deleted);
    body["forced"] = json!(false);
    body["base_ref"] = Json::Null;
    body["compare"] = json!(if created {
        format!(
            "https://github.com/{full_name}/commit/{}",
            short(&push.after)
        )
    } else {
        format!(
            "https://github.com/{full_name}/compare/{}...{}",
            short(&push.before),
            short(&push.after)
        )
    });
    body["commits"] = json!(head.iter().collect::<Vec<_>>());
    body["head_commit"] = head.unwrap_or(Json::Null);
    body["pusher"] = committer_json(&push.pusher);
    body
}

/// A `repository` event (`created`, `deleted`, `archived`, `unarchived`, `edited`, `renamed`,
/// `transferred`); `changes` as GitHub sends it for `renamed`/`transferred`/`edited`
/// (see [`renamed_changes`] and [`transferred_changes`]).
pub fn repository_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    changes: Option<Json>,
) -> Json {
    let mut body = envelope(model, action, repo, None);
    if let Some(changes) = changes {
        body["changes"] = changes;
    }
    body
}

/// A `star` event: `created` when `starred_at` is given, `deleted` (unstarred) otherwise.
pub fn star_payload(
    model: &Model,
    repo: &Repository,
    stargazer: &str,
    starred_at: Option<time::OffsetDateTime>,
) -> Json {
    let action = if starred_at.is_some() {
        "created"
    } else {
        "deleted"
    };
    let mut body = envelope(model, action, repo, Some(stargazer));
    body["starred_at"] = time_json(starred_at);
    body
}

/// `changes` of a `repository.renamed` event.
pub fn renamed_changes(old_name: &str) -> Json {
    json!({ "repository": { "name": { "from": old_name } } })
}

/// `changes` of a `repository.transferred` event: the former owner, as an organization or user.
pub fn transferred_changes(model: &Model, old_owner: &str) -> Json {
    let kind = model.owner_kind(old_owner);
    let key = match kind {
        OwnerKind::Organization => "organization",
        OwnerKind::User => "user",
    };
    json!({ "owner": { "from": { key: user_json(old_owner, kind) } } })
}

/// The `installation` object of installation events; `suspended` fills `suspended_at`/`_by`.
fn installation_json(model: &Model, installation: InstallationId, suspended: bool) -> Json {
    let account = model
        .installations
        .get(&installation)
        .map_or_else(|| "ghost".to_owned(), |i| i.account.clone());
    let kind = model.owner_kind(&account);
    let app_id: u64 = model
        .app_id
        .as_deref()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let target_type = match kind {
        OwnerKind::Organization => "Organization",
        OwnerKind::User => "User",
    };
    let created = model::format_time(model::EPOCH);
    json!({
        "id": installation,
        "account": user_json(&account, kind),
        "repository_selection": "selected",
        "access_tokens_url": format!("https://api.github.com/app/installations/{installation}/access_tokens"),
        "repositories_url": "https://api.github.com/installation/repositories",
        "html_url": format!("https://github.com/organizations/{account}/settings/installations/{installation}"),
        "app_id": app_id,
        "app_slug": "forgesync-sim",
        "target_id": account_number(&account),
        "target_type": target_type,
        "permissions": {
            "checks": "read", "issues": "read", "metadata": "read",
            "pull_requests": "read", "statuses": "read",
        },
        "events": [
            "check_run", "check_suite", "issue_comment", "issues", "pull_request",
            "pull_request_review", "pull_request_review_comment",
            "pull_request_review_thread", "repository", "status",
        ],
        "created_at": created,
        "updated_at": created,
        "single_file_name": null,
        "has_multiple_single_files": false,
        "single_file_paths": [],
        "suspended_by": if suspended { user_json(&account, OwnerKind::User) } else { Json::Null },
        "suspended_at": if suspended { json!(created) } else { Json::Null },
    })
}

/// A repository as installation events list it: no owner object, `full_name` names it.
fn installation_repository_json(repo: &Repository) -> Json {
    json!({
        "id": repo.database_id,
        "node_id": repo.node_id,
        "name": repo.name,
        "full_name": repo.name_with_owner(),
        "private": repo.private,
    })
}

/// An `installation` event (`created`, `deleted`, `suspend`, `unsuspend`,
/// `new_permissions_accepted`). `created` and `deleted` list the installation's repositories.
pub fn installation_payload(model: &Model, action: &str, installation: InstallationId) -> Json {
    let account = model
        .installations
        .get(&installation)
        .map_or_else(|| "ghost".to_owned(), |i| i.account.clone());
    let mut body = json!({
        "action": action,
        "installation": installation_json(model, installation, action == "suspend"),
        "sender": user_json(&account, OwnerKind::User),
    });
    // Who asked for an installation is not modelled: `created` then leaves it out, the other
    // actions name nobody.
    if action != "created" {
        body["requester"] = Json::Null;
    }
    if matches!(action, "created" | "deleted") {
        body["repositories"] = model
            .repositories()
            .filter(|r| r.installation == Some(installation))
            .map(installation_repository_json)
            .collect();
    }
    body
}

/// An `installation_target.renamed` event: the account `installation` is on was renamed from
/// `old_login` (the model already names it by its new login). The account is at the top level.
pub fn installation_target_payload(
    model: &Model,
    installation: InstallationId,
    old_login: &str,
) -> Json {
    let account = model
        .installations
        .get(&installation)
        .map_or_else(|| "ghost".to_owned(), |i| i.account.clone());
    let kind = model.owner_kind(&account);
    let target_type = match kind {
        OwnerKind::Organization => "Organization",
        OwnerKind::User => "User",
    };
    json!({
        "action": "renamed",
        "account": user_json(&account, kind),
        "changes": { "login": { "from": old_login } },
        "target_type": target_type,
        "installation": {
            "id": installation,
            "node_id": base64::engine::general_purpose::STANDARD
                .encode(format!("023:IntegrationInstallation{installation}")),
        },
        "sender": user_json(&account, OwnerKind::User),
    })
}

/// An `installation_repositories` event: `added` lists `repositories` in `repositories_added`,
/// `removed` in `repositories_removed`. Repositories the model no longer has are left out.
pub fn installation_repositories_payload(
    model: &Model,
    action: &str,
    installation: InstallationId,
    repositories: &[RepoId],
) -> Json {
    let account = model
        .installations
        .get(&installation)
        .map_or_else(|| "ghost".to_owned(), |i| i.account.clone());
    let listed: Vec<Json> = repositories
        .iter()
        .filter_map(|id| model.repository(*id))
        .map(installation_repository_json)
        .collect();
    let (added, removed) = match action {
        "added" => (listed, Vec::new()),
        _ => (Vec::new(), listed),
    };
    json!({
        "action": action,
        "installation": installation_json(model, installation, false),
        "repository_selection": "selected",
        "repositories_added": added,
        "repositories_removed": removed,
        "requester": null,
        "sender": user_json(&account, OwnerKind::User),
    })
}

fn check_status_json(s: CheckStatus) -> &'static str {
    match s {
        CheckStatus::Queued => "queued",
        CheckStatus::InProgress => "in_progress",
        CheckStatus::Completed => "completed",
    }
}

fn check_conclusion_json(c: Option<CheckConclusion>) -> Json {
    let Some(c) = c else { return Json::Null };
    json!(match c {
        CheckConclusion::Success => "success",
        CheckConclusion::Failure => "failure",
        CheckConclusion::Neutral => "neutral",
        CheckConclusion::Cancelled => "cancelled",
        CheckConclusion::Skipped => "skipped",
        CheckConclusion::TimedOut => "timed_out",
        CheckConclusion::ActionRequired => "action_required",
    })
}

/// The App object of a check suite or run.
fn app_json(app_id: u64, name: &str) -> Json {
    let slug = name.to_ascii_lowercase().replace(' ', "-");
    json!({
        "id": app_id,
        "slug": slug,
        "node_id": model::encode_node_id("A", app_id),
        "name": name,
        "description": null,
        "owner": user_json(&slug, OwnerKind::Organization),
        "html_url": format!("https://github.com/apps/{slug}"),
        "external_url": format!("https://{slug}.example"),
        "created_at": "2020-01-01T00:00:00Z",
        "updated_at": "2020-01-01T00:00:00Z",
        "permissions": { "checks": "write", "metadata": "read" },
        "events": [],
    })
}

/// The minimal pull request objects GitHub lists in check events: the repository's open pull
/// requests whose head is `sha` (none for a pull request from a fork).
fn check_pull_requests(repo: &Repository, sha: &str) -> Json {
    let full_name = repo.name_with_owner();
    let repo_ref = json!({
        "id": repo.database_id,
        "url": format!("https://api.github.com/repos/{full_name}"),
        "name": repo.name,
    });
    repo.pull_requests()
        .filter(|pr| pr.state == PullRequestState::Open && pr.head_ref_oid == sha)
        .map(|pr| {
            json!({
                "url": format!("https://api.github.com/repos/{full_name}/pulls/{}", pr.number),
                "id": pr.database_id,
                "number": pr.number,
                "head": { "ref": pr.head_ref_name, "sha": pr.head_ref_oid, "repo": repo_ref },
                "base": {
                    "ref": pr.base_ref_name,
                    "sha": model::object_id(pr.database_id ^ 0xbeef),
                    "repo": repo_ref,
                },
            })
        })
        .collect::<Vec<_>>()
        .into()
}

/// The check suite as a check run names it.
fn check_run_suite_json(repo: &Repository, suite: &CheckSuite) -> Json {
    let full_name = repo.name_with_owner();
    json!({
        "id": suite.id,
        "node_id": model::encode_node_id("CS", suite.id),
        "head_branch": if suite.head_branch.is_empty() { Json::Null } else { json!(suite.head_branch) },
        "head_sha": suite.head_sha,
        "status": check_status_json(suite.status),
        "conclusion": check_conclusion_json(suite.conclusion),
        "url": format!("{API}/repos/{full_name}/check-suites/{}", suite.id),
        "before": null,
        "after": suite.head_sha,
        "pull_requests": check_pull_requests(repo, &suite.head_sha),
        "app": app_json(suite.app_id, &suite.app_name),
        "created_at": model::format_time(suite.created_at),
        "updated_at": model::format_time(suite.updated_at),
    })
}

/// The REST check suite object, as `check_suite` events carry it. The model keeps no commits:
/// the head commit is described from its sha and the suite's time.
pub fn check_suite_json(repo: &Repository, suite: &CheckSuite) -> Json {
    let full_name = repo.name_with_owner();
    let mut body = check_run_suite_json(repo, suite);
    body["latest_check_runs_count"] = json!(suite.runs.len());
    body["check_runs_url"] = json!(format!(
        "{API}/repos/{full_name}/check-suites/{}/check-runs",
        suite.id
    ));
    body["head_commit"] = json!({
        "id": suite.head_sha,
        "tree_id": tree_id(&suite.head_sha),
        "message": format!("Commit {}", &suite.head_sha[..suite.head_sha.len().min(7)]),
        "timestamp": model::format_time(suite.created_at),
        "author": committer_json(&repo.owner),
        "committer": committer_json(&repo.owner),
    });
    body
}

/// A git identity (`author`, `committer`, `pusher`) of a login, with GitHub's no-reply address.
fn committer_json(login: &str) -> Json {
    json!({
        "name": login,
        "email": format!("{}+{login}@users.noreply.github.com", account_number(login)),
    })
}

/// A stable tree sha for a commit the model does not keep.
fn tree_id(commit: &str) -> String {
    use sha2::Digest as _;
    hex::encode(&sha2::Sha256::digest(format!("tree {commit}").as_bytes())[..20])
}

/// A `check_suite` event (`completed`, `requested`, `rerequested`).
pub fn check_suite_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    suite: &CheckSuite,
) -> Json {
    let mut body = envelope(model, action, repo, None);
    body["check_suite"] = check_suite_json(repo, suite);
    body
}

/// A `check_run` event (`created`, `completed`, `rerequested`).
pub fn check_run_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    suite: &CheckSuite,
    run: &CheckRun,
) -> Json {
    let full_name = repo.name_with_owner();
    let mut body = envelope(model, action, repo, None);
    body["check_run"] = json!({
        "id": run.id,
        "node_id": model::encode_node_id("CR", run.id),
        "head_sha": suite.head_sha,
        "external_id": run.id.to_string(),
        "url": format!("https://api.github.com/repos/{full_name}/check-runs/{}", run.id),
        "html_url": format!("https://github.com/{full_name}/runs/{}", run.id),
        "details_url": run.details_url,
        "status": check_status_json(run.status),
        "conclusion": check_conclusion_json(run.conclusion),
        "started_at": model::format_time(run.started_at),
        "completed_at": time_json(run.completed_at),
        "output": {
            "title": null,
            "summary": null,
            "text": null,
            "annotations_count": 0,
            "annotations_url": format!("{API}/repos/{full_name}/check-runs/{}/annotations", run.id),
        },
        "name": run.name,
        "check_suite": check_run_suite_json(repo, suite),
        "app": app_json(suite.app_id, &suite.app_name),
        "pull_requests": check_pull_requests(repo, &suite.head_sha),
    });
    body
}

/// A `status` event (it has no `action`).
pub fn status_payload(model: &Model, repo: &Repository, status: &CommitStatus) -> Json {
    let full_name = repo.name_with_owner();
    let mut body = envelope(model, "", repo, None);
    if let Some(map) = body.as_object_mut() {
        map.remove("action");
    }
    let state = match status.state {
        StatusState::Pending => "pending",
        StatusState::Success => "success",
        StatusState::Failure => "failure",
        StatusState::Error => "error",
    };
    let at = model::format_time(status.created_at);
    body["id"] = json!(status.id);
    body["sha"] = json!(status.sha);
    body["name"] = json!(full_name);
    body["target_url"] = json!(status.target_url);
    body["context"] = json!(status.context);
    body["description"] = json!(status.description);
    body["state"] = json!(state);
    // The model keeps no commits: the commit is described from its sha and the status's time.
    let commit_url = format!("{API}/repos/{full_name}/commits/{}", status.sha);
    let git_author = {
        let mut who = committer_json(&repo.owner);
        who["date"] = json!(at);
        who
    };
    let parent = model::object_id(status.id ^ 0xc0ffee);
    body["commit"] = json!({
        "sha": status.sha,
        "node_id": model::encode_node_id("C", status.id),
        "commit": {
            "author": git_author,
            "committer": git_author,
            "message": format!("Commit {}", &status.sha[..status.sha.len().min(7)]),
            "tree": {
                "sha": tree_id(&status.sha),
                "url": format!("{API}/repos/{full_name}/git/trees/{}", tree_id(&status.sha)),
            },
            "url": format!("{API}/repos/{full_name}/git/commits/{}", status.sha),
            "comment_count": 0,
            "verification": {
                "verified": false,
                "reason": "unsigned",
                "signature": null,
                "payload": null,
            },
        },
        "url": commit_url,
        "html_url": format!("https://github.com/{full_name}/commit/{}", status.sha),
        "comments_url": format!("{commit_url}/comments"),
        "author": user_json(&repo.owner, model.owner_kind(&repo.owner)),
        "committer": user_json(&repo.owner, model.owner_kind(&repo.owner)),
        "parents": [{
            "sha": parent,
            "url": format!("{API}/repos/{full_name}/commits/{parent}"),
            "html_url": format!("https://github.com/{full_name}/commit/{parent}"),
        }],
    });
    body["branches"] = json!([]);
    body["created_at"] = json!(at);
    body["updated_at"] = json!(at);
    body
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, the `X-Hub-Signature-256` value.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// One delivery; resending the same value is a GitHub redelivery (same `X-GitHub-Delivery`).
#[derive(Clone, Debug)]
pub struct Delivery {
    /// `X-GitHub-Event`
    pub event: String,
    /// `X-GitHub-Delivery`
    pub delivery_id: String,
    /// `X-GitHub-Hook-ID`
    pub hook_id: u64,
    /// The raw body, signed as is.
    pub body: Vec<u8>,
}

impl Delivery {
    /// A new delivery of `payload` for `event` with a fresh delivery id and hook id 1.
    pub fn new(event: &str, payload: &Json) -> Self {
        Self {
            event: event.to_owned(),
            delivery_id: uuid::Uuid::new_v4().to_string(),
            hook_id: 1,
            body: serde_json::to_vec(payload).unwrap_or_default(),
        }
    }

    /// POSTs the delivery to `url` as GitHub does (10 s timeout) and returns the status.
    pub async fn send(
        &self,
        client: &reqwest::Client,
        url: &str,
        secret: &[u8],
    ) -> Result<reqwest::StatusCode, reqwest::Error> {
        let response = client
            .post(url)
            .timeout(Duration::from_secs(10))
            .header("content-type", "application/json")
            .header("user-agent", "GitHub-Hookshot/vendor-sim")
            .header("x-github-event", &self.event)
            .header("x-github-delivery", &self.delivery_id)
            .header("x-github-hook-id", self.hook_id.to_string())
            .header("x-hub-signature-256", signature(secret, &self.body))
            .body(self.body.clone())
            .send()
            .await?;
        let status = response.status();
        // Read the answer to its end, as a vendor does: only then is the connection reused.
        response.bytes().await?;
        Ok(status)
    }
}

/// Sends one signed webhook delivery of `payload` for `event` to `url`; returns the status.
pub async fn send_webhook(
    url: &str,
    secret: &[u8],
    event: &str,
    payload: &Json,
) -> Result<reqwest::StatusCode, reqwest::Error> {
    // reqwest needs the process's rustls provider even for plain http.
    runtime::install_crypto_provider();
    Delivery::new(event, payload)
        .send(&reqwest::Client::new(), url, secret)
        .await
}
