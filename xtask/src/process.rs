//! Child processes: the foreground one (tests, the local stack) and background servers.
//!
//! The foreground child shares xtask's process group, so a terminal's Ctrl-C reaches it directly.
//! Servers get their own process group: Ctrl-C must not stop Postgres or NATS while the child is
//! still shutting down against them; xtask stops them itself once the child has exited.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::signals;

const POLL: Duration = Duration::from_millis(50);

/// Runs `cmd` to completion and returns its exit code (128 + signal when a signal ended it).
///
/// SIGTERM or SIGHUP sent to xtask is forwarded as SIGTERM. SIGINT is not: it comes from the
/// terminal, which already delivered it to the whole foreground process group, and a second
/// SIGINT makes some tools (nextest) abandon their graceful shutdown.
pub fn run_foreground(cmd: &mut Command) -> anyhow::Result<i32> {
    // Once asked to stop, start nothing new.
    signals::check()?;
    let program = describe(cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start {program}"))?;
    let pid = pid_of(&child);
    let mut seen = signals::received();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(exit_code(status));
        }
        let now = signals::received();
        if now > seen {
            seen = now;
            if signals::last() != Some(signal_hook::consts::SIGINT) {
                let _ = kill(pid, Signal::SIGTERM);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Like [`run_foreground`], but a non-zero exit is an error.
pub fn run_checked(cmd: &mut Command) -> anyhow::Result<()> {
    let program = describe(cmd);
    match run_foreground(cmd)? {
        0 => Ok(()),
        code => {
            signals::check()?;
            anyhow::bail!("{program} failed with exit code {code}")
        }
    }
}

/// A background server xtask started; stopped (and waited for) when dropped.
pub struct Server {
    name: &'static str,
    child: Child,
    stop_signal: Signal,
    grace: Duration,
    log: PathBuf,
}

impl Server {
    /// Starts `cmd` in its own process group with stdout and stderr appended to `log`.
    pub fn spawn(
        name: &'static str,
        cmd: &mut Command,
        log: &Path,
        stop_signal: Signal,
        grace: Duration,
    ) -> anyhow::Result<Self> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("could not open {}", log.display()))?;
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("could not start {name} ({})", describe(cmd)))?;
        Ok(Self {
            name,
            child,
            stop_signal,
            grace,
            log: log.to_path_buf(),
        })
    }

    /// Fails, quoting the end of the server's log, when the server has already exited.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!(
                "{} exited during startup ({status}); end of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log, 20)
            ),
        }
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    fn stop(&mut self) {
        let pid = pid_of(&self.child);
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = kill(pid, self.stop_signal);
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(POLL);
            }
            if self.child.try_wait().ok().flatten().is_none() {
                eprintln!(
                    "xtask: {} did not stop within {:?}; killing it",
                    self.name, self.grace
                );
            }
        }
        // The whole group goes, so that no helper process (a Postgres backend) outlives its
        // leader; the group is ours alone because the server was started as its leader.
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = self.child.wait();
        eprintln!("xtask: stopped {}", self.name);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"))
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The program and its arguments, for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `lines` lines of a log file, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
