//! The shared webhook front half with a second vendor that exists only here: a scripted vendor
//! on GitLab connections (no consumer of this test claims that kind) with one item class in its
//! own table. Deliveries are stored as ingress stores them (`store::inbound::record`), relayed to
//! real JetStream and consumed by the engine's monitor-following consumer over real Postgres.
//! Nothing in the engine knows this vendor: its `WebhookApply` and `Monitors` are enough.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bus::consumer::ConsumerSpec;
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Stream};
use lifecycle_core::subject::{self, Monitor};
use sea_orm::{DatabaseConnection, EntityTrait, TransactionTrait};
use serde::Deserialize;
use sqlx::PgPool;
use store::admission::Scope;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, dead_message};
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::webhook::follow::{self, Filters, Monitors};
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookConsumer, WebhookError, parse};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The scripted vendor's one item class, as its webhook reports an item.
#[derive(Debug, Deserialize)]
struct ItemEvent {
    /// The project (the vendor's scope) by native id.
    project: i64,
    item: i64,
    title: String,
    /// Moves forward only.
    version: i64,
}

/// The scripted vendor's webhook side: `item` events write `scripted_item`, forward only.
struct Scripted {
    pool: PgPool,
}

impl WebhookApply for Scripted {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
    type Payload = ItemEvent;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<ItemEvent>, WebhookError> {
        match hook.event {
            "item" => parse(hook).map(Some),
            _ => Ok(None),
        }
    }

    async fn apply(&self, hook: &Webhook<'_>, event: ItemEvent) -> Result<Outcome, WebhookError> {
        let mut txn = self.pool.begin().await?;
        hook.admit(
            &mut txn,
            Scope::GitlabProject {
                native_id: event.project,
            },
        )
        .await?;
        let stored: Option<(i64,)> = sqlx::query_as(
            "SELECT version FROM scripted_item
              WHERE provider_instance_id = $1 AND project = $2 AND item = $3 FOR UPDATE",
        )
        .bind(hook.provider_instance_id)
        .bind(event.project)
        .bind(event.item)
        .fetch_optional(&mut *txn)
        .await?;
        if stored.is_some_and(|(version,)| version >= event.version) {
            return Ok(Outcome::Unchanged);
        }
        sqlx::query(
            "INSERT INTO scripted_item (provider_instance_id, project, item, title, version)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (provider_instance_id, project, item)
             DO UPDATE SET title = EXCLUDED.title, version = EXCLUDED.version",
        )
        .bind(hook.provider_instance_id)
        .bind(event.project)
        .bind(event.item)
        .bind(&event.title)
        .bind(event.version)
        .execute(&mut *txn)
        .await?;
        txn.commit().await?;
        Ok(Outcome::Applied)
    }
}

/// The projects monitored by the vendor's connections, for the consumer subject math.
struct ScriptedMonitors {
    pool: PgPool,
}

impl Monitors for ScriptedMonitors {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT DISTINCT m.owner, m.name FROM repository_to_monitor m
               JOIN connection c ON c.id = m.connection_id
              WHERE c.kind = 'gitlab' AND c.status = 'active'",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(namespace, project)| Monitor::GitlabProject { namespace, project })
            .collect())
    }
}

const DURABLE: &str = "scripted-webhooks";

/// A's project, and B's: (namespace, project, native id).
const ACME: Project = ("acme", "widgets", 7);
const GLOBEX: Project = ("globex", "gadgets", 8);

type Project = (&'static str, &'static str, i64);

/// A connection and the endpoint its deliveries arrive on.
#[derive(Clone, Copy)]
struct Tenant {
    endpoint: EndpointIds,
}

/// How a delivery is stored.
#[derive(Default)]
struct Stored {
    /// Published by reference to its stored body, not inline.
    by_reference: bool,
    /// An operator's replay of this earlier delivery (the same body again).
    replay_of: Option<Uuid>,
    /// The connection's raw bodies erased before the delivery is consumed.
    erased: bool,
}

/// Real Postgres and JetStream with the relay and the scripted vendor's consumer running.
struct World {
    _db: testkit::TestDb,
    db: DatabaseConnection,
    pool: PgPool,
    bus: Bus,
    keyring: Keyring,
    instance: Uuid,
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl World {
    /// The world with workspaces A and B, each with a connection whose monitor is bound to its
    /// own project (A: [`ACME`], B: [`GLOBEX`]).
    async fn start() -> Result<(World, Tenant, Tenant)> {
        runtime::install_crypto_provider();
        let test_db = testkit::TestDb::new().await?;
        let db = test_db.db.clone();
        let pool = db.get_postgres_connection_pool().clone();
        sqlx::query(
            "CREATE TABLE scripted_item (
                provider_instance_id uuid NOT NULL,
                project bigint NOT NULL,
                item bigint NOT NULL,
                title text NOT NULL,
                version bigint NOT NULL,
                PRIMARY KEY (provider_instance_id, project, item))",
        )
        .execute(&pool)
        .await?;
        let instance = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'gitlab')")
            .bind(instance)
            .execute(&pool)
            .await?;
        let mut world = World {
            _db: test_db,
            db,
            pool,
            bus: testkit::test_bus().await?,
            keyring: Keyring::parse(&testkit::secret_key())?,
            instance,
            stop: CancellationToken::new(),
            tasks: tokio::task::JoinSet::new(),
        };
        let a = world.tenant(ConnectionKind::Gitlab).await?;
        let b = world.tenant(ConnectionKind::Gitlab).await?;
        world.monitor(a, ACME).await?;
        world.monitor(b, GLOBEX).await?;
        world.run();
        Ok((world, a, b))
    }

    /// A workspace with an active connection of `kind` and an endpoint of it.
    async fn tenant(&self, kind: ConnectionKind) -> Result<Tenant> {
        let (ws, conn) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
            .bind(ws)
            .execute(&self.pool)
            .await?;
        let instance = if kind == ConnectionKind::Gitlab {
            self.instance
        } else {
            let other = Uuid::now_v7();
            sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, $2)")
                .bind(other)
                .bind(kind.as_str())
                .execute(&self.pool)
                .await?;
            other
        };
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
             VALUES ($1, $2, $3, 'active', $4)",
        )
        .bind(conn)
        .bind(ws)
        .bind(kind.as_str())
        .bind(instance)
        .execute(&self.pool)
        .await?;
        let endpoint = store::inbound::create_endpoint(
            &self.db,
            &self.keyring,
            NewEndpoint {
                workspace_id: ws,
                connection_id: conn,
                kind,
                registration: Registration::Registered,
                provider_ref: None,
                address_token: Some(Uuid::now_v7().simple().to_string()),
            },
            b"scripted-secret",
        )
        .await?;
        Ok(Tenant {
            endpoint: EndpointIds {
                endpoint_id: endpoint.id,
                workspace_id: ws,
                connection_id: conn,
                kind,
            },
        })
    }

    /// A monitor of `tenant`'s connection bound to the project's native id.
    async fn monitor(&self, tenant: Tenant, (owner, name, native_id): Project) -> Result<()> {
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.endpoint.workspace_id)
        .bind(tenant.endpoint.connection_id)
        .bind(owner)
        .bind(name)
        .bind(native_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The relay and the scripted vendor's monitor-following consumer.
    fn run(&mut self) {
        let relay = Relay::new(
            self.db.clone(),
            self.bus.clone(),
            RelayConfig {
                poll_interval: Duration::from_millis(50),
                ..RelayConfig::default()
            },
        );
        let stop = self.stop.clone();
        self.tasks.spawn(async move { relay.run(stop).await });
        let consumer = Arc::new(WebhookConsumer::new(
            self.pool.clone(),
            Scripted {
                pool: self.pool.clone(),
            },
        ));
        let spec = ConsumerSpec {
            ack_wait: Duration::from_secs(10),
            backoff: vec![Duration::from_millis(100)],
            ..ConsumerSpec::new(Stream::WebhooksGitlab, DURABLE)
        };
        let filters = Filters {
            monitors: ScriptedMonitors {
                pool: self.pool.clone(),
            },
            excluded: Vec::new(),
        };
        let (bus, db, stop) = (self.bus.clone(), self.db.clone(), self.stop.clone());
        self.tasks.spawn(async move {
            follow::run(
                bus,
                db,
                spec,
                consumer,
                filters,
                Duration::from_millis(100),
                stop,
            )
            .await
            .expect("the consumer ran until stopped");
        });
    }

    /// Stores `body` as ingress does, received on `tenant`'s endpoint and routed to
    /// `project`'s subject, for the relay to publish. Returns the inbound message id.
    async fn deliver(
        &self,
        tenant: Tenant,
        (owner, name, _): Project,
        event: &str,
        body: Vec<u8>,
        how: Stored,
    ) -> Result<Uuid> {
        let dedup = match how.replay_of {
            Some(of) => Dedup::Replay { of },
            None => Dedup::Keys {
                event_id: Some(Uuid::now_v7().to_string()),
                digest_window: Duration::from_secs(3600),
                verified_by: None,
            },
        };
        let txn = self.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint: tenant.endpoint,
                verification: "token".into(),
                headers: BTreeMap::new(),
                body,
                event: event.into(),
                subject: subject::gitlab_project(owner, name, event)?,
                dedup,
                retention: Duration::from_secs(24 * 3600),
                inline_body_max: if how.by_reference { 0 } else { usize::MAX },
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        let Recorded::Accepted(accepted) = recorded else {
            panic!("the delivery was not stored: {recorded:?}");
        };
        if how.erased {
            // Erasure of the connection's raw bodies, before its consumer reads this one.
            store::inbound::erase_bodies(&txn, tenant.endpoint.connection_id).await?;
        }
        txn.commit().await?;
        Ok(accepted.message_id)
    }

    /// Waits until every stored delivery is published and the consumer has settled all of them
    /// (nothing pending or unacknowledged, three times in a row).
    async fn settle(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut quiet = 0;
        while quiet < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the consumer did not settle"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (unpublished,): (i64,) = sqlx::query_as("SELECT count(*) FROM outbox")
                .fetch_one(&self.pool)
                .await?;
            let ns = self.bus.namespace();
            let mut stream = self
                .bus
                .jetstream()
                .get_stream(ns.name(Stream::WebhooksGitlab.name()))
                .await?;
            let stored = stream.info().await?.state.messages;
            let busy = unpublished > 0
                || match stream.consumer_info(ns.name(DURABLE)).await {
                    Ok(info) => info.num_pending > 0 || info.num_ack_pending > 0,
                    Err(_) => stored > 0,
                };
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// Waits until the consumer's filters take `project`'s subjects.
    async fn filtering(&self, (owner, name, _): Project) -> Result<()> {
        let wanted = subject::gitlab_project(owner, name, "item")?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let ns = self.bus.namespace();
        loop {
            let stream = self
                .bus
                .jetstream()
                .get_stream(ns.name(Stream::WebhooksGitlab.name()))
                .await?;
            if let Ok(info) = stream.consumer_info(ns.name(DURABLE)).await {
                let config = &info.config;
                let filters = config
                    .filter_subjects
                    .iter()
                    .chain(std::iter::once(&config.filter_subject));
                if filters
                    .filter_map(|f| ns.strip(f))
                    .any(|f| subject::filter_covers(f, &wanted))
                {
                    return Ok(());
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the consumer never filtered {owner}/{name}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The durable's state on the server: (pending, unacknowledged, logical filters).
    async fn durable(&self) -> Result<(u64, usize, Vec<String>)> {
        let ns = self.bus.namespace();
        let stream = self
            .bus
            .jetstream()
            .get_stream(ns.name(Stream::WebhooksGitlab.name()))
            .await?;
        let info = stream.consumer_info(ns.name(DURABLE)).await?;
        let config = &info.config;
        let filters = config
            .filter_subjects
            .iter()
            .chain(std::iter::once(&config.filter_subject))
            .filter_map(|f| ns.strip(f))
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        Ok((info.num_pending, info.num_ack_pending, filters))
    }

    /// Waits until the consumer's filters take no project any more.
    async fn parked(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let probe = subject::gitlab_project(ACME.0, ACME.1, "item")?;
        loop {
            let (_, _, filters) = self.durable().await?;
            if !filters.is_empty() && !filters.iter().any(|f| subject::filter_covers(f, &probe)) {
                return Ok(());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the consumer never parked (filters {filters:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The stored items of a project: (item, title, version).
    async fn items(&self, native_id: i64) -> Result<Vec<(i64, String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT item, title, version FROM scripted_item WHERE project = $1 ORDER BY item",
        )
        .bind(native_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The reasons of the dead messages recorded so far.
    async fn dead(&self) -> Result<Vec<String>> {
        Ok(dead_message::Entity::find()
            .all(&self.db)
            .await?
            .into_iter()
            .map(|d| d.reason)
            .collect())
    }

    async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

fn item(project: i64, item: i64, title: &str, version: i64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "project": project, "item": item, "title": title, "version": version,
    }))
    .expect("JSON")
}

/// The vendor's counters in the process's metrics: `webhooks_total{vendor="gitlab"}` by
/// outcome, and `webhooks_rejected_total{vendor="gitlab",reason="out_of_scope"}`.
fn counted(outcome: &str) -> u64 {
    let text = runtime::telemetry::metrics_handle().render();
    text.lines()
        .filter(|l| l.contains("vendor=\"gitlab\""))
        .filter(|l| match outcome {
            "rejected" => {
                l.starts_with("webhooks_rejected_total{") && l.contains("reason=\"out_of_scope\"")
            }
            _ => l.starts_with("webhooks_total{") && l.contains(&format!("outcome=\"{outcome}\"")),
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_applies_and_its_redelivery_changes_nothing() -> Result<()> {
    runtime::telemetry::metrics_handle();
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    let first = w
        .deliver(a, ACME, "item", item(7, 1, "first", 2), Stored::default())
        .await?;
    w.settle().await?;
    assert_eq!(w.items(7).await?, vec![(1, "first".into(), 2)]);
    assert_eq!(counted("applied"), 1);

    // The same delivery again (an operator's replay), and an older copy: nothing moves.
    let replay = Stored {
        replay_of: Some(first),
        ..Stored::default()
    };
    w.deliver(a, ACME, "item", item(7, 1, "first", 2), replay)
        .await?;
    w.deliver(a, ACME, "item", item(7, 1, "stale", 1), Stored::default())
        .await?;
    w.settle().await?;
    assert_eq!(w.items(7).await?, vec![(1, "first".into(), 2)]);
    assert_eq!(counted("unchanged"), 2);
    // An event the vendor does not act on is acknowledged as ignored.
    w.deliver(a, ACME, "comment", b"{}".to_vec(), Stored::default())
        .await?;
    w.settle().await?;
    assert_eq!(counted("ignored"), 1);
    assert!(w.dead().await?.is_empty());
    w.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_by_reference_is_read_from_its_stored_copy() -> Result<()> {
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    let by_reference = Stored {
        by_reference: true,
        ..Stored::default()
    };
    let message = w
        .deliver(a, ACME, "item", item(7, 3, "large", 1), by_reference)
        .await?;
    w.settle().await?;
    assert_eq!(w.items(7).await?, vec![(3, "large".into(), 1)]);
    // Acknowledged after it applied: retention may now delete the stored body.
    let (consumed,): (bool,) = sqlx::query_as(
        "SELECT consumed_at IS NOT NULL FROM inbound_message_body WHERE message_id = $1",
    )
    .bind(message)
    .fetch_one(&w.pool)
    .await?;
    assert!(consumed);
    assert!(w.dead().await?.is_empty());
    w.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_body_is_a_dead_message_and_writes_nothing() -> Result<()> {
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    let erased = Stored {
        by_reference: true,
        erased: true,
        ..Stored::default()
    };
    w.deliver(a, ACME, "item", item(7, 4, "erased", 1), erased)
        .await?;
    w.settle().await?;
    assert!(w.items(7).await?.is_empty());
    let dead = w.dead().await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains("no longer stored"), "{dead:?}");
    w.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_payload_is_a_dead_message_and_writes_nothing() -> Result<()> {
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    let malformed = br#"{"project": 7, "item": "one"}"#.to_vec();
    w.deliver(a, ACME, "item", malformed, Stored::default())
        .await?;
    w.settle().await?;
    assert!(w.items(7).await?.is_empty());
    let dead = w.dead().await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains("malformed item payload"), "{dead:?}");
    w.stop().await;
    Ok(())
}

/// Tenant B holds a verified endpoint of its own and sends payloads naming A's project: each is
/// acknowledged and counted out of scope, A's project is unchanged, and nothing is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_another_workspaces_project_through_ones_own_endpoint_changes_nothing() -> Result<()>
{
    runtime::telemetry::metrics_handle();
    let (w, a, b) = World::start().await?;
    w.filtering(ACME).await?;
    w.filtering(GLOBEX).await?;
    w.deliver(a, ACME, "item", item(7, 1, "A's own", 1), Stored::default())
        .await?;
    w.settle().await?;

    // B's endpoint, A's project (routed to A's subject by the payload's names): a later
    // version of A's item, and a new item planted in A's project.
    w.deliver(
        b,
        ACME,
        "item",
        item(7, 1, "B was here", 99),
        Stored::default(),
    )
    .await?;
    w.deliver(
        b,
        ACME,
        "item",
        item(7, 2, "B's plant", 1),
        Stored::default(),
    )
    .await?;
    // B's delivery about its own project still applies.
    w.deliver(
        b,
        GLOBEX,
        "item",
        item(8, 1, "B's own", 1),
        Stored::default(),
    )
    .await?;
    w.settle().await?;
    assert_eq!(w.items(7).await?, vec![(1, "A's own".into(), 1)]);
    assert_eq!(w.items(8).await?, vec![(1, "B's own".into(), 1)]);
    assert_eq!(counted("rejected"), 2);
    assert_eq!(counted("out_of_scope"), 2);
    assert!(w.dead().await?.is_empty());

    // A connection of another kind named on the message, even one bound to the same native
    // id: not this vendor's connection, so ignored and nothing written.
    let github = w.tenant(ConnectionKind::Github).await?;
    w.monitor(github, ACME).await?;
    w.deliver(
        github,
        ACME,
        "item",
        item(7, 1, "from GitHub", 100),
        Stored::default(),
    )
    .await?;
    w.settle().await?;
    assert_eq!(w.items(7).await?, vec![(1, "A's own".into(), 1)]);
    assert_eq!(counted("ignored"), 1);
    assert!(w.dead().await?.is_empty());
    w.stop().await;
    Ok(())
}

/// A project monitored after the consumer started is taken once its monitor exists: the
/// consumer is re-declared with the filters the consumer subject math computes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_monitor_widens_the_consumers_filters() -> Result<()> {
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    let later: Project = ("acme", "gizmos", 9);
    w.monitor(a, later).await?;
    w.filtering(later).await?;
    w.deliver(a, later, "item", item(9, 1, "gizmo", 1), Stored::default())
        .await?;
    w.settle().await?;
    assert_eq!(w.items(9).await?, vec![(1, "gizmo".into(), 1)]);
    w.stop().await;
    Ok(())
}

/// When the last monitoring connection pauses, the consumer parks: a delivery for a project it
/// used to take is neither written nor counted as its pending work (an autoscaler reading the
/// durable's pending count would otherwise keep workers up for a backlog nobody pulls). Once a
/// connection is active again the project's filters come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_nothing_monitored_holds_no_backlog() -> Result<()> {
    let (w, a, _) = World::start().await?;
    w.filtering(ACME).await?;
    sqlx::query("UPDATE connection SET status = 'paused' WHERE kind = 'gitlab'")
        .execute(&w.pool)
        .await?;
    w.parked().await?;
    w.deliver(
        a,
        ACME,
        "item",
        item(7, 1, "while paused", 1),
        Stored::default(),
    )
    .await?;
    w.settle().await?;
    assert_eq!(
        w.items(7).await?,
        vec![],
        "a paused connection's delivery wrote"
    );
    let (pending, unacked, _) = w.durable().await?;
    assert_eq!(
        (pending, unacked),
        (0, 0),
        "the parked durable holds the paused project's delivery as pending"
    );

    sqlx::query("UPDATE connection SET status = 'active' WHERE kind = 'gitlab'")
        .execute(&w.pool)
        .await?;
    w.filtering(ACME).await?;
    w.deliver(
        a,
        ACME,
        "item",
        item(7, 2, "after resume", 1),
        Stored::default(),
    )
    .await?;
    w.settle().await?;
    assert!(
        w.items(7).await?.contains(&(2, "after resume".into(), 1)),
        "a delivery after the resume was not applied"
    );
    w.stop().await;
    Ok(())
}
