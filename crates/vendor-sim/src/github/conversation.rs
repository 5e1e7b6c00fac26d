//! What hangs off an issue or pull request beyond its counts: conversation comments, reviews,
//! review threads (their resolution and review comments) and review requests, kept per item so
//! the listings serve them as nested lists and tests can change them without sending webhooks.

use time::OffsetDateTime;

use super::model::{Model, encode_node_id, truncate};

/// `PullRequestReviewState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewState {
    Pending,
    Commented,
    Approved,
    ChangesRequested,
    Dismissed,
}

/// A conversation comment (`IssueComment`).
#[derive(Clone, Debug, PartialEq)]
pub struct IssueComment {
    pub database_id: u64,
    pub node_id: String,
    pub author: Option<String>,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A review (`PullRequestReview`).
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    pub database_id: u64,
    pub node_id: String,
    pub author: Option<String>,
    pub body: String,
    pub state: ReviewState,
    pub submitted_at: Option<OffsetDateTime>,
    pub updated_at: OffsetDateTime,
    pub commit_oid: Option<String>,
}

/// A review comment (`PullRequestReviewComment`), always inside a thread.
#[derive(Clone, Debug, PartialEq)]
pub struct ReviewComment {
    pub database_id: u64,
    pub node_id: String,
    pub author: Option<String>,
    pub body: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub path: String,
    pub line: Option<i32>,
    pub review: Option<u64>,
    pub reply_to: Option<u64>,
    pub commit_oid: Option<String>,
}

/// A review thread (`PullRequestReviewThread`).
#[derive(Clone, Debug, PartialEq)]
pub struct ReviewThread {
    pub node_id: String,
    pub path: String,
    pub is_resolved: bool,
    pub resolved_by: Option<String>,
    pub comments: Vec<ReviewComment>,
}

/// Who a review request asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestedReviewer {
    User(String),
    Team(String),
}

/// Everything nested under one issue or pull request, in listing order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    pub comments: Vec<IssueComment>,
    pub reviews: Vec<Review>,
    pub threads: Vec<ReviewThread>,
    pub review_requests: Vec<RequestedReviewer>,
}

impl Model {
    /// The nested lists of the item with native id `item` (empty when it has none).
    pub fn conversation(&self, item: u64) -> Conversation {
        self.conversations.get(&item).cloned().unwrap_or_default()
    }

    fn next_nested_id(&mut self) -> u64 {
        self.next_nested += 1;
        self.next_nested
    }

    /// Adjusts the `comments.totalCount` / `reviews.totalCount` of item `item` by `by`.
    fn bump(&mut self, item: u64, comments: i64, reviews: i64) {
        let add = |n: &mut u32, by: i64| {
            *n = u32::try_from(i64::from(*n) + by).unwrap_or(0);
        };
        for repo in self.repos.values_mut() {
            for issue in repo.issues.by_key.values_mut() {
                if issue.database_id == item {
                    add(&mut issue.comments, comments);
                }
            }
            for pr in repo.pulls.by_key.values_mut() {
                if pr.database_id == item {
                    add(&mut pr.comments, comments);
                    add(&mut pr.reviews, reviews);
                }
            }
        }
    }

    /// Fills a generated item's lists to its counts, dated `at` (the counts stay as they are).
    pub(crate) fn seed_conversation(
        &mut self,
        item: u64,
        comments: u32,
        reviews: u32,
        at: OffsetDateTime,
    ) {
        let mut conversation = Conversation::default();
        for n in 0..comments {
            let id = self.next_nested_id();
            conversation.comments.push(IssueComment {
                database_id: id,
                node_id: encode_node_id("IC", id),
                author: Some("octocat".to_owned()),
                body: format!("Comment {n}"),
                created_at: at,
                updated_at: at,
            });
        }
        for n in 0..reviews {
            let id = self.next_nested_id();
            conversation.reviews.push(Review {
                database_id: id,
                node_id: encode_node_id("PRR", id),
                author: Some("reviewer".to_owned()),
                body: format!("Review {n}"),
                state: ReviewState::Commented,
                submitted_at: Some(at),
                updated_at: at,
                commit_oid: None,
            });
        }
        self.conversations.insert(item, conversation);
    }

    /// Adds a conversation comment to item `item` (its count follows).
    pub fn add_comment(&mut self, item: u64, author: Option<&str>, body: &str) -> IssueComment {
        let id = self.next_nested_id();
        let at = self.tick();
        let comment = IssueComment {
            database_id: id,
            node_id: encode_node_id("IC", id),
            author: author.map(str::to_owned),
            body: body.to_owned(),
            created_at: at,
            updated_at: at,
        };
        self.conversations
            .entry(item)
            .or_default()
            .comments
            .push(comment.clone());
        self.bump(item, 1, 0);
        comment
    }

    /// Edits a conversation comment (its `updatedAt` moves on); `false` when there is none.
    pub fn edit_comment(&mut self, item: u64, comment: u64, body: &str) -> bool {
        let at = self.tick();
        let Some(c) = self
            .conversations
            .get_mut(&item)
            .and_then(|c| c.comments.iter_mut().find(|c| c.database_id == comment))
        else {
            return false;
        };
        c.body = body.to_owned();
        c.updated_at = truncate(at);
        true
    }

    /// Deletes a conversation comment (its count follows); `false` when there is none.
    pub fn delete_comment(&mut self, item: u64, comment: u64) -> bool {
        let Some(list) = self.conversations.get_mut(&item).map(|c| &mut c.comments) else {
            return false;
        };
        let before = list.len();
        list.retain(|c| c.database_id != comment);
        let gone = list.len() < before;
        if gone {
            self.bump(item, -1, 0);
        }
        gone
    }

    /// Adds a submitted review to pull request `item` (its count follows).
    pub fn add_review(
        &mut self,
        item: u64,
        author: Option<&str>,
        state: ReviewState,
        body: &str,
    ) -> Review {
        let id = self.next_nested_id();
        let at = self.tick();
        let review = Review {
            database_id: id,
            node_id: encode_node_id("PRR", id),
            author: author.map(str::to_owned),
            body: body.to_owned(),
            state,
            submitted_at: (state != ReviewState::Pending).then_some(at),
            updated_at: at,
            commit_oid: None,
        };
        self.conversations
            .entry(item)
            .or_default()
            .reviews
            .push(review.clone());
        self.bump(item, 0, 1);
        review
    }

    /// Changes a review's state (a dismissal); `false` when there is none.
    pub fn set_review_state(&mut self, item: u64, review: u64, state: ReviewState) -> bool {
        let at = self.tick();
        let Some(r) = self
            .conversations
            .get_mut(&item)
            .and_then(|c| c.reviews.iter_mut().find(|r| r.database_id == review))
        else {
            return false;
        };
        r.state = state;
        r.updated_at = at;
        true
    }

    /// Opens a review thread on `path` of pull request `item` with one comment per body.
    pub fn add_review_thread(
        &mut self,
        item: u64,
        path: &str,
        review: Option<u64>,
        bodies: &[&str],
    ) -> ReviewThread {
        let thread_id = self.next_nested_id();
        let mut comments: Vec<ReviewComment> = Vec::new();
        for body in bodies {
            let id = self.next_nested_id();
            let at = self.tick();
            comments.push(ReviewComment {
                database_id: id,
                node_id: encode_node_id("PRRC", id),
                author: Some("reviewer".to_owned()),
                body: (*body).to_owned(),
                created_at: at,
                updated_at: at,
                path: path.to_owned(),
                line: Some(1),
                review,
                reply_to: comments.first().map(|c| c.database_id),
                commit_oid: None,
            });
        }
        let thread = ReviewThread {
            node_id: encode_node_id("PRRT", thread_id),
            path: path.to_owned(),
            is_resolved: false,
            resolved_by: None,
            comments,
        };
        self.conversations
            .entry(item)
            .or_default()
            .threads
            .push(thread.clone());
        thread
    }

    /// Resolves (or unresolves, `by` = `None`) a review thread; `false` when there is none.
    pub fn resolve_thread(&mut self, item: u64, thread: &str, by: Option<&str>) -> bool {
        let Some(t) = self
            .conversations
            .get_mut(&item)
            .and_then(|c| c.threads.iter_mut().find(|t| t.node_id == thread))
        else {
            return false;
        };
        t.is_resolved = by.is_some();
        t.resolved_by = by.map(str::to_owned);
        true
    }

    /// Replaces pull request `item`'s review requests.
    pub fn set_review_requests(&mut self, item: u64, requests: Vec<RequestedReviewer>) {
        self.conversations.entry(item).or_default().review_requests = requests;
    }
}
