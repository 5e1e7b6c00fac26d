//! Comments, reviews, review threads and reviewer requests of live webhooks: content moves
//! forward only, each edit, dismissal and resolution records one item event, and reviewer lists
//! are dated snapshots.

use anyhow::Result;
use github_sync::webhooks::reviewers::{self, Reviewer};
use lifecycle_core::snapshot::{ListRead, SnapshotOutcome};
use serde_json::Value;
use time::{Duration, OffsetDateTime};
use vendor_sim::github::webhook::reviews::{
    self as hooks, Comment, Requested, Review, ReviewComment, ReviewState, Reviewers,
};
use vendor_sim::github::{Issue, PullRequest, Repository, Scenario};

use crate::support::LiveStack;

async fn stack() -> Result<LiveStack> {
    LiveStack::start(Scenario {
        repositories: 1,
        items: 12,
        pull_request_percent: 50,
        ..Scenario::default()
    })
    .await
}

/// The repository with an issue and a pull request of it, as the simulator holds them.
fn items(s: &LiveStack) -> (Repository, Issue, PullRequest) {
    let id = s.repositories[0];
    s.sim.model(|m| {
        let repo = m.repository(id).expect("generated repository").clone();
        let issue = repo.issues().next().expect("an issue").clone();
        let pr = repo.pull_requests().next().expect("a pull request").clone();
        (repo, issue, pr)
    })
}

/// Delivers `payload` and waits until github-sync handled it (so deliveries apply in order).
async fn deliver(s: &LiveStack, event: &str, payload: &Value) -> Result<()> {
    s.deliver(event, payload).await?;
    s.settle().await
}

/// Delivers a copy of `payload` received past ingress's digest window and JetStream's
/// duplicate window: the same content under a new body digest and message id.
async fn deliver_copy(s: &LiveStack, event: &str, payload: &Value) -> Result<()> {
    let mut copy = payload.clone();
    copy["forgesync_test_copy"] = Value::String(uuid::Uuid::new_v4().to_string());
    deliver(s, event, &copy).await
}

async fn payload_of<F>(s: &LiveStack, f: F) -> Value
where
    F: FnOnce(&vendor_sim::github::Model) -> Value,
{
    s.sim.model(|m| f(m))
}

async fn text(s: &LiveStack, sql: &str) -> Result<Option<String>> {
    let (v,): (Option<String>,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&s.pool)
        .await?;
    Ok(v)
}

fn comment(id: u64, body: &str, created: OffsetDateTime, updated: OffsetDateTime) -> Comment {
    Comment {
        id,
        author: "octocat".into(),
        body: body.into(),
        created_at: created,
        updated_at: updated,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn comment_edits_move_forward_and_record_one_event_per_edit() -> Result<()> {
    let s = stack().await?;
    let (repo, issue, _) = items(&s);
    let t0 = issue.updated_at + Duration::seconds(5);
    let versions = [
        comment(9001, "first", t0, t0),
        comment(9001, "one", t0, t0 + Duration::seconds(10)),
        comment(9001, "two", t0, t0 + Duration::seconds(20)),
        // Two edits in one second are two edits.
        comment(9001, "two, again", t0, t0 + Duration::seconds(20)),
    ];
    let hook = |action: &str, c: &Comment| {
        let (repo, issue, c) = (repo.clone(), issue.clone(), c.clone());
        let action = action.to_owned();
        move |m: &vendor_sim::github::Model| {
            hooks::issue_comment_payload(m, &action, &repo, &issue, &c)
        }
    };
    deliver(
        &s,
        "issue_comment",
        &payload_of(&s, hook("created", &versions[0])).await,
    )
    .await?;
    for c in &versions[1..] {
        deliver(
            &s,
            "issue_comment",
            &payload_of(&s, hook("edited", c)).await,
        )
        .await?;
    }
    // Late and repeated copies: the last edit again, an older edit, then the creation.
    deliver_copy(
        &s,
        "issue_comment",
        &payload_of(&s, hook("edited", &versions[3])).await,
    )
    .await?;
    deliver_copy(
        &s,
        "issue_comment",
        &payload_of(&s, hook("edited", &versions[1])).await,
    )
    .await?;
    deliver_copy(
        &s,
        "issue_comment",
        &payload_of(&s, hook("created", &versions[0])).await,
    )
    .await?;

    assert_eq!(
        text(&s, "SELECT body FROM comment WHERE native_id = 9001").await?,
        Some("two, again".into()),
        "an older payload changed the comment"
    );
    assert_eq!(
        s.count(&format!(
            "SELECT count(*) FROM comment c JOIN issue i ON i.id = c.issue_id
              WHERE c.native_id = 9001 AND i.native_id = {}",
            issue.database_id
        ))
        .await?,
        1
    );
    assert_eq!(
        s.count(
            "SELECT count(*) FROM item_event WHERE name = 'scm.issue.comment_edited'
               AND issue_id IS NOT NULL"
        )
        .await?,
        3,
        "one event per edit"
    );
    assert_eq!(
        s.count("SELECT count(*) FROM activity_event WHERE kind = 'scm.issue.comment_edited'")
            .await?,
        3
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_comment_never_comes_back() -> Result<()> {
    let s = stack().await?;
    let (repo, issue, _) = items(&s);
    let t0 = issue.updated_at + Duration::seconds(5);
    let c = comment(9002, "secret", t0, t0);
    let edited = comment(9002, "secret, edited", t0, t0 + Duration::seconds(1));
    let payload = |action: &str, c: &Comment| {
        s.sim
            .model(|m| hooks::issue_comment_payload(m, action, &repo, &issue, c))
    };
    deliver(&s, "issue_comment", &payload("created", &c)).await?;
    deliver(&s, "issue_comment", &payload("deleted", &c)).await?;
    // Late copies of its creation and of an edit made before the deletion.
    deliver_copy(&s, "issue_comment", &payload("created", &c)).await?;
    deliver_copy(&s, "issue_comment", &payload("edited", &edited)).await?;
    assert_eq!(
        s.count(
            "SELECT count(*) FROM comment WHERE native_id = 9002
               AND deleted_at IS NOT NULL AND body IS NULL"
        )
        .await?,
        1,
        "the comment is a tombstone"
    );
    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name LIKE '%comment_edited'")
            .await?,
        0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pull_request_comment_is_filed_under_the_pull_request() -> Result<()> {
    let s = stack().await?;
    let (repo, _, pr) = items(&s);
    let t0 = pr.updated_at + Duration::seconds(5);
    let first = comment(9003, "looks good", t0, t0);
    let edited = comment(9003, "looks good to me", t0, t0 + Duration::seconds(3));
    let issues_before = s.count("SELECT count(*) FROM issue").await?;
    for (action, c) in [("created", &first), ("edited", &edited)] {
        let payload = s
            .sim
            .model(|m| hooks::pull_request_comment_payload(m, action, &repo, &pr, c));
        deliver(&s, "issue_comment", &payload).await?;
    }
    assert_eq!(
        s.count(&format!(
            "SELECT count(*) FROM comment c JOIN pull_request p ON p.id = c.pull_request_id
              WHERE c.native_id = 9003 AND p.native_id = {} AND c.body = 'looks good to me'",
            pr.database_id
        ))
        .await?,
        1
    );
    // The pull request's issue id made no stub issue.
    assert_eq!(s.count("SELECT count(*) FROM issue").await?, issues_before);
    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.comment_edited'")
            .await?,
        1
    );
    Ok(())
}

fn review(state: ReviewState, submitted: OffsetDateTime) -> Review {
    Review {
        id: 7001,
        author: "reviewer".into(),
        body: "please fix".into(),
        state,
        commit_id: "c0ffee".into(),
        submitted_at: Some(submitted),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dismissal_is_final_and_recorded_once() -> Result<()> {
    let s = stack().await?;
    let (repo, _, pr) = items(&s);
    let t0 = pr.updated_at + Duration::seconds(5);
    // GitHub dates every payload of a review by its submission (a review has no updated_at).
    let submitted = review(ReviewState::ChangesRequested, t0);
    let dismissed = review(ReviewState::Dismissed, t0);
    let again = review(ReviewState::Dismissed, t0);
    let approved_later = review(ReviewState::Approved, t0);
    let payload = |action: &str, r: &Review| {
        s.sim
            .model(|m| hooks::pull_request_review_payload(m, action, &repo, &pr, r))
    };
    deliver(&s, "pull_request_review", &payload("submitted", &submitted)).await?;
    let first = s
        .deliver("pull_request_review", &payload("dismissed", &dismissed))
        .await?;
    s.settle().await?;
    // GitHub redelivers the same delivery; then a second dismissal and a later state.
    assert_eq!(s.send(&first).await?, 200);
    s.settle().await?;
    // The same body again would be a body-digest duplicate: a later copy reaches the sync.
    deliver_copy(&s, "pull_request_review", &payload("dismissed", &again)).await?;
    deliver(
        &s,
        "pull_request_review",
        &payload("edited", &approved_later),
    )
    .await?;
    deliver_copy(&s, "pull_request_review", &payload("submitted", &submitted)).await?;

    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.review_dismissed'")
            .await?,
        1,
        "a dismissal records once"
    );
    assert_eq!(
        text(&s, "SELECT state FROM review WHERE native_id = 7001").await?,
        Some("DISMISSED".into()),
        "a dismissed review stays dismissed"
    );
    // Dated by when JetStream stored the first dismissal, not by the payload's submission.
    let (dismissed_at,): (OffsetDateTime,) =
        sqlx::query_as("SELECT dismissed_at FROM review WHERE native_id = 7001")
            .fetch_one(&s.pool)
            .await?;
    assert!(dismissed_at > t0 && dismissed_at <= OffsetDateTime::now_utc());
    let key = format!("dismiss:7001:{}", dismissed_at.unix_timestamp_nanos());
    assert_eq!(
        text(
            &s,
            "SELECT source_key FROM item_event WHERE name = 'scm.pull_request.review_dismissed'"
        )
        .await?,
        Some(key)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dismissal_received_before_the_stored_state_changes_nothing() -> Result<()> {
    let s = stack().await?;
    let (repo, _, pr) = items(&s);
    // The stored review is dated later than any dismissal received now (within the clock skew
    // allowed: a version further ahead is refused as dated in the future).
    let later = OffsetDateTime::now_utc() + Duration::minutes(3);
    let submitted = review(ReviewState::ChangesRequested, later);
    let dismissed = review(ReviewState::Dismissed, later);
    let payload = |action: &str, r: &Review| {
        s.sim
            .model(|m| hooks::pull_request_review_payload(m, action, &repo, &pr, r))
    };
    deliver(&s, "pull_request_review", &payload("submitted", &submitted)).await?;
    deliver(&s, "pull_request_review", &payload("dismissed", &dismissed)).await?;

    assert_eq!(
        text(&s, "SELECT state FROM review WHERE native_id = 7001").await?,
        Some("CHANGES_REQUESTED".into())
    );
    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.review_dismissed'")
            .await?,
        0
    );
    Ok(())
}

fn review_comment(
    id: u64,
    body: &str,
    created: OffsetDateTime,
    updated: OffsetDateTime,
) -> ReviewComment {
    ReviewComment {
        id,
        review_id: 7002,
        in_reply_to: None,
        author: "reviewer".into(),
        body: body.into(),
        path: "src/lib.rs".into(),
        line: 12,
        commit_id: "c0ffee".into(),
        created_at: created,
        updated_at: updated,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thread_resolution_records_once() -> Result<()> {
    let s = stack().await?;
    let (repo, _, pr) = items(&s);
    let t0 = pr.updated_at + Duration::seconds(5);
    let c = review_comment(8001, "nit", t0, t0);
    let edited = review_comment(8001, "nit: rename", t0, t0 + Duration::seconds(2));
    for (action, c) in [("created", &c), ("edited", &edited), ("edited", &edited)] {
        let payload = s
            .sim
            .model(|m| hooks::pull_request_review_comment_payload(m, action, &repo, &pr, c));
        deliver_copy(&s, "pull_request_review_comment", &payload).await?;
    }
    let thread = |action: &str| {
        s.sim.model(|m| {
            hooks::pull_request_review_thread_payload(
                m,
                action,
                &repo,
                &pr,
                "PRRT_kwDOthread1",
                std::slice::from_ref(&edited),
                "author",
            )
        })
    };
    let events = "SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.thread_resolved'";
    deliver(&s, "pull_request_review_thread", &thread("resolved")).await?;
    // A second copy received later (past the duplicate window) finds the thread resolved.
    deliver_copy(&s, "pull_request_review_thread", &thread("resolved")).await?;
    assert_eq!(s.count(events).await?, 1, "a resolution records once");
    assert_eq!(
        s.count(
            "SELECT count(*) FROM review_thread t JOIN review_comment c ON c.thread_id = t.id
              WHERE t.resolved AND t.resolved_at IS NOT NULL AND c.native_id = 8001
                AND c.body = 'nit: rename'"
        )
        .await?,
        1
    );
    assert_eq!(
        s.count("SELECT count(*) FROM item_event WHERE name = 'scm.pull_request.comment_edited'")
            .await?,
        1
    );
    // Unresolved and resolved again is a new resolution.
    deliver(&s, "pull_request_review_thread", &thread("unresolved")).await?;
    deliver_copy(&s, "pull_request_review_thread", &thread("resolved")).await?;
    assert_eq!(s.count(events).await?, 2);
    Ok(())
}

fn stored_reviewers(v: Option<Value>) -> Vec<Reviewer> {
    v.and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

async fn reviewers_of(s: &LiveStack, pr: &PullRequest) -> Result<Vec<Reviewer>> {
    let (v,): (Option<Value>,) =
        sqlx::query_as("SELECT requested_reviewers FROM pull_request WHERE native_id = $1")
            .bind(pr.database_id as i64)
            .fetch_one(&s.pool)
            .await?;
    Ok(stored_reviewers(v))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reviewer_requests_are_stored_whole_and_an_incomplete_list_is_not_applied() -> Result<()> {
    let s = stack().await?;
    let (repo, _, pr) = items(&s);
    let request = |action: &str, requested: Requested, users: &[&str], teams: &[&str]| {
        let reviewers = Reviewers {
            users: users.iter().map(|u| u.to_string()).collect(),
            teams: teams.iter().map(|t| t.to_string()).collect(),
        };
        s.sim.model(|m| {
            hooks::review_request_payload(m, action, &repo, &pr, Some(&requested), &reviewers)
        })
    };
    let ask = "review_requested";
    deliver(
        &s,
        "pull_request",
        &request(ask, Requested::User("alice".into()), &["alice"], &[]),
    )
    .await?;
    deliver(
        &s,
        "pull_request",
        &request(ask, Requested::Team("core".into()), &["alice"], &["core"]),
    )
    .await?;
    let expected = vec![
        Reviewer::User("alice".into()),
        Reviewer::Team("core".into()),
    ];
    assert_eq!(reviewers_of(&s, &pr).await?, expected);

    // More than one page of 100: the list may hide requests, so it is not applied.
    let many: Vec<String> = (0..101).map(|i| format!("user{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    deliver(
        &s,
        "pull_request",
        &request(ask, Requested::User("user0".into()), &many, &[]),
    )
    .await?;
    assert_eq!(
        reviewers_of(&s, &pr).await?,
        expected,
        "an incomplete list was applied"
    );

    deliver(
        &s,
        "pull_request",
        &request(
            "review_request_removed",
            Requested::User("alice".into()),
            &[],
            &["core"],
        ),
    )
    .await?;
    assert_eq!(
        reviewers_of(&s, &pr).await?,
        vec![Reviewer::Team("core".into())]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reviewer_snapshots_are_ordered_by_when_they_were_received() -> Result<()> {
    let s = stack().await?;
    let (_, _, pr) = items(&s);
    let (pr_id,): (uuid::Uuid,) =
        sqlx::query_as("SELECT id FROM pull_request WHERE native_id = $1")
            .bind(pr.database_id as i64)
            .fetch_one(&s.pool)
            .await?;
    // After the snapshot the stack's own INITIAL sync stored (dated when it read the page).
    let base = OffsetDateTime::now_utc() + Duration::hours(1);
    let at = |secs: i64| base + Duration::seconds(secs);
    let user = |l: &str| Reviewer::User(l.into());
    let apply = |received: OffsetDateTime, read: ListRead<Reviewer>| {
        let pool = s.pool.clone();
        async move {
            let mut txn = pool.begin().await?;
            let outcome = reviewers::apply(&mut txn, pr_id, received, read).await?;
            txn.commit().await?;
            anyhow::Ok(outcome)
        }
    };
    let both = vec![user("alice"), user("bob")];
    assert_eq!(
        apply(at(10), ListRead::Whole(both.clone())).await?,
        SnapshotOutcome::Applied
    );
    // Received earlier: removes nothing, adds nothing back, restates nothing.
    assert_eq!(
        apply(at(9), ListRead::Whole(vec![user("alice")])).await?,
        SnapshotOutcome::Stale
    );
    assert_eq!(
        apply(
            at(9),
            ListRead::Whole(vec![user("alice"), user("bob"), user("carol")])
        )
        .await?,
        SnapshotOutcome::Stale
    );
    assert_eq!(reviewers_of(&s, &pr).await?, both);
    // Removed at 11; the request from 10 is not re-added by a copy received at 10.5.
    assert_eq!(
        apply(at(11), ListRead::Whole(vec![user("bob")])).await?,
        SnapshotOutcome::Applied
    );
    assert_eq!(
        apply(
            at(10) + Duration::milliseconds(500),
            ListRead::Whole(both.clone())
        )
        .await?,
        SnapshotOutcome::Stale
    );
    assert_eq!(reviewers_of(&s, &pr).await?, vec![user("bob")]);
    // The same instant restates.
    assert_eq!(
        apply(at(11), ListRead::Whole(vec![user("carol")])).await?,
        SnapshotOutcome::Applied
    );
    assert_eq!(reviewers_of(&s, &pr).await?, vec![user("carol")]);
    assert_eq!(
        apply(at(12), ListRead::Partial).await?,
        SnapshotOutcome::Incomplete
    );
    assert_eq!(reviewers_of(&s, &pr).await?, vec![user("carol")]);
    Ok(())
}
