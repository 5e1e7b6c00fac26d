//! cargo-nextest, the test runner `cargo xtask test` drives: the one on `PATH` when there is
//! one, otherwise a pinned version that xtask installs once under the target dir and reuses, so
//! a fresh machine needs no install step of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;

use crate::process;

/// The version installed when none is on `PATH`.
pub const VERSION: &str = "0.9.143";

/// Where the test command finds `cargo-nextest`.
#[derive(Debug, PartialEq, Eq)]
pub enum Runner {
    /// `cargo nextest` already works as the environment stands.
    OnPath,
    /// Our own install: this directory goes first on `PATH`.
    Local(PathBuf),
}

impl Runner {
    /// Puts the runner within reach of `cmd` (a `cargo nextest ...` command).
    pub fn apply<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        if let Runner::Local(bin) = self {
            let mut dirs = vec![bin.clone()];
            if let Some(path) = std::env::var_os("PATH") {
                dirs.extend(std::env::split_paths(&path));
            }
            if let Ok(path) = std::env::join_paths(dirs) {
                cmd.env("PATH", path);
            }
        }
        cmd
    }
}

/// The runner to use: the one on `PATH`, else the local install under `cache` (made now with
/// `cargo install` when missing).
pub fn ensure(cargo: &std::ffi::OsStr, cache: &Path) -> anyhow::Result<Runner> {
    let on_path = Command::new(cargo)
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("could not run cargo")?
        .success();
    if on_path {
        return Ok(Runner::OnPath);
    }
    local(cache, |root| {
        eprintln!(
            "xtask: cargo-nextest is not installed; installing cargo-nextest {VERSION} into {} \
             (once: it compiles for a few minutes, later runs reuse it)",
            root.display()
        );
        let started = Instant::now();
        process::run_checked(
            Command::new(cargo)
                .args(["install", "cargo-nextest", "--locked", "--version", VERSION])
                .arg("--root")
                .arg(root),
        )
        .context("could not install cargo-nextest with cargo install (is crates.io reachable?)")?;
        eprintln!(
            "xtask: installed cargo-nextest {VERSION} in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// The local install under `cache`, made by `install(root)` (which must leave
/// `root/bin/cargo-nextest`) when it is not there yet. A marker written last tells a complete
/// install from an interrupted one.
pub fn local(
    cache: &Path,
    install: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<Runner> {
    let root = cache.join(format!("cargo-nextest-{VERSION}"));
    let bin = root.join("bin");
    let marker = root.join(".xtask-complete");
    if marker.exists() && bin.join("cargo-nextest").is_file() {
        return Ok(Runner::Local(bin));
    }
    if root.exists() {
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("could not remove {}", root.display()))?;
    }
    std::fs::create_dir_all(&root)
        .with_context(|| format!("could not create {}", root.display()))?;
    install(&root)?;
    anyhow::ensure!(
        bin.join("cargo-nextest").is_file(),
        "the install left no {}",
        bin.join("cargo-nextest").display()
    );
    std::fs::write(&marker, b"")?;
    Ok(Runner::Local(bin))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-nextest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn fake_install(calls: &Cell<u32>) -> impl FnOnce(&Path) -> anyhow::Result<()> + '_ {
        move |root: &Path| {
            calls.set(calls.get() + 1);
            std::fs::create_dir_all(root.join("bin"))?;
            std::fs::write(root.join("bin/cargo-nextest"), b"#!/bin/sh\n")?;
            Ok(())
        }
    }

    #[test]
    fn a_missing_runner_is_installed_into_the_cache_and_then_reused() {
        let cache = scratch("reuse");
        let calls = Cell::new(0);
        let first = local(&cache, fake_install(&calls)).unwrap();
        let bin = cache.join(format!("cargo-nextest-{VERSION}")).join("bin");
        assert_eq!(first, Runner::Local(bin.clone()));
        assert_eq!(calls.get(), 1);
        let second = local(&cache, fake_install(&calls)).unwrap();
        assert_eq!(second, Runner::Local(bin));
        assert_eq!(
            calls.get(),
            1,
            "a present install is reused, not made again"
        );
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn an_interrupted_install_is_made_again() {
        let cache = scratch("interrupted");
        let root = cache.join(format!("cargo-nextest-{VERSION}"));
        // The remains of an install that died before its marker.
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/cargo-nextest"), b"half").unwrap();
        let calls = Cell::new(0);
        local(&cache, fake_install(&calls)).unwrap();
        assert_eq!(calls.get(), 1);
        assert!(root.join(".xtask-complete").exists());
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn an_install_that_leaves_no_binary_fails_and_is_not_marked_complete() {
        let cache = scratch("empty");
        let err = local(&cache, |_: &Path| Ok(())).unwrap_err();
        assert!(err.to_string().contains("cargo-nextest"), "{err}");
        assert!(
            !cache
                .join(format!("cargo-nextest-{VERSION}/.xtask-complete"))
                .exists()
        );
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn a_local_runner_goes_first_on_the_path() {
        let mut cmd = Command::new("true");
        Runner::Local(PathBuf::from("/opt/nextest/bin")).apply(&mut cmd);
        let path = cmd
            .get_envs()
            .find(|(k, _)| *k == "PATH")
            .and_then(|(_, v)| v)
            .expect("PATH set");
        let first = std::env::split_paths(path).next().unwrap();
        assert_eq!(first, PathBuf::from("/opt/nextest/bin"));
    }
}
