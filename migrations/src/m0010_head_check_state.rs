//! The head's check state a GitHub read records beside its runs (pending while a suite awaits a
//! maintainer's approval, whatever GitHub's rollup says).

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str =
    "ALTER TABLE pull_request ADD COLUMN IF NOT EXISTS head_check_state text";
