//! Slack Web API client (work in progress).
