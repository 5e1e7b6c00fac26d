//! A second vendor that exists only in tests: one scope, one item class, string ids, pages served
//! from a script with injectable faults, written to a table the test creates. It implements
//! [`Vendor`] and nothing else, so what it proves of the engine needs no engine change.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use lifecycle_core::deletion::TombstonePlan;
use lifecycle_core::listing::{ListingFault, ListingPage};
use sqlx::PgPool;
use store::entity::{ConnectionKind, connection};
use sync_engine::{
    ClaimedJob, Engine, JobOutcome, Listed, Pass, ReadError, ReadStop, Scopes, SyncSettings, Vendor,
};
use uuid::Uuid;

/// The connection kind the scripted vendor runs as.
pub trait Kind: Send + Sync + 'static {
    const KIND: ConnectionKind;
}

/// Runs every job type (no service claims GitLab jobs in these tests).
pub struct Gitlab;
impl Kind for Gitlab {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
}

/// Refuses BACKFILL, as lifecycle-core declares for Outline.
pub struct Outline;
impl Kind for Outline {
    const KIND: ConnectionKind = ConnectionKind::Outline;
}

/// The one scope a scripted connection monitors.
pub const SCOPE: &str = "general";

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
}

/// Something the test does while the script serves a page call (cancel the job, take it over).
pub type Hook = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub body: String,
    pub version: i64,
}

pub fn item(n: usize) -> Item {
    Item {
        id: format!("note-{n:04}"),
        body: format!("body {n}"),
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
}

impl fmt::Display for ScriptedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScriptedError::Unavailable => "the scripted vendor answered HTTP 503",
            ScriptedError::Gone => "the scope is gone",
            ScriptedError::Quota => "the scripted quota is spent",
        })
    }
}

impl ReadError for ScriptedError {
    fn fault(&self) -> ListingFault {
        match self {
            ScriptedError::Unavailable => ListingFault::HttpError(503),
            ScriptedError::Gone => ListingFault::HttpError(404),
            ScriptedError::Quota => ListingFault::BudgetExhausted,
        }
    }

    fn stops(&self) -> ReadStop {
        match self {
            ScriptedError::Unavailable => ReadStop::Pass(format!("failing: {self}")),
            ScriptedError::Gone => ReadStop::Listing,
            ScriptedError::Quota => ReadStop::Job(format!("quota: {self}")),
        }
    }
}

/// A scope as a pass walks it.
#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.name)
    }
}

/// The scripted vendor, writing `scripted_item` rows of the job's connection.
pub struct Scripted<K: Kind = Gitlab> {
    pub pool: PgPool,
    pub source: Arc<ScriptedSource>,
    kind: PhantomData<K>,
}

impl<K: Kind> Scripted<K> {
    pub fn new(pool: PgPool, source: Arc<ScriptedSource>) -> Self {
        Scripted {
            pool,
            source,
            kind: PhantomData,
        }
    }
}

#[async_trait::async_trait]
impl<K: Kind> Vendor for Scripted<K> {
    const KIND: ConnectionKind = K::KIND;
    const SCOPES: &'static str = "channels";
    const CLASSES: &'static [Note] = &[Note];

    type Source = Arc<ScriptedSource>;
    type Scope = Channel;
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
        _: &Pass<'_>,
        _: &Arc<ScriptedSource>,
    ) -> Result<Result<Scopes<Channel>, ScriptedError>, sqlx::Error> {
        Ok(Ok(Scopes {
            scopes: vec![Channel { name: SCOPE.into() }],
            unresolved: None,
        }))
    }

    async fn read_page(
        &self,
        source: &Arc<ScriptedSource>,
        _: &Channel,
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
        channel: &mut Channel,
        _: Note,
        page: &ScriptedPage,
    ) -> Result<u64, sqlx::Error> {
        let mut txn = self.pool.begin().await?;
        let mut applied = 0;
        for item in &page.items {
            // Forward-only: an older version changes nothing.
            applied += sqlx::query(
                "INSERT INTO scripted_item (connection_id, scope, native_id, body, version)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (connection_id, scope, native_id) DO UPDATE
                    SET body = EXCLUDED.body, version = EXCLUDED.version, deleted_at = NULL
                  WHERE scripted_item.version <= EXCLUDED.version",
            )
            .bind(pass.job.connection_id)
            .bind(&channel.name)
            .bind(&item.id)
            .bind(&item.body)
            .bind(item.version)
            .execute(&mut *txn)
            .await?
            .rows_affected();
        }
        txn.commit().await?;
        Ok(applied)
    }

    async fn live_ids(
        &self,
        pass: &Pass<'_>,
        channel: &mut Channel,
        _: Note,
    ) -> Result<Vec<String>, sqlx::Error> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT native_id FROM scripted_item
              WHERE connection_id = $1 AND scope = $2 AND deleted_at IS NULL",
        )
        .bind(pass.job.connection_id)
        .bind(&channel.name)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn tombstone(
        &self,
        pass: &Pass<'_>,
        channel: &Channel,
        _: Note,
        plan: &TombstonePlan<String>,
    ) -> Result<u64, sqlx::Error> {
        let ids: Vec<String> = plan.ids().iter().cloned().collect();
        Ok(sqlx::query(
            "UPDATE scripted_item SET deleted_at = now(), body = NULL
              WHERE connection_id = $1 AND scope = $2 AND native_id = ANY($3)
                AND deleted_at IS NULL",
        )
        .bind(pass.job.connection_id)
        .bind(&channel.name)
        .bind(&ids)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    fn scope_detail(&self, channel: &Channel) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        detail.insert("scope".into(), channel.name.clone().into());
        detail
    }

    async fn reconciled_within(
        &self,
        pass: &Pass<'_>,
        channel: &Channel,
        cooldown: Duration,
    ) -> Result<bool, sqlx::Error> {
        let row: Option<(bool,)> = sqlx::query_as(
            "SELECT reconciled_at > now() - make_interval(secs => $3) FROM scripted_scope
              WHERE connection_id = $1 AND scope = $2",
        )
        .bind(pass.job.connection_id)
        .bind(&channel.name)
        .bind(cooldown.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some_and(|(cooling,)| cooling))
    }

    async fn mark_reconciled(&self, pass: &Pass<'_>, channel: &Channel) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO scripted_scope (connection_id, scope, reconciled_at) VALUES ($1, $2, now())
             ON CONFLICT (connection_id, scope) DO UPDATE SET reconciled_at = now()",
        )
        .bind(pass.job.connection_id)
        .bind(&channel.name)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// A test database with one active connection of kind `K` and the scripted vendor's tables.
pub struct Fixture {
    _db: testkit::TestDb,
    pub pool: PgPool,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub provider_instance_id: Uuid,
    pub kind: ConnectionKind,
}

impl Fixture {
    pub async fn new(kind: ConnectionKind) -> Result<Fixture> {
        let db = testkit::TestDb::new().await?;
        let pool = db.db.get_postgres_connection_pool().clone();
        sqlx::raw_sql(
            "CREATE TABLE scripted_item (
                connection_id uuid NOT NULL, scope text NOT NULL, native_id text NOT NULL,
                body text, version bigint NOT NULL, deleted_at timestamptz,
                PRIMARY KEY (connection_id, scope, native_id));
             CREATE TABLE scripted_scope (
                connection_id uuid NOT NULL, scope text NOT NULL, reconciled_at timestamptz,
                PRIMARY KEY (connection_id, scope));",
        )
        .execute(&pool)
        .await?;
        let (workspace_id, provider_instance_id, connection_id) =
            (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        sqlx::query("INSERT INTO workspace (id, name) VALUES ($1, 'acme')")
            .bind(workspace_id)
            .execute(&pool)
            .await?;
        sqlx::query("INSERT INTO provider_instance (id, kind) VALUES ($1, $2)")
            .bind(provider_instance_id)
            .bind(kind.as_str())
            .execute(&pool)
            .await?;
        sqlx::query("INSERT INTO connection (id, workspace_id, kind, status, provider_instance_id) VALUES ($1, $2, $3, 'active', $4)")
            .bind(connection_id).bind(workspace_id).bind(kind.as_str()).bind(provider_instance_id)
            .execute(&pool).await?;
        Ok(Fixture {
            _db: db,
            pool,
            connection_id,
            workspace_id,
            provider_instance_id,
            kind,
        })
    }

    pub fn settings() -> SyncSettings {
        SyncSettings {
            page_size: 10,
            backfill: sync_engine::BackfillPolicy {
                max_passes: 3,
                first_backoff: Duration::from_millis(200),
                max_backoff: Duration::from_millis(800),
            },
            ..Default::default()
        }
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
            Self::settings(),
        )
    }

    pub async fn queue(&self, job_type: &str, trigger: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        sqlx::query("INSERT INTO sync_job (id, connection_id, workspace_id, kind, job_type, trigger) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(id).bind(self.connection_id).bind(self.workspace_id).bind(self.kind.as_str())
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
        let job: ClaimedJob = engine.jobs.claim(id).await?.expect("claimable");
        Ok(engine
            .run(&job, self.provider_instance_id, source.clone())
            .await?)
    }

    pub async fn count(&self, sql: &'static str) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&self.pool).await?;
        Ok(n)
    }

    pub async fn live(&self) -> Result<i64> {
        self.count("SELECT count(*) FROM scripted_item WHERE deleted_at IS NULL")
            .await
    }

    pub async fn tombstoned(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT native_id FROM scripted_item WHERE deleted_at IS NOT NULL ORDER BY native_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    pub async fn activities(&self, activity: &str) -> Result<Vec<serde_json::Value>> {
        let rows: Vec<(serde_json::Value,)> = sqlx::query_as(
            "SELECT detail FROM connection_activity WHERE activity = $1 ORDER BY created_at, id",
        )
        .bind(activity)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(d,)| d).collect())
    }
}
