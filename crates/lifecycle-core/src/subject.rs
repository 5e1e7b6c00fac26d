//! The subject grammar of DESIGN.md: one token encoder and one builder per subject family.
//!
//! A token is ASCII-lowercased; `.`, `*`, `>`, `?`, `%`, whitespace and every byte outside
//! printable ASCII are percent-encoded, so a real name (`socket.io`) can never split a level or
//! collide with [`NO_LEVEL`].

use std::fmt::Write as _;

/// The token that stands for "no such level" (an owner-level GitHub event has no repository).
pub const NO_LEVEL: &str = "?";

/// Encodes one name as a single subject token.
pub fn encode_token(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        let b = byte.to_ascii_lowercase();
        let plain = b.is_ascii_graphic() && !matches!(b, b'.' | b'*' | b'>' | b'?' | b'%');
        if plain {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    if out.is_empty() {
        // An empty token is not a valid NATS subject level; `%` alone never results from encoding.
        out.push_str("%00");
    }
    out
}

/// Why a token could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("subject token is empty")]
    Empty,
    #[error("subject token {0:?} has a malformed percent escape")]
    BadEscape(String),
    #[error("subject token {0:?} is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// Decodes a token made by [`encode_token`] (the result is the lowercased name).
pub fn decode_token(token: &str) -> Result<String, TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if token == "%00" {
        return Ok(String::new());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = token
                .get(i + 1..i + 3)
                .ok_or_else(|| TokenError::BadEscape(token.to_owned()))?;
            let value =
                u8::from_str_radix(hex, 16).map_err(|_| TokenError::BadEscape(token.to_owned()))?;
            out.push(value);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| TokenError::NotUtf8(token.to_owned()))
}

/// `lifecycle.<kind>.<connectionId>.<transition>`
pub fn lifecycle(kind: &str, connection_id: &str, transition: &str) -> String {
    format!(
        "lifecycle.{}.{}.{}",
        encode_token(kind),
        encode_token(connection_id),
        encode_token(transition)
    )
}

/// `jobs.<kind>.<connectionId>.<type>`
pub fn jobs(kind: &str, connection_id: &str, job_type: &str) -> String {
    format!(
        "jobs.{}.{}.{}",
        encode_token(kind),
        encode_token(connection_id),
        encode_token(job_type)
    )
}

/// `events.<workspaceId>.<type>`
pub fn events(workspace_id: &str, event_type: &str) -> String {
    format!(
        "events.{}.{}",
        encode_token(workspace_id),
        encode_token(event_type)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_names_stay_one_level() {
        assert_eq!(encode_token("Socket.IO"), "socket%2Eio");
        assert_eq!(decode_token("socket%2Eio").unwrap(), "socket.io");
    }

    #[test]
    fn no_real_name_collides_with_no_level() {
        assert_ne!(encode_token("?"), NO_LEVEL);
        assert_eq!(decode_token(&encode_token("?")).unwrap(), "?");
    }

    #[test]
    fn wildcards_whitespace_and_percent_are_escaped() {
        assert_eq!(encode_token("a*b>c d%"), "a%2Ab%3Ec%20d%25");
        assert_eq!(encode_token(""), "%00");
        assert_eq!(decode_token("%00").unwrap(), "");
    }

    #[test]
    fn malformed_escapes_are_errors() {
        assert!(matches!(decode_token("%zz"), Err(TokenError::BadEscape(_))));
        assert!(matches!(decode_token("ab%"), Err(TokenError::BadEscape(_))));
        assert_eq!(decode_token(""), Err(TokenError::Empty));
    }

    #[test]
    fn lifecycle_subject_has_four_levels() {
        assert_eq!(
            lifecycle("github", "0190-abc", "activated"),
            "lifecycle.github.0190-abc.activated"
        );
        assert_eq!(
            jobs("gitlab", "c1", "RECONCILIATION"),
            "jobs.gitlab.c1.reconciliation"
        );
        assert_eq!(
            events("w1", "scm.pull_request.closed"),
            "events.w1.scm%2Epull_request%2Eclosed"
        );
    }
}
