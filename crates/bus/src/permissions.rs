//! NATS identities: one user per service, each allowed to publish and subscribe only what the
//! service uses (docs/deploy.md, "NATS identities"). The shipped server configs are rendered from
//! here ([`authorization`]) and checked against it, and a service's outbox relay claims only the
//! rows its identity may publish ([`Identity::publishes`]).
//!
//! Every service declares every stream at start (any replica may be the first up), so each may
//! create, update and read the forgesync streams, and none may delete one. Consumers, acks and
//! message pulls are allowed per consumed stream; deleting and purging messages is the eraser's
//! (plus deleting a refused delivery from a sync service's own webhook stream). Replies reach a
//! connection on an inbox of its own user (`_INBOX.<user>.>`, set by [`crate::Bus::connect`]), so
//! no service can read another's pulled messages or acknowledgements.

use crate::{Namespace, Stream};

/// A service's NATS user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identity {
    Ingress,
    ControlApi,
    GithubSync,
    GitlabSync,
    SlackIngest,
    OutlineSync,
    Eraser,
    ProviderRepair,
}

/// What one user may publish and subscribe to (full subjects, namespace included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
}

impl Identity {
    pub const ALL: [Identity; 8] = [
        Identity::Ingress,
        Identity::ControlApi,
        Identity::GithubSync,
        Identity::GitlabSync,
        Identity::SlackIngest,
        Identity::OutlineSync,
        Identity::Eraser,
        Identity::ProviderRepair,
    ];

    /// The NATS user name: the service's name.
    pub fn user(self) -> &'static str {
        match self {
            Identity::Ingress => "ingress",
            Identity::ControlApi => "control-api",
            Identity::GithubSync => "github-sync",
            Identity::GitlabSync => "gitlab-sync",
            Identity::SlackIngest => "slack-ingest",
            Identity::OutlineSync => "outline-sync",
            Identity::Eraser => "eraser",
            Identity::ProviderRepair => "provider-repair",
        }
    }

    /// The identity of the service named `service` (its binary's name), if it connects to NATS.
    pub fn for_service(service: &str) -> Option<Identity> {
        Identity::ALL.into_iter().find(|i| i.user() == service)
    }

    /// The environment variable the shipped configs read this user's password from
    /// (`FORGESYNC_NATS_CONTROL_API_PASSWORD`).
    pub fn password_variable(self) -> String {
        format!(
            "FORGESYNC_NATS_{}_PASSWORD",
            self.user().to_ascii_uppercase().replace('-', "_")
        )
    }

    /// `url` (one server or several, comma-separated) authenticating as this user with
    /// `password` (percent-encoded into each server's user info, which replaces any there).
    pub fn url(self, url: &str, password: &str) -> String {
        let password: String = password
            .bytes()
            .map(
                |b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    true => char::from(b).to_string(),
                    false => format!("%{b:02X}"),
                },
            )
            .collect();
        url.split(',')
            .map(|server| {
                let server = server.trim();
                let (scheme, rest) = server.split_once("://").unwrap_or(("nats", server));
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                format!("{scheme}://{}:{password}@{host}", self.user())
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The logical subjects (no namespace) this service publishes messages on: what it sends
    /// inline and what its outbox rows carry.
    pub fn publishes(self) -> Vec<String> {
        match self {
            // Vendor deliveries only.
            Identity::Ingress => [
                Stream::WebhooksGithub,
                Stream::WebhooksGitlab,
                Stream::WebhooksSlack,
                Stream::WebhooksOutline,
            ]
            .map(every)
            .to_vec(),
            // Lifecycle, jobs and purges, and replays of dead messages and deliveries, which go
            // back to whatever stream they came from.
            Identity::ControlApi => Stream::ALL.map(every).to_vec(),
            // Item events, its own kind's jobs (schedules, activations) and lifecycle
            // (installation changes, released repositories).
            Identity::GithubSync => vec![
                every(Stream::Events),
                kind(Stream::Jobs, "github"),
                kind(Stream::Lifecycle, "github"),
            ],
            Identity::GitlabSync => vec![
                every(Stream::Events),
                kind(Stream::Jobs, "gitlab"),
                kind(Stream::Lifecycle, "gitlab"),
            ],
            // Channel and message events, and its own kind's scheduled jobs.
            Identity::SlackIngest => vec![every(Stream::Events), kind(Stream::Jobs, "slack")],
            // Collection and document events, and its own kind's jobs (its schedules, to come).
            Identity::OutlineSync => vec![every(Stream::Events), kind(Stream::Jobs, "outline")],
            // A purge disconnects the workspace's connections, whatever their kind.
            Identity::Eraser => vec![every(Stream::Lifecycle)],
            // Lifecycle messages only wake it; its fences are rows, it announces nothing.
            Identity::ProviderRepair => vec![],
        }
    }

    /// The streams this service consumes from.
    fn consumes(self) -> &'static [Stream] {
        match self {
            Identity::Ingress | Identity::ControlApi => &[],
            Identity::GithubSync => &[Stream::WebhooksGithub, Stream::Jobs, Stream::Lifecycle],
            Identity::GitlabSync => &[Stream::WebhooksGitlab, Stream::Jobs, Stream::Lifecycle],
            Identity::SlackIngest => &[Stream::WebhooksSlack, Stream::Jobs, Stream::Lifecycle],
            Identity::OutlineSync => &[Stream::WebhooksOutline, Stream::Jobs, Stream::Lifecycle],
            Identity::Eraser | Identity::ProviderRepair => &[Stream::Lifecycle],
        }
    }

    /// The streams this service deletes single messages from, and those it purges by subject.
    fn erases(self) -> (&'static [Stream], &'static [Stream]) {
        match self {
            Identity::Ingress | Identity::ControlApi | Identity::ProviderRepair => (&[], &[]),
            // A delivery its admission refuses and must not keep (`Delivery::erase`).
            Identity::GithubSync => (&[Stream::WebhooksGithub], &[]),
            Identity::GitlabSync => (&[Stream::WebhooksGitlab], &[]),
            // A message consent does not cover, and a deleted or withdrawn channel's deliveries.
            Identity::SlackIngest => (&[Stream::WebhooksSlack], &[]),
            // A delivery its admission refuses and must not keep (`Delivery::erase`).
            Identity::OutlineSync => (&[Stream::WebhooksOutline], &[]),
            // Erasure reaches every copy.
            Identity::Eraser => (&Stream::ALL, &Stream::ALL),
        }
    }

    /// What this user may publish and subscribe to in namespace `ns`.
    pub fn permissions(self, ns: &Namespace) -> Permissions {
        let api = |call: &str, stream: Stream| format!("$JS.API.{call}.{}", ns.name(stream.name()));
        let mut publish: Vec<String> = self.publishes().iter().map(|s| ns.subject(s)).collect();
        // Account information: asked before declaring, to tell "JetStream off" apart.
        publish.push("$JS.API.INFO".to_owned());
        for stream in Stream::ALL {
            for call in ["STREAM.CREATE", "STREAM.UPDATE", "STREAM.INFO"] {
                publish.push(api(call, stream));
            }
        }
        for &stream in self.consumes() {
            for call in ["CONSUMER.CREATE", "CONSUMER.INFO", "CONSUMER.MSG.NEXT"] {
                publish.push(format!("{}.>", api(call, stream)));
            }
            publish.push(format!("$JS.ACK.{}.>", ns.name(stream.name())));
        }
        let (deletes, purges) = self.erases();
        publish.extend(deletes.iter().map(|&s| api("STREAM.MSG.DELETE", s)));
        publish.extend(purges.iter().map(|&s| api("STREAM.PURGE", s)));
        Permissions {
            publish,
            subscribe: inbox_prefix(self.user())
                .map(|prefix| format!("{prefix}.>"))
                .into_iter()
                .collect(),
        }
    }
}

/// The inbox prefix of a connection authenticated as `user`, when the name can be a subject
/// token (another user keeps the shared `_INBOX`).
pub(crate) fn inbox_prefix(user: &str) -> Option<String> {
    let token = !user.is_empty()
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    token.then(|| format!("_INBOX.{user}"))
}

/// Every subject of `stream`.
fn every(stream: Stream) -> String {
    format!("{}.>", stream.root_token())
}

/// The subjects of `stream` for one connection kind (`jobs.github.>`).
fn kind(stream: Stream, kind: &str) -> String {
    format!("{}.{kind}.>", stream.root_token())
}

/// The nats-server `authorization` block for every identity in namespace `ns`; `password` gives
/// each user's password as config text (`$FORGESYNC_NATS_INGRESS_PASSWORD` for a variable the
/// server reads from its environment, or a quoted literal).
pub fn authorization(ns: &Namespace, password: impl Fn(Identity) -> String) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|s| format!("          \"{s}\"\n"))
            .collect::<String>()
    };
    let mut out = String::from("authorization {\n  users: [\n");
    for identity in Identity::ALL {
        let p = identity.permissions(ns);
        out.push_str(&format!(
            "    {{\n      user: \"{user}\"\n      password: {password}\n      permissions: {{\n\
             \x20       publish: {{ allow: [\n{publish}        ] }}\n\
             \x20       subscribe: {{ allow: [\n{subscribe}        ] }}\n      }}\n    }}\n",
            user = identity.user(),
            password = password(identity),
            publish = list(&p.publish),
            subscribe = list(&p.subscribe),
        ));
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shipped file of the repository, read when the test runs.
    fn shipped(path: &str) -> String {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
        std::fs::read_to_string(format!("{root}{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn deploy_nats_conf_carries_every_identity_s_permissions() {
        let block = authorization(&Namespace::root(), |i| {
            format!("${}", i.password_variable())
        });
        let file = shipped("deploy/nats-authorization.conf");
        assert!(
            file.ends_with(&block),
            "deploy/nats-authorization.conf differs from bus::permissions; write it again:\n{block}"
        );
        assert!(
            shipped("deploy/nats.conf")
                .lines()
                .any(|l| l.trim() == "include ./nats-authorization.conf"),
            "deploy/nats.conf must include the authorization"
        );
    }

    #[test]
    fn compose_gives_each_service_its_own_user() {
        let compose = shipped("deploy/docker-compose.yml");
        assert!(compose.contains("./nats-authorization.conf:/etc/nats/nats-authorization.conf"));
        for identity in Identity::ALL {
            let var = format!("      {}: ", identity.password_variable());
            let password = compose
                .lines()
                .find_map(|l| l.strip_prefix(&var))
                .unwrap_or_else(|| panic!("the nats service sets no {var}"));
            // The first NATS_URL after the service's command is its own.
            let command = format!("command: [\"{}\"]", identity.user());
            let own = compose
                .split_once(&command)
                .and_then(|(_, rest)| {
                    rest.lines()
                        .find_map(|l| l.trim().strip_prefix("NATS_URL: "))
                })
                .unwrap_or_else(|| panic!("compose runs no {command} with a NATS_URL"));
            assert_eq!(
                own,
                format!("nats://{}:{password}@nats:4222", identity.user())
            );
        }
    }

    #[test]
    fn the_nats_chart_values_carry_every_identity_s_permissions() {
        let values = shipped("deploy/nats-values.yaml");
        for identity in Identity::ALL {
            let p = identity.permissions(&Namespace::root());
            let yaml = |items: &[String]| {
                items
                    .iter()
                    .map(|s| format!("                  - \"{s}\"\n"))
                    .collect::<String>()
            };
            let entry = format!(
                "          - user: {user}\n            password: << ${var} >>\n            \
                 permissions:\n              publish:\n                allow:\n{publish}              \
                 subscribe:\n                allow:\n{subscribe}",
                user = identity.user(),
                var = identity.password_variable(),
                publish = yaml(&p.publish),
                subscribe = yaml(&p.subscribe),
            );
            assert!(
                values.contains(&entry),
                "deploy/nats-values.yaml lacks {}'s entry as bus::permissions has it:\n{entry}",
                identity.user()
            );
        }
    }

    #[test]
    fn ingress_publishes_deliveries_only() {
        let p = Identity::Ingress.permissions(&Namespace::root());
        assert!(p.publish.contains(&"github.>".to_owned()));
        assert!(!p.publish.iter().any(|s| s.starts_with("jobs")
            || s.starts_with("lifecycle")
            || s.starts_with("events")
            || s.starts_with("$JS.ACK")
            || s.contains("CONSUMER")
            || s.contains("MSG.DELETE")));
        assert_eq!(p.subscribe, ["_INBOX.ingress.>"]);
    }

    #[test]
    fn a_namespace_prefixes_subjects_and_stream_names() {
        let ns = Namespace::new("t1").unwrap();
        let p = Identity::GithubSync.permissions(&ns);
        assert!(p.publish.contains(&"t1.jobs.github.>".to_owned()));
        assert!(
            p.publish
                .contains(&"$JS.API.STREAM.INFO.T1_JOBS".to_owned())
        );
        assert!(p.publish.contains(&"$JS.ACK.T1_JOBS.>".to_owned()));
        assert!(!p.publish.iter().any(|s| s == "jobs.github.>"));
    }

    #[test]
    fn a_service_url_carries_its_user() {
        assert_eq!(
            Identity::Eraser.url("nats://old:x@n1:4222, n2", "p@ss word"),
            "nats://eraser:p%40ss%20word@n1:4222,nats://eraser:p%40ss%20word@n2"
        );
    }

    #[test]
    fn users_and_variables_are_named_after_services() {
        assert_eq!(
            Identity::for_service("control-api"),
            Some(Identity::ControlApi)
        );
        assert_eq!(Identity::for_service("vendor-sim"), None);
        assert_eq!(
            Identity::ControlApi.password_variable(),
            "FORGESYNC_NATS_CONTROL_API_PASSWORD"
        );
        assert_eq!(inbox_prefix("a.b"), None);
    }
}
