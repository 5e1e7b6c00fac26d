//! Slack's admission rule: a delivery writes only to the delivering connection's own rows, only
//! for the connection's own team, and a message only into a channel whose consent covers its
//! ts (`lifecycle_core::slack::admit_message`), decided while the channel row is locked so a
//! pause or a withdrawal cannot slip between the decision and the write.

use lifecycle_core::forward::SlackTs;
use lifecycle_core::slack::{Drop, admit_message};
use sqlx::PgConnection;
use store::admission::{AdmissionRule, Delivering, Refusal, VendorRefusal};
use store::entity::ConnectionKind;

use crate::channel;

/// The delivery names a team that is not the connection's.
pub const OTHER_TEAM: VendorRefusal = VendorRefusal {
    label: "other_team",
    reason: "the delivery names a Slack team that is not the connection's",
};

/// The refusal of a message consent does not cover.
pub fn dropped(drop: Drop) -> VendorRefusal {
    let reason = match drop {
        Drop::UnknownChannel => "the connection has no such channel",
        Drop::NotConsented => "the channel is not consented to",
        Drop::Pending => "the channel's announcement is not posted yet",
        Drop::Paused => "the channel is paused",
        Drop::BeforeConsent => "the message is older than the channel's consent",
    };
    VendorRefusal {
        label: drop.as_str(),
        reason,
    }
}

/// Whether a refusal is one of consent's drops, and which.
pub fn drop_of(refusal: &Refusal) -> Option<&'static str> {
    match refusal {
        Refusal::Vendor(v) if v.label != OTHER_TEAM.label => Some(v.label),
        _ => None,
    }
}

async fn same_team(
    conn: &mut PgConnection,
    delivering: &Delivering,
    team: &str,
) -> Result<bool, sqlx::Error> {
    let stored: Option<(Option<String>,)> =
        sqlx::query_as("SELECT settings ->> 'team_id' FROM connection WHERE id = $1")
            .bind(delivering.admitted.connection_id)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(stored
        .and_then(|(t,)| t)
        .is_some_and(|t| t.eq_ignore_ascii_case(team)))
}

/// A message `ts` for channel `channel` of team `team`. The channel row it locked is left in
/// `locked` for the writer (the caller's transaction holds it).
pub struct Message<'a> {
    pub team: &'a str,
    pub channel: &'a str,
    pub ts: SlackTs,
    pub locked: &'a mut Option<channel::Channel>,
}

impl AdmissionRule for Message<'_> {
    const KIND: ConnectionKind = ConnectionKind::Slack;

    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        if !same_team(conn, delivering, self.team).await? {
            return Ok(Err(Refusal::Vendor(OTHER_TEAM)));
        }
        let Some(ch) = channel::lock(conn, delivering.admitted.connection_id, self.channel).await?
        else {
            return Ok(Err(Refusal::Vendor(dropped(Drop::UnknownChannel))));
        };
        let admitted = admit_message(ch.status, ch.consent_ts, ch.paused_ts, self.ts)
            .map_err(|d| Refusal::Vendor(dropped(d)));
        *self.locked = Some(ch);
        Ok(admitted)
    }
}

/// A channel's own event (rename, archive, deletion, the bot leaving) of team `team`: any of
/// the connection's channels, whatever its consent.
pub struct ChannelEvent<'a> {
    pub team: &'a str,
}

impl AdmissionRule for ChannelEvent<'_> {
    const KIND: ConnectionKind = ConnectionKind::Slack;

    async fn decide(
        self,
        conn: &mut PgConnection,
        delivering: &Delivering,
    ) -> Result<Result<(), Refusal>, sqlx::Error> {
        if !same_team(conn, delivering, self.team).await? {
            return Ok(Err(Refusal::Vendor(OTHER_TEAM)));
        }
        Ok(Ok(()))
    }
}
