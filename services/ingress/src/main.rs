//! ingress binary: parse config, set up telemetry, run until SIGTERM/SIGINT.
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    runtime::install_crypto_provider();
    let config = ingress::Config::parse();
    let telemetry = runtime::telemetry::init(
        "ingress",
        config.common.log_format,
        config.common.otlp_endpoint.as_deref(),
    )?;
    let shutdown = runtime::shutdown_token();
    let result = ingress::run(config, shutdown, |_| {}).await;
    telemetry.shutdown().await;
    result
}
