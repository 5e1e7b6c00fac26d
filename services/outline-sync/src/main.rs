//! outline-sync binary: parse config, set up telemetry, run until SIGTERM/SIGINT.
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    runtime::install_crypto_provider();
    let config = outline_sync::Config::parse();
    let telemetry = runtime::telemetry::init(
        "outline-sync",
        config.common.log_format,
        config.common.otlp_endpoint.as_deref(),
    )?;
    let result = outline_sync::run(config, runtime::shutdown_token(), |_| {}).await;
    telemetry.shutdown().await;
    result
}
