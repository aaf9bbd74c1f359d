//! HTTP for bookings: thin handlers that parse input, run the service off the executor and
//! render HTML or JSON.

use actix_web::http::{StatusCode, header};
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use super::BookingError;
use super::coalesce::Coalescer;
use super::model::{BookingDate, Reservation, parse_id};
use super::service::{self, DayAvailability};
use crate::auth::SessionUser;
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::auth::session::Claimed;
use crate::http::answers::documented_answers;
use crate::http::error::AsProblem;
use crate::http::input::{FIRST_DAY, LAST_DAY, parse_day, quoted};
use crate::idempotency::IdempotencyError;
use crate::idempotency::{IdempotencyKey, KeyHeader};
use crate::resources::Resource;
use crate::web::{AppState, PageContext, html, see_other};

#[derive(utoipa::OpenApi)]
#[openapi(paths(availability_json, book_json, my_reservations_json, cancel_json))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/resources/{id}", web::get().to(resource_page))
        .route("/resources/{id}/bookings", web::post().to(book_form))
        .route("/bookings", web::get().to(my_bookings_page))
        .route("/bookings/{id}/cancel", web::post().to(cancel_form))
        .route("/api/v1/resources/{id}/availability", web::get().to(availability_json))
        .service(
            web::resource("/api/v1/reservations")
                .route(web::get().to(my_reservations_json))
                .route(web::post().to(book_json)),
        )
        .route("/api/v1/reservations/{id}", web::delete().to(cancel_json));
}

/// Books for the request's user, by one of two paths that run the same steps:
/// - [`service::book`], the lesson, for a request with an idempotency key (every form sends
///   one) and for every request with `BOOKING_COALESCING=false`. A keyed request runs on its own
///   under the day's lock, never in a coalesced batch: its stored answer belongs to one
///   transaction of one request.
/// - the coalescer ([`Coalescer::book`], then `service::book_batch`) for the others: the
///   requests of one day booked under one lock, in arrival order.
///
/// The session is checked by the booking itself, in its read of the day, so a booking request
/// makes one hop to the blocking pool, not two.
async fn book(
    state: &AppState,
    coalescer: &std::sync::Arc<Coalescer>,
    claimed: &Claimed,
    resource_id: i64,
    date: BookingDate,
    key: Option<IdempotencyKey>,
) -> Result<Reservation, BookingError> {
    let ticket = claimed.ticket.clone();
    let once =
        key.map(|key| key.bind(ticket.user_id(), &format!("book resource {resource_id} on {}", date.day())));
    let booked = if state.config.coalesce_bookings && once.is_none() {
        let wait = state.config.lock_wait;
        coalescer.book(&state.pool, &state.locks, wait, ticket, resource_id, date).await
    } else {
        let turn = state.turn(state.pool.names().booking(resource_id, date.day())).await?;
        let max_future = state.config.max_future_bookings;
        state
            .with_pool(move |pool| {
                service::book(pool, turn, &ticket, resource_id, date, once.as_ref(), max_future)
            })
            .await
    };
    if let Err(BookingError::SessionEnded) = booked {
        claimed.forget();
    }
    booked
}

// ---- HTML -------------------------------------------------------------------------------

#[derive(Deserialize)]
struct FromQuery {
    from: Option<String>,
    days: Option<u32>,
    /// `saved=1` after the resource's editor saved it (HTML only): a "saved" message.
    saved: Option<String>,
}

impl FromQuery {
    /// The first day shown: `from` if given (any valid date, past included, for browsing),
    /// else today.
    fn start(&self) -> Result<NaiveDate, BookingError> {
        match self.from.as_deref() {
            None | Some("") => Ok(service::today()),
            Some(text) => parse_day(text).ok_or_else(|| BookingError::InvalidDate(quoted(text))),
        }
    }
}

#[derive(Template)]
#[template(path = "bookings/resource.html")]
struct ResourcePage {
    ctx: PageContext,
    resource: Resource,
    days: Vec<DayAvailability>,
    today: NaiveDate,
    /// The last day bookings are open for: later days are shown, not offered.
    last_day: NaiveDate,
    previous: NaiveDate,
    next: NaiveDate,
    saved: bool,
    refused: Option<Refused>,
}

impl ResourcePage {
    /// Whether `day` is the one a booking was just refused for (its row is marked).
    fn refused_on(&self, day: &NaiveDate) -> bool {
        self.refused.as_ref().is_some_and(|r| r.day.as_ref() == Some(day))
    }

    /// Whether some day shown is beyond the booking window: the page then says what the window is.
    fn shows_beyond_window(&self) -> bool {
        self.days.iter().any(|d| d.date > self.last_day)
    }

    /// The day bookings open for `day`: the window's length before it.
    fn opens_on(&self, day: &NaiveDate) -> NaiveDate {
        *day - chrono::Days::new(super::model::HORIZON_DAYS.unsigned_abs())
    }
}

const PAGE_DAYS: u32 = 14;

async fn resource_page(
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<FromQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let from = query.start()?;
    let shown = Shown { from, saved: query.saved.is_some(), refused: None };
    render_resource_page(&state, ctx, path.into_inner(), shown).await
}

/// What the resource page shows besides the days.
struct Shown {
    from: NaiveDate,
    saved: bool,
    refused: Option<Refused>,
}

/// A booking the page's form just sent and the day refused: said next to that day, on the
/// page the customer was on, with the day's places as they are now.
pub struct Refused {
    pub day: Option<NaiveDate>,
    pub message: String,
    status: StatusCode,
}

async fn render_resource_page(
    state: &AppState,
    ctx: PageContext,
    id: i64,
    shown: Shown,
) -> actix_web::Result<HttpResponse> {
    let Shown { from, saved, refused } = shown;
    let viewer = ctx.user.as_ref().map(|u| u.id);
    let (resource, days) =
        state.db(move |conn| service::availability(conn, id, from, PAGE_DAYS, viewer)).await?;
    let step = chrono::Days::new(u64::from(PAGE_DAYS));
    let status = refused.as_ref().map_or(StatusCode::OK, |r| r.status);
    let mut response = html(&ResourcePage {
        ctx,
        resource,
        days,
        today: service::today(),
        last_day: super::model::last_bookable_day(service::today()),
        saved,
        refused,
        // Within chrono's range for any accepted `from`; clamped so the links stay accepted too.
        previous: (from - step).max(FIRST_DAY),
        next: (from + step).min(LAST_DAY),
    })?;
    *response.status_mut() = status;
    Ok(response)
}

#[derive(Deserialize)]
struct BookForm {
    date: String,
    /// Fresh in every rendered form: a double submit or a resend after a lost answer books once.
    idempotency_key: Option<String>,
}

/// The booking form. A booking the day refuses (taken, full, closed, not a bookable date)
/// answers in place: the resource page again, the message next to the day, the places as they
/// are now, with the refusal's status. Anything else (an ended session, a busy server) is a
/// page of its own.
async fn book_form(
    claimed: Claimed,
    req: HttpRequest,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<BookForm>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> actix_web::Result<HttpResponse> {
    let resource_id = path.into_inner();
    let booked = async {
        let date = BookingDate::parse(&form.date, service::today())?;
        let key = IdempotencyKey::from_form(form.idempotency_key.as_deref())?;
        book(&state, &coalescer, &claimed, resource_id, date, key).await
    };
    match booked.await {
        Ok(booked) => Ok(see_other(&format!("/bookings?booked={}", booked.id))),
        Err(refused) if refused.is_answered_in_place() => {
            // The page's context (who is logged in) only now: a booking that goes through costs
            // no session lookup beyond the one `Claimed` already made.
            let ctx = PageContext::extract(&req).await?;
            let problem = refused.problem();
            let day = parse_day(form.date.trim());
            let from =
                day.filter(|day| *day >= service::today()).unwrap_or_else(service::today).min(LAST_DAY);
            let refused = Refused { day, message: problem.message_in(ctx.lang), status: problem.status };
            let ctx = ctx.shown_as(format!("/resources/{resource_id}?from={from}"));
            render_resource_page(
                &state,
                ctx,
                resource_id,
                Shown { from, saved: false, refused: Some(refused) },
            )
            .await
        }
        Err(BookingError::UnknownResource(id)) => Err(BookingError::ResourceNotFound(id).into()),
        Err(other) => Err(other.into()),
    }
}

#[derive(Template)]
#[template(path = "bookings/mine.html")]
struct MyBookingsPage {
    ctx: PageContext,
    bookings: Vec<(Reservation, String)>,
    just_booked: Option<i64>,
    just_cancelled: Option<i64>,
    today: NaiveDate,
}

#[derive(Deserialize)]
struct BookedQuery {
    booked: Option<i64>,
    cancelled: Option<i64>,
}

async fn my_bookings_page(
    user: SessionUser,
    ctx: PageContext,
    query: web::Query<BookedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let bookings = state.db(move |conn| service::my_reservations(conn, user.id)).await?;
    Ok(html(&MyBookingsPage {
        ctx,
        bookings,
        just_booked: query.booked,
        just_cancelled: query.cancelled,
        today: service::today(),
    })?)
}

async fn cancel_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    state.db(move |conn| service::cancel(conn, user.id, id)).await?;
    Ok(see_other(&format!("/bookings?cancelled={id}")))
}

// ---- JSON -------------------------------------------------------------------------------

#[derive(Serialize, utoipa::ToSchema)]
struct AvailabilityBody {
    resource: Resource,
    days: Vec<DayAvailability>,
}

documented_answers!(AvailabilityAnswers: BookingError[ResourceNotFound, InvalidDate, InvalidRange]);

/// Confirmed bookings and free places per day; `mine` marks the caller's own bookings.
#[utoipa::path(get, path = "/api/v1/resources/{id}/availability", tag = "bookings",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("from" = Option<String>, Query, format = Date, description = "First day, YYYY-MM-DD (default today)"),
           ("days" = Option<u32>, Query, minimum = 1, maximum = 62, description = "1 to 62 (default 14)")),
    responses((status = 200, body = AvailabilityBody), AvailabilityAnswers))]
async fn availability_json(
    user: Option<SessionUser>,
    path: web::Path<i64>,
    query: web::Query<FromQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, BookingError> {
    let id = path.into_inner();
    // The API takes an exact date or none; only the page reads an empty date field as "today".
    if query.from.as_deref() == Some("") {
        return Err(BookingError::InvalidDate(quoted("")));
    }
    let from = query.start()?;
    let days = query.days.unwrap_or(PAGE_DAYS);
    let viewer = user.map(|u| u.id);
    let (resource, days) = state.db(move |conn| service::availability(conn, id, from, days, viewer)).await?;
    Ok(HttpResponse::Ok().json(AvailabilityBody { resource, days }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct BookRequest {
    #[schema(minimum = 1)]
    resource_id: i64,
    #[schema(format = Date)]
    date: String,
}

documented_answers!(BookAnswers:
    BookingError[InvalidDate, PastDate, TooFarAhead, InvalidId, UnknownResource, FullyBooked, AlreadyBooked, Closed, Quota],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Book a resource for a day, under the day's named lock. With an `Idempotency-Key`, a resend
/// of the same request (within 24 h) gets the first answer back and books nothing.
#[utoipa::path(post, path = "/api/v1/reservations", tag = "bookings", request_body = BookRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, e.g. a UUID; per user, kept 24 h")),
    responses((status = 201, description = "Booked; Location names it", body = Reservation), BookAnswers))]
async fn book_json(
    claimed: Claimed,
    KeyHeader(key): KeyHeader,
    body: web::Json<BookRequest>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> Result<HttpResponse, BookingError> {
    let resource_id = parse_id(body.resource_id, "resource_id")?;
    let date = BookingDate::parse(&body.date, service::today())?;
    let booked = book(&state, &coalescer, &claimed, resource_id, date, key).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/v1/reservations/{}", booked.id)))
        .json(booked))
}

/// The caller's reservations, newest day first.
#[utoipa::path(get, path = "/api/v1/reservations", tag = "bookings",
    responses((status = 200, body = Vec<Reservation>)))]
async fn my_reservations_json(
    user: SessionUser,
    state: web::Data<AppState>,
) -> Result<HttpResponse, BookingError> {
    let mine = state.db(move |conn| service::my_reservations(conn, user.id)).await?;
    Ok(HttpResponse::Ok().json(mine.into_iter().map(|(r, _)| r).collect::<Vec<_>>()))
}

documented_answers!(CancelAnswers: BookingError[ReservationNotFound, AlreadyCancelled]);

/// Cancel one of the caller's reservations.
#[utoipa::path(delete, path = "/api/v1/reservations/{id}", tag = "bookings",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Reservation id")),
    responses((status = 200, body = Reservation), CancelAnswers))]
async fn cancel_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, BookingError> {
    let id = path.into_inner();
    let cancelled = state.db(move |conn| service::cancel(conn, user.id, id)).await?;
    Ok(HttpResponse::Ok().json(cancelled))
}
