//! Approval acts of Merge Request Hooks through gitlab-sync's webhook consumer, in-process against
//! real Postgres and JetStream and the simulated GitLab: deliveries are stored as ingress stores
//! them (`store::inbound::record`, on the subject ingress derives) and relayed as ingress's relay
//! would. Bodies are the simulator's real-shaped approval hooks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use lifecycle_core::source_key::LifecycleChange;
use lifecycle_core::subject;
use sea_orm::TransactionTrait as _;
use serde_json::Value as Json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::{approval_hook, merge_request_hook};
use vendor_sim::gitlab::{Fault, GitlabFault, GitlabSim, Model, NewMergeRequest, ops};

const REGISTERED: &str = "gitlab-sync-connection-events";
const OPERATOR: &str = "gitlab-sync-project-events";

/// A workspace's GitLab connection and its endpoints.
#[derive(Clone, Copy)]
struct Tenant {
    /// The endpoint of the group hook we registered.
    route: EndpointIds,
    /// An operator-created hook's endpoint on the shared route.
    shared: EndpointIds,
}

struct World {
    env: testkit::TestEnv,
    sim: GitlabSim,
    service: Option<testkit::Running>,
    _ingress_relay: tokio_util::sync::DropGuard,
    a: Tenant,
    b: Tenant,
    /// `acme/api`: monitored by A.
    api: u64,
}

/// One approval act: who, approving or not.
#[derive(Clone, Copy)]
enum Act {
    Approve(&'static str),
    Unapprove(&'static str),
}

impl World {
    /// A (group `acme`, monitoring `acme/api`) and B (group `globex`) on one GitLab instance,
    /// and gitlab-sync running.
    async fn start() -> Result<World> {
        let env = testkit::TestEnv::new().await?;
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        model.add_group(None, "globex");
        let api = model.add_project(acme, "api");
        let sim = GitlabSim::start(model).await?;
        // These tests prove the acts alone: the readiness read after each hook fails, which
        // records nothing (tests/readiness.rs proves the read).
        sim.inject(Fault::always(
            ops::MERGE_REQUEST_READINESS,
            GitlabFault::FieldError {
                path: "project".into(),
                message: "unavailable".into(),
            },
        ));
        let pool = env.db.db.get_postgres_connection_pool().clone();
        let instance = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)",
        )
        .bind(instance)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
        let keyring = Keyring::parse(&testkit::secret_key())?;
        let settings_a = serde_json::json!({"group": "acme", "projects": ["acme/api"]});
        let (a, a_connection) = tenant(&env, &keyring, instance, settings_a, "token-a").await?;
        let settings_b = serde_json::json!({"group": "globex"});
        let (b, _) = tenant(&env, &keyring, instance, settings_b, "token-b").await?;
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
             VALUES ($1, $2, $3, 'acme', 'api', $4)",
        )
        .bind(Uuid::now_v7())
        .bind(a.route.workspace_id)
        .bind(a_connection)
        .bind(api as i64)
        .execute(&pool)
        .await?;
        let config: gitlab_sync::Config = testkit::config(
            env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                "--reconcile-cron=off".to_owned(),
                "--backfill-cron=off".to_owned(),
                "--filter-refresh-ms=200".to_owned(),
            ],
        )?;
        let service = Some(testkit::spawn(config).await?);
        let stop = tokio_util::sync::CancellationToken::new();
        let relay = bus::relay::Relay::new(
            env.db.db.clone(),
            env.bus.clone(),
            bus::relay::RelayConfig::default(),
        );
        tokio::spawn({
            let stop = stop.clone();
            async move { relay.run(stop).await }
        });
        Ok(World {
            env,
            sim,
            service,
            _ingress_relay: stop.drop_guard(),
            a,
            b,
            api,
        })
    }

    fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// Stores `body` as ingress does for a hook we registered for `tenant`. `replay_of`: an
    /// explicit replay of an earlier delivery (no dedup), as a redelivery reaches the consumer.
    async fn registered(
        &self,
        tenant: Tenant,
        body: &Json,
        replay_of: Option<Uuid>,
    ) -> Result<Uuid> {
        let event = body["object_kind"].as_str().unwrap_or("unknown").to_owned();
        let subject = subject::gitlab_connection(&tenant.route.connection_id.to_string(), &event)?;
        self.store(tenant.route, subject, event, body, replay_of)
            .await
    }

    /// Stores `body` as ingress does for an operator-created hook of `tenant`, routed by path.
    async fn operator(&self, tenant: Tenant, body: &Json) -> Result<Uuid> {
        let event = body["object_kind"].as_str().unwrap_or("unknown").to_owned();
        let path = body["project"]["path_with_namespace"]
            .as_str()
            .unwrap_or_default();
        let (namespace, project) = path.rsplit_once('/').unwrap_or(("", path));
        let subject = subject::gitlab_project(namespace, project, &event)?;
        self.store(tenant.shared, subject, event, body, None).await
    }

    async fn store(
        &self,
        endpoint: EndpointIds,
        subject: String,
        event: String,
        body: &Json,
        replay_of: Option<Uuid>,
    ) -> Result<Uuid> {
        let dedup = match replay_of {
            Some(of) => Dedup::Replay {
                of,
                tenant_signed: false,
            },
            None => Dedup::Keys {
                event_id: Some(Uuid::now_v7().to_string()),
                digest_window: Duration::from_secs(1),
                verified_by: None,
            },
        };
        let txn = self.env.db.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint,
                verification: "token".into(),
                headers: BTreeMap::new(),
                body: serde_json::to_vec(body)?,
                event,
                subject,
                dedup,
                retention: Duration::from_secs(3600),
                inline_body_max: usize::MAX,
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        let Recorded::Accepted(accepted) = recorded else {
            anyhow::bail!("not stored: {recorded:?}");
        };
        txn.commit().await?;
        Ok(accepted.message_id)
    }

    /// Waits until every stored delivery is published and both consumers settled them.
    async fn settle(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let ns = self.env.bus.namespace();
        let mut quiet = 0;
        while quiet < 3 {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "did not settle");
            tokio::time::sleep(Duration::from_millis(150)).await;
            let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
                .fetch_one(self.pool())
                .await?;
            let mut busy = unpublished > 0;
            let stream = self
                .env
                .bus
                .jetstream()
                .get_stream(ns.name(Stream::WebhooksGitlab.name()))
                .await?;
            for durable in [REGISTERED, OPERATOR] {
                if let Ok(info) = stream.consumer_info(ns.name(durable)).await {
                    busy |= info.num_pending > 0 || info.num_ack_pending > 0;
                }
            }
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// Opens a merge request in the simulator and delivers its open hook through A's route;
    /// returns its iid.
    async fn open(&self, title: &str, updated_at: OffsetDateTime) -> Result<u64> {
        let api = self.api;
        let (iid, body) = self.sim.model(|m| {
            let iid = m.add_merge_request(
                api,
                NewMergeRequest {
                    title: title.into(),
                    updated_at,
                },
            );
            let mr = m.merge_requests[&(api, iid)].clone();
            (iid, merge_request_hook(m, &mr, "open", None))
        });
        self.registered(self.a, &body, None).await?;
        self.settle().await?;
        Ok(iid)
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

    async fn count(&self, sql: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(self.pool())
            .await?)
    }

    async fn stop(mut self) -> Result<()> {
        if let Some(s) = self.service.take() {
            s.stop().await?;
        }
        Ok(())
    }
}

/// A workspace with an active GitLab connection on `instance`, its token, and two endpoints.
async fn tenant(
    env: &testkit::TestEnv,
    keyring: &Keyring,
    instance: Uuid,
    settings: Json,
    token: &str,
) -> Result<(Tenant, Uuid)> {
    let (workspace_id, connection_id) =
        testkit::active_connection(&env.db.db, "gitlab", instance, settings, Some(token)).await?;
    let mut endpoints = Vec::new();
    for registration in [Registration::Registered, Registration::Operator] {
        let endpoint = store::inbound::create_endpoint(
            &env.db.db,
            keyring,
            NewEndpoint {
                workspace_id,
                connection_id,
                kind: ConnectionKind::Gitlab,
                registration,
                provider_ref: None,
                address_token: Some(Uuid::now_v7().simple().to_string()),
                tenant_keyed: false,
            },
            Uuid::now_v7().as_bytes(),
        )
        .await?;
        endpoints.push(EndpointIds {
            endpoint_id: endpoint.id,
            workspace_id,
            connection_id,
            kind: ConnectionKind::Gitlab,
        });
    }
    Ok((
        Tenant {
            route: endpoints[0],
            shared: endpoints[1],
        },
        connection_id,
    ))
}

fn at(seconds: i64) -> OffsetDateTime {
    time::macros::datetime!(2026-03-01 00:00 UTC) + time::Duration::seconds(seconds)
}

/// The updated_at a hook states for its merge request.
fn hook_version(body: &Json) -> OffsetDateTime {
    let text = body["object_attributes"]["updated_at"].as_str().unwrap();
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::PrimitiveDateTime::parse(text, &f)
        .unwrap()
        .assume_utc()
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
    let w = World::start().await?;
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
    let w = World::start().await?;
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
    let w = World::start().await?;
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
    let w = World::start().await?;
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
    let w = World::start().await?;
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
