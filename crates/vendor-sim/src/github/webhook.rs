//! Webhooks as GitHub sends them: real-shaped `issues`, `pull_request`, `repository`,
//! `installation`, `installation_repositories`, `check_suite`, `check_run` and `status`
//! payloads built from the model, signed with `X-Hub-Signature-256`.
//!
//! Shapes follow GitHub's documented webhook payloads (the REST objects), trimmed to the fields
//! a consumer reads; URLs point at `github.com` like the real ones.

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

/// A REST account object (`user`, `owner`, `sender`).
fn account_json(login: &str, kind: OwnerKind) -> Json {
    let id = account_number(login);
    let (ty, prefix) = match kind {
        OwnerKind::Organization => ("Organization", "O"),
        OwnerKind::User => ("User", "U"),
    };
    json!({
        "login": login,
        "id": id,
        "node_id": model::encode_node_id(prefix, id),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
        "html_url": format!("https://github.com/{login}"),
        "type": ty,
        "site_admin": false,
    })
}

/// The deleted-account placeholder GitHub shows for authors that are gone.
fn author_json(author: Option<&str>) -> Json {
    account_json(author.unwrap_or("ghost"), OwnerKind::User)
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
pub fn repository_json(model: &Model, repo: &Repository) -> Json {
    let full_name = repo.name_with_owner();
    json!({
        "id": repo.database_id,
        "node_id": repo.node_id,
        "name": repo.name,
        "full_name": full_name,
        "private": false,
        "owner": account_json(&repo.owner, model.owner_kind(&repo.owner)),
        "html_url": format!("https://github.com/{full_name}"),
        "url": format!("https://api.github.com/repos/{full_name}"),
        "fork": false,
        "archived": repo.is_archived,
        "disabled": false,
        "visibility": "public",
        "default_branch": "main",
        "has_issues": true,
        "created_at": model::format_time(repo.created_at),
        "updated_at": model::format_time(repo.created_at),
        "pushed_at": model::format_time(repo.created_at),
    })
}

/// The REST issue object.
pub fn issue_json(repo: &Repository, issue: &Issue) -> Json {
    let full_name = repo.name_with_owner();
    let n = issue.number;
    json!({
        "url": format!("https://api.github.com/repos/{full_name}/issues/{n}"),
        "repository_url": format!("https://api.github.com/repos/{full_name}"),
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
    })
}

/// The REST pull request object.
pub fn pull_request_json(model: &Model, repo: &Repository, pr: &PullRequest) -> Json {
    let full_name = repo.name_with_owner();
    let n = pr.number;
    let repo_json = repository_json(model, repo);
    let branch = |name: &str, sha: String| {
        json!({
            "label": format!("{}:{name}", repo.owner),
            "ref": name,
            "sha": sha,
            "user": account_json(&repo.owner, model.owner_kind(&repo.owner)),
            "repo": repo_json,
        })
    };
    let merged = pr.state == PullRequestState::Merged;
    json!({
        "url": format!("https://api.github.com/repos/{full_name}/pulls/{n}"),
        "id": pr.database_id,
        "node_id": pr.node_id,
        "html_url": format!("https://github.com/{full_name}/pull/{n}"),
        "issue_url": format!("https://api.github.com/repos/{full_name}/issues/{n}"),
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
        "draft": pr.is_draft,
        "head": branch(&pr.head_ref_name, pr.head_ref_oid.clone()),
        "base": branch(&pr.base_ref_name, model::object_id(pr.database_id ^ 0xbeef)),
        "author_association": "CONTRIBUTOR",
        "merged": merged,
        "comments": pr.comments,
        "review_comments": 0,
        "commits": 1,
        "additions": 1,
        "deletions": 0,
        "changed_files": 1,
    })
}

/// The envelope every event shares: `repository`, `sender`, `installation`, `organization`.
fn envelope(model: &Model, action: &str, repo: &Repository, sender: Option<&str>) -> Json {
    let owner_kind = model.owner_kind(&repo.owner);
    let mut body = json!({
        "action": action,
        "repository": repository_json(model, repo),
        "sender": account_json(sender.unwrap_or(&repo.owner), OwnerKind::User),
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
        let id = account_number(&repo.owner);
        body["organization"] = json!({
            "login": repo.owner,
            "id": id,
            "node_id": model::encode_node_id("O", id),
        });
    }
    body
}

/// An `issues` event (`opened`, `edited`, `closed`, `reopened`, `deleted`, `locked`, ...).
pub fn issues_payload(model: &Model, action: &str, repo: &Repository, issue: &Issue) -> Json {
    let mut body = envelope(model, action, repo, issue.author.as_deref());
    body["issue"] = issue_json(repo, issue);
    body
}

/// A `pull_request` event (`opened`, `edited`, `closed`, `reopened`, `converted_to_draft`, ...).
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

/// A `repository` event (`created`, `deleted`, `archived`, `unarchived`, `renamed`,
/// `transferred`, ...); `changes` as GitHub sends it for `renamed`/`transferred`/`edited`
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
    json!({ "owner": { "from": { key: account_json(old_owner, kind) } } })
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
        "client_id": format!("Iv1.sim{app_id:08}"),
        "account": account_json(&account, kind),
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
        "suspended_by": if suspended { account_json(&account, OwnerKind::User) } else { Json::Null },
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
        "private": false,
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
        "requester": null,
        "sender": account_json(&account, OwnerKind::User),
    });
    if matches!(action, "created" | "deleted") {
        body["repositories"] = model
            .repositories()
            .filter(|r| r.installation == Some(installation))
            .map(installation_repository_json)
            .collect();
    }
    body
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
        "sender": account_json(&account, OwnerKind::User),
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
        "owner": account_json(&slug, OwnerKind::Organization),
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

/// The REST check suite object.
pub fn check_suite_json(repo: &Repository, suite: &CheckSuite) -> Json {
    let full_name = repo.name_with_owner();
    json!({
        "id": suite.id,
        "node_id": model::encode_node_id("CS", suite.id),
        "head_branch": if suite.head_branch.is_empty() { Json::Null } else { json!(suite.head_branch) },
        "head_sha": suite.head_sha,
        "status": check_status_json(suite.status),
        "conclusion": check_conclusion_json(suite.conclusion),
        "url": format!("https://api.github.com/repos/{full_name}/check-suites/{}", suite.id),
        "before": null,
        "after": suite.head_sha,
        "pull_requests": check_pull_requests(repo, &suite.head_sha),
        "app": app_json(suite.app_id, &suite.app_name),
        "created_at": model::format_time(suite.created_at),
        "updated_at": model::format_time(suite.updated_at),
        "rerequestable": true,
        "runs_rerequestable": true,
        "latest_check_runs_count": suite.runs.len(),
        "check_runs_url": format!("https://api.github.com/repos/{full_name}/check-suites/{}/check-runs", suite.id),
    })
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

/// A `check_run` event (`created`, `completed`, `rerequested`, `requested_action`).
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
        "output": { "title": null, "summary": null, "text": null, "annotations_count": 0 },
        "name": run.name,
        "check_suite": check_suite_json(repo, suite),
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
    body["commit"] = json!({
        "sha": status.sha,
        "node_id": model::encode_node_id("C", status.id),
        "url": format!("https://api.github.com/repos/{full_name}/commits/{}", status.sha),
        "html_url": format!("https://github.com/{full_name}/commit/{}", status.sha),
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
