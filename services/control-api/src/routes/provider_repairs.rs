//! Provider repairs for instance admins: the fences of what we created at vendors and must
//! remove, listed and shown with their attempts and references, and an admin's confirmation of
//! an uncertain attempt or release of a fence. Operator tokens only (fences span workspaces);
//! settling needs the admin role and is audited with its reason.

use axum::Json;
use axum::extract::State;
use lifecycle_core::repair::{AdminError, FenceStatus, ProviderKind};
use serde::{Deserialize, Serialize};
use store::repair::Repair;
use store::repair_admin::{self, AdminAction, Listed, SettleError};
use uuid::Uuid;

use super::{KeysetPage, rfc3339};
use crate::AppState;
use crate::auth::{Operator, OperatorAdmin};
use crate::error::{
    ApiError, BadRequest, ErrorBody, Forbidden, JsonBody, PathParams, QueryParams, Unauthorized,
    UnsupportedMediaType,
};

/// Where a fence stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepairStatus {
    /// Retries run when due.
    Pending,
    /// The credential was refused; retries back off until a new one arrives.
    NeedsAuthorization,
    /// An attempt's outcome is unknown; polling stopped until an admin confirms it.
    AwaitingAdmin,
    /// Removed, with proof.
    Resolved,
    /// Given up by an admin without proof.
    Released,
}

impl From<RepairStatus> for FenceStatus {
    fn from(s: RepairStatus) -> Self {
        match s {
            RepairStatus::Pending => FenceStatus::Pending,
            RepairStatus::NeedsAuthorization => FenceStatus::NeedsAuthorization,
            RepairStatus::AwaitingAdmin => FenceStatus::AwaitingAdmin,
            RepairStatus::Resolved => FenceStatus::Resolved,
            RepairStatus::Released => FenceStatus::Released,
        }
    }
}

/// The vendor of a fenced resource.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepairProvider {
    Github,
    Gitlab,
    Slack,
    Outline,
}

impl From<RepairProvider> for ProviderKind {
    fn from(p: RepairProvider) -> Self {
        match p {
            RepairProvider::Github => ProviderKind::Github,
            RepairProvider::Gitlab => ProviderKind::Gitlab,
            RepairProvider::Slack => ProviderKind::Slack,
            RepairProvider::Outline => ProviderKind::Outline,
        }
    }
}

/// Which fences to list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RepairFilter {
    /// Only fences in this status.
    #[param(inline)]
    pub status: Option<RepairStatus>,
    /// Only fences of this vendor.
    #[param(inline)]
    pub provider: Option<RepairProvider>,
    /// Only fences a reference of this connection serves.
    pub connection_id: Option<Uuid>,
}

/// A fence: one resource we created at a vendor and must remove.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepairView {
    pub id: Uuid,
    /// `github`, `gitlab`, `slack` or `outline`.
    pub provider: String,
    /// The kind of resource (`gitlab_group_hook`, ...).
    pub kind: String,
    /// The resource's id at the vendor.
    pub vendor_id: String,
    /// `pending`, `needs_authorization`, `awaiting_admin`, `resolved` or `released`.
    pub status: String,
    /// The provider instance's server URL (`""` for the vendor's default).
    pub instance: String,
    /// Where the resource lives at the vendor (a GitLab group id, an account).
    pub target: String,
    /// Removal attempts that took a dispatch permit so far.
    pub attempts: u64,
    /// Attempts whose outcome is unknown: only their own receipt or an admin's confirmation
    /// settles them.
    pub uncertain_attempts: Vec<u64>,
    /// When automatic polling tries next; null once it stopped.
    pub next_attempt_at: Option<String>,
    /// What the last check or attempt found.
    pub last_outcome: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub settled_at: Option<String>,
}

impl From<&Listed> for RepairView {
    fn from(l: &Listed) -> Self {
        let r = &l.repair;
        let stored = r.fence.stored();
        RepairView {
            id: r.id,
            provider: r.provider.as_str().to_owned(),
            kind: r.resource_kind.clone(),
            vendor_id: r.vendor_id.clone(),
            status: stored.status.as_str().to_owned(),
            instance: r.instance.clone(),
            target: r.target.clone(),
            attempts: stored.attempts,
            uncertain_attempts: stored.uncertain.into_iter().collect(),
            next_attempt_at: r.next_attempt_at.map(rfc3339),
            last_outcome: r.last_outcome.clone(),
            created_at: rfc3339(l.created_at),
            updated_at: rfc3339(l.updated_at),
            settled_at: l.settled_at.map(rfc3339),
        }
    }
}

/// A workspace's reference to a fence; the credential it holds is never shown.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepairReferenceView {
    pub workspace_id: Uuid,
    pub connection_id: Uuid,
    /// The creation record the resource came from.
    pub registration_id: Option<Uuid>,
    /// The transition that captured it.
    pub transition: String,
    pub connection_version: i64,
    /// Whether it still holds a removal credential (cleared once the fence settles).
    pub holds_credential: bool,
    pub created_at: String,
}

/// An admin's action on a fence.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepairAuditView {
    pub id: Uuid,
    pub actor: String,
    /// `confirm` or `release`.
    pub action: String,
    /// The attempt a confirmation named.
    pub attempt: Option<i64>,
    pub reason: String,
    pub before_status: String,
    pub after_status: String,
    pub created_at: String,
}

/// A fence with what an admin needs to settle it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepairDetailView {
    #[serde(flatten)]
    pub repair: RepairView,
    /// Whether the fence was captured by the lifecycle transition itself; without that receipt
    /// an earlier uncertain call (attempt 0) is assumed.
    pub captured_with_receipt: bool,
    /// The workspaces' references (a purged workspace's are gone with it).
    pub references: Vec<RepairReferenceView>,
    /// GitHub only: the settings page where an admin uninstalls the App by hand.
    pub settings_url: Option<String>,
    /// Admins' confirmations and releases, oldest first.
    pub audit: Vec<RepairAuditView>,
}

/// The GitHub page listing an App installation, where it can be uninstalled by hand: the
/// organization's when the target names one, else the account's own.
fn github_settings_url(repair: &Repair) -> String {
    let web = match repair.instance.trim_end_matches('/') {
        "" | "https://api.github.com" => "https://github.com".to_owned(),
        // GitHub Enterprise Server: the web UI is the server without its API path.
        other => other.trim_end_matches("/api/v3").to_owned(),
    };
    let id = &repair.vendor_id;
    let account = repair.target.trim();
    if account.is_empty() || account.chars().all(|c| c.is_ascii_digit()) || account == id {
        format!("{web}/settings/installations/{id}")
    } else {
        format!("{web}/organizations/{account}/settings/installations/{id}")
    }
}

/// List provider repairs
///
/// Operator tokens only: fences span workspaces. Oldest first, by keyset (`after` is the last
/// `id` of the previous page).
#[utoipa::path(get, path = "/provider-repairs", operation_id = "listProviderRepairs",
    tag = "provider_repairs", params(RepairFilter, KeysetPage),
    responses((status = 200, description = "Fences, oldest first.", body = Vec<RepairView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden)))]
pub async fn list(
    State(state): State<AppState>,
    // Fences span workspaces: operators only.
    Operator(_): Operator,
    QueryParams(filter): QueryParams<RepairFilter>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<RepairView>>, ApiError> {
    let rows = repair_admin::list(
        state.db.get_postgres_connection_pool(),
        &repair_admin::Filter {
            status: filter.status.map(Into::into),
            provider: filter.provider.map(Into::into),
            connection_id: filter.connection_id,
            after: page.after,
            limit: page.limit() as i64,
        },
    )
    .await
    .map_err(ApiError::internal)?;
    Ok(Json(rows.iter().map(RepairView::from).collect()))
}

/// Get a provider repair
///
/// Operator tokens only. The fence with its attempts, the workspaces' references, the admin
/// actions on it and, for a GitHub App installation, the page to uninstall it by hand.
#[utoipa::path(get, path = "/provider-repairs/{id}", operation_id = "getProviderRepair",
    tag = "provider_repairs", params(("id" = Uuid, Path, description = "The fence's id.")),
    responses((status = 200, description = "The fence.", body = RepairDetailView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such provider repair.", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Operator(_): Operator,
    PathParams(id): PathParams<Uuid>,
) -> Result<Json<RepairDetailView>, ApiError> {
    Ok(Json(detail(&state, id).await?))
}

async fn detail(state: &AppState, id: Uuid) -> Result<RepairDetailView, ApiError> {
    let pool = state.db.get_postgres_connection_pool();
    let listed = repair_admin::listed(pool, id)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found("provider repair"))?;
    let references = repair_admin::references(pool, id)
        .await
        .map_err(ApiError::internal)?;
    let audit = repair_admin::audit(pool, id)
        .await
        .map_err(ApiError::internal)?;
    let repair = &listed.repair;
    Ok(RepairDetailView {
        captured_with_receipt: repair.capture_receipt.is_some(),
        settings_url: (repair.provider == ProviderKind::Github)
            .then(|| github_settings_url(repair)),
        references: references
            .into_iter()
            .map(|r| RepairReferenceView {
                workspace_id: r.workspace_id,
                connection_id: r.connection_id,
                registration_id: r.registration_id,
                transition: r.transition,
                connection_version: r.connection_version,
                holds_credential: r.holds_credential,
                created_at: rfc3339(r.created_at),
            })
            .collect(),
        audit: audit
            .into_iter()
            .map(|a| RepairAuditView {
                id: a.id,
                actor: a.actor,
                action: a.action,
                attempt: a.attempt,
                reason: a.reason,
                before_status: a.before_status,
                after_status: a.after_status,
                created_at: rfc3339(a.created_at),
            })
            .collect(),
        repair: RepairView::from(&listed),
    })
}

/// The longest reason kept, in characters.
const MAX_REASON_CHARS: usize = 2000;

/// An admin's confirmation that an uncertain attempt removed the resource.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRepair {
    /// The uncertain attempt that removed it (one of `uncertain_attempts`).
    pub attempt: u64,
    /// Why the admin knows (e.g. "hook gone from the group's settings, checked by hand").
    pub reason: String,
}

/// An admin's release of a fence without proof of removal.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRepair {
    /// Why it is given up.
    pub reason: String,
}

fn check_reason(reason: &str) -> Result<&str, ApiError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(ApiError::unprocessable(
            "reason_required",
            "say why in `reason`: it is kept in the fence's audit",
        ));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ApiError::unprocessable(
            "reason_too_long",
            format!("`reason` may hold at most {MAX_REASON_CHARS} characters"),
        ));
    }
    Ok(reason)
}

async fn settle(
    state: &AppState,
    caller: &crate::Claims,
    id: Uuid,
    action: AdminAction,
    reason: &str,
) -> Result<Json<RepairDetailView>, ApiError> {
    let reason = check_reason(reason)?;
    match repair_admin::settle(
        state.db.get_postgres_connection_pool(),
        id,
        action,
        &caller.sub,
        reason,
    )
    .await
    {
        Ok(repair) => {
            tracing::info!(repair_id = %id, ?action, status = repair.fence.status().as_str(), actor = %caller.sub, "provider repair settled by an admin");
        }
        Err(SettleError::NotFound) => return Err(ApiError::not_found("provider repair")),
        Err(SettleError::Refused(AdminError::Settled)) => {
            return Err(ApiError::conflict(
                "repair_settled",
                "the fence is already resolved or released; nothing to confirm or release",
            ));
        }
        Err(SettleError::Refused(AdminError::NotUncertain(attempt))) => {
            return Err(ApiError::conflict(
                "attempt_not_uncertain",
                format!(
                    "attempt {attempt} is not uncertain; confirm one of the fence's \
                     `uncertain_attempts`, or release the fence"
                ),
            ));
        }
        Err(SettleError::Db(e)) => return Err(ApiError::internal(e)),
    }
    Ok(Json(detail(state, id).await?))
}

/// Confirm a provider removal
///
/// Operator admin tokens only. Confirms that uncertain `attempt` removed the resource; the
/// fence is resolved once no attempt stays uncertain (its references' credentials are cleared
/// and its registrations marked removed). Audited with the reason.
#[utoipa::path(post, path = "/provider-repairs/{id}/confirm", operation_id = "confirmProviderRepair",
    tag = "provider_repairs", params(("id" = Uuid, Path, description = "The fence's id.")),
    request_body = ConfirmRepair,
    responses((status = 200, description = "The fence after the confirmation.", body = RepairDetailView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such provider repair.", body = ErrorBody),
              (status = 409, description = "The fence is already settled (`repair_settled`), or the attempt is not uncertain (`attempt_not_uncertain`); nothing changed.", body = ErrorBody),
              (status = 415, response = UnsupportedMediaType),
              (status = 422, description = "No reason, or one over 2000 characters (`reason_required`, `reason_too_long`); nothing changed.", body = ErrorBody)))]
pub async fn confirm(
    State(state): State<AppState>,
    // Settling a fence anywhere is an instance admin's act: operator admin tokens only.
    OperatorAdmin(caller): OperatorAdmin,
    PathParams(id): PathParams<Uuid>,
    JsonBody(body): JsonBody<ConfirmRepair>,
) -> Result<Json<RepairDetailView>, ApiError> {
    settle(
        &state,
        &caller,
        id,
        AdminAction::Confirm {
            attempt: body.attempt,
        },
        &body.reason,
    )
    .await
}

/// Release a provider repair
///
/// Operator admin tokens only. Gives the fence up without proof of removal: polling stops for
/// good, its references' credentials are cleared, and no older inspection can dispatch after
/// it. Audited with the reason.
#[utoipa::path(post, path = "/provider-repairs/{id}/release", operation_id = "releaseProviderRepair",
    tag = "provider_repairs", params(("id" = Uuid, Path, description = "The fence's id.")),
    request_body = ReleaseRepair,
    responses((status = 200, description = "The released fence.", body = RepairDetailView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 403, response = Forbidden),
              (status = 404, description = "No such provider repair.", body = ErrorBody),
              (status = 409, description = "The fence is already settled (`repair_settled`); nothing changed.", body = ErrorBody),
              (status = 415, response = UnsupportedMediaType),
              (status = 422, description = "No reason, or one over 2000 characters (`reason_required`, `reason_too_long`); nothing changed.", body = ErrorBody)))]
pub async fn release(
    State(state): State<AppState>,
    OperatorAdmin(caller): OperatorAdmin,
    PathParams(id): PathParams<Uuid>,
    JsonBody(body): JsonBody<ReleaseRepair>,
) -> Result<Json<RepairDetailView>, ApiError> {
    settle(&state, &caller, id, AdminAction::Release, &body.reason).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn github(instance: &str, target: &str) -> Repair {
        Repair {
            id: Uuid::nil(),
            provider: ProviderKind::Github,
            instance: instance.into(),
            resource: "github_installation:42".into(),
            identity_hash: 0,
            resource_kind: "github_installation".into(),
            target: target.into(),
            vendor_id: "42".into(),
            marker: None,
            url_hash: None,
            fence: lifecycle_core::repair::RemovalFence::capture(true),
            next_attempt_at: None,
            capture_receipt: None,
            last_outcome: None,
        }
    }

    #[test]
    fn github_settings_page_names_the_organization_when_known() {
        assert_eq!(
            github_settings_url(&github("", "acme")),
            "https://github.com/organizations/acme/settings/installations/42"
        );
        // The installation id as target (as captured): the account's own page.
        assert_eq!(
            github_settings_url(&github("", "42")),
            "https://github.com/settings/installations/42"
        );
        assert_eq!(
            github_settings_url(&github("https://ghe.example/api/v3", "1234")),
            "https://ghe.example/settings/installations/42"
        );
    }
}
