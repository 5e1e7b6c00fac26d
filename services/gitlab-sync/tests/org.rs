//! Project and subgroup events through gitlab-sync's webhook consumer, in-process against real
//! Postgres and JetStream and the simulated GitLab over HTTP: deliveries are stored as ingress
//! stores them for a hook we registered, and consumed. A rename's path is never taken from the
//! hook: GitLab is asked for the native id with the delivering connection's token. A deletion
//! waits for a reconcile's complete discovery.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use base64::Engine as _;
use bus::Stream;
use gitlab_sync::activation::{Activator, DiscoveryCaps, HookSettings};
use lifecycle_core::subject;
use sea_orm::{EntityTrait as _, TransactionTrait as _};
use serde_json::Value as Json;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, connection};
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::Moment;
use uuid::Uuid;
use vendor_sim::gitlab::{GitlabSim, Model, ops};

const REGISTERED: &str = "gitlab-sync-connection-events";
const OPERATOR: &str = "gitlab-sync-project-events";

/// A workspace's GitLab connection and the endpoint of the group hook we registered for it.
#[derive(Clone, Copy)]
struct Tenant {
    connection_id: Uuid,
    route: EndpointIds,
}

struct World {
    env: testkit::TestEnv,
    sim: GitlabSim,
    service: Option<testkit::Running>,
    _ingress_relay: tokio_util::sync::DropGuard,
    /// A: group `acme`, every project; monitors `acme/api` and `acme/team/web`.
    a: Tenant,
    /// B: group `globex`.
    b: Tenant,
    acme: u64,
    team: u64,
    /// `acme/api`.
    api: u64,
    /// `acme/team/web`.
    web: u64,
}

impl World {
    async fn start() -> Result<World> {
        let env = testkit::TestEnv::new().await?;
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        let team = model.add_group(Some(acme), "team");
        model.add_group(None, "globex");
        let api = model.add_project(acme, "api");
        let web = model.add_project(team, "web");
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
        let a = tenant(&env, &keyring, instance, "acme", "token-a").await?;
        let b = tenant(&env, &keyring, instance, "globex", "token-b").await?;
        for (owner, name, id) in [("acme", "api", api), ("acme/team", "web", web)] {
            sqlx::query(
                "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(Uuid::now_v7())
            .bind(a.route.workspace_id)
            .bind(a.connection_id)
            .bind(owner)
            .bind(name)
            .bind(id as i64)
            .execute(&pool)
            .await?;
        }
        let config: gitlab_sync::Config = testkit::config(
            env.common_args(),
            &[
                format!("--secret-key={}", testkit::secret_key()),
                "--reconcile-cron=off".to_owned(),
                "--backfill-cron=off".to_owned(),
                "--filter-refresh-ms=200".to_owned(),
            ],
        )?;
        let service = Some(testkit::spawn(config).await?);
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
            a,
            b,
            acme,
            team,
            api,
            web,
        })
    }

    fn pool(&self) -> &sqlx::PgPool {
        self.env.db.db.get_postgres_connection_pool()
    }

    /// Stores `body` as ingress does for a hook we registered for `tenant` (the event named by
    /// `object_kind`, else `event_name`).
    async fn registered(&self, tenant: Tenant, body: &Json) -> Result<Uuid> {
        let event = body["object_kind"]
            .as_str()
            .or_else(|| body["event_name"].as_str())
            .unwrap_or("unknown")
            .to_owned();
        let subject = subject::gitlab_connection(&tenant.connection_id.to_string(), &event)?;
        let txn = self.env.db.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint: tenant.route,
                verification: "token".into(),
                headers: BTreeMap::new(),
                body: serde_json::to_vec(body)?,
                event,
                subject,
                dedup: Dedup::Keys {
                    event_id: Some(Uuid::now_v7().to_string()),
                    digest_window: Duration::from_secs(1),
                    verified_by: None,
                },
                retention: Duration::from_secs(3600),
                inline_body_max: usize::MAX,
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

    /// Stores `body` as ingress does for an operator-created hook whose secret A's tenant chose
    /// (a claim), routed to `gitlab.<rootGroup>.?.<event>`.
    async fn claimed(&self, body: &Json) -> Result<()> {
        let keyring = Keyring::parse(&testkit::secret_key())?;
        let endpoint = store::inbound::create_endpoint(
            &self.env.db.db,
            &keyring,
            NewEndpoint {
                workspace_id: self.a.route.workspace_id,
                connection_id: self.a.connection_id,
                kind: ConnectionKind::Gitlab,
                registration: Registration::Operator,
                provider_ref: None,
                address_token: Some(Uuid::now_v7().simple().to_string()),
                tenant_keyed: true,
            },
            Uuid::now_v7().as_bytes(),
        )
        .await?;
        let event = body["event_name"].as_str().unwrap_or("unknown").to_owned();
        let txn = self.env.db.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint: EndpointIds {
                    endpoint_id: endpoint.id,
                    workspace_id: self.a.route.workspace_id,
                    connection_id: self.a.connection_id,
                    kind: ConnectionKind::Gitlab,
                },
                verification: "token".into(),
                headers: BTreeMap::new(),
                body: serde_json::to_vec(body)?,
                subject: subject::gitlab_root_group("acme", &event)?,
                event,
                dedup: Dedup::Keys {
                    event_id: Some(Uuid::now_v7().to_string()),
                    digest_window: Duration::from_secs(1),
                    verified_by: None,
                },
                retention: Duration::from_secs(3600),
                inline_body_max: usize::MAX,
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        anyhow::ensure!(matches!(recorded, Recorded::Accepted(_)), "{recorded:?}");
        txn.commit().await?;
        Ok(())
    }

    /// Waits until every stored delivery is published and the consumer settled them.
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

    /// `tenant`'s monitors: (owner, name, native id), in order.
    async fn monitors(&self, tenant: Tenant) -> Result<Vec<(String, String, Option<i64>)>> {
        Ok(sqlx::query_as(
            "SELECT owner, name, native_id FROM repository_to_monitor WHERE connection_id = $1
              ORDER BY owner, name",
        )
        .bind(tenant.connection_id)
        .fetch_all(self.pool())
        .await?)
    }

    async fn count_teams(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM team")
            .fetch_one(self.pool())
            .await?)
    }

    async fn dead(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM dead_message")
            .fetch_one(self.pool())
            .await?)
    }

    /// An activator of `tenant`'s connection (no hook registration configured).
    async fn activator(&self) -> Result<Activator> {
        let db = self.env.db.db.clone();
        let pool = self.pool().clone();
        let keyring = Arc::new(Keyring::parse(&testkit::secret_key())?);
        let keys = format!(
            "k1={}",
            base64::engine::general_purpose::STANDARD.encode(testkit::ROUTING_KEY)
        );
        Ok(Activator {
            registrar: sync_engine::subscription::Registrar {
                db: db.clone(),
                pool: pool.clone(),
                keyring: keyring.clone(),
            },
            db,
            pool,
            bus: self.env.bus.clone(),
            keyring,
            hooks: Some(HookSettings::new("https://hooks.example.com/", &keys)?),
            request_timeout: Duration::from_secs(10),
            egress: self.env.common_args().egress,
            page_size: 20,
            page_cap: 100,
            discovery_caps: DiscoveryCaps::with_pages(100),
        })
    }

    async fn connection(&self, tenant: Tenant) -> Result<connection::Model> {
        Ok(connection::Entity::find_by_id(tenant.connection_id)
            .one(&self.env.db.db)
            .await?
            .expect("connection"))
    }

    async fn stop(mut self) -> Result<()> {
        if let Some(s) = self.service.take() {
            s.stop().await?;
        }
        Ok(())
    }
}

/// A workspace with an active GitLab connection to `group` and its registered hook's endpoint.
async fn tenant(
    env: &testkit::TestEnv,
    keyring: &Keyring,
    instance: Uuid,
    group: &str,
    token: &str,
) -> Result<Tenant> {
    let settings = serde_json::json!({ "group": group });
    let (workspace_id, connection_id) =
        testkit::active_connection(&env.db.db, "gitlab", instance, settings, Some(token)).await?;
    let endpoint = store::inbound::create_endpoint(
        &env.db.db,
        keyring,
        NewEndpoint {
            workspace_id,
            connection_id,
            kind: ConnectionKind::Gitlab,
            registration: Registration::Registered,
            provider_ref: None,
            address_token: Some(Uuid::now_v7().simple().to_string()),
            tenant_keyed: false,
        },
        Uuid::now_v7().as_bytes(),
    )
    .await?;
    Ok(Tenant {
        connection_id,
        route: EndpointIds {
            endpoint_id: endpoint.id,
            workspace_id,
            connection_id,
            kind: ConnectionKind::Gitlab,
        },
    })
}

fn monitor(owner: &str, name: &str, id: u64) -> (String, String, Option<i64>) {
    (owner.to_owned(), name.to_owned(), Some(id as i64))
}

#[tokio::test]
async fn a_forged_rename_changes_nothing_and_a_real_one_rekeys_by_what_gitlab_reports() -> Result<()>
{
    let w = World::start().await?;
    let api = w.api;
    // A rename hook naming a path GitLab does not report: GitLab is asked, the project is still
    // `acme/api`, nothing moves.
    let mut forged = w
        .sim
        .model(|m| m.project_event_hook(api, "project_rename", Some("acme/api")));
    forged["path_with_namespace"] = "acme/hijacked".into();
    w.registered(w.a, &forged).await?;
    w.settle().await?;
    assert!(w.sim.calls(ops::PROJECT_BY_ID) >= 1);
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api", api),
            monitor("acme/team", "web", w.web)
        ]
    );

    // GitLab renames it, and its hook carries a stale path: the monitor follows GitLab.
    let mut real = w
        .sim
        .model(|m| m.rename_project_with_hook(api, "api2"))
        .expect("renamed");
    real["path_with_namespace"] = "acme/stale".into();
    w.registered(w.a, &real).await?;
    w.settle().await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api2", api),
            monitor("acme/team", "web", w.web)
        ]
    );

    // A transfer within the group moves it, by native id, to where GitLab says it is.
    let moved = w
        .sim
        .model(|m| m.transfer_project_with_hook(api, w.team))
        .expect("moved");
    w.registered(w.a, &moved).await?;
    w.settle().await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme/team", "api2", api),
            monitor("acme/team", "web", w.web)
        ]
    );
    assert_eq!(w.dead().await?, 0);
    w.stop().await
}

#[tokio::test]
async fn a_claimed_rename_on_the_shared_endpoint_rekeys_by_what_gitlab_reports() -> Result<()> {
    let w = World::start().await?;
    let api = w.api;
    // A hook whose secret the tenant knows is only a claim; it still names which project to
    // ask GitLab about, and GitLab's path is what is written, not the claim's.
    let mut claim = w
        .sim
        .model(|m| m.rename_project_with_hook(api, "api2"))
        .expect("renamed");
    claim["path_with_namespace"] = "acme/claimed".into();
    // The shared endpoint's consumer follows the monitors; give it time to take them.
    tokio::time::sleep(Duration::from_millis(600)).await;
    w.claimed(&claim).await?;
    w.settle().await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api2", api),
            monitor("acme/team", "web", w.web)
        ]
    );
    w.stop().await
}

#[tokio::test]
async fn a_subgroup_rename_rekeys_its_projects() -> Result<()> {
    let w = World::start().await?;
    let body = w
        .sim
        .model(|m| m.rename_group_with_hook(w.team, "squad"))
        .expect("renamed");
    w.registered(w.a, &body).await?;
    w.settle().await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api", w.api),
            monitor("acme/squad", "web", w.web)
        ]
    );
    w.stop().await
}

#[tokio::test]
async fn a_created_project_is_admitted_by_what_gitlab_reports() -> Result<()> {
    let w = World::start().await?;
    let (born, body) = w.sim.model(|m| m.create_project_with_hook(w.acme, "born"));
    w.registered(w.a, &body).await?;
    w.settle().await?;
    assert!(
        w.monitors(w.a)
            .await?
            .contains(&monitor("acme", "born", born))
    );
    w.stop().await
}

#[tokio::test]
async fn project_destroy_is_tombstoned_only_after_a_reconcile_confirms_it() -> Result<()> {
    let w = World::start().await?;
    let api = w.api;
    let body = w
        .sim
        .model(|m| m.destroy_project_with_hook(api))
        .expect("destroyed");
    w.registered(w.a, &body).await?;
    w.settle().await?;
    // The hook's word deletes nothing.
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api", api),
            monitor("acme/team", "web", w.web)
        ]
    );
    let noted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM connection_activity
          WHERE connection_id = $1 AND activity = 'gitlab_project_destroy_reported'",
    )
    .bind(w.a.connection_id)
    .fetch_one(w.pool())
    .await?;
    assert_eq!(noted, 1);
    // The reconcile's complete discovery confirms it: the monitor goes, and the project is
    // released to the eraser's orphan guard.
    let conn = w.connection(w.a).await?;
    let done = w
        .activator()
        .await?
        .activate(&conn, Moment::Reconciliation)
        .await?
        .expect("active");
    assert_eq!(done.discovery, Ok(()));
    assert_eq!(w.monitors(w.a).await?, [monitor("acme/team", "web", w.web)]);
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_endpoint_cannot_rename_or_move_a_project_of_a() -> Result<()> {
    let w = World::start().await?;
    let api = w.api;
    // GitLab renames A's project; B's route delivers the hook (B's token can read the project,
    // but it is outside B's group), and a forged subgroup rename naming A's group.
    let renamed = w
        .sim
        .model(|m| m.rename_project_with_hook(api, "api2"))
        .expect("renamed");
    let mut group = w
        .sim
        .model(|m| m.rename_group_with_hook(w.team, "squad"))
        .expect("renamed");
    group["old_full_path"] = "acme/team".into();
    w.registered(w.b, &renamed).await?;
    w.registered(w.b, &group).await?;
    w.settle().await?;
    // Nothing of A moved, B holds nothing.
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api", api),
            monitor("acme/team", "web", w.web)
        ]
    );
    assert!(w.monitors(w.b).await?.is_empty());
    assert_eq!(w.dead().await?, 0);
    w.stop().await
}

/// (username, access level) of the members of `table` (`organization_membership` or
/// `team_membership`), in order.
async fn members(w: &World, table: &str) -> Result<Vec<(String, i32)>> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT username, access_level FROM {table} ORDER BY username"
    )))
    .fetch_all(w.pool())
    .await?)
}

fn member(name: &str, level: i32) -> (String, i32) {
    (name.to_owned(), level)
}

/// Activates `tenant` (discovery, the members listing) without registering a hook.
async fn activate(w: &World, tenant: Tenant, moment: Moment) -> Result<()> {
    let mut act = w.activator().await?;
    act.hooks = None;
    let conn = w.connection(tenant).await?;
    act.activate(&conn, moment).await?.expect("active");
    Ok(())
}

#[tokio::test]
async fn the_members_listing_and_member_hooks_keep_the_organization_tier() -> Result<()> {
    let w = World::start().await?;
    let tmp = w.sim.model(|m| {
        m.add_member(w.acme, "alice", 30);
        m.add_member(w.team, "bob", 40);
        let tmp = m.add_group(Some(w.acme), "tmp");
        m.add_member(tmp, "dave", 10);
        tmp
    });
    activate(&w, w.a, Moment::Activated).await?;
    let (login, bound): (String, i64) = sqlx::query_as(
        "SELECT o.login, (SELECT count(*) FROM organization_binding b WHERE b.organization_id = o.id)
           FROM organization o WHERE o.native_id = $1",
    )
    .bind(w.acme as i64)
    .fetch_one(w.pool())
    .await?;
    assert_eq!((login.as_str(), bound), ("acme", 1));
    assert_eq!(
        sqlx::query_scalar::<_, String>("SELECT slug FROM team ORDER BY slug")
            .fetch_all(w.pool())
            .await?,
        ["acme/team", "acme/tmp"]
    );
    assert_eq!(
        members(&w, "organization_membership").await?,
        [member("alice", 30)]
    );
    assert_eq!(
        members(&w, "team_membership").await?,
        [member("bob", 40), member("dave", 10)]
    );
    // A subgroup gone: only a reconcile's complete discovery removes its team.
    w.sim.model(|m| {
        m.groups.remove(&tmp);
        m.members.retain(|(group, _), _| *group != tmp);
    });
    activate(&w, w.a, Moment::Activated).await?;
    assert_eq!(w.count_teams().await?, 2);
    activate(&w, w.a, Moment::Reconciliation).await?;
    assert_eq!(w.count_teams().await?, 1);
    assert_eq!(members(&w, "team_membership").await?, [member("bob", 40)]);

    // Member hooks: each confirmed by reading the membership from GitLab.
    let hooks = w.sim.model(|m| {
        [
            m.update_member(w.acme, "alice", 40).expect("member"),
            m.remove_member(w.team, "bob").expect("member"),
            m.add_member(w.team, "carol", 20),
        ]
    });
    for body in &hooks {
        w.registered(w.a, body).await?;
    }
    w.settle().await?;
    assert!(w.sim.calls(ops::GET_GROUP_MEMBER) >= 3);
    assert_eq!(
        members(&w, "organization_membership").await?,
        [member("alice", 40)]
    );
    assert_eq!(members(&w, "team_membership").await?, [member("carol", 20)]);

    // A hook GitLab does not confirm adds nobody, and its stated access level is never written.
    let mut forged = w.sim.model(|m| {
        let body = m.add_member(w.acme, "mallory", 50);
        m.members.retain(|_, member| member.username != "mallory");
        body
    });
    w.registered(w.a, &forged).await?;
    forged = w
        .sim
        .model(|m| m.update_member(w.team, "carol", 20).expect("member"));
    forged["group_access"] = "Owner".into();
    w.registered(w.a, &forged).await?;
    w.settle().await?;
    assert_eq!(
        members(&w, "organization_membership").await?,
        [member("alice", 40)]
    );
    assert_eq!(members(&w, "team_membership").await?, [member("carol", 20)]);

    // A reconcile's complete listing removes whoever left without a hook reaching us.
    w.sim
        .model(|m| m.members.retain(|_, member| member.username != "carol"));
    activate(&w, w.a, Moment::Reconciliation).await?;
    assert!(members(&w, "team_membership").await?.is_empty());
    assert_eq!(w.dead().await?, 0);
    w.stop().await
}

#[tokio::test]
async fn another_workspaces_member_hooks_naming_as_group_change_nothing() -> Result<()> {
    let w = World::start().await?;
    w.sim.model(|m| {
        m.add_member(w.acme, "alice", 30);
        m.add_member(w.team, "bob", 40);
    });
    activate(&w, w.a, Moment::Activated).await?;
    activate(&w, w.b, Moment::Activated).await?;
    let before = (
        members(&w, "organization_membership").await?,
        members(&w, "team_membership").await?,
    );
    // GitLab really changes A's members; B's route delivers the hooks (B's token could read
    // them): B's organization is globex, so nothing is read and nothing of A changes.
    let hooks = w.sim.model(|m| {
        [
            m.update_member(w.acme, "alice", 50).expect("member"),
            m.remove_member(w.team, "bob").expect("member"),
            m.add_member(w.acme, "mallory", 50),
        ]
    });
    let reads = w.sim.calls(ops::GET_GROUP_MEMBER);
    for body in &hooks {
        w.registered(w.b, body).await?;
    }
    w.settle().await?;
    assert_eq!(w.sim.calls(ops::GET_GROUP_MEMBER), reads);
    assert_eq!(
        (
            members(&w, "organization_membership").await?,
            members(&w, "team_membership").await?,
        ),
        before
    );
    assert_eq!(w.dead().await?, 0);
    w.stop().await
}
