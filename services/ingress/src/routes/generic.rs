//! `POST /hooks/{token}`: any endpoint by its address token; the endpoint's kind picks the
//! vendor's verification and subject rules.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use store::entity::ConnectionKind;

use crate::AppState;
use crate::endpoint::{Attempt, Lookup, with_fresh_retry};

pub async fn receive(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The vendor label of the metrics, once the endpoint is known.
    let vendor = std::sync::OnceLock::new();
    let run = async {
        // The endpoint's kind (which never changes) picks the body limit, so the body is read
        // only once the token names an endpoint, and no further than that vendor's limit.
        let kind = state
            .endpoints
            .find_one(
                &state.db,
                &state.secret_key,
                Lookup::AddressToken(&token),
                &Attempt::default(),
            )
            .await?
            .ids
            .kind;
        let limit = state.settings.body_limits.for_kind(kind);
        let body = state.read_body(&headers, body, limit).await?;
        with_fresh_retry(|attempt| {
            let (state, headers, body, vendor) = (&state, &headers, body.bytes.clone(), &vendor);
            let lookup = Lookup::AddressToken(&token);
            async move {
                let ep = state
                    .endpoints
                    .find_one(&state.db, &state.secret_key, lookup, &attempt)
                    .await?;
                // A retry finds the same endpoint, so the first label stands.
                let _ = vendor.set(ep.ids.kind.as_str());
                match ep.ids.kind {
                    ConnectionKind::Github => {
                        super::github::deliver(state, &ep, headers, body).await
                    }
                    ConnectionKind::Gitlab => {
                        super::gitlab::deliver_shared(state, &ep, headers, body).await
                    }
                    ConnectionKind::Slack => super::slack::deliver(state, &ep, headers, body).await,
                    ConnectionKind::Outline => {
                        super::outline::deliver(state, &ep, headers, body).await
                    }
                }
            }
        })
        .await
    };
    let result = run.await;
    let vendor = vendor.get().copied().unwrap_or("unknown");
    result.unwrap_or_else(|r| r.respond(vendor))
}
