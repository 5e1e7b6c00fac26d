//! GitHub-specific rules.
//!
//! - [`checks`]: the check runs behind a head's check state (list completeness, storage caps).

pub mod checks;
