//! Pushes, ready and draft, and requested changes through gitlab-sync, in-process against real
//! Postgres and JetStream and the simulated GitLab: deliveries are stored as ingress stores them
//! and relayed as its relay would; syncs run on the engine with the connection's token. Bodies
//! are the simulator's real-shaped hooks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use gitlab_client::{ClientConfig, GitlabClient, RetryPolicy};
use gitlab_sync::source::{ClientFactory, GitlabSource, Settings};
use gitlab_sync::sync::GitlabVendor;
use lifecycle_core::source_key::LifecycleChange;
use lifecycle_core::subject;
use sea_orm::TransactionTrait as _;
use serde_json::Value as Json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::{Engine, JobOutcome, Jobs};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_http::egress::Egress;
use vendor_sim::gitlab::webhook::{Pushed, approval_hook, merge_request_hook, note_hook};
use vendor_sim::gitlab::{GitlabSim, Model, NewMergeRequest};

const REGISTERED: &str = "gitlab-sync-connection-events";
const OPERATOR: &str = "gitlab-sync-project-events";
const SYNCHRONIZED: &str = "scm.pull_request.synchronized";

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
    config: gitlab_sync::Config,
    instance: Uuid,
    a: Tenant,
    b: Tenant,
    /// `acme/api`: monitored by A.
    api: u64,
}

impl World {
    /// A (group `acme`, monitoring `acme/api`) and B (group `globex`) on one GitLab instance,
    /// and gitlab-sync running.
    async fn start() -> Result<World> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let env = testkit::TestEnv::new().await?;
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        model.add_group(None, "globex");
        let api = model.add_project(acme, "api");
        let sim = GitlabSim::start(model).await?;
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
        let service = Some(testkit::spawn(config.clone()).await?);
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
            config,
            instance,
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
        let (subject, event) = Self::route_subject(tenant, body)?;
        self.store(tenant.route, subject, event, body, replay_of, usize::MAX)
            .await
    }

    fn route_subject(tenant: Tenant, body: &Json) -> Result<(String, String)> {
        let event = body["object_kind"].as_str().unwrap_or("unknown").to_owned();
        let subject = subject::gitlab_connection(&tenant.route.connection_id.to_string(), &event)?;
        Ok((subject, event))
    }

    /// Stores `body` as ingress does for an operator-created hook of `tenant`, routed by path.
    async fn operator(&self, tenant: Tenant, body: &Json) -> Result<Uuid> {
        let event = body["object_kind"].as_str().unwrap_or("unknown").to_owned();
        let path = body["project"]["path_with_namespace"]
            .as_str()
            .unwrap_or_default();
        let (namespace, project) = path.rsplit_once('/').unwrap_or(("", path));
        let subject = subject::gitlab_project(namespace, project, &event)?;
        self.store(tenant.shared, subject, event, body, None, usize::MAX)
            .await
    }

    async fn store(
        &self,
        endpoint: EndpointIds,
        subject: String,
        event: String,
        body: &Json,
        replay_of: Option<Uuid>,
        inline_body_max: usize,
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
                inline_body_max,
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

    /// Delivers `body` thrice through A's route: once, then twice as a redelivery; the first
    /// delivery's id.
    async fn thrice(&self, body: &Json) -> Result<Uuid> {
        let first = self.registered(self.a, body, None).await?;
        self.again(body, first).await?;
        Ok(first)
    }

    /// Delivers `body`, first delivered as `first`, twice more as redeliveries.
    async fn again(&self, body: &Json, first: Uuid) -> Result<()> {
        for _ in 0..2 {
            self.registered(self.a, body, Some(first)).await?;
        }
        Ok(())
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

    /// Opens a merge request in the simulator dated `updated_at` and delivers its open hook
    /// through A's route; returns its iid.
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

    /// Pushes `sha` onto merge request `iid` at `at` (`None`: now).
    fn push(&self, iid: u64, sha: &str, at: Option<OffsetDateTime>) -> Pushed {
        let api = self.api;
        self.sim
            .model(|m| m.push_merge_request(api, iid, sha, "alice", at))
            .expect("the merge request exists")
    }

    /// Sets merge request `iid`'s draft flag; the `update` hook GitLab sends.
    fn set_draft(&self, iid: u64, draft: bool) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let before = m.merge_requests[&(api, iid)].clone();
            assert!(m.update_merge_request(api, iid, |mr| mr.draft = draft));
            let mr = m.merge_requests[&(api, iid)].clone();
            merge_request_hook(m, &mr, "update", Some(&before))
        })
    }

    /// `user` approves merge request `iid`; the hook GitLab sends.
    fn approve(&self, iid: u64, user: &str) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            assert!(m.approve_merge_request(api, iid, user));
            let mr = m.merge_requests[&(api, iid)].clone();
            let action = if mr.approved_by.len() == 1 {
                "approved"
            } else {
                "approval"
            };
            approval_hook(m, &mr, action, user)
        })
    }

    /// `user` requests changes on merge request `iid`; the Note Hook of GitLab's system note.
    fn request_changes(&self, iid: u64, user: &str) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let id = m
                .request_changes(api, iid, user)
                .expect("the merge request");
            note_hook(m, &m.notes[&id].clone(), "create")
        })
    }

    /// Runs a sync job of `job_type` for A's connection on the engine.
    async fn sync(&self, job_type: &str) -> Result<()> {
        let pool = self.pool().clone();
        let engine = Engine {
            pool: pool.clone(),
            jobs: Jobs::new(
                ConnectionKind::Gitlab,
                pool.clone(),
                "replica-test",
                Duration::from_secs(30),
            ),
            vendor: Arc::new(GitlabVendor {
                pool: pool.clone(),
                factory: ClientFactory {
                    db: self.env.db.db.clone(),
                    secret_key: Keyring::parse(&testkit::secret_key())?,
                    request_timeout: Duration::from_secs(5),
                    egress: Egress::unrestricted(),
                    retry: RetryPolicy::default(),
                },
                backfill: self.config.backfill_batches(),
                activator: None,
            }),
            settings: self.config.sync.sync_settings(),
        };
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger)
             VALUES ($1, $2, $3, 'gitlab', $4, 'manual')",
        )
        .bind(id)
        .bind(self.a.route.connection_id)
        .bind(self.a.route.workspace_id)
        .bind(job_type)
        .execute(&pool)
        .await?;
        let job = engine.jobs.claim(id).await?.job().expect("claimable");
        let mut config = ClientConfig::new(self.sim.base_url()).with_egress(Egress::unrestricted());
        config.retry = RetryPolicy {
            max_retries: 1,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            max_retry_after: Duration::from_secs(1),
            deadline: vendor_http::DEFAULT_CALL_DEADLINE,
        };
        let source = GitlabSource {
            client: GitlabClient::new(&config, "token-a")?,
            settings: Settings {
                group: "acme".into(),
                projects: None,
                min_remaining: None,
            },
        };
        let outcome = engine.run(&job, self.instance, source).await?;
        anyhow::ensure!(
            matches!(outcome, JobOutcome::Succeeded),
            "the sync ended {outcome:?}"
        );
        Ok(())
    }

    /// (name, source key, origin) of every item event of merge request `iid`, in key order.
    async fn events(&self, iid: u64, name: &str) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT e.source_key, e.origin FROM item_event e
               JOIN pull_request p ON p.id = e.pull_request_id
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2 AND e.name = $3
              ORDER BY e.source_key",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .bind(name)
        .fetch_all(self.pool())
        .await?)
    }

    /// How many activity entries of `kind` merge request `iid` has.
    async fn activities(&self, iid: u64, kind: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM activity_event a
               JOIN pull_request p ON p.id = a.pull_request_id
              WHERE p.number = $1 AND a.kind = $2",
        )
        .bind(iid as i32)
        .bind(kind)
        .fetch_one(self.pool())
        .await?)
    }

    /// The stored head and review decision of merge request `iid`.
    async fn head(&self, iid: u64) -> Result<(Option<String>, Option<String>)> {
        Ok(sqlx::query_as(
            "SELECT p.head_sha, p.review_decision FROM pull_request p
               JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_one(self.pool())
        .await?)
    }

    /// Sets merge request `iid`'s stored decision, as a readiness read would.
    async fn read_decision(&self, iid: u64, decision: &str) -> Result<()> {
        sqlx::query("UPDATE pull_request SET review_decision = $2 WHERE number = $1")
            .bind(iid as i32)
            .bind(decision)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Who stands as having requested changes on merge request `iid`, with the note.
    async fn requested_changes(&self, iid: u64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT c.username, c.note_id FROM merge_request_requested_change c
               JOIN pull_request p ON p.id = c.pull_request_id
              WHERE p.number = $1 ORDER BY c.username",
        )
        .bind(iid as i32)
        .fetch_all(self.pool())
        .await?)
    }

    /// Whose approval stands on merge request `iid`.
    async fn approvals(&self, iid: u64) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT a.username FROM merge_request_approval a
               JOIN pull_request p ON p.id = a.pull_request_id
              WHERE p.number = $1 ORDER BY a.username",
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

/// The source key of the push from `before` to `after`.
fn push_key(before: &str, after: &str) -> String {
    LifecycleChange::Push { before, after }
        .source_key()
        .as_str()
        .to_owned()
}

fn sha(n: u32) -> String {
    format!("{n:040x}")
}

/// The head a merge request opened in the simulator starts at.
fn initial_head(iid: u64) -> String {
    format!("{iid:040x}")
}

#[tokio::test]
async fn a_push_hook_records_the_push_of_the_open_merge_request_on_its_branch_once() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("pushed", at(10)).await?;
    let other = w.open("another branch", at(10)).await?;
    let h0 = initial_head(iid);
    w.read_decision(iid, "approved").await?;
    w.read_decision(other, "approved").await?;
    let pushed = w.push(iid, &sha(0xa1), None);
    assert_eq!(pushed.push["object_kind"], "push");

    // The Push Hook, thrice: one push, under the key the update hook derives.
    let push_id = w.thrice(&pushed.push).await?;
    w.settle().await?;
    let expected = vec![(push_key(&h0, &sha(0xa1)), "webhook".to_owned())];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.activities(iid, SYNCHRONIZED).await?, 1);
    // A Push Hook names no date: the head stays until a dated writer moves it; the push left
    // the stored head, so readiness is unknown.
    assert_eq!(w.head(iid).await?, (Some(h0.clone()), None));
    // Another branch's merge request heard nothing.
    assert!(w.events(other, SYNCHRONIZED).await?.is_empty());
    assert_eq!(w.head(other).await?.1, Some("approved".into()));

    // The update hook of the same push moves the head and adds no second push.
    let update_id = w.thrice(&pushed.update).await?;
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.activities(iid, SYNCHRONIZED).await?, 1);
    assert_eq!(w.head(iid).await?.0, Some(sha(0xa1)));

    // Redelivered, the push and its update hook add nothing; a decision read since stays
    // through the push's redelivery (an update hook is followed by a readiness read of its own).
    w.again(&pushed.update, update_id).await?;
    w.settle().await?;
    w.read_decision(iid, "approved").await?;
    w.again(&pushed.push, push_id).await?;
    w.settle().await?;
    assert_eq!(
        w.head(iid).await?,
        (Some(sha(0xa1)), Some("approved".into()))
    );
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);

    // A closed merge request on a pushed branch records nothing.
    let api = w.api;
    let closed = w.sim.model(|m| {
        let before = m.merge_requests[&(api, other)].clone();
        assert!(m.update_merge_request(api, other, |mr| mr.state = "closed".into()));
        let mr = m.merge_requests[&(api, other)].clone();
        merge_request_hook(m, &mr, "close", Some(&before))
    });
    w.registered(w.a, &closed, None).await?;
    w.settle().await?;
    let late = w.push(other, &sha(0xb1), None);
    w.registered(w.a, &late.push, None).await?;
    w.settle().await?;
    assert!(w.events(other, SYNCHRONIZED).await?.is_empty());
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// Two pushes in one second and a force-push back to an earlier head: delivered in order on one
/// merge request, and on another each hook thrice, newest first and shuffled. Both end at the
/// head in-order application reaches, with each push recorded once.
#[tokio::test]
async fn same_second_and_force_back_pushes_each_count_once_whatever_the_delivery() -> Result<()> {
    let w = World::start().await?;
    let mut scripts = Vec::new();
    for title in ["in order", "shuffled"] {
        let iid = w.open(title, at(10)).await?;
        let h0 = initial_head(iid);
        let base = 0x100 * iid as u32;
        let (h1, h2) = (sha(base + 1), sha(base + 2));
        // h0 -> h1 and h1 -> h2 in one second, then back to h1.
        let pushes = [
            w.push(iid, &h1, Some(at(20))),
            w.push(iid, &h2, Some(at(20))),
            w.push(iid, &h1, Some(at(21))),
        ];
        let keys = vec![push_key(&h0, &h1), push_key(&h1, &h2), push_key(&h2, &h1)];
        scripts.push((iid, pushes, keys, h1));
    }

    let (iid, pushes, keys, h1) = &scripts[0];
    for p in pushes {
        w.registered(w.a, &p.push, None).await?;
        w.registered(w.a, &p.update, None).await?;
        w.settle().await?;
    }
    let mut sorted = keys.clone();
    sorted.sort();
    let recorded: Vec<String> = w
        .events(*iid, SYNCHRONIZED)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(recorded, sorted);
    assert_eq!(w.head(*iid).await?.0, Some(h1.clone()));

    let (iid, pushes, keys, h1) = &scripts[1];
    let mut bodies: Vec<&Json> = pushes.iter().flat_map(|p| [&p.update, &p.push]).collect();
    bodies.reverse();
    // Newest first, then a fixed shuffle, each body thrice (copies after the first as
    // redeliveries).
    let order = [0, 3, 1, 5, 2, 4];
    let mut first: Vec<Option<Uuid>> = vec![None; bodies.len()];
    for round in 0..3 {
        for &i in &order {
            let k = (i + round) % bodies.len();
            let id = w.registered(w.a, bodies[k], first[k]).await?;
            first[k].get_or_insert(id);
        }
        w.settle().await?;
    }
    let mut sorted = keys.clone();
    sorted.sort();
    let recorded: Vec<String> = w
        .events(*iid, SYNCHRONIZED)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(recorded, sorted, "each push once");
    assert_eq!(w.activities(*iid, SYNCHRONIZED).await?, 3);
    assert_eq!(w.head(*iid).await?.0, Some(h1.clone()));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// The sync records the push and the draft it stores under the hooks' keys; the hooks arriving
/// after it, each thrice, add nothing; a ready hook before the sync leaves the sync nothing to add.
#[tokio::test]
async fn the_sync_records_the_push_ready_and_draft_it_stores_once_with_their_hooks() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("synced", at(10)).await?;
    let h0 = initial_head(iid);
    w.sync("INITIAL").await?;
    // A push and a conversion to draft whose hooks are late.
    let pushed = w.push(iid, &sha(0xc1), None);
    let draft = w.set_draft(iid, true);
    w.sync("RECONCILIATION").await?;
    let push = vec![(push_key(&h0, &sha(0xc1)), "sync".to_owned())];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    let drafts = w.events(iid, "scm.pull_request.converted_to_draft").await?;
    assert_eq!(drafts.len(), 1, "{drafts:?}");
    assert_eq!(drafts[0].1, "sync");
    assert_eq!(w.head(iid).await?.0, Some(sha(0xc1)));

    for body in [&pushed.push, &pushed.update, &draft] {
        w.thrice(body).await?;
    }
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    assert_eq!(
        w.events(iid, "scm.pull_request.converted_to_draft").await?,
        drafts
    );
    assert_eq!(
        w.activities(iid, "scm.pull_request.converted_to_draft")
            .await?,
        1
    );

    // Ready: the hook first, then a sync that reads the same change.
    let ready = w.set_draft(iid, false);
    w.thrice(&ready).await?;
    w.settle().await?;
    w.sync("RECONCILIATION").await?;
    let readies = w.events(iid, "scm.pull_request.ready_for_review").await?;
    assert_eq!(readies.len(), 1, "{readies:?}");
    assert_eq!(readies[0].1, "webhook");
    assert_eq!(
        w.activities(iid, "scm.pull_request.ready_for_review")
            .await?,
        1
    );
    // A sync that reads nothing new records nothing.
    w.sync("RECONCILIATION").await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, push);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// GitLab's "requested changes" system note names who requested changes: by Note Hook (thrice)
/// or by the notes pass, it is stored once, withdraws that person's approval with one dismissal,
/// leaves the decision unknown, and is never mirrored as a comment.
#[tokio::test]
async fn a_requested_changes_note_withdraws_its_authors_approval_once_by_hook_or_sync() -> Result<()>
{
    let w = World::start().await?;
    let iid = w.open("by hook", at(10)).await?;
    let approval = w.approve(iid, "bob");
    w.registered(w.a, &approval, None).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, ["bob"]);
    w.read_decision(iid, "approved").await?;

    let note = w.request_changes(iid, "bob");
    assert_eq!(note["object_attributes"]["system"], true);
    let note_id = note["object_attributes"]["id"].as_i64().unwrap();
    w.thrice(&note).await?;
    w.settle().await?;
    assert_eq!(w.requested_changes(iid).await?, [("bob".into(), note_id)]);
    assert!(w.approvals(iid).await?.is_empty());
    assert_eq!(w.head(iid).await?.1, None, "the decision is unknown");
    let dismissed = "scm.pull_request.review_dismissed";
    assert_eq!(w.events(iid, dismissed).await?.len(), 1);
    // The notes pass reads the same note: nothing new.
    w.sync("INITIAL").await?;
    assert_eq!(w.requested_changes(iid).await?, [("bob".into(), note_id)]);
    assert_eq!(w.events(iid, dismissed).await?.len(), 1);
    assert_eq!(w.activities(iid, dismissed).await?, 1);

    // A note whose hook is lost: the notes pass records it.
    let lost = w.open("by sync", at(10)).await?;
    let approval = w.approve(lost, "cat");
    w.registered(w.a, &approval, None).await?;
    w.settle().await?;
    let note = w.request_changes(lost, "cat");
    let lost_id = note["object_attributes"]["id"].as_i64().unwrap();
    w.sync("RECONCILIATION").await?;
    assert_eq!(w.requested_changes(lost).await?, [("cat".into(), lost_id)]);
    // Withdrawn: by the note, or already by the sync's whole approver list read before it.
    assert!(w.approvals(lost).await?.is_empty());
    let by_sync = w.events(lost, dismissed).await?;
    assert!(by_sync.len() <= 1, "{by_sync:?}");
    // Its hook arriving late adds nothing.
    w.thrice(&note).await?;
    w.settle().await?;
    assert_eq!(w.events(lost, dismissed).await?, by_sync);
    assert_eq!(w.requested_changes(lost).await?, [("cat".into(), lost_id)]);

    // System notes stay unmirrored.
    assert_eq!(
        w.count("SELECT count(*) FROM comment WHERE body = 'requested changes'")
            .await?,
        0
    );
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

/// A Push Hook missing `after` is a dead message naming the field; once its stored body is
/// repaired, `POST /dead-messages/{id}/replay` applies it.
#[tokio::test]
async fn a_malformed_push_hook_is_dead_then_replayed_after_a_fix() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("malformed", at(10)).await?;
    let pushed = w.push(iid, &sha(0xd1), None);
    let mut broken = pushed.push.clone();
    broken.as_object_mut().unwrap().remove("after");
    // Stored by reference, as ingress keeps bodies past the inline limit.
    let (subject, event) = World::route_subject(w.a, &broken)?;
    let message = w.store(w.a.route, subject, event, &broken, None, 0).await?;
    w.settle().await?;
    let dead: Vec<(Uuid, String)> = sqlx::query_as("SELECT id, reason FROM dead_message")
        .fetch_all(w.pool())
        .await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].1.contains("`after`"), "{dead:?}");
    assert!(w.events(iid, SYNCHRONIZED).await?.is_empty());

    // The fix: the stored body as GitLab meant it.
    sqlx::query("UPDATE inbound_message_body SET body = $2 WHERE message_id = $1")
        .bind(message)
        .bind(serde_json::to_vec(&pushed.push)?)
        .execute(w.pool())
        .await?;
    let api_server = testkit::spawn(testkit::control_api_config(w.env.common_args())).await?;
    let keys = testkit::control_api_keys()?;
    let operator = testkit::token(&keys, control_api::Role::Admin, None)?;
    let res = reqwest::Client::new()
        .post(format!(
            "{}/dead-messages/{}/replay",
            api_server.url(),
            dead[0].0
        ))
        .bearer_auth(&operator)
        .json(&serde_json::json!({}))
        .send()
        .await?;
    assert_eq!(res.status(), reqwest::StatusCode::ACCEPTED);
    w.settle().await?;
    let expected = vec![(
        push_key(&initial_head(iid), &sha(0xd1)),
        "webhook".to_owned(),
    )];
    assert_eq!(w.events(iid, SYNCHRONIZED).await?, expected);
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 1);
    api_server.stop().await?;
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_cannot_push_to_a_merge_request_of_a() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("A's", at(10)).await?;
    w.read_decision(iid, "approved").await?;
    // B sends A's project's push and update hooks through its own route and operator endpoint:
    // B's token reads the project, but it is outside B's group.
    let pushed = w.push(iid, &sha(0xe1), None);
    for body in [&pushed.push, &pushed.update] {
        w.registered(w.b, body, None).await?;
        w.operator(w.b, body).await?;
    }
    w.settle().await?;
    assert!(w.events(iid, SYNCHRONIZED).await?.is_empty());
    assert_eq!(
        w.head(iid).await?,
        (Some(initial_head(iid)), Some("approved".into()))
    );
    assert_eq!(
        w.count("SELECT count(*) FROM activity_event WHERE kind = 'scm.pull_request.synchronized'")
            .await?,
        0
    );
    // A's own route does record it.
    w.registered(w.a, &pushed.push, None).await?;
    w.settle().await?;
    assert_eq!(w.events(iid, SYNCHRONIZED).await?.len(), 1);
    w.stop().await
}
