//! Real-shaped payloads of the conversation and review events: `issue_comment`,
//! `pull_request_review`, `pull_request_review_comment`, `pull_request_review_thread`, and the
//! `review_requested`/`review_request_removed` actions of `pull_request` with the whole
//! `requested_reviewers` and `requested_teams` lists.
//!
//! The model keeps no comments or reviews: a test states them with the small values below and
//! the builders render them as GitHub's REST objects.

use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::{
    API, author_json, envelope, issue_json, pull_request_json, reactions_json,
    simple_pull_request_json, time_json, user_json,
};
use crate::github::model::{self, Issue, Model, OwnerKind, PullRequest, Repository};

/// A conversation comment of an issue or a pull request.
#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A review's state as REST writes it. A pending review is sent in no webhook: GitHub announces
/// a review when it is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewState {
    Commented,
    Approved,
    ChangesRequested,
    Dismissed,
}

impl ReviewState {
    fn as_str(self) -> &'static str {
        match self {
            ReviewState::Commented => "commented",
            ReviewState::Approved => "approved",
            ReviewState::ChangesRequested => "changes_requested",
            ReviewState::Dismissed => "dismissed",
        }
    }
}

/// A pull request review. GitHub's review object has no `updated_at`: a review is dated by its
/// submission, whatever happens to it later.
#[derive(Debug, Clone)]
pub struct Review {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub state: ReviewState,
    pub commit_id: String,
    pub submitted_at: Option<OffsetDateTime>,
}

/// A review comment on a line of the diff.
#[derive(Debug, Clone)]
pub struct ReviewComment {
    pub id: u64,
    pub review_id: u64,
    pub in_reply_to: Option<u64>,
    pub author: String,
    pub body: String,
    pub path: String,
    pub line: u32,
    pub commit_id: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// The whole list of review requests of a pull request.
#[derive(Debug, Clone, Default)]
pub struct Reviewers {
    /// Logins of the people asked.
    pub users: Vec<String>,
    /// Slugs of the teams asked (of the repository's owner).
    pub teams: Vec<String>,
}

/// One review request, as `requested_reviewer` or `requested_team` of a `review_requested` event.
#[derive(Debug, Clone)]
pub enum Requested {
    User(String),
    Team(String),
}

/// A stable numeric id for a test-stated object name (team slug).
fn name_number(name: &str) -> u64 {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(name.as_bytes());
    u64::from_be_bytes(d[..8].try_into().unwrap_or_default()) >> 40
}

/// The REST team object.
fn team_json(owner: &str, slug: &str) -> Json {
    let id = name_number(&format!("{owner}/{slug}"));
    json!({
        "name": slug,
        "id": id,
        "node_id": model::encode_node_id("T", id),
        "slug": slug,
        "description": null,
        "privacy": "closed",
        "notification_setting": "notifications_enabled",
        "permission": "pull",
        "url": format!("https://api.github.com/organizations/{}/team/{id}", name_number(owner)),
        "html_url": format!("https://github.com/orgs/{owner}/teams/{slug}"),
        "members_url": format!("https://api.github.com/organizations/{}/team/{id}/members{{/member}}", name_number(owner)),
        "repositories_url": format!("https://api.github.com/organizations/{}/team/{id}/repos", name_number(owner)),
        "parent": null,
    })
}

/// A pull request object (full or simple) with its review request lists.
fn with_reviewers(mut body: Json, repo: &Repository, reviewers: &Reviewers) -> Json {
    body["requested_reviewers"] = reviewers
        .users
        .iter()
        .map(|u| user_json(u, OwnerKind::User))
        .collect();
    body["requested_teams"] = reviewers
        .teams
        .iter()
        .map(|t| team_json(&repo.owner, t))
        .collect();
    body
}

/// A pull request's conversation as an issue object: the issue's own id (not the pull
/// request's), and a `pull_request` marker.
fn pull_request_issue_json(repo: &Repository, pr: &PullRequest) -> Json {
    let full_name = repo.name_with_owner();
    let n = pr.number;
    let closed = pr.state != model::PullRequestState::Open;
    let url = format!("{API}/repos/{full_name}/issues/{n}");
    json!({
        "url": url,
        "repository_url": format!("{API}/repos/{full_name}"),
        "labels_url": format!("{url}/labels{{/name}}"),
        "comments_url": format!("{url}/comments"),
        "events_url": format!("{url}/events"),
        "timeline_url": format!("{url}/timeline"),
        "html_url": format!("https://github.com/{full_name}/pull/{n}"),
        // GitHub numbers a pull request's issue separately from the pull request.
        "id": pr.database_id ^ 0x5a5a_5a5a,
        "node_id": model::encode_node_id("I", pr.database_id ^ 0x5a5a_5a5a),
        "number": n,
        "title": pr.title,
        "user": author_json(pr.author.as_deref()),
        "labels": [],
        "state": if closed { "closed" } else { "open" },
        "state_reason": null,
        "locked": pr.locked,
        "active_lock_reason": super::lock_reason_json(pr.active_lock_reason),
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "comments": pr.comments,
        "created_at": model::format_time(pr.created_at),
        "updated_at": model::format_time(pr.updated_at),
        "closed_at": time_json(pr.closed_at),
        "author_association": "CONTRIBUTOR",
        "draft": pr.is_draft,
        "pull_request": {
            "url": format!("https://api.github.com/repos/{full_name}/pulls/{n}"),
            "html_url": format!("https://github.com/{full_name}/pull/{n}"),
            "diff_url": format!("https://github.com/{full_name}/pull/{n}.diff"),
            "patch_url": format!("https://github.com/{full_name}/pull/{n}.patch"),
            "merged_at": time_json(pr.merged_at),
        },
        "body": if pr.body.is_empty() { Json::Null } else { json!(pr.body) },
        "reactions": reactions_json(format!("{url}/reactions")),
        "performed_via_github_app": null,
    })
}

/// The REST issue comment object.
fn comment_json(repo: &Repository, number: u64, is_pull: bool, comment: &Comment) -> Json {
    let full_name = repo.name_with_owner();
    let page = if is_pull { "pull" } else { "issues" };
    let url = format!("{API}/repos/{full_name}/issues/comments/{}", comment.id);
    json!({
        "url": url,
        "html_url": format!("https://github.com/{full_name}/{page}/{number}#issuecomment-{}", comment.id),
        "issue_url": format!("https://api.github.com/repos/{full_name}/issues/{number}"),
        "id": comment.id,
        "node_id": model::encode_node_id("IC", comment.id),
        "user": user_json(&comment.author, OwnerKind::User),
        "created_at": model::format_time(comment.created_at),
        "updated_at": model::format_time(comment.updated_at),
        "author_association": "CONTRIBUTOR",
        "body": comment.body,
        "reactions": reactions_json(format!("{url}/reactions")),
        "performed_via_github_app": null,
    })
}

/// The REST review comment object.
fn review_comment_json(repo: &Repository, pr: &PullRequest, c: &ReviewComment) -> Json {
    let full_name = repo.name_with_owner();
    let n = pr.number;
    let url = format!("{API}/repos/{full_name}/pulls/comments/{}", c.id);
    let html_url = format!(
        "https://github.com/{full_name}/pull/{n}#discussion_r{}",
        c.id
    );
    let pull_request_url = format!("{API}/repos/{full_name}/pulls/{n}");
    let mut body = json!({
        "url": url,
        "pull_request_review_id": c.review_id,
        "id": c.id,
        "node_id": model::encode_node_id("PRRC", c.id),
        "diff_hunk": format!("@@ -1,1 +1,{} @@", c.line),
        "path": c.path,
        "position": c.line,
        "original_position": c.line,
        "commit_id": c.commit_id,
        "original_commit_id": c.commit_id,
        "user": user_json(&c.author, OwnerKind::User),
        "body": c.body,
        "created_at": model::format_time(c.created_at),
        "updated_at": model::format_time(c.updated_at),
        "html_url": html_url,
        "pull_request_url": pull_request_url,
        "author_association": "CONTRIBUTOR",
        "_links": {
            "self": { "href": url },
            "html": { "href": html_url },
            "pull_request": { "href": pull_request_url },
        },
        "start_line": null,
        "original_start_line": null,
        "start_side": null,
        "line": c.line,
        "original_line": c.line,
        "side": "RIGHT",
        "subject_type": "line",
        "reactions": reactions_json(format!("{url}/reactions")),
    });
    if let Some(parent) = c.in_reply_to {
        body["in_reply_to_id"] = json!(parent);
    }
    body
}

/// An `issue_comment` event on an issue (`created`, `edited`, `deleted`).
pub fn issue_comment_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    issue: &Issue,
    comment: &Comment,
) -> Json {
    let mut body = envelope(model, action, repo, Some(&comment.author));
    body["issue"] = issue_json(repo, issue);
    body["comment"] = comment_json(repo, issue.number, false, comment);
    body
}

/// An `issue_comment` event on a pull request's conversation.
pub fn pull_request_comment_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
    comment: &Comment,
) -> Json {
    let mut body = envelope(model, action, repo, Some(&comment.author));
    body["issue"] = pull_request_issue_json(repo, pr);
    body["comment"] = comment_json(repo, pr.number, true, comment);
    body
}

/// A `pull_request_review` event (`submitted`, `edited`, `dismissed`).
pub fn pull_request_review_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
    review: &Review,
) -> Json {
    let full_name = repo.name_with_owner();
    let n = pr.number;
    let mut body = envelope(model, action, repo, Some(&review.author));
    body["pull_request"] = simple_pull_request_json(model, repo, pr);
    body["review"] = json!({
        "id": review.id,
        "node_id": model::encode_node_id("PRR", review.id),
        "user": user_json(&review.author, OwnerKind::User),
        "body": if review.body.is_empty() { Json::Null } else { json!(review.body) },
        "commit_id": review.commit_id,
        "submitted_at": time_json(review.submitted_at),
        "state": review.state.as_str(),
        "html_url": format!("https://github.com/{full_name}/pull/{n}#pullrequestreview-{}", review.id),
        "pull_request_url": format!("https://api.github.com/repos/{full_name}/pulls/{n}"),
        "author_association": "CONTRIBUTOR",
        "_links": {
            "html": { "href": format!("https://github.com/{full_name}/pull/{n}#pullrequestreview-{}", review.id) },
            "pull_request": { "href": format!("https://api.github.com/repos/{full_name}/pulls/{n}") },
        },
    });
    body
}

/// A `pull_request_review_comment` event (`created`, `edited`, `deleted`).
pub fn pull_request_review_comment_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
    comment: &ReviewComment,
) -> Json {
    let mut body = envelope(model, action, repo, Some(&comment.author));
    body["pull_request"] = simple_pull_request_json(model, repo, pr);
    body["comment"] = review_comment_json(repo, pr, comment);
    body
}

/// A `pull_request_review_thread` event (`resolved`, `unresolved`): the thread's node id and
/// its comments; GitHub names no resolution time.
pub fn pull_request_review_thread_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
    thread_node_id: &str,
    comments: &[ReviewComment],
    sender: &str,
) -> Json {
    let mut body = envelope(model, action, repo, Some(sender));
    body["pull_request"] = simple_pull_request_json(model, repo, pr);
    body["thread"] = json!({
        "node_id": thread_node_id,
        "comments": comments.iter().map(|c| review_comment_json(repo, pr, c)).collect::<Vec<_>>(),
    });
    body
}

/// A `pull_request` event carrying the whole review request lists; `review_requested` and
/// `review_request_removed` also name the one request (`requested`) the action is about.
pub fn review_request_payload(
    model: &Model,
    action: &str,
    repo: &Repository,
    pr: &PullRequest,
    requested: Option<&Requested>,
    reviewers: &Reviewers,
) -> Json {
    let mut body = envelope(model, action, repo, pr.author.as_deref());
    body["number"] = json!(pr.number);
    body["pull_request"] = with_reviewers(pull_request_json(model, repo, pr), repo, reviewers);
    match requested {
        Some(Requested::User(login)) => {
            body["requested_reviewer"] = user_json(login, OwnerKind::User);
        }
        Some(Requested::Team(slug)) => {
            body["requested_team"] = team_json(&repo.owner, slug);
        }
        None => {}
    }
    body
}
