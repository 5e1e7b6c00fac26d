//! Bearer-token auth: HS256 JWTs with a role and an optional workspace scope.
//!
//! A token without `workspace_id` is an operator's and reaches every workspace; a token with one
//! reaches only that workspace, and any other workspace is answered 404, as if it did not exist.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
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

/// The claims we issue and verify.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Who acts; written to the audit log.
    pub sub: String,
    pub role: Role,
    /// The one workspace this token reaches; none for operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<Uuid>,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
}

/// Verifies and issues tokens.
#[derive(Clone)]
pub struct Keys {
    decoding: DecodingKey,
    encoding: EncodingKey,
}

impl Keys {
    /// Keys for an HS256 secret of at least 32 bytes.
    pub fn hs256(secret: &[u8]) -> anyhow::Result<Self> {
        if secret.len() < 32 {
            anyhow::bail!("FORGESYNC_JWT_SECRET must be at least 32 bytes long");
        }
        Ok(Keys {
            decoding: DecodingKey::from_secret(secret)?,
            encoding: EncodingKey::from_secret(secret)?,
        })
    }

    /// Issues a token (used by the local stack and tests).
    pub fn issue(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
    }

    fn verify(&self, token: &str) -> Result<Claims, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub"]);
        jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).map(|d| d.claims)
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
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
            .keys
            .verify(token.trim())
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

impl Claims {
    /// Whether this token reaches `workspace_id`.
    pub fn reaches(&self, workspace_id: Uuid) -> bool {
        self.workspace_id.is_none_or(|w| w == workspace_id)
    }

    /// Operator tokens only (no workspace scope).
    pub fn require_operator(&self) -> Result<(), ApiError> {
        match self.workspace_id {
            None => Ok(()),
            Some(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this action needs an operator token (one without a workspace scope)",
            )),
        }
    }
}
