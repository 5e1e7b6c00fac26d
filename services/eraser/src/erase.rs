//! The one erasure path: a disconnection erases its connection, a purge closes the workspace and
//! erases each of its connections through the same function, then the workspace's own rows and
//! subjects, then marks it purged. Disconnect and purge therefore reach the same end state.
//!
//! A connection's erasure, step by step (each one resumable, see [`crate::records`]):
//! 1. capture the repositories its monitors are bound to (the binding half of the monitor-scope
//!    rule: a disconnected connection authorises nothing, yet its monitors still name them),
//!    each noting whether another monitor of the same workspace still covers it;
//! 2. remove its monitors;
//! 3. per captured repository, in its own transaction with the repository row locked: the
//!    workspace's derived rows of it when the workspace lost it, then the orphan guard (no
//!    monitor anywhere covers it under the rule) and, if orphaned, everything under it, derived
//!    rows first, tombstoned rows included, the repository last;
//! 4. the organization tier of each organization it binds that no other live workspace binds
//!    (the tier's own guard; no repository cascade reaches it), then every holder's rows of
//!    the connection, in holder order (its bindings among them);
//! 5. its stream messages, by sequence from the stream ledger, and the subjects it owns alone.

use std::collections::BTreeSet;

use lifecycle_core::erasure::{
    ErasureStep, ErasureTrigger, OrganizationBinding, RepositoryFate, plan_scm_erasure,
    repository_fate,
};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, FromQueryResult,
    QueryOrder, Statement, TransactionTrait,
};
use store::entity::{ConnectionStatus, WorkspaceStatus, connection, workspace};
use store::erasure::{Erasable, ErasableTable, Selector};
use uuid::Uuid;

use crate::records::{self, ErasureRecord, Step};
use crate::streams;

/// Why an erasure stopped.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    /// The database failed; retrying resumes where it stopped.
    #[error("database: {0}")]
    Db(#[from] DbErr),
    /// The same, through sqlx (a holder's subject lookup).
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    /// JetStream failed; retrying resumes where it stopped.
    #[error("stream: {0}")]
    Stream(String),
    /// The trigger names something that must not be erased (or does not exist): never retried.
    #[error("{0}")]
    Refused(String),
}

/// How an erasure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (to its end) now.
    Erased,
    /// It had already finished: a repeated trigger changes nothing.
    AlreadyDone,
}

/// Runs erasures over the registered holders.
#[derive(Clone)]
pub struct Eraser {
    pub db: DatabaseConnection,
    pub bus: bus::Bus,
    /// Every holder of third-party content, normally [`vendors::holders`].
    pub holders: &'static [&'static Erasable],
}

/// The text of `$1`-style parameters for one selector, as the variant documents them.
fn delete_sql(table: &str, predicate: &str) -> String {
    format!("DELETE FROM \"{table}\" WHERE {predicate}")
}

#[derive(FromQueryResult)]
struct Captured {
    repository_id: Uuid,
    workspace_lost: bool,
}

/// An organization the erased connection binds, and how many other live workspaces bind it.
#[derive(FromQueryResult)]
struct Bound {
    organization_id: Uuid,
    others: i64,
}

#[derive(FromQueryResult)]
struct Exists {
    found: bool,
}

impl Eraser {
    /// The holders of content of `kind` (every kind with `None`), in their order.
    pub fn holders_of(
        &self,
        kind: Option<store::entity::ConnectionKind>,
    ) -> Vec<&'static Erasable> {
        let mut holders: Vec<_> = self
            .holders
            .iter()
            .filter(|h| kind.is_none_or(|k| h.holds(k)))
            .copied()
            .collect();
        holders.sort_by_key(|h| h.order);
        holders
    }

    /// Erases everything of a disconnected connection; a finished erasure is not run again.
    #[tracing::instrument(skip(self), fields(workspace_id))]
    pub async fn erase_connection(
        &self,
        connection_id: Uuid,
        trigger: ErasureTrigger,
    ) -> Result<Outcome, EraseError> {
        let conn = connection::Entity::find_by_id(connection_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| {
                EraseError::Refused(format!("connection {connection_id} does not exist"))
            })?;
        tracing::Span::current().record("workspace_id", tracing::field::display(conn.workspace_id));
        // Fail closed: only a connection that gave up its access is erased.
        if conn.status != ConnectionStatus::Disconnected {
            return Err(EraseError::Refused(format!(
                "connection {connection_id} is {}; only a disconnected connection is erased",
                store::lifecycle::status_name(conn.status)
            )));
        }
        let record = records::open(&self.db, conn.workspace_id, Some(conn.id), trigger).await?;
        if record.is_done() {
            return Ok(Outcome::AlreadyDone);
        }
        let holders = self.holders_of(Some(conn.kind));
        self.capture(&record, &conn, &holders).await?;
        self.remove_monitors(&record, &conn, &holders).await?;
        self.erase_repositories(&record, &conn, &holders).await?;
        self.erase_organization_tiers(&record, &conn, trigger, &holders)
            .await?;
        self.erase_connection_rows(&record, &conn, &holders).await?;
        streams::erase_connection_messages(self, &record, &conn, &holders).await?;
        if let Some(step) = Step::begin(&self.db, record.id, "done").await? {
            step.finish_erasure().await?;
        }
        tracing::info!(%connection_id, "connection erased");
        Ok(Outcome::Erased)
    }

    /// Purges a workspace whose purge started: closes it (again: control-api already did, in the
    /// purge's own transaction), erases each connection, then the workspace's own rows and
    /// subjects, and marks it purged.
    #[tracing::instrument(skip(self))]
    pub async fn purge_workspace(&self, workspace_id: Uuid) -> Result<Outcome, EraseError> {
        let ws = workspace::Entity::find_by_id(workspace_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| {
                EraseError::Refused(format!("workspace {workspace_id} does not exist"))
            })?;
        match ws.status {
            WorkspaceStatus::Purged => return Ok(Outcome::AlreadyDone),
            WorkspaceStatus::Active => {
                return Err(EraseError::Refused(format!(
                    "workspace {workspace_id} is active; only a workspace being purged is erased"
                )));
            }
            WorkspaceStatus::Purging => {}
        }
        let txn = self.db.begin().await?;
        store::lifecycle::close_workspace(&txn, workspace_id, "eraser").await?;
        txn.commit().await?;
        let record =
            records::open(&self.db, workspace_id, None, ErasureTrigger::WorkspacePurge).await?;
        let connections = connection::in_workspace(workspace_id)
            .order_by_asc(connection::Column::Id)
            .all(&self.db)
            .await?;
        for conn in connections {
            self.erase_connection(conn.id, ErasureTrigger::WorkspacePurge)
                .await?;
        }
        let holders = self.holders_of(None);
        for holder in &holders {
            for t in holder.tables_where(|s| matches!(s, Selector::Workspace(_))) {
                let Selector::Workspace(predicate) = t.selector else {
                    continue;
                };
                let name = format!("workspace:{}:{}", holder.holder, t.table);
                if let Some(mut step) = Step::begin(&self.db, record.id, &name).await? {
                    let n = step
                        .txn()
                        .execute_raw(Statement::from_sql_and_values(
                            DbBackend::Postgres,
                            delete_sql(t.table, predicate),
                            [workspace_id.into()],
                        ))
                        .await?
                        .rows_affected();
                    step.add(format!("table:{}", t.table), n);
                    step.finish().await?;
                }
            }
        }
        streams::erase_workspace_messages(self, &record, &holders).await?;
        if let Some(step) = Step::begin(&self.db, record.id, "purged").await? {
            // Terminal: the workspace is purged in the transaction that finishes its erasure.
            step.txn()
                .execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "UPDATE workspace SET status = 'purged', updated_at = now() \
                     WHERE id = $1 AND status = 'purging'",
                    [workspace_id.into()],
                ))
                .await?;
            step.finish_erasure().await?;
        }
        tracing::info!(%workspace_id, "workspace purged");
        Ok(Outcome::Erased)
    }

    /// Step 1: the repositories the connection's monitors are bound to, captured once.
    async fn capture(
        &self,
        record: &ErasureRecord,
        conn: &connection::Model,
        holders: &[&'static Erasable],
    ) -> Result<(), EraseError> {
        let guarded = holders.iter().any(|h| {
            h.tables_where(|s| matches!(s, Selector::Monitors(_)))
                .next()
                .is_some()
        });
        if !guarded {
            return Ok(());
        }
        let Some(mut step) = Step::begin(&self.db, record.id, "capture").await? else {
            return Ok(());
        };
        // A repository stays the workspace's while another of its monitors covers it.
        let sql = format!(
            "INSERT INTO erasure_repository (erasure_id, repository_id, workspace_lost)
             SELECT DISTINCT $1::uuid, r.id,
                    NOT EXISTS (SELECT 1 FROM repository_to_monitor m, connection c
                                 WHERE m.workspace_id = $3 AND m.connection_id <> $2
                                   AND {covers})
               FROM repository_to_monitor m, connection c, repository r
              WHERE m.connection_id = $2 AND {binds}
             ON CONFLICT DO NOTHING",
            covers = store::scm_scope::covers_predicate(),
            binds = store::scm_scope::binds_predicate(),
        );
        let n = step
            .txn()
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [record.id.into(), conn.id.into(), conn.workspace_id.into()],
            ))
            .await?
            .rows_affected();
        step.add("repositories_captured", n);
        step.finish().await?;
        Ok(())
    }

    /// Step 2: the connection's monitors go (the captured set already holds what they covered).
    async fn remove_monitors(
        &self,
        record: &ErasureRecord,
        conn: &connection::Model,
        holders: &[&'static Erasable],
    ) -> Result<(), EraseError> {
        for holder in holders {
            for t in holder.tables_where(|s| matches!(s, Selector::Monitors(_))) {
                let Selector::Monitors(predicate) = t.selector else {
                    continue;
                };
                self.delete_step(
                    record,
                    &format!("monitors:{}", t.table),
                    t.table,
                    predicate,
                    conn.id,
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Step 3: each captured repository, under the orphan guard.
    async fn erase_repositories(
        &self,
        record: &ErasureRecord,
        conn: &connection::Model,
        holders: &[&'static Erasable],
    ) -> Result<(), EraseError> {
        let pending = Captured::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT repository_id, workspace_lost FROM erasure_repository
              WHERE erasure_id = $1 AND fate IS NULL ORDER BY repository_id",
            [record.id.into()],
        ))
        .all(&self.db)
        .await?;
        for captured in pending {
            let name = format!("repository:{}", captured.repository_id);
            let Some(mut step) = Step::begin(&self.db, record.id, &name).await? else {
                continue;
            };
            let repository = captured.repository_id;
            let (fate, counts) = self
                .guard_repository(
                    step.txn(),
                    holders,
                    conn.workspace_id,
                    repository,
                    captured.workspace_lost,
                )
                .await?;
            for (place, n) in counts {
                step.add(place, n);
            }
            let fate_name = match fate {
                RepositoryFate::Delete => "deleted",
                RepositoryFate::Keep => "kept",
            };
            step.add(format!("repositories_{fate_name}"), 1);
            step.txn()
                .execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "UPDATE erasure_repository SET fate = $3
                      WHERE erasure_id = $1 AND repository_id = $2",
                    [record.id.into(), repository.into(), fate_name.into()],
                ))
                .await?;
            step.finish().await?;
        }
        Ok(())
    }

    /// The orphan guard for one repository a connection of `workspace_id` stopped monitoring,
    /// in the caller's transaction with the repository row locked (ordering every eraser
    /// deciding it): the workspace's derived rows of it when the workspace lost it, then, when no
    /// monitor anywhere covers it under the monitor-scope rule, everything under it, the
    /// repository last. Returns its fate and what each table lost.
    async fn guard_repository<C: ConnectionTrait>(
        &self,
        txn: &C,
        holders: &[&'static Erasable],
        workspace_id: Uuid,
        repository: Uuid,
        workspace_lost: bool,
    ) -> Result<(RepositoryFate, Vec<(String, u64)>), DbErr> {
        let mut counts = Vec::new();
        let present = txn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT id FROM repository WHERE id = $1 FOR UPDATE",
                [repository.into()],
            ))
            .await?
            .is_some();
        if workspace_lost {
            for holder in holders {
                for t in holder.tables_where(|s| matches!(s, Selector::WorkspaceRepository(_))) {
                    let Selector::WorkspaceRepository(predicate) = t.selector else {
                        continue;
                    };
                    let n = txn
                        .execute_raw(Statement::from_sql_and_values(
                            DbBackend::Postgres,
                            delete_sql(t.table, predicate),
                            [workspace_id.into(), repository.into()],
                        ))
                        .await?
                        .rows_affected();
                    counts.push((format!("table:{}", t.table), n));
                }
            }
        }
        // Orphan guard: the same monitor-scope rule, over every workspace's monitors.
        let monitored_elsewhere = present
            && Exists::find_by_statement(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT EXISTS (SELECT 1 FROM repository r, repository_to_monitor m,
                                           connection c
                                     WHERE r.id = $1 AND {covers}) AS found",
                    covers = store::scm_scope::covers_predicate()
                ),
                [repository.into()],
            ))
            .one(txn)
            .await?
            .is_some_and(|e| e.found);
        let fate = repository_fate(monitored_elsewhere);
        if fate == RepositoryFate::Delete && present {
            for holder in holders {
                for t in holder.tables_where(|s| matches!(s, Selector::Repository(_))) {
                    let Selector::Repository(predicate) = t.selector else {
                        continue;
                    };
                    let n = txn
                        .execute_raw(Statement::from_sql_and_values(
                            DbBackend::Postgres,
                            delete_sql(t.table, predicate),
                            [repository.into()],
                        ))
                        .await?
                        .rows_affected();
                    counts.push((format!("table:{}", t.table), n));
                }
            }
        }
        Ok((fate, counts))
    }

    /// Repositories that left a live connection's reach (its monitors of them are gone): each
    /// under the orphan guard, in its own transaction. Repeating it changes nothing more.
    #[tracing::instrument(skip(self, repositories), fields(repositories = repositories.len()))]
    pub async fn release(
        &self,
        connection_id: Uuid,
        workspace_id: Uuid,
        kind: store::entity::ConnectionKind,
        repositories: &[Uuid],
    ) -> Result<Vec<(Uuid, RepositoryFate)>, EraseError> {
        let holders = self.holders_of(Some(kind));
        let mut fates = Vec::with_capacity(repositories.len());
        for repository in repositories {
            let txn = self.db.begin().await?;
            // The workspace lost it unless another of its monitors still covers it.
            let still_covered = Exists::find_by_statement(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT EXISTS (SELECT 1 FROM repository r, repository_to_monitor m,
                                           connection c
                                     WHERE r.id = $1 AND m.workspace_id = $2 AND {covers}) AS found",
                    covers = store::scm_scope::covers_predicate()
                ),
                [(*repository).into(), workspace_id.into()],
            ))
            .one(&txn)
            .await?
            .is_some_and(|e| e.found);
            let (fate, _) = self
                .guard_repository(&txn, &holders, workspace_id, *repository, !still_covered)
                .await?;
            txn.commit().await?;
            tracing::info!(%connection_id, %repository, ?fate, "released repository guarded");
            fates.push((*repository, fate));
        }
        Ok(fates)
    }

    /// Step 3b: the organization tier of each organization the connection binds, under the
    /// tier's own guard: `plan_scm_erasure` erases it only when no other live workspace (a
    /// connection not disconnected, in a workspace not being purged) binds it. The bindings
    /// themselves go with the connection's rows (step 4), after the tier.
    async fn erase_organization_tiers(
        &self,
        record: &ErasureRecord,
        conn: &connection::Model,
        trigger: ErasureTrigger,
        holders: &[&'static Erasable],
    ) -> Result<(), EraseError> {
        let tables: Vec<&ErasableTable> = holders
            .iter()
            .flat_map(|h| h.tables_where(|s| matches!(s, Selector::Organization(_))))
            .collect();
        if tables.is_empty() {
            return Ok(());
        }
        let bound = Bound::find_by_statement(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT b.organization_id,
                    (SELECT count(DISTINCT c.workspace_id) FROM organization_binding o
                       JOIN connection c ON c.id = o.connection_id
                       JOIN workspace w ON w.id = c.workspace_id
                      WHERE o.organization_id = b.organization_id
                        AND c.workspace_id <> $2 AND c.status <> 'disconnected'
                        AND w.status = 'active') AS others
               FROM organization_binding b
              WHERE b.connection_id = $1
              ORDER BY b.organization_id",
            [conn.id.into(), conn.workspace_id.into()],
        ))
        .all(&self.db)
        .await?;
        let bindings: Vec<OrganizationBinding<Uuid>> = bound
            .into_iter()
            .map(|b| OrganizationBinding {
                organization: b.organization_id,
                other_live_workspaces: usize::try_from(b.others).unwrap_or(usize::MAX),
            })
            .collect();
        let plan =
            plan_scm_erasure::<Uuid, Uuid>(trigger, &BTreeSet::new(), &BTreeSet::new(), &bindings);
        for step in plan.steps {
            let ErasureStep::EraseOrganizationTier(organization) = step else {
                continue;
            };
            for t in &tables {
                let Selector::Organization(predicate) = t.selector else {
                    continue;
                };
                let name = format!("organization:{organization}:{}", t.table);
                self.delete_step(record, &name, t.table, predicate, organization)
                    .await?;
            }
        }
        Ok(())
    }

    /// Step 4: every holder's rows of the connection, holder by holder, table by table.
    async fn erase_connection_rows(
        &self,
        record: &ErasureRecord,
        conn: &connection::Model,
        holders: &[&'static Erasable],
    ) -> Result<(), EraseError> {
        for holder in holders {
            for t in holder.tables_where(|s| matches!(s, Selector::Connection(_))) {
                let Selector::Connection(predicate) = t.selector else {
                    continue;
                };
                let name = format!("rows:{}:{}", holder.holder, t.table);
                self.delete_step(record, &name, t.table, predicate, conn.id)
                    .await?;
            }
        }
        Ok(())
    }

    /// One step deleting `table`'s rows selected by `predicate` over `$1 = id`.
    async fn delete_step(
        &self,
        record: &ErasureRecord,
        name: &str,
        table: &str,
        predicate: &str,
        id: Uuid,
    ) -> Result<(), EraseError> {
        let Some(mut step) = Step::begin(&self.db, record.id, name).await? else {
            return Ok(());
        };
        let n = step
            .txn()
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                delete_sql(table, predicate),
                [id.into()],
            ))
            .await?
            .rows_affected();
        step.add(format!("table:{table}"), n);
        step.finish().await?;
        Ok(())
    }
}
