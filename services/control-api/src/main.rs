//! control-api binary: parse config, set up telemetry, run until SIGTERM/SIGINT.
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    runtime::install_crypto_provider();
    let config = control_api::Config::parse();
    let telemetry = runtime::telemetry::init(
        "control-api",
        config.common.log_format,
        config.common.otlp_endpoint.as_deref(),
    )?;
    let shutdown = runtime::shutdown_token();
    let result = control_api::run(config, shutdown, |_| {}).await;
    telemetry.shutdown().await;
    result
}
