//! slack-ingest (work in progress).
