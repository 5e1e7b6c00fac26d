//! The one harness of gitlab-sync's webhook suites: gitlab-sync running in-process against real
//! Postgres and JetStream and the simulated GitLab over HTTP. Deliveries are stored as ingress
//! stores them (`store::inbound::record`, on the subject ingress derives) and relayed as
//! ingress's relay would (gitlab-sync's own relays only what its NATS user publishes).
//!
//! [`Stack`] is the running service with its workspaces and endpoints; [`World`] is the topology
//! most suites share (A monitoring `acme/api`, B on `globex`). Each suite uses what it needs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bus::Stream;
use gitlab_client::RetryPolicy;
use gitlab_sync::source::ClientFactory;
use gitlab_sync::sync::GitlabVendor;
use lifecycle_core::subject;
use sea_orm::{EntityTrait as _, TransactionTrait as _};
use serde_json::Value as Json;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, connection};
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::{Engine, JobOutcome, Vendor as _};
use time::OffsetDateTime;
use uuid::Uuid;
use vendor_sim::gitlab::webhook::{approval_hook, merge_request_hook};
use vendor_sim::gitlab::{GitlabSim, Model, NewMergeRequest};

/// gitlab-sync's durable consumers of the GitLab webhook stream.
const CONSUMERS: [&str; 2] = [
    "gitlab-sync-connection-events",
    "gitlab-sync-project-events",
];

/// A workspace's GitLab connection and its endpoints.
#[derive(Clone, Copy, Debug)]
pub struct Tenant {
    pub connection_id: Uuid,
    /// The endpoint of the group hook we registered.
    pub route: EndpointIds,
    /// An operator-created hook's endpoint on the shared route.
    pub shared: EndpointIds,
}

/// The database, the simulated GitLab and its provider instance, before gitlab-sync runs:
/// workspaces and monitors are added here, then [`Setup::run`] starts the service.
pub struct Setup {
    env: testkit::TestEnv,
    sim: GitlabSim,
    instance: Uuid,
    keyring: Keyring,
}

impl Setup {
    /// A fresh database and bus, and the simulator serving `model`.
    pub async fn new(model: Model) -> Result<Setup> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let env = testkit::TestEnv::new().await?;
        let sim = GitlabSim::start(model).await?;
        let instance = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)",
        )
        .bind(instance)
        .bind(sim.base_url())
        .execute(env.db.db.get_postgres_connection_pool())
        .await?;
        Ok(Setup {
            env,
            sim,
            instance,
            keyring: Keyring::parse(&testkit::secret_key())?,
        })
    }

    /// A workspace with an active GitLab connection (`settings`, `token`) and two endpoints.
    pub async fn tenant(&self, settings: Json, token: &str) -> Result<Tenant> {
        let env = &self.env;
        let (workspace_id, connection_id) =
            testkit::active_connection(&env.db.db, "gitlab", self.instance, settings, Some(token))
                .await?;
        let mut endpoints = Vec::new();
        for registration in [Registration::Registered, Registration::Operator] {
            let endpoint = store::inbound::create_endpoint(
                &env.db.db,
                &self.keyring,
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
        Ok(Tenant {
            connection_id,
            route: endpoints[0],
            shared: endpoints[1],
        })
    }

    /// `tenant` monitors `owner/name` (native id `id`).
    pub async fn monitor(&self, tenant: Tenant, owner: &str, name: &str, id: u64) -> Result<()> {
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.route.workspace_id)
        .bind(tenant.connection_id)
        .bind(owner)
        .bind(name)
        .bind(id as i64)
        .execute(self.env.db.db.get_postgres_connection_pool())
        .await?;
        Ok(())
    }

    /// Starts gitlab-sync (no cron) and the relay standing in for ingress's.
    pub async fn run(self) -> Result<Stack> {
        let config: gitlab_sync::Config = testkit::config(
            self.env.common_args(),
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
            self.env.db.db.clone(),
            self.env.bus.clone(),
            bus::relay::RelayConfig::default(),
        );
        tokio::spawn({
            let stop = stop.clone();
            async move { relay.run(stop).await }
        });
        Ok(Stack {
            env: self.env,
            sim: self.sim,
            instance: self.instance,
            keyring: self.keyring,
            config,
            service,
            _ingress_relay: stop.drop_guard(),
        })
    }
}

/// gitlab-sync running beside the simulator.
pub struct Stack {
    pub env: testkit::TestEnv,
    pub sim: GitlabSim,
    /// The provider instance of the simulator.
    pub instance: Uuid,
    pub keyring: Keyring,
    pub config: gitlab_sync::Config,
    service: Option<testkit::Running>,
    /// Stops the relay standing in for ingress's.
    _ingress_relay: tokio_util::sync::DropGuard,
}

impl Stack {
    pub fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// Stores `body` as ingress does for a hook we registered for `tenant` (the event named by
    /// `object_kind`, else `event_name`). `replay_of`: an explicit replay of an earlier
    /// delivery (no dedup), as a redelivery reaches the consumer.
    pub async fn registered(
        &self,
        tenant: Tenant,
        body: &Json,
        replay_of: Option<Uuid>,
    ) -> Result<Uuid> {
        let (subject, event) = route_subject(tenant, body)?;
        self.store(tenant.route, subject, event, body, replay_of, usize::MAX)
            .await
    }

    /// Stores `body` as ingress does for an operator-created hook of `tenant`, routed by path.
    pub async fn operator(&self, tenant: Tenant, body: &Json) -> Result<Uuid> {
        let event = event_of(body);
        let path = body["project"]["path_with_namespace"]
            .as_str()
            .unwrap_or_default();
        let (namespace, project) = path.rsplit_once('/').unwrap_or(("", path));
        let subject = subject::gitlab_project(namespace, project, &event)?;
        self.store(tenant.shared, subject, event, body, None, usize::MAX)
            .await
    }

    /// Stores `body` as ingress does on `endpoint` and `subject`; bodies over `inline_body_max`
    /// bytes are kept by reference.
    pub async fn store(
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

    /// Waits until every stored delivery is published and both consumers settled them.
    pub async fn settle(&self) -> Result<()> {
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
            for durable in CONSUMERS {
                if let Ok(info) = stream.consumer_info(ns.name(durable)).await {
                    busy |= info.num_pending > 0 || info.num_ack_pending > 0;
                }
            }
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// (id, reason) of every dead message, oldest first.
    pub async fn dead(&self) -> Result<Vec<(Uuid, String)>> {
        Ok(
            sqlx::query_as("SELECT id, reason FROM dead_message ORDER BY created_at, id")
                .fetch_all(self.pool())
                .await?,
        )
    }

    /// Replays dead message `id` as an operator does, by `POST /dead-messages/{id}/replay` on
    /// a control-api started for the call, and waits for it to settle.
    pub async fn replay(&self, id: Uuid) -> Result<()> {
        let api_server =
            testkit::spawn(testkit::control_api_config(self.env.common_args())).await?;
        let keys = testkit::control_api_keys()?;
        let operator = testkit::token(&keys, control_api::Role::Admin, None)?;
        let res = reqwest::Client::new()
            .post(format!("{}/dead-messages/{id}/replay", api_server.url()))
            .bearer_auth(&operator)
            .json(&serde_json::json!({}))
            .send()
            .await?;
        anyhow::ensure!(
            res.status() == reqwest::StatusCode::ACCEPTED,
            "replay answered {}",
            res.status()
        );
        self.settle().await?;
        api_server.stop().await
    }

    /// Runs a sync job of `job_type` (started by `trigger`) for `tenant`'s connection to its
    /// end, reading the simulator over HTTP with the connection's own source.
    pub async fn sync(&self, tenant: Tenant, job_type: &str, trigger: &str) -> Result<JobOutcome> {
        let job_id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger)
             VALUES ($1, $2, $3, 'gitlab', $4, $5)",
        )
        .bind(job_id)
        .bind(tenant.connection_id)
        .bind(tenant.route.workspace_id)
        .bind(job_type)
        .bind(trigger)
        .execute(self.pool())
        .await?;
        let vendor = GitlabVendor {
            pool: self.pool().clone(),
            factory: ClientFactory {
                db: self.env.db.db.clone(),
                secret_key: Keyring::parse(&self.config.secret_key)?,
                request_timeout: self.config.sync.request_timeout(),
                egress: self.config.common.egress.clone(),
                retry: RetryPolicy {
                    max_retries: 1,
                    min_delay: Duration::from_millis(5),
                    max_delay: Duration::from_millis(10),
                    max_retry_after: Duration::from_secs(1),
                    deadline: vendor_http::DEFAULT_CALL_DEADLINE,
                },
            },
            backfill: self.config.backfill_batches(),
            activator: None,
        };
        let engine = Engine::new(
            Arc::new(vendor),
            self.pool().clone(),
            "replica-test",
            Duration::from_secs(30),
            self.config.sync.sync_settings(),
        );
        let job = engine.jobs.claim(job_id).await?.job().expect("claimable");
        let conn = connection::Entity::find_by_id(tenant.connection_id)
            .one(&self.env.db.db)
            .await?
            .expect("connection");
        let source = engine.vendor.source(&conn).await?;
        Ok(engine.run(&job, self.instance, source).await?)
    }

    pub async fn count(&self, sql: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(self.pool())
            .await?)
    }

    pub async fn stop(mut self) -> Result<()> {
        if let Some(s) = self.service.take() {
            s.stop().await?;
        }
        Ok(())
    }
}

/// The event a hook body names: `object_kind`, else `event_name` (project, subgroup and
/// member events).
pub fn event_of(body: &Json) -> String {
    body["object_kind"]
        .as_str()
        .or_else(|| body["event_name"].as_str())
        .unwrap_or("unknown")
        .to_owned()
}

/// The subject and event ingress derives for `body` on `tenant`'s registered route.
pub fn route_subject(tenant: Tenant, body: &Json) -> Result<(String, String)> {
    let event = event_of(body);
    let subject = subject::gitlab_connection(&tenant.connection_id.to_string(), &event)?;
    Ok((subject, event))
}

pub fn at(seconds: i64) -> OffsetDateTime {
    time::macros::datetime!(2026-03-01 00:00 UTC) + time::Duration::seconds(seconds)
}

/// The updated_at a Merge Request Hook states for its merge request.
pub fn hook_version(body: &Json) -> OffsetDateTime {
    let text = body["object_attributes"]["updated_at"].as_str().unwrap();
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::PrimitiveDateTime::parse(text, &f)
        .unwrap()
        .assume_utc()
}

/// A (group `acme`, monitoring `acme/api`) and B (group `globex`) on one GitLab instance, and
/// gitlab-sync running.
pub struct World {
    pub stack: Stack,
    pub a: Tenant,
    pub b: Tenant,
    /// `acme/api`: monitored by A.
    pub api: u64,
}

impl Deref for World {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl World {
    pub async fn start() -> Result<World> {
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        model.add_group(None, "globex");
        let api = model.add_project(acme, "api");
        let setup = Setup::new(model).await?;
        let a = setup
            .tenant(
                serde_json::json!({"group": "acme", "projects": ["acme/api"]}),
                "token-a",
            )
            .await?;
        let b = setup
            .tenant(serde_json::json!({"group": "globex"}), "token-b")
            .await?;
        setup.monitor(a, "acme", "api", api).await?;
        Ok(World {
            stack: setup.run().await?,
            a,
            b,
            api,
        })
    }

    /// Delivers `body` thrice through A's route: once, then twice as a redelivery; the first
    /// delivery's id.
    pub async fn thrice(&self, body: &Json) -> Result<Uuid> {
        let first = self.registered(self.a, body, None).await?;
        self.again(body, first).await?;
        Ok(first)
    }

    /// Delivers `body`, first delivered as `first`, twice more as redeliveries.
    pub async fn again(&self, body: &Json, first: Uuid) -> Result<()> {
        for _ in 0..2 {
            self.registered(self.a, body, Some(first)).await?;
        }
        Ok(())
    }

    /// Opens a merge request in the simulator dated `updated_at` and delivers its open hook
    /// through A's route; returns its iid.
    pub async fn open(&self, title: &str, updated_at: OffsetDateTime) -> Result<u64> {
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

    /// `user` approves merge request `iid`; the hook GitLab sends.
    pub fn approve(&self, iid: u64, user: &str) -> Json {
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

    /// Runs a sync job of `job_type` for A's connection, which must succeed.
    pub async fn sync_a(&self, job_type: &str) -> Result<()> {
        let outcome = self.stack.sync(self.a, job_type, "manual").await?;
        anyhow::ensure!(
            matches!(outcome, JobOutcome::Succeeded),
            "the sync ended {outcome:?}"
        );
        Ok(())
    }

    /// (source key, origin) of every item event `name` of merge request `iid`, in key order.
    pub async fn events(&self, iid: u64, name: &str) -> Result<Vec<(String, String)>> {
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
    pub async fn activities(&self, iid: u64, kind: &str) -> Result<i64> {
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

    pub async fn stop(self) -> Result<()> {
        self.stack.stop().await
    }
}
