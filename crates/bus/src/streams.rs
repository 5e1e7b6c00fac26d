//! The streams (docs/architecture.md, "Subjects and streams") and their idempotent declaration.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{BusError, Namespace, Unmet};

/// One JetStream stream and the subjects it captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    WebhooksGithub,
    WebhooksGitlab,
    WebhooksSlack,
    WebhooksOutline,
    Lifecycle,
    Jobs,
    Events,
}

impl Stream {
    pub const ALL: [Stream; 7] = [
        Stream::WebhooksGithub,
        Stream::WebhooksGitlab,
        Stream::WebhooksSlack,
        Stream::WebhooksOutline,
        Stream::Lifecycle,
        Stream::Jobs,
        Stream::Events,
    ];

    /// The stream's name without namespace.
    pub fn name(self) -> &'static str {
        match self {
            Stream::WebhooksGithub => "WEBHOOKS_GITHUB",
            Stream::WebhooksGitlab => "WEBHOOKS_GITLAB",
            Stream::WebhooksSlack => "WEBHOOKS_SLACK",
            Stream::WebhooksOutline => "WEBHOOKS_OUTLINE",
            Stream::Lifecycle => "LIFECYCLE",
            Stream::Jobs => "JOBS",
            Stream::Events => "EVENTS",
        }
    }

    /// The first subject token the stream captures.
    pub fn root_token(self) -> &'static str {
        match self {
            Stream::WebhooksGithub => "github",
            Stream::WebhooksGitlab => "gitlab",
            Stream::WebhooksSlack => "slack",
            Stream::WebhooksOutline => "outline",
            Stream::Lifecycle => "lifecycle",
            Stream::Jobs => "jobs",
            Stream::Events => "events",
        }
    }

    /// The stream that captures a logical subject, if any.
    pub fn for_subject(subject: &str) -> Option<Stream> {
        let root = subject.split('.').next()?;
        Stream::ALL.into_iter().find(|s| s.root_token() == root)
    }
}

/// Operator-tunable stream settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// Replicas per stream (3 in production clusters; 1 for a single server).
    pub replicas: usize,
    /// How long a message is kept; zero keeps it until limits remove it.
    pub max_age: Duration,
    /// Window inside which a repeated `Nats-Msg-Id` is absorbed.
    pub duplicate_window: Duration,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            replicas: 1,
            max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(3 * 3600),
        }
    }
}

/// Why a stream could not be declared as configured.
pub(crate) struct DeclareError {
    stream: String,
    kind: DeclareFailure,
}

enum DeclareFailure {
    /// The server refused the declaration.
    Refused(jetstream::context::CreateStreamError),
    /// The server declared the stream with fewer replicas than asked.
    Kept(usize),
}

impl DeclareError {
    /// Replicas the server cannot place become [`Unmet::Replicas`]; anything else stays a
    /// declaration failure (retrying may help).
    pub(crate) fn into_bus_error(self, settings: &StreamSettings, server: &str) -> BusError {
        use jetstream::ErrorCode;
        use jetstream::context::CreateStreamErrorKind as K;
        let unmet = |detail: String| {
            BusError::from(Unmet::Replicas {
                wanted: settings.replicas,
                server: server.to_owned(),
                stream: self.stream.clone(),
                detail,
            })
        };
        match self.kind {
            DeclareFailure::Kept(kept) => unmet(format!("it keeps {kept}")),
            DeclareFailure::Refused(error) => {
                if let K::JetStream(js) = error.kind() {
                    let code = js.error_code();
                    // A single server refuses R>1 outright; a cluster short of peers finds none.
                    if settings.replicas > 1
                        && (code == ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED
                            || code == ErrorCode::CLUSTER_NO_PEERS
                            || code == ErrorCode::INSUFFICIENT_RESOURCES)
                    {
                        return unmet(js.to_string());
                    }
                }
                BusError::Declare {
                    stream: self.stream,
                    message: error.to_string(),
                }
            }
        }
    }
}

/// Creates the stream, or updates it to the wanted settings when it exists.
pub(crate) async fn declare(
    js: &jetstream::Context,
    ns: &Namespace,
    settings: &StreamSettings,
    which: Stream,
) -> Result<(), DeclareError> {
    let name = ns.name(which.name());
    let config = stream::Config {
        name: name.clone(),
        subjects: vec![ns.subject(&format!("{}.>", which.root_token()))],
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        max_age: settings.max_age,
        duplicate_window: settings.duplicate_window,
        ..Default::default()
    };
    let info = js
        .create_or_update_stream(config)
        .await
        .map_err(|error| DeclareError {
            stream: name.clone(),
            kind: DeclareFailure::Refused(error),
        })?;
    // A stream with fewer copies than asked would lose acknowledged messages with one node.
    if info.config.num_replicas < settings.replicas {
        return Err(DeclareError {
            stream: name,
            kind: DeclareFailure::Kept(info.config.num_replicas),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Stream;

    #[test]
    fn every_subject_family_has_its_stream() {
        assert_eq!(
            Stream::for_subject("github.o.r.push"),
            Some(Stream::WebhooksGithub)
        );
        assert_eq!(
            Stream::for_subject("lifecycle.github.c.activated"),
            Some(Stream::Lifecycle)
        );
        assert_eq!(
            Stream::for_subject("jobs.gitlab.c.backfill"),
            Some(Stream::Jobs)
        );
        assert_eq!(Stream::for_subject("events.w.t"), Some(Stream::Events));
        assert_eq!(Stream::for_subject("nope.x"), None);
    }
}
