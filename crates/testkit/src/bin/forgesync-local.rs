//! The local stack (`cargo xtask up`): every service that exists, in one process, against the
//! Postgres and NATS that xtask provisioned. Also `migrate` for `cargo xtask migrate`.
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

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
        /// Where control-api listens.
        #[arg(
            long,
            env = "FORGESYNC_LISTEN",
            value_name = "FORGESYNC_LISTEN",
            default_value = "127.0.0.1:8080"
        )]
        listen: SocketAddr,
    },
    /// Apply pending migrations and exit.
    Migrate,
}

fn env(var: &str) -> Result<String> {
    std::env::var(var).with_context(|| format!("{var} is not set (run through `cargo xtask`)"))
}

#[tokio::main]
async fn main() -> Result<()> {
    runtime::install_crypto_provider();
    let cli = Cli::parse();
    let _telemetry = runtime::telemetry::init("forgesync-local", runtime::LogFormat::Pretty, None)?;
    let database_url = env("DATABASE_URL")?;
    match cli.command {
        Command::Migrate => {
            runtime::db::connect(&database_url, true).await?;
            println!(
                "migrations applied to {}",
                runtime::config::redact_url(&database_url)
            );
            Ok(())
        }
        Command::Up { listen } => up(&database_url, &env("NATS_URL")?, listen).await,
    }
}

async fn up(database_url: &str, nats_url: &str, listen: SocketAddr) -> Result<()> {
    let shutdown = runtime::shutdown_token();
    let mut common = testkit::common_args(database_url, nats_url, None);
    common.listen = listen;
    common.migrate = true;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let control_api = tokio::spawn(control_api::run(
        testkit::control_api_config(common),
        shutdown.clone(),
        move |addr| {
            let _ = tx.send(addr);
        },
    ));
    let Ok(addr) = rx.await else {
        control_api.await??;
        anyhow::bail!("control-api stopped before listening");
    };
    let keys = control_api::Keys::hs256(testkit::JWT_SECRET.as_bytes())?;
    let token = testkit::token(&keys, control_api::Role::Admin, None)?;
    let base = format!("http://{addr}");
    println!(
        r#"
forgesync is up.
  control-api   {base}      (OpenAPI: {base}/openapi.json, health: {base}/readyz, metrics: {base}/metrics)
  Postgres      {db}
  NATS          {nats}

An admin token valid for one hour:
  export TOKEN={token}

Try it:
  curl -s -X POST {base}/workspaces -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"name":"demo"}}'
  # then, with the workspace id it returns:
  curl -s -X POST {base}/workspaces/$WS/connections -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"kind":"github","secrets":{{"token":"ghp_example"}}}}'
  curl -s -X POST {base}/workspaces/$WS/connections/$CONN/activate -H "Authorization: Bearer $TOKEN"

Ctrl-C stops everything.
"#,
        db = runtime::config::redact_url(database_url),
        nats = runtime::config::redact_url(nats_url),
    );
    let result = control_api.await.context("control-api task")?;
    println!("forgesync stopped");
    result
}
