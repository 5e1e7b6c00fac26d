//! The few REST shapes the contract uses (GitHub publishes no GraphQL for installations or
//! App webhook deliveries).

use serde::Deserialize;
use time::OffsetDateTime;

/// A repository as REST returns it (`/installation/repositories`, `/repositories/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RestRepository {
    /// Native id.
    pub id: u64,
    /// GraphQL node id.
    pub node_id: String,
    /// Name.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Owner.
    pub owner: RestOwner,
}

/// A repository's owner as REST returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RestOwner {
    /// Login.
    pub login: String,
}

/// An installation of the App as `GET /app/installations/{id}` returns it (only the fields
/// an ownership check reads).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AppInstallation {
    /// The installation's id.
    pub id: u64,
    /// The App it is an installation of.
    pub app_id: Option<u64>,
    /// The account it is installed on.
    pub account: Option<RestOwner>,
}

/// How GitHub answered `DELETE /app/installations/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallationDeleted {
    /// `204 No Content`: uninstalled.
    Deleted,
    /// Another 2xx (GitHub's `202 Accepted`): taken, not done; what happens is unknown.
    Accepted(u16),
    /// `404`: the App has no installation of that id now (or this request did nothing).
    NotFound,
}

/// One page of `GET /installation/repositories`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationRepositoriesPage {
    /// How many repositories GitHub says the installation can reach.
    pub total_count: u64,
    /// This page.
    pub repositories: Vec<RestRepository>,
    /// The `page` of `rel="next"` in the `Link` header; `None` on the last page.
    pub next_page: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct InstallationRepositoriesBody {
    pub total_count: u64,
    pub repositories: Vec<RestRepository>,
}

#[derive(Deserialize)]
pub(crate) struct AccessTokenBody {
    pub token: String,
    pub expires_at: String,
}

#[derive(Deserialize)]
pub(crate) struct MessageBody {
    pub message: String,
}

/// One attempt to deliver an App webhook (`GET /app/hook/deliveries`). Every attempt of one
/// event is its own entry; they share the `guid` (the `X-GitHub-Delivery` header).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HookDelivery {
    /// The attempt's id, the one `POST /app/hook/deliveries/{id}/attempts` takes.
    pub id: u64,
    /// The event's delivery guid, the same across its attempts.
    pub guid: String,
    /// When GitHub made this attempt.
    #[serde(with = "time::serde::rfc3339")]
    pub delivered_at: OffsetDateTime,
    /// Whether this attempt is a redelivery.
    pub redelivery: bool,
    /// Seconds the receiver took.
    #[serde(default)]
    pub duration: Option<f64>,
    /// GitHub's description of the outcome (`OK`, `Invalid HTTP Response: 503`, ...).
    #[serde(default)]
    pub status: Option<String>,
    /// The receiver's HTTP status; 0 when it could not be reached.
    pub status_code: u16,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The payload's `action`, when it has one.
    #[serde(default)]
    pub action: Option<String>,
    /// The installation the event belongs to; `None` for App-level events.
    #[serde(default)]
    pub installation_id: Option<u64>,
    /// The repository the event belongs to.
    #[serde(default)]
    pub repository_id: Option<u64>,
}

impl HookDelivery {
    /// Whether the receiver accepted this attempt (a 2xx answer).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status_code)
    }
}

/// One page of `GET /app/hook/deliveries`, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct HookDeliveriesPage {
    /// This page's attempts, newest first.
    pub deliveries: Vec<HookDelivery>,
    /// The `cursor` of `rel="next"` in the `Link` header; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// The `page` number of the `rel="next"` link of a `Link` header.
pub(crate) fn next_page(link: &str) -> Option<u32> {
    next_link_param(link, "page").and_then(|page| page.parse().ok())
}

/// The `cursor` of the `rel="next"` link of a `Link` header.
pub(crate) fn next_cursor(link: &str) -> Option<String> {
    next_link_param(link, "cursor").map(str::to_owned)
}

/// A query parameter of the `rel="next"` link of a `Link` header.
fn next_link_param<'a>(link: &'a str, name: &str) -> Option<&'a str> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        if !is_next {
            return None;
        }
        let url = target.trim().trim_start_matches('<').trim_end_matches('>');
        let query = url.split_once('?')?.1;
        query.split('&').find_map(|kv| {
            let (key, value) = kv.split_once('=')?;
            (key == name).then_some(value)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_page_comes_from_the_next_link_only() {
        let link = r#"<https://api.github.com/installation/repositories?per_page=100&page=1>; rel="prev", <https://api.github.com/installation/repositories?per_page=100&page=3>; rel="next", <https://api.github.com/installation/repositories?per_page=100&page=9>; rel="last""#;
        assert_eq!(next_page(link), Some(3));
        let last = r#"<https://api.github.com/installation/repositories?page=2>; rel="prev""#;
        assert_eq!(next_page(last), None);
        assert_eq!(next_page(""), None);
    }

    #[test]
    fn next_cursor_comes_from_the_next_link_only() {
        let link =
            r#"<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_12>; rel="next""#;
        assert_eq!(next_cursor(link).as_deref(), Some("v1_12"));
        assert_eq!(next_page(link), None);
        let first = r#"<https://api.github.com/app/hook/deliveries?per_page=100>; rel="first""#;
        assert_eq!(next_cursor(first), None);
    }

    #[test]
    fn a_delivery_attempt_decodes_as_github_lists_it() {
        let attempt: HookDelivery = serde_json::from_value(serde_json::json!({
            "id": 12345678, "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
            "delivered_at": "2019-06-03T00:57:16Z", "redelivery": false, "duration": 0.27,
            "status": "OK", "status_code": 200, "event": "issues", "action": "opened",
            "installation_id": 123, "repository_id": 456, "throttled_at": null
        }))
        .unwrap();
        assert!(attempt.succeeded());
        assert_eq!(attempt.delivered_at.unix_timestamp(), 1_559_523_436);
        let unreachable = HookDelivery {
            status_code: 0,
            ..attempt
        };
        assert!(!unreachable.succeeded());
    }
}
