//! The OpenAPI document, generated from the handlers' annotations and served at `/openapi.json`.

use axum::Json;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::routes::{connections, dead_messages, endpoints, erasures, github, jobs, workspaces};

#[derive(OpenApi)]
#[openapi(
    info(title = "forgesync control-api", description = "Operators' API of forgesync."),
    paths(
        workspaces::create, workspaces::list, workspaces::get, workspaces::purge,
        connections::create, connections::list, connections::get, connections::audit,
        connections::transition,
        jobs::create, jobs::list, jobs::cancel,
        dead_messages::list, dead_messages::replay,
        endpoints::create, endpoints::rotate_secret, endpoints::replay,
        github::repositories, github::issues,
        erasures::list, erasures::scan,
    ),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
