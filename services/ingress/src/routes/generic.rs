//! `POST /hooks/{token}`: any endpoint by its address token; the endpoint's kind picks the
//! vendor's verification and subject rules.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use sea_orm::TransactionTrait as _;
use store::entity::ConnectionKind;

use super::json_object;
use crate::AppState;
use crate::endpoint::{self, Lookup};

pub async fn receive(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut vendor = "unknown";
    let run = async {
        let body = super::body(body, state.settings.max_body_bytes)?;
        let txn = state.db.begin().await?;
        let ep = endpoint::find_one(&txn, &state.secret_key, Lookup::AddressToken(&token)).await?;
        vendor = ep.ids.kind.as_str();
        match ep.ids.kind {
            ConnectionKind::Github => {
                super::github::deliver(&state, txn, &ep, &headers, body).await
            }
            ConnectionKind::Gitlab => {
                super::gitlab::deliver_shared(&state, txn, &ep, &headers, body).await
            }
            ConnectionKind::Slack => {
                let payload = json_object(&body)?;
                super::slack::deliver(&state, txn, &ep, &headers, body, payload).await
            }
            ConnectionKind::Outline => {
                super::outline::deliver(&state, txn, &ep, &headers, body).await
            }
        }
    };
    let result = run.await;
    result.unwrap_or_else(|r| r.respond(vendor))
}
