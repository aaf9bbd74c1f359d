//! The OpenAPI document of the JSON API, served at `/api/v1/openapi.json`.
//!
//! Each feature describes its endpoints next to their handlers (`#[utoipa::path]` in its
//! `routes.rs`, collected in that module's `Api`); this module only merges them. The lab's demo
//! endpoints are in it only where they are served: the `lab` feature built in and `DEMO_MODE=1`.

use std::sync::LazyLock;

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "haita",
        description = "Reservations and inventory on MySQL/MariaDB, with every locking pattern visible. \
            Log in with POST /api/v1/session; the session cookie it sets authenticates the rest. \
            Errors are {\"error\": code, \"message\": sentence}, sometimes with more fields."
    ),
    components(schemas(crate::web::error::ErrorBody)),
    tags(
        (name = "session", description = "Log in and out"),
        (name = "bookings", description = "Resources and reservations: check-then-insert under a date-keyed named lock"),
        (name = "products", description = "The catalog; optimistic edits with ETag / If-Match"),
        (name = "orders", description = "Orders: SELECT … FOR UPDATE in product-id order, retried on deadlock"),
        (name = "stock", description = "Receipts: increase-or-insert under a per-product named lock"),
        (name = "resources", description = "Resources, edited under pessimistic edit locks"),
        (name = "admin", description = "Lock administration and the audit log (admin role)")
    )
)]
struct Document;

/// The merged document without the demo's endpoints, rendered once.
pub static JSON: LazyLock<String> = LazyLock::new(|| render(false));

/// The merged document with the demo's endpoints (the lab built in and `DEMO_MODE=1`).
pub static JSON_WITH_DEMO: LazyLock<String> = LazyLock::new(|| render(true));

fn render(with_demo: bool) -> String {
    let mut document = Document::openapi();
    for part in [
        crate::auth::routes::Api::openapi(),
        crate::bookings::routes::Api::openapi(),
        crate::catalog::routes::Api::openapi(),
        crate::orders::routes::Api::openapi(),
        crate::inventory::routes::Api::openapi(),
        crate::resources::routes::Api::openapi(),
        crate::admin::routes::Api::openapi(),
    ] {
        document.merge(part);
    }
    #[cfg(feature = "lab")]
    if with_demo {
        document.merge(crate::lab::demo::routes::Api::openapi());
    }
    #[cfg(not(feature = "lab"))]
    let _ = with_demo;
    document.to_pretty_json().unwrap_or_else(|e| {
        log::error!("rendering the OpenAPI document failed: {e}");
        "{}".into()
    })
}
