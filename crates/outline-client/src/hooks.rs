//! What every generated call does around its HTTP exchange: the answer's body is read here,
//! under a cap, and handed on whole.
//!
//! - A tenant may name its own Outline server, so an answer must not exhaust our memory: a body
//!   larger than [`Limits::max_response_bytes`] is not read further, and the generated code
//!   meets a body that fails with [`ResponseTooLarge`] instead
//!   ([`OutlineError::TooLarge`](crate::OutlineError::TooLarge)).
//! - progenitor decodes an error status it knows (401, 403, 404, 429) as Outline's error
//!   object; when the body is not one (a proxy's HTML page in front of a self-hosted Outline),
//!   the decoding error would lose the status. Such an answer is handed on with an empty error
//!   object, its status and headers (`Retry-After`) kept, so that the status decides.

use bytes::Bytes;
use progenitor_client::{ClientHooks, ClientInfo, OperationInfo};

use crate::generated::{Client, types};

/// The most of an error answer's body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What the hooks need to know, carried by the generated client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest success answer read.
    pub max_response_bytes: usize,
}

/// Why an answer's body was not read: larger than the client's cap.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the answer is larger than {limit} bytes, the most the client reads")]
pub struct ResponseTooLarge {
    /// The cap, in bytes.
    pub limit: usize,
}

impl ClientHooks<Limits> for Client {
    async fn exec(
        &self,
        request: reqwest::Request,
        _info: &OperationInfo,
    ) -> reqwest::Result<reqwest::Response> {
        let response = self.client().execute(request).await?;
        let status = response.status();
        // A redirect is not followed and its body not read.
        if status.is_redirection() {
            return Ok(response);
        }
        let version = response.version();
        let headers = response.headers().clone();
        let cap = if status.is_success() {
            self.inner().max_response_bytes
        } else {
            MAX_ERROR_BODY
        };
        let body = match vendor_http::read_capped(response, cap).await {
            Ok(body) if status.is_success() => reqwest::Body::from(body),
            Ok(body) if serde_json::from_slice::<types::Error>(&body).is_ok() => body.into(),
            Ok(_) => reqwest::Body::from("{}"),
            Err(vendor_http::BodyError::TooLarge) if status.is_success() => {
                let too_large = ResponseTooLarge { limit: cap };
                reqwest::Body::wrap_stream(futures::stream::once(async move {
                    Err::<Bytes, _>(too_large)
                }))
            }
            // An error's status says enough without its body.
            Err(vendor_http::BodyError::TooLarge) => reqwest::Body::from("{}"),
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

/// The cap a failed body read met, if that is why it failed.
pub(crate) fn too_large_in(error: &(dyn std::error::Error + 'static)) -> Option<ResponseTooLarge> {
    let mut source = Some(error);
    while let Some(err) = source {
        if let Some(found) = err.downcast_ref::<ResponseTooLarge>() {
            return Some(*found);
        }
        source = err.source();
    }
    None
}
