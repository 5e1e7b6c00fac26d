//! Simulated Slack: the Web API methods of our contract (`auth.test`, `conversations.list`,
//! `.info`, `.history`, `.replies`, `chat.postMessage`) served from an in-memory [`Model`] at
//! `/api/<method>` in Slack's wire shapes (HTTP 200 with `ok:false` for API errors, cursors in
//! `response_metadata.next_cursor`), with per-method rate-limit [`Tier`]s, per-call
//! [`SlackFault`] injection and a call log with each call's parameters. Every change to the model
//! is sent as the Events API does ([`events`]): signed `event_callback` envelopes, retried on
//! failure.
//!
//! For the local stack the model's changes are also served over HTTP: `POST /_admin/<action>`
//! with a JSON body, `<action>` one of `add_team`, `add_token`, `revoke_token`, `add_user`,
//! `add_channel`, `join_bot`, `remove_bot`, `archive`, `unarchive`, `rename`, `delete_channel`,
//! `post`, `reply`, `edit`, `unfurl`, `delete`, `share_file`, `bot_message`,
//! `subscribe_events`, taking the model methods' arguments by name.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use vendor_sim::slack::{Fault, Model, RetrySchedule, SlackFault, SlackSim, methods};
//! let mut model = Model::default();
//! let team = model.add_team("acme");
//! model.add_token("xoxb-test", &team);
//! let general = model.add_channel(&team, "general", false)?;
//! model.join_bot(&general)?;
//! let alice = model.add_user(&team);
//! let sim = SlackSim::start(model).await?;
//! sim.subscribe_events("http://127.0.0.1:8080/webhooks/slack", "signing-secret");
//! sim.set_retry_schedule(RetrySchedule::time_scale(0.01));
//! sim.inject(Fault::nth(methods::CONVERSATIONS_HISTORY, 2, SlackFault::Status(503)));
//! let ts = sim.model(|m| m.post(&general, &alice, "hello"))?;
//! sim.settle().await;
//! // point the client at sim.api_url() (`.../api/`), with `Authorization: Bearer xoxb-test`
//! # let _ = ts; Ok(()) }
//! ```

pub mod events;
mod fault;
mod model;
mod server;
mod wire;

pub use super::github::{Calls, Fault};
pub use events::{EventAttempt, RetrySchedule, SendError, signature, signed_headers};
pub use fault::{Mutation, SlackFault, methods};
pub use model::{
    Channel, File, Message, Model, NON_MARKETPLACE_PAGE, RateLimits, SlackError, Team, Tier, Token,
    Ts,
};
pub use server::{ApiCall, SlackSim};
