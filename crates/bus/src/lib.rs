//! JetStream for forgesync: stream declaration, publishing with `Nats-Msg-Id`, durable pull
//! consumers whose messages are nak'ed unless explicitly acked, dead messages in Postgres, the
//! outbox relay, and erasing messages from streams (one delivery, or by the ledger).
#![forbid(unsafe_code)]

pub mod consumer;
pub mod consumer_metrics;
/// The message contracts shared by producers and consumers (defined beside the outbox).
pub use store::contracts;
pub mod dead;
pub mod erasure;
pub mod namespace;
pub mod permissions;
pub mod relay;
pub mod streams;

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use tracing::Instrument as _;

pub use erasure::erase_delivery;
pub use namespace::Namespace;
pub use streams::{Stream, StreamSettings};

/// Header carrying the id JetStream deduplicates on.
pub const MSG_ID_HEADER: &str = store::headers::MSG_ID;

/// The NATS server's default `max_control_line`, the longest protocol line it reads: for a
/// publish, `HPUB <subject> <reply> <header bytes> <total bytes>`. A longer line makes the server
/// close the connection (every publish on it fails), and INFO does not announce the limit, so the
/// default is assumed.
pub const MAX_CONTROL_LINE: usize = 4096;

/// What the publish line holds besides the subject: verb, reply inbox, two sizes, spaces, CRLF.
const PUB_LINE_ROOM: usize = 128;

/// Room kept in the server's `max_payload` for a message's headers (ours hold uuids, an event
/// name and a message id, each capped by [`store::headers::MAX_VALUE_BYTES`]).
pub const HEADER_ROOM: usize = 8 * 1024;

/// A NATS header map of `pairs`, each name and value vetted first ([`store::headers`]): a value
/// with CR or LF would make the client panic, so it is refused here instead.
pub fn header_map<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<HeaderMap, store::headers::HeaderError> {
    use std::str::FromStr as _;
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        store::headers::check_name(name)?;
        store::headers::check_value(name, value)?;
        let bad_name = || store::headers::HeaderError::BadName {
            name: name.to_owned(),
        };
        let n = async_nats::HeaderName::from_str(name).map_err(|_| bad_name())?;
        // Checked above: no CR or LF, so this parse cannot fail.
        let v = async_nats::HeaderValue::from_str(value).map_err(|_| bad_name())?;
        map.insert(n, v);
    }
    Ok(map)
}

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
    Publish {
        subject: String,
        message: String,
        /// No retry can succeed (too large, invalid subject or header, refused by the stream).
        permanent: bool,
    },
    #[error("consumer {consumer}: {message}")]
    Consumer { consumer: String, message: String },
    /// Deleting messages from a stream failed; deleting them again resumes.
    #[error("erasing from stream {stream}: {message}")]
    Erase { stream: String, message: String },
    /// A subject too long for the server's publish line; nothing was published.
    #[error(
        "refusing to publish: the subject is {len} bytes, more than the {max} the server reads"
    )]
    SubjectTooLong { len: usize, max: usize },
    /// A header or message id the client could not send; nothing was published.
    #[error("refusing to publish to {subject}: {source}")]
    BadHeader {
        subject: String,
        #[source]
        source: store::headers::HeaderError,
    },
    /// The server cannot carry our streams as configured.
    #[error(transparent)]
    Unmet(#[from] Unmet),
}

/// A NATS prerequisite the server does not meet (docs/deploy.md, "NATS prerequisites"). Each
/// names its fix: no retry helps until the server or the setting changes.
#[derive(Debug, thiserror::Error)]
pub enum Unmet {
    #[error(
        "JetStream is not enabled on the NATS server {server}: start nats-server with `-js` or \
         give its config a `jetstream {{}}` block (docs/deploy.md, NATS prerequisites)"
    )]
    JetStreamOff { server: String },
    #[error(
        "FORGESYNC_STREAM_REPLICAS is {wanted}, but the NATS server {server} cannot place \
         {wanted} replicas of stream {stream} ({detail}): run at least {wanted} JetStream servers \
         in one cluster, or set FORGESYNC_STREAM_REPLICAS (the chart's `nats.streamReplicas`) \
         to the number it has"
    )]
    Replicas {
        wanted: usize,
        server: String,
        stream: String,
        detail: String,
    },
}

impl BusError {
    /// Whether retrying cannot help: only a publish the server or client refuses for what the
    /// message is (never for the connection's state) counts.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            BusError::Publish {
                permanent: true,
                ..
            } | BusError::SubjectTooLong { .. }
                | BusError::BadHeader { .. }
        )
    }
}

/// Whether a JetStream publish failure is about the message itself (permanent) or about the
/// moment (NATS down, timeout, no stream yet: transient).
fn publish_failure_is_permanent(e: &jetstream::context::PublishError, connected: bool) -> bool {
    use async_nats::jetstream::context::PublishErrorKind as K;
    use std::error::Error as _;
    match e.kind() {
        // Larger than the server's max_payload: it never fits. Before the first connection the
        // client only knows a default limit, so then it is not the server's verdict.
        K::MaxPayloadExceeded => connected,
        K::Other => {
            let source = e.source();
            if source.is_some_and(|s| s.is::<async_nats::SubjectError>()) {
                return true;
            }
            // The stream answered with an error: permanent only for what the message is.
            source
                .and_then(|s| s.downcast_ref::<jetstream::Error>())
                .is_some_and(|js| {
                    matches!(
                        js.error_code().0,
                        // message exceeds the stream's maximum size; headers exceed the maximum;
                        // invalid message TTL; message TTL disabled on the stream
                        10054 | 10097 | 10165 | 10166
                    )
                })
        }
        // No stream (possibly not declared yet), timeouts, broken connection, back-pressure.
        K::StreamNotFound
        | K::TimedOut
        | K::BrokenPipe
        | K::MaxAckPending
        | K::WrongLastMessageId
        | K::WrongLastSequence => false,
    }
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
    /// Connects to NATS and binds to `namespace`. Credentials come from the URL's user info
    /// (`nats://user:password@host`, or `nats://token@host`; percent-encoded) and, when given, an
    /// NKey seed; async-nats itself ignores a URL's user info. A user receives replies on an
    /// inbox of its own (`_INBOX.<user>`, what [`permissions`] lets it subscribe to). Errors name
    /// the URL without its user info.
    pub async fn connect(
        url: &str,
        nkey_seed: Option<&str>,
        namespace: Namespace,
        settings: StreamSettings,
    ) -> Result<Self, BusError> {
        let mut options = async_nats::ConnectOptions::new()
            .name("forgesync")
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5));
        match url_credentials(url) {
            Some((user, Some(password))) => {
                if let Some(prefix) = permissions::inbox_prefix(&user) {
                    options = options.custom_inbox_prefix(prefix);
                }
                options = options.user_and_password(user, password);
            }
            Some((token, None)) => options = options.token(token),
            None => {}
        }
        if let Some(seed) = nkey_seed {
            options = options.nkey(seed.to_owned());
        }
        let client = options
            .connect(url)
            .await
            .map_err(|source| BusError::Connect {
                url: without_credentials(url),
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

    /// Longest logical subject (before the namespace prefix) a publish may carry.
    pub fn max_subject_bytes(&self) -> usize {
        MAX_CONTROL_LINE - PUB_LINE_ROOM - self.namespace.subject("").len()
    }

    /// The connected server's `max_payload` less [`HEADER_ROOM`]: the largest body a message may
    /// carry. `None` until the client has met a server (its INFO is not known yet).
    pub fn max_body_bytes(&self) -> Option<usize> {
        match self.client.server_info().max_payload {
            0 => None,
            n => Some(n.saturating_sub(HEADER_ROOM)),
        }
    }

    /// Declares every stream of DESIGN.md; safe to call from every replica at every start. A
    /// server without JetStream, or one that cannot place the configured replicas, is reported
    /// as [`BusError::Unmet`] naming the fix.
    pub async fn declare_streams(&self) -> Result<(), BusError> {
        self.check_jetstream().await?;
        for stream in Stream::ALL {
            streams::declare(&self.js, &self.namespace, &self.settings, stream)
                .await
                .map_err(|e| e.into_bus_error(&self.settings, &self.server_name()))?;
        }
        Ok(())
    }

    /// The connected server's name, for messages that must say which server is wrong.
    fn server_name(&self) -> String {
        let info = self.client.server_info();
        match info.server_name.as_str() {
            "" => format!("at {}:{}", info.host, info.port),
            name => format!("`{name}`"),
        }
    }

    /// JetStream answers on this account: asked before anything is declared, so a server
    /// running without it is named as such rather than as a failed stream.
    async fn check_jetstream(&self) -> Result<(), BusError> {
        use async_nats::jetstream::ErrorCode;
        use async_nats::jetstream::context::AccountErrorKind as K;
        let off = || Unmet::JetStreamOff {
            server: self.server_name(),
        };
        match self.js.query_account().await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                // Nothing answers the JetStream API: the server runs without it.
                K::JetStreamUnavailable => Err(off().into()),
                K::JetStream(js)
                    if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                        || js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
                {
                    Err(off().into())
                }
                _ => Err(BusError::Declare {
                    stream: "(account information)".to_owned(),
                    message: e.to_string(),
                }),
            },
        }
    }

    /// Declares every stream, retrying with backoff (1 s doubling to 30 s) until it succeeds or
    /// `stop` is cancelled; returns whether the streams are declared. For a service that must
    /// start while NATS is down.
    pub async fn declare_streams_until_done(
        &self,
        stop: &tokio_util::sync::CancellationToken,
    ) -> bool {
        let mut wait = Duration::from_secs(1);
        loop {
            match self.declare_streams().await {
                Ok(()) => return true,
                // The server must change first: said loudly, and retried in case it does.
                Err(e @ BusError::Unmet(_)) => {
                    tracing::error!(error = %e, retry_in = ?wait, "NATS does not meet forgesync's prerequisites; retrying");
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "declaring JetStream streams failed; retrying");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(Duration::from_secs(30));
        }
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

    /// Publishes the message of outbox row `outbox_id` now and waits for the stream's ack, as
    /// the relay would (its headers; its message id, or else the row's). A relay publishing the
    /// same row later leaves one copy: the message id is the stream's dedup key.
    pub async fn publish_outbox(
        &self,
        outbox_id: uuid::Uuid,
        message: store::outbox::OutboxMessage,
    ) -> Result<Published, BusError> {
        let headers = header_map(
            message
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(|source| BusError::BadHeader {
            subject: self.namespace.subject(&message.subject),
            source,
        })?;
        let msg_id = message.effective_msg_id(outbox_id);
        self.publish(
            &message.subject,
            &msg_id,
            headers,
            Bytes::from(message.payload),
        )
        .await
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
        // The client panics on CR/LF in a header: refuse such a message id with an error.
        if let Err(source) = store::headers::check_value(MSG_ID_HEADER, msg_id) {
            return Err(BusError::BadHeader {
                subject: full,
                source,
            });
        }
        // A publish line over the server's limit would close the connection for every publisher.
        if full.len() > MAX_CONTROL_LINE - PUB_LINE_ROOM {
            return Err(BusError::SubjectTooLong {
                len: full.len(),
                max: MAX_CONTROL_LINE - PUB_LINE_ROOM,
            });
        }
        // One producer span per message, from the send until the stream's ack.
        let span = tracing::info_span!(
            "publish",
            otel.name = %format_args!("publish {}", subject.split('.').next().unwrap_or_default()),
            otel.kind = "producer",
            otel.status_code = tracing::field::Empty,
            subject,
            msg_id,
            stream_sequence = tracing::field::Empty,
            duplicate = tracing::field::Empty,
        );
        let err = {
            let span = span.clone();
            move |message: String, permanent: bool| {
                span.record("otel.status_code", "ERROR");
                BusError::Publish {
                    subject: full.clone(),
                    message,
                    permanent,
                }
            }
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
            .instrument(span.clone())
            .await
            .map_err(|e| {
                let connected =
                    self.client.connection_state() == async_nats::connection::State::Connected;
                err(e.to_string(), publish_failure_is_permanent(&e, connected))
            })?;
        Ok(async move {
            let ack = ack
                .await
                .map_err(|e| err(e.to_string(), publish_failure_is_permanent(&e, true)))?;
            let span = tracing::Span::current();
            span.record("stream_sequence", ack.sequence);
            span.record("duplicate", ack.duplicate);
            Ok(Published {
                sequence: ack.sequence,
                duplicate: ack.duplicate,
            })
        }
        .instrument(span))
    }
}

/// The user info of the first server of a NATS URL, percent-decoded: (user, password) or
/// (token, None).
fn url_credentials(url: &str) -> Option<(String, Option<String>)> {
    let first = url.split(',').next()?.trim();
    let rest = &first[first.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (info, _) = authority.rsplit_once('@')?;
    Some(match info.split_once(':') {
        Some((user, password)) => (percent_decode(user), Some(percent_decode(password))),
        None => (percent_decode(info), None),
    })
}

/// `url` with every server's user info replaced by `***`, for messages and logs.
fn without_credentials(url: &str) -> String {
    url.split(',')
        .map(|server| match (server.find("://"), server.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}***{}", &server[..scheme + 3], &server[at..])
            }
            _ => server.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_read_decoded_and_hidden() {
        let url = "nats://forgesync:p%40ss%3Aw0rd@nats-0:4222,nats://nats-1:4222";
        assert_eq!(
            url_credentials(url),
            Some(("forgesync".into(), Some("p@ss:w0rd".into())))
        );
        assert_eq!(
            url_credentials("nats://s3cr3t-token@nats:4222"),
            Some(("s3cr3t-token".into(), None))
        );
        assert_eq!(url_credentials("nats://nats:4222"), None);
        assert_eq!(url_credentials("nats://nats:4222/path@x"), None);
        assert_eq!(
            without_credentials(url),
            "nats://***@nats-0:4222,nats://nats-1:4222"
        );
        assert_eq!(percent_decode("100%"), "100%");
    }
}
