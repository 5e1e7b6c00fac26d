//! Outline API client (generated from `schemas/outline.json`).
