//! Provider repair's capture, in the lifecycle transition's own transaction, on real Postgres:
//! a connection's vendor-side resources are fenced before its state changes; a disconnection
//! deletes its secrets but seals the removal credential into its repair reference; one tenant's
//! transition never fences another's resource.

use anyhow::Result;
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::{FenceStatus, Ownership};
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use serde_json::json;
use sqlx::PgPool;
use store::entity::connection;
use store::repair::{self, Decision};
use store::secrets::Keyring;
use uuid::Uuid;

const GROUP: &str = "7";

struct World {
    db: testkit::TestDb,
    pool: PgPool,
    instance: Uuid,
    ring: Keyring,
}

impl World {
    async fn new() -> Result<World> {
        let db = testkit::TestDb::new().await?;
        let pool = db.db.get_postgres_connection_pool().clone();
        let instance = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)",
        )
        .bind(instance)
        .bind(format!("https://gitlab-{instance}.example"))
        .execute(&pool)
        .await?;
        let ring = Keyring::parse(&testkit::secret_key())?;
        Ok(World {
            db,
            pool,
            instance,
            ring,
        })
    }

    /// An active GitLab connection with its token and an endpoint secret.
    async fn connection(&self, token: &str) -> Result<(Uuid, Uuid)> {
        let (ws, conn) = testkit::active_connection(
            &self.db.db,
            "gitlab",
            self.instance,
            json!({"group": GROUP}),
            Some(token),
        )
        .await?;
        store::secrets::put(&self.db.db, &self.ring, conn, "webhook/x/y", b"hook-secret").await?;
        Ok((ws, conn))
    }

    /// A registration of `conn` in `state` (with `vendor_id` when the vendor holds it).
    async fn registration(&self, conn: Uuid, state: &str, vendor_id: Option<&str>) -> Result<Uuid> {
        let id = Uuid::now_v7();
        let failure = (state == "failed").then_some("refused");
        sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version,
                 lifecycle_generation, state, vendor_id, failure)
             VALUES ($1, $2, $3, 'gitlab_group_hook', $4, $1::text, 'hash', 1, 0, $5, $6, $7)",
        )
        .bind(id)
        .bind(conn)
        .bind(self.instance)
        .bind(GROUP)
        .bind(state)
        .bind(vendor_id)
        .bind(failure)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    async fn transition(&self, conn: Uuid, transition: Transition) -> Result<()> {
        let txn = self.db.db.begin().await?;
        repair::lock_identities(&txn, &[conn]).await?;
        let row = connection::Entity::find_by_id(conn)
            .lock_exclusive()
            .one(&txn)
            .await?
            .expect("the connection exists");
        store::lifecycle::apply(&txn, row, transition, "test", "transition").await??;
        txn.commit().await?;
        Ok(())
    }

    async fn secrets(&self, conn: Uuid) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM connection_secret WHERE connection_id = $1")
                .bind(conn)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn fences(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM provider_resource_repair")
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

#[tokio::test]
async fn disconnect_captures_exactly_its_own_hooks_and_deletes_its_secrets() -> Result<()> {
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-a").await?;
    let (_, b) = w.connection("glpat-b").await?;
    let adopted = w.registration(a, "adopted", Some("11")).await?;
    let created = w.registration(a, "created", Some("12")).await?;
    w.registration(a, "failed", None).await?;
    // Attack: a second workspace's hook on the same group.
    w.registration(b, "adopted", Some("13")).await?;

    w.transition(a, Transition::Disconnect).await?;

    let fences = repair::of_connection(&w.pool, a).await?;
    let mut resources: Vec<&str> = fences.iter().map(|f| f.resource.as_str()).collect();
    resources.sort();
    assert_eq!(
        resources,
        ["gitlab_group_hook:11", "gitlab_group_hook:12"],
        "the adopted and the created hook, nothing the vendor refused"
    );
    for f in &fences {
        assert_eq!(f.fence.status(), FenceStatus::Pending);
        assert!(!f.fence.ever_dispatched(), "captured with its receipt");
        assert!(f.capture_receipt.is_some());
        assert!(f.next_attempt_at.is_some(), "due at once");
        assert_eq!(f.target, GROUP);
        assert_eq!(
            f.identity_hash,
            lifecycle_core::repair::identity_hash(&f.identity())
        );
        // The removal credential is the connection's token, sealed as it was.
        let sealed = repair::credential(&w.pool, f.id)
            .await?
            .expect("sealed into the reference");
        assert_eq!(sealed.connection_id(), a);
        assert_eq!(sealed.open(&w.ring)?, b"glpat-a");
    }
    let registrations: Vec<Uuid> = sqlx::query_scalar(
        "SELECT registration_id FROM connection_provider_repair
          WHERE connection_id = $1 ORDER BY registration_id",
    )
    .bind(a)
    .fetch_all(&w.pool)
    .await?;
    let mut expected = vec![adopted, created];
    expected.sort();
    assert_eq!(registrations, expected);
    // The other tenant's hook is not fenced, its secrets untouched.
    assert!(repair::of_connection(&w.pool, b).await?.is_empty());
    assert_eq!(w.fences().await?, 2);
    assert_eq!(w.secrets(b).await?, 2);
    // Every secret of the disconnected connection is gone, token and endpoint secret alike.
    assert_eq!(w.secrets(a).await?, 0);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM connection_audit
          WHERE connection_id = $1 AND action = 'provider_repair_captured'",
    )
    .bind(a)
    .fetch_one(&w.pool)
    .await?;
    assert_eq!(audited, 1);
    Ok(())
}

#[tokio::test]
async fn suspend_captures_hooks_but_keeps_secrets_and_disconnect_adds_no_second_fence() -> Result<()>
{
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-a").await?;
    w.registration(a, "adopted", Some("21")).await?;

    w.transition(a, Transition::Suspend).await?;
    let fences = repair::of_connection(&w.pool, a).await?;
    assert_eq!(fences.len(), 1);
    assert_eq!(fences[0].resource, "gitlab_group_hook:21");
    assert_eq!(w.secrets(a).await?, 2, "a suspension keeps the secrets");

    w.transition(a, Transition::Disconnect).await?;
    assert_eq!(w.fences().await?, 1, "the same identity is fenced once");
    assert_eq!(w.secrets(a).await?, 0);
    let sealed = repair::credential(&w.pool, fences[0].id)
        .await?
        .expect("kept");
    assert_eq!(sealed.open(&w.ring)?, b"glpat-a");
    Ok(())
}

#[tokio::test]
async fn a_settled_fence_is_never_recreated_and_its_credential_is_erased() -> Result<()> {
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-a").await?;
    w.registration(a, "adopted", Some("31")).await?;
    w.transition(a, Transition::Suspend).await?;
    let fence = repair::of_connection(&w.pool, a).await?.remove(0);

    // Nothing was ever dispatched: a whole listing without the hook resolves the fence.
    let decision = repair::decide(
        &w.pool,
        fence.id,
        fence.fence.inspect(),
        Ownership::VerifiedAbsent,
        "absent",
    )
    .await?;
    assert_eq!(decision, Decision::Wait(FenceStatus::Resolved));
    assert!(repair::credential(&w.pool, fence.id).await?.is_none());

    // Resumed and suspended again (a replayed teardown): the settled fence stays settled.
    w.transition(a, Transition::Resume).await?;
    w.transition(a, Transition::Suspend).await?;
    let again = repair::load(&w.pool, fence.id).await?.expect("kept");
    assert_eq!(again.fence.status(), FenceStatus::Resolved);
    assert_eq!(w.fences().await?, 1);
    assert!(repair::credential(&w.pool, fence.id).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn an_old_inspection_takes_no_permit_and_an_active_holder_blocks_removal() -> Result<()> {
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-a").await?;
    w.registration(a, "adopted", Some("41")).await?;
    w.transition(a, Transition::Suspend).await?;
    let fence = repair::of_connection(&w.pool, a).await?.remove(0);
    let inspection = fence.fence.inspect();

    let Decision::Dispatch(permit) =
        repair::decide(&w.pool, fence.id, inspection, Ownership::Ours, "ours").await?
    else {
        panic!("a suspended GitLab holder does not keep its hook");
    };
    // The same inspection again: the epoch moved on.
    assert_eq!(
        repair::decide(&w.pool, fence.id, inspection, Ownership::Ours, "ours").await?,
        Decision::Stale
    );
    let status = repair::record(
        &w.pool,
        fence.id,
        permit,
        lifecycle_core::repair::DispatchOutcome::Uncertain,
        "timeout",
    )
    .await?;
    assert_eq!(status, FenceStatus::Pending);

    // A holder whose current generation adopted the same hook is active: nothing is sent.
    let (_, b) = w.connection("glpat-b").await?;
    w.registration(b, "adopted", Some("41")).await?;
    sqlx::query("UPDATE connection SET version = 1, lifecycle_generation = 0 WHERE id = $1")
        .bind(b)
        .execute(&w.pool)
        .await?;
    let now = repair::load(&w.pool, fence.id).await?.expect("kept");
    assert_eq!(
        repair::decide(
            &w.pool,
            fence.id,
            now.fence.inspect(),
            Ownership::Ours,
            "ours"
        )
        .await?,
        Decision::Held
    );
    Ok(())
}

#[tokio::test]
async fn a_purge_captures_every_connection_of_the_workspace() -> Result<()> {
    let w = World::new().await?;
    let (ws, a) = w.connection("glpat-a").await?;
    w.registration(a, "adopted", Some("51")).await?;
    let (_, b) = w.connection("glpat-b").await?;
    w.registration(b, "adopted", Some("52")).await?;
    let txn = w.db.db.begin().await?;
    store::lifecycle::close_workspace(&txn, ws, "test").await?;
    txn.commit().await?;
    assert_eq!(repair::of_connection(&w.pool, a).await?.len(), 1);
    assert!(repair::of_connection(&w.pool, b).await?.is_empty());
    assert_eq!(w.secrets(a).await?, 0);
    assert_eq!(w.secrets(b).await?, 2);
    Ok(())
}

#[tokio::test]
async fn key_rotation_reseals_the_removal_credential_of_a_reference() -> Result<()> {
    use base64::Engine as _;
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-a").await?;
    w.registration(a, "adopted", Some("61")).await?;
    w.transition(a, Transition::Disconnect).await?;
    let fence = repair::of_connection(&w.pool, a).await?.remove(0);

    let newer = format!(
        "k1:{},k2:{}",
        testkit::secret_key(),
        base64::engine::general_purpose::STANDARD.encode([9u8; 32])
    );
    let ring = Keyring::parse(&newer)?;
    let report = store::secrets::reseal(&w.db.db, &ring, 10).await?;
    assert_eq!(report.resealed, 1, "{report:?}");
    assert_eq!(report.remaining, 0);
    // Only the newest key is needed now.
    let only_new = Keyring::parse(&format!(
        "k2:{}",
        base64::engine::general_purpose::STANDARD.encode([9u8; 32])
    ))?;
    let sealed = repair::credential(&w.pool, fence.id).await?.expect("kept");
    assert_eq!(sealed.open(&only_new)?, b"glpat-a");
    Ok(())
}

#[tokio::test]
async fn a_new_credential_wakes_a_repair_waiting_for_one() -> Result<()> {
    let w = World::new().await?;
    let (_, a) = w.connection("glpat-old").await?;
    w.registration(a, "adopted", Some("71")).await?;
    w.transition(a, Transition::Suspend).await?;
    let fence = repair::of_connection(&w.pool, a).await?.remove(0);
    let waiting = repair::decide(
        &w.pool,
        fence.id,
        fence.fence.inspect(),
        Ownership::CredentialRefused,
        "401",
    )
    .await?;
    assert_eq!(waiting, Decision::Wait(FenceStatus::NeedsAuthorization));
    let due_later = repair::load(&w.pool, fence.id).await?.expect("kept");
    assert!(due_later.next_attempt_at > Some(time::OffsetDateTime::now_utc()));

    let txn = w.db.db.begin().await?;
    store::secrets::put(&txn, &w.ring, a, "token", b"glpat-new").await?;
    assert_eq!(repair::credential_replaced(&txn, a, "token").await?, 1);
    txn.commit().await?;
    let woken = repair::load(&w.pool, fence.id).await?.expect("kept");
    assert_eq!(woken.fence.status(), FenceStatus::Pending);
    assert!(
        woken.next_attempt_at <= Some(time::OffsetDateTime::now_utc()),
        "due at once"
    );
    let sealed = repair::credential(&w.pool, fence.id).await?.expect("kept");
    assert_eq!(sealed.open(&w.ring)?, b"glpat-new");
    Ok(())
}
