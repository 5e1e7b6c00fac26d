//! provider-repair against the GitLab simulator over HTTP, with real Postgres and JetStream: a
//! disconnection's group hook is removed and its fence resolved; another workspace's hook on
//! the same group survives; a refused credential waits for a new one; a DELETE that landed but
//! timed out is never settled by the absence a retry sees.

use std::time::Duration;

use anyhow::{Context as _, Result};
use gitlab_client::{ClientConfig, GitlabClient, NewGroupHook};
use lifecycle_core::connection::Transition;
use lifecycle_core::repair::FenceStatus;
use sea_orm::{EntityTrait, QuerySelect, TransactionTrait};
use serde_json::json;
use store::entity::connection;
use store::repair::Repair;
use uuid::Uuid;
use vendor_sim::gitlab::{Fault, GitlabFault, GitlabSim, Model, ops};

const TOKEN: &str = "glpat-provider-repair";

struct Stack {
    env: testkit::TestEnv,
    sim: GitlabSim,
    group: u64,
    instance: Uuid,
    service: Option<testkit::Running>,
}

impl Stack {
    async fn start() -> Result<Stack> {
        Stack::start_with("* * * * * *").await
    }

    /// With the revisiting schedule on `cron` (`off`: only lifecycle messages wake it).
    async fn start_with(cron: &str) -> Result<Stack> {
        let mut s = Stack::bare().await?;
        s.service = Some(s.spawn_service(cron).await?);
        Ok(s)
    }

    /// provider-repair in this process, with the revisiting schedule on `cron`.
    async fn spawn_service(&self, cron: &str) -> Result<testkit::Running> {
        let config: provider_repair::Config = testkit::config(
            self.env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                format!("--provider-repair-cron={cron}"),
                "--provider-repair-request-timeout=1".to_owned(),
            ],
        )?;
        testkit::spawn(config).await
    }

    /// The simulator and the database, without provider-repair running.
    async fn bare() -> Result<Stack> {
        let mut model = Model::default();
        model.add_token(TOKEN);
        let group = model.add_group(None, "acme");
        let sim = GitlabSim::start(model).await?;
        let env = testkit::TestEnv::new().await?;
        let instance = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)",
        )
        .bind(instance)
        .bind(sim.base_url())
        .execute(env.db.db.get_postgres_connection_pool())
        .await?;
        Ok(Stack {
            env,
            sim,
            group,
            instance,
            service: None,
        })
    }

    /// The provider-repair binary as its own process (killed with SIGKILL on drop), its vendor
    /// calls allowed a minute.
    fn spawn_binary(&self) -> Result<Killed> {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_provider-repair"))
            .env_clear()
            .env("DATABASE_URL", &self.env.db.url)
            .env("NATS_URL", &self.env.nats_url)
            .env(
                "FORGESYNC_NATS_PREFIX",
                self.env.bus.namespace().prefix().unwrap_or_default(),
            )
            .env("FORGESYNC_LISTEN", "127.0.0.1:0")
            .env("FORGESYNC_EGRESS_ALLOW", testkit::LOCAL_EGRESS)
            .env("FORGESYNC_SECRET_KEY", testkit::secret_key())
            .env("FORGESYNC_PROVIDER_REPAIR_CRON", "* * * * * *")
            .env("FORGESYNC_PROVIDER_REPAIR_REQUEST_TIMEOUT", "60")
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("spawning the provider-repair binary")?;
        Ok(Killed(Some(child)))
    }

    fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    fn client(&self) -> Result<GitlabClient> {
        let config =
            ClientConfig::new(self.sim.base_url()).with_egress(self.env.common_args().egress);
        Ok(GitlabClient::new(&config, TOKEN)?)
    }

    /// An active GitLab connection whose token is `token`, holding a group hook it registered
    /// (created at the simulator, adopted by its current generation): (connection, hook id).
    async fn hooked_connection(&self, token: &str) -> Result<(Uuid, u64)> {
        let (conn, hook, _) = self.hook(token, "adopted").await?;
        Ok((conn, hook))
    }

    /// A connection with a hook at the simulator and its registration in `state` (`requested`:
    /// the create's answer not recorded yet): (connection, hook id, registration id).
    async fn hook(&self, token: &str, state: &str) -> Result<(Uuid, u64, Uuid)> {
        let (_, conn) = testkit::active_connection(
            &self.env.db.db,
            "gitlab",
            self.instance,
            json!({"group": "acme"}),
            Some(token),
        )
        .await?;
        let marker = Uuid::now_v7().to_string();
        let url = format!("https://hooks.example/webhooks/gitlab/connections/{conn}/k1/{marker}");
        let hook = self
            .client()?
            .create_group_hook(
                self.group,
                &NewGroupHook {
                    url: url.clone(),
                    token: "route-credential".into(),
                    issues_events: true,
                    merge_requests_events: true,
                    note_events: true,
                    pipeline_events: true,
                    project_events: true,
                    subgroup_events: true,
                    member_events: true,
                    push_events: true,
                    enable_ssl_verification: true,
                },
            )
            .await?;
        let registration = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO provider_registration (id, connection_id, provider_instance_id,
                 resource_kind, target, marker, url_hash, connection_version,
                 lifecycle_generation, state, vendor_id)
             SELECT $1, c.id, $3, 'gitlab_group_hook', $4, $5, $6, c.version,
                    c.lifecycle_generation, $8, CASE WHEN $8 = 'requested' THEN NULL ELSE $7 END
               FROM connection c WHERE c.id = $2",
        )
        .bind(registration)
        .bind(conn)
        .bind(self.instance)
        .bind(self.group.to_string())
        .bind(&marker)
        .bind(store::inbound::sha256_hex(url.as_bytes()))
        .bind(hook.id.to_string())
        .bind(state)
        .execute(self.pool())
        .await?;
        Ok((conn, hook.id, registration))
    }

    async fn transition(&self, conn: Uuid, transition: Transition) -> Result<()> {
        let txn = self.env.db.db.begin().await?;
        store::repair::lock_identities(&txn, &[conn]).await?;
        let row = connection::Entity::find_by_id(conn)
            .lock_exclusive()
            .one(&txn)
            .await?
            .context("the connection exists")?;
        store::lifecycle::apply(&txn, row, transition, "test", "transition").await??;
        txn.commit().await?;
        Ok(())
    }

    /// The hook ids `GET /api/v4/groups/{id}/hooks` lists.
    async fn listed_hooks(&self) -> Result<Vec<u64>> {
        let page = self.client()?.group_hooks_page(self.group, 1, 100).await?;
        Ok(page.hooks.iter().map(|h| h.id).collect())
    }

    /// The connection's one fence once `done` holds for it (within 20 s).
    async fn fence_when(&self, conn: Uuid, done: impl Fn(&Repair) -> bool) -> Result<Repair> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let fences = store::repair::of_connection(self.pool(), conn).await?;
            if let [fence] = fences.as_slice()
                && done(fence)
            {
                return Ok(fence.clone());
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("the fence never got there: {fences:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn stop(mut self) -> Result<()> {
        if let Some(service) = self.service.take() {
            service.stop().await?;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_removes_its_hook_and_spares_another_workspaces_hook() -> Result<()> {
    let s = Stack::start().await?;
    let (a, hook_a) = s.hooked_connection(TOKEN).await?;
    // Attack: a second workspace holds a hook on the same group.
    let (_, hook_b) = s.hooked_connection(TOKEN).await?;
    assert_eq!(s.listed_hooks().await?, vec![hook_a, hook_b]);

    s.transition(a, Transition::Disconnect).await?;
    let fence = s
        .fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
        .await?;
    assert_eq!(fence.resource, format!("gitlab_group_hook:{hook_a}"));
    assert_eq!(
        s.listed_hooks().await?,
        vec![hook_b],
        "only its own hook is gone"
    );
    // The proven removal marks its registration removed; the other stays adopted.
    let states: Vec<(String, String)> = sqlx::query_as(
        "SELECT vendor_id, state FROM provider_registration ORDER BY vendor_id::bigint",
    )
    .fetch_all(s.pool())
    .await?;
    assert_eq!(
        states,
        vec![
            (hook_a.to_string(), "removed".to_owned()),
            (hook_b.to_string(), "adopted".to_owned())
        ]
    );
    // Nothing of the credential is left: not as a secret, not in the reference.
    let secrets: i64 =
        sqlx::query_scalar("SELECT count(*) FROM connection_secret WHERE connection_id = $1")
            .bind(a)
            .fetch_one(s.pool())
            .await?;
    assert_eq!(secrets, 0);
    assert!(
        store::repair::credential(s.pool(), fence.id)
            .await?
            .is_none()
    );
    s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_credential_needs_authorization_and_removes_nothing() -> Result<()> {
    let s = Stack::start().await?;
    // The connection's token is one GitLab no longer accepts (401).
    let (a, hook) = s.hooked_connection("glpat-revoked").await?;
    s.transition(a, Transition::Suspend).await?;
    let fence = s
        .fence_when(a, |f| f.fence.status() == FenceStatus::NeedsAuthorization)
        .await?;
    assert!(!fence.fence.ever_dispatched());
    assert!(
        fence.next_attempt_at.is_some(),
        "it keeps retrying, backing off"
    );
    assert_eq!(s.listed_hooks().await?, vec![hook]);
    s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_landed_but_timed_out_awaits_an_admin() -> Result<()> {
    let s = Stack::start().await?;
    let (a, _) = s.hooked_connection(TOKEN).await?;
    // GitLab deletes the hook, then answers after the client gave up.
    s.sim.inject(Fault::always(
        ops::DELETE_GROUP_HOOK,
        GitlabFault::AnswerLate(Duration::from_secs(3)),
    ));
    s.transition(a, Transition::Disconnect).await?;
    let fence = s
        .fence_when(a, |f| {
            f.fence.ever_dispatched()
                && f.last_outcome.as_deref().is_some_and(|o| o != "dispatched")
        })
        .await?;
    assert_eq!(fence.fence.status(), FenceStatus::Pending, "{fence:?}");
    assert!(s.listed_hooks().await?.is_empty(), "the DELETE landed");
    // The backoff passes: the retry's whole listing shows no hook, which proves nothing.
    sqlx::query("UPDATE provider_resource_repair SET next_attempt_at = now() WHERE id = $1")
        .bind(fence.id)
        .execute(s.pool())
        .await?;
    let fence = s
        .fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
        .await?;
    assert_eq!(fence.next_attempt_at, None, "automatic polling stopped");
    assert_eq!(fence.fence.uncertain().collect::<Vec<_>>(), vec![0]);
    s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_that_resolves_after_suspension_is_removed() -> Result<()> {
    let s = Stack::start().await?;
    // The create was sent; its answer arrives only after the connection was suspended.
    let (a, hook, registration) = s.hook(TOKEN, "requested").await?;
    s.transition(a, Transition::Suspend).await?;
    assert!(store::repair::of_connection(s.pool(), a).await?.is_empty());
    let resolved =
        store::registration::resolve_created(s.pool(), registration, &hook.to_string()).await?;
    assert!(
        matches!(resolved, store::registration::Resolved::RemovalTarget(_)),
        "{resolved:?}"
    );
    let fence = s
        .fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
        .await?;
    assert_eq!(fence.resource, format!("gitlab_group_hook:{hook}"));
    assert!(s.listed_hooks().await?.is_empty());
    s.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_message_wakes_the_dispatcher() -> Result<()> {
    let s = Stack::start_with("off").await?;
    let (a, _) = s.hooked_connection(TOKEN).await?;
    s.transition(a, Transition::Disconnect).await?;
    // The outbox row the transition wrote, published as control-api's relay would.
    let relay = bus::relay::Relay::new(
        s.env.db.db.clone(),
        s.env.bus.clone(),
        bus::relay::RelayConfig::default(),
    );
    assert!(relay.publish_batch().await? >= 1);
    s.fence_when(a, |f| f.fence.status() == FenceStatus::Resolved)
        .await?;
    assert!(s.listed_hooks().await?.is_empty());
    s.stop().await
}

/// A child process, SIGKILLed and reaped when it is killed or dropped.
struct Killed(Option<std::process::Child>);

impl Killed {
    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// provider-repair killed (SIGKILL) after its permit: once while its DELETE is still held at
/// GitLab, once after GitLab deleted the hook but before it answered. Either way the attempt
/// counted as sent from the permit on, so the replica that takes over never settles the fence by
/// what it finds: it awaits an admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_killed_after_its_permit_leaves_the_fence_to_an_admin() -> Result<()> {
    for (fault, deleted) in [
        (GitlabFault::Delay(Duration::from_secs(30)), false),
        (GitlabFault::AnswerLate(Duration::from_secs(30)), true),
    ] {
        let mut s = Stack::bare().await?;
        let (a, _) = s.hooked_connection(TOKEN).await?;
        s.sim
            .inject(Fault::always(ops::DELETE_GROUP_HOOK, fault.clone()));
        let mut child = s.spawn_binary()?;
        s.transition(a, Transition::Disconnect).await?;
        // The DELETE reached GitLab (and, answered late, was carried out).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while s.sim.calls(ops::DELETE_GROUP_HOOK) == 0
            || (deleted && !s.listed_hooks().await?.is_empty())
        {
            anyhow::ensure!(!child.exited(), "provider-repair exited ({fault:?})");
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the DELETE never reached GitLab ({fault:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        child.kill();
        let fence = store::repair::of_connection(s.pool(), a).await?;
        assert_eq!(fence.len(), 1);
        assert_eq!(
            fence[0].last_outcome.as_deref(),
            Some("dispatched"),
            "killed between the permit and its record ({fault:?})"
        );
        // Another replica, once the dead one's claim has lapsed.
        s.sim.clear_faults();
        sqlx::query("UPDATE provider_resource_repair SET next_attempt_at = now()")
            .execute(s.pool())
            .await?;
        s.service = Some(s.spawn_service("* * * * * *").await?);
        let fence = s
            .fence_when(a, |f| f.fence.status() == FenceStatus::AwaitingAdmin)
            .await?;
        assert!(
            fence.fence.uncertain().any(|attempt| attempt == 0),
            "the killed attempt stays uncertain ({fault:?}): {fence:?}"
        );
        s.stop().await?;
    }
    Ok(())
}
