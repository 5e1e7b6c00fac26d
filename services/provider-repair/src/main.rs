//! provider-repair binary: parse config, set up telemetry, run until SIGTERM/SIGINT.
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    runtime::install_crypto_provider();
    let config = provider_repair::Config::parse();
    let telemetry = runtime::telemetry::init(
        "provider-repair",
        config.common.log_format,
        config.common.otlp_endpoint.as_deref(),
    )?;
    let result = provider_repair::run(config, runtime::shutdown_token(), |_| {}).await;
    telemetry.shutdown().await;
    result
}
