//! Simulated vendor APIs with fault injection, for tests, benchmarks and the local stack.
#![forbid(unsafe_code)]

pub mod github;
