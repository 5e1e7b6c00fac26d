//! The bytes all requests may hold in buffered bodies together. A body is read only once its
//! route has found the endpoint it names, and then only while the budget has room for each chunk
//! as it arrives: past the budget the request is answered 503 at once, so many large or slow
//! bodies cannot take the replica's memory. What a request took is given back when it is answered.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::reject::Rejection;

/// Shared by every route of one ingress process.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    /// A budget of `bytes` (at least one byte, at most what a semaphore counts).
    pub fn new(bytes: usize) -> Self {
        let total = bytes.clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Bytes held by bodies being read or handled now.
    pub fn held(&self) -> usize {
        self.total - self.permits.available_permits()
    }

    fn publish(&self) {
        metrics::gauge!("ingress_buffered_bytes").set(self.held() as f64);
    }

    /// Reads `body` whole, up to `limit` bytes: 413 when its declared length or its bytes pass
    /// the limit (without reading on), 503 when the budget has no room for the next chunk, 408
    /// when the body-read deadline passes.
    pub async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
        deadline: Duration,
    ) -> Result<Buffered, Rejection> {
        use http_body_util::BodyExt as _;
        if declared_length(headers).is_some_and(|len| len > limit) {
            return Err(Rejection::too_large(limit));
        }
        let mut held = Held {
            budget: self.clone(),
            permit: None,
        };
        let mut bytes = BytesMut::new();
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| crate::routes::body_error(&e, limit, deadline))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers carry nothing we keep
            };
            if bytes.len() + data.len() > limit {
                return Err(Rejection::too_large(limit));
            }
            held.take(data.len())?;
            bytes.extend_from_slice(&data);
        }
        Ok(Buffered {
            bytes: bytes.freeze(),
            _held: held,
        })
    }
}

/// The `Content-Length` a request declares, if it declares one that parses.
fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What one request holds of the budget; given back when dropped.
#[derive(Debug)]
struct Held {
    budget: BodyBudget,
    permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// Takes `n` more bytes, or refuses with 503 when the budget has no room for them.
    fn take(&mut self, n: usize) -> Result<(), Rejection> {
        if n == 0 {
            return Ok(());
        }
        let more = u32::try_from(n)
            .ok()
            .and_then(|n| self.budget.permits.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(Rejection::busy)?;
        match &mut self.permit {
            Some(permit) => permit.merge(more),
            none => *none = Some(more),
        }
        self.budget.publish();
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let permit = self.permit.take();
        if let Some(permit) = permit {
            drop(permit);
            self.budget.publish();
        }
    }
}

/// A body read whole, holding its bytes of the budget until the request is answered.
#[derive(Debug)]
pub struct Buffered {
    pub bytes: Bytes,
    _held: Held,
}
