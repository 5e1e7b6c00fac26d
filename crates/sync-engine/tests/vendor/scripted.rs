//! A second vendor that exists only in tests: one scope (a project its connections monitor), one
//! item class (notes, with string ids), pages served from a script with injectable faults, and a
//! webhook payload of the same notes, both written to one table through one forward-only step.
//! [`Scripted`] implements [`Vendor`], [`WebhookApply`] and [`Monitors`] and nothing else, so
//! what it proves of the engine needs no engine change.
//!
//! Its admission rule ([`ScriptedProject`]) is declared here, as a vendor declares its own. It
//! poses as a GitLab vendor (or, to be refused a job type, as Outline): the subject `Monitor`s
//! are a closed enum, and `GitlabProject` is the variant that fits a project scope. A real new
//! vendor adds its own `ConnectionKind` and `subject::Monitor` variant (see
//! `docs/adding-a-vendor.md`).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use bus::{Bus, Stream};
use lifecycle_core::deletion::{BlastRadius, TombstonePlan};
use lifecycle_core::listing::ListingPage;
use lifecycle_core::subject::{self, Monitor};
use lifecycle_core::vendor_error::VendorErrorClass;
use sea_orm::{DatabaseConnection, TransactionTrait};
use serde::Deserialize;
use sqlx::{PgConnection, PgPool};
use store::admission::{AdmissionRule, Delivering, Refusal};
use store::entity::inbound_endpoint::Registration;
use store::entity::{ConnectionKind, connection};
use store::inbound::{Dedup, EndpointIds, NewEndpoint, NewMessage, Recorded};
use store::secrets::Keyring;
use sync_engine::webhook::follow::Monitors;
use sync_engine::webhook::hint::{Confirmation, Confirmations};
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError, parse};
use sync_engine::{
    BackfillPolicy, ClaimedJob, Engine, JobControl, JobOutcome, Listed, Pass, ReadError, ReadStop,
    Scopes, SyncSettings, Vendor,
};
use uuid::Uuid;

/// The connection kind the scripted vendor runs as.
pub trait Kind: Send + Sync + 'static {
    const KIND: ConnectionKind;
}

/// Runs every job type; its webhooks arrive on the GitLab stream.
pub struct Gitlab;
impl Kind for Gitlab {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
}

/// Refuses BACKFILL, as lifecycle-core declares for Outline.
pub struct Outline;
impl Kind for Outline {
    const KIND: ConnectionKind = ConnectionKind::Outline;
}

/// A project: (namespace, name, native id).
pub type Project = (&'static str, &'static str, i64);

/// The name of the project a [`Fixture`]'s connection monitors.
pub const SCOPE: &str = "general";

/// The project a [`Fixture`]'s connection monitors.
pub const GENERAL: Project = ("acme", SCOPE, 1);

/// The one item class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Note;

/// A fault the script injects on one page call.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The vendor is failing: the pass stops.
    Unavailable,
    /// The scope is gone: only its listing ends.
    Gone,
    /// The quota is spent: the job ends.
    Quota,
    /// An error inside an otherwise usable page.
    Errored,
    /// Claims there is no next page although there is.
    LyingNoNextPage,
    /// Reports a total that disagrees with the items.
    WrongTotal,
    /// The credentials are refused.
    Refused,
}

/// Something the test does while the script serves a page call (cancel the job, take it over).
pub type Hook = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A note, as a page lists it and a webhook reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Item {
    #[serde(rename = "item")]
    pub id: String,
    pub title: String,
    /// Moves forward only.
    pub version: i64,
}

/// The id of note `n`.
pub fn note_id(n: usize) -> String {
    format!("note-{n:04}")
}

pub fn item(n: usize) -> Item {
    Item {
        id: note_id(n),
        title: format!("note {n}"),
        version: 1,
    }
}

#[derive(Default)]
pub struct Script {
    pub items: Vec<Item>,
    /// (call index, fault).
    pub faults: Vec<(usize, Fault)>,
    /// (call index, what the test does during that call).
    pub during: Vec<(usize, Arc<Hook>)>,
    pub calls: usize,
    /// What the test does in `after_scope`, after which the vendor heartbeats and returns what
    /// it was told (as GitLab's notes pass does between parents).
    pub after_scope: Option<Arc<Hook>>,
}

/// The scripted vendor's reader: pages of the script.
#[derive(Default)]
pub struct ScriptedSource {
    script: Mutex<Script>,
}

impl ScriptedSource {
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(ScriptedSource {
            script: Mutex::new(Script {
                items: (1..=n).map(item).collect(),
                ..Default::default()
            }),
        })
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut Script) -> T) -> T {
        f(&mut self.script.lock().unwrap())
    }

    pub fn calls(&self) -> usize {
        self.with(|s| s.calls)
    }

    /// Runs `hook` while the script serves the call after the last one served.
    pub fn during_next_call(&self, hook: Hook) {
        self.with(|s| s.during = vec![(s.calls + 1, Arc::new(hook))]);
    }
}

/// A page as read.
pub struct ScriptedPage {
    items: Vec<Item>,
    has_next_page: bool,
    end_cursor: Option<String>,
    total_count: Option<u64>,
    errored: bool,
}

impl Listed<String> for ScriptedPage {
    fn listing(&self) -> ListingPage<String> {
        ListingPage {
            ids: self.items.iter().map(|i| i.id.clone()).collect(),
            has_next_page: self.has_next_page,
            end_cursor: self.end_cursor.clone(),
            total_count: self.total_count,
        }
    }

    fn errored(&self) -> bool {
        self.errored
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptedError {
    Unavailable,
    Gone,
    Quota,
    /// The vendor refused the credentials (a 401).
    Refused,
}

impl fmt::Display for ScriptedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScriptedError::Unavailable => "the scripted vendor answered HTTP 503",
            ScriptedError::Gone => "the scope is gone",
            ScriptedError::Quota => "the scripted quota is spent",
            ScriptedError::Refused => "the scripted vendor refused the credentials",
        })
    }
}

impl ReadError for ScriptedError {
    fn class(&self) -> VendorErrorClass {
        match self {
            ScriptedError::Unavailable => VendorErrorClass::ServerError,
            ScriptedError::Gone => VendorErrorClass::NotFound,
            ScriptedError::Quota => VendorErrorClass::BudgetExhausted,
            ScriptedError::Refused => VendorErrorClass::BadCredentials,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            ScriptedError::Unavailable => ReadStop::Pass(format!("failing: {self}")),
            ScriptedError::Gone => ReadStop::Listing,
            ScriptedError::Quota => ReadStop::Job(format!("quota: {self}")),
            // What the vendor says is irrelevant: the engine ends the job on its class.
            ScriptedError::Refused => ReadStop::Listing,
        }
    }
}

/// A monitored project, as a pass walks it and the consumer subject math sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Monitored {
    pub native_id: i64,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Monitored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The webhook payload of an `item` event: a note of a project (by native id).
#[derive(Debug, Deserialize)]
pub struct ItemEvent {
    project: i64,
    #[serde(flatten)]
    item: Item,
}

/// An `item` event's body.
pub fn item_event(project: i64, n: usize, title: &str, version: i64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "project": project, "item": note_id(n), "title": title, "version": version,
    }))
    .expect("JSON")
}

/// The vendor's one forward-only write, shared by pages and webhooks: a later version replaces
/// the stored one, and a tombstoned note listed or delivered again at its version or later comes
/// back. Returns whether the row changed.
async fn write(
    conn: &mut PgConnection,
    provider_instance_id: Uuid,
    project: i64,
    item: &Item,
) -> Result<bool, sqlx::Error> {
    let changed = sqlx::query(
        "INSERT INTO scripted_item (provider_instance_id, project, native_id, title, version)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (provider_instance_id, project, native_id) DO UPDATE
            SET title = EXCLUDED.title, version = EXCLUDED.version, deleted_at = NULL
          WHERE scripted_item.version < EXCLUDED.version
             OR (scripted_item.deleted_at IS NOT NULL
                 AND scripted_item.version <= EXCLUDED.version)",
    )
    .bind(provider_instance_id)
    .bind(project)
    .bind(&item.id)
    .bind(&item.title)
    .bind(item.version)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(changed == 1)
}

/// The scripted vendor, mirroring notes into `scripted_item` by provider instance.
pub struct Scripted<K: Kind = Gitlab> {
    pub pool: PgPool,
    pub source: Arc<ScriptedSource>,
    /// How it confirms hints, when a test gives it a way to (else it writes every payload).
    pub hints: Option<Arc<Hints>>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Clone for Scripted<K> {
    fn clone(&self) -> Self {
        Scripted::new(self.pool.clone(), self.source.clone()).with_hints(self.hints.clone())
    }
}

impl<K: Kind> Scripted<K> {
    pub fn new(pool: PgPool, source: Arc<ScriptedSource>) -> Self {
        Scripted {
            pool,
            source,
            hints: None,
            kind: PhantomData,
        }
    }

    /// The same vendor, confirming hints with `hints` (none: it writes every payload).
    pub fn with_hints(self, hints: Option<Arc<Hints>>) -> Self {
        Scripted { hints, ..self }
    }
}

/// The scripted vendor's confirming reads of hints: each waits for a permit of `gate` (none
/// until the test adds them), then finds nothing newer at the vendor.
pub struct Hints {
    pub confirmations: Confirmations,
    pub gate: tokio::sync::Semaphore,
    /// Confirming reads that began asking.
    began: std::sync::atomic::AtomicUsize,
}

impl Hints {
    pub fn new(confirmations: Confirmations) -> Self {
        Hints {
            confirmations,
            gate: tokio::sync::Semaphore::new(0),
            began: Default::default(),
        }
    }

    /// Waits until `n` confirming reads began asking.
    pub async fn began(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.began.load(std::sync::atomic::Ordering::SeqCst) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} confirming reads never began"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn confirm(
        &self,
        pool: &PgPool,
        hook: &Webhook<'_>,
        event: &ItemEvent,
    ) -> Result<Outcome, WebhookError> {
        let key = format!("{}/{}", event.project, event.item.id);
        self.confirmations
            .confirm(pool, hook, key, || async {
                self.began.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _turn = self.gate.acquire().await;
                Ok(Confirmation::Written(Outcome::Unchanged))
            })
            .await
    }
}

#[async_trait::async_trait]
impl<K: Kind> Vendor for Scripted<K> {
    const KIND: ConnectionKind = K::KIND;
    const SCOPES: &'static str = "projects";
    const CLASSES: &'static [Note] = &[Note];

    type Source = Arc<ScriptedSource>;
    type Scope = Monitored;
    type Class = Note;
    type Id = String;
    type Page = ScriptedPage;
    type Error = ScriptedError;

    fn class_name(_: Note) -> &'static str {
        "note"
    }

    async fn source(&self, _: &connection::Model) -> anyhow::Result<Arc<ScriptedSource>> {
        Ok(self.source.clone())
    }

    async fn scopes(
        &self,
        pass: &Pass<'_>,
        _: &Arc<ScriptedSource>,
    ) -> Result<Result<Scopes<Monitored>, ScriptedError>, sqlx::Error> {
        let scopes = sqlx::query_as(
            "SELECT native_id, owner AS namespace, name FROM repository_to_monitor
              WHERE connection_id = $1 AND native_id IS NOT NULL ORDER BY native_id",
        )
        .bind(pass.job.connection_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Ok(Scopes {
            scopes,
            unresolved: None,
        }))
    }

    async fn read_page(
        &self,
        source: &Arc<ScriptedSource>,
        _: &Monitored,
        _: Note,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<ScriptedPage, ScriptedError> {
        let (page, hooks) = source.with(|s| {
            let call = s.calls;
            s.calls += 1;
            let hooks: Vec<Arc<Hook>> = s
                .during
                .iter()
                .filter(|(c, _)| *c == call)
                .map(|(_, h)| h.clone())
                .collect();
            let fault = s
                .faults
                .iter()
                .find(|(c, _)| *c == call)
                .map(|(_, f)| f.clone());
            let start: usize = after.map_or(0, |c| c.trim_start_matches('c').parse().unwrap());
            let end = (start + page_size as usize).min(s.items.len());
            let mut page = ScriptedPage {
                items: s.items[start..end].to_vec(),
                has_next_page: end < s.items.len(),
                end_cursor: Some(format!("c{end}")),
                total_count: Some(s.items.len() as u64),
                errored: false,
            };
            let page = match fault {
                Some(Fault::Unavailable) => Err(ScriptedError::Unavailable),
                Some(Fault::Gone) => Err(ScriptedError::Gone),
                Some(Fault::Quota) => Err(ScriptedError::Quota),
                Some(Fault::Refused) => Err(ScriptedError::Refused),
                Some(Fault::Errored) => {
                    page.errored = true;
                    Ok(page)
                }
                Some(Fault::LyingNoNextPage) => {
                    page.has_next_page = false;
                    Ok(page)
                }
                Some(Fault::WrongTotal) => {
                    page.total_count = Some(s.items.len() as u64 + 3);
                    Ok(page)
                }
                None => Ok(page),
            };
            (page, hooks)
        });
        for hook in hooks {
            hook().await;
        }
        page
    }

    async fn write_page(
        &self,
        pass: &Pass<'_>,
        project: &mut Monitored,
        _: Note,
        page: &ScriptedPage,
    ) -> Result<u64, sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        let mut applied = 0;
        for item in &page.items {
            let changed =
                write(&mut txn, pass.provider_instance_id, project.native_id, item).await?;
            applied += u64::from(changed);
        }
        txn.commit().await?;
        Ok(applied)
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        project: &mut Monitored,
        _: Note,
    ) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT native_id FROM scripted_item
              WHERE provider_instance_id = $1 AND project = $2 AND deleted_at IS NULL",
        )
        .bind(pass.provider_instance_id)
        .bind(project.native_id)
        .fetch_all(&self.pool)
        .await
    }

    async fn tombstone(
        &self,
        pass: &Pass<'_>,
        project: &Monitored,
        _: Note,
        plan: &TombstonePlan<String>,
    ) -> Result<u64, sqlx::Error> {
        let ids: Vec<String> = plan.ids().iter().cloned().collect();
        Ok(sqlx::query(
            "UPDATE scripted_item SET deleted_at = now(), title = NULL
              WHERE provider_instance_id = $1 AND project = $2 AND native_id = ANY($3)
                AND deleted_at IS NULL",
        )
        .bind(pass.provider_instance_id)
        .bind(project.native_id)
        .bind(&ids)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    fn scope_detail(&self, project: &Monitored) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert("scope".into(), project.name.clone().into());
        detail
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        project: &Monitored,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        let cooling: Option<bool> = sqlx::query_scalar(
            "SELECT reconciled_at > now() - make_interval(secs => $3) FROM scripted_scope
              WHERE provider_instance_id = $1 AND project = $2",
        )
        .bind(pass.provider_instance_id)
        .bind(project.native_id)
        .bind(cooldown.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(cooling == Some(true))
    }

    async fn mark_reconciled(
        &self,
        pass: &Pass<'_>,
        project: &Monitored,
    ) -> Result<(), sqlx::Error> {
        mark_reconciled(&self.pool, pass.provider_instance_id, project.native_id).await
    }

    async fn after_scope(
        &self,
        pass: &Pass<'_>,
        source: &Arc<ScriptedSource>,
        _: &mut Monitored,
        _: bool,
    ) -> Result<JobControl, sqlx::Error> {
        let Some(hook) = source.with(|s| s.after_scope.clone()) else {
            return Ok(JobControl::Continue);
        };
        hook().await;
        pass.heartbeat().await
    }
}

/// Stamps a complete reconcile of `project`.
pub async fn mark_reconciled(
    pool: &PgPool,
    provider_instance_id: Uuid,
    project: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO scripted_scope (provider_instance_id, project, reconciled_at)
         VALUES ($1, $2, now())
         ON CONFLICT (provider_instance_id, project) DO UPDATE SET reconciled_at = now()",
    )
    .bind(provider_instance_id)
    .bind(project)
    .execute(pool)
    .await?;
    Ok(())
}

/// A project the scripted vendor writes to, by the native id its payload reports.
pub struct ScriptedProject<K> {
    pub native_id: i64,
    pub kind: PhantomData<fn() -> K>,
}

impl<K: Kind> AdmissionRule for ScriptedProject<K> {
    const KIND: ConnectionKind = K::KIND;

    // Rule: only a monitor of the delivering connection bound to the native id admits.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        let bound: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM repository_to_monitor
              WHERE connection_id = $1 AND workspace_id = $2 AND native_id = $3 LIMIT 1",
        )
        .bind(delivering.admitted.connection_id)
        .bind(delivering.admitted.workspace_id)
        .bind(self.native_id)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(bound.map(|_| ()).ok_or(Refusal::NotMonitored))
    }
}

impl<K: Kind> WebhookApply for Scripted<K> {
    const KIND: ConnectionKind = K::KIND;
    type Payload = ItemEvent;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<ItemEvent>, WebhookError> {
        match hook.event {
            "item" => parse(hook).map(Some),
            _ => Ok(None),
        }
    }

    async fn apply(&self, hook: &Webhook<'_>, event: ItemEvent) -> Result<Outcome, WebhookError> {
        if let (true, Some(hints)) = (hook.is_hint(), &self.hints) {
            return hints.confirm(&self.pool, hook, &event).await;
        }
        let mut txn = self.pool.begin().await?;
        hook.admit(
            &mut txn,
            ScriptedProject::<K> {
                native_id: event.project,
                kind: PhantomData,
            },
        )
        .await?;
        let changed = write(
            &mut txn,
            hook.provider_instance_id,
            event.project,
            &event.item,
        )
        .await?;
        txn.commit().await?;
        Ok(Outcome::of_change(changed))
    }
}

impl<K: Kind> Monitors for Scripted<K> {
    async fn monitors(&self) -> Result<Vec<Monitor>, sqlx::Error> {
        let monitored: Vec<Monitored> = sqlx::query_as(
            "SELECT DISTINCT m.native_id, m.owner AS namespace, m.name
               FROM repository_to_monitor m
               JOIN connection c ON c.id = m.connection_id
              WHERE c.kind = $1 AND c.status = 'active' AND m.native_id IS NOT NULL",
        )
        .bind(K::KIND.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(monitored
            .into_iter()
            .map(|m| Monitor::GitlabProject {
                namespace: m.namespace,
                project: m.name,
            })
            .collect())
    }
}

/// Tunables of the scripted vendor's passes (the tests' own; no service default restated).
pub fn settings() -> SyncSettings {
    SyncSettings {
        page_size: 10,
        page_cap: 1_000,
        blast_radius: BlastRadius::default(),
        reconcile_cooldown: Duration::from_secs(3600),
        backfill: BackfillPolicy {
            max_passes: std::num::NonZeroU32::new(3),
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_millis(800),
        },
        clock_skew: lifecycle_core::forward::DEFAULT_CLOCK_SKEW,
        workspace_jobs: sync_engine::jobs::DEFAULT_WORKSPACE_JOBS,
    }
}

/// A workspace and its connection.
#[derive(Debug, Clone, Copy)]
pub struct Tenant {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    pub kind: ConnectionKind,
}

/// How a delivery is stored.
#[derive(Default)]
pub struct Stored {
    /// Published by reference to its stored body, not inline.
    pub by_reference: bool,
    /// An operator's replay of this earlier delivery (the same body again).
    pub replay_of: Option<Uuid>,
    /// The connection's raw bodies erased before the delivery is consumed.
    pub erased: bool,
}

/// A migrated test database with the scripted vendor's tables and one provider instance.
#[derive(Clone)]
pub struct Mirror {
    pub db: DatabaseConnection,
    pub pool: PgPool,
    /// The instance of the tenants of the mirror's kind.
    pub provider_instance_id: Uuid,
    pub kind: ConnectionKind,
    keyring: Keyring,
}

impl Mirror {
    pub async fn new(db: &DatabaseConnection, kind: ConnectionKind) -> Result<Mirror> {
        let pool = db.get_postgres_connection_pool().clone();
        sqlx::raw_sql(
            "CREATE TABLE scripted_item (
                provider_instance_id uuid NOT NULL, project bigint NOT NULL,
                native_id text NOT NULL, title text, version bigint NOT NULL,
                deleted_at timestamptz,
                PRIMARY KEY (provider_instance_id, project, native_id));
             CREATE TABLE scripted_scope (
                provider_instance_id uuid NOT NULL, project bigint NOT NULL,
                reconciled_at timestamptz,
                PRIMARY KEY (provider_instance_id, project));",
        )
        .execute(&pool)
        .await?;
        let mirror = Mirror {
            db: db.clone(),
            pool,
            provider_instance_id: Uuid::now_v7(),
            kind,
            keyring: Keyring::parse(&testkit::secret_key())?,
        };
        mirror.instance(mirror.provider_instance_id, kind).await?;
        Ok(mirror)
    }

    async fn instance(&self, id: Uuid, kind: ConnectionKind) -> Result<()> {
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, $2)")
            .bind(id)
            .bind(kind.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A workspace with a connection of `kind` in `status`: on the mirror's instance when it is
    /// of the mirror's kind, else on an instance of its own.
    pub async fn tenant(&self, kind: ConnectionKind, status: &str) -> Result<Tenant> {
        let (workspace_id, connection_id) = (Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'w')")
            .bind(workspace_id)
            .execute(&self.pool)
            .await?;
        let instance = if kind == self.kind {
            self.provider_instance_id
        } else {
            let other = Uuid::now_v7();
            self.instance(other, kind).await?;
            other
        };
        sqlx::query(
            "INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(connection_id)
        .bind(workspace_id)
        .bind(kind.as_str())
        .bind(status)
        .bind(instance)
        .execute(&self.pool)
        .await?;
        Ok(Tenant {
            workspace_id,
            connection_id,
            kind,
        })
    }

    /// A webhook endpoint of `tenant`'s connection.
    pub async fn endpoint(&self, tenant: Tenant) -> Result<EndpointIds> {
        self.endpoint_keyed(tenant, false).await
    }

    /// A webhook endpoint of `tenant`'s connection; `tenant_keyed` when its secret is one the
    /// tenant knows (what it delivers is then a hint).
    pub async fn endpoint_keyed(&self, tenant: Tenant, tenant_keyed: bool) -> Result<EndpointIds> {
        let endpoint = store::inbound::create_endpoint(
            &self.db,
            &self.keyring,
            NewEndpoint {
                workspace_id: tenant.workspace_id,
                connection_id: tenant.connection_id,
                kind: tenant.kind,
                registration: Registration::Registered,
                provider_ref: None,
                address_token: Some(Uuid::now_v7().simple().to_string()),
                tenant_keyed,
            },
            b"scripted-secret",
        )
        .await?;
        Ok(EndpointIds {
            endpoint_id: endpoint.id,
            workspace_id: tenant.workspace_id,
            connection_id: tenant.connection_id,
            kind: tenant.kind,
        })
    }

    /// A monitor of `tenant`'s connection bound to the project's native id.
    pub async fn monitor(&self, tenant: Tenant, (owner, name, native_id): Project) -> Result<()> {
        sqlx::query(
            "INSERT INTO repository_to_monitor (id, workspace_id, connection_id, owner, name, native_id)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.workspace_id)
        .bind(tenant.connection_id)
        .bind(owner)
        .bind(name)
        .bind(native_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Stores `body` as ingress does, received on `endpoint` and routed to `project`'s subject,
    /// for a relay to publish. Returns the inbound message id.
    pub async fn deliver(
        &self,
        endpoint: EndpointIds,
        (owner, name, _): Project,
        event: &str,
        body: Vec<u8>,
        how: Stored,
    ) -> Result<Uuid> {
        let dedup = match how.replay_of {
            Some(of) => Dedup::Replay {
                of,
                tenant_signed: false,
            },
            None => Dedup::Keys {
                event_id: Some(Uuid::now_v7().to_string()),
                digest_window: Duration::from_secs(3600),
                verified_by: None,
            },
        };
        let txn = self.db.begin().await?;
        let recorded = store::inbound::record(
            &txn,
            NewMessage {
                endpoint,
                verification: "token".into(),
                headers: BTreeMap::new(),
                body,
                event: event.into(),
                subject: subject::gitlab_project(owner, name, event)?,
                dedup,
                retention: Duration::from_secs(24 * 3600),
                inline_body_max: if how.by_reference { 0 } else { usize::MAX },
                relay_hold: Duration::ZERO,
            },
        )
        .await?;
        let Recorded::Accepted(accepted) = recorded else {
            panic!("the delivery was not stored: {recorded:?}");
        };
        if how.erased {
            // Erasure of the connection's raw bodies, before its consumer reads this one.
            store::inbound::erase_bodies(&txn, endpoint.connection_id).await?;
        }
        txn.commit().await?;
        Ok(accepted.message_id)
    }

    pub async fn count(&self, sql: &'static str) -> Result<i64> {
        Ok(sqlx::query_scalar(sql).fetch_one(&self.pool).await?)
    }

    /// How many notes are live.
    pub async fn live(&self) -> Result<i64> {
        self.count("SELECT count(*) FROM scripted_item WHERE deleted_at IS NULL")
            .await
    }

    /// The tombstoned notes' ids, in order.
    pub async fn tombstoned(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT native_id FROM scripted_item WHERE deleted_at IS NOT NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The live notes of a project: (id, title, version).
    pub async fn items(&self, project: i64) -> Result<Vec<(String, String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT native_id, title, version FROM scripted_item
              WHERE project = $1 AND deleted_at IS NULL ORDER BY native_id",
        )
        .bind(project)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The details of the connection activity `activity`, oldest first.
    pub async fn activities(&self, activity: &str) -> Result<Vec<serde_json::Value>> {
        Ok(sqlx::query_scalar(
            "SELECT detail FROM connection_activity WHERE activity = $1 ORDER BY created_at, id",
        )
        .bind(activity)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Waits until every outbox row is published and the durable `durable` of `stream` has settled
/// all of it (nothing pending or unacknowledged, three times in a row).
pub async fn settle(bus: &Bus, pool: &PgPool, stream: Stream, durable: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ns = bus.namespace();
    let mut quiet = 0;
    while quiet < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{durable} did not settle"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(pool)
            .await?;
        let mut js_stream = bus.jetstream().get_stream(ns.name(stream.name())).await?;
        let stored = js_stream.info().await?.state.messages;
        let busy = unpublished > 0
            || match js_stream.consumer_info(ns.name(durable)).await {
                Ok(info) => info.num_pending > 0 || info.num_ack_pending > 0,
                Err(_) => stored > 0,
            };
        quiet = if busy { 0 } else { quiet + 1 };
    }
    Ok(())
}

/// A stored note of a project as [`Mirror::items`] reads it.
pub fn row(n: usize, title: &str, version: i64) -> (String, String, i64) {
    (note_id(n), title.to_owned(), version)
}

/// A test database with one active connection of kind `kind` monitoring [`GENERAL`].
pub struct Fixture {
    _db: testkit::TestDb,
    pub mirror: Mirror,
    pub tenant: Tenant,
}

impl std::ops::Deref for Fixture {
    type Target = Mirror;

    fn deref(&self) -> &Mirror {
        &self.mirror
    }
}

impl Fixture {
    pub async fn new(kind: ConnectionKind) -> Result<Fixture> {
        let db = testkit::TestDb::new().await?;
        let mirror = Mirror::new(&db.db, kind).await?;
        let tenant = mirror.tenant(kind, "active").await?;
        mirror.monitor(tenant, GENERAL).await?;
        Ok(Fixture {
            _db: db,
            mirror,
            tenant,
        })
    }

    /// An engine over the scripted vendor, claiming as `replica` with leases of `lease`.
    pub fn engine<K: Kind>(
        &self,
        source: &Arc<ScriptedSource>,
        replica: &str,
        lease: Duration,
    ) -> Engine<Scripted<K>> {
        Engine::new(
            Arc::new(Scripted::new(self.pool.clone(), source.clone())),
            self.pool.clone(),
            replica,
            lease,
            settings(),
        )
    }

    pub async fn queue(&self, job_type: &str, trigger: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(id).bind(self.tenant.connection_id).bind(self.tenant.workspace_id).bind(self.kind.as_str())
            .bind(job_type).bind(trigger).execute(&self.pool).await?;
        Ok(id)
    }

    /// Queues, claims and runs a job of `job_type` on one replica.
    pub async fn run<K: Kind>(
        &self,
        job_type: &str,
        trigger: &str,
        source: &Arc<ScriptedSource>,
    ) -> Result<JobOutcome> {
        let id = self.queue(job_type, trigger).await?;
        let engine = self.engine::<K>(source, "replica-a", Duration::from_secs(30));
        let job: ClaimedJob = engine.jobs.claim(id).await?.job().expect("claimable");
        Ok(engine
            .run(&job, self.provider_instance_id, source.clone())
            .await?)
    }
}
