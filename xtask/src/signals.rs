//! Termination signals received by xtask itself.
//!
//! xtask must outlive its child (tests, the local stack) so that it can stop the servers it
//! started afterwards: it catches SIGINT, SIGTERM and SIGHUP instead of dying, and the supervising
//! loops look here to decide what to forward.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

static RECEIVED: AtomicUsize = AtomicUsize::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);

/// Starts catching termination signals. Call once, before spawning anything.
pub fn install() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                LAST.store(signal, Ordering::SeqCst);
                RECEIVED.fetch_add(1, Ordering::SeqCst);
            }
        })?;
    Ok(())
}

/// How many termination signals arrived so far.
pub fn received() -> usize {
    RECEIVED.load(Ordering::SeqCst)
}

/// The most recent termination signal, if any.
pub fn last() -> Option<i32> {
    match LAST.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Fails when a termination signal arrived, so that provisioning stops early.
pub fn check() -> anyhow::Result<()> {
    match last() {
        Some(signal) => Err(Interrupted(signal).into()),
        None => Ok(()),
    }
}

/// xtask was asked to stop; `main` turns this into the conventional 128 + signal exit code.
#[derive(Debug)]
pub struct Interrupted(pub i32);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by signal {}", self.0)
    }
}

impl std::error::Error for Interrupted {}
