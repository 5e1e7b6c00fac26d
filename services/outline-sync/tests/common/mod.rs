//! One simulated Outline team with two collections, one workspace's Outline connection to it
//! with its subscription delivering to ingress's Outline endpoint, and outline-sync running:
//! real Postgres and JetStream, the simulator over HTTP.

#![allow(dead_code)]

use std::time::Duration;

use anyhow::Result;
use sqlx::PgPool;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use uuid::Uuid;
use vendor_sim::outline::{Model, OutlineSim};

/// A workspace's Outline connection, its endpoint and the subscription delivering to it.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    /// The subscription's id at Outline: the endpoint's `provider_ref`.
    pub subscription: String,
    /// Ingress's route for the endpoint (`/webhooks/outline/<token>`).
    pub route: String,
    /// The secret the subscription signs with (forgesync generated it: deliveries are facts).
    pub secret: String,
}

pub struct World {
    pub env: testkit::TestEnv,
    pub pool: PgPool,
    pub sim: OutlineSim,
    pub ingress: testkit::Running,
    pub service: testkit::Running,
    pub provider_instance_id: Uuid,
    /// Two collections of the team.
    pub collections: [String; 2],
    pub a: Tenant,
}

/// outline-sync's config for the test: no schedules, the simulator's API.
pub fn config(env: &testkit::TestEnv, sim: &OutlineSim) -> Result<outline_sync::Config> {
    let flags = vec![
        format!("--secret-key={}", testkit::secret_key()),
        format!("--outline-api-url={}", sim.base_url()),
        "--reconcile-cron=off".to_owned(),
        // Small pages: a few documents span several.
        "--page-size=5".to_owned(),
    ];
    testkit::config(env.common_args(), &flags)
}

/// A team with two collections on a simulator of its own.
pub async fn team() -> Result<(OutlineSim, [String; 2])> {
    let mut model = Model::new("acme");
    let collections = [
        model.add_collection("Engineering"),
        model.add_collection("Handbook"),
    ];
    Ok((OutlineSim::start(model).await?, collections))
}

impl World {
    pub async fn start() -> Result<World> {
        let env = testkit::TestEnv::new().await?;
        let pool = env.db.db.get_postgres_connection_pool().clone();
        let (sim, collections) = team().await?;
        let provider_instance_id = Uuid::now_v7();
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'outline')")
            .bind(provider_instance_id)
            .execute(&pool)
            .await?;
        let ingress = testkit::spawn(testkit::ingress_config(env.common_args())).await?;
        let a = tenant(&env, &ingress, &sim, provider_instance_id).await?;
        let service = testkit::spawn(config(&env, &sim)?).await?;
        Ok(World {
            env,
            pool,
            sim,
            ingress,
            service,
            provider_instance_id,
            collections,
            a,
        })
    }

    /// Waits until outline-sync has settled every delivery of the stream.
    pub async fn drained(&self) -> Result<()> {
        self.sim.settle().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let ns = self.env.bus.namespace();
        let stream = self
            .env
            .bus
            .jetstream()
            .get_stream(ns.name(bus::Stream::WebhooksOutline.name()))
            .await?;
        // Quiet three times in a row: nothing pending or in flight, and every stored delivery
        // published to the stream.
        let mut quiet = 0;
        while quiet < 3 {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "did not settle");
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut busy = match stream.consumer_info(ns.name("outline-sync-events")).await {
                Ok(info) => info.num_pending > 0 || info.num_ack_pending > 0,
                Err(_) => true,
            };
            // The events outline-sync records wait for its relay (not run yet): not counted.
            let unpublished: i64 =
                sqlx::query_scalar("SELECT count(*) FROM outbox WHERE subject NOT LIKE 'events.%'")
                    .fetch_one(&self.pool)
                    .await?;
            busy |= unpublished > 0;
            quiet = if busy { 0 } else { quiet + 1 };
        }
        Ok(())
    }

    /// `t`'s documents: `(outline_id, collection, parent, title, text, updated_at, deleted_at)`.
    pub async fn documents(&self, t: &Tenant) -> Result<Vec<Row>> {
        Ok(sqlx::query_as(
            "SELECT outline_id, collection_outline_id, parent_outline_id, title, text,
                    updated_at, deleted_at
               FROM outline_document WHERE connection_id = $1 ORDER BY outline_id",
        )
        .bind(t.connection_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// `t`'s document `outline_id`.
    pub async fn document(&self, t: &Tenant, outline_id: &str) -> Result<Option<Row>> {
        Ok(self
            .documents(t)
            .await?
            .into_iter()
            .find(|d| d.0 == outline_id))
    }

    /// `t`'s generic events: `(type, source_key)`, oldest first.
    pub async fn events(&self, t: &Tenant) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT type, source_key FROM integration_event WHERE connection_id = $1
              ORDER BY id",
        )
        .bind(t.connection_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many of `t`'s generic events are of `event_type`.
    pub async fn count(&self, t: &Tenant, event_type: &str) -> Result<usize> {
        Ok(self
            .events(t)
            .await?
            .iter()
            .filter(|(ty, _)| ty == event_type)
            .count())
    }

    /// The reasons of `t`'s refused deliveries.
    pub async fn refusals(&self, t: &Tenant) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT detail ->> 'reason' FROM connection_activity
              WHERE connection_id = $1 AND activity = 'outline_delivery_refused' ORDER BY id",
        )
        .bind(t.connection_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deliveries stored by ingress for `t`.
    pub async fn stored(&self, t: &Tenant) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM inbound_message WHERE connection_id = $1")
                .bind(t.connection_id)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Dead messages' reasons.
    pub async fn dead(&self) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT reason FROM dead_message ORDER BY created_at")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Posts `body` to `t`'s route, signed with its secret as Outline signs; the status.
    pub async fn post_signed(&self, t: &Tenant, body: &serde_json::Value) -> Result<u16> {
        let body = serde_json::to_vec(body)?;
        let headers = vendor_sim::outline::signed_headers(
            Some(t.secret.as_bytes()),
            vendor_sim::outline::unix_ms(),
            &body,
        );
        let answer = reqwest::Client::new()
            .post(&t.route)
            .headers(headers)
            .body(body)
            .send()
            .await?;
        Ok(answer.status().as_u16())
    }
}

/// A document row: `(outline_id, collection, parent, title, text, updated_at, deleted_at)`.
pub type Row = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<time::OffsetDateTime>,
    Option<time::OffsetDateTime>,
);

/// The API token of the harness's tenant connections.
pub const HARNESS_TOKEN: &str = "ol_api_harness";

/// A workspace with an Outline connection, the subscription `sim` delivers through to ingress,
/// and its registered endpoint bound to that subscription.
pub async fn tenant(
    env: &testkit::TestEnv,
    ingress: &testkit::Running,
    sim: &OutlineSim,
    provider_instance_id: Uuid,
) -> Result<Tenant> {
    let (workspace_id, connection_id) = testkit::active_connection(
        &env.db.db,
        "outline",
        provider_instance_id,
        serde_json::json!({}),
        Some(HARNESS_TOKEN),
    )
    .await?;
    let token = store::inbound::random_token()?;
    let secret = store::inbound::random_token()?;
    let route = format!("{}/webhooks/outline/{token}", ingress.url());
    let subscription = sim
        .model(|m| m.create_subscription("forgesync", &route, &["*".to_owned()], Some(&secret)))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .id;
    let keyring = Keyring::parse(&testkit::secret_key())?;
    // The connection's API token, as the simulator takes it.
    sim.model(|m| m.add_token(HARNESS_TOKEN));
    store::inbound::create_endpoint(
        &env.db.db,
        &keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Outline,
            registration: Registration::Registered,
            provider_ref: Some(subscription.clone()),
            address_token: Some(token),
            tenant_keyed: false,
        },
        secret.as_bytes(),
    )
    .await?;
    Ok(Tenant {
        workspace_id,
        connection_id,
        subscription,
        route,
        secret,
    })
}

/// Polls `probe` every 50 ms for up to 30 s until it yields a value.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(match last_error {
                Some(e) => e.context(what.to_owned()),
                None => anyhow::anyhow!("{what} within 30 s"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A workspace with an active Outline connection whose `token` secret is `token`, and no
/// endpoint or subscription yet: `(workspace_id, connection_id)`.
pub async fn unregistered_connection(
    env: &testkit::TestEnv,
    provider_instance_id: Uuid,
    token: &str,
) -> Result<(Uuid, Uuid)> {
    testkit::active_connection(
        &env.db.db,
        "outline",
        provider_instance_id,
        serde_json::json!({}),
        Some(token),
    )
    .await
}

/// outline-sync's activator against `sim`, its subscriptions delivering to `public_url`.
pub fn activator(
    env: &testkit::TestEnv,
    sim: &OutlineSim,
    public_url: Option<String>,
) -> Result<outline_sync::activation::Activator> {
    let factory = outline_sync::source::ClientFactory {
        db: env.db.db.clone(),
        secret_key: Keyring::parse(&testkit::secret_key())?,
        client: outline_client::Settings {
            base_url: sim.base_url().to_owned(),
            egress: vendor_http::egress::Egress::unrestricted(),
            ..outline_client::Settings::default()
        },
        calls_per_job: 10_000,
    };
    Ok(outline_sync::activation::Activator::new(
        factory, public_url, 10,
    ))
}

/// The connection's row as it stands now.
pub async fn connection(
    env: &testkit::TestEnv,
    connection_id: Uuid,
) -> Result<store::entity::connection::Model> {
    use sea_orm::EntityTrait as _;
    store::entity::connection::Entity::find_by_id(connection_id)
        .one(&env.db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("connection {connection_id} is gone"))
}

impl World {
    /// Runs a job of `job_type` for `t` now, as Sync now queues it, and waits for its end:
    /// `(status, error)`.
    pub async fn run_job(
        &self,
        t: &Tenant,
        job_type: store::entity::JobType,
    ) -> Result<(String, Option<String>)> {
        let conn = connection(&self.env, t.connection_id).await?;
        let txn = sea_orm::TransactionTrait::begin(&self.env.db.db).await?;
        let queued = store::jobs::queue(
            &txn,
            &conn,
            job_type,
            store::entity::JobTrigger::Manual,
            Some(format!("test:{}", Uuid::now_v7())),
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("the job was not queued"))?;
        txn.commit().await?;
        // outline-sync's own relay publishes the job's message.
        let job_id = queued.id;
        eventually("the job did not end", || async {
            Ok(sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT status, error FROM sync_job WHERE id = $1 AND finished_at IS NOT NULL",
            )
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?)
        })
        .await
    }

    /// `t`'s collections: `(outline_id, awaiting_clean_pass, last_outcome, deleted)`.
    pub async fn collections(
        &self,
        t: &Tenant,
    ) -> Result<Vec<(String, bool, Option<String>, bool)>> {
        Ok(sqlx::query_as(
            "SELECT outline_id, awaiting_clean_pass, last_outcome, deleted_at IS NOT NULL
               FROM outline_collection WHERE connection_id = $1 ORDER BY outline_id",
        )
        .bind(t.connection_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The Outline ids of `t`'s live documents.
    pub async fn live(&self, t: &Tenant) -> Result<std::collections::BTreeSet<String>> {
        Ok(self
            .documents(t)
            .await?
            .into_iter()
            .filter(|d| d.6.is_none())
            .map(|d| d.0)
            .collect())
    }
}
