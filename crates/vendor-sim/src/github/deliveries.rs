//! The App webhook's delivery log, as GitHub keeps it: every attempt to deliver an event to the
//! App's webhook URL, with its outcome, listed newest first (`GET /app/hook/deliveries`) and
//! redeliverable by id (`POST /app/hook/deliveries/{id}/attempts`).
//!
//! Attempts are dated by real time (whole seconds), not the model's clock: whoever reads the log
//! judges an attempt's age against its own clock. A test that needs an old attempt states its
//! time ([`crate::github::GithubSim::deliver_at`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::model;
use super::webhook::Delivery;

/// Where the App's webhooks go, and the secret they are signed with.
#[derive(Clone, Debug)]
pub(crate) struct HookTarget {
    pub url: String,
    pub secret: Vec<u8>,
}

/// One recorded attempt to deliver an event.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryAttempt {
    /// The attempt's id (what a redelivery request names).
    pub id: u64,
    /// `X-GitHub-Delivery`, shared by every attempt of the event.
    pub guid: String,
    /// When the attempt was made.
    pub delivered_at: OffsetDateTime,
    /// Whether the attempt is a redelivery.
    pub redelivery: bool,
    /// Seconds the receiver took.
    pub duration: f64,
    /// The receiver's HTTP status; 0 when it could not be reached.
    pub status_code: u16,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The payload's `action`.
    pub action: Option<String>,
    /// The payload's `installation.id`.
    pub installation_id: Option<u64>,
    /// The payload's `repository.id`.
    pub repository_id: Option<u64>,
}

impl DeliveryAttempt {
    /// GitHub's `status` text for the attempt.
    fn status(&self) -> String {
        match self.status_code {
            0 => "failed to connect to host".to_owned(),
            200..=299 => "OK".to_owned(),
            code => format!("Invalid HTTP Response: {code}"),
        }
    }

    /// The attempt as `GET /app/hook/deliveries` lists it.
    pub(crate) fn to_json(&self) -> Json {
        json!({
            "id": self.id,
            "guid": self.guid,
            "delivered_at": model::format_time(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": self.duration,
            "status": self.status(),
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": null,
        })
    }

    /// The position in the newest-first listing: later attempts first, then higher ids.
    fn key(&self) -> (i64, u64) {
        (self.delivered_at.unix_timestamp(), self.id)
    }
}

/// The attempts so far and the bodies to redeliver.
#[derive(Default)]
pub(crate) struct DeliveryLog {
    pub target: Option<HookTarget>,
    attempts: Vec<DeliveryAttempt>,
    /// Each event's delivery (body and headers) by guid, for redelivery.
    events: HashMap<String, Delivery>,
    last_id: u64,
}

impl DeliveryLog {
    /// Records an attempt of `delivery` made at `at` that the receiver answered with
    /// `status_code` (0: unreachable). An attempt of a guid seen before is a redelivery.
    pub fn record(
        &mut self,
        delivery: &Delivery,
        at: OffsetDateTime,
        status_code: u16,
        took: Duration,
    ) -> DeliveryAttempt {
        let redelivery = self.events.contains_key(&delivery.delivery_id);
        self.events
            .entry(delivery.delivery_id.clone())
            .or_insert_with(|| delivery.clone());
        let payload: Json = serde_json::from_slice(&delivery.body).unwrap_or(Json::Null);
        // Ids grow like GitHub's, from a large base so they never look like small counters.
        self.last_id = self.last_id.max(90_000_000) + 1;
        let attempt = DeliveryAttempt {
            id: self.last_id,
            guid: delivery.delivery_id.clone(),
            delivered_at: model::truncate(at),
            redelivery,
            duration: took.as_secs_f64(),
            status_code,
            event: delivery.event.clone(),
            action: payload["action"].as_str().map(str::to_owned),
            installation_id: payload["installation"]["id"].as_u64(),
            repository_id: payload["repository"]["id"].as_u64(),
        };
        self.attempts.push(attempt.clone());
        attempt
    }

    /// The event an attempt delivered, to send again.
    pub fn delivery_of(&self, attempt_id: u64) -> Option<Delivery> {
        let attempt = self.attempts.iter().find(|a| a.id == attempt_id)?;
        self.events.get(&attempt.guid).cloned()
    }

    /// Every attempt of `guid`, oldest first.
    pub fn attempts_of(&self, guid: &str) -> Vec<DeliveryAttempt> {
        let mut out: Vec<_> = self
            .attempts
            .iter()
            .filter(|a| a.guid == guid)
            .cloned()
            .collect();
        out.sort_by_key(DeliveryAttempt::key);
        out
    }

    /// Up to `per_page` attempts, newest first, after `cursor`; and the cursor of the next page.
    pub fn page(
        &self,
        cursor: Option<&str>,
        per_page: usize,
    ) -> (Vec<DeliveryAttempt>, Option<String>) {
        let after = cursor.and_then(parse_cursor);
        let mut listed: Vec<&DeliveryAttempt> = self
            .attempts
            .iter()
            .filter(|a| after.is_none_or(|after| a.key() < after))
            .collect();
        listed.sort_by_key(|a| std::cmp::Reverse(a.key()));
        let more = listed.len() > per_page;
        listed.truncate(per_page);
        let next = listed
            .last()
            .filter(|_| more)
            .map(|a| format!("v1_{}_{}", a.key().0, a.key().1));
        (listed.into_iter().cloned().collect(), next)
    }
}

/// `v1_<unix seconds>_<id>`: the last attempt the previous page served.
fn parse_cursor(cursor: &str) -> Option<(i64, u64)> {
    let (at, id) = cursor.strip_prefix("v1_")?.split_once('_')?;
    Some((at.parse().ok()?, id.parse().ok()?))
}

/// Sends `delivery` to `target` as GitHub does; the receiver's status (0 when unreachable) and
/// how long it took.
pub(crate) async fn attempt(
    http: &reqwest::Client,
    target: Option<&HookTarget>,
    delivery: &Delivery,
) -> (u16, Duration) {
    let started = Instant::now();
    let status = match target {
        Some(target) => match delivery.send(http, &target.url, &target.secret).await {
            Ok(status) => status.as_u16(),
            Err(_) => 0,
        },
        None => 0,
    };
    (status, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(action: &str) -> Delivery {
        Delivery::new(
            "issues",
            &json!({"action": action, "installation": {"id": 7}, "repository": {"id": 9}}),
        )
    }

    #[test]
    fn pages_run_newest_first_and_attempts_of_one_event_share_the_guid() {
        let mut log = DeliveryLog::default();
        let now = model::now_seconds();
        let first = delivery("opened");
        let old = log.record(&first, now - time::Duration::hours(3), 0, Duration::ZERO);
        let retry = log.record(&first, now, 200, Duration::ZERO);
        let other = log.record(&delivery("closed"), now, 502, Duration::ZERO);
        assert!(!old.redelivery && retry.redelivery && !other.redelivery);
        assert_eq!(retry.guid, old.guid);
        assert_eq!(other.installation_id, Some(7));
        assert_eq!(other.repository_id, Some(9));
        assert_eq!(other.action.as_deref(), Some("closed"));

        let (page, next) = log.page(None, 2);
        assert_eq!(
            page.iter().map(|a| a.id).collect::<Vec<_>>(),
            [other.id, retry.id]
        );
        let (page, next) = log.page(next.as_deref(), 2);
        assert_eq!(page.iter().map(|a| a.id).collect::<Vec<_>>(), [old.id]);
        assert_eq!(next, None);
        assert_eq!(log.attempts_of(&old.guid).len(), 2);
        assert_eq!(
            log.delivery_of(retry.id).map(|d| d.delivery_id),
            Some(first.delivery_id)
        );
    }
}
