//! JetStream for forgesync: stream declaration, publishing with `Nats-Msg-Id`, durable pull
//! consumers whose messages are nak'ed unless explicitly acked, dead messages in Postgres, and the
//! outbox relay.
#![forbid(unsafe_code)]

pub mod consumer;
pub mod dead;
pub mod namespace;
pub mod relay;
pub mod streams;

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;

pub use namespace::Namespace;
pub use streams::{Stream, StreamSettings};

/// Header carrying the id JetStream deduplicates on.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Errors talking to NATS.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    #[error("declaring stream {stream}: {message}")]
    Declare { stream: String, message: String },
    #[error("publishing to {subject}: {message}")]
    Publish { subject: String, message: String },
    #[error("consumer {consumer}: {message}")]
    Consumer { consumer: String, message: String },
}

/// A JetStream handle bound to a namespace (empty in production, unique per test).
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    js: jetstream::Context,
    namespace: Namespace,
    settings: StreamSettings,
}

/// What the stream acknowledged for one publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub sequence: u64,
    /// The stream already held a message with this id inside its duplicate window.
    pub duplicate: bool,
}

impl Bus {
    /// Connects to NATS and binds to `namespace`.
    pub async fn connect(
        url: &str,
        namespace: Namespace,
        settings: StreamSettings,
    ) -> Result<Self, BusError> {
        let client = async_nats::ConnectOptions::new()
            .name("forgesync")
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|source| BusError::Connect {
                url: url.to_owned(),
                source,
            })?;
        Ok(Self::from_client(client, namespace, settings))
    }

    /// Wraps an existing client.
    pub fn from_client(
        client: async_nats::Client,
        namespace: Namespace,
        settings: StreamSettings,
    ) -> Self {
        let js = jetstream::new(client.clone());
        Bus {
            client,
            js,
            namespace,
            settings,
        }
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    pub fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// Declares every stream of DESIGN.md; safe to call from every replica at every start.
    pub async fn declare_streams(&self) -> Result<(), BusError> {
        for stream in Stream::ALL {
            streams::declare(&self.js, &self.namespace, &self.settings, stream).await?;
        }
        Ok(())
    }

    /// Publishes and waits for the stream's ack. `msg_id` becomes `Nats-Msg-Id`, so publishing the
    /// same id again inside the duplicate window stores nothing new.
    pub async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<Published, BusError> {
        let ack = self
            .publish_start(subject, msg_id, headers, payload)
            .await?;
        ack.await
    }

    /// Sends a publish and returns a future for its ack, so a batch can be pipelined.
    pub async fn publish_start(
        &self,
        subject: &str,
        msg_id: &str,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<impl std::future::Future<Output = Result<Published, BusError>> + use<>, BusError>
    {
        let full = self.namespace.subject(subject);
        let err = move |message: String| BusError::Publish {
            subject: full.clone(),
            message,
        };
        let ack = self
            .js
            .send_publish(
                self.namespace.subject(subject),
                PublishMessage::build()
                    .payload(payload)
                    .headers(headers)
                    .message_id(msg_id),
            )
            .await
            .map_err(|e| err(e.to_string()))?;
        Ok(async move {
            let ack = ack.await.map_err(|e| err(e.to_string()))?;
            Ok(Published {
                sequence: ack.sequence,
                duplicate: ack.duplicate,
            })
        })
    }
}
