//! Activation of a GitLab connection, in order, each step logged and recorded (in
//! `gitlab_activation` and as `connection_activity`):
//!
//! 1. Discovery: the connected group's subgroup listing to its end, then each group's direct
//!    projects. Complete only if both end cleanly and the projects found equal GitLab's own
//!    count. Monitors are materialised for the projects the selection permits; an incomplete
//!    discovery keeps what it found and removes nothing.
//!    Then the organization tier ([`crate::org`]): the root group bound as the connection's
//!    organization, its and each subgroup's members listed (only a reconcile's complete
//!    discovery removes a vanished subgroup's team).
//! 2. The durable consumer [`CONNECTION_EVENTS_CONSUMER`] takes `gitlab.?connection.<id>.>`,
//!    confirmed by reading it back from the NATS server.
//! 3. Only after both: the group hook, on an `inbound_endpoint` of its own, with a route
//!    credential as its token. Its `provider_registration` row (marker = the route id in the
//!    hook URL) is persisted before the create call; a create whose outcome is unknown is
//!    resolved by listing the group's hooks (every page) for the marker, never by creating
//!    again. A listing not read whole leaves it unresolved, with the reason.
//! 4. The INITIAL job: queued by the engine once [`Activator::activate`] returns.
//!
//! Every RECONCILIATION (scheduled or Sync now) runs the same steps again, so an incomplete
//! discovery or a missing hook is retried; a hook already adopted stays open whatever a later
//! discovery finds. Projects are matched by native id, never by path ([`rekey_project`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bus::consumer::ConsumerSpec;
use bus::{Bus, Stream};
use gitlab_client::{ClientConfig, Error as GitlabError, GitlabClient, GroupHook, NewGroupHook};
use lifecycle_core::gitlab::route_credential::{RouteBinding, mint};
use lifecycle_core::subject::{Monitor, filter_subjects};
use scm_mirror::gitlab::GROUP_HOOK;
use scm_mirror::gitlab::activation::{self as gitlab_activation, DiscoveryRecord};
use scm_mirror::repository::RepoRef;
use sea_orm::{DatabaseConnection, EntityTrait};
use serde_json::json;
use sqlx::PgPool;
use store::entity::{ConnectionKind, ConnectionStatus, connection, provider_instance};
use store::registration::ResourceKind;
use store::secrets::Keyring;
use sync_engine::Moment;
use sync_engine::subscription::{
    Address, CreateFailure, Registrar, Request, ResourceListing, VendorResource, confirm_consumer,
};

use crate::source::Settings;
use sync_engine::webhook::follow::Monitors;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

/// The durable consumer of the hooks we registered (`gitlab.?connection.<id>.>`); the webhook
/// side runs it, activation makes sure it takes each connection before the hook exists.
pub const CONNECTION_EVENTS_CONSUMER: &str = "gitlab-sync-connection-events";

/// The filter of one connection's registered hooks: `gitlab.?connection.<id>.>`.
pub fn connection_events_filter(connection_id: Uuid) -> String {
    filter_subjects(&[connection_route(connection_id)])
        .pop()
        .unwrap_or_default()
}

fn connection_route(connection_id: Uuid) -> Monitor {
    Monitor::GitlabConnection {
        connection_id: connection_id.to_string(),
    }
}

/// The spec of [`CONNECTION_EVENTS_CONSUMER`] (its filters follow [`ConnectionRoutes`]).
pub fn connection_events_spec(concurrency: usize) -> ConsumerSpec {
    ConsumerSpec {
        concurrency: concurrency.max(1),
        handler_deadline: Some(sync_engine::webhook::HANDLER_DEADLINE),
        ..ConsumerSpec::new(Stream::WebhooksGitlab, CONNECTION_EVENTS_CONSUMER)
    }
}

/// The connections whose registered hooks the consumer takes: every active GitLab connection.
/// A consumer that follows these never drops a connection activation added.
#[derive(Clone)]
pub struct ConnectionRoutes {
    pub pool: PgPool,
}

impl Monitors for ConnectionRoutes {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM connection WHERE kind = 'gitlab' AND status = 'active' ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(ids.into_iter().map(connection_route).collect())
    }
}

/// How hooks are registered: where ingress is reached, and the routing key their credentials
/// are signed with (one of ingress's `FORGESYNC_WEBHOOK_ROUTING_KEYS`).
#[derive(Clone)]
pub struct HookSettings {
    /// Ingress's public base URL (`https://hooks.example.com`).
    pub public_url: String,
    pub key_id: String,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for HookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches logs.
        f.debug_struct("HookSettings")
            .field("public_url", &self.public_url)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl HookSettings {
    /// Parses `keyId=base64,...` (ingress's format); the last key signs.
    pub fn new(public_url: &str, routing_keys: &str) -> anyhow::Result<HookSettings> {
        use base64::Engine as _;
        let (key_id, b64) = routing_keys
            .split(',')
            .map(str::trim)
            .rfind(|p| !p.is_empty())
            .and_then(|p| p.split_once('='))
            .context("routing keys must be keyId=base64,...")?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .with_context(|| format!("routing key {key_id:?} is not base64"))?;
        anyhow::ensure!(
            key.len() >= 32,
            "routing key {key_id:?} must be at least 32 bytes"
        );
        Ok(HookSettings {
            public_url: public_url.trim_end_matches('/').to_owned(),
            key_id: key_id.trim().to_owned(),
            key,
        })
    }
}

/// Runs the activation steps of GitLab connections.
#[derive(Clone)]
pub struct Activator {
    pub db: DatabaseConnection,
    pub pool: PgPool,
    pub bus: Bus,
    pub keyring: Arc<Keyring>,
    /// Registers the group hook, subscription first.
    pub registrar: Registrar,
    /// `None`: hooks are not registered (no public URL or routing key configured).
    pub hooks: Option<HookSettings>,
    /// One GitLab request's time limit.
    pub request_timeout: Duration,
    /// Where a connection's server may be reached (`FORGESYNC_EGRESS_ALLOW`).
    pub egress: vendor_http::egress::Egress,
    pub page_size: u32,
    pub page_cap: u32,
    /// How much one discovery may find.
    pub discovery_caps: DiscoveryCaps,
}

impl Activator {
    /// The activator of a gitlab-sync replica: its flags, database, bus and keyring.
    pub fn new(
        config: &crate::Config,
        db: DatabaseConnection,
        bus: Bus,
        keyring: Arc<Keyring>,
    ) -> anyhow::Result<Activator> {
        let pool = db.get_postgres_connection_pool().clone();
        Ok(Activator {
            registrar: Registrar {
                db: db.clone(),
                pool: pool.clone(),
                keyring: keyring.clone(),
            },
            pool,
            db,
            bus,
            keyring,
            hooks: config.hook_settings()?,
            request_timeout: config.sync.request_timeout(),
            egress: config.common.egress.clone(),
            page_size: config.sync.page_size,
            page_cap: config.sync.page_cap,
            discovery_caps: DiscoveryCaps::with_pages(config.sync.page_cap),
        })
    }
}

/// What one activation came to (also recorded in `gitlab_activation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activated {
    pub discovery: Result<(), String>,
    pub consumer: Result<(), String>,
    pub hook: HookState,
}

/// Where the connection's hook stands after an activation.
pub use sync_engine::subscription::ResourceState as HookState;

/// A project as discovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundProject {
    pub id: u64,
    /// `group/sub`.
    pub namespace: String,
    /// The project's path segment.
    pub path: String,
}

impl FoundProject {
    pub fn full_path(&self) -> String {
        format!("{}/{}", self.namespace, self.path)
    }
}

/// What a discovery found, and whether it was complete.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The connected group's id, when a listing showed it.
    pub group_id: Option<u64>,
    /// The connected group and its subgroups found (full paths).
    pub groups: Vec<String>,
    /// The subgroups found, by full path, with their native ids (the organization's teams).
    pub subgroup_ids: BTreeMap<String, u64>,
    /// Projects by native id.
    pub projects: BTreeMap<u64, FoundProject>,
    /// GitLab's count of the group's projects with subgroups.
    pub count: Option<u32>,
    /// Why it is incomplete (the first reason).
    pub incomplete: Option<String>,
}

impl Discovery {
    fn fail(&mut self, reason: String) {
        self.incomplete.get_or_insert(reason);
    }
}

/// `gid://gitlab/<Type>/<n>` as `n`.
fn native_id(gid: &str) -> Option<u64> {
    gid.rsplit('/').next()?.parse().ok()
}

/// How much one discovery may find: a group past these is not walked further, and the
/// discovery is incomplete, with the reason.
#[derive(Debug, Clone, Copy)]
pub struct DiscoveryCaps {
    /// Pages one listing may take.
    pub pages: u32,
    /// Groups, the connected one and its subgroups.
    pub groups: usize,
    /// Projects across them.
    pub projects: usize,
}

impl DiscoveryCaps {
    /// The caps of a replica whose listings take at most `pages` pages.
    pub fn with_pages(pages: u32) -> Self {
        DiscoveryCaps {
            pages,
            groups: 1_000,
            projects: 10_000,
        }
    }
}

/// Lists the group's subgroups to their end, then each group's direct projects, and checks the
/// projects found against GitLab's count. Faults make it incomplete; what was found is kept. It
/// stops at its caps (a group that never ends cannot hold an activation slot).
pub async fn discover(
    client: &GitlabClient,
    group: &str,
    page_size: u32,
    caps: DiscoveryCaps,
) -> Discovery {
    let page_cap = caps.pages;
    let mut d = Discovery {
        groups: vec![group.to_owned()],
        ..Discovery::default()
    };
    // The subgroup listing, to its end.
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        if pages >= page_cap {
            d.fail(format!(
                "the subgroup listing reached the page cap ({page_cap})"
            ));
            break;
        }
        pages += 1;
        let page = match client
            .subgroups_page(group, page_size, after.as_deref())
            .await
        {
            Ok(page) => page,
            Err(e) => {
                d.fail(format!("the subgroup listing failed: {e}"));
                break;
            }
        };
        if !page.is_whole() {
            d.fail("a subgroup page came back with errors".to_owned());
        }
        for node in page.nodes.iter().flatten() {
            let path = node.full_path.clone().into_inner();
            // A direct child's parent is the connected group itself.
            if path.rsplit_once('/').map(|(parent, _)| parent) == Some(group)
                && let Some(parent) = &node.parent
            {
                d.group_id = d.group_id.or(native_id(parent.id.inner()));
            }
            if let Some(id) = native_id(node.id.inner()) {
                d.subgroup_ids.insert(path.clone(), id);
            }
            d.groups.push(path);
        }
        if d.groups.len() > caps.groups {
            d.fail(format!(
                "the group has more than {} groups, the most one discovery walks",
                caps.groups
            ));
            d.groups.truncate(caps.groups);
            break;
        }
        if !page.page_info.has_next_page {
            break;
        }
        match page.page_info.end_cursor {
            Some(cursor) => after = Some(cursor),
            None => {
                d.fail("a subgroup page said more follows but gave no cursor".to_owned());
                break;
            }
        }
    }
    // Each group's direct projects.
    let mut listed: u64 = 0;
    for g in d.groups.clone() {
        if d.projects.len() >= caps.projects {
            d.fail(format!(
                "the group has more than {} projects, the most one discovery takes",
                caps.projects
            ));
            break;
        }
        let mut after: Option<String> = None;
        let mut pages = 0;
        let mut counted: Option<u32> = None;
        let mut found: u64 = 0;
        let mut clean = true;
        loop {
            if pages >= page_cap {
                d.fail(format!(
                    "the project listing of {g} reached the page cap ({page_cap})"
                ));
                clean = false;
                break;
            }
            pages += 1;
            let page = match client
                .group_projects_page(&g, page_size, after.as_deref())
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    d.fail(format!("the project listing of {g} failed: {e}"));
                    clean = false;
                    break;
                }
            };
            if !page.is_whole() {
                d.fail(format!("a project page of {g} came back with errors"));
            }
            if counted.is_some() && counted != page.count {
                d.fail(format!(
                    "GitLab's project count of {g} changed during the listing"
                ));
            }
            counted = counted.or(page.count);
            for node in page.nodes.iter().flatten() {
                found += 1;
                let Some(id) = native_id(node.id.inner()) else {
                    d.fail(format!("a project of {g} has no readable id"));
                    continue;
                };
                let full = node.full_path.clone().into_inner();
                let namespace = full
                    .rsplit_once('/')
                    .map(|(ns, _)| ns.to_owned())
                    .unwrap_or_else(|| g.clone());
                if namespace == group
                    && let Some(pg) = &node.group
                {
                    d.group_id = d.group_id.or(native_id(pg.id.inner()));
                }
                d.projects.insert(
                    id,
                    FoundProject {
                        id,
                        namespace,
                        path: node.path.clone(),
                    },
                );
            }
            if d.projects.len() > caps.projects {
                d.fail(format!(
                    "the group has more than {} projects, the most one discovery takes",
                    caps.projects
                ));
                clean = false;
                break;
            }
            if !page.page_info.has_next_page {
                break;
            }
            match page.page_info.end_cursor {
                Some(cursor) => after = Some(cursor),
                None => {
                    d.fail(format!(
                        "a project page of {g} said more follows but gave no cursor"
                    ));
                    clean = false;
                    break;
                }
            }
        }
        listed += found;
        if clean && counted.is_some_and(|c| u64::from(c) != found) {
            d.fail(format!(
                "{found} projects listed in {g}, GitLab counts {}",
                counted.unwrap_or_default()
            ));
        }
    }
    // The whole: GitLab's own count of the group's projects, subgroups included.
    match client.group_project_count(group).await {
        Ok(count) => {
            d.count = Some(count);
            let unique = d.projects.len() as u64;
            if unique != u64::from(count) {
                d.fail(format!(
                    "{unique} distinct projects found ({listed} listed), GitLab counts {count}"
                ));
            }
        }
        Err(e) => d.fail(format!("GitLab's project count could not be read: {e}")),
    }
    d
}

/// Lists a group's hooks page by page to the last one (at most `page_cap` pages). GitLab pages
/// this list like any other, so a hook past the first page is found only by following it; the
/// listing is whole only when every page read cleanly and its headers agree.
async fn list_group_hooks(
    client: &GitlabClient,
    group: u64,
    page_cap: u32,
) -> ResourceListing<GroupHook> {
    match client.all_group_hooks(group, page_cap).await {
        Ok(hooks) => ResourceListing::Whole(hooks),
        Err(partial) => {
            tracing::warn!(group, reason = %partial.why, "the group's hook listing is not whole");
            ResourceListing::Partial {
                items: partial.items,
                why: partial.why,
            }
        }
    }
}

/// Whether a listed hook's URL carries `marker` as its route id.
fn carries_marker(hook: &GroupHook, connection_id: Uuid, marker: &str) -> bool {
    let url = hook.url.split(['?', '#']).next().unwrap_or_default();
    let mut segments = url.trim_end_matches('/').rsplit('/');
    let route = segments.next();
    let _key = segments.next();
    let conn = segments.next();
    route == Some(marker) && conn == Some(connection_id.to_string().as_str())
}

/// Whether a failed create certainly created nothing (GitLab refused it, or it was never
/// sent); anything else may have created the hook.
fn certainly_not_created(e: &GitlabError) -> bool {
    match e {
        GitlabError::Http { status, .. } => (400..500).contains(status) && *status != 408,
        GitlabError::Auth { .. }
        | GitlabError::BudgetExhausted(_)
        | GitlabError::RateLimited { .. }
        | GitlabError::Redirected { .. }
        | GitlabError::Unreachable(_) => true,
        GitlabError::Graphql { .. }
        | GitlabError::Decode { .. }
        | GitlabError::TooLarge { .. }
        | GitlabError::Deadline { .. }
        | GitlabError::Transport(_) => false,
    }
}

impl Activator {
    /// Runs the activation steps for `conn` (only while it is active). Faults of GitLab or NATS
    /// are recorded as the reason a step is unfinished; an error is a failure to record.
    #[tracing::instrument(skip_all, fields(connection_id = %conn.id, workspace_id = %conn.workspace_id, moment = ?moment))]
    pub async fn activate(
        &self,
        conn: &connection::Model,
        moment: Moment,
    ) -> anyhow::Result<Option<Activated>> {
        if conn.kind != ConnectionKind::Gitlab || conn.status != ConnectionStatus::Active {
            tracing::info!(status = ?conn.status, "not an active GitLab connection: no activation");
            return Ok(None);
        }
        // The connection as it is now: its version and generation are the ones that ask.
        let Some(conn) = connection::Entity::find_by_id(conn.id)
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        if conn.status != ConnectionStatus::Active {
            return Ok(None);
        }
        let target = Settings::from_settings(&conn.settings)?;
        let instance = provider_instance::Entity::find_by_id(conn.provider_instance_id)
            .one(&self.db)
            .await?
            .context("the connection's provider instance is missing")?;
        let origin = instance
            .server_url
            .clone()
            .unwrap_or_else(|| "https://gitlab.com".to_owned());
        let client = self.client(&conn, &origin).await?;

        // 1. Discovery.
        let caps = DiscoveryCaps {
            pages: self.page_cap,
            ..self.discovery_caps
        };
        let d = discover(&client, &target.group, self.page_size, caps).await;
        let discovery = self.apply_discovery(&conn, &target, &d, moment).await?;
        // The organization tier: the root group and its subgroups' members.
        let members = crate::org::refresh(
            &self.pool,
            &conn,
            &client,
            &target.group,
            &d,
            self.page_cap,
            d.incomplete.is_none() && moment == Moment::Reconciliation,
        )
        .await?;
        self.log(
            &conn,
            "gitlab_activation_members",
            match &members {
                Ok(r) => json!({"groups": r.groups, "changed": r.changed,
                                "teams_removed": r.teams_removed,
                                "complete": r.incomplete.is_none(), "reason": r.incomplete}),
                Err(reason) => json!({"groups": 0, "complete": false, "reason": reason}),
            },
        )
        .await?;

        // 2. The consumer, confirmed on the server.
        let filter = connection_events_filter(conn.id);
        let consumer = confirm_consumer(&self.bus, &connection_events_spec(1), &filter).await;
        gitlab_activation::record_consumer(
            &self.pool,
            conn.id,
            conn.workspace_id,
            CONNECTION_EVENTS_CONSUMER,
            consumer.as_ref().err().map(String::as_str),
        )
        .await?;
        self.log(
            &conn,
            "gitlab_activation_consumer",
            json!({"consumer": CONNECTION_EVENTS_CONSUMER, "filter": filter,
                   "confirmed": consumer.is_ok(), "reason": consumer.as_ref().err()}),
        )
        .await?;

        // 3. The hook: an open one stays; a new one only after both steps above.
        let hook = self
            .hook_step(&conn, &client, &target, &origin, &d, &discovery, &consumer)
            .await?;
        let reason = match &hook {
            HookState::Open(_) => None,
            HookState::Missing(reason) => Some(reason.as_str()),
        };
        gitlab_activation::record_hook(&self.pool, conn.id, conn.workspace_id, reason).await?;
        self.log(
            &conn,
            "gitlab_activation_hook",
            match &hook {
                HookState::Open(id) => json!({"open": true, "hook_id": id}),
                HookState::Missing(reason) => json!({"open": false, "reason": reason}),
            },
        )
        .await?;
        Ok(Some(Activated {
            discovery,
            consumer,
            hook,
        }))
    }

    async fn client(&self, conn: &connection::Model, origin: &str) -> anyhow::Result<GitlabClient> {
        let token = store::secrets::get(&self.db, &self.keyring, conn.id, "token")
            .await?
            .context("the GitLab connection has no `token` secret")?;
        let token = String::from_utf8(token).context("the GitLab token is not UTF-8")?;
        let config = ClientConfig {
            timeout: self.request_timeout,
            ..ClientConfig::new(origin).with_egress(self.egress.clone())
        };
        Ok(GitlabClient::new(&config, token)?)
    }

    async fn log(
        &self,
        conn: &connection::Model,
        activity: &str,
        detail: serde_json::Value,
    ) -> Result<(), sqlx::Error> {
        tracing::info!(connection_id = %conn.id, workspace_id = %conn.workspace_id, step = activity, %detail, "activation step");
        store::activity::record(&self.pool, conn.id, conn.workspace_id, activity, detail).await
    }

    /// Materialises the monitors the selection permits; a complete discovery also retires the
    /// monitors of projects the connection no longer reaches (a move out of the group heals).
    async fn apply_discovery(
        &self,
        conn: &connection::Model,
        target: &Settings,
        d: &Discovery,
        moment: Moment,
    ) -> anyhow::Result<Result<(), String>> {
        let repos: Vec<RepoRef> = d
            .projects
            .values()
            .filter(|p| target.selects(&p.full_path()))
            .map(|p| RepoRef {
                owner: p.namespace.clone(),
                name: p.path.clone(),
                native_id: Some(p.id as i64),
            })
            .collect();
        let mut tx = self.pool.begin().await?;
        let created = scm_mirror::monitors::materialise(
            &mut tx,
            conn.provider_instance_id,
            conn.workspace_id,
            conn.id,
            &repos,
        )
        .await?;
        // Fail closed: only a complete discovery may remove a monitor.
        let retired = if d.incomplete.is_none() {
            let ids: Vec<i64> = repos.iter().filter_map(|r| r.native_id).collect();
            scm_mirror::monitors::retain_only(&mut tx, conn.id, &ids).await?
        } else {
            0
        };
        tx.commit().await?;
        let record = DiscoveryRecord {
            complete: d.incomplete.is_none(),
            reason: d.incomplete.clone(),
            groups_found: d.groups.len() as i64,
            projects_found: d.projects.len() as i64,
            project_count: d.count.map(i64::from),
        };
        gitlab_activation::record_discovery(&self.pool, conn.id, conn.workspace_id, &record)
            .await?;
        self.log(
            conn,
            "gitlab_activation_discovery",
            json!({"complete": record.complete, "reason": record.reason,
                   "groups": record.groups_found, "projects": record.projects_found,
                   "count": record.project_count, "monitors_created": created,
                   "monitors_retired": retired, "moment": format!("{moment:?}")}),
        )
        .await?;
        Ok(match &d.incomplete {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn hook_step(
        &self,
        conn: &connection::Model,
        client: &GitlabClient,
        target: &Settings,
        origin: &str,
        d: &Discovery,
        discovery: &Result<(), String>,
        consumer: &Result<(), String>,
    ) -> anyhow::Result<HookState> {
        // Subscription first: the hook only after discovery and the consumer.
        let ready = match (discovery, consumer) {
            (Err(reason), _) => Err(format!(
                "discovery is incomplete ({reason}); the next reconcile or Sync now retries"
            )),
            (_, Err(reason)) => Err(format!(
                "the connection consumer is not confirmed ({reason}); the next reconcile or \
                 Sync now retries"
            )),
            _ => Ok(()),
        };
        let resource = GroupHookResource {
            client,
            hooks: self.hooks.as_ref(),
            origin,
            page_cap: self.page_cap,
            pool: &self.pool,
        };
        self.registrar
            .ensure(
                &resource,
                Request {
                    conn,
                    target: d.group_id.map(|id| id.to_string()).ok_or_else(|| {
                        "the connected group's id was not shown by discovery".into()
                    }),
                    ready,
                    provider_ref: Some(target.group.clone()),
                },
            )
            .await
    }
}

/// The group hook, as the shared registration component creates and finds it.
struct GroupHookResource<'a> {
    client: &'a GitlabClient,
    hooks: Option<&'a HookSettings>,
    /// The GitLab instance the route credential is bound to.
    origin: &'a str,
    page_cap: u32,
    pool: &'a PgPool,
}

#[async_trait::async_trait]
impl VendorResource for GroupHookResource<'_> {
    type Listed = GroupHook;
    const NOUN: &'static str = "hook";
    const ACTIVITY: &'static str = "gitlab_activation_hook";

    fn kind(&self) -> ResourceKind {
        GROUP_HOOK
    }

    fn configured(&self) -> Result<(), String> {
        self.hooks.map(|_| ()).ok_or_else(|| {
            "hook registration is not configured (public webhook URL and routing key)".into()
        })
    }

    fn url(&self, conn: &connection::Model, address: &Address<'_>) -> String {
        let hooks = self.hooks.expect("configured before a URL is asked for");
        format!(
            "{}/webhooks/gitlab/connections/{}/{}/{}",
            hooks.public_url, conn.id, hooks.key_id, address.marker
        )
    }

    async fn create(
        &self,
        conn: &connection::Model,
        target: &str,
        marker: &str,
        url: &str,
        _secret: &str,
    ) -> Result<String, CreateFailure> {
        let hooks = self.hooks.expect("configured before a create");
        let group: u64 = target
            .parse()
            .map_err(|_| CreateFailure::Refused(format!("stored group id {target:?}")))?;
        // The hook authenticates with a route credential bound to this connection, key, route
        // and instance, not with the endpoint's own secret.
        let token = mint(
            &hooks.key,
            &RouteBinding {
                connection_id: &conn.id.to_string(),
                key_id: &hooks.key_id,
                route_id: marker,
                origin: self.origin,
            },
        );
        let new = NewGroupHook {
            url: url.to_owned(),
            token,
            issues_events: true,
            merge_requests_events: true,
            note_events: true,
            // The head checks of merge requests come by Pipeline Hooks.
            pipeline_events: true,
            // Renames, transfers, creations and deletions of projects, subgroup renames and
            // members: the organization tier and re-keying by native id.
            project_events: true,
            subgroup_events: true,
            member_events: true,
            // A push to an open merge request's source branch is recorded from Push Hooks too.
            push_events: true,
            enable_ssl_verification: true,
        };
        match self.client.create_group_hook(group, &new).await {
            Ok(hook) => Ok(hook.id.to_string()),
            Err(e) if certainly_not_created(&e) => Err(CreateFailure::Refused(format!(
                "GitLab refused the hook: {e}"
            ))),
            Err(e) => Err(CreateFailure::Unknown(e.to_string())),
        }
    }

    async fn list(&self, target: &str) -> ResourceListing<GroupHook> {
        match target.parse::<u64>() {
            Ok(group) => list_group_hooks(self.client, group, self.page_cap).await,
            Err(_) => ResourceListing::Partial {
                items: Vec::new(),
                why: format!("stored group id {target:?} is not a number"),
            },
        }
    }

    fn marked(&self, hook: &GroupHook, connection_id: Uuid, marker: &str) -> Option<String> {
        carries_marker(hook, connection_id, marker).then(|| hook.id.to_string())
    }

    async fn observed(&self, conn: &connection::Model, hook: &GroupHook) -> anyhow::Result<()> {
        let until = hook
            .disabled_until
            .as_deref()
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok());
        gitlab_activation::record_hook_health(
            self.pool,
            conn.id,
            conn.workspace_id,
            until,
            hook.alert_status.as_deref(),
        )
        .await?;
        Ok(())
    }
}

/// Re-keys project `native_id` of the connection's instance to `new_full_path` after a rename
/// or a move, by native id: its mirrored row and every monitor of it. A legacy monitor without
/// a native id is found by `previous_full_path`. A move out of the connected group (to another
/// root group) is not followed here: the next reconcile's complete discovery heals it. Returns
/// `false` when the project left the connected group and nothing changed.
pub async fn rekey_project(
    pool: &PgPool,
    conn: &connection::Model,
    native_id: i64,
    new_full_path: &str,
    previous_full_path: Option<&str>,
) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    let done = rekey_in(&mut tx, conn, native_id, new_full_path, previous_full_path).await?;
    tx.commit().await?;
    Ok(done.is_some())
}

/// [`rekey_project`] in the caller's transaction (a webhook's, which admitted the delivery for
/// the project first); `None` when the project left the connected group and nothing changed.
/// `new_full_path` must be what GitLab reports for the native id, never a payload's path.
pub async fn rekey_in(
    tx: &mut sqlx::PgConnection,
    conn: &connection::Model,
    native_id: i64,
    new_full_path: &str,
    previous_full_path: Option<&str>,
) -> anyhow::Result<Option<scm_mirror::monitors::Rekeyed>> {
    let target = Settings::from_settings(&conn.settings)?;
    // Within the connected group only; a move across root groups heals on reconcile.
    if !target.contains(new_full_path) {
        return Ok(None);
    }
    let Some((owner, name)) = new_full_path.rsplit_once('/') else {
        anyhow::bail!("a project path has a namespace: {new_full_path:?}");
    };
    let previous: Vec<(&str, &str)> = previous_full_path
        .and_then(|p| p.rsplit_once('/'))
        .into_iter()
        .collect();
    let done = scm_mirror::monitors::rekey(
        &mut *tx,
        conn.id,
        conn.provider_instance_id,
        native_id,
        owner,
        name,
        &previous,
    )
    .await?;
    Ok(Some(done))
}
