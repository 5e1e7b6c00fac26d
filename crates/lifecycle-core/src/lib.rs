//! The lifecycle rules of the forgesync mirror as pure code: no tokio, no database, no network.
#![forbid(unsafe_code)]

pub mod connection;
pub mod subject;
