//! The GitLab jobs on `sync-engine`: INITIAL, RECONCILIATION and BACKFILL over the connection's monitored projects.
