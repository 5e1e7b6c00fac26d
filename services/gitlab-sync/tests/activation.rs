//! Activation against real Postgres and NATS and the simulated GitLab over HTTP: discovery, the
//! connection consumer confirmed on the server, then exactly one group hook whose token ingress
//! accepts; faults leave no hook and say why; an unknown create is adopted once, by its marker,
//! found on whichever page of the group's hooks it is; a listing not read whole proves nothing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use base64::Engine as _;
use gitlab_sync::activation::{
    self, Activator, HookSettings, HookState, connection_events_filter, connection_events_spec,
};
use lifecycle_core::subject::filter_covers;
use scm_mirror::gitlab::{GROUP_HOOK, activation as gitlab_activation};
use sea_orm::EntityTrait;
use serde_json::json;
use sqlx::PgPool;
use store::entity::connection;
use store::registration::{self, RegistrationState, Resolved};
use store::secrets::Keyring;
use sync_engine::Moment;
use testkit::TestEnv;
use uuid::Uuid;
use vendor_sim::gitlab::{Calls, Fault, GitlabFault, GitlabSim, HookAlert, Model, ops};

const TOKEN: &str = "glpat-activation";

struct Setup {
    env: TestEnv,
    sim: GitlabSim,
    act: Activator,
    pool: PgPool,
    conn: connection::Model,
    acme: u64,
    platform: u64,
    /// api (in acme), web and cli (in acme/platform).
    projects: [u64; 3],
}

async fn setup(request_timeout: Duration) -> Result<Setup> {
    let env = TestEnv::new().await?;
    let mut model = Model::default();
    model.add_token(TOKEN);
    let acme = model.add_group(None, "acme");
    let platform = model.add_group(Some(acme), "platform");
    let projects = [
        model.add_project(acme, "api"),
        model.add_project(platform, "web"),
        model.add_project(platform, "cli"),
    ];
    let sim = GitlabSim::start(model).await?;
    let db = env.db.db.clone();
    let pool = db.get_postgres_connection_pool().clone();
    let keyring = Arc::new(Keyring::parse(&testkit::secret_key())?);
    let (ws, instance, conn_id) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'a')")
        .bind(ws)
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, 'gitlab', $2)")
        .bind(instance)
        .bind(sim.base_url())
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id, settings,
                                 version, lifecycle_generation)
         VALUES ($1, $2, 'gitlab', 'active', $3, $4, 2, 1)",
    )
    .bind(conn_id)
    .bind(ws)
    .bind(instance)
    .bind(json!({"group": "acme"}))
    .execute(&pool)
    .await?;
    store::secrets::put(&db, &keyring, conn_id, "token", TOKEN.as_bytes()).await?;
    let conn = connection::Entity::find_by_id(conn_id)
        .one(&db)
        .await?
        .expect("connection");
    let keys = format!(
        "k1={}",
        base64::engine::general_purpose::STANDARD.encode(testkit::ROUTING_KEY)
    );
    let act = Activator {
        registrar: sync_engine::subscription::Registrar {
            db: db.clone(),
            pool: pool.clone(),
            keyring: keyring.clone(),
        },
        db,
        pool: pool.clone(),
        bus: env.bus.clone(),
        keyring,
        hooks: Some(HookSettings::new("https://hooks.example.com/", &keys)?),
        request_timeout,
        egress: env.common_args().egress,
        // Small pages: every listing takes more than one.
        page_size: 2,
        page_cap: 100,
        discovery_caps: gitlab_sync::activation::DiscoveryCaps::with_pages(100),
    };
    Ok(Setup {
        env,
        sim,
        act,
        pool,
        conn,
        acme,
        platform,
        projects,
    })
}

async fn activities(pool: &PgPool, conn: Uuid) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT activity FROM connection_activity WHERE connection_id = $1 ORDER BY id",
    )
    .bind(conn)
    .fetch_all(pool)
    .await?)
}

async fn monitors(pool: &PgPool, conn: Uuid) -> Result<Vec<(String, String, Option<i64>)>> {
    Ok(sqlx::query_as(
        "SELECT owner, name, native_id FROM repository_to_monitor WHERE connection_id = $1
          ORDER BY owner, name",
    )
    .bind(conn)
    .fetch_all(pool)
    .await?)
}

fn hooks(sim: &GitlabSim) -> Vec<vendor_sim::gitlab::Hook> {
    sim.model(|m| m.hooks.values().cloned().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activation_discovers_then_confirms_the_consumer_then_registers_one_hook_ingress_accepts()
-> Result<()> {
    let s = setup(Duration::from_secs(10)).await?;
    let done = s
        .act
        .activate(&s.conn, Moment::Activated)
        .await?
        .expect("an active connection activates");
    assert_eq!(done.discovery, Ok(()));
    assert_eq!(done.consumer, Ok(()));
    assert!(matches!(done.hook, HookState::Open(_)), "{:?}", done.hook);

    // Each step logged in order: discovery (with the organization's members), consumer, then
    // the hook asked for and adopted.
    assert_eq!(
        activities(&s.pool, s.conn.id).await?,
        [
            "gitlab_activation_discovery",
            "gitlab_activation_members",
            "gitlab_activation_consumer",
            "gitlab_activation_hook_requested",
            "gitlab_activation_hook_resolved",
            "gitlab_activation_hook",
        ]
    );
    // Monitors per selection, bound to native ids.
    let [api, web, cli] = s.projects.map(|p| Some(p as i64));
    assert_eq!(
        monitors(&s.pool, s.conn.id).await?,
        [
            ("acme".into(), "api".into(), api),
            ("acme/platform".into(), "cli".into(), cli),
            ("acme/platform".into(), "web".into(), web),
        ]
    );
    // The consumer holds the connection's filter on the NATS server.
    let held = bus::consumer::server_filters(&s.env.bus, &connection_events_spec(1))
        .await?
        .expect("the durable exists");
    let filter = connection_events_filter(s.conn.id);
    assert_eq!(filter, format!("gitlab.?connection.{}.>", s.conn.id));
    assert!(held.iter().any(|f| filter_covers(f, &filter)), "{held:?}");
    // Exactly one hook, on the connected group, at the connection's route, with a marker.
    let listed = hooks(&s.sim);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group, s.acme);
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Adopted);
    assert_eq!(
        regs[0].vendor_id.as_deref(),
        Some(listed[0].id.to_string().as_str())
    );
    assert_eq!(regs[0].target, s.acme.to_string());
    assert_eq!(
        listed[0].url,
        format!(
            "https://hooks.example.com/webhooks/gitlab/connections/{}/k1/{}",
            s.conn.id, regs[0].marker
        )
    );

    // Ingress accepts a hook signed with the registered token on that route.
    let ingress = testkit::spawn(testkit::ingress_config(s.env.common_args())).await?;
    let path = listed[0]
        .url
        .strip_prefix("https://hooks.example.com")
        .unwrap();
    let body = json!({"object_kind": "merge_request",
        "project": {"id": s.projects[0], "path_with_namespace": "acme/api"},
        "object_attributes": {"iid": 1, "action": "open"}});
    let http = reqwest::Client::new();
    let post = |token: String| {
        http.post(format!("{}{path}", ingress.url()))
            .header("X-Gitlab-Event", "Merge Request Hook")
            .header("X-Gitlab-Token", token)
            .header("X-Gitlab-Instance", s.sim.base_url())
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .json(&body)
            .send()
    };
    let accepted = post(listed[0].token.clone()).await?;
    assert_eq!(accepted.status(), 200, "{}", accepted.text().await?);
    let forged = post("v1.aGk.bm8".into()).await?;
    assert_eq!(forged.status(), 401);
    ingress.stop().await?;

    // Sync now runs the steps again: the open hook stays, nothing is created twice.
    let again = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert!(matches!(again.hook, HookState::Open(_)));
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);
    assert_eq!(hooks(&s.sim).len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_faults_register_no_hook_and_say_why_then_sync_now_registers_exactly_one()
-> Result<()> {
    let s = setup(Duration::from_secs(10)).await?;
    // GitLab counts a project the listings never show.
    s.sim.inject(Fault::always(
        ops::GROUP_PROJECT_COUNT,
        GitlabFault::ReplaceValue {
            path: "group.projects.count".into(),
            value: json!(4),
        },
    ));
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let reason = done.discovery.clone().unwrap_err();
    assert!(reason.contains("GitLab counts 4"), "{reason}");
    let HookState::Missing(why) = &done.hook else {
        panic!("no hook may be registered after an incomplete discovery: {done:?}");
    };
    assert!(why.contains("discovery is incomplete"), "{why}");
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 0);
    assert!(hooks(&s.sim).is_empty());
    // What was found is kept; the reason is recorded for the operators' API.
    assert_eq!(monitors(&s.pool, s.conn.id).await?.len(), 3);
    let state = gitlab_activation::get(&s.pool, s.conn.id).await?.unwrap();
    assert!(!state.discovery_complete);
    assert_eq!(state.discovery_reason.as_deref(), Some(reason.as_str()));
    assert_eq!(
        (state.projects_found, state.project_count),
        (Some(3), Some(4))
    );
    assert!(
        state
            .hook_reason
            .unwrap()
            .contains("discovery is incomplete")
    );

    // A short page hides a project: incomplete again, still no hook.
    s.sim.clear_faults();
    s.sim.inject(Fault::always(
        ops::GROUP_PROJECTS,
        GitlabFault::ShortPage { keep: 1 },
    ));
    let done = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert!(done.discovery.is_err());
    assert!(matches!(done.hook, HookState::Missing(_)));
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 0);
    // Nothing found earlier was removed by the incomplete pass.
    assert_eq!(monitors(&s.pool, s.conn.id).await?.len(), 3);

    // The next Sync now, with GitLab answering whole, registers exactly one.
    s.sim.clear_faults();
    for _ in 0..2 {
        let done = s
            .act
            .activate(&s.conn, Moment::Reconciliation)
            .await?
            .unwrap();
        assert_eq!(done.discovery, Ok(()));
        assert!(matches!(done.hook, HookState::Open(_)));
    }
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);
    assert_eq!(hooks(&s.sim).len(), 1);
    let state = gitlab_activation::get(&s.pool, s.conn.id).await?.unwrap();
    assert!(state.discovery_complete && state.hook_reason.is_none());

    // An open hook stays open whatever a later discovery finds.
    s.sim.inject(Fault::always(
        ops::GROUP_SUBGROUPS,
        GitlabFault::Status(404),
    ));
    let done = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert!(done.discovery.is_err());
    assert!(matches!(done.hook, HookState::Open(_)));
    assert_eq!(hooks(&s.sim).len(), 1);
    assert_eq!(s.sim.calls(ops::DELETE_GROUP_HOOK), 0);
    Ok(())
}

/// A group larger than one discovery may take (a tenant's server that never ends its project
/// listing, here a cap below the group's size) ends the discovery at its cap as incomplete, with
/// the reason: no hook is registered on a partial view, and the activation slot is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovery_past_its_caps_ends_incomplete_and_registers_nothing() -> Result<()> {
    let mut s = setup(Duration::from_secs(10)).await?;
    s.act.discovery_caps.projects = 2;
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let reason = done.discovery.clone().unwrap_err();
    assert!(reason.contains("more than 2 projects"), "{reason}");
    assert!(matches!(done.hook, HookState::Missing(_)), "{done:?}");
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 0);
    assert!(monitors(&s.pool, s.conn.id).await?.len() <= 3);

    s.act.discovery_caps.projects = 10_000;
    s.act.discovery_caps.groups = 0;
    let done = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    let reason = done.discovery.clone().unwrap_err();
    assert!(reason.contains("more than 0 groups"), "{reason}");
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_create_is_found_by_its_marker_and_adopted_once() -> Result<()> {
    let s = setup(Duration::from_secs(1)).await?;
    // GitLab creates the hook but answers after the client stopped waiting.
    s.sim.inject(Fault::always(
        ops::CREATE_GROUP_HOOK,
        GitlabFault::AnswerLate(Duration::from_secs(3)),
    ));
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let HookState::Open(id) = &done.hook else {
        panic!("the hook the timed-out create made is adopted: {done:?}");
    };
    let listed = hooks(&s.sim);
    assert_eq!(listed.len(), 1);
    assert_eq!(id, &listed[0].id.to_string());
    assert!(s.sim.calls(ops::LIST_GROUP_HOOKS) >= 1);
    s.sim.clear_faults();
    for _ in 0..2 {
        let again = s
            .act
            .activate(&s.conn, Moment::Reconciliation)
            .await?
            .unwrap();
        assert!(matches!(again.hook, HookState::Open(_)));
    }
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);
    assert_eq!(hooks(&s.sim).len(), 1);
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Adopted);
    Ok(())
}

/// Gives the connected group `n` hooks of others, created before ours: ours lists past them.
fn crowd_hooks(sim: &GitlabSim, group: u64, n: usize) {
    sim.model(|m| {
        for i in 0..n {
            m.add_hook(
                group,
                &format!("https://elsewhere.example/hooks/{i}"),
                "other",
            );
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_create_is_found_on_a_later_page_and_adopted_once() -> Result<()> {
    let s = setup(Duration::from_secs(1)).await?;
    // More hooks than GitLab's largest page: ours is listed on page 2.
    crowd_hooks(&s.sim, s.acme, 120);
    s.sim.inject(Fault::always(
        ops::CREATE_GROUP_HOOK,
        GitlabFault::AnswerLate(Duration::from_secs(3)),
    ));
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let HookState::Open(id) = &done.hook else {
        panic!("the hook the timed-out create made is adopted from page 2: {done:?}");
    };
    let ours: Vec<_> = hooks(&s.sim)
        .into_iter()
        .filter(|h| h.url.contains(&s.conn.id.to_string()))
        .collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(id, &ours[0].id.to_string());
    assert!(
        s.sim.calls(ops::LIST_GROUP_HOOKS) >= 2,
        "every page was read"
    );
    s.sim.clear_faults();

    // Later reconciles read the adopted hook's health from page 2; nothing is created again.
    s.sim.model(|m| {
        m.hooks.get_mut(&ours[0].id).unwrap().alert_status = HookAlert::TemporarilyDisabled;
    });
    let again = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert_eq!(again.hook, HookState::Open(id.clone()));
    let state = gitlab_activation::get(&s.pool, s.conn.id).await?.unwrap();
    assert_eq!(
        state.hook_alert_status.as_deref(),
        Some("temporarily_disabled")
    );
    assert!(state.hook_checked_at.is_some());
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);
    assert_eq!(hooks(&s.sim).len(), 121);
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Adopted);
    assert_eq!(regs[0].vendor_id.as_deref(), Some(id.as_str()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_listing_not_read_whole_proves_nothing_and_says_why() -> Result<()> {
    let s = setup(Duration::from_secs(1)).await?;
    crowd_hooks(&s.sim, s.acme, 120);
    s.sim.inject(Fault::always(
        ops::CREATE_GROUP_HOOK,
        GitlabFault::AnswerLate(Duration::from_secs(3)),
    ));
    // Page 1 reads; page 2, where our hook is, keeps failing (retries included).
    s.sim.inject(Fault {
        operation: Some(ops::LIST_GROUP_HOOKS.to_owned()),
        calls: Calls::From(2),
        kind: GitlabFault::Status(500),
    });
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let HookState::Missing(why) = &done.hook else {
        panic!("a partial listing adopts nothing: {done:?}");
    };
    assert!(why.contains("could not be listed whole"), "{why}");
    assert!(why.contains("page 2 failed"), "{why}");
    assert!(why.contains("never created twice"), "{why}");
    // The reason is what the activation record shows.
    let state = gitlab_activation::get(&s.pool, s.conn.id).await?.unwrap();
    assert_eq!(state.hook_reason.as_deref(), Some(why.as_str()));
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Requested);

    // Headers that do not add up prove nothing either.
    s.sim.clear_faults();
    s.sim.inject(Fault::nth(
        ops::LIST_GROUP_HOOKS,
        1,
        GitlabFault::OmitHeaders(vec!["x-next-page"]),
    ));
    let again = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    let HookState::Missing(why) = &again.hook else {
        panic!("{again:?}");
    };
    assert!(why.contains("paging headers"), "{why}");

    // Once the listing reads whole, the marker on page 2 is adopted, never created twice.
    s.sim.clear_faults();
    let healed = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert!(matches!(healed.hook, HookState::Open(_)), "{healed:?}");
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);
    assert_eq!(hooks(&s.sim).len(), 121);
    let state = gitlab_activation::get(&s.pool, s.conn.id).await?.unwrap();
    assert_eq!(state.hook_reason, None);
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Adopted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_create_not_listed_is_never_created_twice() -> Result<()> {
    let s = setup(Duration::from_secs(10)).await?;
    // GitLab fails the create with a 502: it may or may not have made it.
    s.sim.inject(Fault::always(
        ops::CREATE_GROUP_HOOK,
        GitlabFault::Status(502),
    ));
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let HookState::Missing(why) = &done.hook else {
        panic!("{done:?}");
    };
    assert!(why.contains("never created twice"), "{why}");
    s.sim.clear_faults();
    let creates = s.sim.calls(ops::CREATE_GROUP_HOOK);
    let again = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert!(matches!(again.hook, HookState::Missing(_)));
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), creates);
    let regs = registration::of_connection(&s.pool, s.conn.id, GROUP_HOOK).await?;
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].state, RegistrationState::Requested);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_version_and_generation_that_asked_adopt() -> Result<()> {
    let s = setup(Duration::from_secs(10)).await?;
    let asked = registration::generation(s.conn.version, s.conn.lifecycle_generation);
    let new = |marker: &'static str| registration::NewRegistration {
        connection_id: s.conn.id,
        provider_instance_id: s.conn.provider_instance_id,
        kind: GROUP_HOOK,
        target: "7",
        marker,
        url: "https://hooks.example.com/x",
        generation: asked,
        endpoint_id: None,
    };
    let mut tx = s.pool.begin().await?;
    let stale = registration::request(&mut tx, &new("m-stale"))
        .await?
        .unwrap();
    // One live request per generation and target.
    assert!(
        registration::request(&mut tx, &new("m-twin"))
            .await?
            .is_none()
    );
    tx.commit().await?;
    // The connection moves on (a transition bumps its version) before the result comes back.
    sqlx::query("UPDATE connection SET version = version + 1 WHERE id = $1")
        .bind(s.conn.id)
        .execute(&s.pool)
        .await?;
    let Resolved::RemovalTarget(r) = registration::resolve_created(&s.pool, stale.id, "41").await?
    else {
        panic!("a stale generation must not adopt");
    };
    assert_eq!(r.state, RegistrationState::Created);
    assert_eq!(r.vendor_id.as_deref(), Some("41"));
    // A second answer changes nothing.
    assert!(matches!(
        registration::resolve_created(&s.pool, stale.id, "42").await?,
        Resolved::Already(_)
    ));

    // The current generation asks and adopts.
    let conn = connection::Entity::find_by_id(s.conn.id)
        .one(&s.act.db)
        .await?
        .unwrap();
    let current = registration::generation(conn.version, conn.lifecycle_generation);
    let mut tx = s.pool.begin().await?;
    let fresh = registration::request(
        &mut tx,
        &registration::NewRegistration {
            marker: "m-fresh",
            generation: current,
            ..new("unused")
        },
    )
    .await?
    .unwrap();
    tx.commit().await?;
    assert!(matches!(
        registration::resolve_created(&s.pool, fresh.id, "43").await?,
        Resolved::Adopted(_)
    ));
    // A suspended connection adopts nothing, even for its own generation.
    let mut tx = s.pool.begin().await?;
    let later = registration::request(
        &mut tx,
        &registration::NewRegistration {
            marker: "m-later",
            target: "8",
            generation: current,
            ..new("unused")
        },
    )
    .await?
    .unwrap();
    tx.commit().await?;
    sqlx::query("UPDATE connection SET status = 'suspended' WHERE id = $1")
        .bind(s.conn.id)
        .execute(&s.pool)
        .await?;
    assert!(matches!(
        registration::resolve_created(&s.pool, later.id, "44").await?,
        Resolved::RemovalTarget(_)
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_and_moves_rekey_by_native_id_and_cross_root_moves_heal_on_reconcile() -> Result<()>
{
    let s = setup(Duration::from_secs(10)).await?;
    let [api, web, cli] = s.projects;
    // A legacy monitor without a native id, named as a project is now.
    let legacy = s.sim.model(|m| m.add_project(s.acme, "legacy"));
    sqlx::query(
        "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name)
         VALUES ($1, $2, $3, 'acme', 'legacy')",
    )
    .bind(Uuid::now_v7())
    .bind(s.conn.workspace_id)
    .bind(s.conn.id)
    .execute(&s.pool)
    .await?;
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    assert_eq!(done.discovery, Ok(()));

    // Renamed and moved within the group: re-keyed by native id, no second monitor.
    s.sim.model(|m| {
        m.rename_project(api, "api2");
        m.move_project(web, s.acme);
    });
    assert!(
        activation::rekey_project(&s.pool, &s.conn, api as i64, "acme/api2", Some("acme/api"))
            .await?
    );
    assert!(
        activation::rekey_project(
            &s.pool,
            &s.conn,
            web as i64,
            "acme/web",
            Some("acme/platform/web")
        )
        .await?
    );
    // A legacy row is found by the previous path and bound to the native id.
    sqlx::query("UPDATE repository_to_monitor SET native_id = NULL WHERE connection_id = $1 AND name = 'legacy'")
        .bind(s.conn.id)
        .execute(&s.pool)
        .await?;
    s.sim.model(|m| m.rename_project(legacy, "legacy2"));
    assert!(
        activation::rekey_project(
            &s.pool,
            &s.conn,
            legacy as i64,
            "acme/legacy2",
            Some("acme/legacy")
        )
        .await?
    );
    let (api, web, cli, legacy) = (
        Some(api as i64),
        Some(web as i64),
        Some(cli as i64),
        Some(legacy as i64),
    );
    assert_eq!(
        monitors(&s.pool, s.conn.id).await?,
        [
            ("acme".into(), "api2".into(), api),
            ("acme".into(), "legacy2".into(), legacy),
            ("acme".into(), "web".into(), web),
            ("acme/platform".into(), "cli".into(), cli),
        ]
    );

    // Moved to another root group: not followed by the event, healed by the next reconcile.
    let other = s.sim.model(|m| m.add_group(None, "other"));
    s.sim.model(|m| m.move_project(cli.unwrap() as u64, other));
    assert!(
        !activation::rekey_project(
            &s.pool,
            &s.conn,
            cli.unwrap(),
            "other/cli",
            Some("acme/platform/cli")
        )
        .await?
    );
    assert_eq!(monitors(&s.pool, s.conn.id).await?.len(), 4);
    let done = s
        .act
        .activate(&s.conn, Moment::Reconciliation)
        .await?
        .unwrap();
    assert_eq!(done.discovery, Ok(()));
    assert_eq!(
        monitors(&s.pool, s.conn.id).await?,
        [
            ("acme".into(), "api2".into(), api),
            ("acme".into(), "legacy2".into(), legacy),
            ("acme".into(), "web".into(), web),
        ]
    );
    let _ = s.platform;
    Ok(())
}

/// Applies `transition` to the connection as control-api does (identity locks, row lock,
/// `store::lifecycle::apply` with its capture), and returns the connection as it now stands.
async fn transition(
    s: &Setup,
    t: lifecycle_core::connection::Transition,
) -> Result<connection::Model> {
    use sea_orm::{QuerySelect as _, TransactionTrait as _};
    let txn = s.act.db.begin().await?;
    store::repair::lock_identities(&txn, &[s.conn.id]).await?;
    let row = connection::Entity::find_by_id(s.conn.id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .unwrap();
    let row = store::lifecycle::apply(&txn, row, t, "test", t.event_name())
        .await?
        .expect("a legal transition");
    txn.commit().await?;
    Ok(row)
}

/// A pause keeps what the connection holds: on resume its adopted hook is still its own, and
/// no second hook is created. A suspension fences the hook for removal: it is never adopted
/// back, and the resume's activation creates a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_a_pause_keeps_the_hook_and_after_a_suspension_gets_a_fresh_one()
-> Result<()> {
    use lifecycle_core::connection::Transition;
    let s = setup(Duration::from_secs(10)).await?;
    let done = s.act.activate(&s.conn, Moment::Activated).await?.unwrap();
    let HookState::Open(first) = done.hook else {
        panic!("{:?}", done.hook);
    };

    transition(&s, Transition::Pause).await?;
    let conn = transition(&s, Transition::Resume).await?;
    let done = s.act.activate(&conn, Moment::Resumed).await?.unwrap();
    assert_eq!(
        done.hook,
        HookState::Open(first.clone()),
        "the paused hook stays ours"
    );
    assert_eq!(
        hooks(&s.sim).len(),
        1,
        "a pause and resume create no second hook"
    );
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 1);

    transition(&s, Transition::Suspend).await?;
    let fences: Vec<(String, String)> =
        sqlx::query_as("SELECT resource, status FROM provider_resource_repair")
            .fetch_all(&s.pool)
            .await?;
    assert_eq!(
        fences,
        [(format!("gitlab_group_hook:{first}"), "pending".to_owned())]
    );
    let conn = transition(&s, Transition::Resume).await?;
    let done = s.act.activate(&conn, Moment::Resumed).await?.unwrap();
    let HookState::Open(fresh) = done.hook else {
        panic!("{:?}", done.hook);
    };
    assert_ne!(fresh, first, "the fenced hook is never adopted back");
    assert_eq!(s.sim.calls(ops::CREATE_GROUP_HOOK), 2);
    let states: Vec<(Option<String>, String)> = sqlx::query_as(
        "SELECT vendor_id, state FROM provider_registration WHERE connection_id = $1
          ORDER BY requested_at",
    )
    .bind(s.conn.id)
    .fetch_all(&s.pool)
    .await?;
    assert_eq!(
        states,
        [
            (Some(first), "created".to_owned()),
            (Some(fresh), "adopted".to_owned()),
        ]
    );
    Ok(())
}
