//! The parts of GitHub's webhook payloads (REST object shapes) github-sync reads, and their
//! conversion to the rows the sync writes, so both paths store the same values.

use serde::Deserialize;
use time::OffsetDateTime;

use scm_mirror::comments::CommentFields;
use scm_mirror::items::{IssueNode, ItemFields, PullRequestNode};
use scm_mirror::repository::RepoHeader;

#[derive(Debug, Clone, Deserialize)]
pub struct Account {
    pub login: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Repository {
    pub id: i64,
    pub node_id: String,
    pub name: String,
    pub owner: Account,
    #[serde(default)]
    pub archived: Option<bool>,
}

impl Repository {
    pub fn header(&self) -> RepoHeader {
        RepoHeader {
            native_id: self.id,
            node_id: self.node_id.clone(),
            owner: self.owner.login.clone(),
            name: self.name.clone(),
            archived: self.archived,
        }
    }
}

/// What an issue and a pull request object share.
#[derive(Debug, Clone, Deserialize)]
pub struct Item {
    pub id: i64,
    pub node_id: String,
    pub number: i32,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    pub state: String,
    #[serde(default)]
    pub user: Option<Account>,
    #[serde(default)]
    pub locked: Option<bool>,
    #[serde(default)]
    pub active_lock_reason: Option<String>,
    #[serde(default)]
    pub comments: Option<i32>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub closed_at: Option<OffsetDateTime>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Issue {
    #[serde(flatten)]
    pub item: Item,
    #[serde(default)]
    pub state_reason: Option<String>,
    /// Present when the issue is a pull request's conversation (`issue_comment` on a pull
    /// request): the issue's `id` is then not the pull request's.
    #[serde(default)]
    pub pull_request: Option<IssuePullRequest>,
}

/// The `pull_request` marker of an issue object.
#[derive(Debug, Clone, Deserialize)]
pub struct IssuePullRequest {
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub merged_at: Option<OffsetDateTime>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Branch {
    #[serde(rename = "ref")]
    pub name: String,
    pub sha: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullRequest {
    #[serde(flatten)]
    pub item: Item,
    #[serde(default)]
    pub draft: Option<bool>,
    pub head: Branch,
    pub base: Branch,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub merged_at: Option<OffsetDateTime>,
    /// The people asked for a review; absent from payloads that do not carry the lists.
    #[serde(default)]
    pub requested_reviewers: Option<Vec<Account>>,
    /// The teams asked for a review.
    #[serde(default)]
    pub requested_teams: Option<Vec<Team>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Team {
    pub slug: String,
}

/// A conversation comment (`issue_comment`).
#[derive(Debug, Clone, Deserialize)]
pub struct Comment {
    pub id: i64,
    pub node_id: String,
    #[serde(default)]
    pub user: Option<Account>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// A pull request review (`pull_request_review`).
#[derive(Debug, Clone, Deserialize)]
pub struct Review {
    pub id: i64,
    pub node_id: String,
    #[serde(default)]
    pub user: Option<Account>,
    #[serde(default)]
    pub body: Option<String>,
    /// `approved`, `changes_requested`, `commented`, `dismissed` or `pending`.
    pub state: String,
    #[serde(default)]
    pub commit_id: Option<String>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub submitted_at: Option<OffsetDateTime>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub updated_at: Option<OffsetDateTime>,
}

/// A review comment on a pull request's diff (`pull_request_review_comment`, and the comments
/// of a `pull_request_review_thread`).
#[derive(Debug, Clone, Deserialize)]
pub struct ReviewComment {
    /// What it shares with a conversation comment.
    #[serde(flatten)]
    pub comment: Comment,
    #[serde(default)]
    pub pull_request_review_id: Option<i64>,
    #[serde(default)]
    pub in_reply_to_id: Option<i64>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub line: Option<i32>,
    #[serde(default)]
    pub commit_id: Option<String>,
}

/// A review thread (`pull_request_review_thread`): GitHub names no resolution time.
#[derive(Debug, Clone, Deserialize)]
pub struct Thread {
    pub node_id: String,
    #[serde(default)]
    pub comments: Vec<ReviewComment>,
}

/// REST lock reasons (`off-topic`, `too heated`) as the GraphQL enum the sync stores
/// (`off_topic`, `too_heated`).
fn lock_reason(reason: Option<&str>) -> Option<String> {
    reason.map(|r| r.replace(['-', ' '], "_").to_ascii_lowercase())
}

impl Comment {
    /// The comment as the mirror stores it.
    pub fn fields(&self) -> CommentFields<'_> {
        CommentFields {
            native_id: self.id,
            node_id: &self.node_id,
            author: self.user.as_ref().map(|u| u.login.as_str()),
            body: self.body.as_deref(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

impl Item {
    /// The item as the mirror stores it, in the state the sync stores.
    fn fields(&self, state: String) -> ItemFields {
        ItemFields {
            native_id: self.id,
            node_id: self.node_id.clone(),
            number: self.number,
            title: self.title.clone(),
            body: self.body.clone().unwrap_or_default(),
            state,
            author: self.user.as_ref().map(|u| u.login.clone()),
            locked: self.locked,
            lock_reason: lock_reason(self.active_lock_reason.as_deref()),
            comment_count: self.comments,
            created_at: self.created_at,
            updated_at: self.updated_at,
            closed_at: self.closed_at,
        }
    }
}

impl Issue {
    pub fn node(&self) -> IssueNode {
        IssueNode {
            fields: self.item.fields(self.item.state.clone()),
            state_reason: self.state_reason.clone(),
        }
    }
}

impl PullRequest {
    pub fn node(&self) -> PullRequestNode {
        // REST has no merged state: a merged pull request is closed with `merged_at`.
        let state = match (&*self.item.state, self.merged_at) {
            ("closed", Some(_)) => "merged".to_owned(),
            (state, _) => state.to_owned(),
        };
        PullRequestNode {
            fields: self.item.fields(state),
            draft: self.draft,
            // Webhooks carry no review count: unknown, the stored one stays.
            review_count: None,
            head_ref: Some(self.head.name.clone()),
            head_sha: Some(self.head.sha.clone()),
            base_ref: Some(self.base.name.clone()),
            merged_at: self.merged_at,
        }
    }
}
