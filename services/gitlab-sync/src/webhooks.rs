//! GitLab webhooks, consumed from JetStream after ingress stored them, through the shared front
//! half (`sync_engine::webhook`). [`GitlabWebhooks`] decodes Issue, Merge Request (approval acts
//! included, [`approvals`]), Note, Pipeline ([`pipelines`]) and Push Hooks ([`pushes`]; any
//! other event is acknowledged and ignored) and writes them through the SCM mirror's
//! forward-only steps, each in one transaction that first admits the delivery for the project
//! by its native id (`scm_mirror::admission::GitlabProject`): a redelivered, late or reordered
//! hook only ever moves the mirror forward. Project, subgroup and member events (named by
//! `event_name`; on the shared endpoint `gitlab.<rootGroup>.?.<event>`) write nothing of their
//! payload: renames and transfers re-key by the path GitLab reports for the native id
//! ([`projects`]), member changes are read back for the connection's own organization
//! ([`members`]).
//!
//! Two consumers: the hooks we registered (`gitlab.?connection.<id>.<event>`, consumer
//! [`filters::CONNECTION_EVENTS_CONSUMER`]), whose deliveries about a project not discovered
//! yet go through [`route`] admission; and operator-created hooks on the shared endpoint
//! (`gitlab.<namespace>.<project>.<event>`, [`filters::PROJECT_EVENTS_CONSUMER`], following the
//! monitors), which only ever write to monitored projects.

pub mod approvals;
pub mod filters;
pub mod hints;
pub mod items;
pub mod members;
pub mod notes;
pub mod payload;
pub mod pipelines;
pub mod projects;
pub mod pushes;
pub mod readiness;
pub mod route;

use scm_mirror::admission::GitlabProject;
use sqlx::{PgPool, Postgres, Transaction};
use store::admission::Refusal;
use store::entity::ConnectionKind;
use sync_engine::webhook::{Outcome, Webhook, WebhookApply, WebhookError, hint, parse};
use uuid::Uuid;

use crate::mirror::project_header;
use payload::HookProject;

/// gitlab-sync's [`WebhookApply`]: GitLab's hooks by `object_kind`, each to its writer.
pub struct GitlabWebhooks {
    pub pool: PgPool,
    /// Route admission of undiscovered projects; `None` on the shared endpoint's consumer,
    /// where a hook writes only to projects already monitored.
    pub route: Option<route::RouteAdmission>,
    /// Builds the delivering connection's reader for the item a hint names.
    pub readers: crate::source::ClientFactory,
    /// The readers follow-up reads reuse while their connection's inputs are unchanged.
    pub clients: std::sync::Arc<crate::source::Readers>,
    /// The confirming reads of hints, per item ([`hints`]).
    pub confirmations: hint::Confirmations,
    /// How far past a confirming read a version may be dated.
    pub clock_skew: std::time::Duration,
}

/// A GitLab hook decoded for its event.
pub enum Event {
    Issue(payload::IssueHook),
    MergeRequest(payload::MergeRequestHook),
    Note(Box<payload::NoteHook>),
    Pipeline(payload::PipelineHook),
    Push(payload::PushHook),
    /// A project's creation, deletion, rename or transfer ([`projects`]).
    Project(projects::ProjectEvent),
    /// A subgroup's rename ([`projects`]).
    Subgroup(projects::SubgroupEvent),
    /// A member added, removed or changed ([`members`]).
    Member(members::MemberEvent),
}

impl WebhookApply for GitlabWebhooks {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;
    type Payload = Event;

    fn decode(&self, hook: &Webhook<'_>) -> Result<Option<Event>, WebhookError> {
        // Ingress names the event by the payload's `object_kind`.
        Ok(Some(match hook.event {
            "issue" => Event::Issue(parse(hook)?),
            "merge_request" => Event::MergeRequest(parse(hook)?),
            "note" => Event::Note(Box::new(parse(hook)?)),
            "pipeline" => Event::Pipeline(parse(hook)?),
            "push" => Event::Push(parse(hook)?),
            e if projects::PROJECT_EVENTS.contains(&e) => Event::Project(parse(hook)?),
            e if projects::SUBGROUP_EVENTS.contains(&e) => Event::Subgroup(parse(hook)?),
            e if members::MEMBER_EVENTS.contains(&e) => Event::Member(parse(hook)?),
            _ => return Ok(None),
        }))
    }

    async fn apply(&self, hook: &Webhook<'_>, event: Event) -> Result<Outcome, WebhookError> {
        // A claim (an endpoint whose secret a tenant knows) writes nothing of its own: GitLab
        // is asked for what it names.
        // Project and group events write nothing of their payload, claim or not: GitLab is
        // asked with the connection's token for what they name.
        if hook.is_hint() && !event.asks_gitlab() {
            return match event.hinted() {
                Some(hinted) => hints::confirm(self, hook, hinted).await,
                None => Ok(Outcome::Ignored),
            };
        }
        match event {
            Event::Issue(e) => items::issue(self, hook, e).await,
            Event::MergeRequest(e) => {
                let asked = readiness::Asked::of(&e);
                let outcome = match approvals::act_kind(e.object_attributes.action.as_deref()) {
                    Some(kind) => approvals::act(self, hook, kind, e).await?,
                    None => items::merge_request(self, hook, e).await?,
                };
                // Readiness is read after the hook's transaction committed.
                let read = match asked {
                    Some(asked) => readiness::after_hook(self, hook, asked).await?,
                    None => false,
                };
                Ok(if read { Outcome::Applied } else { outcome })
            }
            Event::Note(e) => notes::note(self, hook, *e).await,
            Event::Pipeline(e) => pipelines::pipeline(self, hook, e).await,
            Event::Push(e) => pushes::push(self, hook, e).await,
            Event::Project(e) => projects::project(self, hook, e).await,
            Event::Subgroup(e) => projects::subgroup(self, hook, e).await,
            Event::Member(e) => members::member(self, hook, e).await,
        }
    }
}

impl Event {
    /// Whether applying it writes only what GitLab answers (never its payload), so a claim is
    /// applied like a fact.
    fn asks_gitlab(&self) -> bool {
        matches!(
            self,
            Event::Project(_) | Event::Subgroup(_) | Event::Member(_)
        )
    }
}

impl GitlabWebhooks {
    /// A transaction that has admitted the delivery for `project` (by its native id), and the
    /// project's mirrored row (created from the payload when it is not mirrored yet). A project
    /// no monitor of the delivering connection is bound to goes through route admission when
    /// the delivery came on a route of ours; otherwise, or when route admission refuses it,
    /// [`WebhookError::OutOfScope`] and nothing is written.
    pub async fn admitted_project(
        &self,
        hook: &Webhook<'_>,
        project: &HookProject,
    ) -> Result<(Transaction<'static, Postgres>, Uuid), WebhookError> {
        let mut txn = self.pool.begin().await?;
        match in_scope(&mut txn, hook, project).await {
            Ok(id) => return Ok((txn, id)),
            Err(WebhookError::OutOfScope(Refusal::NotMonitored)) if self.route.is_some() => {}
            Err(e) => return Err(e),
        }
        // Nothing is held while GitLab is read.
        txn.rollback().await?;
        if let Some(route) = &self.route {
            route.admit(&self.pool, hook, project.id).await?;
        }
        let mut txn = self.pool.begin().await?;
        let id = in_scope(&mut txn, hook, project).await?;
        Ok((txn, id))
    }
}

/// Admits the delivery for `project` in `txn`, then finds its mirrored row by native id
/// (never by path: a reused path cannot capture another project's work), creating it when
/// missing.
async fn in_scope(
    txn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
    project: &HookProject,
) -> Result<Uuid, WebhookError> {
    hook.admit(
        &mut *txn,
        GitlabProject {
            native_id: project.id,
        },
    )
    .await?;
    let found =
        scm_mirror::repository::stored(&mut *txn, hook.provider_instance_id, project.id).await?;
    if let Some((id, _)) = found {
        return Ok(id);
    }
    let header =
        project_header(project.id, &project.path_with_namespace, None).ok_or_else(|| {
            WebhookError::Invalid(format!(
                "the project's path has no namespace: {:?}",
                project.path_with_namespace
            ))
        })?;
    let id =
        scm_mirror::repository::ensure_repository(&mut *txn, hook.provider_instance_id, &header)
            .await?;
    Ok(id)
}
