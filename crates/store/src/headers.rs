//! Message header names shared by everything that writes or reads forgesync's messages (the
//! outbox writers here, `bus` consumers, ingress). One place, so a producer and its consumer
//! cannot drift apart.

/// The workspace a message concerns.
pub const WORKSPACE: &str = "Forgesync-Workspace";
/// The connection a message concerns.
pub const CONNECTION: &str = "Forgesync-Connection";
/// The mirrored repository a message is about (item events), so its stream copy can be erased
/// with the workspace's rows of that repository.
pub const REPOSITORY: &str = "Forgesync-Repository";
/// The inbound message (webhook delivery) a message carries.
pub const DELIVERY: &str = "Forgesync-Delivery";
/// The vendor's event name of a webhook delivery.
pub const EVENT: &str = "Forgesync-Event";
/// Set instead of an inline body: the inbound message whose stored body to read.
pub const BODY_REF: &str = "Forgesync-Body-Ref";
/// The message this one replays (a dead message or an inbound message).
pub const REPLAY_OF: &str = "Forgesync-Replay-Of";
/// The id JetStream deduplicates on.
pub const MSG_ID: &str = "Nats-Msg-Id";

/// Longest header value (and `Nats-Msg-Id`) a message may carry. Ours are uuids and short names;
/// ingress caps what vendors supply well below this, so the composed message id still fits.
pub const MAX_VALUE_BYTES: usize = 512;

/// Why a header could not be put on a message. A NATS client panics on CR or LF in a header
/// (the protocol frames headers by line), so every message is checked before it is stored or
/// published, whoever built it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header {name:?} holds control character 0x{byte:02x} at byte {at}")]
    ControlCharacter { name: String, byte: u8, at: usize },
    #[error("header {name:?} is {len} bytes, more than the {max} allowed")]
    TooLong {
        name: String,
        len: usize,
        max: usize,
    },
    #[error("header name {name:?} is empty or holds a character outside printable ASCII or ':'")]
    BadName { name: String },
}

/// The position and value of the first control character (below 0x20, or 0x7f) in `value`.
pub fn control_character(value: &str) -> Option<(usize, u8)> {
    value
        .bytes()
        .enumerate()
        .find(|(_, b)| *b < 0x20 || *b == 0x7f)
}

/// Checks that `value` can travel as header `name`: no control character, at most `max` bytes.
pub fn check_value_within(name: &str, value: &str, max: usize) -> Result<(), HeaderError> {
    if let Some((at, byte)) = control_character(value) {
        return Err(HeaderError::ControlCharacter {
            name: name.to_owned(),
            byte,
            at,
        });
    }
    if value.len() > max {
        return Err(HeaderError::TooLong {
            name: name.to_owned(),
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// [`check_value_within`] at [`MAX_VALUE_BYTES`].
pub fn check_value(name: &str, value: &str) -> Result<(), HeaderError> {
    check_value_within(name, value, MAX_VALUE_BYTES)
}

/// Checks a header name: printable ASCII without `:` or spaces.
pub fn check_name(name: &str) -> Result<(), HeaderError> {
    let printable = |b: u8| b.is_ascii_graphic() && b != b':';
    if name.is_empty() || !name.bytes().all(printable) {
        return Err(HeaderError::BadName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_overlong_values_are_refused() {
        for bad in ["a\rb", "a\nb", "a\0b", "a\tb", "a\x7fb", "\x1b[0m"] {
            assert!(
                matches!(
                    check_value("X", bad),
                    Err(HeaderError::ControlCharacter { .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_value("X", &"a".repeat(MAX_VALUE_BYTES + 1)),
            Err(HeaderError::TooLong {
                name: "X".into(),
                len: MAX_VALUE_BYTES + 1,
                max: MAX_VALUE_BYTES
            })
        );
        check_value("X", &"a".repeat(MAX_VALUE_BYTES)).unwrap();
        check_value("X", "push – ünïcode ok").unwrap();
        check_name(EVENT).unwrap();
        assert!(check_name("Bad Name").is_err());
        assert!(check_name("Bad:Name").is_err());
        assert!(check_name("").is_err());
    }
}
