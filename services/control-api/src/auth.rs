//! Bearer-token auth. A token is a JWT with `sub`, `role`, `iss` and `aud` (both as configured),
//! `iat` and `exp` no further apart than the configured lifetime, and exactly one scope: either
//! `"operator": true` (every workspace) or a `workspace_id` (that workspace only; any other is
//! answered 404, as if it did not exist).
//!
//! Tokens are HS256 under `FORGESYNC_JWT_SECRET`, or RS256/ES256 under a key of the JWKS named by
//! `FORGESYNC_JWT_JWKS` (a file or an http(s) URL), chosen by `kid`; the token's `alg` must be the
//! key's. A URL is fetched again periodically and when a token names a kid it does not hold.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::AppState;
use crate::error::ApiError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Admin,
}

/// One audience or several (both are valid JWT).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

/// The claims we issue and verify.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Who acts; written to the audit log.
    pub sub: String,
    pub role: Role,
    /// The one workspace this token reaches; never together with `operator`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<Uuid>,
    /// An operator's token: it reaches every workspace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
    /// The issuer; must be the configured one.
    pub iss: String,
    /// The audience; must include the configured one.
    pub aud: Audience,
    /// Issued at, seconds since the epoch.
    pub iat: u64,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
}

/// Issues HS256 tokens (the local stack and tests).
#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
}

impl Keys {
    /// An issuer for an HS256 secret of at least 32 bytes.
    pub fn hs256(secret: &[u8]) -> anyhow::Result<Self> {
        check_secret(secret)?;
        Ok(Keys {
            encoding: EncodingKey::from_secret(secret)?,
        })
    }

    /// Issues a token.
    pub fn issue(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

fn check_secret(secret: &[u8]) -> anyhow::Result<()> {
    if secret.len() < 32 {
        anyhow::bail!("FORGESYNC_JWT_SECRET must be at least 32 bytes long");
    }
    Ok(())
}

/// What tokens must carry, and the keys they may be signed with.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub issuer: String,
    pub audience: String,
    /// The longest `exp - iat` accepted.
    pub max_lifetime: Duration,
    /// HS256 secret; HS256 tokens are refused without one.
    pub hs256_secret: Option<Vec<u8>>,
    /// A JWKS file path or http(s) URL; RS256/ES256 tokens are refused without one.
    pub jwks: Option<String>,
    /// How often a JWKS is read again.
    pub jwks_refresh: Duration,
}

/// Verifies bearer tokens.
pub struct Verifier {
    issuer: String,
    audience: String,
    max_lifetime: Duration,
    hs256: Option<DecodingKey>,
    jwks: Option<Jwks>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Clock skew allowed on `exp` and `iat`, in seconds.
const LEEWAY_SECS: u64 = 60;

impl Verifier {
    /// A verifier for `settings`; a JWKS is read now, so a bad one stops startup.
    pub async fn new(settings: &AuthSettings) -> anyhow::Result<Verifier> {
        if settings.issuer.trim().is_empty() || settings.audience.trim().is_empty() {
            anyhow::bail!("FORGESYNC_JWT_ISSUER and FORGESYNC_JWT_AUDIENCE must not be empty");
        }
        if settings.max_lifetime.is_zero() {
            anyhow::bail!("FORGESYNC_JWT_MAX_LIFETIME must be at least one second");
        }
        let hs256 = match &settings.hs256_secret {
            Some(secret) => {
                check_secret(secret)?;
                Some(DecodingKey::from_secret(secret)?)
            }
            None => None,
        };
        let jwks = match &settings.jwks {
            Some(source) => {
                Some(Jwks::load(JwksSource::parse(source), settings.jwks_refresh).await?)
            }
            None => None,
        };
        if hs256.is_none() && jwks.is_none() {
            anyhow::bail!("set FORGESYNC_JWT_SECRET (HS256) or FORGESYNC_JWT_JWKS (RS256/ES256)");
        }
        Ok(Verifier {
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            max_lifetime: settings.max_lifetime,
            hs256,
            jwks,
        })
    }

    /// The JWKS, when one is configured (its refresh runs beside the server).
    pub fn jwks(&self) -> Option<&Jwks> {
        self.jwks.as_ref()
    }

    /// The claims of a valid token, or why it is not valid.
    pub async fn verify(&self, token: &str) -> Result<Claims, String> {
        // `alg` picks the key family; `none` and unknown algorithms do not parse.
        let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
        let key = match header.alg {
            Algorithm::HS256 => self
                .hs256
                .clone()
                .ok_or("HS256 tokens are not accepted here (no FORGESYNC_JWT_SECRET)")?,
            Algorithm::RS256 | Algorithm::ES256 => {
                let jwks = self
                    .jwks
                    .as_ref()
                    .ok_or("RS256/ES256 tokens are not accepted here (no FORGESYNC_JWT_JWKS)")?;
                let kid = header
                    .kid
                    .as_deref()
                    .ok_or("the token names no key (`kid`)")?;
                jwks.key(kid, header.alg).await?
            }
            other => return Err(format!("algorithm {other:?} is not accepted")),
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECS;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| e.to_string())?
            .claims;
        // A bounded lifetime: a leaked token stays useful no longer than configured.
        let now = jsonwebtoken::get_current_timestamp();
        if claims.iat > now.saturating_add(LEEWAY_SECS) {
            return Err("the token was issued in the future (`iat`)".into());
        }
        if claims.exp.saturating_sub(claims.iat) > self.max_lifetime.as_secs() {
            return Err(format!(
                "the token lives longer than {}s (`exp` - `iat`)",
                self.max_lifetime.as_secs()
            ));
        }
        // An explicit scope: operator or one workspace, never neither, never both.
        match (claims.operator, claims.workspace_id) {
            (true, None) | (false, Some(_)) => Ok(claims),
            (true, Some(_)) => {
                Err("the token claims both `operator` and a `workspace_id`; pick one".into())
            }
            (false, None) => {
                Err("the token has neither `\"operator\": true` nor a `workspace_id`".into())
            }
        }
    }
}

/// Where a JWKS is read from.
#[derive(Debug, Clone)]
enum JwksSource {
    File(PathBuf),
    Url(String),
}

impl JwksSource {
    fn parse(s: &str) -> JwksSource {
        if s.starts_with("http://") || s.starts_with("https://") {
            JwksSource::Url(s.to_owned())
        } else {
            JwksSource::File(PathBuf::from(s.strip_prefix("file://").unwrap_or(s)))
        }
    }
}

/// The shortest time between two reads triggered by unknown kids.
const JWKS_MIN_RELOAD: Duration = Duration::from_secs(5);

/// A JWKS, read from its source and read again periodically or on an unknown kid.
pub struct Jwks {
    source: JwksSource,
    http: reqwest::Client,
    keys: RwLock<Arc<JwkSet>>,
    /// When the set was last read; a reload holds this lock, so reloads do not pile up.
    loaded_at: tokio::sync::Mutex<Instant>,
    refresh: Duration,
}

impl Jwks {
    async fn load(source: JwksSource, refresh: Duration) -> anyhow::Result<Jwks> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let set = read(&source, &http).await?;
        Ok(Jwks {
            source,
            http,
            keys: RwLock::new(Arc::new(set)),
            loaded_at: tokio::sync::Mutex::new(Instant::now()),
            refresh,
        })
    }

    /// How often [`Jwks::refresh_until`] reads the set again.
    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    /// Reads the set again every refresh interval until `stop`; a failed read keeps the old set.
    pub async fn refresh_until(&self, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.refresh) => {}
            }
            self.reload(Duration::ZERO).await;
        }
    }

    /// Reads the set again unless it was read within `min_age`; whether it was read.
    async fn reload(&self, min_age: Duration) -> bool {
        let mut loaded_at = self.loaded_at.lock().await;
        if loaded_at.elapsed() < min_age {
            return false;
        }
        *loaded_at = Instant::now();
        match read(&self.source, &self.http).await {
            Ok(set) => {
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "FORGESYNC_JWT_JWKS could not be read; keeping the keys held");
                false
            }
        }
    }

    fn current(&self) -> Arc<JwkSet> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The key named `kid`, if its algorithm is `alg`; an unknown kid reads the set again once.
    async fn key(&self, kid: &str, alg: Algorithm) -> Result<DecodingKey, String> {
        if let Some(key) = find_key(&self.current(), kid, alg)? {
            return Ok(key);
        }
        if self.reload(JWKS_MIN_RELOAD).await
            && let Some(key) = find_key(&self.current(), kid, alg)?
        {
            return Ok(key);
        }
        Err(format!("no key {kid:?} in the JWKS"))
    }
}

async fn read(source: &JwksSource, http: &reqwest::Client) -> anyhow::Result<JwkSet> {
    use anyhow::Context as _;
    let bytes = match source {
        JwksSource::File(path) => tokio::fs::read(path)
            .await
            .with_context(|| format!("FORGESYNC_JWT_JWKS: cannot read {}", path.display()))?,
        JwksSource::Url(url) => http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("FORGESYNC_JWT_JWKS: cannot fetch {url}"))?
            .bytes()
            .await
            .with_context(|| format!("FORGESYNC_JWT_JWKS: cannot read the answer of {url}"))?
            .to_vec(),
    };
    serde_json::from_slice(&bytes).context("FORGESYNC_JWT_JWKS is not a JWK set")
}

/// The key `kid` of `set` as a decoding key for `alg`; an error when the key is of another
/// algorithm (no alg confusion), `None` when the set has no such kid.
fn find_key(set: &JwkSet, kid: &str, alg: Algorithm) -> Result<Option<DecodingKey>, String> {
    let Some(jwk) = set.find(kid) else {
        return Ok(None);
    };
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err(format!("key {kid:?} is for encryption, not signatures"));
    }
    let key_alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        _ => return Err(format!("key {kid:?} is neither RSA nor P-256")),
    };
    let declared_ok = match jwk.common.key_algorithm {
        None => true,
        Some(KeyAlgorithm::RS256) => key_alg == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => key_alg == Algorithm::ES256,
        Some(_) => false,
    };
    if !declared_ok || key_alg != alg {
        return Err(format!("key {kid:?} does not verify {alg:?} tokens"));
    }
    DecodingKey::from_jwk(jwk)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// An authenticated caller with at least the viewer role.
#[derive(Debug, Clone)]
pub struct Caller(pub Claims);

/// An authenticated caller with the admin role.
#[derive(Debug, Clone)]
pub struct Admin(pub Claims);

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("send `Authorization: Bearer <token>`"))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <token>`"))?;
        let claims = state
            .auth
            .verify(token.trim())
            .await
            .map_err(|e| unauthorized(&format!("the bearer token is not valid: {e}")))?;
        Ok(Caller(claims))
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Caller(claims) = Caller::from_request_parts(parts, state).await?;
        if claims.role < Role::Admin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this action needs the admin role; the token has the viewer role",
            ));
        }
        Ok(Admin(claims))
    }
}

/// An operator's token (any role): it reaches what spans workspaces. Checked before the body
/// is read, so a workspace token learns nothing from a malformed request.
#[derive(Debug, Clone)]
pub struct Operator(pub Claims);

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Caller(claims) = Caller::from_request_parts(parts, state).await?;
        claims.require_operator()?;
        Ok(Operator(claims))
    }
}

/// An operator's token with the admin role: an instance admin.
#[derive(Debug, Clone)]
pub struct OperatorAdmin(pub Claims);

impl FromRequestParts<AppState> for OperatorAdmin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Admin(claims) = Admin::from_request_parts(parts, state).await?;
        claims.require_operator()?;
        Ok(OperatorAdmin(claims))
    }
}

impl Claims {
    /// Whether this token reaches `workspace_id`.
    pub fn reaches(&self, workspace_id: Uuid) -> bool {
        self.operator || self.workspace_id == Some(workspace_id)
    }

    /// Operator tokens only.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.operator {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this action needs an operator token (`\"operator\": true`)",
            ))
        }
    }
}
