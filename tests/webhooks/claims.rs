//! Claims and facts, written as the attack. Workspace B (`globex`) can merely read A's public
//! repository: its connection is a personal access token of its own that monitors `acme/repo-0`.
//! With its own workspace token, B creates an endpoint with a secret it chose and signs
//! deliveries about A's items: an edit dated 2099, a merge of an open pull request, a comment.
//! None of it is written: each is a hint, confirmed by reading the item from GitHub with B's
//! credentials, and only what GitHub returns reaches the shared rows and `events.*`.

use anyhow::Result;
use control_api::Role;
use forgesync_e2e::send_json;
use serde_json::{Value, json};
use uuid::Uuid;
use vendor_sim::github::webhook::reviews::{Comment, issue_comment_payload};
use vendor_sim::github::webhook::{Delivery, issues_payload, pull_request_payload};
use vendor_sim::github::{Fault, FaultKind, IssueState, PullRequestState, Scenario, ops};

use crate::support::LiveStack;

const B_SECRET: &str = "globex-chose-this-secret";
const TARGET: &str = "repo-0";

/// B: a workspace whose connection reads A's public repository, and the address of the endpoint
/// B made for itself with its own token.
struct Reader {
    conn: String,
    hook: String,
}

fn scenario() -> Scenario {
    Scenario {
        repositories: 2,
        items: 40,
        pull_request_percent: 50,
        ..Scenario::default()
    }
}

async fn reader_of_a(stack: &LiveStack) -> Result<Reader> {
    stack
        .sim
        .model(|m| m.add_user_token("globex-pat", "globex"));
    let (status, ws) = stack.post("/workspaces", json!({"name": "globex"})).await?;
    assert_eq!(status, 201, "{ws}");
    let ws = ws["id"].as_str().expect("workspace created").to_owned();
    let (status, conn) = stack
        .post(
            &format!("/workspaces/{ws}/connections"),
            json!({
                "kind": "github",
                "server_url": stack.sim.base_url(),
                "settings": { "auth": "pat", "repositories": [format!("acme/{TARGET}")] },
                "secrets": { "token": "globex-pat" },
            }),
        )
        .await?;
    assert_eq!(status, 201, "{conn}");
    let conn = conn["id"].as_str().expect("connection created").to_owned();
    let (status, body) = stack
        .post(
            &format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    stack.finished_jobs("INITIAL", 2).await?;

    // B's own admin token, which reaches B's workspace only.
    let keys = testkit::control_api_keys()?;
    let b_token = testkit::token(&keys, Role::Admin, Some(ws.parse::<Uuid>()?))?;
    let url = format!("{}/workspaces/{ws}/connections/{conn}/endpoints", stack.api);
    let (status, endpoint) = send_json(stack.http.post(url).bearer_auth(b_token).json(&json!({
        "registration": "operator", "address": true, "secret": B_SECRET,
    })))
    .await?;
    assert_eq!(status, 201, "{endpoint}");
    let hook = endpoint["address_token"]
        .as_str()
        .expect("an addressed endpoint")
        .to_owned();
    Ok(Reader { conn, hook })
}

/// Sends `payload` as B: signed with B's secret, on B's own endpoint.
async fn deliver_as_b(stack: &LiveStack, b: &Reader, event: &str, payload: &Value) -> Result<()> {
    let delivery = Delivery::new(event, payload);
    let url = format!("{}/hooks/{}", stack.ingress, b.hook);
    let status = delivery
        .send(&stack.http, &url, B_SECRET.as_bytes())
        .await?
        .as_u16();
    assert_eq!(status, 200, "ingress refused B's {event} delivery");
    Ok(())
}

/// A's repository upstream, its first open issue and its first open pull request (numbers).
fn targets(stack: &LiveStack) -> (u64, u64, u64) {
    let repo = stack.repositories[0];
    stack.sim.model(|m| {
        let r = m.repository(repo).expect("repository exists");
        assert_eq!(r.name, TARGET);
        let issue = r
            .issues()
            .find(|i| i.state == IssueState::Open)
            .expect("an open issue");
        let pull = r
            .pull_requests()
            .find(|p| p.state == PullRequestState::Open)
            .expect("an open pull request");
        (repo, issue.number, pull.number)
    })
}

/// Everything a forged delivery about A's items could change, as one comparable value.
async fn footprint(stack: &LiveStack, conn: &str) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT 'issue ' || number || ' ' || coalesce(title, '') || ' ' || state || ' ' \
                || upstream_updated_at::text FROM issue \
         UNION ALL SELECT 'pull ' || number || ' ' || coalesce(title, '') || ' ' || state || ' ' \
                || coalesce(merged_at::text, '-') || ' ' || upstream_updated_at::text \
           FROM pull_request \
         UNION ALL SELECT 'comments ' || count(*) FROM comment \
         UNION ALL SELECT 'events ' || count(*) FROM item_event \
         UNION ALL SELECT 'activity ' || count(*) FROM connection_activity \
          WHERE connection_id::text <> $1 \
         ORDER BY 1",
    )
    .bind(conn)
    .fetch_all(&stack.pool)
    .await?;
    Ok(rows.into_iter().map(|(r,)| r).collect())
}

/// github-sync's `name{vendor="github", outcome}` (`/metrics`).
async fn hints(stack: &LiveStack, name: &str, outcome: &str) -> Result<u64> {
    stack.sync_metric(name, "outcome", outcome).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_forging_signed_deliveries_changes_only_what_github_confirms() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = reader_of_a(&stack).await?;
    let (repo, issue, pull) = targets(&stack);
    let before = footprint(&stack, &b.conn).await?;
    let events_before = stack.events(0).await?.len();

    // B signs an edit dated 2099 (which would freeze the row), a close, a merge of an open
    // pull request and a comment, all of A's items.
    let (mut edited, mut merged, mut commented) = stack.sim.model(|m| {
        let r = m.repository(repo).expect("repository exists");
        let i = r.issue(issue).expect("issue exists");
        let p = r.pull_request(pull).expect("pull request exists");
        (
            issues_payload(m, "closed", r, i),
            pull_request_payload(m, "closed", r, p),
            issue_comment_payload(
                m,
                "created",
                r,
                i,
                &Comment {
                    id: 999_001,
                    author: "globex".into(),
                    body: "spam from B".into(),
                    created_at: i.created_at,
                    updated_at: i.updated_at,
                },
            ),
        )
    });
    edited["issue"]["title"] = Value::from("defaced by B");
    edited["issue"]["state"] = Value::from("closed");
    edited["issue"]["closed_at"] = Value::from("2099-01-01T00:00:00Z");
    edited["issue"]["updated_at"] = Value::from("2099-01-01T00:00:00Z");
    merged["pull_request"]["state"] = Value::from("closed");
    merged["pull_request"]["merged"] = Value::from(true);
    merged["pull_request"]["merged_at"] = Value::from("2099-01-01T00:00:00Z");
    merged["pull_request"]["updated_at"] = Value::from("2099-01-01T00:00:00Z");
    commented["comment"]["updated_at"] = Value::from("2099-01-01T00:00:00Z");
    deliver_as_b(&stack, &b, "issues", &edited).await?;
    deliver_as_b(&stack, &b, "pull_request", &merged).await?;
    deliver_as_b(&stack, &b, "issue_comment", &commented).await?;
    stack.settle().await?;

    // Every row, event and activity outside B's own stays as GitHub has it.
    assert_eq!(footprint(&stack, &b.conn).await?, before);
    assert_eq!(
        stack.events(0).await?.len(),
        events_before,
        "a forged claim reached events.*"
    );
    // Each was a hint, confirmed by reading the item it names with B's credentials.
    assert!(stack.sim.calls(ops::REPOSITORY_ISSUE) >= 1);
    assert!(stack.sim.calls(ops::REPOSITORY_PULL_REQUEST) >= 1);
    assert_eq!(
        hints(&stack, "webhook_hint_confirmations_total", "unconfirmed").await?,
        0,
        "GitHub answered every read"
    );

    // GitHub closes the issue and edits its title, with no webhook of its own. B's next claim,
    // whatever it says, makes the mirror read it: the row and its close event are GitHub's.
    let closed_at = stack.sim.model(|m| {
        let mut closed_at = None;
        m.update_issue(repo, issue, |i| {
            i.title = "closed upstream".into();
            i.state = IssueState::Closed;
            i.updated_at += time::Duration::HOUR;
            i.closed_at = Some(i.updated_at);
            closed_at = i.closed_at;
        });
        closed_at.expect("issue updated")
    });
    edited["issue"]["title"] = Value::from("defaced by B again");
    deliver_as_b(&stack, &b, "issues", &edited).await?;
    stack.settle().await?;
    let (title, state, stored_close): (Option<String>, String, Option<time::OffsetDateTime>) =
        sqlx::query_as("SELECT title, state, closed_at FROM issue WHERE number = $1 AND repository_id = (SELECT id FROM repository WHERE name = $2)")
            .bind(i32::try_from(issue)?)
            .bind(TARGET)
            .fetch_one(&stack.pool)
            .await?;
    assert_eq!(title.as_deref(), Some("closed upstream"));
    assert_eq!(state, "closed");
    assert_eq!(stored_close, Some(closed_at));
    let closes = stack
        .count(&format!(
            "SELECT count(*) FROM item_event e JOIN issue i ON i.id = e.issue_id \
              WHERE i.number = {issue} AND e.name = 'scm.issue.closed' AND e.origin = 'sync'"
        ))
        .await?;
    assert_eq!(closes, 1, "the confirmed close is recorded once, as read");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hint_github_does_not_confirm_writes_nothing_and_says_why() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = reader_of_a(&stack).await?;
    let (repo, issue, _) = targets(&stack);
    let before = footprint(&stack, &b.conn).await?;

    // GitHub changes the issue, but cannot be read now.
    stack.sim.model(|m| {
        m.update_issue(repo, issue, |i| {
            i.title = "changed upstream".into();
            i.updated_at += time::Duration::HOUR;
        })
    });
    stack
        .sim
        .inject(Fault::always(ops::REPOSITORY_ISSUE, FaultKind::Status(502)));
    let mut claim = stack.sim.model(|m| {
        let r = m.repository(repo).expect("repository exists");
        issues_payload(m, "edited", r, r.issue(issue).expect("issue exists"))
    });
    claim["issue"]["title"] = Value::from("what B says");
    deliver_as_b(&stack, &b, "issues", &claim).await?;
    stack.settle().await?;

    // Nothing written: neither B's claim nor anything unread.
    assert_eq!(footprint(&stack, &b.conn).await?, before);
    // B's connection says why; reconcile heals it later.
    let (activity, reason): (String, String) = sqlx::query_as(
        "SELECT activity, detail ->> 'reason' FROM connection_activity \
          WHERE connection_id = $1::uuid AND activity = 'hint_unconfirmed'",
    )
    .bind(&b.conn)
    .fetch_one(&stack.pool)
    .await?;
    assert_eq!(activity, "hint_unconfirmed");
    assert!(reason.contains("reading GitHub"), "{reason}");
    assert_eq!(
        hints(&stack, "webhook_hint_confirmations_total", "unconfirmed").await?,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_hints_about_one_item_costs_one_read() -> Result<()> {
    let stack = LiveStack::start(scenario()).await?;
    let b = reader_of_a(&stack).await?;
    let (repo, issue, _) = targets(&stack);
    let reads_before = stack.sim.calls(ops::REPOSITORY_ISSUE);

    // Four claims about the same issue, each a distinct delivery, sent at once.
    let claims: Vec<Value> = (0..4)
        .map(|n| {
            let mut claim = stack.sim.model(|m| {
                let r = m.repository(repo).expect("repository exists");
                issues_payload(m, "edited", r, r.issue(issue).expect("issue exists"))
            });
            claim["issue"]["title"] = Value::from(format!("claim {n}"));
            claim
        })
        .collect();
    let sends = claims
        .iter()
        .map(|claim| deliver_as_b(&stack, &b, "issues", claim));
    futures::future::try_join_all(sends).await?;
    stack.settle().await?;

    let reads = stack.sim.calls(ops::REPOSITORY_ISSUE) - reads_before;
    let coalesced = hints(&stack, "webhook_hints_total", "coalesced").await?;
    assert!(
        reads < 4,
        "{reads} reads for 4 hints about one item ({coalesced} coalesced)"
    );
    assert_eq!(
        hints(&stack, "webhook_hints_total", "read").await? + coalesced,
        4,
        "every hint is either read or answered by a read"
    );
    Ok(())
}
