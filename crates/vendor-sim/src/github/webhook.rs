//! Webhooks as GitHub sends them: real-shaped `issues`, `pull_request` and `repository`
//! payloads built from the model, signed with `X-Hub-Signature-256`.
//!
//! Shapes follow GitHub's documented webhook payloads (the REST objects), trimmed to the fields
//! a consumer reads; URLs point at `github.com` like the real ones.

use std::time::Duration;

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value as Json, json};

pub mod reviews;

use super::model::{
    self, Issue, IssueState, IssueStateReason, LockReason, Model, OwnerKind, PullRequest,
    PullRequestState, Repository,
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
        Ok(response.status())
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
