//! The subject grammar (docs/architecture.md, "Subjects and streams"): one token encoder and one
//! builder per subject family.
//!
//! A token is ASCII-lowercased; `.`, `*`, `>`, `?`, `%`, whitespace and every byte outside
//! printable ASCII are percent-encoded, so a real name (`socket.io`) can never split a level or
//! collide with [`NO_LEVEL`].
//!
//! [`Subject`] parses and renders every subject family; [`filter_subjects`] is the consumer subject
//! math that turns a set of monitors into non-overlapping JetStream filter subjects.

use std::fmt::Write as _;

/// The token that stands for "no such level" (an owner-level GitHub event has no repository).
pub const NO_LEVEL: &str = "?";

/// Encodes one name as a single subject token.
pub fn encode_token(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        let b = byte.to_ascii_lowercase();
        let plain = b.is_ascii_graphic() && !matches!(b, b'.' | b'*' | b'>' | b'?' | b'%');
        if plain {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    if out.is_empty() {
        // An empty token is not a valid NATS subject level; `%` alone never results from encoding.
        out.push_str("%00");
    }
    out
}

/// Why a token could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("subject token is empty")]
    Empty,
    #[error("subject token {0:?} has a malformed percent escape")]
    BadEscape(String),
    #[error("subject token {0:?} is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// Decodes a token made by [`encode_token`] (the result is the lowercased name).
pub fn decode_token(token: &str) -> Result<String, TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if token == "%00" {
        return Ok(String::new());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = token
                .get(i + 1..i + 3)
                .ok_or_else(|| TokenError::BadEscape(token.to_owned()))?;
            let value =
                u8::from_str_radix(hex, 16).map_err(|_| TokenError::BadEscape(token.to_owned()))?;
            out.push(value);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| TokenError::NotUtf8(token.to_owned()))
}

/// `lifecycle.<kind>.<connectionId>.<transition>`
pub fn lifecycle(kind: &str, connection_id: &str, transition: &str) -> String {
    format!(
        "lifecycle.{}.{}.{}",
        encode_token(kind),
        encode_token(connection_id),
        encode_token(transition)
    )
}

/// `jobs.<kind>.<connectionId>.<type>`
pub fn jobs(kind: &str, connection_id: &str, job_type: &str) -> String {
    format!(
        "jobs.{}.{}.{}",
        encode_token(kind),
        encode_token(connection_id),
        encode_token(job_type)
    )
}

/// `events.<workspaceId>.<type>`
pub fn events(workspace_id: &str, event_type: &str) -> String {
    format!(
        "events.{}.{}",
        encode_token(workspace_id),
        encode_token(event_type)
    )
}

/// `events.<workspaceId>.>`: every event of one workspace (the subject belongs to it alone).
pub fn events_of_workspace(workspace_id: &str) -> String {
    format!("events.{}.>", encode_token(workspace_id))
}

/// The token that marks a subject routed by connection (`<vendor>.?connection.<id>.<event>`):
/// what reaches us through something we registered whose id the vendor assigns (a GitLab group
/// hook, an Outline subscription). The connection exists before the create call, so its
/// consumer can be confirmed before any delivery can arrive.
pub const CONNECTION_LEVEL: &str = "?connection";

/// Longest token a vendor name may encode to. A vendor controls these names (a repository, a
/// channel, an event type), so each is capped: together they keep a subject far below the
/// server's control-line limit.
pub const MAX_TOKEN_BYTES: usize = 256;

/// One vendor-supplied name as a token, refused when its encoding exceeds [`MAX_TOKEN_BYTES`].
pub fn token(name: &str) -> Result<String, SubjectError> {
    let token = encode_token(name);
    if token.len() > MAX_TOKEN_BYTES {
        return Err(SubjectError::TokenTooLong {
            len: token.len(),
            max: MAX_TOKEN_BYTES,
        });
    }
    Ok(token)
}

/// `github.<owner>.<repo>.<event>`
pub fn github(owner: &str, repo: &str, event: &str) -> Result<String, SubjectError> {
    Ok(join(&[
        "github",
        &token(owner)?,
        &token(repo)?,
        &token(event)?,
    ]))
}

/// `github.<owner>.?.<event>`: owner-level events, repository lifecycle included.
pub fn github_owner(owner: &str, event: &str) -> Result<String, SubjectError> {
    Ok(join(&["github", &token(owner)?, NO_LEVEL, &token(event)?]))
}

/// `gitlab.<namespace>.<project>.<event>`: an operator-created hook on the shared endpoint.
pub fn gitlab_project(namespace: &str, project: &str, event: &str) -> Result<String, SubjectError> {
    Ok(join(&[
        "gitlab",
        &token(namespace)?,
        &token(project)?,
        &token(event)?,
    ]))
}

/// `gitlab.<rootGroup>.?.<event>`: project, subgroup and member events.
pub fn gitlab_root_group(root_group: &str, event: &str) -> Result<String, SubjectError> {
    Ok(join(&[
        "gitlab",
        &token(root_group)?,
        NO_LEVEL,
        &token(event)?,
    ]))
}

/// `<vendor>.?connection.<connectionId>.<event>`: what a resource we registered delivers,
/// routed by connection only (see [`CONNECTION_LEVEL`]).
fn by_connection(vendor: &str, connection_id: &str, event: &str) -> Result<String, SubjectError> {
    Ok(join(&[
        vendor,
        CONNECTION_LEVEL,
        &token(connection_id)?,
        &token(event)?,
    ]))
}

/// `<vendor>.?connection.>`: everything delivered through resources we registered, whichever
/// the connection: what the consumer of those takes, left out of a vendor's other consumers.
pub fn by_connection_filter(vendor: &str) -> String {
    format!("{vendor}.{CONNECTION_LEVEL}.>")
}

/// `gitlab.?connection.<connectionId>.<event>`: hooks we registered, routed by connection only.
pub fn gitlab_connection(connection_id: &str, event: &str) -> Result<String, SubjectError> {
    by_connection("gitlab", connection_id, event)
}

/// `slack.<team>.<scope>.<event>`: scope is the channel, `?` for team-level events.
pub fn slack(team: &str, channel: Option<&str>, event: &str) -> Result<String, SubjectError> {
    let scope = match channel {
        Some(c) => token(c)?,
        None => NO_LEVEL.to_owned(),
    };
    Ok(join(&["slack", &token(team)?, &scope, &token(event)?]))
}

/// `outline.?connection.<connectionId>.<event>`: a subscription's id is Outline's to assign, so
/// its deliveries are routed by the connection that registered it.
pub fn outline(connection_id: &str, event: &str) -> Result<String, SubjectError> {
    by_connection("outline", connection_id, event)
}

/// Every owner-level GitHub subject (`github.<owner>.?.<event>`, repository lifecycle and
/// installations), whatever the owner: the filter of the consumer that takes them all.
pub fn github_owner_filter() -> String {
    join(&["github", "*", NO_LEVEL, ">"])
}

/// Every queued job of connections of `kind` (`jobs.<kind>.<connectionId>.<type>`).
pub fn jobs_filter(kind: &str) -> String {
    join(&["jobs", &encode_token(kind), ">"])
}

/// One `transition` of every connection of `kind` (`lifecycle.<kind>.<connectionId>.<transition>`).
pub fn lifecycle_filter(kind: &str, transition: &str) -> String {
    join(&[
        "lifecycle",
        &encode_token(kind),
        "*",
        &encode_token(transition),
    ])
}

/// One `transition` of every connection of every kind (`lifecycle.<kind>.<connectionId>.<transition>`).
pub fn lifecycle_any_kind_filter(transition: &str) -> String {
    join(&["lifecycle", "*", "*", &encode_token(transition)])
}

fn join(tokens: &[&str]) -> String {
    tokens.join(".")
}

/// A parsed subject; names are decoded (and therefore lowercased).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// `github.<owner>.<repo>.<event>`
    GithubRepository {
        owner: String,
        repo: String,
        event: String,
    },
    /// `github.<owner>.?.<event>`
    GithubOwner { owner: String, event: String },
    /// `gitlab.<namespace>.<project>.<event>`
    GitlabProject {
        namespace: String,
        project: String,
        event: String,
    },
    /// `gitlab.<rootGroup>.?.<event>`
    GitlabRootGroup { root_group: String, event: String },
    /// `gitlab.?connection.<connectionId>.<event>`
    GitlabConnection {
        connection_id: String,
        event: String,
    },
    /// `slack.<team>.<scope>.<event>`; `channel` is `None` for team-level events.
    Slack {
        team: String,
        channel: Option<String>,
        event: String,
    },
    /// `outline.?connection.<connectionId>.<event>`
    Outline {
        connection_id: String,
        event: String,
    },
    /// `lifecycle.<kind>.<connectionId>.<transition>`
    Lifecycle {
        kind: String,
        connection_id: String,
        transition: String,
    },
    /// `jobs.<kind>.<connectionId>.<type>`
    Jobs {
        kind: String,
        connection_id: String,
        job_type: String,
    },
    /// `events.<workspaceId>.<type>`
    Events {
        workspace_id: String,
        event_type: String,
    },
}

/// Why a subject could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// The first token names no subject family, or the level count is wrong.
    #[error("subject {0:?} matches no subject family")]
    Unknown(String),
    /// A token is malformed.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A name encodes to a token longer than [`MAX_TOKEN_BYTES`].
    #[error("a subject token would be {len} bytes, more than the {max} allowed")]
    TokenTooLong { len: usize, max: usize },
}

impl Subject {
    /// Renders the subject; a vendor name too long for a token is an error.
    pub fn render(&self) -> Result<String, SubjectError> {
        Ok(match self {
            Subject::GithubRepository { owner, repo, event } => github(owner, repo, event)?,
            Subject::GithubOwner { owner, event } => github_owner(owner, event)?,
            Subject::GitlabProject {
                namespace,
                project,
                event,
            } => gitlab_project(namespace, project, event)?,
            Subject::GitlabRootGroup { root_group, event } => gitlab_root_group(root_group, event)?,
            Subject::GitlabConnection {
                connection_id,
                event,
            } => gitlab_connection(connection_id, event)?,
            Subject::Slack {
                team,
                channel,
                event,
            } => slack(team, channel.as_deref(), event)?,
            Subject::Outline {
                connection_id,
                event,
            } => outline(connection_id, event)?,
            Subject::Lifecycle {
                kind,
                connection_id,
                transition,
            } => lifecycle(kind, connection_id, transition),
            Subject::Jobs {
                kind,
                connection_id,
                job_type,
            } => jobs(kind, connection_id, job_type),
            Subject::Events {
                workspace_id,
                event_type,
            } => events(workspace_id, event_type),
        })
    }

    /// Parses a subject built by this module.
    pub fn parse(subject: &str) -> Result<Subject, SubjectError> {
        let unknown = || SubjectError::Unknown(subject.to_owned());
        let tokens: Vec<&str> = subject.split('.').collect();
        let d = |token: &str| decode_token(token);
        let parsed = match tokens.as_slice() {
            ["github", owner, repo, event] if *repo == NO_LEVEL => Subject::GithubOwner {
                owner: d(owner)?,
                event: d(event)?,
            },
            ["github", owner, repo, event] => Subject::GithubRepository {
                owner: d(owner)?,
                repo: d(repo)?,
                event: d(event)?,
            },
            ["gitlab", level, id, event] if *level == CONNECTION_LEVEL => {
                Subject::GitlabConnection {
                    connection_id: d(id)?,
                    event: d(event)?,
                }
            }
            ["gitlab", group, level, event] if *level == NO_LEVEL => Subject::GitlabRootGroup {
                root_group: d(group)?,
                event: d(event)?,
            },
            ["gitlab", namespace, project, event] => Subject::GitlabProject {
                namespace: d(namespace)?,
                project: d(project)?,
                event: d(event)?,
            },
            ["slack", team, scope, event] => Subject::Slack {
                team: d(team)?,
                channel: if *scope == NO_LEVEL {
                    None
                } else {
                    Some(d(scope)?)
                },
                event: d(event)?,
            },
            ["outline", level, id, event] if *level == CONNECTION_LEVEL => Subject::Outline {
                connection_id: d(id)?,
                event: d(event)?,
            },
            ["lifecycle", kind, id, transition] => Subject::Lifecycle {
                kind: d(kind)?,
                connection_id: d(id)?,
                transition: d(transition)?,
            },
            ["jobs", kind, id, job_type] => Subject::Jobs {
                kind: d(kind)?,
                connection_id: d(id)?,
                job_type: d(job_type)?,
            },
            ["events", workspace, event_type] => Subject::Events {
                workspace_id: d(workspace)?,
                event_type: d(event_type)?,
            },
            _ => return Err(unknown()),
        };
        Ok(parsed)
    }
}

/// Something a workspace or connection monitors, as the consumer subject math sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Monitor {
    /// One GitHub repository (its owner-level lifecycle events come along).
    GithubRepository { owner: String, repo: String },
    /// Every repository of a GitHub owner (an installation on all repositories).
    GithubOwner { owner: String },
    /// A GitLab connection's registered hooks.
    GitlabConnection { connection_id: String },
    /// One project of an operator-created hook (its root group's events come along).
    GitlabProject { namespace: String, project: String },
    /// Every project of a GitLab root group.
    GitlabRootGroup { root_group: String },
    /// One Slack channel (team-level events come along).
    SlackChannel { team: String, channel: String },
    /// An Outline connection's registered subscription.
    OutlineConnection { connection_id: String },
}

fn monitor_filters(monitor: &Monitor) -> Vec<String> {
    let all = |prefix: Vec<String>| {
        let mut tokens = prefix;
        tokens.push(">".to_owned());
        tokens.join(".")
    };
    let t = |s: &str| encode_token(s);
    let s = |s: &str| s.to_owned();
    match monitor {
        Monitor::GithubRepository { owner, repo } => vec![
            all(vec![s("github"), t(owner), t(repo)]),
            all(vec![s("github"), t(owner), s(NO_LEVEL)]),
        ],
        Monitor::GithubOwner { owner } => vec![all(vec![s("github"), t(owner)])],
        Monitor::GitlabConnection { connection_id } => {
            vec![all(vec![
                s("gitlab"),
                s(CONNECTION_LEVEL),
                t(connection_id),
            ])]
        }
        Monitor::GitlabProject { namespace, project } => {
            let root = namespace.split('/').next().unwrap_or(namespace);
            vec![
                all(vec![s("gitlab"), t(namespace), t(project)]),
                all(vec![s("gitlab"), t(root), s(NO_LEVEL)]),
            ]
        }
        Monitor::GitlabRootGroup { root_group } => vec![all(vec![s("gitlab"), t(root_group)])],
        Monitor::SlackChannel { team, channel } => vec![
            all(vec![s("slack"), t(team), t(channel)]),
            all(vec![s("slack"), t(team), s(NO_LEVEL)]),
        ],
        Monitor::OutlineConnection { connection_id } => vec![all(vec![
            s("outline"),
            s(CONNECTION_LEVEL),
            t(connection_id),
        ])],
    }
}

/// Whether every subject `inner` matches is also matched by `outer` (NATS `*` and `>` wildcards).
pub fn filter_covers(outer: &str, inner: &str) -> bool {
    let outer: Vec<&str> = outer.split('.').collect();
    let inner: Vec<&str> = inner.split('.').collect();
    for (i, token) in outer.iter().enumerate() {
        match (*token, inner.get(i)) {
            (">", Some(_)) => return true,
            ("*", Some(other)) if *other != ">" => {}
            (literal, Some(other)) if literal == *other => {}
            _ => return false,
        }
    }
    outer.len() == inner.len()
}

/// The consumer subject math: the sorted, non-overlapping filter subjects of a set of monitors.
pub fn filter_subjects<'a>(monitors: impl IntoIterator<Item = &'a Monitor>) -> Vec<String> {
    let mut filters: Vec<String> = monitors.into_iter().flat_map(monitor_filters).collect();
    filters.sort();
    filters.dedup();
    // JetStream rejects overlapping filters: drop any filter another one already covers.
    let covered: Vec<bool> = filters
        .iter()
        .enumerate()
        .map(|(i, f)| {
            filters
                .iter()
                .enumerate()
                .any(|(j, other)| i != j && filter_covers(other, f))
        })
        .collect();
    filters
        .into_iter()
        .zip(covered)
        .filter_map(|(filter, covered)| (!covered).then_some(filter))
        .collect()
}

/// Filters bounded to `cap` (at least 1) for a consumer every tenant's monitors widen: when
/// `filters` (sorted, non-overlapping, as [`filter_subjects`] gives them) are more, the owners
/// (second token: a GitHub owner, a GitLab namespace, a Slack team) with the most filters are
/// taken whole (`<vendor>.<owner>.>`) until they fit, and past that every vendor root is taken
/// whole. The result covers every input filter and never overlaps itself; what it takes
/// besides is for the consumer's handler to refuse (admission checks every delivery against the
/// connection's monitors anyway). The server's limit on a consumer's request is then never
/// reached, whatever the tenants monitor.
pub fn bounded_filters(filters: Vec<String>, cap: usize) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let cap = cap.max(1);
    if filters.len() <= cap {
        return filters;
    }
    let owner = |f: &str| -> Option<String> {
        let mut tokens = f.split('.');
        let (vendor, owner) = (tokens.next()?, tokens.next()?);
        (owner != ">" && owner != "*" && tokens.next().is_some())
            .then(|| format!("{vendor}.{owner}"))
    };
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    for f in &filters {
        if let Some(o) = owner(f) {
            *groups.entry(o).or_default() += 1;
        }
    }
    let mut largest: Vec<(usize, &String)> = groups.iter().map(|(o, n)| (*n, o)).collect();
    largest.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut count = filters.len();
    let mut whole: BTreeSet<&String> = BTreeSet::new();
    for (n, o) in largest {
        if count <= cap {
            break;
        }
        if n > 1 {
            whole.insert(o);
            count -= n - 1;
        }
    }
    let bounded: BTreeSet<String> = if count <= cap {
        filters
            .iter()
            .map(|f| match owner(f) {
                Some(o) if whole.contains(&o) => format!("{o}.>"),
                _ => f.clone(),
            })
            .collect()
    } else {
        filters
            .iter()
            .map(|f| format!("{}.>", f.split('.').next().unwrap_or(f)))
            .collect()
    };
    bounded.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_filters_fit_their_cap_cover_every_filter_and_never_overlap() {
        let mut monitors: Vec<Monitor> = (0..40)
            .map(|i| Monitor::GithubRepository {
                owner: "acme".into(),
                repo: format!("r{i}"),
            })
            .collect();
        for o in 0..5 {
            monitors.push(Monitor::GithubRepository {
                owner: format!("o{o}"),
                repo: "one".into(),
            });
        }
        let filters = filter_subjects(&monitors);
        for cap in [1, 2, 5, 12, 50, 1_000] {
            let bounded = bounded_filters(filters.clone(), cap);
            assert!(bounded.len() <= cap.max(1), "{cap}: {bounded:?}");
            for f in &filters {
                assert!(
                    bounded.iter().any(|b| filter_covers(b, f)),
                    "{cap}: {f} lost"
                );
            }
            for (i, f) in bounded.iter().enumerate() {
                for (j, g) in bounded.iter().enumerate() {
                    assert!(i == j || !filter_covers(f, g), "{cap}: {f} covers {g}");
                }
            }
        }
        // The biggest owner goes whole first; the small ones keep their own filters.
        let twelve = bounded_filters(filters.clone(), 12);
        assert!(twelve.contains(&"github.acme.>".to_owned()), "{twelve:?}");
        assert!(
            twelve.iter().any(|f| f.starts_with("github.o0.one")),
            "{twelve:?}"
        );
        assert_eq!(
            bounded_filters(filters.clone(), 2),
            vec!["github.>".to_owned()]
        );
        assert_eq!(bounded_filters(filters.clone(), 1_000), filters);
    }

    #[test]
    fn dotted_names_stay_one_level() {
        assert_eq!(encode_token("Socket.IO"), "socket%2Eio");
        assert_eq!(decode_token("socket%2Eio").unwrap(), "socket.io");
    }

    #[test]
    fn no_real_name_collides_with_no_level() {
        assert_ne!(encode_token("?"), NO_LEVEL);
        assert_eq!(decode_token(&encode_token("?")).unwrap(), "?");
    }

    #[test]
    fn wildcards_whitespace_and_percent_are_escaped() {
        assert_eq!(encode_token("a*b>c d%"), "a%2Ab%3Ec%20d%25");
        assert_eq!(encode_token(""), "%00");
        assert_eq!(decode_token("%00").unwrap(), "");
    }

    #[test]
    fn malformed_escapes_are_errors() {
        assert!(matches!(decode_token("%zz"), Err(TokenError::BadEscape(_))));
        assert!(matches!(decode_token("ab%"), Err(TokenError::BadEscape(_))));
        assert_eq!(decode_token(""), Err(TokenError::Empty));
    }

    #[test]
    fn kind_filters_cover_their_subjects() {
        assert_eq!(jobs_filter("github"), "jobs.github.>");
        assert!(filter_covers(
            &jobs_filter("slack"),
            &jobs("slack", "c1", "RECONCILIATION")
        ));
        assert!(!filter_covers(
            &jobs_filter("slack"),
            &jobs("github", "c1", "BACKFILL")
        ));
        let disconnected = lifecycle_any_kind_filter("disconnected");
        assert_eq!(disconnected, "lifecycle.*.*.disconnected");
        assert!(filter_covers(
            &disconnected,
            &lifecycle("gitlab", "c1", "disconnected")
        ));
        assert!(!filter_covers(
            &disconnected,
            &lifecycle("gitlab", "c1", "activated")
        ));
        let activated = lifecycle_filter("github", "activated");
        assert_eq!(activated, "lifecycle.github.*.activated");
        assert!(filter_covers(
            &activated,
            &lifecycle("github", "c1", "activated")
        ));
        assert!(!filter_covers(
            &activated,
            &lifecycle("github", "c1", "suspended")
        ));
    }

    #[test]
    fn lifecycle_subject_has_four_levels() {
        assert_eq!(
            lifecycle("github", "0190-abc", "activated"),
            "lifecycle.github.0190-abc.activated"
        );
        assert_eq!(
            jobs("gitlab", "c1", "RECONCILIATION"),
            "jobs.gitlab.c1.reconciliation"
        );
        assert_eq!(
            events("w1", "scm.pull_request.closed"),
            "events.w1.scm%2Epull_request%2Eclosed"
        );
    }

    #[test]
    fn every_family_renders_and_parses() {
        let cases = [
            (
                github("Socket", "socket.io", "push").unwrap(),
                "github.socket.socket%2Eio.push",
            ),
            (
                github_owner("acme", "repository").unwrap(),
                "github.acme.?.repository",
            ),
            (
                gitlab_project("grp/sub", "app", "merge_request").unwrap(),
                "gitlab.grp/sub.app.merge_request",
            ),
            (
                gitlab_root_group("grp", "project_create").unwrap(),
                "gitlab.grp.?.project_create",
            ),
            (
                gitlab_connection("c1", "note").unwrap(),
                "gitlab.?connection.c1.note",
            ),
            (
                slack("T1", Some("C9"), "message").unwrap(),
                "slack.t1.c9.message",
            ),
            (
                slack("T1", None, "team_join").unwrap(),
                "slack.t1.?.team_join",
            ),
            (
                outline("c1", "documents.update").unwrap(),
                "outline.?connection.c1.documents%2Eupdate",
            ),
        ];
        for (built, expected) in cases {
            assert_eq!(built, expected);
            assert_eq!(Subject::parse(&built).unwrap().render().unwrap(), built);
        }
        assert_eq!(
            Subject::parse("gitlab.?connection.c1.note").unwrap(),
            Subject::GitlabConnection {
                connection_id: "c1".into(),
                event: "note".into()
            }
        );
        assert_eq!(
            Subject::parse("slack.t1.?.team_join").unwrap(),
            Subject::Slack {
                team: "t1".into(),
                channel: None,
                event: "team_join".into()
            }
        );
        assert_eq!(
            Subject::parse("github.acme.?.repository").unwrap(),
            Subject::GithubOwner {
                owner: "acme".into(),
                event: "repository".into()
            }
        );
        assert_eq!(
            Subject::parse("gitlab.grp.?.x").unwrap(),
            Subject::GitlabRootGroup {
                root_group: "grp".into(),
                event: "x".into()
            }
        );
        assert_eq!(
            Subject::parse("jobs.gitlab.c1.backfill").unwrap(),
            Subject::Jobs {
                kind: "gitlab".into(),
                connection_id: "c1".into(),
                job_type: "backfill".into()
            }
        );
    }

    #[test]
    fn a_vendor_name_longer_than_a_token_is_refused() {
        // 86 dots encode to 258 bytes: over the cap although the name is short.
        let dotted = ".".repeat(86);
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        let err = SubjectError::TokenTooLong {
            len: 258,
            max: MAX_TOKEN_BYTES,
        };
        assert_eq!(github("acme", &dotted, "push"), Err(err));
        assert!(github(&long, "api", "push").is_err());
        assert!(github_owner("acme", &long).is_err());
        assert!(gitlab_project(&long, "app", "push").is_err());
        assert!(gitlab_root_group("grp", &long).is_err());
        assert!(gitlab_connection(&long, "note").is_err());
        assert!(slack("T1", Some(&long), "message").is_err());
        assert!(slack(&long, None, "message").is_err());
        assert!(outline("s1", &long).is_err());
        let at_cap = "a".repeat(MAX_TOKEN_BYTES);
        assert!(github(&at_cap, &at_cap, &at_cap).is_ok());
    }

    #[test]
    fn a_real_name_never_reads_as_a_marker_level() {
        let subject = gitlab_project("?connection", "?", "push").unwrap();
        assert!(matches!(
            Subject::parse(&subject).unwrap(),
            Subject::GitlabProject { .. }
        ));
        let repo = github("acme", "?", "push").unwrap();
        assert!(matches!(
            Subject::parse(&repo).unwrap(),
            Subject::GithubRepository { .. }
        ));
    }

    #[test]
    fn unknown_or_malformed_subjects_are_errors() {
        for bad in [
            "",
            "github.a.b",
            "nats.a.b.c",
            "events.a",
            "outline.a.b.c",
            "outline.s1.update",
        ] {
            assert_eq!(Subject::parse(bad), Err(SubjectError::Unknown(bad.into())));
        }
        assert!(matches!(
            Subject::parse("events.w%zz.x"),
            Err(SubjectError::Token(_))
        ));
    }

    #[test]
    fn filter_cover_follows_nats_wildcards() {
        assert!(filter_covers("a.>", "a.b.c"));
        assert!(filter_covers("a.>", "a.b.>"));
        assert!(!filter_covers("a.>", "a"));
        assert!(filter_covers("a.*.c", "a.b.c"));
        assert!(!filter_covers("a.*.c", "a.>"));
        assert!(!filter_covers("a.*", "a.>"));
        assert!(filter_covers("a.*", "a.*"));
        assert!(!filter_covers("a.*", "a.b.c"));
        assert!(!filter_covers("a.b", "a.c"));
        assert!(filter_covers("a.b", "a.b"));
        assert!(!filter_covers("a.b.c", "a.b"));
    }

    #[test]
    fn fixed_filters_take_their_family_and_nothing_else() {
        let owner = github_owner_filter();
        assert_eq!(owner, "github.*.?.>");
        assert!(filter_covers(
            &owner,
            &github_owner("Acme", "repository").unwrap()
        ));
        assert!(filter_covers(
            &owner,
            &github_owner("socket.io", "installation").unwrap()
        ));
        assert!(!filter_covers(
            &owner,
            &github("acme", "web", "push").unwrap()
        ));
        // A repository really named `?` is a repository, not the owner level.
        assert!(!filter_covers(
            &owner,
            &github("acme", "?", "push").unwrap()
        ));
        assert!(!filter_covers(
            &owner,
            &gitlab_root_group("acme", "push").unwrap()
        ));
        for monitor in [repo("acme", "web"), repo("Socket", "socket.io")] {
            let filters = filter_subjects(&[monitor]);
            let owner_level: Vec<_> = filters
                .iter()
                .filter(|f| filter_covers(&owner, f))
                .collect();
            assert_eq!(owner_level.len(), 1, "{filters:?}");
        }

        let jobs_github = jobs_filter("github");
        assert_eq!(jobs_github, "jobs.github.>");
        assert!(filter_covers(
            &jobs_github,
            &jobs("github", "c1", "INITIAL")
        ));
        assert!(!filter_covers(
            &jobs_github,
            &jobs("gitlab", "c1", "initial")
        ));
        assert!(matches!(
            Subject::parse(&jobs("GitHub", "c1", "backfill")).unwrap(),
            Subject::Jobs { kind, .. } if kind == "github"
        ));

        let activated = lifecycle_filter("github", "activated");
        assert_eq!(activated, "lifecycle.github.*.activated");
        assert!(filter_covers(
            &activated,
            &lifecycle("github", "0190-abc", "activated")
        ));
        assert!(!filter_covers(
            &activated,
            &lifecycle("github", "c1", "suspended")
        ));
        assert!(!filter_covers(
            &activated,
            &lifecycle("slack", "c1", "activated")
        ));
        // Names are encoded like the subjects they filter.
        assert_eq!(jobs_filter("a.b"), "jobs.a%2Eb.>");
        assert!(filter_covers(
            &lifecycle_filter("A.b", "x y"),
            &lifecycle("a.b", "c", "X Y")
        ));
    }

    fn repo(owner: &str, repo: &str) -> Monitor {
        Monitor::GithubRepository {
            owner: owner.into(),
            repo: repo.into(),
        }
    }

    #[test]
    fn monitors_become_their_filter_subjects() {
        let monitors = [
            repo("Acme", "socket.io"),
            repo("acme", "web"),
            Monitor::GitlabConnection {
                connection_id: "c1".into(),
            },
            Monitor::GitlabProject {
                namespace: "grp/sub".into(),
                project: "app".into(),
            },
            Monitor::SlackChannel {
                team: "T1".into(),
                channel: "C1".into(),
            },
            Monitor::OutlineConnection {
                connection_id: "c1".into(),
            },
        ];
        assert_eq!(
            filter_subjects(&monitors),
            vec![
                "github.acme.?.>",
                "github.acme.socket%2Eio.>",
                "github.acme.web.>",
                "gitlab.?connection.c1.>",
                "gitlab.grp.?.>",
                "gitlab.grp/sub.app.>",
                "outline.?connection.c1.>",
                "slack.t1.?.>",
                "slack.t1.c1.>",
            ]
        );
    }

    #[test]
    fn covered_filters_are_dropped() {
        let monitors = [
            repo("acme", "web"),
            Monitor::GithubOwner {
                owner: "acme".into(),
            },
            Monitor::GitlabRootGroup {
                root_group: "grp".into(),
            },
            Monitor::GitlabProject {
                namespace: "grp".into(),
                project: "app".into(),
            },
        ];
        assert_eq!(
            filter_subjects(&monitors),
            vec!["github.acme.>", "gitlab.grp.>"]
        );
        assert!(filter_subjects(&[]).is_empty());
    }

    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[ -~\u{e9}\u{4e2d}]{0,12}").unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn tokens_round_trip_for_arbitrary_names(n in any::<String>()) {
            let token = encode_token(&n);
            prop_assert!(!token.is_empty());
            prop_assert!(!token.contains(['.', '*', '>', ' ']));
            prop_assert_ne!(token.as_str(), NO_LEVEL);
            prop_assert_ne!(token.as_str(), CONNECTION_LEVEL);
            prop_assert_eq!(decode_token(&token).unwrap(), n.to_ascii_lowercase());
        }

        #[test]
        fn subjects_round_trip_for_arbitrary_names(a in name(), b in name(), c in name(), pick in 0usize..10) {
            let subject = match pick {
                0 => github(&a, &b, &c).unwrap(),
                1 => github_owner(&a, &c).unwrap(),
                2 => gitlab_project(&a, &b, &c).unwrap(),
                3 => gitlab_root_group(&a, &c).unwrap(),
                4 => gitlab_connection(&a, &c).unwrap(),
                5 => slack(&a, Some(&b), &c).unwrap(),
                6 => outline(&a, &c).unwrap(),
                7 => lifecycle(&a, &b, &c),
                8 => jobs(&a, &b, &c),
                _ => events(&a, &c),
            };
            let parsed = Subject::parse(&subject).unwrap();
            prop_assert_eq!(parsed.render().unwrap(), subject);
            let lower = |s: &str| s.to_ascii_lowercase();
            let expected = match pick {
                0 => Subject::GithubRepository { owner: lower(&a), repo: lower(&b), event: lower(&c) },
                1 => Subject::GithubOwner { owner: lower(&a), event: lower(&c) },
                2 => Subject::GitlabProject { namespace: lower(&a), project: lower(&b), event: lower(&c) },
                3 => Subject::GitlabRootGroup { root_group: lower(&a), event: lower(&c) },
                4 => Subject::GitlabConnection { connection_id: lower(&a), event: lower(&c) },
                5 => Subject::Slack { team: lower(&a), channel: Some(lower(&b)), event: lower(&c) },
                6 => Subject::Outline { connection_id: lower(&a), event: lower(&c) },
                7 => Subject::Lifecycle { kind: lower(&a), connection_id: lower(&b), transition: lower(&c) },
                8 => Subject::Jobs { kind: lower(&a), connection_id: lower(&b), job_type: lower(&c) },
                _ => Subject::Events { workspace_id: lower(&a), event_type: lower(&c) },
            };
            prop_assert_eq!(parsed, expected);
        }

        #[test]
        fn monitor_filters_cover_their_subjects_and_never_overlap(
            owners in proptest::collection::vec(name(), 1..4),
            repos in proptest::collection::vec(name(), 1..4),
            whole_owner in proptest::bool::ANY,
            event in name(),
        ) {
            let mut monitors: Vec<Monitor> = owners.iter().flat_map(|o| repos.iter().map(move |r| repo(o, r))).collect();
            if whole_owner {
                monitors.push(Monitor::GithubOwner { owner: owners[0].clone() });
            }
            let filters = filter_subjects(&monitors);
            for o in &owners {
                for r in &repos {
                    let subject = github(o, r, &event).unwrap();
                    prop_assert!(filters.iter().any(|f| filter_covers(f, &subject)));
                }
                let lifecycle_event = github_owner(o, "repository").unwrap();
                prop_assert!(filters.iter().any(|f| filter_covers(f, &lifecycle_event)));
            }
            for (i, f) in filters.iter().enumerate() {
                for (j, g) in filters.iter().enumerate() {
                    prop_assert!(i == j || !filter_covers(f, g));
                }
            }
        }
    }
}
