//! A connection's lifecycle as a checked state machine. Every transition names where it may
//! start; anything else is illegal and changes nothing.

use serde::{Deserialize, Serialize};

/// Where a connection stands with its vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionState {
    Pending,
    Active,
    Suspended,
    Paused,
    Uninstalled,
    Disconnected,
}

/// A requested change of [`ConnectionState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    /// Credentials verified: the connection starts (or, after an uninstall, restarts) syncing.
    Activate,
    /// The vendor suspended access (e.g. a suspended GitHub App installation).
    Suspend,
    /// Access is back after a suspension or an operator's pause.
    Resume,
    /// An operator stops syncing without giving up access.
    Pause,
    /// The vendor removed our access (app uninstalled, token revoked).
    Uninstall,
    /// The workspace gives the connection up; erasure follows.
    Disconnect,
}

impl Transition {
    /// Every transition, for exhaustive tests and API documentation.
    pub const ALL: [Transition; 6] = [
        Transition::Activate,
        Transition::Suspend,
        Transition::Resume,
        Transition::Pause,
        Transition::Uninstall,
        Transition::Disconnect,
    ];

    /// The past-tense name used as the last token of `lifecycle.<kind>.<id>.<transition>`.
    pub fn event_name(self) -> &'static str {
        match self {
            Transition::Activate => "activated",
            Transition::Suspend => "suspended",
            Transition::Resume => "resumed",
            Transition::Pause => "paused",
            Transition::Uninstall => "uninstalled",
            Transition::Disconnect => "disconnected",
        }
    }

    /// Whether this transition starts a new active period (a new lifecycle generation).
    pub fn starts_generation(self) -> bool {
        matches!(self, Transition::Activate)
    }
}

/// A transition asked of a state it cannot leave that way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {from:?} connection cannot {transition:?}")]
pub struct IllegalTransition {
    pub from: ConnectionState,
    pub transition: Transition,
}

impl ConnectionState {
    /// The state after `transition`, or why it is not allowed.
    pub fn apply(self, transition: Transition) -> Result<ConnectionState, IllegalTransition> {
        use ConnectionState as S;
        use Transition as T;
        let next = match (self, transition) {
            (S::Pending | S::Uninstalled, T::Activate) => S::Active,
            (S::Active, T::Suspend) => S::Suspended,
            (S::Suspended | S::Paused, T::Resume) => S::Active,
            (S::Active, T::Pause) => S::Paused,
            (S::Active | S::Suspended | S::Paused, T::Uninstall) => S::Uninstalled,
            // Disconnection is terminal: a reconnect is a new connection.
            (S::Pending | S::Active | S::Suspended | S::Paused | S::Uninstalled, T::Disconnect) => {
                S::Disconnected
            }
            (from, transition) => return Err(IllegalTransition { from, transition }),
        };
        Ok(next)
    }

    /// Whether this state authorises reading the provider's mirrored data. A pause keeps the
    /// retained mirror readable (and so, under the orphan guard, kept); pending and uninstalled
    /// connections authorise nothing.
    pub fn authorises_reads(self) -> bool {
        matches!(
            self,
            ConnectionState::Active | ConnectionState::Suspended | ConnectionState::Paused
        )
    }

    /// Whether this state authorises writing the provider's data into the mirror (webhooks,
    /// syncs): a paused connection stops writing but keeps reading.
    pub fn authorises_writes(self) -> bool {
        matches!(self, ConnectionState::Active | ConnectionState::Suspended)
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectionState as S, Transition as T};

    const STATES: [S; 6] = [
        S::Pending,
        S::Active,
        S::Suspended,
        S::Paused,
        S::Uninstalled,
        S::Disconnected,
    ];

    #[test]
    fn the_allowed_transitions_are_exactly_these() {
        let mut allowed = Vec::new();
        for from in STATES {
            for t in T::ALL {
                if let Ok(to) = from.apply(t) {
                    allowed.push((from, t, to));
                }
            }
        }
        assert_eq!(
            allowed,
            vec![
                (S::Pending, T::Activate, S::Active),
                (S::Pending, T::Disconnect, S::Disconnected),
                (S::Active, T::Suspend, S::Suspended),
                (S::Active, T::Pause, S::Paused),
                (S::Active, T::Uninstall, S::Uninstalled),
                (S::Active, T::Disconnect, S::Disconnected),
                (S::Suspended, T::Resume, S::Active),
                (S::Suspended, T::Uninstall, S::Uninstalled),
                (S::Suspended, T::Disconnect, S::Disconnected),
                (S::Paused, T::Resume, S::Active),
                (S::Paused, T::Uninstall, S::Uninstalled),
                (S::Paused, T::Disconnect, S::Disconnected),
                (S::Uninstalled, T::Activate, S::Active),
                (S::Uninstalled, T::Disconnect, S::Disconnected),
            ]
        );
    }

    #[test]
    fn disconnected_is_terminal() {
        for t in T::ALL {
            assert!(S::Disconnected.apply(t).is_err());
        }
    }

    #[test]
    fn active_suspended_and_paused_authorise_reads() {
        let readers: Vec<_> = STATES
            .into_iter()
            .filter(|s| s.authorises_reads())
            .collect();
        assert_eq!(readers, vec![S::Active, S::Suspended, S::Paused]);
    }

    #[test]
    fn only_active_and_suspended_authorise_writes() {
        let writers: Vec<_> = STATES
            .into_iter()
            .filter(|s| s.authorises_writes())
            .collect();
        assert_eq!(writers, vec![S::Active, S::Suspended]);
    }

    #[test]
    fn event_names_are_past_tense_and_distinct() {
        let names: std::collections::BTreeSet<_> = T::ALL.iter().map(|t| t.event_name()).collect();
        assert_eq!(names.len(), T::ALL.len());
        assert!(T::Activate.starts_generation());
        assert!(!T::Resume.starts_generation());
    }
}
