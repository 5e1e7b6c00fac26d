//! What every generated call does around its HTTP exchange.
//!
//! progenitor decodes an error status it knows (401, 403, 404, 429) as Outline's error object;
//! when the body is not one (a proxy's HTML page in front of a self-hosted Outline, a cut-off
//! body), the decoding error would lose the status. An error answer whose body is not Outline's
//! is therefore handed on with an empty error object instead, its status and headers
//! (`Retry-After`) kept, so that the status decides.

use progenitor_client::{ClientHooks, ClientInfo, OperationInfo};

use crate::generated::{Client, types};

/// The most of an error answer's body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

impl ClientHooks for Client {
    async fn exec(
        &self,
        request: reqwest::Request,
        _info: &OperationInfo,
    ) -> reqwest::Result<reqwest::Response> {
        let response = self.client().execute(request).await?;
        let status = response.status();
        if status.is_success() || status.is_redirection() {
            return Ok(response);
        }
        let version = response.version();
        let headers = response.headers().clone();
        let body = match vendor_http::read_capped(response, MAX_ERROR_BODY).await {
            Ok(body) if serde_json::from_slice::<types::Error>(&body).is_ok() => body,
            Ok(_) | Err(vendor_http::BodyError::TooLarge) => b"{}".to_vec(),
            Err(vendor_http::BodyError::Transport(e)) => return Err(e),
        };
        let mut rebuilt = http::Response::new(body);
        *rebuilt.status_mut() = status;
        *rebuilt.version_mut() = version;
        *rebuilt.headers_mut() = headers;
        // The length is the new body's.
        rebuilt.headers_mut().remove(http::header::CONTENT_LENGTH);
        Ok(reqwest::Response::from(rebuilt))
    }
}
