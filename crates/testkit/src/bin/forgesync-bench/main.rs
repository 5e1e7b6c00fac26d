//! `cargo xtask bench <target>`: throughput of a real path beside the physical limit under it,
//! both measured in the same run against the Postgres and NATS xtask provisioned.
//!
//! Every figure is printed next to its ceiling and the ratio between them; a benchmark stops by
//! itself (bounded counts and time) and talks only to 127.0.0.1.
#![forbid(unsafe_code)]

mod erasure;
mod github_sync;
mod github_webhooks;
mod gitlab_sync;
mod gitlab_webhooks;
mod ingress;
mod outline_sync;
mod slack_ingest;
mod table;

use anyhow::{Context as _, Result};
use clap::{Parser, ValueEnum};

#[derive(Parser)]
#[command(
    name = "forgesync-bench",
    about = "forgesync benchmarks, each beside its ceiling"
)]
struct Cli {
    /// Which benchmark.
    target: Target,
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// INITIAL sync of a simulated installation (5 repositories, 10,000 items) through
    /// github-client against the GitHub simulator, beside raw Postgres upserts of the same rows.
    GithubSync,
    /// Signed GitHub webhooks posted to ingress at several concurrencies, beside the raw
    /// Postgres inserts ingress makes per delivery and raw JetStream publishes.
    Ingress,
    /// Erasure of one disconnected connection (100,000 mirrored items, 100,000 stream messages)
    /// through the eraser's library, beside raw DELETEs of the same rows and raw JetStream
    /// deletes by sequence.
    Eraser,
    /// INITIAL sync of 12 GitLab projects in subgroups (10,000 issues and merge requests)
    /// through gitlab-client against the GitLab simulator, beside raw Postgres upserts of the
    /// same rows.
    GitlabSync,
    /// Signed Slack `message` deliveries into ingress, applied by slack-ingest to one consented
    /// channel, beside the raw row-locked Postgres writes of the same messages, in rounds.
    SlackIngest,
    /// A RECONCILIATION of a simulated Outline team (3 collections, 6,000 documents) by
    /// outline-sync, beside raw batched upserts of the same rows; and signed Outline deliveries
    /// into ingress applied by outline-sync, beside the raw row-locked writes, in rounds.
    OutlineSync,
}

fn env(var: &str) -> Result<String> {
    std::env::var(var)
        .with_context(|| format!("{var} is not set: run through `cargo xtask bench <target>`"))
}

#[tokio::main]
async fn main() -> Result<()> {
    runtime::install_crypto_provider();
    let cli = Cli::parse();
    // Only 127.0.0.1: the benchmarks start their own servers and use the provisioned stack.
    env("DATABASE_URL")?;
    env("NATS_URL")?;
    match cli.target {
        Target::GithubSync => github_sync::run().await,
        Target::Ingress => ingress::run().await,
        Target::Eraser => erasure::run().await,
        Target::GitlabSync => gitlab_sync::run().await,
        Target::SlackIngest => slack_ingest::run().await,
        Target::OutlineSync => outline_sync::run().await,
    }
}

/// The machine line every report starts with.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cores} cores ({model}), shared; Postgres, NATS and the benchmark on the same host")
}
