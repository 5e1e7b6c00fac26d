//! What a GitHub PAT connection may name: each configured `owner/name` must resolve with the
//! connection's own token against its own GitHub server before anything is stored, so a tenant
//! cannot name a repository its credentials do not reach (another workspace's private mirror).

use github_client::{Auth, ClientConfig, Error, GithubClient};
use serde_json::Value;

use crate::error::ApiError;

/// The repositories a GitHub connection's settings name, if it is a PAT connection: every
/// `owner/name` is resolved with `token` against `api`. Refusals name the repository.
/// Called before the transaction that stores the connection (no HTTP inside it).
pub async fn verify_pat_repositories(
    api: &ClientConfig,
    settings: &Value,
    token: Option<&str>,
) -> Result<(), ApiError> {
    if settings.get("auth").and_then(Value::as_str) != Some("pat") {
        return Ok(());
    }
    let names = match settings.get("repositories") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .and_then(|s| s.split_once('/'))
                    .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
                    .map(|(o, n)| (o.to_owned(), n.to_owned()))
                    .ok_or_else(|| {
                        ApiError::unprocessable(
                            "invalid_repository",
                            format!("settings.repositories: {v} is not \"owner/name\""),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(ApiError::unprocessable(
                "invalid_settings",
                "settings.repositories must be a list of \"owner/name\" strings",
            ));
        }
    };
    if names.is_empty() {
        return Ok(());
    }
    let token = token.ok_or_else(|| {
        ApiError::unprocessable(
            "missing_secret",
            "a GitHub PAT connection needs the `token` secret to verify its repositories",
        )
    })?;
    let client = GithubClient::new(api, Auth::personal_token(token)).map_err(ApiError::internal)?;
    for (owner, name) in names {
        match client.repository_by_name(&owner, &name).await {
            Ok(Some(_)) => {}
            // Not found and not visible look the same, as GitHub means them to.
            Ok(None)
            | Err(Error::Forbidden { .. })
            | Err(Error::Http {
                status: 403 | 404, ..
            }) => {
                return Err(ApiError::unprocessable(
                    "repository_not_accessible",
                    format!(
                        "{owner}/{name} does not exist or the token cannot see it; grant the token access to it or remove it from settings.repositories"
                    ),
                ));
            }
            Err(Error::Auth { .. } | Error::Http { status: 401, .. }) => {
                return Err(ApiError::unprocessable(
                    "credentials_refused",
                    "GitHub refused the `token` secret; nothing was stored",
                ));
            }
            // An outage, a rate limit or an answer we cannot read is not a verdict. The tenant
            // learns which of these it was, never what the server answered (its server may be
            // anything); the log has the detail.
            Err(e) => {
                tracing::warn!(repository = %format!("{owner}/{name}"), error = %e, "could not verify a GitHub repository");
                return Err(ApiError::new(
                    axum::http::StatusCode::BAD_GATEWAY,
                    "github_unavailable",
                    format!(
                        "could not verify {owner}/{name} with GitHub ({}); nothing was stored, try again",
                        failure(&e)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What a tenant is told of a failed call: its kind, never the server's words.
fn failure(e: &Error) -> &'static str {
    match e {
        Error::Transport(t) if t.is_timeout() => "timed out",
        Error::Deadline { .. } => "timed out",
        Error::Transport(_) | Error::Unreachable(_) => "vendor unreachable",
        Error::RateLimited { .. } | Error::BudgetExhausted(_) => "rate limited",
        Error::Http { status, .. } if *status >= 500 => "the server is failing",
        Error::Redirected { .. } => "the server redirected; check server_url",
        _ => "the server's answer could not be read",
    }
}
