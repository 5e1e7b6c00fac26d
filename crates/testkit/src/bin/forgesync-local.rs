//! The local stack (`cargo xtask up`): every service that exists, in one process (each started
//! through `testkit::spawn`), against the
//! Postgres and NATS that xtask provisioned, plus the GitHub, GitLab, Slack and Outline simulators
//! with a demo workspace connected to each. (`cargo xtask migrate` and `reseal` run `forgesync-admin`, crates/admin.)
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use anyhow::{Context as _, Result};
use bus::permissions::Identity;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "forgesync-local", about = "forgesync's all-in-one local stack")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Migrate, then run every service until Ctrl-C.
    Up {
        /// Where control-api listens; ingress, github-sync, the eraser, gitlab-sync,
        /// slack-ingest, outline-sync and provider-repair take the next seven ports.
        #[arg(
            long,
            env = "FORGESYNC_LISTEN",
            value_name = "FORGESYNC_LISTEN",
            default_value = "127.0.0.1:8080"
        )]
        listen: SocketAddr,
        /// Do not start the GitHub, GitLab, Slack and Outline simulators and their demo
        /// workspace.
        #[arg(long)]
        no_demo: bool,
        /// Start a local OTLP/HTTP receiver and export every service's spans to it: traces are
        /// listed as text at its `/traces` and appended to `--otlp-out` as JSON lines. (Without
        /// it, `OTEL_EXPORTER_OTLP_ENDPOINT` sends spans to a collector of your own.)
        #[arg(long)]
        otlp: bool,
        /// Where the local OTLP receiver listens.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4318")]
        otlp_listen: SocketAddr,
        /// Where the local OTLP receiver appends every span, one JSON object a line.
        #[arg(long, value_name = "FILE", default_value = "forgesync-traces.jsonl")]
        otlp_out: std::path::PathBuf,
    },
    /// Print the erasure-completeness scan of a workspace as JSON: what of its connections'
    /// content remains, per table, stream and subject. Exits non-zero when anything remains.
    ErasureScan {
        /// The workspace to scan.
        workspace: uuid::Uuid,
        /// The JetStream namespace prefix of the services (FORGESYNC_NATS_PREFIX).
        #[arg(
            long,
            env = "FORGESYNC_NATS_PREFIX",
            value_name = "FORGESYNC_NATS_PREFIX"
        )]
        nats_prefix: Option<String>,
    },
}

fn env(var: &str) -> Result<String> {
    std::env::var(var).with_context(|| format!("{var} is not set (run through `cargo xtask`)"))
}

#[tokio::main]
async fn main() -> Result<()> {
    runtime::install_crypto_provider();
    let cli = Cli::parse();
    // The receiver runs before telemetry starts, so the first span already has somewhere to go.
    let receiver = match &cli.command {
        Command::Up {
            otlp: true,
            otlp_listen,
            otlp_out,
            ..
        } => {
            let out = std::path::absolute(otlp_out)?;
            let receiver = testkit::otlp::OtlpReceiver::start(*otlp_listen, Some(&out)).await?;
            Some((receiver, out))
        }
        _ => None,
    };
    let endpoint = match &receiver {
        Some((r, _)) => Some(r.endpoint()),
        None => std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty()),
    };
    let _telemetry = runtime::telemetry::init(
        "forgesync-local",
        runtime::LogFormat::Pretty,
        endpoint.as_deref(),
    )?;
    let traces = match &receiver {
        Some((r, out)) => format!(
            "  traces        {0}/traces   (newest first; one trace: curl -s {0}/traces/<trace_id>)\n                every span as a JSON line in {1}\n",
            r.endpoint(),
            out.display()
        ),
        None => match &endpoint {
            Some(e) => format!(
                "  traces        exported to {}\n",
                runtime::config::redact_url(e)
            ),
            None => String::new(),
        },
    };
    let database_url = env("DATABASE_URL")?;
    match cli.command {
        Command::ErasureScan {
            workspace,
            nats_prefix,
        } => {
            // The scan reads streams as the eraser does.
            let nats_url = service_nats_url(&env("NATS_URL")?, Identity::Eraser);
            let common = testkit::common_args(&database_url, &nats_url, nats_prefix.as_deref());
            let db = common.connect_db().await?;
            let bus = common.connect_bus().await?;
            let report = vendors::scan::scan(&db, &bus, vendors::holders(), workspace).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            anyhow::ensure!(
                report.total == 0,
                "{} rows and messages of workspace {workspace} remain",
                report.total
            );
            Ok(())
        }
        Command::Up {
            listen, no_demo, ..
        } => up(&database_url, &env("NATS_URL")?, listen, !no_demo, &traces).await,
    }
}

/// `nats_url` as `identity`'s user when xtask started NATS with one user per service (it sets
/// their passwords in the environment); `nats_url` as it is otherwise.
fn service_nats_url(nats_url: &str, identity: Identity) -> String {
    match std::env::var(identity.password_variable()) {
        Ok(password) if !password.is_empty() => identity.url(nats_url, &password),
        _ => nats_url.to_owned(),
    }
}

fn next_port(addr: SocketAddr, n: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().saturating_add(n))
}

async fn up(
    database_url: &str,
    nats_url: &str,
    listen: SocketAddr,
    demo: bool,
    traces: &str,
) -> Result<()> {
    let shutdown = runtime::shutdown_token();
    let common = |identity: Identity, port: SocketAddr, migrate: bool| {
        let mut c = testkit::common_args(database_url, &service_nats_url(nats_url, identity), None);
        c.listen = port;
        c.migrate = migrate;
        c
    };
    // control-api migrates first; the others start against the current schema.
    let (control_api, keys) = (
        testkit::spawn(testkit::control_api_config(common(
            Identity::ControlApi,
            listen,
            true,
        )))
        .await?,
        testkit::control_api_keys()?,
    );
    let ingress = testkit::spawn(testkit::ingress_config(common(
        Identity::Ingress,
        next_port(listen, 1),
        false,
    )))
    .await?;
    let mut sync_config =
        testkit::github_sync_config(common(Identity::GithubSync, next_port(listen, 2), false));
    // Unlike tests, the local stack reconciles on github-sync's own (default) schedule.
    let defaults: github_sync::Config = testkit::config(
        common(Identity::GithubSync, next_port(listen, 2), false),
        &[format!("--secret-key={}", testkit::secret_key())],
    )?;
    sync_config.sync.reconcile_cron = defaults.sync.reconcile_cron;
    let github_sync = testkit::spawn(sync_config).await?;
    let mut eraser_config =
        testkit::eraser_config(common(Identity::Eraser, next_port(listen, 3), false));
    // Unlike tests, the local stack prunes on the eraser's own schedules.
    let eraser_defaults: eraser::Config =
        testkit::config(common(Identity::Eraser, next_port(listen, 3), false), &[])?;
    eraser_config.ledger_prune_cron = eraser_defaults.ledger_prune_cron;
    eraser_config.audit_prune_cron = eraser_defaults.audit_prune_cron;
    let eraser = testkit::spawn(eraser_config).await?;
    // gitlab-sync registers each GitLab connection's group hook at ingress's URL.
    let mut gitlab_config = testkit::gitlab_sync_config(
        common(Identity::GitlabSync, next_port(listen, 4), false),
        Some(&ingress.url()),
    );
    let gitlab_defaults: gitlab_sync::Config = testkit::config(
        common(Identity::GitlabSync, next_port(listen, 4), false),
        &[format!("--secret-key={}", testkit::secret_key())],
    )?;
    gitlab_config.sync.reconcile_cron = gitlab_defaults.sync.reconcile_cron;
    let gitlab_sync = testkit::spawn(gitlab_config).await?;
    // slack-ingest reads the Slack simulator's Web API when the demo runs, Slack's otherwise.
    let slack = match demo {
        true => Some(SlackDemo::start().await?),
        false => None,
    };
    let slack_api_url = slack
        .as_ref()
        .map_or_else(|| SLACK_API_URL.to_owned(), |s| s.sim.api_url());
    let mut slack_config = testkit::slack_ingest_config(
        common(Identity::SlackIngest, next_port(listen, 5), false),
        &slack_api_url,
    );
    let slack_defaults: slack_ingest::Config = testkit::config(
        common(Identity::SlackIngest, next_port(listen, 5), false),
        &[format!("--secret-key={}", testkit::secret_key())],
    )?;
    slack_config.sync.reconcile_cron = slack_defaults.sync.reconcile_cron;
    let slack_ingest = testkit::spawn(slack_config).await?;
    // outline-sync reads the Outline simulator when the demo runs, the configured Outline (its
    // default or FORGESYNC_OUTLINE_API_URL) otherwise; it creates each connection's webhook
    // subscription delivering to ingress.
    let outline = match demo {
        true => Some(OutlineDemo::start().await?),
        false => None,
    };
    let outline_defaults: outline_sync::Config = testkit::config(
        common(Identity::OutlineSync, next_port(listen, 6), false),
        &[format!("--secret-key={}", testkit::secret_key())],
    )?;
    let outline_api_url = outline.as_ref().map_or_else(
        || outline_defaults.api_url.clone(),
        |o| o.sim.base_url().to_owned(),
    );
    let mut outline_config = testkit::outline_sync_config(
        common(Identity::OutlineSync, next_port(listen, 6), false),
        &outline_api_url,
        Some(&ingress.url()),
    );
    outline_config.sync.reconcile_cron = outline_defaults.sync.reconcile_cron;
    let outline_sync = testkit::spawn(outline_config).await?;
    // provider-repair removes what a connection created at the vendor (the demo's at the
    // simulators) once it leaves active, on its own (default) schedule.
    let provider_repair: provider_repair::Config = testkit::config(
        common(Identity::ProviderRepair, next_port(listen, 7), false),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            format!("--slack-api-url={slack_api_url}"),
            format!("--outline-api-url={outline_api_url}"),
        ],
    )?;
    let provider_repair = testkit::spawn(provider_repair).await?;

    let token = testkit::token(&keys, control_api::Role::Admin, None)?;
    let base = control_api.url();
    let sim = if demo {
        Some(start_demo(&base, &token).await?)
    } else {
        None
    };
    let gitlab = match &sim {
        Some((_, ws, _)) => Some(start_gitlab_demo(&base, &token, ws).await?),
        None => None,
    };
    let slack_conn = match (&sim, &slack) {
        (Some((_, ws, _)), Some(slack)) => {
            Some(slack.connect(&base, &token, ws, &ingress.url()).await?)
        }
        _ => None,
    };
    let outline_conn = match (&sim, &outline) {
        (Some((_, ws, _)), Some(outline)) => Some(outline.connect(&base, &token, ws).await?),
        _ => None,
    };
    // The walk-through's PAT connection names a repository its token resolves (the simulator's
    // when the demo runs); control-api refuses names the token cannot see.
    let connection_body = match &sim {
        Some((sim, _, _)) => format!(
            r#"{{"kind":"github","server_url":"{}","settings":{{"auth":"pat","repositories":["acme/repo-0"]}},"secrets":{{"token":"ghp_forgesync_demo"}}}}"#,
            sim.base_url()
        ),
        None => r#"{"kind":"github","settings":{"auth":"pat","repositories":["OWNER/NAME"]},"secrets":{"token":"<a PAT that can read OWNER/NAME>"}}"#.to_owned(),
    };
    let demo_lines = match (&sim, &gitlab, &slack, &slack_conn) {
        (
            Some((sim, ws, conn)),
            Some((gitlab, gl_conn)),
            Some(slack),
            Some((sl_conn, general_id)),
        ) => format!(
            "  GitHub sim    {}   (3 repositories, 300 issues and pull requests)\n\
             \x20 GitLab sim    {}   (group acme: 3 projects in it and a subgroup, 90 issues and merge requests with notes; in acme/web one approved with a passing pipeline, one merged, one with changes requested)\n\
             \x20 Slack sim     {}   (team {team}: channels general, random and ops with the bot in them; user {user}; admin routes: POST /_admin/<action>)\n\n\
             A demo workspace {ws} has an active GitHub connection {conn}, an active GitLab\n\
             connection {gl_conn} and an active Slack connection {sl_conn} to the simulators; GitHub's\n\
             and GitLab's INITIAL syncs are running, and #general ({general}) is consented to. Watch them:\n  \
             curl -s {base}/workspaces/{ws}/connections/{conn}/jobs -H \"Authorization: Bearer $TOKEN\"\n  \
             curl -s {base}/workspaces/{ws}/connections/{gl_conn}/gitlab/activation -H \"Authorization: Bearer $TOKEN\"\n  \
             curl -s {base}/workspaces/{ws}/gitlab/projects -H \"Authorization: Bearer $TOKEN\"\n  \
             curl -s {base}/workspaces/{ws}/slack/channels -H \"Authorization: Bearer $TOKEN\"\n\
             Say something in #general through the simulator, then read the channel's messages:\n  \
             curl -s -X POST {slack_url}/_admin/post -H 'content-type: application/json' -d '{{\"channel\":\"{general}\",\"user\":\"{user}\",\"text\":\"hello\"}}'\n  \
             curl -s {base}/workspaces/{ws}/slack/channels/{general_id}/messages -H \"Authorization: Bearer $TOKEN\"\n\
             slack demo: connection={sl_conn} team={team} signing_secret={secret}\n\
             gitlab demo: connection={gl_conn} sim={gitlab_url} group={group} token={gitlab_token}\n",
            sim.base_url(),
            gitlab.base_url(),
            slack.sim.base_url(),
            slack_url = slack.sim.base_url(),
            team = slack.team,
            user = slack.user,
            general = slack.channels[0],
            secret = SLACK_SIGNING_SECRET,
            gitlab_url = gitlab.base_url(),
            group = gitlab
                .model(|m| m.group_by_path("acme"))
                .context("the GitLab demo's group")?,
            gitlab_token = GITLAB_TOKEN,
        ),
        _ => String::new(),
    };
    let outline_lines = match (&sim, &outline, &outline_conn) {
        (Some((_, ws, _)), Some(outline), Some(connected)) => outline.lines(connected, &base, ws),
        _ => String::new(),
    };
    println!(
        r#"
forgesync is up.
  control-api   {base}   (OpenAPI: {base}/openapi.json, health: /readyz, metrics: /metrics)
  ingress       {ingress}   (webhooks: /webhooks/github, /webhooks/gitlab, /webhooks/slack, /webhooks/outline/<token>, ...)
  github-sync   {sync}   (health and metrics only)
  eraser        {eraser}   (disconnect and purge; health and metrics only)
  gitlab-sync   {gitlab_sync}   (health and metrics only)
  slack-ingest  {slack_ingest}   (Slack API {slack_api_url}; health and metrics only)
  outline-sync  {outline_sync}   (Outline {outline_api_url}; health and metrics only)
  provider-repair {provider_repair}   (removes what we created at vendors; health and metrics only)
  Postgres      {db}
  NATS          {nats}
{traces}{demo_lines}{outline_lines}
An operator's admin token valid for one hour (HS256, iss {iss}, aud {aud}, "operator": true):
  export TOKEN={token}

Try it:
  curl -s -X POST {base}/workspaces -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"name":"acme"}}'
  # then, with the workspace id it returns as $WS:
  curl -s -X POST {base}/workspaces/$WS/connections -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{connection_body}'
  # and with the connection id as $CONN:
  curl -s -X POST {base}/workspaces/$WS/connections/$CONN/activate -H "Authorization: Bearer $TOKEN"

Ctrl-C stops everything.
"#,
        ingress = ingress.url(),
        sync = github_sync.url(),
        eraser = eraser.url(),
        gitlab_sync = gitlab_sync.url(),
        slack_ingest = slack_ingest.url(),
        outline_sync = outline_sync.url(),
        provider_repair = provider_repair.url(),
        iss = testkit::JWT_ISSUER,
        aud = testkit::JWT_AUDIENCE,
        db = runtime::config::redact_url(database_url),
        nats = runtime::config::redact_url(nats_url),
    );
    shutdown.cancelled().await;
    let results = [
        control_api.stop().await,
        ingress.stop().await,
        github_sync.stop().await,
        eraser.stop().await,
        gitlab_sync.stop().await,
        slack_ingest.stop().await,
        outline_sync.stop().await,
        provider_repair.stop().await,
    ];
    drop(sim);
    drop(gitlab);
    drop(slack);
    drop(outline);
    println!("forgesync stopped");
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

/// Starts the GitHub simulator and connects a demo workspace to it through control-api.
async fn start_demo(
    base: &str,
    token: &str,
) -> Result<(vendor_sim::github::GithubSim, String, String)> {
    use vendor_sim::github::{GithubSim, Scenario, generate};
    let generated = generate(&Scenario {
        repositories: 3,
        items: 300,
        ..Scenario::default()
    });
    let mut model = generated.model;
    // The owner's own token: control-api resolves every named repository with it.
    model.add_user_token("ghp_forgesync_demo", &Scenario::default().owner);
    let repositories: Vec<String> = model
        .repositories()
        .map(|r| format!("{}/{}", r.owner, r.name))
        .collect();
    let sim = GithubSim::start(model).await?;
    let http = reqwest::Client::new();
    let call = |path: String, body: Value| {
        let req = http
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body);
        async move {
            let res = req.send().await?;
            let status = res.status();
            let body: Value = res.json().await?;
            anyhow::ensure!(
                status.is_success(),
                "demo setup: {path} answered {status}: {body}"
            );
            anyhow::Ok(body)
        }
    };
    let ws = call("/workspaces".into(), json!({ "name": "demo" })).await?;
    let ws = ws["id"].as_str().context("workspace id")?.to_owned();
    let conn = call(
        format!("/workspaces/{ws}/connections"),
        json!({
            "kind": "github",
            "server_url": sim.base_url(),
            "settings": { "auth": "pat", "repositories": repositories },
            "secrets": { "token": "ghp_forgesync_demo" },
        }),
    )
    .await?;
    let conn = conn["id"].as_str().context("connection id")?.to_owned();
    call(
        format!("/workspaces/{ws}/connections/{conn}/activate"),
        json!({}),
    )
    .await?;
    Ok((sim, ws, conn))
}

/// The demo GitLab connection's token.
const GITLAB_TOKEN: &str = "glpat-forgesync-demo";

/// Starts the GitLab simulator (group `acme` with a subgroup, three projects, issues, merge
/// requests and notes) and connects the demo workspace to it through control-api; activation
/// discovers the projects and registers the group hook at ingress.
async fn start_gitlab_demo(
    base: &str,
    token: &str,
    ws: &str,
) -> Result<(vendor_sim::gitlab::GitlabSim, String)> {
    use vendor_sim::gitlab::{DiffPosition, GitlabSim, Model, NewIssue, NewMergeRequest, NoteOn};
    const TOKEN: &str = GITLAB_TOKEN;
    let mut model = Model::default();
    model.add_token(TOKEN);
    let acme = model.add_group(None, "acme");
    let platform = model.add_group(Some(acme), "platform");
    let projects = [
        model.add_project(acme, "web"),
        model.add_project(platform, "api"),
        model.add_project(platform, "worker"),
    ];
    let start = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    for (p, project) in projects.into_iter().enumerate() {
        for i in 0..30i64 {
            let updated_at = start + time::Duration::hours(i * 3 + p as i64);
            if i % 3 == 0 {
                let iid = model.add_merge_request(
                    project,
                    NewMergeRequest {
                        title: format!("Merge request {i}"),
                        updated_at,
                    },
                );
                let on = NoteOn::MergeRequest(project, iid);
                model.add_note(on, "Looks good to me", false, None);
                let head = model.merge_requests[&(project, iid)]
                    .diff_head_sha
                    .clone()
                    .unwrap_or_default();
                let diff = model.add_diff_note(
                    on,
                    "Could this be simpler?",
                    DiffPosition::line("src/main.rs", 10, &head),
                );
                model.add_reply(diff, "Simplified.");
            } else {
                let iid = model.add_issue(
                    project,
                    NewIssue {
                        title: format!("Issue {i}"),
                        updated_at,
                    },
                );
                model.add_note(
                    NoteOn::Issue(project, iid),
                    "Seen on staging too",
                    false,
                    None,
                );
            }
        }
    }
    // Three recent merge requests in acme/web showing what a review looks like in the mirror:
    // approved with a passing pipeline, merged, and one with changes requested.
    let web = projects[0];
    let recent = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    let mut review_demo = |title: &str| {
        model.add_merge_request(
            web,
            NewMergeRequest {
                title: title.into(),
                updated_at: recent,
            },
        )
    };
    let approved = review_demo("Demo: approved, pipeline passed");
    let merged = review_demo("Demo: merged");
    let changes = review_demo("Demo: changes requested");
    let reviewers = |model: &mut Model, iid: u64, state: &str| {
        if let Some(mr) = model.merge_requests.get_mut(&(web, iid)) {
            mr.reviewers = vec![("bob".into(), Some(state.into()))];
        }
    };
    reviewers(&mut model, approved, "UNREVIEWED");
    model.approve_merge_request(web, approved, "bob");
    reviewers(&mut model, approved, "APPROVED");
    if let Some(pipeline) = model.start_pipeline(web, approved) {
        model.set_pipeline_status(pipeline, "success");
    }
    model.approve_merge_request(web, merged, "bob");
    model.update_merge_request(web, merged, |mr| {
        mr.state = "merged".into();
        mr.merge_user = Some("alice".into());
    });
    reviewers(&mut model, changes, "UNREVIEWED");
    model.request_changes(web, changes, "bob");
    let sim = GitlabSim::start(model).await?;
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let req = http
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body);
        async move {
            let res = req.send().await?;
            let status = res.status();
            let body: Value = res.json().await?;
            anyhow::ensure!(
                status.is_success(),
                "GitLab demo setup: {path} answered {status}: {body}"
            );
            anyhow::Ok(body)
        }
    };
    let conn = post(
        format!("/workspaces/{ws}/connections"),
        json!({
            "kind": "gitlab",
            "server_url": sim.base_url(),
            "settings": { "group": "acme" },
            "secrets": { "token": TOKEN },
        }),
    )
    .await?;
    let conn = conn["id"].as_str().context("connection id")?.to_owned();
    post(
        format!("/workspaces/{ws}/connections/{conn}/activate"),
        json!({}),
    )
    .await?;
    Ok((sim, conn))
}

/// Slack's Web API, which slack-ingest reads when the demo does not run.
const SLACK_API_URL: &str = "https://slack.com/api/";
/// The demo Slack app's signing secret (an operator's: its deliveries are facts).
const SLACK_SIGNING_SECRET: &str = "forgesync-demo-slack-signing-secret";
/// The demo Slack connection's bot token.
const SLACK_TOKEN: &str = "xoxb-forgesync-demo";

/// The Slack simulator of the demo: team `acme`, the bot in `general`, `random` and `ops`, one
/// user who has said a few things in each.
struct SlackDemo {
    sim: vendor_sim::slack::SlackSim,
    team: String,
    user: String,
    /// `general`, `random`, `ops` (Slack ids).
    channels: [String; 3],
}

impl SlackDemo {
    /// Starts the simulator; slack-ingest reads its `api_url()`.
    async fn start() -> Result<SlackDemo> {
        use vendor_sim::slack::{Model, SlackSim};
        let sim_error = |e: vendor_sim::slack::SlackError| anyhow::anyhow!("Slack demo: {e:?}");
        let mut model = Model::default();
        let team = model.add_team("acme");
        model.add_token(SLACK_TOKEN, &team);
        let user = model.add_user(&team);
        let mut channels = Vec::new();
        for name in ["general", "random", "ops"] {
            let id = model.add_channel(&team, name, false).map_err(sim_error)?;
            model.join_bot(&id).map_err(sim_error)?;
            // Said before anyone consented: never mirrored.
            model
                .post(&id, &user, &format!("Morning, #{name}!"))
                .map_err(sim_error)?;
            channels.push(id);
        }
        model
            .post(&channels[0], &user, "Standup in five minutes")
            .map_err(sim_error)?;
        let sim = SlackSim::start(model).await?;
        Ok(SlackDemo {
            sim,
            team,
            user,
            channels: channels
                .try_into()
                .map_err(|_| anyhow::anyhow!("three channels"))?,
        })
    }

    /// Connects workspace `ws` to the team through control-api (the connection, its app-level
    /// endpoint keyed by the app's signing secret, the activation), subscribes the team's events
    /// to ingress, and consents to `general` once the directory lists it. Returns the
    /// connection's id and general's (the channel row's, not Slack's).
    async fn connect(
        &self,
        base: &str,
        token: &str,
        ws: &str,
        ingress: &str,
    ) -> Result<(String, String)> {
        let http = reqwest::Client::new();
        let send = |req: reqwest::RequestBuilder, what: String| async move {
            let res = req.bearer_auth(token).send().await?;
            let status = res.status();
            let body: Value = res.json().await?;
            anyhow::ensure!(
                status.is_success(),
                "Slack demo setup: {what} answered {status}: {body}"
            );
            anyhow::Ok(body)
        };
        let post =
            |path: String, body: Value| send(http.post(format!("{base}{path}")).json(&body), path);
        let conn = post(
            format!("/workspaces/{ws}/connections"),
            json!({
                "kind": "slack",
                "settings": { "team_id": self.team },
                "secrets": { "token": SLACK_TOKEN },
            }),
        )
        .await?;
        let conn = conn["id"].as_str().context("connection id")?.to_owned();
        // The app's endpoint: the shared /webhooks/slack route selects it by team id.
        post(
            format!("/workspaces/{ws}/connections/{conn}/endpoints"),
            json!({
                "registration": "app",
                "provider_ref": self.team,
                "secret": SLACK_SIGNING_SECRET,
            }),
        )
        .await?;
        self.sim
            .subscribe_events(&format!("{ingress}/webhooks/slack"), SLACK_SIGNING_SECRET);
        post(
            format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?;
        // Activation records the directory; consent needs general's row.
        let general = &self.channels[0];
        let channels = format!("/workspaces/{ws}/slack/channels");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let channel_id = loop {
            let listed = send(http.get(format!("{base}{channels}")), channels.clone()).await?;
            let found =
                listed.as_array().into_iter().flatten().find(|c| {
                    c["connection_id"] == conn.as_str() && c["slack_id"] == general.as_str()
                });
            if let Some(id) = found.and_then(|c| c["id"].as_str()) {
                break id.to_owned();
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "Slack demo setup: slack-ingest did not list channel {general} within 30 s of \
                 the activation (see its log above)"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        post(format!("{channels}/{channel_id}/consent"), json!({})).await?;
        Ok((conn, channel_id))
    }
}

/// The demo Outline connection's API token.
const OUTLINE_TOKEN: &str = "ol_api_forgesync_demo";
/// Documents the demo team holds, spread over its two collections.
const OUTLINE_DOCUMENTS: usize = 40;
/// How long the Outline demo waits for activation and for its INITIAL.
const OUTLINE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The Outline simulator of the demo: team `acme` with collections Engineering and Handbook and
/// [`OUTLINE_DOCUMENTS`] documents changed over the last few weeks (all within the INITIAL's
/// horizon).
struct OutlineDemo {
    sim: vendor_sim::outline::OutlineSim,
    /// Outline's ids of the collections: Engineering, Handbook.
    collections: [String; 2],
}

/// What connecting the demo workspace to the Outline simulator left.
struct OutlineConnected {
    connection: String,
    /// Outline's id of the connection's adopted webhook subscription.
    subscription: String,
    /// The ingress URL that subscription delivers to.
    route: String,
    /// The connection's documents in the mirror when the wait for its INITIAL ended.
    stored: usize,
    /// One of the demo's documents (Outline's id), to change through the simulator.
    example: String,
}

impl OutlineDemo {
    /// Starts the simulator; outline-sync reads its `base_url()`.
    async fn start() -> Result<OutlineDemo> {
        use vendor_sim::outline::{Model, NewDocument, OutlineSim};
        let mut model = Model::new("acme");
        model.add_token(OUTLINE_TOKEN);
        let collections = [
            model.add_collection("Engineering"),
            model.add_collection("Handbook"),
        ];
        let start = time::OffsetDateTime::now_utc() - time::Duration::days(20);
        for i in 0..OUTLINE_DOCUMENTS {
            let collection = &collections[i % 2];
            let at = start + time::Duration::hours(i as i64 * 12);
            model
                .add_document(
                    NewDocument::new(collection, &format!("Document {i}"))
                        .text(&format!(
                            "# Document {i}\n\nWritten for the forgesync demo."
                        ))
                        .dated(at),
                )
                .map_err(|e| anyhow::anyhow!("Outline demo: {e}"))?;
        }
        let sim = OutlineSim::start(model).await?;
        Ok(OutlineDemo { sim, collections })
    }

    /// Connects workspace `ws` to the team through control-api and activates the connection:
    /// outline-sync's activation creates the subscription at the simulator (delivering to
    /// ingress) and its INITIAL reads the documents. Waits until control-api shows the
    /// subscription adopted (an error otherwise), then until the INITIAL stored every document
    /// (reported in [`OutlineConnected::stored`] either way).
    async fn connect(&self, base: &str, token: &str, ws: &str) -> Result<OutlineConnected> {
        let http = reqwest::Client::new();
        let send = |req: reqwest::RequestBuilder, what: String| async move {
            let res = req.bearer_auth(token).send().await?;
            let status = res.status();
            let body: Value = res.json().await?;
            anyhow::Ok((status, body, what))
        };
        let ok = |(status, body, what): (reqwest::StatusCode, Value, String)| {
            anyhow::ensure!(
                status.is_success(),
                "Outline demo setup: {what} answered {status}: {body}"
            );
            anyhow::Ok(body)
        };
        let post =
            |path: String, body: Value| send(http.post(format!("{base}{path}")).json(&body), path);
        let conn = ok(post(
            format!("/workspaces/{ws}/connections"),
            json!({
                "kind": "outline",
                "server_url": self.sim.base_url(),
                "secrets": { "token": OUTLINE_TOKEN },
            }),
        )
        .await?)?;
        let conn = conn["id"].as_str().context("connection id")?.to_owned();
        ok(post(
            format!("/workspaces/{ws}/connections/{conn}/activate"),
            json!({}),
        )
        .await?)?;

        // Activation runs in outline-sync: the subscription is created, then adopted.
        let path = format!("/workspaces/{ws}/connections/{conn}/outline/subscription");
        let deadline = tokio::time::Instant::now() + OUTLINE_WAIT;
        let subscription = loop {
            let (status, body, _) = send(http.get(format!("{base}{path}")), path.clone()).await?;
            if status.is_success()
                && body["state"] == "adopted"
                && let Some(id) = body["subscription_id"].as_str()
            {
                break id.to_owned();
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "Outline demo setup: outline-sync did not adopt connection {conn}'s webhook \
                 subscription within {} s of the activation; {path} last answered {status}: \
                 {body} (see outline-sync's log above)",
                OUTLINE_WAIT.as_secs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        let route = self
            .sim
            .model(|m| m.subscription(&subscription).map(|s| s.url.clone()))
            .with_context(|| {
                format!(
                    "Outline demo setup: control-api shows subscription {subscription} adopted, \
                     but the simulator holds no such subscription"
                )
            })?;

        // The INITIAL reads every document (all are within its horizon).
        let path = format!("/workspaces/{ws}/outline/documents?limit=1000");
        let deadline = tokio::time::Instant::now() + OUTLINE_WAIT;
        let stored = loop {
            let listed = ok(send(http.get(format!("{base}{path}")), path.clone()).await?)?;
            let stored = listed
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["connection_id"] == conn.as_str() && d["deleted_at"].is_null())
                .count();
            if stored >= OUTLINE_DOCUMENTS || tokio::time::Instant::now() >= deadline {
                break stored;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        if stored < OUTLINE_DOCUMENTS {
            tracing::warn!(
                connection_id = %conn,
                stored,
                "Outline demo: the INITIAL did not store the team's {OUTLINE_DOCUMENTS} documents within {} s",
                OUTLINE_WAIT.as_secs()
            );
        }
        let example = self
            .sim
            .model(|m| m.document_ids_in(&self.collections[0]).into_iter().next())
            .context("Outline demo: the Engineering collection holds no document")?;
        Ok(OutlineConnected {
            connection: conn,
            subscription,
            route,
            stored,
            example,
        })
    }

    /// The demo's part of the printout, ending with the `outline demo:` line.
    fn lines(&self, c: &OutlineConnected, base: &str, ws: &str) -> String {
        let initial = if c.stored >= OUTLINE_DOCUMENTS {
            format!("its INITIAL stored all {OUTLINE_DOCUMENTS} documents")
        } else {
            format!(
                "its INITIAL DID NOT store the {OUTLINE_DOCUMENTS} documents within {} s \
                 (only {} so far; see outline-sync's log above)",
                OUTLINE_WAIT.as_secs(),
                c.stored
            )
        };
        format!(
            "\n  Outline sim   {sim}   (team acme: collections Engineering and Handbook, {n} documents; admin routes: POST /_admin/<action>)\n\n\
             The demo workspace also has an active Outline connection {conn}: its webhook subscription\n\
             delivers to ingress, and {initial}. Change a document through\n\
             the simulator, then read the mirror:\n  \
             curl -s -X POST {sim}/_admin/documents.update -H 'content-type: application/json' -d '{{\"id\":\"{example}\",\"title\":\"Renamed\"}}'\n  \
             curl -s {base}/workspaces/{ws}/outline/documents -H \"Authorization: Bearer $TOKEN\"\n  \
             curl -s {base}/workspaces/{ws}/connections/{conn}/outline/subscription -H \"Authorization: Bearer $TOKEN\"\n\
             outline demo: connection={conn} sim={sim} subscription={subscription} route={route}\n",
            sim = self.sim.base_url(),
            n = OUTLINE_DOCUMENTS,
            conn = c.connection,
            example = c.example,
            subscription = c.subscription,
            route = c.route,
        )
    }
}
