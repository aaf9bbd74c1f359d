//! The catalog page (with the order form), the optimistic edit screen with its conflict screen,
//! and the product API with ETag / If-Match.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::edit::{self, Current, FieldErrors, FieldMerge, ProductChanges};
use super::model::{Product, format_cents};
use super::service::{self, ProductWithStock};
use super::{CatalogError, etag};
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::csrf::CsrfForm;
use crate::auth::{AuthError, Role, SessionUser};
use crate::wire::answers::documented_answers;
use crate::wire::error::FieldError;
use crate::wire::error::{BODY_LIMIT, json_config, respond};

#[derive(utoipa::OpenApi)]
#[openapi(paths(products_json, product_json, patch_json))]
pub struct Api;

/// The most bytes one description can take on the wire: a character is at most 4 bytes of
/// UTF-8, 12 once percent-encoded in a form or escaped as a surrogate pair in JSON.
const DESCRIPTION_MAX_BYTES: usize = edit::DESCRIPTION_MAX_CHARS * 12;

/// The edit form and the conflict screen post the description twice (the base it was edited
/// from, and mine or the merge); the app's usual 16 KB would refuse a long description the
/// editor itself accepts.
const EDIT_FORM_LIMIT: usize = 2 * DESCRIPTION_MAX_BYTES + BODY_LIMIT;

/// A PATCH carries the description once.
const PATCH_LIMIT: usize = DESCRIPTION_MAX_BYTES + BODY_LIMIT;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/products", web::get().to(products_page))
        .route("/static/order_total.js", web::get().to(order_total_script))
        .service(
            web::resource("/products/{id}/edit")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::get().to(edit_page))
                .route(web::post().to(edit_form)),
        )
        .route("/api/v1/products", web::get().to(products_json))
        .service(
            web::resource("/api/v1/products/{id}")
                .app_data(json_config(PATCH_LIMIT))
                .route(web::get().to(product_json))
                .route(web::patch().to(patch_json)),
        );
}

async fn load(state: &AppState) -> Result<Vec<ProductWithStock>, CatalogError> {
    state.off_executor.with_conn(move |conn| Ok(service::list_with_stock(conn)?)).await
}

async fn current(state: &AppState, id: i64) -> Result<Current, CatalogError> {
    state.off_executor.with_conn(move |conn| edit::find(conn, id)).await
}

#[derive(Template)]
#[template(path = "catalog/products.html")]
struct ProductsPage {
    ctx: PageContext,
    products: Vec<ProductWithStock>,
    max_quantity: u32,
    saved: Option<i64>,
    order: Option<OrderRefused>,
    /// `order` is about a checkout hold the page's form asked for, not an order.
    hold_refused: bool,
}

/// An order the page's form just sent and the shop refused: the quantities as typed, and why,
/// next to the product it is about.
pub struct OrderRefused {
    /// `qty_{id}` → what was typed, as the form sent it.
    pub typed: std::collections::HashMap<String, String>,
    pub product_id: Option<i64>,
    pub message: String,
    pub status: StatusCode,
}

impl ProductsPage {
    /// The quantity field's value: what the customer typed when their order was refused, else 0.
    fn typed(&self, product_id: &i64) -> &str {
        self.order
            .as_ref()
            .and_then(|o| o.typed.get(&format!("qty_{product_id}")))
            .map_or("0", |typed| typed.trim())
    }

    fn refused_for(&self, product_id: &i64) -> bool {
        self.order.as_ref().is_some_and(|o| o.product_id.as_ref() == Some(product_id))
    }

    /// The product just saved, by name: "Kyusu teapot (POT-KYUSU)", or its id if it is gone.
    fn saved_product(&self) -> Option<String> {
        let id = self.saved?;
        Some(
            self.products
                .iter()
                .find(|p| p.product.id == id)
                .map_or_else(|| format!("#{id}"), |p| format!("{} ({})", p.product.name, p.product.sku)),
        )
    }
}

#[derive(Deserialize)]
struct SavedQuery {
    saved: Option<i64>,
}

async fn products_page(
    ctx: PageContext,
    query: web::Query<SavedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    render_products_page(&state, ctx, query.saved, None).await
}

/// The catalog with its order form; with `order`, answering a refused order in place (its
/// status, the stock as it is now, the quantities as typed).
pub async fn render_products_page(
    state: &AppState,
    ctx: PageContext,
    saved: Option<i64>,
    order: Option<OrderRefused>,
) -> actix_web::Result<HttpResponse> {
    render(state, ctx, saved, order, false).await
}

/// The catalog answering, in place, a checkout hold its form asked for and the shop refused.
pub async fn render_refused_hold(
    state: &AppState,
    ctx: PageContext,
    refused: OrderRefused,
) -> actix_web::Result<HttpResponse> {
    render(state, ctx, None, Some(refused), true).await
}

async fn render(
    state: &AppState,
    ctx: PageContext,
    saved: Option<i64>,
    order: Option<OrderRefused>,
    hold_refused: bool,
) -> actix_web::Result<HttpResponse> {
    let products = load(state).await?;
    let status = order.as_ref().map_or(StatusCode::OK, |o| o.status);
    let mut response = html(&ProductsPage {
        ctx,
        products,
        max_quantity: super::quantity::Quantity::MAX_PER_LINE,
        saved,
        order,
        hold_refused,
    })?;
    *response.status_mut() = status;
    Ok(response)
}

/// The order form's running total (a guide; the order's answer is what counts).
async fn order_total_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../../static/order_total.js"))
}

// ---- the edit screen ----------------------------------------------------------------------

/// What the edit form shows: the values in the inputs, the version and values they were read
/// at (hidden), and any validation messages.
struct EditValues {
    name: String,
    description: String,
    price: String,
    version: i32,
    base: [String; 3],
}

impl EditValues {
    fn of(product: &Product) -> Self {
        let values = [product.name.clone(), product.description.clone(), format_cents(product.price_cents)];
        Self {
            name: values[0].clone(),
            description: values[1].clone(),
            price: values[2].clone(),
            version: product.version,
            base: values,
        }
    }
}

#[derive(Template)]
#[template(path = "catalog/edit.html")]
struct EditPage {
    ctx: PageContext,
    product: Product,
    form: EditValues,
    errors: FieldErrors,
}

impl EditPage {
    fn error(&self, field: &str) -> Option<String> {
        self.errors.iter().find(|e| e.field == field).map(|e| e.message_in(self.ctx.lang))
    }

    fn marks(&self, field: &str) -> String {
        let in_error: Vec<&str> =
            ["name", "description", "price"].into_iter().filter(|f| self.error(f).is_some()).collect();
        crate::wire::input::field_marks(field, &in_error)
    }
}

#[derive(Template)]
#[template(path = "catalog/conflict.html")]
struct ConflictPage {
    ctx: PageContext,
    current: Current,
    merges: Vec<FieldMerge>,
}

impl ConflictPage {
    /// Who saved first, as the user should read it: the same account in another tab is "you".
    fn saver(&self) -> String {
        let me = self.ctx.user.as_ref().map(|u| u.id);
        match (&self.current.saved_by, self.current.product.updated_by) {
            (_, Some(id)) if Some(id) == me => self.ctx.lang.t("conflict.you").into_owned(),
            (Some(name), _) => name.clone(),
            (None, _) => self.ctx.lang.t("conflict.someone").into_owned(),
        }
    }
}

async fn edit_page(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let current = current(&state, path.into_inner()).await?;
    Ok(html(&EditPage {
        ctx,
        form: EditValues::of(&current.product),
        product: current.product,
        errors: Vec::new(),
    })?)
}

/// The edit form and the conflict screen post the same fields. On the conflict screen a field
/// that collided comes as `choose_{field}` (`mine` or `theirs`) plus the typed text in
/// `mine_{field}`; `base_{field}` then holds the values saved now (what "theirs" means).
#[derive(Deserialize)]
struct EditForm {
    version: String,
    name: Option<String>,
    description: Option<String>,
    price: Option<String>,
    base_name: Option<String>,
    base_description: Option<String>,
    base_price: Option<String>,
    choose_name: Option<String>,
    choose_description: Option<String>,
    choose_price: Option<String>,
    mine_name: Option<String>,
    mine_description: Option<String>,
    mine_price: Option<String>,
}

impl EditForm {
    fn pick(
        value: Option<String>,
        choice: Option<String>,
        mine: Option<String>,
        base: &Option<String>,
    ) -> String {
        match choice.as_deref() {
            Some("theirs") => base.clone(),
            Some(_) => mine,
            None => value,
        }
        .unwrap_or_default()
    }

    /// What the user wants saved: typed values, with the conflict screen's choices applied.
    fn resolve(self) -> EditValues {
        let base = [
            self.base_name.clone().unwrap_or_default(),
            self.base_description.clone().unwrap_or_default(),
            self.base_price.clone().unwrap_or_default(),
        ];
        EditValues {
            name: Self::pick(self.name, self.choose_name, self.mine_name, &self.base_name),
            description: Self::pick(
                self.description,
                self.choose_description,
                self.mine_description,
                &self.base_description,
            ),
            price: Self::pick(self.price, self.choose_price, self.mine_price, &self.base_price),
            version: self.version.trim().parse().unwrap_or(0),
            base,
        }
    }
}

fn validate(form: &EditValues) -> Result<ProductChanges, FieldErrors> {
    let price = edit::parse_price(&form.price);
    let parsed = ProductChanges::parse(&form.name, &form.description, *price.as_ref().unwrap_or(&0));
    match (price, parsed) {
        (Ok(_), Ok(changes)) => Ok(changes),
        (price, parsed) => {
            let mut errors: FieldErrors = parsed.err().unwrap_or_default();
            errors.retain(|e| e.field != "price_cents" || price.is_ok());
            if let Err(why) = price {
                errors.push(why);
            }
            // The form's field is `price`, the API's `price_cents`.
            Err(errors
                .into_iter()
                .map(|e| FieldError { field: if e.field == "price_cents" { "price" } else { e.field }, ..e })
                .collect())
        }
    }
}

async fn edit_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<EditForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let id = path.into_inner();
    let form = form.resolve();
    let changes = match validate(&form) {
        Ok(changes) => changes,
        Err(errors) => {
            // Show the form again with everything the user typed and what is wrong with it.
            let product = current(&state, id).await?.product;
            let mut page = html(&EditPage { ctx, product, form, errors })?;
            *page.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            return Ok(page);
        }
    };
    let (version, actor, to_save) = (form.version, user.id, changes.clone());
    match state.off_executor.with_conn(move |conn| edit::save(conn, id, version, &to_save, actor)).await {
        Ok(saved) => Ok(see_other(&format!("/products?saved={}", saved.id))),
        Err(CatalogError::Stale(current)) => {
            // Not an error page: the user's text, the text they started from and the text saved
            // now, side by side, with a choice wherever both sides changed the same field.
            let merges = edit::three_way(&form.base, &changes, &current.product);
            let mut page = html(&ConflictPage { ctx, current: *current, merges })?;
            *page.status_mut() = StatusCode::CONFLICT;
            Ok(page)
        }
        Err(other) => Err(other.into()),
    }
}

// ---- the API ---------------------------------------------------------------------------------

/// Every product with its stock.
#[utoipa::path(get, path = "/api/v1/products", tag = "products", responses((status = 200, body = Vec<ProductWithStock>)))]
async fn products_json(state: web::Data<AppState>) -> Result<HttpResponse, CatalogError> {
    Ok(HttpResponse::Ok().json(load(&state).await?))
}

documented_answers!(ProductAnswers: CatalogError[NotFound]);

/// One product, with its version as a strong ETag.
#[utoipa::path(get, path = "/api/v1/products/{id}", tag = "products",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Product id")),
    responses((status = 200, description = "ETag: \"v{version}\"", body = Product), ProductAnswers))]
async fn product_json(
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, CatalogError> {
    let current = current(&state, path.into_inner()).await?;
    Ok(HttpResponse::Ok().insert_header((header::ETAG, etag(current.product.version))).json(current.product))
}

/// The version named by `If-Match`: exactly one strong ETag of ours. A weak or foreign tag can
/// never match a strong comparison, which reads as "stale" (version 0 matches no row).
fn if_match(req: &HttpRequest) -> Result<i32, CatalogError> {
    let value = req
        .headers()
        .get(header::IF_MATCH)
        .ok_or(CatalogError::PreconditionRequired)?
        .to_str()
        .map_err(|_| CatalogError::BadIfMatch("not readable text"))?
        .trim();
    if value == "*" {
        return Err(CatalogError::BadIfMatch("* would overwrite whatever is saved; send the ETag you read"));
    }
    if value.contains(',') {
        return Err(CatalogError::BadIfMatch("send exactly one ETag"));
    }
    Ok(value.strip_prefix("\"v").and_then(|v| v.strip_suffix('"')).and_then(|v| v.parse().ok()).unwrap_or(0))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ProductPatch {
    #[schema(min_length = 1, max_length = 200)]
    name: Option<String>,
    #[schema(max_length = 10000)]
    description: Option<String>,
    #[schema(minimum = 0, maximum = 100000000)]
    price_cents: Option<i64>,
}

documented_answers!(PatchAnswers:
    CatalogError[NotFound, BadIfMatch, Stale, InvalidFields, PreconditionRequired],
    AuthError[Forbidden]);

/// Change a product's name, description or price — only if it is still at the version named by
/// `If-Match` (optimistic locking). Absent fields keep their values.
#[utoipa::path(patch, path = "/api/v1/products/{id}", tag = "products", request_body = ProductPatch,
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Product id"),
           ("If-Match" = String, Header, description = "The ETag read, e.g. \"v3\"")),
    responses((status = 200, description = "Saved; ETag is the new version", body = Product), PatchAnswers))]
async fn patch_json(
    user: SessionUser,
    req: HttpRequest,
    path: web::Path<i64>,
    body: web::Json<ProductPatch>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let id = path.into_inner();
    let read_version = if_match(&req)?;
    let (body, actor) = (body.into_inner(), user.id);
    let patch = edit::Patch { name: body.name, description: body.description, price_cents: body.price_cents };
    let saved = state
        .off_executor
        .with_conn(move |conn| edit::save_patch(conn, id, read_version, &patch, actor))
        .await;
    match saved {
        Ok(product) => {
            Ok(HttpResponse::Ok().insert_header((header::ETAG, etag(product.version))).json(product))
        }
        Err(CatalogError::Stale(current)) => {
            let tag = etag(current.product.version);
            let mut response = respond(&CatalogError::Stale(current));
            if let Ok(value) = header::HeaderValue::from_str(&tag) {
                response.headers_mut().insert(header::ETAG, value);
            }
            Ok(response)
        }
        Err(other) => Err(other.into()),
    }
}
