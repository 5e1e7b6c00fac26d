//! `forgesync-admin`: the operator's one-off tasks against the database the services use. The
//! chart's migration hook runs `migrate`; `cargo xtask migrate` and `cargo xtask reseal` run it
//! too.
#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "forgesync-admin", about = "forgesync's operator tasks")]
struct Cli {
    /// Postgres connection URL (for `migrate`, a role allowed to change the schema).
    #[arg(
        long,
        env = "DATABASE_URL",
        value_name = "DATABASE_URL",
        hide_env_values = true
    )]
    database_url: String,

    /// Log line format.
    #[arg(
        long,
        env = "FORGESYNC_LOG_FORMAT",
        value_name = "FORGESYNC_LOG_FORMAT",
        value_enum,
        default_value_t = runtime::LogFormat::Pretty
    )]
    log_format: runtime::LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations and exit (under the advisory lock the services' `--migrate`
    /// takes, so it is safe beside them).
    Migrate,
    /// Re-seal every connection secret under the newest key of FORGESYNC_SECRET_KEY, in
    /// batches; safe beside running services and to repeat. Exits non-zero while any secret is
    /// not under the newest key.
    Reseal {
        /// The keyring, as every service reads it.
        #[arg(
            long,
            env = "FORGESYNC_SECRET_KEY",
            value_name = "FORGESYNC_SECRET_KEY",
            hide_env_values = true
        )]
        secret_key: String,
        /// Secrets re-sealed per transaction.
        #[arg(long, default_value_t = 100)]
        batch: u32,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    runtime::install_crypto_provider();
    let cli = Cli::parse();
    let _telemetry = runtime::telemetry::init("forgesync-admin", cli.log_format, None)?;
    let database_url = cli.database_url;
    match cli.command {
        Command::Migrate => {
            runtime::db::connect(&database_url, true, runtime::db::DEFAULT_POOL_SIZE).await?;
            println!(
                "migrations applied to {}",
                runtime::config::redact_url(&database_url)
            );
            Ok(())
        }
        Command::Reseal { secret_key, batch } => {
            let ring = store::secrets::Keyring::parse(&secret_key)?;
            let db =
                runtime::db::connect(&database_url, false, runtime::db::DEFAULT_POOL_SIZE).await?;
            let report = store::secrets::reseal(&db, &ring, batch).await?;
            for failed in &report.failed {
                eprintln!("cannot re-seal {failed}");
            }
            println!(
                "re-sealed {} secrets under key {:?}; {} could not be opened; {} not under it now",
                report.resealed,
                ring.sealing().id(),
                report.failed.len(),
                report.remaining
            );
            anyhow::ensure!(
                report.remaining == 0,
                "{} secrets are not under key {:?}: keep the older keys in the ring",
                report.remaining,
                ring.sealing().id()
            );
            Ok(())
        }
    }
}
