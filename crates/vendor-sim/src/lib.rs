//! Simulated vendor APIs (GitHub, GitLab, Slack, Outline) with fault injection, for tests,
//! benchmarks and the local stack.
#![forbid(unsafe_code)]
// GitHub's REST objects have more fields than `serde_json::json!` expands by default.
#![recursion_limit = "256"]

pub mod github;
pub mod gitlab;
pub mod outline;
mod served;
pub mod slack;
