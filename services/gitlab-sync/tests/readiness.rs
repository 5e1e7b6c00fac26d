//! The readiness read after a Merge Request Hook and the same facts on the sync's pages, through
//! gitlab-sync in-process against real Postgres and JetStream and the simulated GitLab over HTTP:
//! deliveries are stored as ingress stores them and relayed as its relay would; syncs run on the
//! engine with the connection's token. Bodies are the simulator's real-shaped hooks.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use gitlab_client::{ClientConfig, GitlabClient, RetryPolicy};
use gitlab_sync::source::{ClientFactory, GitlabSource, Settings};
use gitlab_sync::sync::GitlabVendor;
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
use vendor_sim::gitlab::webhook::{approval_hook, merge_request_hook};
use vendor_sim::gitlab::{
    Fault, GitlabFault, GitlabSim, MergeRequest, Model, NewMergeRequest, ops,
};

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

/// What the mirror holds about a merge request's readiness.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct Facts {
    reviewers: Option<Json>,
    review_decision: Option<String>,
    mergeable: Option<bool>,
    merge_status: Option<String>,
    approval_read_at: Option<OffsetDateTime>,
    head_check_state: Option<String>,
    head_check_sha: Option<String>,
    merged_at: Option<OffsetDateTime>,
    merge_commit_sha: Option<String>,
    merged_by: Option<String>,
}

impl World {
    /// Changes merge request `iid` in the simulator with `f`; the hook GitLab sends for it
    /// (`update`, `merge`, ...).
    fn change(&self, iid: u64, f: impl FnOnce(&mut MergeRequest)) -> Json {
        let api = self.api;
        self.sim.model(|m| {
            let before = m.merge_requests[&(api, iid)].clone();
            assert!(m.update_merge_request(api, iid, f));
            let mr = m.merge_requests[&(api, iid)].clone();
            let action = match (before.state.as_str(), mr.state.as_str()) {
                ("opened", "merged") => "merge",
                _ => "update",
            };
            merge_request_hook(m, &mr, action, Some(&before))
        })
    }

    /// Changes merge request `iid` in the simulator without any hook.
    fn quietly(&self, iid: u64, f: impl FnOnce(&mut MergeRequest)) {
        let api = self.api;
        self.sim
            .model(|m| f(m.merge_requests.get_mut(&(api, iid)).unwrap()));
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

    /// Delivers `body` through A's route and waits until it settled.
    async fn deliver(&self, body: &Json) -> Result<Uuid> {
        let id = self.registered(self.a, body, None).await?;
        self.settle().await?;
        Ok(id)
    }

    /// Fails the next readiness read with `faults` at these fields of the merge request.
    fn fail_next_read_at(&self, fields: &[&str]) {
        for field in fields {
            // A fault counts the calls made after it is armed.
            self.sim.inject(Fault::nth(
                ops::MERGE_REQUEST_READINESS,
                1,
                GitlabFault::FieldError {
                    path: format!("project.mergeRequest.{field}"),
                    message: "Timeout on resolving the field".into(),
                },
            ));
        }
    }

    async fn facts(&self, iid: u64) -> Result<Facts> {
        Ok(sqlx::query_as(
            "SELECT p.reviewers, p.review_decision, p.mergeable, p.merge_status,
                    p.approval_read_at, p.head_check_state, p.head_check_sha, p.merged_at,
                    p.merge_commit_sha, p.merged_by
               FROM pull_request p JOIN repository r ON r.id = p.repository_id
              WHERE r.native_id = $1 AND p.number = $2",
        )
        .bind(self.api as i64)
        .bind(iid as i32)
        .fetch_one(self.pool())
        .await?)
    }

    /// The standing approvals of merge request `iid`: (username, approved_at).
    async fn approvals(&self, iid: u64) -> Result<Vec<(String, Option<OffsetDateTime>)>> {
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
}

/// The updated_at a hook states for its merge request.
fn hook_version(body: &Json) -> OffsetDateTime {
    let text = body["object_attributes"]["updated_at"].as_str().unwrap();
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::PrimitiveDateTime::parse(text, &f)
        .unwrap()
        .assume_utc()
}

fn reviewers(list: &[(&str, Option<&str>)]) -> Option<Json> {
    Some(Json::Array(
        list.iter()
            .map(|(u, s)| serde_json::json!({"username": u, "state": s}))
            .collect(),
    ))
}

const MERGED: &str = "scm.pull_request.merged";

#[tokio::test]
async fn the_read_after_a_hook_records_reviewers_approvals_and_a_decision_from_reviewers()
-> Result<()> {
    let w = World::start().await?;
    let iid = w.open("ready?", at(10)).await?;
    let f = w.facts(iid).await?;
    // Nobody asked, nobody approved: review required; GitLab reports no pipeline for the head.
    assert_eq!(f.reviewers, reviewers(&[]));
    assert_eq!(f.review_decision.as_deref(), Some("review_required"));
    assert_eq!(
        (f.mergeable, f.merge_status.as_deref()),
        (Some(true), Some("mergeable"))
    );
    assert!(f.approval_read_at.is_some());
    assert_eq!(f.head_check_state.as_deref(), Some("no_pipeline"));

    // Reviewers with their 18.6+ states, one named without a state; carol approves.
    w.quietly(iid, |mr| {
        mr.reviewers = vec![
            ("carol".into(), Some("APPROVED".into())),
            ("dan".into(), None),
        ]
    });
    let approved = w.approve(iid, "carol");
    w.deliver(&approved).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("carol", Some("approved")), ("dan", None)])
    );
    assert_eq!(f.review_decision.as_deref(), Some("approved"));
    assert_eq!(
        w.approvals(iid).await?,
        [("carol".to_owned(), Some(hook_version(&approved)))]
    );

    // A reviewer's request for changes decides, whatever the approvals.
    let update = w.change(iid, |mr| {
        mr.title = "ready!".into();
        mr.reviewers[1].1 = Some("REQUESTED_CHANGES".into());
    });
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[
            ("carol", Some("approved")),
            ("dan", Some("requested_changes"))
        ])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));

    // Named without a state (GitLab before 18.6): the stored state stays.
    let update = w.change(iid, |mr| mr.reviewers[1].1 = None);
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[
            ("carol", Some("approved")),
            ("dan", Some("requested_changes"))
        ])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));

    // A state this build does not know clears the stored one.
    w.sim.inject(Fault::nth(
        ops::MERGE_REQUEST_READINESS,
        1,
        GitlabFault::ReplaceValue {
            path: "project.mergeRequest.reviewers.nodes.1.mergeRequestInteraction.reviewState"
                .into(),
            value: "DEFERRED_UNTIL_TUESDAY".into(),
        },
    ));
    let update = w.change(iid, |mr| mr.title = "again".into());
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("carol", Some("approved")), ("dan", None)])
    );
    assert_eq!(f.review_decision.as_deref(), Some("approved"));

    // GitLab still syncing approvals: nothing approval-derived is known.
    let update = w.change(iid, |mr| {
        mr.title = "syncing".into();
        mr.detailed_merge_status = Some("APPROVALS_SYNCING".into());
    });
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        (f.review_decision, f.mergeable, f.merge_status),
        (None, None, None)
    );
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}

#[tokio::test]
async fn a_stale_approval_hook_is_rejected_and_the_read_records_the_approval() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("stale", at(10)).await?;
    // With GitLab's read failing, the hooks alone decide what is stored.
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let approved = w.approve(iid, "carol");
    // GitLab built the approval hook before a later change advanced updated_at.
    let update = w.change(iid, |mr| mr.title = "edited".into());
    assert!(hook_version(&update) > hook_version(&approved));
    w.deliver(&update).await?;
    // The stale act changes nothing.
    let first = w.deliver(&approved).await?;
    assert_eq!(w.approvals(iid).await?, []);

    // Redelivered with GitLab answering: the act is still rejected (no act date), and the read
    // records carol's approval from GitLab's approver list (its date unknown: open, no route
    // read).
    w.sim.clear_faults();
    w.registered(w.a, &approved, Some(first)).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, [("carol".to_owned(), None)]);
    assert_eq!(
        w.facts(iid).await?.review_decision.as_deref(),
        Some("approved")
    );
    w.stop().await
}

#[tokio::test]
async fn field_errors_leave_exactly_those_facts_unknown_never_empty() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("flaky", at(10)).await?;
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("carol".into(), Some("APPROVED".into()))]
    });
    w.deliver(&w.approve(iid, "carol")).await?;
    let before = w.facts(iid).await?;
    assert_eq!(before.review_decision.as_deref(), Some("approved"));
    assert_eq!(before.head_check_state.as_deref(), Some("no_pipeline"));

    // GitLab now lists no approver and no reviewer and runs a pipeline, but fails those fields.
    w.quietly(iid, |mr| {
        mr.approved_by.clear();
        mr.reviewers.clear();
    });
    let api = w.api;
    w.sim.model(|m| m.start_pipeline(api, iid)).unwrap();
    w.fail_next_read_at(&["approvedBy", "reviewers", "headPipeline"]);
    let mut update = w.change(iid, |mr| mr.title = "one".into());
    // Only the read speaks of reviewers here (a hook's own list is a fact of its own).
    update.as_object_mut().unwrap().remove("reviewers");
    w.deliver(&update).await?;
    let f = w.facts(iid).await?;
    // A failed approver list is not empty; a failed reviewer list is not empty; a failed
    // headPipeline records no check.
    assert_eq!(w.approvals(iid).await?.len(), 1);
    assert_eq!(f.reviewers, before.reviewers);
    assert_eq!(f.head_check_state.as_deref(), Some("no_pipeline"));
    assert_eq!(
        f.review_decision, None,
        "a list not read whole decides nothing"
    );

    // A failed head: nothing head-specific (approvals, decision) is taken; the reviewer list
    // and the pipeline GitLab names with its commit are.
    w.fail_next_read_at(&["diffHeadSha"]);
    w.deliver(&w.change(iid, |mr| mr.title = "two".into()))
        .await?;
    let f = w.facts(iid).await?;
    assert_eq!(w.approvals(iid).await?.len(), 1);
    assert_eq!(f.review_decision, None);
    assert_eq!(f.reviewers, reviewers(&[]));
    assert_eq!(f.head_check_state.as_deref(), Some("pending"));

    // Read whole again: GitLab's empty lists are facts now.
    w.deliver(&w.change(iid, |mr| mr.title = "three".into()))
        .await?;
    assert_eq!(w.approvals(iid).await?, []);
    assert_eq!(
        w.facts(iid).await?.review_decision.as_deref(),
        Some("review_required")
    );
    w.stop().await
}

#[tokio::test]
async fn a_project_unmonitored_during_the_read_takes_nothing_from_it() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("moving", at(10)).await?;
    let before = w.facts(iid).await?;
    let approved = w.approve(iid, "carol");
    let next = w.sim.calls(ops::MERGE_REQUEST_READINESS) + 1;
    w.sim.inject(Fault::nth(
        ops::MERGE_REQUEST_READINESS,
        1,
        GitlabFault::Delay(Duration::from_secs(3)),
    ));
    w.registered(w.a, &approved, None).await?;
    // While GitLab is read, A stops monitoring the project (and its selection no longer names it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while w.sim.calls(ops::MERGE_REQUEST_READINESS) < next {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no read began");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("DELETE FROM repository_to_monitor WHERE connection_id = $1")
        .bind(w.a.route.connection_id)
        .execute(w.pool())
        .await?;
    sqlx::query("UPDATE connection SET settings = $2 WHERE id = $1")
        .bind(w.a.route.connection_id)
        .bind(serde_json::json!({"group": "acme", "projects": ["acme/elsewhere"]}))
        .execute(w.pool())
        .await?;
    w.settle().await?;
    // The act was admitted before; the read took nothing: the decision stays as the act left it.
    assert_eq!(w.approvals(iid).await?.len(), 1);
    let f = w.facts(iid).await?;
    assert_eq!(f.review_decision, None);
    assert_eq!(f.approval_read_at, before.approval_read_at);
    w.stop().await
}

#[tokio::test]
async fn a_merged_request_takes_its_merge_facts_and_gitlabs_approval_dates() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("to merge", at(10)).await?;
    w.deliver(&w.approve(iid, "carol")).await?;
    // GitLab's standing row is dated earlier than the hook said.
    w.quietly(iid, |mr| mr.approved_by[0].1 = at(5));
    let merge = w.change(iid, |mr| {
        mr.state = "merged".into();
        mr.merge_user = Some("dave".into());
    });
    let (merged_at, commit) = w.sim.model(|m| {
        let mr = &m.merge_requests[&(w.api, iid)];
        (mr.merged_at, mr.merge_commit_sha.clone())
    });
    // The hook names no merger and no merge time.
    assert!(merge["object_attributes"].get("merge_user").is_none());
    w.deliver(&merge).await?;
    let f = w.facts(iid).await?;
    assert_eq!(f.merged_at, merged_at);
    assert_eq!(f.merged_by.as_deref(), Some("dave"));
    assert_eq!(f.merge_commit_sha, commit);
    assert_eq!(w.approvals(iid).await?, [("carol".to_owned(), Some(at(5)))]);
    // A recorded merger is never replaced.
    w.quietly(iid, |mr| mr.merge_user = Some("mallory".into()));
    w.sync("RECONCILIATION").await?;
    assert_eq!(w.facts(iid).await?.merged_by.as_deref(), Some("dave"));
    w.stop().await
}

#[tokio::test]
async fn one_merge_event_by_any_path() -> Result<()> {
    let w = World::start().await?;
    // The hook first, then its copies and a sync.
    let hooked = w.open("hook first", at(10)).await?;
    let merge = w.change(hooked, |mr| mr.state = "merged".into());
    let first = w.thrice(&merge).await?;
    w.settle().await?;
    w.sync("RECONCILIATION").await?;
    w.registered(w.a, &merge, Some(first)).await?;
    w.settle().await?;
    let events = w.events(hooked, MERGED).await?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "webhook");
    assert_eq!(w.activities(hooked, MERGED).await?, 1);

    // The sync first, then the hook.
    let synced = w.open("sync first", at(20)).await?;
    let merge = w.change(synced, |mr| mr.state = "merged".into());
    w.sync("RECONCILIATION").await?;
    w.thrice(&merge).await?;
    w.settle().await?;
    let events = w.events(synced, MERGED).await?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "sync");
    assert_eq!(w.activities(synced, MERGED).await?, 1);
    w.stop().await
}

#[tokio::test]
async fn the_sync_writes_the_same_readiness_facts() -> Result<()> {
    let w = World::start().await?;
    let iid = w.open("synced", at(10)).await?;
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("erin".into(), Some("REQUESTED_CHANGES".into()))];
        mr.updated_at += time::Duration::seconds(5);
    });
    w.sync("RECONCILIATION").await?;
    let f = w.facts(iid).await?;
    assert_eq!(
        f.reviewers,
        reviewers(&[("erin", Some("requested_changes"))])
    );
    assert_eq!(f.review_decision.as_deref(), Some("changes_requested"));
    // Nested reviewer pages are completed before the list is used: with GitLab saying more
    // follow, the sync asks MergeRequestReviewers for the rest.
    w.quietly(iid, |mr| {
        mr.reviewers = vec![("erin".into(), Some("APPROVED".into()))];
        mr.updated_at += time::Duration::seconds(5);
    });
    w.sim.inject(Fault::nth(
        ops::PROJECT_MERGE_REQUESTS,
        1,
        GitlabFault::ReplaceValue {
            path: "project.mergeRequests.nodes.0.reviewers.pageInfo.hasNextPage".into(),
            value: true.into(),
        },
    ));
    let asked = w.sim.calls(ops::MERGE_REQUEST_REVIEWERS);
    w.sync("RECONCILIATION").await?;
    assert!(w.sim.calls(ops::MERGE_REQUEST_REVIEWERS) > asked);
    let f = w.facts(iid).await?;
    assert_eq!(f.reviewers, reviewers(&[("erin", Some("approved"))]));
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_sending_approval_hooks_for_as_project_changes_nothing()
-> Result<()> {
    let w = World::start().await?;
    let iid = w.open("A's", at(10)).await?;
    let before = w.facts(iid).await?;
    let reads = w.sim.calls(ops::MERGE_REQUEST_READINESS);
    // B forges approval hooks for A's project on its own route and its operator endpoint.
    let forged = w.approve(iid, "mallory");
    w.registered(w.b, &forged, None).await?;
    w.operator(w.b, &forged).await?;
    w.settle().await?;
    assert_eq!(w.approvals(iid).await?, []);
    assert_eq!(w.facts(iid).await?, before);
    // B's token never read A's merge request for it.
    assert_eq!(w.sim.calls(ops::MERGE_REQUEST_READINESS), reads);
    w.stop().await
}

#[tokio::test]
async fn hook_reviewer_lists_are_dated_snapshots() -> Result<()> {
    let w = World::start().await?;
    // Only the hooks state reviewers here: GitLab's readiness read fails.
    w.sim.inject(Fault::always(
        ops::MERGE_REQUEST_READINESS,
        GitlabFault::FieldError {
            path: "project".into(),
            message: "unavailable".into(),
        },
    ));
    let iid = w.open("asked", at(10)).await?;
    assert_eq!(w.facts(iid).await?.reviewers, reviewers(&[]));
    // GitLab 18.6+: each reviewer with their state.
    let stated = w.change(iid, |mr| {
        mr.title = "one".into();
        mr.reviewers = vec![
            ("carol".into(), Some("REVIEWED".into())),
            ("dan".into(), None),
        ];
    });
    w.deliver(&stated).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("carol", Some("reviewed")), ("dan", None)])
    );
    // Before 18.6: named without a state, carol keeps hers; dan is no longer asked.
    let named = w.change(iid, |mr| {
        mr.title = "two".into();
        mr.reviewers = vec![("carol".into(), None)];
    });
    w.deliver(&named).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("carol", Some("reviewed"))])
    );
    // Two lists of the same version: the one received later stands, and the earlier one
    // delivered again changes nothing.
    let mut earlier = named.clone();
    earlier["reviewers"] = serde_json::json!([{"username": "erin", "state": "approved"}]);
    let mut later = named.clone();
    later["reviewers"] = serde_json::json!([{"username": "frank"}]);
    let first = w.deliver(&earlier).await?;
    assert_eq!(
        w.facts(iid).await?.reviewers,
        reviewers(&[("erin", Some("approved"))])
    );
    w.deliver(&later).await?;
    w.registered(w.a, &earlier, Some(first)).await?;
    w.settle().await?;
    assert_eq!(w.facts(iid).await?.reviewers, reviewers(&[("frank", None)]));
    assert_eq!(w.count("SELECT count(*) FROM dead_message").await?, 0);
    w.stop().await
}
