//! The shared webhook front half with the scripted vendor (`scripted`) on GitLab connections (no
//! consumer of this test claims that kind), its notes in the table its job side writes too.
//! Deliveries are stored as ingress stores them (`store::inbound::record`), relayed to real
//! JetStream and consumed by the engine's monitor-following consumer over real Postgres.
//! Nothing in the engine knows this vendor: its `WebhookApply` and `Monitors` are enough.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bus::consumer::ConsumerSpec;
use bus::relay::{Relay, RelayConfig};
use bus::{Bus, Stream};
use lifecycle_core::subject;
use sea_orm::EntityTrait;
use store::entity::{ConnectionKind, dead_message};
use store::inbound::EndpointIds;
use sync_engine::webhook::WebhookConsumer;
use sync_engine::webhook::follow::{self, Filters};
use sync_engine::webhook::hint::Confirmations;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::scripted::{
    self, Gitlab, Hints, Mirror, Project, Scripted, ScriptedSource, Stored, item_event as item, row,
};

const DURABLE: &str = "scripted-webhooks";

/// A's project, and B's: (namespace, project, native id).
const ACME: Project = ("acme", "widgets", 7);
const GLOBEX: Project = ("globex", "gadgets", 8);

/// A connection and the endpoint its deliveries arrive on.
#[derive(Clone, Copy)]
struct Tenant {
    tenant: scripted::Tenant,
    endpoint: EndpointIds,
}

/// Real Postgres and JetStream with the relay and the scripted vendor's consumer running.
struct World {
    _db: testkit::TestDb,
    mirror: Mirror,
    bus: Bus,
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    /// The vendor's confirming reads of hints, when the test gives it some.
    hints: Option<Arc<Hints>>,
}

impl std::ops::Deref for World {
    type Target = Mirror;

    fn deref(&self) -> &Mirror {
        &self.mirror
    }
}

impl World {
    /// The world with workspaces A and B, each with a connection whose monitor is bound to its
    /// own project (A: [`ACME`], B: [`GLOBEX`]).
    async fn start() -> Result<(World, Tenant, Tenant)> {
        World::start_with(None).await
    }

    /// The same world, its vendor confirming hints with `hints` and its consumer running two
    /// workers with four deliveries a message.
    async fn start_with(hints: Option<Arc<Hints>>) -> Result<(World, Tenant, Tenant)> {
        runtime::install_crypto_provider();
        let test_db = testkit::TestDb::new().await?;
        let mut world = World {
            mirror: Mirror::new(&test_db.db, ConnectionKind::Gitlab).await?,
            _db: test_db,
            bus: testkit::test_bus().await?,
            stop: CancellationToken::new(),
            tasks: tokio::task::JoinSet::new(),
            hints,
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
        let tenant = self.mirror.tenant(kind, "active").await?;
        Ok(Tenant {
            tenant,
            endpoint: self.mirror.endpoint(tenant).await?,
        })
    }

    /// A monitor of `tenant`'s connection bound to the project's native id.
    async fn monitor(&self, tenant: Tenant, project: Project) -> Result<()> {
        self.mirror.monitor(tenant.tenant, project).await
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
        // Only its webhook side runs here: the script serves no page.
        let scripted = Scripted::<Gitlab>::new(self.pool.clone(), ScriptedSource::new(0))
            .with_hints(self.hints.clone());
        let consumer = Arc::new(WebhookConsumer::new(self.pool.clone(), scripted.clone()));
        let mut spec = ConsumerSpec {
            ack_wait: Duration::from_secs(10),
            backoff: vec![Duration::from_millis(100)],
            ..ConsumerSpec::new(Stream::WebhooksGitlab, DURABLE)
        };
        if self.hints.is_some() {
            spec.concurrency = 2;
            spec.max_deliveries = 4;
        }
        let filters = Filters {
            monitors: scripted,
            excluded: Vec::new(),
            cap: follow::DEFAULT_MAX_FILTERS,
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
        project: Project,
        event: &str,
        body: Vec<u8>,
        how: Stored,
    ) -> Result<Uuid> {
        self.mirror
            .deliver(tenant.endpoint, project, event, body, how)
            .await
    }

    /// Waits until every stored delivery is published and the consumer has settled all of them.
    async fn settle(&self) -> Result<()> {
        scripted::settle(&self.bus, &self.pool, Stream::WebhooksGitlab, DURABLE).await
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
    assert_eq!(w.items(7).await?, vec![row(1, "first", 2)]);
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
    assert_eq!(w.items(7).await?, vec![row(1, "first", 2)]);
    assert_eq!(counted("unchanged"), 2);
    // An event the vendor does not act on is acknowledged as ignored.
    w.deliver(a, ACME, "comment", b"{}".to_vec(), Stored::default())
        .await?;
    w.settle().await?;
    assert_eq!(counted("ignored"), 1);
    // Labelled `other`: the sender names the event, so only events the vendor acts on become
    // label values.
    let text = runtime::telemetry::metrics_handle().render();
    let ignored = text
        .lines()
        .find(|l| l.starts_with("webhooks_total{") && l.contains("outcome=\"ignored\""))
        .unwrap_or_else(|| panic!("no ignored delivery counted:\n{text}"));
    assert!(ignored.contains("event=\"other\""), "{ignored}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("webhooks_total{") && l.contains("event=\"item\"")),
        "{text}"
    );
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
    assert_eq!(w.items(7).await?, vec![row(3, "large", 1)]);
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
    assert_eq!(w.items(7).await?, vec![row(1, "A's own", 1)]);
    assert_eq!(w.items(8).await?, vec![row(1, "B's own", 1)]);
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
    assert_eq!(w.items(7).await?, vec![row(1, "A's own", 1)]);
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
    assert_eq!(w.items(9).await?, vec![row(1, "gizmo", 1)]);
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
        w.items(7).await?.contains(&row(2, "after resume", 1)),
        "a delivery after the resume was not applied"
    );
    w.stop().await;
    Ok(())
}

/// Hints take turns: while hints hold every confirming read the replica allows (half its
/// workers), another workspace's hint is handed back on each delivery, a vendor-signed delivery
/// is applied meanwhile, and the hint is settled on its last delivery as unconfirmed with its
/// reason on that connection's activity, never kept dead. Hinting can neither hold every worker
/// nor fill the dead-message store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_that_never_gets_its_turn_is_settled_unconfirmed_not_dead() -> Result<()> {
    // Two webhook workers, as the consumer below runs: hints may hold one of them.
    let hints = Arc::new(Hints::new(Confirmations::for_workers("scripted", 2)));
    let (w, a, b) = World::start_with(Some(hints.clone())).await?;
    let claims_of = |t: Tenant, keyed: EndpointIds| Tenant {
        tenant: t.tenant,
        endpoint: keyed,
    };
    let a_claims = claims_of(a, w.endpoint_keyed(a.tenant, true).await?);
    let b_claims = claims_of(b, w.endpoint_keyed(b.tenant, true).await?);
    w.filtering(ACME).await?;
    w.filtering(GLOBEX).await?;

    // A's hint takes the one confirming read and holds it.
    w.deliver(
        a_claims,
        ACME,
        "item",
        item(7, 1, "claimed", 9),
        Stored::default(),
    )
    .await?;
    hints.began(1).await;
    w.deliver(
        b_claims,
        GLOBEX,
        "item",
        item(8, 1, "claimed", 9),
        Stored::default(),
    )
    .await?;
    // A's vendor-signed delivery finds the worker hints may not take while the read still
    // waits: without the replica's limit B's hint would have taken it and waited too.
    w.deliver(a, ACME, "item", item(7, 2, "signed", 1), Stored::default())
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while w.items(7).await? != vec![row(2, "signed", 1)] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's signed delivery waited behind hints"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let settled = loop {
        let found = w.activities("hint_unconfirmed").await?;
        if let Some(found) = found.into_iter().next() {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B's hint was never settled; dead: {:?}",
            w.dead().await?
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let reason = settled["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("1 confirming reads under way on every delivery"),
        "{settled}"
    );
    let on: Uuid = sqlx::query_scalar(
        "SELECT connection_id FROM connection_activity WHERE activity = 'hint_unconfirmed'",
    )
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(on, b.tenant.connection_id);
    assert_eq!(w.dead().await?, Vec::<String>::new());

    // A's read gets its answer; everything settles and no claim wrote a note.
    hints.gate.add_permits(1);
    w.settle().await?;
    assert_eq!(w.dead().await?, Vec::<String>::new());
    assert_eq!(w.items(7).await?, vec![row(2, "signed", 1)]);
    assert!(w.items(8).await?.is_empty());
    w.stop().await;
    Ok(())
}
