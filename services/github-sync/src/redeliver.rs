//! Redelivery of failed GitHub webhooks: GitHub does not retry a delivery our receiver missed,
//! so a scheduled pass reads each App's delivery log and asks GitHub, once per event, to deliver
//! again every recent event none of whose attempts reached us.
//!
//! A pass, per active or suspended App connection: list the App's attempts newest first back to
//! [`WINDOW`] ago, keep the connection's installation's, pick the events to ask for
//! ([`to_redeliver`]), claim each in `github_redelivery`, then ask. A listing that fails stops
//! that connection's pass before it asks anything; the next pass lists again.

use std::collections::{HashMap, HashSet};

use github_client::{Error, HookDelivery};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use sqlx::PgPool;
use store::entity::{ConnectionKind, ConnectionStatus, connection};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::github::{ClientFactory, ConnectionApp};

/// How long after the original attempt a failed event is still asked for (the seed's
/// redelivery window; GitHub itself keeps the log for three days).
pub const WINDOW: time::Duration = time::Duration::hours(2);

/// Pages one connection's listing may take; a log this long is not walked further.
const PAGE_CAP: usize = 200;

/// The events to ask for: per guid, its original attempt, when that attempt is listed and
/// later than `since`, and no attempt of the guid succeeded. Oldest first.
pub fn to_redeliver(attempts: &[HookDelivery], since: OffsetDateTime) -> Vec<&HookDelivery> {
    let delivered: HashSet<&str> = attempts
        .iter()
        .filter(|a| a.succeeded())
        .map(|a| a.guid.as_str())
        .collect();
    let mut originals: HashMap<&str, &HookDelivery> = HashMap::new();
    for attempt in attempts.iter().filter(|a| !a.redelivery) {
        originals.entry(attempt.guid.as_str()).or_insert(attempt);
    }
    let mut out: Vec<&HookDelivery> = originals
        .into_values()
        // Only within the window after the original; an event whose original is not listed
        // began before the walk's end, so it is older than the window too.
        .filter(|a| a.delivered_at > since)
        .filter(|a| !delivered.contains(a.guid.as_str()))
        .collect();
    out.sort_by_key(|a| (a.delivered_at, a.id));
    out
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassSummary {
    /// Connections whose log was read to the window's start.
    pub listed: usize,
    /// Connections whose listing failed (nothing asked for them).
    pub stopped: usize,
    /// Redeliveries GitHub accepted.
    pub requested: usize,
}

/// One pass over every active or suspended GitHub App connection.
#[tracing::instrument(skip_all)]
pub async fn run_pass(
    db: &DatabaseConnection,
    clients: &ClientFactory,
    now: OffsetDateTime,
    cancel: &CancellationToken,
) -> anyhow::Result<PassSummary> {
    let conns = connection::Entity::find()
        .filter(connection::Column::Kind.eq(ConnectionKind::Github))
        .filter(
            connection::Column::Status
                .is_in([ConnectionStatus::Active, ConnectionStatus::Suspended]),
        )
        .all(db)
        .await?;
    let pool = db.get_postgres_connection_pool();
    // Records of events older than the window (plus a day for clock skew) can never be asked
    // for again: they only guarded against asking twice, so they go.
    let pruned = sqlx::query("DELETE FROM github_redelivery WHERE delivered_at < $1")
        .bind(now - WINDOW - time::Duration::DAY)
        .execute(pool)
        .await?
        .rows_affected();
    if pruned > 0 {
        tracing::debug!(pruned, "old redelivery records removed");
    }
    let mut summary = PassSummary::default();
    for conn in &conns {
        if cancel.is_cancelled() {
            break;
        }
        let app = match clients.app(conn).await {
            Ok(Some(app)) => app,
            // A PAT reads no App delivery log.
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(connection_id = %conn.id, error = %e, "GitHub App credentials unusable; no redeliveries for this connection");
                summary.stopped += 1;
                continue;
            }
        };
        let Some(attempts) = list_window(conn.id, &app, now - WINDOW).await else {
            summary.stopped += 1;
            continue;
        };
        summary.listed += 1;
        for original in to_redeliver(&attempts, now - WINDOW) {
            if cancel.is_cancelled() {
                break;
            }
            if ask(pool, conn.id, &app, original).await? == Outcome::Requested {
                summary.requested += 1;
            }
        }
    }
    Ok(summary)
}

/// The connection's installation's attempts back to `since`; `None` (logged) when the listing
/// failed or did not reach `since`.
async fn list_window(
    connection_id: Uuid,
    app: &ConnectionApp,
    since: OffsetDateTime,
) -> Option<Vec<HookDelivery>> {
    let mut attempts = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..PAGE_CAP {
        let page = match app.app.hook_deliveries(cursor.as_deref()).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(%connection_id, error = %e, "listing GitHub webhook deliveries failed; this connection's redelivery pass stops");
                return None;
            }
        };
        let reached = page.deliveries.iter().any(|a| a.delivered_at < since);
        attempts.extend(
            page.deliveries
                .into_iter()
                .filter(|a| a.installation_id == Some(app.installation_id)),
        );
        match page.next_cursor {
            Some(next) if !reached && cursor.as_deref() != Some(next.as_str()) => {
                cursor = Some(next);
            }
            _ => return Some(attempts),
        }
    }
    tracing::warn!(%connection_id, pages = PAGE_CAP, "GitHub webhook delivery log longer than the page cap; this connection's redelivery pass stops");
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// GitHub accepted the request.
    Requested,
    /// Already asked for (this pass or an earlier one, any connection).
    AlreadyAsked,
    /// GitHub answered with a refusal: nothing was queued, the claim is released.
    Refused,
    /// No answer we can read (transport): it may have been queued, the claim stays.
    Unknown,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Requested => "requested",
            Outcome::AlreadyAsked => "already_asked",
            Outcome::Refused => "refused",
            Outcome::Unknown => "unknown",
        }
    }
}

/// Claims the event in `github_redelivery`, then asks GitHub to deliver it again.
///
/// The claim commits before the request: a crash after it leaves the event claimed and never
/// asked for again, so no crash loop can ask twice, and no request is ever made without its
/// row. The price is that a crash between the two loses that one redelivery. A request GitHub
/// refuses queued nothing, so its claim is released for the next pass.
async fn ask(
    pool: &PgPool,
    connection_id: Uuid,
    app: &ConnectionApp,
    original: &HookDelivery,
) -> anyhow::Result<Outcome> {
    let delivery_id = i64::try_from(original.id)?;
    // The guid guard also keeps two connections of one installation from both asking.
    let claimed = sqlx::query(
        "INSERT INTO github_redelivery (connection_id, delivery_id, guid, event, delivered_at)
         SELECT $1, $2, $3, $4, $5
         WHERE NOT EXISTS (SELECT 1 FROM github_redelivery WHERE guid = $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(connection_id)
    .bind(delivery_id)
    .bind(&original.guid)
    .bind(&original.event)
    .bind(original.delivered_at)
    .execute(pool)
    .await?
    .rows_affected()
        == 1;
    let outcome = if !claimed {
        Outcome::AlreadyAsked
    } else {
        match app.app.redeliver(original.id).await {
            Ok(()) => Outcome::Requested,
            Err(
                e @ (Error::Http { .. }
                | Error::Auth { .. }
                | Error::Forbidden { .. }
                | Error::RateLimited { .. }),
            ) => {
                tracing::warn!(%connection_id, delivery_id, guid = %original.guid, error = %e, "GitHub refused a redelivery; the next pass may ask again");
                sqlx::query(
                    "DELETE FROM github_redelivery WHERE connection_id = $1 AND delivery_id = $2",
                )
                .bind(connection_id)
                .bind(delivery_id)
                .execute(pool)
                .await?;
                Outcome::Refused
            }
            Err(e) => {
                tracing::warn!(%connection_id, delivery_id, guid = %original.guid, error = %e, "redelivery request unanswered; not asking again");
                Outcome::Unknown
            }
        }
    };
    if outcome == Outcome::Requested {
        tracing::info!(%connection_id, delivery_id, guid = %original.guid, event = %original.event, "asked GitHub to redeliver a failed webhook");
    }
    metrics::counter!("github_redeliveries_total", "outcome" => outcome.as_str()).increment(1);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(
        id: u64,
        guid: &str,
        minutes_ago: i64,
        redelivery: bool,
        status: u16,
    ) -> HookDelivery {
        HookDelivery {
            id,
            guid: guid.to_owned(),
            delivered_at: now() - time::Duration::minutes(minutes_ago),
            redelivery,
            duration: None,
            status: None,
            status_code: status,
            event: "issues".to_owned(),
            action: Some("opened".to_owned()),
            installation_id: Some(7),
            repository_id: Some(9),
        }
    }

    fn now() -> OffsetDateTime {
        time::macros::datetime!(2025-06-01 12:00:00 UTC)
    }

    #[test]
    fn only_recent_events_with_no_successful_attempt_are_asked_for_by_their_original() {
        let listed = [
            attempt(10, "retried-ok", 5, true, 200),
            attempt(9, "failed-twice", 10, true, 502),
            attempt(8, "unreachable", 20, false, 0),
            attempt(7, "failed-twice", 30, false, 503),
            attempt(6, "retried-ok", 40, false, 0),
            attempt(5, "delivered", 50, false, 204),
            attempt(4, "too-old", 121, false, 0),
        ];
        let picked: Vec<_> = to_redeliver(&listed, now() - WINDOW)
            .into_iter()
            .map(|a| (a.id, a.guid.as_str()))
            .collect();
        assert_eq!(picked, [(7, "failed-twice"), (8, "unreachable")]);
    }

    #[test]
    fn an_event_whose_original_is_not_listed_is_not_asked_for() {
        // Only a failed redelivery is in the window: the original is older.
        let listed = [attempt(3, "old", 30, true, 0)];
        assert!(to_redeliver(&listed, now() - WINDOW).is_empty());
    }
}
