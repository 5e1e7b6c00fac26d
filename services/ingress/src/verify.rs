//! Signature checks, one per vendor scheme. Every comparison is constant-time (`verify_slice`
//! or `subtle`), and none of them logs a secret or a body.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8]) -> HmacSha256 {
    <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length")
}

/// Whether `hex_sig` is the hex HMAC-SHA256 of `parts` (concatenated) under `secret`.
fn hmac_hex_matches(secret: &[u8], parts: &[&[u8]], hex_sig: &str) -> bool {
    let Ok(sig) = hex::decode(hex_sig.trim()) else {
        return false;
    };
    let mut m = mac(secret);
    for p in parts {
        m.update(p);
    }
    m.verify_slice(&sig).is_ok()
}

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC(secret, body)>`.
pub fn github(secret: &[u8], header: &str, body: &[u8]) -> bool {
    header
        .strip_prefix("sha256=")
        .is_some_and(|sig| hmac_hex_matches(secret, &[body], sig))
}

/// Slack v0: `X-Slack-Signature: v0=<hex HMAC(secret, "v0:<ts>:<body>")>`. The timestamp's age
/// is checked by the caller first.
pub fn slack(secret: &[u8], timestamp: &str, header: &str, body: &[u8]) -> bool {
    header.strip_prefix("v0=").is_some_and(|sig| {
        hmac_hex_matches(secret, &[b"v0:", timestamp.as_bytes(), b":", body], sig)
    })
}

/// A parsed `Outline-Signature: t=<ms>,s=<hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlineSignature {
    pub timestamp_ms: String,
    pub signature: String,
}

/// Parses Outline's header; `None` when malformed.
pub fn parse_outline(header: &str) -> Option<OutlineSignature> {
    let mut t = None;
    let mut s = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = Some(v.to_owned()),
            Some(("s", v)) => s = Some(v.to_owned()),
            _ => {}
        }
    }
    let timestamp_ms = t?;
    if timestamp_ms.is_empty() || !timestamp_ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(OutlineSignature {
        timestamp_ms,
        signature: s?,
    })
}

/// Outline: `s` is the hex HMAC(secret, "<t>.<body>").
pub fn outline(secret: &[u8], sig: &OutlineSignature, body: &[u8]) -> bool {
    hmac_hex_matches(
        secret,
        &[sig.timestamp_ms.as_bytes(), b".", body],
        &sig.signature,
    )
}

/// GitLab operator hooks: `X-Gitlab-Token` is the secret itself, compared in constant time.
pub fn gitlab_token(secret: &[u8], token: &str) -> bool {
    bool::from(secret.ct_eq(token.as_bytes()))
}

/// Hex HMAC-SHA256 of the concatenated `parts` (tests and fixtures sign with it).
pub fn sign_hex(secret: &[u8], parts: &[&[u8]]) -> String {
    let mut m = mac(secret);
    for p in parts {
        m.update(p);
    }
    hex::encode(m.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_signature_is_over_the_raw_body() {
        let sig = format!("sha256={}", sign_hex(b"s3cret", &[b"{\"a\":1}"]));
        assert!(github(b"s3cret", &sig, b"{\"a\":1}"));
        assert!(!github(b"s3cret", &sig, b"{\"a\": 1}"));
        assert!(!github(b"other", &sig, b"{\"a\":1}"));
        assert!(!github(
            b"s3cret",
            sig.trim_start_matches("sha256="),
            b"{\"a\":1}"
        ));
    }

    #[test]
    fn slack_signature_binds_the_timestamp() {
        let sig = format!("v0={}", sign_hex(b"k", &[b"v0:100:", b"body"]));
        assert!(slack(b"k", "100", &sig, b"body"));
        assert!(!slack(b"k", "101", &sig, b"body"));
    }

    #[test]
    fn outline_header_parses_and_binds_the_timestamp() {
        let s = sign_hex(b"k", &[b"1700000000000.", b"{}"]);
        let parsed = parse_outline(&format!("t=1700000000000,s={s}")).unwrap();
        assert!(outline(b"k", &parsed, b"{}"));
        let moved = parse_outline(&format!("t=1700000000001,s={s}")).unwrap();
        assert!(!outline(b"k", &moved, b"{}"));
        assert_eq!(parse_outline("s=abc"), None);
        assert_eq!(parse_outline("t=x,s=abc"), None);
    }

    #[test]
    fn gitlab_token_must_match_exactly() {
        assert!(gitlab_token(b"tok", "tok"));
        assert!(!gitlab_token(b"tok", "tok2"));
        assert!(!gitlab_token(b"tok", ""));
    }
}
