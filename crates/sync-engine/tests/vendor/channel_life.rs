//! The channel-shaped vendor ([`channel`]) through its whole life as a sync service, over real
//! Postgres and JetStream: activation (its subscription, whose id the vendor assigns, created
//! only after its consumer is confirmed; no history job), consent per channel, reconciles that
//! read forward to the engine's watermark and never before consent, live deliveries, a channel
//! the bot lost that pauses alone, consent withdrawn with the next delivery from that channel
//! erased (body, headers, stream copy), and a disconnect after which the erasure scan finds
//! none of its content. Another workspace's connection runs beside it throughout and keeps all
//! of its own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use bus::Stream;
use bus::consumer::ConsumerSpec;
use lifecycle_core::connection::Transition;
use lifecycle_core::erasure::ErasureTrigger;
use lifecycle_core::subject;
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use store::entity::{JobTrigger, JobType, connection};
use store::inbound::{Dedup, EndpointIds, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::subscription::Registrar;
use sync_engine::webhook::WebhookConsumer;
use sync_engine::webhook::follow::{self, Filters};
use sync_engine::{Engine, SyncJobs};
use testkit::TestEnv;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::channel::{self, Channels, KIND, Posted, TeamSource, message_event};
use crate::scripted::{self, Mirror, Tenant};

const NAME: &str = "channel-sync";
const WEBHOOKS: &str = "channel-sync-webhooks";

/// The channel vendor's service, as a test configures it.
struct ChannelSync {
    common: runtime::CommonArgs,
    source: TeamSource,
}

runtime::launch!(ChannelSync, "channel-sync", run);

fn vendor(
    db: &sea_orm::DatabaseConnection,
    bus: &bus::Bus,
    source: TeamSource,
) -> Result<Channels> {
    let pool = db.get_postgres_connection_pool().clone();
    Ok(Channels {
        pool: pool.clone(),
        bus: bus.clone(),
        source,
        registrar: Registrar {
            db: db.clone(),
            pool,
            keyring: Arc::new(Keyring::parse(&testkit::secret_key())?),
        },
        consumer: ConsumerSpec {
            ack_wait: Duration::from_secs(10),
            backoff: vec![Duration::from_millis(100)],
            ..ConsumerSpec::new(Stream::WebhooksSlack, WEBHOOKS)
        },
        public_url: "https://forgesync.example".into(),
    })
}

/// A sync service's whole wiring, as a real vendor's `run` has it.
async fn run(
    config: ChannelSync,
    shutdown: CancellationToken,
    on_listen: impl FnOnce(SocketAddr) + Send,
) -> Result<()> {
    let db = config.common.connect_db().await?;
    let bus = config.common.connect_bus().await?;
    let pool = db.get_postgres_connection_pool().clone();
    let vendor = vendor(&db, &bus, config.source)?;
    let engine = Engine::new(
        Arc::new(vendor.clone()),
        pool.clone(),
        "replica-a",
        Duration::from_secs(30),
        sync_engine::SyncSettings {
            // Small pages, so that reading to the watermark is seen to read less.
            page_size: 2,
            ..scripted::settings()
        },
    );
    let mut service = runtime::Service::new(NAME, &config.common, &shutdown);
    let mut schedules = runtime::ScheduleRunner::new(db.clone(), "replica-a");
    SyncJobs {
        service: NAME,
        engine,
        concurrency: 2,
        schedules: &[],
    }
    .register(&mut service, &mut schedules, &bus, &db)?;
    let webhooks = Arc::new(WebhookConsumer::new(pool, vendor.clone()));
    service.task("webhook consumer", {
        let (bus, db) = (bus.clone(), db.clone());
        let spec = vendor.consumer.clone();
        let filters = Filters {
            monitors: vendor,
            excluded: Vec::new(),
            cap: follow::DEFAULT_MAX_FILTERS,
        };
        move |stop| {
            follow::run(
                bus,
                db,
                spec,
                webhooks,
                filters,
                Duration::from_millis(100),
                stop,
            )
        }
    });
    service.schedules(schedules);
    service.relay(&db, &bus);
    service
        .serve(&db, Some(bus.client().clone()), on_listen)
        .await
}

/// A workspace's connection and its team.
#[derive(Clone, Copy)]
struct Team {
    tenant: Tenant,
    name: &'static str,
}

struct World {
    env: TestEnv,
    mirror: Mirror,
    source: TeamSource,
    /// The vendor's own operations (grant, withdraw), as its API would call them.
    vendor: Channels,
}

impl std::ops::Deref for World {
    type Target = Mirror;

    fn deref(&self) -> &Mirror {
        &self.mirror
    }
}

impl World {
    async fn new() -> Result<World> {
        runtime::install_crypto_provider();
        let env = TestEnv::new().await?;
        let mirror = Mirror::new(&env.db.db, KIND).await?;
        sqlx::raw_sql(channel::TABLES).execute(&mirror.pool).await?;
        let source = TeamSource::default();
        let vendor = vendor(&env.db.db, &env.bus, source.clone())?;
        Ok(World {
            env,
            mirror,
            source,
            vendor,
        })
    }

    /// A pending connection of a new workspace, to team `name`.
    async fn team(&self, name: &'static str) -> Result<Team> {
        let tenant = self.mirror.tenant(KIND, "pending").await?;
        sqlx::query(
            "INSERT INTO chan_team (connection_id, workspace_id, team) VALUES ($1, $2, $3)",
        )
        .bind(tenant.connection_id)
        .bind(tenant.workspace_id)
        .bind(name)
        .execute(&self.pool)
        .await?;
        Ok(Team { tenant, name })
    }

    async fn connection(&self, team: Team) -> Result<connection::Model> {
        connection::Entity::find_by_id(team.tenant.connection_id)
            .one(&self.db)
            .await?
            .context("the connection")
    }

    /// Applies a lifecycle transition as control-api does (the row and its message together).
    async fn transition(&self, team: Team, transition: Transition) -> Result<()> {
        let txn = self.db.begin().await?;
        let row = connection::Entity::find_by_id(team.tenant.connection_id)
            .lock_exclusive()
            .one(&txn)
            .await?
            .context("the connection")?;
        store::lifecycle::apply(&txn, row, transition, "test", "lifecycle")
            .await?
            .context("the transition applies")?;
        txn.commit().await?;
        Ok(())
    }

    /// The endpoint the connection's subscription delivers to, once its registration exists.
    async fn endpoint(&self, team: Team) -> Result<EndpointIds> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let endpoint: Option<Uuid> = sqlx::query_scalar(
                "SELECT endpoint_id FROM provider_registration
                  WHERE connection_id = $1 AND state = 'adopted'",
            )
            .bind(team.tenant.connection_id)
            .fetch_optional(&self.pool)
            .await?
            .flatten();
            if let Some(endpoint_id) = endpoint {
                return Ok(EndpointIds {
                    endpoint_id,
                    workspace_id: team.tenant.workspace_id,
                    connection_id: team.tenant.connection_id,
                    kind: KIND,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                let why: Vec<(String, Option<String>)> = sqlx::query_as(
                    "SELECT c.status::text, t.subscription_missing FROM chan_team t
                       JOIN connection c ON c.id = t.connection_id WHERE t.connection_id = $1",
                )
                .bind(team.tenant.connection_id)
                .fetch_all(&self.pool)
                .await?;
                let dead: Vec<String> = sqlx::query_scalar("SELECT reason FROM dead_message")
                    .fetch_all(&self.pool)
                    .await?;
                panic!(
                    "the subscription of {} was never adopted: {why:?}, dead: {dead:?}",
                    team.name
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stores a `message` delivery as ingress does, routed to the channel's subject.
    async fn deliver(&self, team: Team, channel: &str, m: &Posted) -> Result<Uuid> {
        let endpoint = self.endpoint(team).await?;
        let txn = self.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint,
                verification: "signature".into(),
                headers: BTreeMap::from([("x-test-channel".to_owned(), channel.to_owned())]),
                body: message_event(channel, m),
                event: "message".into(),
                subject: subject::slack(team.name, Some(channel), "message")?,
                dedup: Dedup::Keys {
                    event_id: Some(Uuid::now_v7().to_string()),
                    digest_window: Duration::from_secs(3600),
                    verified_by: None,
                },
                retention: Duration::from_secs(24 * 3600),
                inline_body_max: usize::MAX,
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        txn.commit().await?;
        let Recorded::Accepted(accepted) = recorded else {
            panic!("the delivery was not stored: {recorded:?}");
        };
        Ok(accepted.message_id)
    }

    /// Waits until everything stored is published and the webhook consumer settled it.
    async fn settle(&self) -> Result<()> {
        scripted::settle(&self.env.bus, &self.pool, Stream::WebhooksSlack, WEBHOOKS).await
    }

    /// Runs a RECONCILIATION of the team's connection through the bus, to its end.
    async fn reconcile(&self, team: Team) -> Result<(String, Option<String>)> {
        let conn = self.connection(team).await?;
        let txn = self.db.begin().await?;
        let job = store::jobs::queue(
            &txn,
            &conn,
            JobType::Reconciliation,
            JobTrigger::Manual,
            None,
        )
        .await?
        .context("queued")?;
        txn.commit().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, error): (String, Option<String>) =
                sqlx::query_as("SELECT status, error FROM sync_job WHERE id = $1")
                    .bind(job.id)
                    .fetch_one(&self.pool)
                    .await?;
            if matches!(status.as_str(), "succeeded" | "failed" | "canceled") {
                return Ok((status, error));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the job did not end"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The kept messages of a team's channel: (id, text), by id.
    async fn messages(&self, team: Team, channel: &str) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT m.native_id, m.text FROM chan_message m
               JOIN chan_channel c ON c.id = m.channel_id
              WHERE m.connection_id = $1 AND c.native_id = $2 ORDER BY m.native_id",
        )
        .bind(team.tenant.connection_id)
        .bind(channel)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn channel_state(&self, team: Team, channel: &str) -> Result<(String, Option<String>)> {
        Ok(sqlx::query_as(
            "SELECT state, reason FROM chan_channel WHERE connection_id = $1 AND native_id = $2",
        )
        .bind(team.tenant.connection_id)
        .bind(channel)
        .fetch_one(&self.pool)
        .await?)
    }

    fn reads(&self, channel: &str) -> usize {
        self.source
            .with(|t| t.reads.get(channel).copied().unwrap_or_default())
    }
}

fn ids(messages: &[(String, String)]) -> Vec<&str> {
    messages.iter().map(|(id, _)| id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_vendor_lives_its_whole_life_by_declaration() -> Result<()> {
    let w = World::new().await?;
    let service = testkit::spawn(ChannelSync {
        common: w.env.common_args(),
        source: w.source.clone(),
    })
    .await?;
    let (a, b) = (w.team("T0ACME").await?, w.team("T0GLOBEX").await?);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // History from before anyone was told: never kept.
    let before = w
        .source
        .post("general", "m0-before", now - 600, "said before consent");

    // Activation: the subscription, created only once the consumer takes the team's subjects,
    // under the id the vendor assigned; no job runs, since there is no history to read.
    w.transition(a, Transition::Activate).await?;
    w.transition(b, Transition::Activate).await?;
    w.endpoint(a).await?;
    w.endpoint(b).await?;
    let adopted: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT resource_kind, vendor_id FROM provider_registration
          WHERE state = 'adopted' ORDER BY connection_id",
    )
    .fetch_all(&w.pool)
    .await?;
    let created = w.source.with(|t| t.subscriptions.clone());
    assert_eq!(adopted.len(), 2);
    for (kind, vendor_id) in &adopted {
        assert_eq!(kind, channel::SUBSCRIPTION.as_str());
        assert!(created.iter().any(|(id, _)| Some(id) == vendor_id.as_ref()));
    }
    scripted::settle(
        &w.env.bus,
        &w.pool,
        Stream::Lifecycle,
        &format!("{NAME}-lifecycle"),
    )
    .await?;
    assert_eq!(
        w.count("SELECT count(*) FROM sync_job").await?,
        0,
        "an activation queues no job"
    );

    // Consent: each channel is kept from its announcement on.
    let (conn_a, conn_b) = (w.connection(a).await?, w.connection(b).await?);
    w.vendor.grant(&conn_a, "general").await?;
    w.vendor.grant(&conn_a, "random").await?;
    w.vendor.grant(&conn_b, "general").await?;
    for n in 1..=4 {
        w.source.post(
            "general",
            &format!("m{n}"),
            now + n * 10,
            &format!("hello {n}"),
        );
    }
    w.source.post("random", "r1", now + 5, "random 1");

    let (status, error) = w.reconcile(a).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    let general = w.messages(a, "general").await?;
    assert_eq!(
        ids(&general)[1..],
        ["m1", "m2", "m3", "m4"],
        "the announcement, then what followed it"
    );
    assert!(ids(&general)[0].starts_with("announce-general"));
    assert!(!ids(&general).contains(&before.id.as_str()));
    assert_eq!(ids(&w.messages(a, "random").await?)[1..], ["r1"]);

    // Replay by watermark: the next reconcile reads only down to what the last one read.
    w.source.post("general", "m5", now + 50, "hello 5");
    let reads = w.reads("general");
    let (status, error) = w.reconcile(a).await?;
    assert_eq!(status, "succeeded", "{error:?}");
    assert_eq!(
        w.reads("general") - reads,
        1,
        "one page reaches the watermark"
    );
    assert!(ids(&w.messages(a, "general").await?).contains(&"m5"));

    // Live deliveries: a new message, an edit, and an older copy that changes nothing.
    let live = Posted {
        id: "m6".into(),
        ts: now + 60,
        text: "live".into(),
        version: 1,
    };
    w.deliver(a, "general", &live).await?;
    let edited = Posted {
        text: "live, edited".into(),
        version: 2,
        ..live.clone()
    };
    w.deliver(a, "general", &edited).await?;
    w.settle().await?;
    // A stale copy (an earlier version, late): nothing changes.
    let stale = Posted {
        text: "live, stale copy".into(),
        ..live.clone()
    };
    w.deliver(a, "general", &stale).await?;
    w.settle().await?;
    let general = w.messages(a, "general").await?;
    assert!(general.contains(&("m6".into(), "live, edited".into())));

    // A delivery naming B's channel on A's endpoint writes nothing of B's.
    let b_general = w.messages(b, "general").await?;
    w.deliver(
        a,
        "general-of-b",
        &Posted {
            id: "forged".into(),
            ts: now + 70,
            text: "forged".into(),
            version: 9,
        },
    )
    .await?;
    w.settle().await?;
    assert_eq!(w.messages(b, "general").await?, b_general);

    // The bot is removed from one channel: that channel pauses with the reason; the other is
    // read, and the connection's credentials stand.
    w.source.with(|t| t.removed.push("random".into()));
    w.source.post("general", "m7", now + 80, "hello 7");
    let (status, error) = w.reconcile(a).await?;
    assert_eq!(
        status, "succeeded",
        "a lost channel fails nothing else: {error:?}"
    );
    let (state, reason) = w.channel_state(a, "random").await?;
    assert_eq!(state, "PAUSED");
    assert!(reason.unwrap_or_default().contains("not_in_channel"));
    assert!(ids(&w.messages(a, "general").await?).contains(&"m7"));
    let refused: Option<time::OffsetDateTime> =
        sqlx::query_scalar("SELECT credentials_refused_at FROM connection WHERE id = $1")
            .bind(a.tenant.connection_id)
            .fetch_one(&w.pool)
            .await?;
    assert_eq!(refused, None);

    // Consent withdrawn: what was kept of the channel goes, and the next delivery from it is
    // erased as it arrives: its body, its headers and its copy in the stream.
    w.vendor.withdraw(&conn_a, "general").await?;
    assert!(w.messages(a, "general").await?.is_empty());
    let copies = (stream_copies(&w, a).await?, stream_copies(&w, b).await?);
    let kept_b = w
        .deliver(
            b,
            "general",
            &Posted {
                id: "b1".into(),
                ts: now + 90,
                text: "B's own".into(),
                version: 1,
            },
        )
        .await?;
    let unconsented = w
        .deliver(
            a,
            "general",
            &Posted {
                id: "m8".into(),
                ts: now + 100,
                text: "after withdrawal".into(),
                version: 1,
            },
        )
        .await?;
    w.settle().await?;
    assert!(w.messages(a, "general").await?.is_empty());
    assert!(!body_stored(&w, unconsented).await?, "its body is gone");
    assert_eq!(
        stream_copies(&w, a).await?,
        copies.0,
        "its copy left the stream"
    );
    assert!(body_stored(&w, kept_b).await?);
    assert_eq!(stream_copies(&w, b).await?, copies.1 + 1, "B's stays");
    assert!(ids(&w.messages(b, "general").await?).contains(&"b1"));

    // Disconnect: the eraser, given this vendor's declaration beside the real ones, leaves
    // nothing of A's content where the scan looks; B keeps everything.
    w.transition(a, Transition::Disconnect).await?;
    let holders: &'static [&'static store::erasure::Erasable] = Box::leak(
        vendors::collect(&[vendors::VENDORS, &[&channel::DECLARATION]].concat()).into_boxed_slice(),
    );
    let eraser = eraser::Eraser {
        db: w.db.clone(),
        bus: w.env.bus.clone(),
        holders,
    };
    eraser
        .erase_connection(a.tenant.connection_id, ErasureTrigger::AdminDisconnect)
        .await?;
    let scan = vendors::scan::scan(&w.db, &w.env.bus, holders, a.tenant.workspace_id).await?;
    let left: Vec<_> = scan.remaining().collect();
    assert!(
        left.is_empty(),
        "content left after the disconnect: {left:?}"
    );
    assert!(
        scan.places.iter().any(|p| p.place.contains("chan_message")),
        "the scan looked at the vendor's own table"
    );
    assert!(ids(&w.messages(b, "general").await?).contains(&"b1"));
    service.stop().await?;
    Ok(())
}

/// Whether a delivery's raw body is still stored.
async fn body_stored(w: &World, message_id: Uuid) -> Result<bool> {
    let body: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbound_message_body WHERE message_id = $1")
            .bind(message_id)
            .fetch_one(&w.pool)
            .await?;
    Ok(body > 0)
}

/// How many deliveries to `team`'s `#general` the stream holds.
async fn stream_copies(w: &World, team: Team) -> Result<usize> {
    let copies = testkit::read_stream(
        &w.env.bus,
        Stream::WebhooksSlack,
        &subject::slack(team.name, Some("general"), "message")?,
        0,
        Duration::from_millis(200),
    )
    .await?;
    Ok(copies.len())
}
