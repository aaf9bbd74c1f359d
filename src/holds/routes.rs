//! Checkout holds: the "Hold for checkout" buttons of /products, the checkout page (/checkout)
//! with each hold's time left, its Release and Place order buttons, and the API.

use std::collections::HashMap;

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::HoldError;
use super::model::{HoldLength, HoldRequest, HoldState, HoldView, ListedHold};
use super::service;
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::SessionUser;
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::catalog::routes::{OrderRefused, render_refused_hold};
use crate::idempotency::{self, IdempotencyError, IdempotencyKey, KeyHeader};
use crate::orders::OrderError;
use crate::orders::service::OrderView;
use crate::wire::answers::{Declared, documented_answers};
use crate::wire::error::AsProblem;

#[derive(utoipa::OpenApi)]
#[openapi(paths(hold_json, holds_json, release_json, order_json))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/checkout", web::get().to(checkout_page))
        .route("/checkout/holds", web::post().to(hold_form))
        .route("/checkout/holds/{id}/release", web::post().to(release_form))
        .route("/checkout/holds/{id}/order", web::post().to(order_form))
        .route("/static/checkout.js", web::get().to(checkout_script))
        .service(
            web::resource("/api/v1/holds").route(web::get().to(holds_json)).route(web::post().to(hold_json)),
        )
        .route("/api/v1/holds/{id}", web::delete().to(release_json))
        .route("/api/v1/holds/{id}/order", web::post().to(order_json));
}

async fn hold(
    state: &AppState,
    user: &SessionUser,
    request: HoldRequest,
    key: Option<IdempotencyKey>,
) -> Result<HoldView, HoldError> {
    let user_id = user.id;
    let once = key.map(|key| key.bind(user_id, &request.describe()));
    let limits = state.config.hold_limits();
    state
        .off_executor
        .with_pool(move |pool| service::hold(pool, user_id, &request, &limits, once.as_ref()))
        .await
}

async fn release(state: &AppState, user: &SessionUser, hold_id: i64) -> Result<HoldView, HoldError> {
    let user_id = user.id;
    state.off_executor.with_conn(move |conn| service::release(conn, user_id, hold_id)).await
}

async fn order(
    state: &AppState,
    user: &SessionUser,
    hold_id: i64,
    key: Option<IdempotencyKey>,
) -> Result<OrderView, HoldError> {
    let user_id = user.id;
    let once = key.map(|key| key.bind(user_id, &format!("order from hold {hold_id}")));
    let max_per_minute = state.config.max_orders_per_minute;
    state
        .off_executor
        .with_pool(move |pool| {
            service::order_from_hold(pool, user_id, hold_id, once.as_ref(), max_per_minute)
        })
        .await
}

async fn mine(state: &AppState, user: &SessionUser) -> Result<Vec<ListedHold>, HoldError> {
    let user_id = user.id;
    state.off_executor.with_conn(move |conn| service::mine(conn, user_id)).await
}

// ---- the pages ----------------------------------------------------------------------------

/// The catalog's form names its quantity fields `qty_{product_id}`; its "Hold for checkout"
/// buttons send `hold={product_id}`. An empty quantity is a quantity not chosen.
fn hold_from_form(
    fields: &HashMap<String, String>,
    longest: std::time::Duration,
) -> Result<HoldRequest, HoldError> {
    let product_id = fields
        .get("hold")
        .and_then(|id| id.trim().parse::<i64>().ok())
        .ok_or(HoldError::InvalidProductId(0))?;
    let typed = fields.get(&format!("qty_{product_id}")).map_or("", |q| q.trim());
    let quantity = if typed.is_empty() {
        0
    } else {
        typed.parse::<i64>().map_err(|_| HoldError::Quantity {
            product_id,
            error: crate::catalog::quantity::QuantityError::NotANumber(typed.chars().take(20).collect()),
        })?
    };
    HoldRequest::parse(product_id, quantity, HoldLength::full(longest))
}

/// The catalog's "Hold for checkout": on to /checkout with the new hold, or — the shop refused
/// (none left to hold, a hold of the product already, a quantity out of range) — the catalog
/// again, with the quantities as typed and the reason next to the product.
async fn hold_form(
    user: SessionUser,
    ctx: PageContext,
    CsrfForm(fields): CsrfForm<HashMap<String, String>>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let held = async {
        let request = hold_from_form(&fields, state.config.hold_length)?;
        let key = IdempotencyKey::from_form(fields.get(idempotency::FORM_FIELD).map(String::as_str))?;
        hold(&state, &user, request, key).await
    };
    match held.await {
        Ok(hold) => Ok(see_other(&format!("/checkout?held={}", hold.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let problem = refused.problem();
            let mut typed = fields;
            typed.retain(|name, _| name.starts_with("qty_"));
            let refused = OrderRefused {
                typed,
                product_id: refused.product_id(),
                message: problem.message_in(ctx.lang),
                status: problem.status,
            };
            render_refused_hold(&state, ctx.shown_as("/products".into()), refused).await
        }
        Err(other) => Err(other.into()),
    }
}

#[derive(Template)]
#[template(path = "holds/checkout.html")]
struct CheckoutPage {
    ctx: PageContext,
    holds: Vec<ListedHold>,
    /// What just happened, from the redirect's query.
    done: Option<Done>,
    /// A Release or Place order the shop refused: the hold it was about and why.
    refused: Option<(i64, String)>,
}

enum Done {
    Held(i64),
    Released(i64),
}

impl CheckoutPage {
    fn live(&self) -> Vec<&ListedHold> {
        self.holds.iter().filter(|h| h.state() == HoldState::Live).collect()
    }

    fn ended(&self) -> Vec<&ListedHold> {
        self.holds.iter().filter(|h| h.state() != HoldState::Live).collect()
    }

    fn refused_for(&self, id: &i64) -> bool {
        self.refused.as_ref().is_some_and(|(hold, _)| hold == id)
    }

    /// The sentence just done, for the hold it names, if it is still listed.
    fn done_text(&self) -> Option<String> {
        let (key, id) = match self.done.as_ref()? {
            Done::Held(id) => ("checkout.held", *id),
            Done::Released(id) => ("checkout.released", *id),
        };
        let hold = self.holds.iter().find(|h| h.hold.id == id)?;
        Some(self.ctx.lang.t_with(
            key,
            &[
                ("quantity", hold.hold.quantity.to_string()),
                ("name", hold.name.clone()),
                ("until", crate::wire::utc::text(&hold.hold.expires_at)),
            ],
        ))
    }

    /// "9:41": minutes and seconds left, as the page is made (the script counts down from it).
    fn left(&self, hold: &ListedHold) -> String {
        let seconds = hold.view().seconds_left;
        format!("{}:{:02}", seconds / 60, seconds % 60)
    }

    fn total(&self, hold: &ListedHold) -> String {
        self.ctx.lang.price(hold.price_cents * i64::from(hold.hold.quantity))
    }

    /// An ended hold that ran out (not released, not ordered): the one a person may want again.
    fn expired(&self, hold: &ListedHold) -> bool {
        hold.state() == HoldState::Expired
    }

    fn state_text(&self, hold: &ListedHold) -> std::borrow::Cow<'static, str> {
        self.ctx.lang.t(match hold.state() {
            HoldState::Live => "checkout.state.live",
            HoldState::Expired => "checkout.state.expired",
            HoldState::Released => "checkout.state.released",
            HoldState::Used => "checkout.state.used",
        })
    }
}

#[derive(Deserialize)]
struct DoneQuery {
    held: Option<i64>,
    released: Option<i64>,
}

async fn render_checkout(
    state: &AppState,
    user: &SessionUser,
    ctx: PageContext,
    done: Option<Done>,
    refused: Option<(i64, String, StatusCode)>,
) -> actix_web::Result<HttpResponse> {
    let holds = mine(state, user).await?;
    let status = refused.as_ref().map_or(StatusCode::OK, |(_, _, status)| *status);
    let mut page =
        html(&CheckoutPage { ctx, holds, done, refused: refused.map(|(id, message, _)| (id, message)) })?;
    *page.status_mut() = status;
    Ok(page)
}

async fn checkout_page(
    user: SessionUser,
    ctx: PageContext,
    query: web::Query<DoneQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let done = match (query.held, query.released) {
        (Some(id), _) => Some(Done::Held(id)),
        (None, Some(id)) => Some(Done::Released(id)),
        (None, None) => None,
    };
    render_checkout(&state, &user, ctx, done, None).await
}

/// A refusal of the checkout page's own buttons, answered on the page: the holds as they are
/// now, the sentence next to the hold. Anything else is a page of its own.
async fn answer_in_place(
    state: &AppState,
    user: &SessionUser,
    ctx: PageContext,
    hold_id: i64,
    refused: HoldError,
) -> actix_web::Result<HttpResponse> {
    if !refused.is_answered_in_place() {
        return Err(refused.into());
    }
    let problem = refused.problem();
    let message = problem.message_in(ctx.lang);
    let mut page = render_checkout(
        state,
        user,
        ctx.shown_as("/checkout".into()),
        None,
        Some((hold_id, message, problem.status)),
    )
    .await?;
    // Too many orders a minute: the page says when, and so does the header.
    if let Some(secs) = problem.retry_after {
        page.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    Ok(page)
}

async fn release_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    match release(&state, &user, id).await {
        Ok(_) => Ok(see_other(&format!("/checkout?released={id}"))),
        Err(refused) => answer_in_place(&state, &user, ctx, id, refused).await,
    }
}

#[derive(Deserialize)]
struct OrderForm {
    idempotency_key: Option<String>,
}

async fn order_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<OrderForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    let placed = async {
        let key = IdempotencyKey::from_form(form.idempotency_key.as_deref())?;
        order(&state, &user, id, key).await
    };
    match placed.await {
        Ok(order) => Ok(see_other(&format!("/orders?placed={}", order.id))),
        Err(refused) => answer_in_place(&state, &user, ctx, id, refused).await,
    }
}

/// The countdown of the checkout page (the page works without it: it says until when).
async fn checkout_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../../static/checkout.js"))
}

// ---- the API ------------------------------------------------------------------------------

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct HoldBody {
    #[schema(minimum = 1)]
    product_id: i64,
    #[schema(minimum = 1, maximum = 1000)]
    quantity: i64,
    /// A shorter hold than `HOLD_MINUTES` (at least 1 s); more is cut to `HOLD_MINUTES`.
    #[schema(value_type = Option<u64>, minimum = 1)]
    seconds: Option<serde_json::Value>,
}

documented_answers!(HoldAnswers:
    HoldError[InsufficientStock, AlreadyHeld, OverLimit, TooFast, Cooldown, Quantity, InvalidProductId, UnknownProduct, Seconds],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Hold a quantity of a product for checkout, for `HOLD_MINUTES` (or `seconds`, if fewer):
/// decided under the product's stock row lock, against what is on hand less every live hold.
/// With an `Idempotency-Key`, a resend (within 24 h) gets the first answer and holds nothing more.
#[utoipa::path(post, path = "/api/v1/holds", tag = "holds", request_body = HoldBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, e.g. a UUID; per user, kept 24 h")),
    responses((status = 201, description = "Held until expires_at (the database's clock)", body = HoldView), HoldAnswers))]
async fn hold_json(
    user: SessionUser,
    KeyHeader(key): KeyHeader,
    body: web::Json<HoldBody>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, HoldError> {
    let length = HoldLength::parse(body.seconds.as_ref(), state.config.hold_length)?;
    let request = HoldRequest::parse(body.product_id, body.quantity, length)?;
    let held = hold(&state, &user, request, key).await?;
    Ok(HttpResponse::Created().json(held))
}

/// The caller's latest holds: the live ones first (soonest to expire first), then the ended ones.
#[utoipa::path(get, path = "/api/v1/holds", tag = "holds", responses((status = 200, body = Vec<HoldView>)))]
async fn holds_json(user: SessionUser, state: web::Data<AppState>) -> Result<HttpResponse, HoldError> {
    let user_id = user.id;
    Ok(HttpResponse::Ok()
        .json(state.off_executor.with_conn(move |conn| service::my_views(conn, user_id)).await?))
}

documented_answers!(ReleaseAnswers: HoldError[NotFound, Expired, Released, Used]);

/// Release one of the caller's live holds: its units are available again at once.
#[utoipa::path(delete, path = "/api/v1/holds/{id}", tag = "holds",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Hold id")),
    responses((status = 204, description = "Released"), ReleaseAnswers))]
async fn release_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, HoldError> {
    release(&state, &user, path.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

documented_answers!(OrderFromHoldAnswers:
    HoldError[NotFound, Expired, Released, Used],
    OrderError[InsufficientStock, TooFast],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Place the order a live hold is for: its quantity is taken from stock and the hold marked used,
/// in one transaction under the stock row's lock. With an `Idempotency-Key`, a resend gets the
/// first answer back.
#[utoipa::path(post, path = "/api/v1/holds/{id}/order", tag = "holds",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Hold id"),
           ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, e.g. a UUID; per user, kept 24 h")),
    responses((status = 201, description = "Placed", body = OrderView), OrderFromHoldAnswers))]
async fn order_json(
    user: SessionUser,
    KeyHeader(key): KeyHeader,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, HoldError> {
    let placed = order(&state, &user, path.into_inner(), key).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/v1/orders/{}", placed.id)))
        .json(placed))
}
