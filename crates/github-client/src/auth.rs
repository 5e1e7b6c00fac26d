//! Credentials: personal access tokens, and GitHub App JWTs exchanged for installation tokens.
//!
//! An App signs a short JWT (RS256, `iss` = app id) and trades it for an installation token that
//! lives an hour. Tokens are cached per installation and refreshed a few minutes before they
//! expire; concurrent callers wait on one refresh instead of each minting a token.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::error::Error;

/// GitHub refuses an App JWT expiring more than 10 minutes ahead; nine leaves room for our clock
/// running ahead of GitHub's.
const JWT_LIFETIME: Duration = Duration::minutes(9);
/// Backdated so a GitHub clock slightly behind ours does not see a JWT from the future.
const JWT_BACKDATE: Duration = Duration::seconds(60);
/// A cached installation token is renewed when it has less than this left, so a call never
/// starts with a token that expires mid-page.
pub const TOKEN_REFRESH_MARGIN: Duration = Duration::minutes(5);

/// A secret string that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the Authorization header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A GitHub App's identity: its id and the private key it signs JWTs with.
#[derive(Clone)]
pub struct AppCredentials {
    app_id: u64,
    key: EncodingKey,
}

impl fmt::Debug for AppCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppCredentials")
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// The claims of an App JWT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppClaims {
    /// Issued at (unix seconds), backdated 60 s.
    pub iat: i64,
    /// Expires (unix seconds), at most 10 minutes after now.
    pub exp: i64,
    /// The app id.
    pub iss: String,
}

impl AppCredentials {
    /// From the app id and the PEM private key GitHub issued (PKCS#1 or PKCS#8).
    pub fn from_pem(app_id: u64, private_key_pem: &[u8]) -> Result<Self, Error> {
        let key = EncodingKey::from_rsa_pem(private_key_pem).map_err(|e| Error::Auth {
            status: None,
            message: format!("the GitHub App private key is not a usable RSA PEM: {e}"),
        })?;
        Ok(Self { app_id, key })
    }

    /// The app id.
    pub fn app_id(&self) -> u64 {
        self.app_id
    }

    /// The claims of a JWT issued at `now`.
    pub fn claims(&self, now: OffsetDateTime) -> AppClaims {
        AppClaims {
            iat: (now - JWT_BACKDATE).unix_timestamp(),
            exp: (now + JWT_LIFETIME).unix_timestamp(),
            iss: self.app_id.to_string(),
        }
    }

    /// A signed App JWT issued at `now`.
    pub fn jwt(&self, now: OffsetDateTime) -> Result<String, Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &self.claims(now), &self.key).map_err(
            |e| Error::Auth {
                status: None,
                message: format!("could not sign the GitHub App JWT: {e}"),
            },
        )
    }
}

/// An installation access token and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationToken {
    /// The token (never printed).
    pub token: Secret,
    /// When GitHub stops accepting it.
    pub expires_at: OffsetDateTime,
}

impl InstallationToken {
    /// Whether it is still good for a call starting at `now` (with the refresh margin).
    pub fn is_fresh(&self, now: OffsetDateTime) -> bool {
        self.expires_at - TOKEN_REFRESH_MARGIN > now
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<InstallationToken>>>;

/// Installation tokens by installation id.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    slots: Mutex<HashMap<u64, Slot>>,
}

impl TokenCache {
    fn slot(&self, installation_id: u64) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(installation_id).or_default().clone()
    }

    /// The cached token if fresh, else the one `mint` makes. The slot's lock is held while
    /// minting, so concurrent callers for one installation share that one refresh.
    pub(crate) async fn get_or_mint<F, Fut>(
        &self,
        installation_id: u64,
        mint: F,
    ) -> Result<InstallationToken, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<InstallationToken, Error>>,
    {
        let slot = self.slot(installation_id);
        let mut cached = slot.lock().await;
        if let Some(token) = cached.as_ref()
            && token.is_fresh(OffsetDateTime::now_utc())
        {
            return Ok(token.clone());
        }
        let token = mint().await?;
        *cached = Some(token.clone());
        Ok(token)
    }

    /// Forgets a token GitHub refused (revoked, or the installation's permissions changed).
    pub(crate) async fn invalidate(&self, installation_id: u64, refused: &Secret) {
        let slot = self.slot(installation_id);
        let mut cached = slot.lock().await;
        // Only if it is still the refused one: another caller may have refreshed it already.
        if cached.as_ref().is_some_and(|t| t.token == *refused) {
            *cached = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, Validation};

    use super::*;

    const PRIVATE: &[u8] = include_bytes!("../tests/fixtures/test-app-key.pem");
    const PUBLIC: &[u8] = include_bytes!("../tests/fixtures/test-app-key.pub.pem");

    #[test]
    fn jwt_is_rs256_with_backdated_iat_and_short_exp() {
        let app = AppCredentials::from_pem(4242, PRIVATE).unwrap();
        let now = OffsetDateTime::now_utc();
        let claims = app.claims(now);
        assert_eq!(claims.iat, now.unix_timestamp() - 60);
        assert!(claims.exp > now.unix_timestamp());
        assert!(claims.exp - now.unix_timestamp() <= 600, "exp ≤ 10 min");
        assert!(
            claims.exp - claims.iat <= 600,
            "GitHub refuses a longer span"
        );
        assert_eq!(claims.iss, "4242");

        let jwt = app.jwt(now).unwrap();
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, Algorithm::RS256);
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_required_spec_claims(&["exp", "iat", "iss"]);
        validation.set_issuer(&["4242"]);
        let decoded = jsonwebtoken::decode::<AppClaims>(
            &jwt,
            &DecodingKey::from_rsa_pem(PUBLIC).unwrap(),
            &validation,
        )
        .unwrap();
        assert_eq!(decoded.claims, claims);
    }

    #[test]
    fn a_key_that_is_not_rsa_pem_is_an_auth_error() {
        let err = AppCredentials::from_pem(1, b"not a key").unwrap_err();
        assert!(matches!(err, Error::Auth { status: None, .. }), "{err}");
    }

    #[test]
    fn secrets_do_not_print() {
        let token = InstallationToken {
            token: Secret::new("ghs_verysecret"),
            expires_at: OffsetDateTime::now_utc(),
        };
        assert!(!format!("{token:?}").contains("verysecret"));
    }

    fn must_not_mint() -> Result<InstallationToken, Error> {
        panic!("the cached token is fresh; nothing should be minted")
    }

    fn token(name: &str, lifetime: Duration) -> InstallationToken {
        InstallationToken {
            token: Secret::new(name),
            expires_at: OffsetDateTime::now_utc() + lifetime,
        }
    }

    #[tokio::test]
    async fn cached_token_is_reused_until_the_refresh_margin() {
        let cache = TokenCache::default();
        let first = cache
            .get_or_mint(1, || async { Ok(token("a", Duration::hours(1))) })
            .await
            .unwrap();
        let again = cache
            .get_or_mint(1, || async { must_not_mint() })
            .await
            .unwrap();
        assert_eq!(first, again);

        // A token inside the margin is renewed before it expires.
        let cache = TokenCache::default();
        cache
            .get_or_mint(1, || async { Ok(token("old", Duration::minutes(4))) })
            .await
            .unwrap();
        let renewed = cache
            .get_or_mint(1, || async { Ok(token("new", Duration::hours(1))) })
            .await
            .unwrap();
        assert_eq!(renewed.token.expose(), "new");
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_refresh() {
        let cache = Arc::new(TokenCache::default());
        let mints = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls = (0..16).map(|_| {
            let cache = cache.clone();
            let mints = mints.clone();
            tokio::spawn(async move {
                cache
                    .get_or_mint(7, || async move {
                        mints.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok(token("shared", Duration::hours(1)))
                    })
                    .await
            })
        });
        for call in calls.collect::<Vec<_>>() {
            assert_eq!(call.await.unwrap().unwrap().token.expose(), "shared");
        }
        assert_eq!(mints.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn invalidate_forgets_only_the_refused_token() {
        let cache = TokenCache::default();
        cache
            .get_or_mint(1, || async { Ok(token("a", Duration::hours(1))) })
            .await
            .unwrap();
        cache.invalidate(1, &Secret::new("other")).await;
        let still = cache
            .get_or_mint(1, || async { must_not_mint() })
            .await
            .unwrap();
        assert_eq!(still.token.expose(), "a");
        cache.invalidate(1, &Secret::new("a")).await;
        let fresh = cache
            .get_or_mint(1, || async { Ok(token("b", Duration::hours(1))) })
            .await
            .unwrap();
        assert_eq!(fresh.token.expose(), "b");
    }
}
