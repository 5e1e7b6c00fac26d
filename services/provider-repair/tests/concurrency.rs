//! Lifecycle transitions, adoptions and two dispatcher replicas racing over a few resources
//! that several connections hold at once (as workspaces share a GitHub App installation or a
//! Slack bot): nothing deadlocks, no fenced identity is adopted, and no removal is sent while
//! an active or paused connection's current generation holds the resource.
//!
//! The resource is a kind declared by the test, with a remover that checks the holders the
//! moment it is called; a trigger records any adoption made while the identity is fenced, in
//! the adopting statement itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::{DispatchOutcome, Ownership};
use provider_repair::{Dispatcher, Inspected, Remover};
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use serde_json::json;
use sqlx::PgPool;
use store::entity::connection;
use store::registration::{self, NewRegistration, ResourceKind};
use store::repair::Repair;
use uuid::Uuid;

/// Declared here as a vendor would declare its kind.
const SHARED: ResourceKind = ResourceKind::new("shared_test_resource");
const CONNECTIONS: usize = 12;
const IDENTITIES: usize = 10;
const OPERATIONS: usize = 200;

/// A small deterministic generator; the seed is printed so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Removes by asking the database who holds the resource at the moment of the call: any
/// active or paused holder of the current generation is a removal under a holder.
struct CheckingRemover {
    pool: PgPool,
    violations: Arc<Mutex<Vec<String>>>,
    removed: Arc<Mutex<u64>>,
}

#[async_trait::async_trait]
impl Remover for CheckingRemover {
    fn kind(&self) -> ResourceKind {
        SHARED
    }

    async fn inspect(&self, _: &Repair, _: &[u8]) -> Inspected {
        Inspected {
            ownership: Ownership::Ours,
            detail: "ours".into(),
        }
    }

    async fn remove(&self, repair: &Repair, _: &[u8]) -> (DispatchOutcome, String) {
        let holders: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT c.id, c.status::text FROM provider_registration r
               JOIN connection c ON c.id = r.connection_id
              WHERE r.resource_kind = $1 AND r.vendor_id = $2 AND r.state = 'adopted'
                AND r.lifecycle_generation = c.lifecycle_generation
                AND c.status IN ('active', 'paused')",
        )
        .bind(&repair.resource_kind)
        .bind(&repair.vendor_id)
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        if !holders.is_empty() {
            self.violations.lock().unwrap().push(format!(
                "removal of {} sent while held by {holders:?}",
                repair.vendor_id
            ));
        }
        *self.removed.lock().unwrap() += 1;
        // Widen the window between the permit and the call's end.
        tokio::time::sleep(Duration::from_millis(3)).await;
        (DispatchOutcome::TerminalReceipt, "removed".into())
    }
}

/// Applies `t` as control-api does: identity locks, the row lock, the checked transition; run
/// again when its capture meets an identity lock it did not take first.
async fn transition(db: &sea_orm::DatabaseConnection, conn: Uuid, t: Transition) -> Result<()> {
    for _ in 0..20 {
        match transition_once(db, conn, t).await {
            Err(e) if store::repair::is_contended(&e) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return Ok(other?),
        }
    }
    anyhow::bail!("{t:?} of {conn} stayed contended")
}

async fn transition_once(
    db: &sea_orm::DatabaseConnection,
    conn: Uuid,
    t: Transition,
) -> Result<(), sea_orm::DbErr> {
    let txn = db.begin().await?;
    store::repair::lock_identities(&txn, &[conn]).await?;
    let row = connection::Entity::find_by_id(conn)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| sea_orm::DbErr::RecordNotFound("connection".into()))?;
    // An illegal transition writes nothing; the random walk simply moves on.
    let _ = store::lifecycle::apply(&txn, row, t, "race", t.event_name()).await?;
    txn.commit().await?;
    Ok(())
}

/// Requests a registration for the connection's current generation and resolves it as the
/// vendor's resource `vendor_id` (a create answering with a resource several connections hold).
async fn adopt(pool: &PgPool, conn: Uuid, instance: Uuid, vendor_id: &str) -> Result<()> {
    let (version, lifecycle): (i64, i64) =
        sqlx::query_as("SELECT version, lifecycle_generation FROM connection WHERE id = $1")
            .bind(conn)
            .fetch_one(pool)
            .await?;
    let marker = Uuid::now_v7().to_string();
    let mut tx = pool.begin().await?;
    let requested = registration::request(
        &mut tx,
        &NewRegistration {
            connection_id: conn,
            provider_instance_id: instance,
            kind: SHARED,
            // One target per resource: a connection asks for each resource once per generation.
            target: vendor_id,
            marker: &marker,
            url: "https://hooks.example/shared",
            generation: registration::generation(version, lifecycle),
            endpoint_id: None,
        },
    )
    .await?;
    tx.commit().await?;
    if let Some(reg) = requested {
        registration::resolve_created(pool, reg.id, vendor_id).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transitions_adoptions_and_two_replicas_keep_every_fence_rule() -> Result<()> {
    let env = testkit::TestEnv::new().await?;
    let db = env.db.db.clone();
    let pool = db.get_postgres_connection_pool().clone();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");

    // Any adoption while its identity is fenced, caught by the adopting statement itself.
    sqlx::raw_sql(
        "CREATE TABLE race_violation (detail text NOT NULL);
         CREATE FUNCTION race_fenced_adoption() RETURNS trigger AS $$
         BEGIN
           IF NEW.state = 'adopted' AND EXISTS (
                SELECT 1 FROM provider_resource_repair
                 WHERE resource = NEW.resource_kind || ':' || NEW.vendor_id) THEN
             INSERT INTO race_violation VALUES ('adopted fenced ' || NEW.vendor_id);
           END IF;
           RETURN NEW;
         END $$ LANGUAGE plpgsql;
         CREATE TRIGGER race_fenced_adoption BEFORE UPDATE ON provider_registration
           FOR EACH ROW EXECUTE FUNCTION race_fenced_adoption();",
    )
    .execute(&pool)
    .await?;

    let instance = Uuid::now_v7();
    sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, 'outline')")
        .bind(instance)
        .execute(&pool)
        .await?;
    let mut conns = Vec::new();
    for i in 0..CONNECTIONS {
        let (_, conn) = testkit::active_connection(
            &db,
            "outline",
            instance,
            json!({}),
            Some(&format!("token-{i}")),
        )
        .await?;
        conns.push(conn);
    }

    let violations = Arc::new(Mutex::new(Vec::new()));
    let removed = Arc::new(Mutex::new(0));
    let keyring = store::secrets::Keyring::parse(&testkit::secret_key())?;
    let replica = || Dispatcher {
        db: db.clone(),
        pool: pool.clone(),
        keyring: keyring.clone(),
        removers: vec![Arc::new(CheckingRemover {
            pool: pool.clone(),
            violations: violations.clone(),
            removed: removed.clone(),
        })],
        batch: 3,
        lease: time::Duration::seconds(30),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let dispatcher = replica();
        let stop = stop.clone();
        replicas.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                dispatcher.revisit().await.context("a replica's pass")?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            dispatcher.revisit().await?;
            anyhow::Ok(())
        }));
    }

    // Four workers share the operations: each a random transition or adoption.
    let transitions = [
        Transition::Suspend,
        Transition::Resume,
        Transition::Pause,
        Transition::Resume,
        Transition::Uninstall,
        Transition::Activate,
        Transition::Disconnect,
    ];
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let (db, pool, conns) = (db.clone(), pool.clone(), conns.clone());
        let mut rng = Rng(seed.wrapping_mul(w * 2 + 1) | 1);
        workers.push(tokio::spawn(async move {
            for _ in 0..OPERATIONS / 4 {
                let conn = conns[rng.below(conns.len())];
                if rng.below(2) == 0 {
                    // Disconnection is terminal: rarer than the rest.
                    let t = transitions[rng.below(transitions.len())];
                    if t == Transition::Disconnect && rng.below(4) != 0 {
                        continue;
                    }
                    transition(&db, conn, t)
                        .await
                        .with_context(|| format!("{t:?} of {conn}"))?;
                } else {
                    let vendor_id = format!("shared-{}", rng.below(IDENTITIES));
                    adopt(&pool, conn, instance, &vendor_id)
                        .await
                        .with_context(|| format!("adopting {vendor_id} for {conn}"))?;
                }
            }
            anyhow::Ok(())
        }));
    }
    let raced = tokio::time::timeout(Duration::from_secs(120), async {
        for w in workers {
            w.await??;
        }
        stop.cancel();
        for r in replicas {
            r.await??;
        }
        anyhow::Ok(())
    })
    .await;
    raced.context("the race did not finish in two minutes: a deadlock or a stall")??;

    assert_eq!(*violations.lock().unwrap(), Vec::<String>::new());
    let fenced: Vec<String> = sqlx::query_scalar("SELECT detail FROM race_violation")
        .fetch_all(&pool)
        .await?;
    assert_eq!(fenced, Vec::<String>::new());
    // The race did exercise both sides: fences were captured and removals sent.
    let fences: i64 = sqlx::query_scalar("SELECT count(*) FROM provider_resource_repair")
        .fetch_one(&pool)
        .await?;
    assert!(fences > 0, "no fence was captured (seed {seed})");
    println!("fences {fences}, removals sent {}", removed.lock().unwrap());
    Ok(())
}
