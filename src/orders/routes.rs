//! Ordering: the form on /products, the list on /orders, and the API.

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::OrderError;
use super::coalesce::{self, Coalescer};
use super::model::Cart;
use super::service::{self, OrderView, Placed};
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::SessionUser;
use crate::auth::csrf::CsrfForm;
use crate::catalog::routes::{OrderRefused, render_products_page};
use crate::idempotency::IdempotencyError;
use crate::idempotency::{self, IdempotencyKey, KeyHeader};
use crate::locking::retry::RetryPolicy;
use crate::wire::answers::{Declared, documented_answers};
use crate::wire::error::AsProblem;

#[derive(utoipa::OpenApi)]
#[openapi(paths(order_json, orders_json))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/orders").route(web::get().to(orders_page)).route(web::post().to(order_form)))
        .service(
            web::resource("/api/v1/orders")
                .route(web::get().to(orders_json))
                .route(web::post().to(order_json)),
        );
}

/// Places the request's order by one of two paths that run the same steps:
/// - the coalescer ([`coalesce::order`]) for every order with `ORDER_COALESCING` on (the
///   default): an order alone at its product, and a cart of several lines, run
///   [`service::place_order`] too; single-line orders that queued for one product are placed
///   together, in arrival order, keyed or not (`batch::order_batch`).
/// - [`service::place_order`], the lesson, for every order with `ORDER_COALESCING=false`.
async fn place(
    state: &AppState,
    coalescer: &std::sync::Arc<Coalescer>,
    user: &SessionUser,
    cart: Cart,
    key: Option<IdempotencyKey>,
) -> Result<Placed, OrderError> {
    let user_id = user.id;
    let once = key.map(|key| key.bind(user_id, &cart.describe()));
    if state.config.coalesce_orders {
        return coalesce::order(coalescer, state.config.lock_wait, user_id, cart, once).await;
    }
    let max_per_minute = state.config.max_orders_per_minute;
    state
        .off_executor
        .with_pool(move |pool| {
            service::place_order(pool, &RetryPolicy::default(), user_id, &cart, once.as_ref(), max_per_minute)
        })
        .await
}

async fn mine(state: &AppState, user: &SessionUser) -> Result<Vec<OrderView>, OrderError> {
    let user_id = user.id;
    state.off_executor.with_conn(move |conn| service::my_orders(conn, user_id)).await
}

/// The catalog form names its quantity fields `qty_{product_id}`; empty and zero fields are
/// products the customer did not choose. (Its hidden idempotency key is read apart.)
fn cart_from_form(fields: &HashMap<String, String>) -> Result<Cart, OrderError> {
    let mut lines = Vec::new();
    for (name, value) in fields {
        let Some(id) = name.strip_prefix("qty_") else { continue };
        let value = value.trim();
        if value.is_empty() || value == "0" {
            continue;
        }
        let product_id = id.parse::<i64>().map_err(|_| OrderError::InvalidProductId(0))?;
        let quantity = value.parse::<i64>().map_err(|_| OrderError::Quantity {
            product_id,
            error: crate::inventory::model::QuantityError::NotANumber(value.chars().take(20).collect()),
        })?;
        lines.push((product_id, quantity));
    }
    Cart::parse(&lines)
}

/// The catalog's order form. An order the shop refuses (not enough stock, a quantity out of
/// range, nothing chosen) answers in place: the catalog again, with the quantities as typed,
/// the message next to the product, the stock as it is now. Anything else (a busy server, an
/// ended session) is a page of its own.
async fn order_form(
    user: SessionUser,
    ctx: PageContext,
    CsrfForm(fields): CsrfForm<HashMap<String, String>>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> actix_web::Result<HttpResponse> {
    let placed = async {
        let cart = cart_from_form(&fields)?;
        let key = IdempotencyKey::from_form(fields.get(idempotency::FORM_FIELD).map(String::as_str))?;
        place(&state, &coalescer, &user, cart, key).await
    };
    match placed.await {
        Ok(placed) => Ok(see_other(&format!("/orders?placed={}", placed.order.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let problem = refused.problem();
            let product_id = problem.details.get("product_id").and_then(serde_json::Value::as_i64);
            let mut typed = fields;
            typed.retain(|name, _| name.starts_with("qty_"));
            let order = OrderRefused {
                typed,
                product_id,
                message: problem.message_in(ctx.lang),
                status: problem.status,
            };
            let mut page =
                render_products_page(&state, ctx.shown_as("/products".into()), None, Some(order)).await?;
            // Too many orders a minute: the page says when, and so does the header.
            if let Some(secs) = problem.retry_after {
                page.headers_mut().insert(actix_web::http::header::RETRY_AFTER, secs.into());
            }
            Ok(page)
        }
        Err(other) => Err(other.into()),
    }
}

#[derive(Template)]
#[template(path = "orders/mine.html")]
struct OrdersPage {
    ctx: PageContext,
    orders: Vec<OrderView>,
    placed: Option<i64>,
}

#[derive(Deserialize)]
struct PlacedQuery {
    placed: Option<i64>,
}

async fn orders_page(
    user: SessionUser,
    ctx: PageContext,
    query: web::Query<PlacedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let orders = mine(&state, &user).await?;
    Ok(html(&OrdersPage { ctx, orders, placed: query.placed })?)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct OrderRequest {
    #[schema(min_items = 1, max_items = 100)]
    lines: Vec<LineRequest>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct LineRequest {
    #[schema(minimum = 1)]
    product_id: i64,
    #[schema(minimum = 1, maximum = 1000)]
    quantity: i64,
}

documented_answers!(OrderAnswers:
    OrderError[InsufficientStock, Quantity, InvalidProductId, UnknownProduct, Empty, TooManyLines, TooFast],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Order several products at once: all lines or nothing. Duplicate lines are merged. With an
/// `Idempotency-Key`, a resend of the same order (within 24 h) gets the first answer back and
/// takes nothing from stock.
#[utoipa::path(post, path = "/api/v1/orders", tag = "orders", request_body = OrderRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, e.g. a UUID; per user, kept 24 h")),
    responses((status = 201, description = "Placed; X-Transaction-Attempts says how often the transaction ran", body = OrderView), OrderAnswers))]
async fn order_json(
    user: SessionUser,
    KeyHeader(key): KeyHeader,
    body: web::Json<OrderRequest>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> Result<HttpResponse, OrderError> {
    let requested: Vec<(i64, i64)> = body.lines.iter().map(|l| (l.product_id, l.quantity)).collect();
    let placed = place(&state, &coalescer, &user, Cart::parse(&requested)?, key).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/v1/orders/{}", placed.order.id)))
        // How many times the transaction ran: more than 1 means a deadlock or lock wait timeout
        // was absorbed by a retry.
        .insert_header(("X-Transaction-Attempts", placed.attempts.to_string()))
        .json(placed.order))
}

/// The caller's orders, newest first.
#[utoipa::path(get, path = "/api/v1/orders", tag = "orders", responses((status = 200, body = Vec<OrderView>)))]
async fn orders_json(user: SessionUser, state: web::Data<AppState>) -> Result<HttpResponse, OrderError> {
    Ok(HttpResponse::Ok().json(mine(&state, &user).await?))
}
