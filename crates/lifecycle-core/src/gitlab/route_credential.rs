//! GitLab route credentials: the `X-Gitlab-Token` of hooks we register. A credential is an
//! HMAC-SHA256 under a routing key, bound to one connection, key, route and GitLab origin, so it
//! cannot be moved to another route, connection or instance.
//!
//! Format: `v1.<base64url(origin)>.<base64url(mac)>`, the MAC over every bound value.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// What a credential is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteBinding<'a> {
    pub connection_id: &'a str,
    pub key_id: &'a str,
    pub route_id: &'a str,
    /// The GitLab origin (`https://gitlab.example.com`) the hook lives on.
    pub origin: &'a str,
}

/// Why a credential was refused. Deliberately coarse: the caller answers 401 either way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteCredentialError {
    #[error("route credential is malformed")]
    Malformed,
    #[error("route credential does not match this route")]
    BadSignature,
}

fn mac(key: &[u8], b: &RouteBinding<'_>) -> Hmac<Sha256> {
    // Any key length is accepted by HMAC.
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    // Length-prefixed fields: no value can spill into its neighbour.
    for field in [
        "forgesync-gitlab-route-v1",
        b.connection_id,
        b.key_id,
        b.route_id,
        b.origin,
    ] {
        m.update(&(field.len() as u64).to_be_bytes());
        m.update(field.as_bytes());
    }
    m
}

/// Mints the credential for `binding` under `key`.
pub fn mint(key: &[u8], binding: &RouteBinding<'_>) -> String {
    let tag = mac(key, binding).finalize().into_bytes();
    format!("v1.{}.{}", B64.encode(binding.origin), B64.encode(tag))
}

/// Verifies `credential` for the route's connection, key and route id (from the URL); returns
/// the signed origin. The comparison is constant-time.
pub fn verify(
    key: &[u8],
    connection_id: &str,
    key_id: &str,
    route_id: &str,
    credential: &str,
) -> Result<String, RouteCredentialError> {
    let mut parts = credential.trim().split('.');
    let (Some("v1"), Some(origin), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RouteCredentialError::Malformed);
    };
    let origin = B64
        .decode(origin)
        .ok()
        .and_then(|o| String::from_utf8(o).ok())
        .ok_or(RouteCredentialError::Malformed)?;
    let tag = B64
        .decode(tag)
        .map_err(|_| RouteCredentialError::Malformed)?;
    let binding = RouteBinding {
        connection_id,
        key_id,
        route_id,
        origin: &origin,
    };
    mac(key, &binding)
        .verify_slice(&tag)
        .map_err(|_| RouteCredentialError::BadSignature)?;
    Ok(origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: RouteBinding<'static> = RouteBinding {
        connection_id: "c1",
        key_id: "k1",
        route_id: "r1",
        origin: "https://gitlab.example.com",
    };

    #[test]
    fn a_credential_verifies_only_on_its_own_route() {
        let cred = mint(b"routing-key", &B);
        assert_eq!(
            verify(b"routing-key", "c1", "k1", "r1", &cred).as_deref(),
            Ok("https://gitlab.example.com")
        );
        for (c, k, r) in [("c2", "k1", "r1"), ("c1", "k2", "r1"), ("c1", "k1", "r2")] {
            assert_eq!(
                verify(b"routing-key", c, k, r, &cred),
                Err(RouteCredentialError::BadSignature)
            );
        }
        assert_eq!(
            verify(b"other-key", "c1", "k1", "r1", &cred),
            Err(RouteCredentialError::BadSignature)
        );
    }

    #[test]
    fn a_re_targeted_origin_is_refused() {
        let cred = mint(b"routing-key", &B);
        let tag = cred.rsplit('.').next().unwrap();
        let forged = format!("v1.{}.{tag}", B64.encode("https://evil.example.com"));
        assert_eq!(
            verify(b"routing-key", "c1", "k1", "r1", &forged),
            Err(RouteCredentialError::BadSignature)
        );
        assert_eq!(
            verify(b"routing-key", "c1", "k1", "r1", "plain-secret"),
            Err(RouteCredentialError::Malformed)
        );
    }
}
