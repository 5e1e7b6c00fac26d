//! Slack-specific rules.
//!
//! - [`JOBS`]: the job types Slack connections run.
//! - [`SECRETS`]: the secrets a Slack connection holds.

use crate::job::{JobSupport, SyncJobType};

/// A Slack connection's one secret: its bot `token` (event signing secrets belong to its
/// endpoints).
pub const SECRETS: &[&str] = &["token"];

/// Slack runs no initial sync and never backfills: ingestion is per channel and forward-only
/// from its consent, so history from before consent, or from a paused gap, is never fetched.
pub const JOBS: JobSupport = JobSupport {
    vendor: "Slack",
    refused: &[
        (
            SyncJobType::Initial,
            "nothing is read at connect; each channel is ingested forward-only from its consent",
        ),
        (
            SyncJobType::Backfill,
            "history from before a channel's consent or from a paused gap is never fetched; \
             RECONCILIATION reads what is in scope",
        ),
    ],
};

pub use channel::{ChannelCommand, ChannelStatus, Drop, WrongState, admit_message};
pub use message::{MessageKind, message_kind};

mod channel {
    use crate::forward::SlackTs;

    /// Where a channel's consent stands. Only an ACTIVE channel keeps messages, and only from
    /// its `consent_ts` on.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ChannelStatus {
        /// Known (the directory lists it); nothing of it is kept.
        None,
        /// Granted by an operator; the announcement is not posted yet (the reason says why).
        Pending,
        /// Its members were told at `consent_ts`; kept from then on.
        Active,
        /// Archived, the bot left, or paused by an operator: nothing more is kept until a
        /// resume, which moves `consent_ts` to the resume (the gap is never fetched).
        Paused,
    }

    impl ChannelStatus {
        pub fn as_str(self) -> &'static str {
            match self {
                ChannelStatus::None => "none",
                ChannelStatus::Pending => "pending",
                ChannelStatus::Active => "active",
                ChannelStatus::Paused => "paused",
            }
        }

        pub fn parse(s: &str) -> Option<Self> {
            Some(match s {
                "none" => ChannelStatus::None,
                "pending" => ChannelStatus::Pending,
                "active" => ChannelStatus::Active,
                "paused" => ChannelStatus::Paused,
                _ => return None,
            })
        }
    }

    /// What an operator asks of a channel.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum ChannelCommand {
        /// Grant: announce and keep from the announcement on.
        Consent,
        Pause,
        Resume,
        /// Withdraw the grant: everything kept is erased, the channel is NONE again.
        Withdraw,
    }

    impl ChannelCommand {
        pub fn as_str(self) -> &'static str {
            match self {
                ChannelCommand::Consent => "consent",
                ChannelCommand::Pause => "pause",
                ChannelCommand::Resume => "resume",
                ChannelCommand::Withdraw => "withdraw",
            }
        }

        /// The status the command leads to from `from`, or why it does not apply. A consent
        /// leads to PENDING: the channel turns ACTIVE only once the announcement is posted.
        /// Repeating a command that already took effect is a wrong state too, so a second
        /// request never posts a second announcement.
        pub fn next(self, from: ChannelStatus) -> Result<ChannelStatus, WrongState> {
            use ChannelStatus as S;
            let to = match (self, from) {
                // PENDING is retried: the announcement may have been refused for a reason that
                // has since gone (the bot was invited).
                (ChannelCommand::Consent, S::None | S::Pending) => S::Pending,
                (ChannelCommand::Pause, S::Active) => S::Paused,
                (ChannelCommand::Resume, S::Paused) => S::Active,
                (ChannelCommand::Withdraw, S::Pending | S::Active | S::Paused) => S::None,
                _ => {
                    return Err(WrongState {
                        command: self,
                        status: from,
                    });
                }
            };
            Ok(to)
        }
    }

    /// A command that does not apply to the channel's status.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
    #[error("cannot {} a channel that is {}", command.as_str(), status.as_str())]
    pub struct WrongState {
        pub command: ChannelCommand,
        pub status: ChannelStatus,
    }

    /// Why a message is not kept; each is counted by reason and its delivery erased.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Drop {
        /// The connection has no such channel.
        UnknownChannel,
        /// The channel was never consented to, or the consent was withdrawn.
        NotConsented,
        /// Consented, not announced yet.
        Pending,
        Paused,
        /// Older than the channel's consent: from before the announcement or from a paused gap.
        BeforeConsent,
    }

    impl Drop {
        pub fn as_str(self) -> &'static str {
            match self {
                Drop::UnknownChannel => "unknown_channel",
                Drop::NotConsented => "not_consented",
                Drop::Pending => "pending",
                Drop::Paused => "paused",
                Drop::BeforeConsent => "before_consent",
            }
        }
    }

    /// Consent is checked per message: a message `ts` is kept only when the channel's consent
    /// covers it: ACTIVE and not older than `consent_ts`, or PAUSED and said between
    /// `consent_ts` and the pause (`paused_ts`; events of one channel may be handled out of
    /// order, so a message said before the pause can arrive after it).
    pub fn admit_message(
        status: ChannelStatus,
        consent_ts: Option<SlackTs>,
        paused_ts: Option<SlackTs>,
        ts: SlackTs,
    ) -> Result<(), Drop> {
        match status {
            ChannelStatus::None => Err(Drop::NotConsented),
            ChannelStatus::Pending => Err(Drop::Pending),
            ChannelStatus::Paused => match (consent_ts, paused_ts) {
                (Some(consent), Some(paused)) if consent <= ts && ts < paused => Ok(()),
                _ => Err(Drop::Paused),
            },
            ChannelStatus::Active => match consent_ts {
                Some(consent) if ts >= consent => Ok(()),
                // An ACTIVE channel without a consent time keeps nothing (fail closed).
                _ => Err(Drop::BeforeConsent),
            },
        }
    }
}

mod message {
    /// What a `message` event (or a history item) of a subtype is to the mirror.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum MessageKind {
        /// Stored once per channel and ts: a plain message, a reply, a bot's message, a
        /// broadcast reply, a shared file.
        Kept,
        /// `message_changed`: an edit (applies only with a later `edited.ts`).
        Changed,
        /// `message_deleted`, or a thread's root Slack keeps as a `tombstone` (its replies stay):
        /// a tombstone.
        Deleted,
        /// Any other subtype (joins, topics, pins...): acknowledged and counted, not stored.
        Other,
    }

    /// The kind of a message of `subtype`.
    pub fn message_kind(subtype: Option<&str>) -> MessageKind {
        match subtype {
            None | Some("bot_message" | "thread_broadcast" | "file_share") => MessageKind::Kept,
            Some("message_changed") => MessageKind::Changed,
            Some("message_deleted" | "tombstone") => MessageKind::Deleted,
            Some(_) => MessageKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::SlackTs;

    fn ts(s: &str) -> SlackTs {
        s.parse().unwrap()
    }

    #[test]
    fn only_an_active_channel_keeps_and_only_from_its_consent() {
        let consent = Some(ts("100.000000"));
        assert_eq!(
            admit_message(ChannelStatus::Active, consent, None, ts("100.000000")),
            Ok(())
        );
        assert_eq!(
            admit_message(ChannelStatus::Active, consent, None, ts("99.999999")),
            Err(Drop::BeforeConsent)
        );
        assert_eq!(
            admit_message(ChannelStatus::Active, None, None, ts("200.0")),
            Err(Drop::BeforeConsent)
        );
        // Said before the pause, handled after it: kept; said after it: dropped.
        let paused = Some(ts("300.0"));
        assert_eq!(
            admit_message(ChannelStatus::Paused, consent, paused, ts("299.0")),
            Ok(())
        );
        for late in ["300.0", "301.0", "99.0"] {
            assert_eq!(
                admit_message(ChannelStatus::Paused, consent, paused, ts(late)),
                Err(Drop::Paused)
            );
        }
        for (status, drop) in [
            (ChannelStatus::None, Drop::NotConsented),
            (ChannelStatus::Pending, Drop::Pending),
            (ChannelStatus::Paused, Drop::Paused),
        ] {
            assert_eq!(admit_message(status, consent, None, ts("500.0")), Err(drop));
        }
    }

    #[test]
    fn commands_move_only_from_the_states_they_name() {
        use ChannelCommand::*;
        use ChannelStatus as S;
        assert_eq!(Consent.next(S::None), Ok(S::Pending));
        assert_eq!(Consent.next(S::Pending), Ok(S::Pending));
        assert!(Consent.next(S::Active).is_err());
        assert!(Consent.next(S::Paused).is_err());
        assert_eq!(Pause.next(S::Active), Ok(S::Paused));
        assert!(Pause.next(S::Paused).is_err());
        assert_eq!(Resume.next(S::Paused), Ok(S::Active));
        assert!(Resume.next(S::Active).is_err());
        for s in [S::Pending, S::Active, S::Paused] {
            assert_eq!(Withdraw.next(s), Ok(S::None));
        }
        assert!(Withdraw.next(S::None).is_err());
        for s in [S::None, S::Pending, S::Active, S::Paused] {
            assert_eq!(ChannelStatus::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn subtypes_are_kept_changed_deleted_or_other() {
        for kept in [
            None,
            Some("bot_message"),
            Some("thread_broadcast"),
            Some("file_share"),
        ] {
            assert_eq!(message_kind(kept), MessageKind::Kept);
        }
        assert_eq!(message_kind(Some("message_changed")), MessageKind::Changed);
        assert_eq!(message_kind(Some("message_deleted")), MessageKind::Deleted);
        assert_eq!(message_kind(Some("tombstone")), MessageKind::Deleted);
        assert_eq!(message_kind(Some("channel_join")), MessageKind::Other);
    }
}
