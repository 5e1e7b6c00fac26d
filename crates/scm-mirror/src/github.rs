//! What forgesync holds at GitHub for a connection.

use store::registration::ResourceKind;

/// A GitHub App installation a connection is bound to: uninstalled by provider repair (as the
/// App, `DELETE /app/installations/{id}`) once the connection is disconnected; a suspended
/// holder keeps it. Kept with the installation id as target and vendor id, and the App's id as
/// its proof (only that App can read or remove it).
pub const APP_INSTALLATION: ResourceKind = ResourceKind::new("github_app_installation");
