//! Command-line and environment configuration shared by every service.
//!
//! Each flag also reads an environment variable, and its value name *is* that variable, so a
//! bad or missing value fails at start with a message naming it (`--listen <FORGESYNC_LISTEN>`).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable, for terminals.
    #[default]
    Pretty,
}

/// Flags every service takes; `#[command(flatten)]` it into the service's own clap struct.
#[derive(Clone, clap::Args)]
pub struct CommonArgs {
    /// Postgres connection URL.
    // Secrets (a URL may carry a password) never appear in --help.
    #[arg(
        long,
        env = "DATABASE_URL",
        value_name = "DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: String,

    /// NATS server URL.
    #[arg(
        long,
        env = "NATS_URL",
        value_name = "NATS_URL",
        hide_env_values = true
    )]
    pub nats_url: String,

    /// NKey seed authenticating to NATS (instead of, or beside, credentials in NATS_URL).
    #[arg(
        long,
        env = "FORGESYNC_NATS_NKEY",
        value_name = "FORGESYNC_NATS_NKEY",
        hide_env_values = true
    )]
    pub nats_nkey: Option<String>,

    /// OTLP/HTTP endpoint for trace export; traces are not exported when unset.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "OTEL_EXPORTER_OTLP_ENDPOINT"
    )]
    pub otlp_endpoint: Option<String>,

    /// Log line format.
    #[arg(
        long,
        env = "FORGESYNC_LOG_FORMAT",
        value_name = "FORGESYNC_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Pretty
    )]
    pub log_format: LogFormat,

    /// Address the HTTP server (API, /healthz, /readyz, /metrics) listens on.
    #[arg(
        long,
        env = "FORGESYNC_LISTEN",
        value_name = "FORGESYNC_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    pub listen: SocketAddr,

    /// Address of a separate listener for /healthz, /readyz and /metrics; when unset they are
    /// served on FORGESYNC_LISTEN beside the API. A deployment that routes the API publicly keeps
    /// them off the public port this way.
    #[arg(
        long,
        env = "FORGESYNC_HEALTH_LISTEN",
        value_name = "FORGESYNC_HEALTH_LISTEN"
    )]
    pub health_listen: Option<SocketAddr>,

    /// Postgres connections the service may hold at once.
    #[arg(
        long,
        env = "FORGESYNC_DB_POOL_SIZE",
        value_name = "FORGESYNC_DB_POOL_SIZE",
        default_value_t = crate::db::DEFAULT_POOL_SIZE,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub db_pool_size: u32,

    /// Apply pending database migrations at start (safe with several replicas).
    #[arg(long, env = "FORGESYNC_MIGRATE", value_name = "FORGESYNC_MIGRATE")]
    pub migrate: bool,

    /// Namespace for JetStream streams and subjects (tests use one per test).
    #[arg(
        long,
        env = "FORGESYNC_NATS_PREFIX",
        value_name = "FORGESYNC_NATS_PREFIX"
    )]
    pub nats_prefix: Option<String>,

    /// Seconds allowed for in-flight work to finish after SIGTERM/SIGINT.
    #[arg(
        long = "shutdown-grace",
        env = "FORGESYNC_SHUTDOWN_GRACE",
        value_name = "FORGESYNC_SHUTDOWN_GRACE",
        default_value_t = 25
    )]
    pub shutdown_grace_secs: u64,

    /// JetStream replicas per stream (3 on a production cluster).
    #[arg(
        long,
        env = "FORGESYNC_STREAM_REPLICAS",
        value_name = "FORGESYNC_STREAM_REPLICAS",
        default_value_t = 1
    )]
    pub stream_replicas: usize,

    /// Seconds a stream keeps a message.
    #[arg(
        long = "stream-max-age",
        env = "FORGESYNC_STREAM_MAX_AGE",
        value_name = "FORGESYNC_STREAM_MAX_AGE",
        default_value_t = 7 * 24 * 3600
    )]
    pub stream_max_age_secs: u64,

    /// Seconds inside which a repeated message id is absorbed by a stream.
    #[arg(
        long = "duplicate-window",
        env = "FORGESYNC_DUPLICATE_WINDOW",
        value_name = "FORGESYNC_DUPLICATE_WINDOW",
        default_value_t = 3 * 3600
    )]
    pub duplicate_window_secs: u64,

    /// Address ranges vendor calls may reach besides public addresses (comma-separated CIDR,
    /// e.g. `10.20.0.0/16` for a GitLab inside the network). Otherwise loopback, link-local,
    /// private, CGNAT and unique-local addresses are refused, when a connection names its server
    /// and at every connect.
    #[arg(
        long = "egress-allow",
        env = "FORGESYNC_EGRESS_ALLOW",
        value_name = "FORGESYNC_EGRESS_ALLOW",
        default_value = "",
        value_parser = parse_egress
    )]
    pub egress: vendor_http::egress::Egress,
}

fn parse_egress(spec: &str) -> Result<vendor_http::egress::Egress, String> {
    vendor_http::egress::Egress::allowing(spec)
}

impl CommonArgs {
    /// The shutdown grace period as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// The stream settings these flags describe.
    pub fn stream_settings(&self) -> bus::StreamSettings {
        bus::StreamSettings {
            replicas: self.stream_replicas,
            max_age: Duration::from_secs(self.stream_max_age_secs),
            duplicate_window: Duration::from_secs(self.duplicate_window_secs),
        }
    }

    /// Connects the Postgres pool (migrating first with `--migrate`).
    pub async fn connect_db(&self) -> anyhow::Result<sea_orm::DatabaseConnection> {
        crate::db::connect(&self.database_url, self.migrate, self.db_pool_size).await
    }

    /// Connects to NATS in the configured namespace and declares every stream.
    pub async fn connect_bus(&self) -> anyhow::Result<bus::Bus> {
        let bus = self.connect_bus_undeclared().await?;
        bus.declare_streams().await?;
        Ok(bus)
    }

    /// Connects to NATS in the configured namespace without declaring streams; the connection
    /// is made (and remade) in the background, so this does not wait for NATS to be up.
    pub async fn connect_bus_undeclared(&self) -> anyhow::Result<bus::Bus> {
        let namespace = bus::Namespace::new(self.nats_prefix.as_deref().unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("FORGESYNC_NATS_PREFIX: {e}"))?;
        Ok(bus::Bus::connect(
            &self.nats_url,
            self.nats_nkey.as_deref(),
            namespace,
            self.stream_settings(),
        )
        .await?)
    }
}

// URLs may carry credentials; Debug output (which ends up in logs) hides them.
impl fmt::Debug for CommonArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommonArgs")
            .field("database_url", &redact_url(&self.database_url))
            .field("nats_url", &redact_url(&self.nats_url))
            .field("nats_nkey", &self.nats_nkey.as_ref().map(|_| "***"))
            .field(
                "otlp_endpoint",
                &self.otlp_endpoint.as_deref().map(redact_url),
            )
            .field("log_format", &self.log_format)
            .field("listen", &self.listen)
            .field("health_listen", &self.health_listen)
            .field("db_pool_size", &self.db_pool_size)
            .field("migrate", &self.migrate)
            .field("nats_prefix", &self.nats_prefix)
            .field("shutdown_grace_secs", &self.shutdown_grace_secs)
            .field("stream_replicas", &self.stream_replicas)
            .field("stream_max_age_secs", &self.stream_max_age_secs)
            .field("duplicate_window_secs", &self.duplicate_window_secs)
            .finish()
    }
}

/// Replaces the user-info part of a URL (`user:password@`) with `***@`, in each server of a
/// comma-separated list (a NATS URL may name several, each with its credentials).
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &url[scheme_end + at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    const BASE: [&str; 5] = [
        "svc",
        "--database-url",
        "postgres://u:secret@db/x",
        "--nats-url",
        "nats://127.0.0.1:4222",
    ];

    #[test]
    fn invalid_value_fails_naming_the_env_var() {
        let mut args = BASE.to_vec();
        args.extend(["--listen", "not-an-address"]);
        let err = Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(err.contains("FORGESYNC_LISTEN"), "{err}");

        let mut args = BASE.to_vec();
        args.extend(["--shutdown-grace", "soon"]);
        let err = Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(err.contains("FORGESYNC_SHUTDOWN_GRACE"), "{err}");

        let mut args = BASE.to_vec();
        args.extend(["--log-format", "xml"]);
        let err = Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(err.contains("FORGESYNC_LOG_FORMAT"), "{err}");
    }

    #[test]
    fn every_flag_reads_an_env_var() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        for arg in cmd.get_arguments() {
            if ["help", "version"].contains(&arg.get_id().as_str()) {
                continue;
            }
            assert!(arg.get_env().is_some(), "--{} has no env var", arg.get_id());
        }
    }

    #[test]
    fn explicit_flags_parse() {
        let mut args = BASE.to_vec();
        args.extend([
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--migrate",
            "--nats-prefix",
            "t1",
            "--shutdown-grace",
            "3",
            "--otlp-endpoint",
            "http://collector:4318",
        ]);
        let cli = Cli::try_parse_from(args).unwrap();
        let c = cli.common;
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.listen, "127.0.0.1:0".parse().unwrap());
        assert!(c.migrate);
        assert_eq!(c.nats_prefix.as_deref(), Some("t1"));
        assert_eq!(c.shutdown_grace(), Duration::from_secs(3));
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://collector:4318"));
    }

    #[test]
    fn debug_output_hides_credentials() {
        let cli = Cli::try_parse_from(BASE).unwrap();
        let shown = format!("{:?}", cli.common);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("postgres://***@db/x"), "{shown}");
    }

    #[test]
    fn every_server_of_a_nats_url_is_shown_without_its_password() {
        assert_eq!(
            redact_url("nats://ingress:pw1@n1:4222,nats://ingress:pw2@n2:4222"),
            "nats://***@n1:4222,nats://***@n2:4222"
        );
    }

    /// Runs one test of this binary in a child process with `env` set (setting the variables
    /// in this process would need `unsafe`); returns whether it passed, and its output.
    fn run_child(test: &str, env: &[(&str, &str)]) -> (bool, String) {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env("RUNTIME_CONFIG_CHILD", "1");
        for (key, value) in env {
            cmd.env(key, value);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    fn in_child() -> bool {
        std::env::var_os("RUNTIME_CONFIG_CHILD").is_some()
    }

    #[test]
    fn child_parses_from_env() {
        if !in_child() {
            return;
        }
        match Cli::try_parse_from(["svc"]) {
            Ok(cli) => println!("PARSED {:?}", cli.common),
            Err(err) => println!("REFUSED {err}"),
        }
    }

    #[test]
    fn env_vars_configure_every_flag() {
        let (ok, out) = run_child(
            "config::tests::child_parses_from_env",
            &[
                ("DATABASE_URL", "postgres://db/x"),
                ("NATS_URL", "nats://n:4222"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
                ("FORGESYNC_LOG_FORMAT", "json"),
                ("FORGESYNC_LISTEN", "127.0.0.1:9999"),
                ("FORGESYNC_MIGRATE", "true"),
                ("FORGESYNC_NATS_PREFIX", "ns1"),
                ("FORGESYNC_SHUTDOWN_GRACE", "7"),
            ],
        );
        assert!(ok, "{out}");
        for expected in [
            "PARSED",
            "log_format: Json",
            "listen: 127.0.0.1:9999",
            "migrate: true",
            "Some(\"ns1\")",
            "shutdown_grace_secs: 7",
            "Some(\"http://otel:4318\")",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in {out}");
        }
    }

    #[test]
    fn bad_env_value_fails_naming_the_env_var() {
        let (_, out) = run_child(
            "config::tests::child_parses_from_env",
            &[
                ("DATABASE_URL", "postgres://db/x"),
                ("NATS_URL", "nats://n:4222"),
                ("FORGESYNC_LISTEN", "everywhere"),
            ],
        );
        assert!(out.contains("REFUSED"), "{out}");
        assert!(out.contains("FORGESYNC_LISTEN"), "{out}");
    }
}
