//! Developer tasks for the forgesync workspace: `cargo xtask up | test | bench | migrate | reseal |
//! erasure-scan | schema | chart`.
//!
//! Every task provisions what it needs first: the Postgres and NATS named by `DATABASE_URL` and
//! `NATS_URL` when they answer, otherwise throwaway servers under `<target>/forgesync-local/`,
//! which are stopped again however the task ends.

#![forbid(unsafe_code)]

mod chart;
mod nats;
mod net;
mod nextest;
mod outline_schema;
mod paths;
mod postgres;
mod process;
mod pypi;
mod schema;
mod signals;
mod stack;
mod webhook_schema;

use std::ffi::OsString;
use std::process::Command;

use clap::{Parser, Subcommand};

use crate::paths::Layout;
use crate::stack::{Needs, Stack};

/// The binary, built from crates/testkit, that runs the whole system in one process.
const LOCAL_BIN: &str = "forgesync-local";
/// The operator's binary (crates/admin): `migrate` and `reseal`, as the image ships it.
const ADMIN_BIN: &str = "forgesync-admin";
/// The benchmark binary, built from crates/testkit.
const BENCH_BIN: &str = "forgesync-bench";
/// The independent OpenAPI validator control-api's contract test runs, from PyPI.
const OPENAPI_VALIDATOR: (&str, &str) = ("openapi-spec-validator", "0.9.0");

#[derive(Parser)]
#[command(name = "cargo xtask", about = "forgesync developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run every service and the vendor simulators in one process, against Postgres and NATS.
    Up {
        /// Extra arguments for `forgesync-local up`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run the workspace's tests with `cargo nextest run --workspace`, against Postgres and NATS.
    Test {
        /// Extra arguments for `cargo nextest run` (filters, `--no-fail-fast`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run a benchmark (release build) against Postgres and NATS; it prints its figures beside
    /// the ceilings measured in the same run.
    Bench {
        /// Which benchmark.
        target: BenchTarget,
    },
    /// Apply the database migrations to `DATABASE_URL` (or to a throwaway Postgres).
    Migrate,
    /// Re-seal every connection secret in `DATABASE_URL` under the newest key of
    /// `FORGESYNC_SECRET_KEY` (run it after adding a key everywhere, before dropping the old one).
    Reseal {
        /// Extra arguments for `forgesync-admin reseal` (`--batch N`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Print the erasure-completeness scan of a workspace in `DATABASE_URL` / `NATS_URL` (what of
    /// its connections' content remains, per table, stream and subject); exits non-zero when
    /// anything remains.
    ErasureScan {
        /// Arguments for `forgesync-local erasure-scan` (the workspace id, `--nats-prefix P`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Regenerate a vendor's pruned contract under `schemas/` from its published schema.
    Schema {
        /// Which vendor's contract.
        vendor: Vendor,
        /// The raw schema: a file path or an http(s) URL (fetched with curl). Defaults to the
        /// shared vendor copy for `github`, `gitlab` and `outline`, and to `npm pack` of the pinned package version for
        /// `github-webhooks` (whose FILE or URL may be that package's `.tgz` or its `schema.json`).
        #[arg(long, value_name = "FILE|URL")]
        from: Option<String>,
    },
    /// Lint helm/forgesync strictly with Helm, render it, validate every manifest with
    /// kubernetes-validate, and check what the chart promises (see xtask/src/chart.rs).
    Chart,
    /// Provision Postgres and NATS, then run any command with DATABASE_URL and NATS_URL set.
    #[command(hide = true)]
    Services {
        /// Servers with production durability, as `bench` runs them (e.g. to run another
        /// commit's bench binary beside this one's).
        #[arg(long)]
        durable: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<OsString>,
    },
}

/// Benchmarks `forgesync-bench` runs.
#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchTarget {
    /// INITIAL sync against the GitHub simulator, beside raw Postgres upserts of the same rows.
    GithubSync,
    /// Signed webhooks into ingress, beside raw Postgres inserts and raw JetStream publishes.
    Ingress,
    /// A connection's erasure, beside raw DELETEs and raw JetStream deletes by sequence.
    Eraser,
    /// INITIAL sync against the GitLab simulator, beside raw Postgres upserts of the same rows.
    GitlabSync,
    /// Slack deliveries into ingress applied by slack-ingest, beside raw row-locked writes.
    SlackIngest,
    /// An Outline RECONCILIATION and Outline deliveries applied by outline-sync, beside raw
    /// batched upserts and raw row-locked writes.
    OutlineSync,
}

impl BenchTarget {
    fn as_arg(self) -> &'static str {
        match self {
            BenchTarget::GithubSync => "github-sync",
            BenchTarget::Ingress => "ingress",
            BenchTarget::Eraser => "eraser",
            BenchTarget::GitlabSync => "gitlab-sync",
            BenchTarget::SlackIngest => "slack-ingest",
            BenchTarget::OutlineSync => "outline-sync",
        }
    }
}

/// Vendors whose contract `cargo xtask schema` can refresh.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Vendor {
    /// GitHub's GraphQL schema, pruned to our query documents: `schemas/github.graphql`.
    Github,
    /// GitHub's webhook payload schemas (`@octokit/webhooks-schemas` on npm), pruned to the
    /// payloads the simulator sends: `schemas/github-webhooks.json`.
    GithubWebhooks,
    /// GitLab's GraphQL schema with `schemas/gitlab-supplement.graphql` merged, pruned to our
    /// query documents: `schemas/gitlab.graphql`.
    Gitlab,
    /// Outline's OpenAPI document with `schemas/outline-supplement.yaml` merged, pruned to the
    /// calls outline-client makes and normalised for progenitor: `schemas/outline.json`.
    Outline,
}

fn main() {
    let code = match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => match err.downcast_ref::<signals::Interrupted>() {
            Some(signals::Interrupted(signal)) => 128 + signal,
            None => {
                eprintln!("xtask: error: {err:#}");
                1
            }
        },
    };
    // Every server was stopped when `run` returned and dropped its stack.
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    signals::install()?;
    let layout = Layout::discover()?;
    match cli.task {
        Task::Schema { vendor, from } => {
            match vendor {
                Vendor::Github => schema::refresh(&layout, schema::github_paths, from.as_deref())?,
                Vendor::Gitlab => schema::refresh(&layout, schema::gitlab_paths, from.as_deref())?,
                Vendor::GithubWebhooks => webhook_schema::refresh(&layout, from.as_deref())?,
                Vendor::Outline => outline_schema::refresh(&layout, from.as_deref())?,
            }
            Ok(0)
        }
        Task::Chart => {
            chart::run(&layout)?;
            Ok(0)
        }
        Task::Test { args } => {
            let runner = nextest::ensure(&cargo_program(), &layout.bin_cache())?;
            let stack = Stack::provision(
                &layout,
                Needs {
                    postgres: true,
                    nats: true,
                    nats_users: false,
                    durable: false,
                },
            )?;
            let mut cmd = cargo(&layout);
            cmd.args(["nextest", "run", "--workspace"]).args(args);
            runner.apply(&mut cmd);
            provide_openapi_validator(&layout, &mut cmd);
            process::run_foreground(stack.apply(&mut cmd))
        }
        Task::Bench { target } => {
            // Build before provisioning: a long or failing build then holds no server.
            process::run_checked(cargo(&layout).args([
                "build",
                "--release",
                "--workspace",
                "--bins",
            ]))?;
            let bin = layout.release_bin(BENCH_BIN);
            anyhow::ensure!(
                bin.is_file(),
                "{} is missing after the build",
                bin.display()
            );
            let stack = Stack::provision(
                &layout,
                Needs {
                    postgres: true,
                    nats: true,
                    nats_users: false,
                    durable: true,
                },
            )?;
            let mut cmd = Command::new(bin);
            cmd.arg(target.as_arg());
            process::run_foreground(stack.apply(&mut cmd))
        }
        Task::Migrate => {
            // Build before provisioning: a long or failing build then holds no server.
            let bin = build_bin(&layout, ADMIN_BIN)?;
            let stack = Stack::provision(
                &layout,
                Needs {
                    postgres: true,
                    nats: false,
                    nats_users: false,
                    durable: false,
                },
            )?;
            if stack.throwaway_postgres {
                eprintln!(
                    "xtask: note: the throwaway Postgres is discarded on exit; set DATABASE_URL to keep the result"
                );
            }
            let mut cmd = Command::new(bin);
            cmd.arg("migrate");
            process::run_foreground(stack.apply(&mut cmd))
        }
        Task::Reseal { args } => {
            // The operator's own database and keys: never a throwaway server.
            anyhow::ensure!(
                std::env::var_os("DATABASE_URL").is_some(),
                "DATABASE_URL is not set: reseal works on the database whose secrets it re-seals"
            );
            anyhow::ensure!(
                std::env::var_os("FORGESYNC_SECRET_KEY").is_some(),
                "FORGESYNC_SECRET_KEY is not set: give the keyring the services use"
            );
            let bin = build_bin(&layout, ADMIN_BIN)?;
            let mut cmd = Command::new(bin);
            cmd.arg("reseal").args(args);
            process::run_foreground(&mut cmd)
        }
        Task::ErasureScan { args } => {
            // The operator's own data: never a throwaway server.
            for var in ["DATABASE_URL", "NATS_URL"] {
                anyhow::ensure!(
                    std::env::var_os(var).is_some(),
                    "{var} is not set: the scan reads the deployment it checks"
                );
            }
            let bin = build_bin(&layout, LOCAL_BIN)?;
            let mut cmd = Command::new(bin);
            cmd.arg("erasure-scan").args(args);
            process::run_foreground(&mut cmd)
        }
        Task::Up { args } => {
            let bin = build_bin(&layout, LOCAL_BIN)?;
            let stack = Stack::provision(
                &layout,
                Needs {
                    postgres: true,
                    nats: true,
                    // The local stack exercises the permissions production has.
                    nats_users: true,
                    durable: false,
                },
            )?;
            eprintln!(
                "xtask: starting {LOCAL_BIN} up; Ctrl-C stops it and every server xtask started"
            );
            let mut cmd = Command::new(bin);
            cmd.arg("up").args(args);
            process::run_foreground(stack.apply(&mut cmd))
        }
        Task::Services { durable, command } => {
            let stack = Stack::provision(
                &layout,
                Needs {
                    postgres: true,
                    nats: true,
                    nats_users: false,
                    durable,
                },
            )?;
            let (program, args) = command.split_first().expect("clap requires a command");
            let mut cmd = Command::new(program);
            cmd.args(args);
            process::run_foreground(stack.apply(&mut cmd))
        }
    }
}

/// The cargo that runs us.
fn cargo_program() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The cargo that runs us, in the workspace root.
fn cargo(layout: &Layout) -> Command {
    let mut cmd = Command::new(cargo_program());
    cmd.current_dir(&layout.workspace_root);
    cmd
}

/// Builds every binary of the workspace and returns the path of `name`.
///
/// Always `--workspace`: building one package alone resolves features differently and would
/// rebuild half the dependency graph a second time in the same target dir.
fn build_bin(layout: &Layout, name: &str) -> anyhow::Result<std::path::PathBuf> {
    process::run_checked(cargo(layout).args(["build", "--workspace", "--bins"]))?;
    let bin = layout.debug_bin(name);
    anyhow::ensure!(
        bin.is_file(),
        "{} is missing after the build; the {name} binary is not in the workspace",
        bin.display()
    );
    Ok(bin)
}

/// Installs the OpenAPI validator (once, into the binaries cache) and names its directory to the
/// tests in `FORGESYNC_TEST_OPENAPI_VALIDATOR`, unless that already names one. Without it only
/// the contract test fails, saying why, so the other tests still run.
fn provide_openapi_validator(layout: &Layout, cmd: &mut Command) {
    if std::env::var_os("FORGESYNC_TEST_OPENAPI_VALIDATOR").is_some_and(|v| !v.is_empty()) {
        return;
    }
    let (package, version) = OPENAPI_VALIDATOR;
    match pypi::ensure_tool(
        &layout.bin_cache(),
        package,
        version,
        "set FORGESYNC_TEST_OPENAPI_VALIDATOR to a directory holding it",
    ) {
        Ok(dir) => {
            cmd.env("FORGESYNC_TEST_OPENAPI_VALIDATOR", dir);
        }
        Err(err) => eprintln!(
            "xtask: no {package} for control-api's OpenAPI contract test ({err:#}); it will fail"
        ),
    }
}
