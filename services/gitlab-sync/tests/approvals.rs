//! Approval acts of Merge Request Hooks through gitlab-sync's webhook consumer, in-process against
//! real Postgres and JetStream and the simulated GitLab (`common`). Bodies are the simulator's
//! real-shaped approval hooks.

mod common;

use std::collections::BTreeMap;

use anyhow::Result;
use common::{World, at, hook_version};
use lifecycle_core::source_key::LifecycleChange;
use serde_json::Value as Json;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::approval_hook;
use vendor_sim::gitlab::{Fault, GitlabFault, ops};

/// One approval act: who, approving or not.
#[derive(Clone, Copy)]
enum Act {
    Approve(&'static str),
    Unapprove(&'static str),
}

impl World {
    /// A and B, with every readiness read after a hook failing: these tests prove the acts
    /// alone (tests/readiness.rs proves the read).
    async fn without_reads() -> Result<World> {
        let w = World::start().await?;
        w.sim.inject(Fault::always(
            ops::MERGE_REQUEST_READINESS,
            GitlabFault::FieldError {
                path: "project".into(),
                message: "unavailable".into(),
            },
        ));
        Ok(w)
    }

    /// Performs `act` on merge request `iid` in the simulator; the hook GitLab sends for it.
    fn act(&self, iid: u64, act: Act) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let (user, done) = match act {
                Act::Approve(user) => (user, m.approve_merge_request(api, iid, user)),
                Act::Unapprove(user) => (user, m.unapprove_merge_request(api, iid, user)),
            };
            assert!(done, "the simulator refused the act");
            let mr = m.merge_requests[&(api, iid)].clone();
            let action = match act {
                Act::Approve(_) if mr.approved_by.len() == 1 => "approved",
                Act::Approve(_) => "approval",
                Act::Unapprove(_) if mr.approved_by.is_empty() => "unapproved",
                Act::Unapprove(_) => "unapproval",
            };
            approval_hook(m, &mr, action, user)
        })
    }

    /// The standing approvals of merge request `iid` as stored: (username, approved_at).
    async fn approvals(&self, iid: u64) -> Result<Vec<(String, OffsetDateTime)>> {
        Ok(sqlx::query_as(
            "SELECT a.username, a.approved_at FROM merge_request_approval a
               JOIN pull_request p ON p.id = a.pull_request_id
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2 ORDER BY a.username",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }

    /// The stored review decision of merge request `iid` (`None`: unknown).
    async fn decision(&self, iid: u64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT review_decision FROM pull_request WHERE number = $1 AND repository_id =
                    (SELECT id FROM repository WHERE native_id = $2)",
        )
        .bind(iid as i32)
        .bind(self.api as i64)
        .fetch_one(self.pool())
        .await?)
    }

    /// (source key, occurred at) of every `review_dismissed` event of merge request `iid`.
    async fn dismissals(&self, iid: u64) -> Result<Vec<(String, Option<OffsetDateTime>)>> {
        Ok(sqlx::query_as(
            "SELECT e.source_key, e.occurred_at FROM item_event e
               JOIN pull_request p ON p.id = e.pull_request_id
              WHERE p.number = $1 AND e.name = 'scm.pull_request.review_dismissed'
              ORDER BY e.source_key",
        )
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }
}

/// The source key of the dismissal withdrawing `user`'s approval recorded at `approved_at`.
fn dismissal_key(user: &str, approved_at: OffsetDateTime) -> String {
    let review = format!("approval:{user}");
    LifecycleChange::Dismissal {
        review: &review,
        review_updated_at: approved_at,
    }
    .source_key()
    .as_str()
    .to_owned()
}

#[tokio::test]
async fn an_approval_hook_stores_the_approval_and_leaves_the_decision_unknown() -> Result<()> {
    let w = World::without_reads().await?;
    let iid = w.open("needs review", at(10)).await?;
    // A decision read earlier stands until an act changes someone's review.
    sqlx::query("UPDATE pull_request SET review_decision = 'review_required'")
        .execute(w.pool())
        .await?;
    let approved = w.act(iid, Act::Approve("bob"));
    assert_eq!(approved["object_attributes"]["action"], "approved");
    let bob_at = hook_version(&approved);
    let first = w.registered(w.a, &approved, None).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, [("bob".to_owned(), bob_at)]);
    // An accepted act leaves the decision unknown until GitLab's readiness is read.
    assert_eq!(w.decision(iid).await?, None);

    // The same delivery again changes no one's review and leaves a decision read since.
    sqlx::query("UPDATE pull_request SET review_decision = 'approved'")
        .execute(w.pool())
        .await?;
    w.registered(w.a, &approved, Some(first)).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, [("bob".to_owned(), bob_at)]);
    assert_eq!(w.decision(iid).await?, Some("approved".into()));

    // A second approver: `approval`.
    let second = w.act(iid, Act::Approve("cat"));
    assert_eq!(second["object_attributes"]["action"], "approval");
    w.registered(w.a, &second, None).await?;
    w.settle().await?;
    assert_eq!(
        w.approvals(iid).await?,
        [
            ("bob".to_owned(), bob_at),
            ("cat".to_owned(), hook_version(&second))
        ]
    );
    assert_eq!(w.decision(iid).await?, None);
    assert!(w.dismissals(iid).await?.is_empty());
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn an_unapproval_withdraws_the_approval_and_records_one_dismissal() -> Result<()> {
    let w = World::without_reads().await?;
    let iid = w.open("reviewed", at(10)).await?;
    let approved = w.act(iid, Act::Approve("bob"));
    let bob_at = hook_version(&approved);
    let approved_id = w.registered(w.a, &approved, None).await?;
    w.act(iid, Act::Approve("cat"));
    let unapproval = w.act(iid, Act::Unapprove("bob"));
    assert_eq!(unapproval["object_attributes"]["action"], "unapproval");
    let first = w.registered(w.a, &unapproval, None).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, []);
    let dismissed = vec![(dismissal_key("bob", bob_at), Some(bob_at))];
    assert_eq!(w.dismissals(iid).await?, dismissed);
    let activity = "SELECT count(*) FROM activity_event
                     WHERE kind = 'scm.pull_request.review_dismissed'";
    assert_eq!(w.count(activity).await?, 1);

    // Redelivered, and the approval it withdrew delivered late: nothing moves, no second event.
    w.registered(w.a, &unapproval, Some(first)).await?;
    w.registered(w.a, &approved, Some(approved_id)).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, []);
    assert_eq!(w.dismissals(iid).await?, dismissed);
    assert_eq!(w.count(activity).await?, 1);

    // An unapproval of someone whose approval never stood withdraws nothing and records nothing.
    let cat_gone = w.act(iid, Act::Unapprove("cat"));
    assert_eq!(cat_gone["object_attributes"]["action"], "unapproved");
    w.registered(w.a, &cat_gone, None).await?;
    w.settle().await?;
    assert_eq!(w.dismissals(iid).await?, dismissed);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// The same script of acts on two merge requests: one delivered in order, the other with every
/// hook sent thrice and older copies arriving after newer ones. Both end with the same approvals
/// and dismissals. Delivered newest first, nothing is stored that in-order application does not
/// store, and no dismissal twice.
#[tokio::test]
async fn redelivered_and_shuffled_acts_change_nothing_beyond_in_order_application() -> Result<()> {
    let w = World::without_reads().await?;
    let script = [
        Act::Approve("bob"),
        Act::Approve("cat"),
        Act::Unapprove("bob"),
        Act::Approve("dan"),
        Act::Approve("bob"),
        Act::Unapprove("cat"),
    ];
    let mut hooks = BTreeMap::new();
    for title in ["in order", "late copies", "newest first"] {
        let iid = w.open(title, at(10)).await?;
        let bodies: Vec<Json> = script.iter().map(|act| w.act(iid, *act)).collect();
        hooks.insert(title, (iid, bodies));
    }

    let (in_order, bodies) = &hooks["in order"];
    for body in bodies {
        w.registered(w.a, body, None).await?;
        w.settle().await?;
    }
    let expected = w.approvals(*in_order).await?;
    assert_eq!(
        expected.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        ["bob", "dan"]
    );
    let expected_dismissals = w.dismissals(*in_order).await?;
    assert_eq!(expected_dismissals.len(), 2, "{expected_dismissals:?}");

    // Each hook thrice, each after the next one: 0 1 0 2 1 0 3 2 1 ...
    let (late, bodies) = &hooks["late copies"];
    let mut first: Vec<Option<Uuid>> = vec![None; bodies.len()];
    for i in 0..bodies.len() + 2 {
        for j in (i.saturating_sub(2)..=i).rev() {
            if let Some(body) = bodies.get(j) {
                // A copy after the first reaches the consumer as a redelivery.
                let id = w.registered(w.a, body, first[j]).await?;
                first[j].get_or_insert(id);
            }
        }
        w.settle().await?;
    }
    let late_approvals = w.approvals(*late).await?;
    let users = |rows: &[(String, OffsetDateTime)]| -> Vec<String> {
        rows.iter().map(|(u, _)| u.clone()).collect()
    };
    assert_eq!(users(&late_approvals), users(&expected));
    assert_eq!(w.dismissals(*late).await?.len(), expected_dismissals.len());

    // Newest first, each thrice.
    let (reversed, bodies) = &hooks["newest first"];
    for body in bodies.iter().rev() {
        let id = w.registered(w.a, body, None).await?;
        for _ in 0..2 {
            w.registered(w.a, body, Some(id)).await?;
        }
    }
    w.settle().await?;
    let reversed_approvals = users(&w.approvals(*reversed).await?);
    assert!(
        reversed_approvals
            .iter()
            .all(|u| users(&expected).contains(u)),
        "{reversed_approvals:?}"
    );
    let dismissals = w.dismissals(*reversed).await?;
    assert!(
        dismissals.len() <= expected_dismissals.len(),
        "{dismissals:?}"
    );
    let keys: std::collections::BTreeSet<_> = dismissals.iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), dismissals.len(), "a dismissal recorded twice");
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_cannot_approve_a_merge_request_of_a() -> Result<()> {
    let w = World::without_reads().await?;
    let iid = w.open("A's", at(10)).await?;
    // B forges approval acts on A's project through its own registered route and its own
    // operator endpoint: B's token reads the project, but it is outside B's group.
    let forged = w.act(iid, Act::Approve("mallory"));
    w.registered(w.b, &forged, None).await?;
    w.operator(w.b, &forged).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, []);
    let unapproval = w.act(iid, Act::Unapprove("mallory"));
    w.registered(w.b, &unapproval, None).await?;
    w.settle().await?;
    assert!(w.dismissals(iid).await?.is_empty());
    assert_eq!(
        w.count("SELECT count(*) FROM merge_request_approval")
            .await?,
        0
    );
    // A's own route does write.
    w.registered(w.a, &forged, None).await?;
    w.settle().await?;
    assert_eq!(
        w.approvals(iid).await?,
        [("mallory".to_owned(), hook_version(&forged))]
    );
    w.stop().await
}

#[tokio::test]
async fn an_approval_hook_without_its_head_is_dead_and_changes_nothing() -> Result<()> {
    let w = World::without_reads().await?;
    let iid = w.open("headless", at(10)).await?;
    let mut body = w.act(iid, Act::Approve("bob"));
    body["object_attributes"]
        .as_object_mut()
        .unwrap()
        .remove("last_commit");
    w.registered(w.a, &body, None).await?;
    w.settle().await?;
    let dead: Vec<(String,)> = sqlx::query_as("SELECT reason FROM dead_message")
        .fetch_all(w.pool())
        .await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].0.contains("last_commit"), "{dead:?}");
    assert_eq!(w.approvals(iid).await?, []);
    w.stop().await
}
