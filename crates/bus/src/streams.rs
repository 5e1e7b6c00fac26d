//! The streams (docs/architecture.md, "Subjects and streams") and their idempotent declaration.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{BusError, Namespace};

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

/// Creates the stream, or updates it to the wanted settings when it exists.
pub(crate) async fn declare(
    js: &jetstream::Context,
    ns: &Namespace,
    settings: &StreamSettings,
    which: Stream,
) -> Result<(), BusError> {
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
    js.create_or_update_stream(config)
        .await
        .map_err(|e| BusError::Declare {
            stream: name,
            message: e.to_string(),
        })?;
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
