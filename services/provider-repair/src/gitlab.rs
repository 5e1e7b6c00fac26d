//! GitLab group hooks: the whole listing of the group's hooks (every page, or no proof), our
//! hook told by its id and the exact marker in its URL, then `DELETE` once, never retried inside
//! the attempt (a retry is a new attempt with its own permit).

use std::time::Duration;

use gitlab_client::{ClientConfig, Error as GitlabError, GitlabClient, GroupHook};
use lifecycle_core::repair::{DispatchOutcome, Ownership};
use store::registration::ResourceKind;
use store::repair::Repair;

use crate::{Inspected, Remover};

/// Pages of a group's hooks read before the listing counts as not whole.
pub const PAGE_CAP: u32 = 50;

/// Removes the group hooks gitlab-sync registered.
pub struct GroupHooks {
    pub egress: vendor_http::egress::Egress,
    pub request_timeout: Duration,
    pub page_cap: u32,
}

impl GroupHooks {
    fn client(&self, repair: &Repair, credential: &[u8]) -> Result<GitlabClient, String> {
        let token = std::str::from_utf8(credential)
            .map_err(|_| "the removal credential is not UTF-8".to_owned())?;
        let origin = if repair.instance.is_empty() {
            "https://gitlab.com"
        } else {
            repair.instance.as_str()
        };
        let config = ClientConfig {
            timeout: self.request_timeout,
            retry: crate::one_attempt(),
            ..ClientConfig::new(origin).with_egress(self.egress.clone())
        };
        GitlabClient::new(&config, token).map_err(|e| e.to_string())
    }
}

fn ids(repair: &Repair) -> Option<(u64, u64)> {
    Some((repair.target.parse().ok()?, repair.vendor_id.parse().ok()?))
}

fn refused_credential(e: &GitlabError) -> bool {
    matches!(
        e,
        GitlabError::Auth { .. }
            | GitlabError::Http {
                status: 401 | 403,
                ..
            }
    )
}

/// Whether a listed hook is ours: the exact marker as its route segment, or the exact URL.
fn carries_proof(hook: &GroupHook, repair: &Repair) -> bool {
    let url = hook.url.split(['?', '#']).next().unwrap_or_default();
    let route = url.trim_end_matches('/').rsplit('/').next();
    let by_marker = repair.marker.as_deref().is_some_and(|m| route == Some(m));
    let by_url = repair.url_hash.as_deref()
        == Some(store::inbound::sha256_hex(hook.url.as_bytes()).as_str());
    by_marker || by_url
}

#[async_trait::async_trait]
impl Remover for GroupHooks {
    fn kind(&self) -> ResourceKind {
        scm_mirror::gitlab::GROUP_HOOK
    }

    async fn inspect(&self, repair: &Repair, credential: &[u8]) -> Inspected {
        let unproven = |detail: String| Inspected {
            ownership: Ownership::Unproven,
            detail,
        };
        let Some((group, hook_id)) = ids(repair) else {
            return unproven("the stored group or hook id is not a number".into());
        };
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return unproven(e),
        };
        let hooks = match client.all_group_hooks(group, self.page_cap).await {
            Ok(hooks) => hooks,
            // Expiry or revocation proves nothing; the fence waits for a credential.
            Err(partial) if partial.failures.iter().any(refused_credential) => {
                return Inspected {
                    ownership: Ownership::CredentialRefused,
                    detail: format!(
                        "GitLab refused the credential listing hooks: {}",
                        partial.why
                    ),
                };
            }
            // A hidden 404 (the group unreadable) proves nothing either.
            Err(partial) => {
                return unproven(format!(
                    "the group's hooks could not be listed whole: {}",
                    partial.why
                ));
            }
        };
        match hooks.iter().find(|h| h.id == hook_id) {
            Some(hook) if carries_proof(hook, repair) => Inspected {
                ownership: Ownership::Ours,
                detail: "listed with its marker".into(),
            },
            Some(_) => Inspected {
                ownership: Ownership::ForeignOwner,
                detail: "a hook of this id is listed without our marker".into(),
            },
            None => Inspected {
                ownership: Ownership::VerifiedAbsent,
                detail: "not in the group's whole hook listing".into(),
            },
        }
    }

    async fn remove(&self, repair: &Repair, credential: &[u8]) -> (DispatchOutcome, String) {
        let Some((group, hook_id)) = ids(repair) else {
            return (
                DispatchOutcome::Refused,
                "the stored group or hook id is not a number".into(),
            );
        };
        let client = match self.client(repair, credential) {
            Ok(c) => c,
            Err(e) => return (DispatchOutcome::Refused, e),
        };
        match client.delete_group_hook(group, hook_id).await {
            Ok(true) => (DispatchOutcome::TerminalReceipt, "deleted".into()),
            // A 404 is no receipt: the hook may be hidden from this token.
            Ok(false) => (
                DispatchOutcome::of_response(Some(404)),
                "GitLab answered 404".into(),
            ),
            Err(e) => {
                let outcome = match &e {
                    GitlabError::Auth { .. } => DispatchOutcome::Unauthorized,
                    GitlabError::Http { status, .. } => DispatchOutcome::of_response(Some(*status)),
                    GitlabError::RateLimited { .. } => DispatchOutcome::of_response(Some(429)),
                    // Nothing was sent, or the answer refused it.
                    GitlabError::BudgetExhausted(_)
                    | GitlabError::Unreachable(_)
                    | GitlabError::Redirected { .. } => DispatchOutcome::Refused,
                    // No answer, or one we could not read: it may have landed.
                    _ => DispatchOutcome::Uncertain,
                };
                (outcome, e.to_string())
            }
        }
    }
}
