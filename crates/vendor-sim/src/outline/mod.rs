//! Simulated Outline: the API methods of our contract (`auth.info`, `collections.list`,
//! `.info`, `documents.list`, `.info`, `webhookSubscriptions.create`, `.list`, `.delete`) served
//! from an in-memory [`Model`] of one team at `POST /api/<method>` in Outline's shapes (an
//! envelope with `data`, `pagination` with a `nextPath` on every page so a listing ends with an
//! empty one, `policies`; errors as `{ok:false, error, status, message}`), with an optional
//! per-key [`RateLimit`] announced in `RateLimit-*` headers, per-call [`OutlineFault`] injection
//! and a call log. Every change to the model is delivered to each
//! webhook subscription that takes its event ([`deliveries`]): signed with
//! `Outline-Signature`, `model: null` once the thing is gone, duplicated or reordered on demand.
//!
//! For tests in other processes and the local stack the same is served over HTTP:
//! `POST /_admin/<action>` with a JSON body, `<action>` one of `tokens.add`, `tokens.revoke`,
//! `collections.create`, `collections.delete`, `collections.list`, `documents.create`,
//! `documents.update`, `documents.delete` (delivers only with `"deliver": true`),
//! `documents.move`, `documents.archive`, `documents.publish`, `documents.restore`,
//! `documents.permanent_delete`, `documents.list`, `webhookSubscriptions.list` (with secrets),
//! `calls`, `deliveries`, `deliveries.plan`, `deliveries.release`, `faults.inject`,
//! `faults.clear`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use vendor_sim::outline::{Change, Fault, Model, NewDocument, OutlineFault, OutlineSim, methods};
//! let mut model = Model::new("acme");
//! model.add_token("ol_api_test");
//! let docs = model.add_collection("Docs");
//! let first = model.add_document(NewDocument::new(&docs, "Welcome").text("hello"))?;
//! let sim = OutlineSim::start(model).await?;
//! // The second page of a listing sees the first document deleted just before it.
//! sim.inject(Fault::nth(
//!     methods::DOCUMENTS_LIST,
//!     2,
//!     OutlineFault::Change(vec![Change::DeleteDocument { id: first }]),
//! ));
//! sim.inject(Fault::nth(methods::WEBHOOK_SUBSCRIPTIONS_CREATE, 1, OutlineFault::lost_with(502)));
//! // outline-client takes sim.base_url() (it appends `/api/<method>`); by hand, POST to
//! // sim.api_url() + method with `Authorization: Bearer ol_api_test`
//! # Ok(()) }
//! ```

pub mod deliveries;
mod fault;
mod model;
mod server;
mod wire;

pub use super::github::{Calls, Fault};
pub use deliveries::{
    DeliveryAttempt, DeliveryPlan, Order, SIGNATURE_HEADER, signature, signature_header,
    signed_headers, unix_ms,
};
pub use fault::{Change, Lost, Mutation, OutlineFault, methods};
pub use model::{
    Collection, Document, Model, NewDocument, OutlineError, RateLimit, Subscription, Team, User,
    events,
};
pub use server::{ApiCall, OutlineSim};
pub use wire::date;
