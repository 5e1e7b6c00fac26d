//! Pipeline Hooks: the head check of the open merge requests a pipeline is about (the one a
//! merge request pipeline names, or those whose head commit or source branch it ran on), written
//! through `lifecycle_core::checks::observe` in the transaction that admitted the delivery, with
//! each merge request's row locked.

use lifecycle_core::checks::{self, CheckState, HeadCheck};
use lifecycle_core::gitlab::checks::gitlab_pipeline_state;
use lifecycle_core::partial::Field;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;
use uuid::Uuid;

use super::GitlabWebhooks;
use super::payload::PipelineHook;

/// A check state as `pull_request.head_check_state` stores it.
pub fn state_text(state: CheckState) -> &'static str {
    match state {
        CheckState::Success => "success",
        CheckState::Failure => "failure",
        CheckState::Pending => "pending",
        CheckState::Skipped => "skipped",
        CheckState::NoPipeline => "no_pipeline",
        CheckState::None => "none",
    }
}

/// The check state a stored text names; `None` for a text this build does not know.
pub fn stored_state(text: &str) -> Option<CheckState> {
    Some(match text {
        "success" => CheckState::Success,
        "failure" => CheckState::Failure,
        "pending" => CheckState::Pending,
        "skipped" => CheckState::Skipped,
        "no_pipeline" => CheckState::NoPipeline,
        "none" => CheckState::None,
        _ => return None,
    })
}

type StoredCheck = (Uuid, Option<String>, Option<String>, Option<OffsetDateTime>);

/// Handles a Pipeline Hook.
pub async fn pipeline(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: PipelineHook,
) -> Result<Outcome, WebhookError> {
    let a = &e.object_attributes;
    let Some(state) = gitlab_pipeline_state(Field::Known(Some(&a.status))) else {
        return Ok(Outcome::Ignored);
    };
    let (mut txn, repository_id) = w.admitted_project(hook, &e.project).await?;
    let observed_at = observed_at(&mut txn, hook).await?;
    let iid = e.merge_request.as_ref().map(|m| m.iid);
    let rows: Vec<StoredCheck> = sqlx::query_as(
        "SELECT id, head_check_state, head_check_sha, head_check_observed_at FROM pull_request
          WHERE repository_id = $1 AND state = 'open' AND deleted_at IS NULL
            AND CASE WHEN $2::integer IS NOT NULL THEN number = $2
                     ELSE head_sha = $3 OR head_ref = $4 END
          ORDER BY id FOR UPDATE",
    )
    .bind(repository_id)
    .bind(iid)
    .bind(&a.sha)
    .bind(a.git_ref.as_deref())
    .fetch_all(&mut *txn)
    .await?;
    let mut changed = false;
    for (id, stored_state_text, stored_sha, stored_at) in rows {
        let mut stored = match (
            stored_state_text.as_deref().and_then(stored_state),
            stored_sha,
        ) {
            (Some(state), Some(head)) => Some(HeadCheck {
                state,
                head,
                observed_at: stored_at,
            }),
            _ => None,
        };
        // Head checks are dated observations: one older than the stored observation changes
        // nothing, whatever its commit.
        let observation = HeadCheck {
            state,
            head: a.sha.clone(),
            observed_at: Some(observed_at),
        };
        if !checks::observe(&mut stored, observation) {
            tracing::info!(pull_request_id = %id, "an older pipeline observation; nothing recorded");
            continue;
        }
        let Some(check) = stored else { continue };
        let updated = sqlx::query(
            "UPDATE pull_request
                SET head_check_state = $2, head_check_sha = $3, head_check_observed_at = $4
              WHERE id = $1
                AND (head_check_state, head_check_sha, head_check_observed_at)
                    IS DISTINCT FROM ($2, $3, $4)",
        )
        .bind(id)
        .bind(state_text(check.state))
        .bind(&check.head)
        .bind(check.observed_at)
        .execute(&mut *txn)
        .await?;
        changed |= updated.rows_affected() > 0;
    }
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}

/// When a hook observed what it states (a Pipeline Hook its pipeline, a Merge Request Hook its
/// reviewers): when JetStream stored the delivery, or, for a replay, when the delivery it
/// repeats was received (a redelivered payload changes nothing).
pub(super) async fn observed_at(
    txn: &mut sqlx::PgConnection,
    hook: &Webhook<'_>,
) -> Result<OffsetDateTime, sqlx::Error> {
    let Some(delivery) = hook
        .delivery
        .header(bus::consumer::headers::DELIVERY)
        .and_then(|id| id.parse::<Uuid>().ok())
    else {
        return Ok(hook.received_at);
    };
    let first: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT o.received_at FROM inbound_message m
           JOIN inbound_message o ON o.id = m.replay_of
          WHERE m.id = $1",
    )
    .bind(delivery)
    .fetch_optional(&mut *txn)
    .await?;
    Ok(first.map_or(hook.received_at, |first| first.min(hook.received_at)))
}
