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
        let config: provider_repair::Config = testkit::config(
            env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                format!("--provider-repair-cron={cron}"),
                "--provider-repair-request-timeout=1".to_owned(),
            ],
        )?;
        let service = testkit::spawn(config).await?;
        Ok(Stack {
            env,
            sim,
            group,
            instance,
            service: Some(service),
        })
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
