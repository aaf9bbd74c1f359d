//! The OpenAPI document of the JSON API, served at `/api/v1/openapi.json`.
//!
//! Each feature describes its endpoints next to their handlers (`#[utoipa::path]` in its
//! `routes.rs`, collected in that module's `Api`); this module only merges them. The lab's demo
//! endpoints are in it only where they are served: the `lab` feature built in and `DEMO_MODE=1`.

use std::sync::LazyLock;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::middleware::Next;
use actix_web::web;
use serde_json::{Value, json};
use utoipa::OpenApi;

use crate::app::AppState;
use crate::auth::AuthError;
use crate::wire::answers::{self, Answer, answers_of};
use crate::wire::error::{RequestError, respond};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "haita",
        description = "Reservations and inventory on MySQL/MariaDB, with every locking pattern visible. \
            Log in with POST /api/v1/session; the session cookie it sets authenticates the rest. \
            Errors are {\"error\": code, \"message\": sentence}, sometimes with more fields."
    ),
    components(schemas(crate::wire::error::ErrorBody)),
    tags(
        (name = "session", description = "Log in and out"),
        (name = "bookings", description = "Resources and reservations: check-then-insert under a date-keyed named lock"),
        (name = "products", description = "The catalog; optimistic edits with ETag / If-Match"),
        (name = "orders", description = "Orders: SELECT … FOR UPDATE in product-id order, retried on deadlock"),
        (name = "holds", description = "Checkout holds: a quantity kept aside until it expires by the database's clock, decided under the stock row lock"),
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

/// The document this app serves.
pub fn served(demo_mode: bool) -> &'static str {
    if crate::LAB && demo_mode { &JSON_WITH_DEMO } else { &JSON }
}

/// The operations that need no session (and the demo's, `lab::demo::routes::PUBLIC`); every other
/// one answers 401 without a live session.
/// The fuzzer (`tests/fuzz`) sends every operation without a session and holds the server to it.
const PUBLIC: &[(&str, &str)] = &[
    ("post", "/api/v1/session"),
    ("get", "/api/v1/session"),
    ("delete", "/api/v1/session"),
    ("get", "/api/v1/products"),
    ("get", "/api/v1/products/{id}"),
    ("get", "/api/v1/resources"),
    ("get", "/api/v1/resources/{id}/availability"),
];

#[cfg(feature = "lab")]
const DEMO_PUBLIC: &[(&str, &str)] = crate::lab::demo::routes::PUBLIC;
#[cfg(not(feature = "lab"))]
const DEMO_PUBLIC: &[(&str, &str)] = &[];

/// The operations of the document (with the demo's or not) that need no session.
fn public_operations(with_demo: bool) -> Vec<(&'static str, &'static str)> {
    let demo = if with_demo { DEMO_PUBLIC } else { &[] };
    PUBLIC.iter().chain(demo).copied().collect()
}

const WRITES: &[&str] = &["post", "put", "patch", "delete"];

fn render(with_demo: bool) -> String {
    let mut document = Document::openapi();
    for part in [
        crate::account::routes::Api::openapi(),
        crate::bookings::routes::Api::openapi(),
        crate::catalog::routes::Api::openapi(),
        crate::orders::routes::Api::openapi(),
        crate::holds::routes::Api::openapi(),
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
    let mut document = serde_json::to_value(&document).expect("an OpenAPI document is JSON");
    complete(&mut document, &public_operations(with_demo));
    serde_json::to_string_pretty(&document).expect("a JSON value renders")
}

/// Adds what every operation of a kind answers, so that each handler's annotation lists only
/// its own answers: 401 where a session is needed, 403 on the admin's operations, 415 on every
/// write (see `auth::csrf::json_only_api_writes`), 400, 408 and 413 for a body, 400 for a query, 404
/// for a path parameter, and 503 with `Retry-After` everywhere (busy, the database down, or the
/// instance shutting down).
/// Each is taken from its error's declaration (`crate::wire::answers`), and each response's
/// description lists every code it can carry.
fn complete(document: &mut Value, public: &[(&str, &str)]) {
    document["components"]["securitySchemes"]["session"] = json!({
        "type": "apiKey", "in": "cookie", "name": "haita_session",
        "description": "Set by POST /api/v1/session; checked against the session's row on every request."
    });
    let Some(paths) = document["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, operation) in item.iter_mut() {
            let parameters: Vec<String> = operation["parameters"]
                .as_array()
                .map(|all| all.iter().filter_map(|p| p["in"].as_str().map(String::from)).collect())
                .unwrap_or_default();
            let has_body = operation.get("requestBody").is_some();
            let is_admin = operation["tags"].as_array().is_some_and(|tags| tags.contains(&json!("admin")));
            let mut shared = vec![Answer::BUSY, Answer::UNAVAILABLE, Answer::DRAINING];
            let public = public.contains(&(method.as_str(), path.as_str()));
            if !public {
                shared.extend(answers_of::<AuthError>(&["NotLoggedIn"]));
            }
            if is_admin {
                shared.extend(answers_of::<AuthError>(&["Forbidden"]));
            }
            if WRITES.contains(&method.as_str()) {
                shared.extend(answers_of::<RequestError>(&["UnsupportedMediaType"]));
            }
            if has_body {
                shared.extend(answers_of::<RequestError>(&["MalformedBody", "TooLarge", "SlowBody"]));
            }
            if parameters.iter().any(|p| p == "query") {
                shared.extend(answers_of::<RequestError>(&["BadQuery"]));
            }
            if parameters.iter().any(|p| p == "path") || path.contains('{') {
                shared.extend(answers_of::<RequestError>(&["BadPath"]));
            }
            let responses = &mut operation["responses"];
            for (status, response) in answers::responses(&shared) {
                let response = serde_json::to_value(response).expect("a response is JSON");
                match responses.get_mut(&status) {
                    None => responses[&status] = response,
                    Some(listed) => {
                        let given = listed["description"].as_str().unwrap_or_default().to_string();
                        let mut codes: Vec<&str> = given.split(", ").filter(|c| !c.is_empty()).collect();
                        for code in response["description"].as_str().unwrap_or_default().split(", ") {
                            if !codes.contains(&code) {
                                codes.push(code);
                            }
                        }
                        listed["description"] = json!(codes.join(", "));
                    }
                }
            }
            responses["503"]["headers"]["Retry-After"] =
                json!({"description": "Seconds to wait", "schema": {"type": "integer"}});
            if !public {
                operation["security"] = json!([{"session": []}]);
            }
        }
    }
}

/// The API's paths and the methods each one accepts, read from the served document: what
/// [`methods_allowed`] answers 405 from.
struct Routes(Vec<(Vec<Option<String>>, Vec<Method>)>);

static ROUTES: LazyLock<Routes> = LazyLock::new(|| Routes::from_document(&JSON));
static ROUTES_WITH_DEMO: LazyLock<Routes> = LazyLock::new(|| Routes::from_document(&JSON_WITH_DEMO));

impl Routes {
    fn from_document(json: &str) -> Self {
        let document: Value = serde_json::from_str(json).unwrap_or_default();
        let routes = document["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(template, item)| {
                let segments =
                    template.split('/').map(|s| (!s.starts_with('{')).then(|| s.to_string())).collect();
                let methods = item
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(m, _)| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok())
                    .collect();
                (segments, methods)
            })
            .collect();
        Self(routes)
    }

    /// The methods of the path template `path` fits, or `None` when it fits none. Where it fits
    /// several (`release-expired` also fits `{key}`), the one with the most literal segments
    /// wins: a literal path is an operation of its own, not a value of another's parameter.
    fn allowed(&self, path: &str) -> Option<&[Method]> {
        let segments: Vec<&str> = path.split('/').collect();
        self.0
            .iter()
            .filter(|(template, _)| {
                template.len() == segments.len()
                    && template.iter().zip(&segments).all(|(t, s)| t.as_deref().is_none_or(|t| t == *s))
            })
            .max_by_key(|(template, _)| template.iter().flatten().count())
            .map(|(_, methods)| methods.as_slice())
    }
}

/// Middleware: a request for an API path with a method that path does not have is answered
/// 405 with `Allow`, before any other check (a PUT on a GET-only path is not a content-type
/// problem, and a TRACE is not a missing page).
pub async fn methods_allowed(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody + 'static>>, actix_web::Error> {
    let demo = req.app_data::<web::Data<AppState>>().is_some_and(|s| s.config.demo_mode);
    let routes = if crate::LAB && demo { &ROUTES_WITH_DEMO } else { &ROUTES };
    if req.path().starts_with("/api/")
        && let Some(allowed) = routes.allowed(req.path())
        && !allowed.contains(req.method())
    {
        let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
        let mut response = respond(&RequestError::MethodNotAllowed(names.join(", ")));
        response.headers_mut().insert(
            header::ALLOW,
            header::HeaderValue::from_str(&names.join(", ")).expect("method names are header-safe"),
        );
        return Ok(req.into_response(response).map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operations(document: &Value) -> Vec<(String, String, &Value)> {
        let mut all = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                all.push((method.clone(), path.clone(), operation));
            }
        }
        all
    }

    #[test]
    fn every_operation_lists_the_answers_every_request_can_get() {
        let document: Value = serde_json::from_str(served(true)).expect("the document is JSON");
        let public_ones = public_operations(crate::LAB);
        for (method, path, operation) in operations(&document) {
            let has = |status: &str| operation["responses"].get(status).is_some();
            assert!(has("503"), "{method} {path}");
            let public = public_ones.contains(&(method.as_str(), path.as_str()));
            assert_eq!(operation.get("security").is_some(), !public, "{method} {path}");
            assert!(public || has("401"), "{method} {path}");
            assert_eq!(has("415"), WRITES.contains(&method.as_str()), "{method} {path}");
        }
        for (method, path) in public_ones {
            assert!(document["paths"][path][method].is_object(), "{method} {path} is not in the document");
        }
    }

    /// Error responses come from the error declarations (`documented_answers!`), never from a
    /// hand-written tuple: each one's description is exactly its list of codes, which is what
    /// the fuzzer holds every answer's `error` to.
    #[test]
    fn every_error_response_lists_its_codes_and_nothing_else() {
        let document: Value = serde_json::from_str(served(true)).expect("the document is JSON");
        let is_code =
            |code: &str| !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        for (method, path, operation) in operations(&document) {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                if status.as_str() < "400" {
                    continue;
                }
                let description = response["description"].as_str().unwrap_or_default();
                assert!(
                    description.split(", ").all(is_code),
                    "{method} {path} {status}: {description:?} is not a list of codes"
                );
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
    }

    /// The bounds the document gives the fuzzer (and clients) are the ones the code checks.
    #[test]
    fn the_documents_bounds_are_the_codes() {
        let document: Value = serde_json::from_str(served(true)).expect("the document is JSON");
        let field =
            |schema: &str, name: &str| document["components"]["schemas"][schema]["properties"][name].clone();
        let parameter = |method: &str, path: &str, name: &str| {
            document["paths"][path][method]["parameters"]
                .as_array()
                .and_then(|all| all.iter().find(|p| p["name"] == name))
                .map(|p| p["schema"].clone())
                .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"))
        };
        use crate::{admin, audit, bookings, catalog, inventory, orders, resources};
        let checks = [
            (
                field("LineRequest", "quantity")["maximum"].clone(),
                json!(inventory::model::Quantity::MAX_PER_LINE),
            ),
            (
                field("ReceiptRequest", "quantity")["maximum"].clone(),
                json!(inventory::model::Quantity::MAX_PER_RECEIPT),
            ),
            (field("OrderRequest", "lines")["maxItems"].clone(), json!(orders::model::Cart::MAX_LINES)),
            (field("ProductPatch", "name")["maxLength"].clone(), json!(catalog::edit::NAME_MAX_CHARS)),
            (
                field("ProductPatch", "description")["maxLength"].clone(),
                json!(catalog::edit::DESCRIPTION_MAX_CHARS),
            ),
            (field("ProductPatch", "price_cents")["maximum"].clone(), json!(catalog::edit::PRICE_MAX_CENTS)),
            (field("ResourcePatch", "name")["maxLength"].clone(), json!(resources::model::NAME_MAX)),
            (
                field("ResourcePatch", "description")["maxLength"].clone(),
                json!(resources::model::DESCRIPTION_MAX),
            ),
            (field("ResourcePatch", "capacity")["maximum"].clone(), json!(resources::model::CAPACITY_MAX)),
            (
                parameter("get", "/api/v1/resources/{id}/availability", "days")["maximum"].clone(),
                json!(bookings::service::MAX_AVAILABILITY_DAYS),
            ),
            (parameter("get", "/api/v1/admin/audit", "limit")["maximum"].clone(), json!(audit::MAX_PAGE)),
            (
                parameter("delete", "/api/v1/admin/edit-locks/{key}", "reason")["maxLength"].clone(),
                json!(admin::REASON_MAX),
            ),
            (
                parameter("delete", "/api/v1/admin/named-locks/{name}", "reason")["maxLength"].clone(),
                json!(admin::REASON_MAX),
            ),
        ];
        for (i, (documented, checked)) in checks.into_iter().enumerate() {
            assert_eq!(documented, checked, "bound #{i}");
        }
        #[cfg(feature = "lab")]
        {
            use crate::lab::demo as race;
            assert_eq!(field("RaceRequest", "clients")["maximum"], json!(race::MAX_CLIENTS));
            assert_eq!(field("RaceRequest", "attempts")["maximum"], json!(race::MAX_ATTEMPTS));
            assert_eq!(field("RaceRequest", "pause_ms")["maximum"], json!(race::MAX_PAUSE_MS));
            assert!(field("DemoBookRequest", "strategy").is_object(), "the demo's request has its own name");
        }
        assert!(field("BookRequest", "strategy").is_null(), "the product's BookRequest is not the demo's");
    }

    #[test]
    fn a_known_path_names_its_methods_and_an_unknown_one_none() {
        let routes = Routes::from_document(&JSON);
        let methods = routes.allowed("/api/v1/resources/7/edit-lock").expect("a known path");
        for method in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
            assert!(methods.contains(&method), "{method}");
        }
        assert_eq!(routes.allowed("/api/v1/reservations"), Some(&[Method::GET, Method::POST][..]));
        assert_eq!(routes.allowed("/api/v1/admin/edit-locks/release-expired"), Some(&[Method::POST][..]));
        assert_eq!(routes.allowed("/api/v1/admin/edit-locks/resource:7"), Some(&[Method::DELETE][..]));
        assert_eq!(routes.allowed("/api/v1/nothing"), None);
        assert_eq!(routes.allowed("/api/v1/resources/7/edit-lock/more"), None);
    }
}
