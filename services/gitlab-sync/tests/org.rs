//! Project and subgroup events through gitlab-sync's webhook consumer, in-process against real
//! Postgres and JetStream and the simulated GitLab over HTTP: deliveries are stored as ingress
//! stores them for a hook we registered, and consumed. A rename's path is never taken from the
//! hook: GitLab is asked for the native id with the delivering connection's token. A deletion
//! waits for a reconcile's complete discovery.

mod common;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use base64::Engine as _;
use common::{Setup, Stack, Tenant};
use gitlab_sync::activation::{Activator, DiscoveryCaps, HookSettings};
use lifecycle_core::subject;
use sea_orm::EntityTrait as _;
use serde_json::Value as Json;
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, connection};
use store::inbound::{EndpointIds, NewEndpoint};
use store::secrets::Keyring;
use sync_engine::Moment;
use uuid::Uuid;
use vendor_sim::gitlab::{Model, ops};

struct World {
    stack: Stack,
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

impl Deref for World {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl World {
    async fn start() -> Result<World> {
        let mut model = Model::default();
        model.add_token("token-a");
        model.add_token("token-b");
        let acme = model.add_group(None, "acme");
        let team = model.add_group(Some(acme), "team");
        model.add_group(None, "globex");
        let api = model.add_project(acme, "api");
        let web = model.add_project(team, "web");
        let setup = Setup::new(model).await?;
        let a = setup
            .tenant(serde_json::json!({"group": "acme"}), "token-a")
            .await?;
        let b = setup
            .tenant(serde_json::json!({"group": "globex"}), "token-b")
            .await?;
        setup.monitor(a, "acme", "api", api).await?;
        setup.monitor(a, "acme/team", "web", web).await?;
        Ok(World {
            stack: setup.run().await?,
            a,
            b,
            acme,
            team,
            api,
            web,
        })
    }

    /// Stores `body` as ingress does for an operator-created hook whose secret A's tenant chose
    /// (a claim), routed to `gitlab.<rootGroup>.?.<event>`.
    async fn claimed(&self, body: &Json) -> Result<()> {
        let endpoint = store::inbound::create_endpoint(
            &self.env.db.db,
            &self.keyring,
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
        let endpoint = EndpointIds {
            endpoint_id: endpoint.id,
            workspace_id: self.a.route.workspace_id,
            connection_id: self.a.connection_id,
            kind: ConnectionKind::Gitlab,
        };
        let event = common::event_of(body);
        let subject = subject::gitlab_root_group("acme", &event)?;
        self.store(endpoint, subject, event, body, None, usize::MAX)
            .await?;
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

    async fn stop(self) -> Result<()> {
        self.stack.stop().await
    }
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
    w.registered(w.a, &forged, None).await?;
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
    w.registered(w.a, &real, None).await?;
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
    w.registered(w.a, &moved, None).await?;
    w.settle().await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme/team", "api2", api),
            monitor("acme/team", "web", w.web)
        ]
    );
    assert_eq!(w.dead().await?, []);
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
    w.registered(w.a, &body, None).await?;
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
    w.registered(w.a, &body, None).await?;
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
    w.registered(w.a, &body, None).await?;
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
    w.registered(w.b, &renamed, None).await?;
    w.registered(w.b, &group, None).await?;
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
    assert_eq!(w.dead().await?, []);
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
        w.registered(w.a, body, None).await?;
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
    w.registered(w.a, &forged, None).await?;
    forged = w
        .sim
        .model(|m| m.update_member(w.team, "carol", 20).expect("member"));
    forged["group_access"] = "Owner".into();
    w.registered(w.a, &forged, None).await?;
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
    assert_eq!(w.dead().await?, []);
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
        w.registered(w.b, body, None).await?;
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
    assert_eq!(w.dead().await?, []);
    w.stop().await
}

/// A project, subgroup or member hook missing the field its writer needs (`project_id`,
/// `old_full_path`, `user_id`) is a dead message naming it, never acknowledged and dropped:
/// nothing changes. Once its stored body is repaired, `POST /dead-messages/{id}/replay`
/// applies it.
#[tokio::test]
async fn a_project_subgroup_or_member_hook_missing_a_field_is_dead_then_replayed_after_a_fix()
-> Result<()> {
    let w = World::start().await?;
    activate(&w, w.a, Moment::Activated).await?;
    let (api, team, web) = (w.api, w.team, w.web);

    let renamed = w
        .sim
        .model(|m| m.rename_project_with_hook(api, "api2"))
        .expect("renamed");
    let broken = dead_without(&w, &renamed, "project_id", 1).await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api", api),
            monitor("acme/team", "web", web)
        ]
    );
    fixed_and_replayed(&w, broken, &renamed, 1).await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api2", api),
            monitor("acme/team", "web", web)
        ]
    );

    let group = w
        .sim
        .model(|m| m.rename_group_with_hook(team, "squad"))
        .expect("renamed");
    let broken = dead_without(&w, &group, "old_full_path", 2).await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api2", api),
            monitor("acme/team", "web", web)
        ]
    );
    fixed_and_replayed(&w, broken, &group, 2).await?;
    assert_eq!(
        w.monitors(w.a).await?,
        [
            monitor("acme", "api2", api),
            monitor("acme/squad", "web", web)
        ]
    );

    let added = w.sim.model(|m| m.add_member(team, "carol", 20));
    let broken = dead_without(&w, &added, "user_id", 3).await?;
    assert!(members(&w, "team_membership").await?.is_empty());
    fixed_and_replayed(&w, broken, &added, 3).await?;
    assert_eq!(members(&w, "team_membership").await?, [member("carol", 20)]);
    w.stop().await
}

/// A delivery whose body is `real` without `field`, through A's route and kept by reference
/// (as ingress keeps bodies past the inline limit), settled; it must be the `nth` dead
/// message, its reason naming the field. (message id, dead message id).
async fn dead_without(w: &World, real: &Json, field: &str, nth: usize) -> Result<(Uuid, Uuid)> {
    let mut broken = real.clone();
    broken.as_object_mut().expect("an object").remove(field);
    let (subject, event) = common::route_subject(w.a, &broken)?;
    let message = w.store(w.a.route, subject, event, &broken, None, 0).await?;
    w.settle().await?;
    let dead = w.dead().await?;
    assert_eq!(dead.len(), nth, "{dead:?}");
    let (id, reason) = dead.last().expect("a dead message");
    assert!(reason.contains(&format!("`{field}`")), "{dead:?}");
    Ok((message, *id))
}

/// Repairs the stored body of `broken` to `real` and replays its dead message; the replay does
/// not die again (still `nth` dead messages).
async fn fixed_and_replayed(
    w: &World,
    (message, dead): (Uuid, Uuid),
    real: &Json,
    nth: usize,
) -> Result<()> {
    sqlx::query("UPDATE inbound_message_body SET body = $2 WHERE message_id = $1")
        .bind(message)
        .bind(serde_json::to_vec(real)?)
        .execute(w.pool())
        .await?;
    w.replay(dead).await?;
    assert_eq!(w.dead().await?.len(), nth);
    Ok(())
}
