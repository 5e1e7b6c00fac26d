//! Member Hooks (`user_add_to_group`, `user_remove_from_group`, `user_update_for_group`) keep
//! the organization tier between listings. A hook only names a group and a user: it is admitted
//! only for a group of the delivering connection's own organization (its root group or a team
//! of it), and the membership is then read from GitLab with that connection's token; what GitLab
//! answers is written, dated by when it was asked (an older read changes nothing).

use gitlab_client::Budget;
use scm_mirror::organization::{self, Member};
use serde::Deserialize;
use sqlx::PgConnection;
use store::admission::{AdmissionRule, Delivering, Refusal, VendorRefusal};
use store::entity::ConnectionKind;
use sync_engine::webhook::{Outcome, Webhook, WebhookError};
use time::OffsetDateTime;

use super::GitlabWebhooks;

/// The member events the sync acts on.
pub const MEMBER_EVENTS: &[&str] = &[
    "user_add_to_group",
    "user_remove_from_group",
    "user_update_for_group",
];

/// A Member Hook, as far as it is read: which group and which user. The access level it states
/// is never written (GitLab is asked).
#[derive(Debug, Clone, Deserialize)]
pub struct MemberEvent {
    pub event_name: String,
    pub group_id: i64,
    pub user_id: i64,
}

/// Refused: the group is not the delivering connection's organization or one of its teams.
pub const NOT_OUR_ORGANIZATION: Refusal = Refusal::Vendor(VendorRefusal {
    label: "not_our_organization",
    reason: "the group is not the connection's organization or a team of it",
});

/// A group of the delivering connection's organization, by native id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitlabOrganizationGroup {
    pub native_id: i64,
}

impl AdmissionRule for GitlabOrganizationGroup {
    const KIND: ConnectionKind = ConnectionKind::Gitlab;

    // Rule: member hooks write only the delivering connection's organization (bound by its own
    // discovery), never a group a payload names.
    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        let found =
            organization::of_connection(conn, delivering.admitted.connection_id, self.native_id)
                .await?;
        Ok(found.map(drop).ok_or(NOT_OUR_ORGANIZATION))
    }
}

/// A Member Hook.
pub async fn member(
    w: &GitlabWebhooks,
    hook: &Webhook<'_>,
    e: MemberEvent,
) -> Result<Outcome, WebhookError> {
    let Some(conn) = super::projects::delivering(w, hook).await? else {
        return Ok(Outcome::Ignored);
    };
    let scope = GitlabOrganizationGroup {
        native_id: e.group_id,
    };
    // Admitted before anything is read: another organization's group costs no GitLab call.
    {
        let mut txn = w.pool.begin().await?;
        hook.admit(&mut txn, scope).await?;
        txn.rollback().await?;
    }
    let (Ok(group), Ok(user)) = (u64::try_from(e.group_id), u64::try_from(e.user_id)) else {
        return Err(WebhookError::Invalid(format!(
            "a member hook names group {} and user {}",
            e.group_id, e.user_id
        )));
    };
    let source = w
        .readers
        .source(&conn)
        .await
        .map_err(|e| WebhookError::Unavailable(format!("{e:#}")))?;
    let read_at = OffsetDateTime::now_utc();
    let found = source
        .client
        .with_budget(Budget::unlimited())
        .group_member(group, user)
        .await
        .map_err(|e| WebhookError::Unavailable(e.to_string()))?
        .filter(|m| m.id == user)
        .map(|m| Member {
            user_native_id: e.user_id,
            username: m.username,
            access_level: m.access_level,
        });
    let mut txn = w.pool.begin().await?;
    hook.admit(&mut txn, scope).await?;
    let of = organization::of_connection(&mut txn, conn.id, e.group_id)
        .await?
        .ok_or(WebhookError::OutOfScope(NOT_OUR_ORGANIZATION))?;
    let changed =
        organization::apply_member(&mut txn, of, e.user_id, found.as_ref(), read_at).await?;
    txn.commit().await?;
    Ok(Outcome::of_change(changed))
}
