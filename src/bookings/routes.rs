//! HTTP for bookings: thin handlers that parse input, run the service off the executor and
//! render HTML or JSON.

use actix_web::http::{StatusCode, header};
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use super::BookingError;
use super::coalesce::Coalescer;
use super::model::{BookingDate, Reservation, Stay, parse_id};
use super::service::{self, DayAvailability};
use super::stays;
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
        .route("/resources/{id}/stays", web::post().to(book_stay_form))
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

/// Books for the request's user, by one of three paths that run the same steps:
/// - [`service::book`], the lesson, for a day with an idempotency key (every form sends one)
///   and for every day with `BOOKING_COALESCING=false`. A keyed request runs on its own under
///   the day's lock, never in a coalesced batch: its stored answer belongs to one transaction
///   of one request.
/// - the coalescer ([`Coalescer::book`], then `service::book_batch`) for the other days: the
///   requests of one day booked under one lock, in arrival order.
/// - [`stays::book_stay`] for a stay of several nights, one at a time under the day lock of
///   each night, taken in ascending date order. (A stay of one night is a booking of its day.)
///
/// The session is checked by the booking itself, in its read of the day, so a booking request
/// makes one hop to the blocking pool, not two.
async fn book(
    state: &AppState,
    coalescer: &std::sync::Arc<Coalescer>,
    claimed: &Claimed,
    resource_id: i64,
    stay: Stay,
    key: Option<IdempotencyKey>,
) -> Result<Reservation, BookingError> {
    let ticket = claimed.ticket.clone();
    let once = key.map(|key| key.bind(ticket.user_id(), &stay.described(resource_id)));
    let max_future = state.config.max_future_bookings;
    let booked = match stay.single_day() {
        Some(date) if state.config.coalesce_bookings && once.is_none() => {
            let wait = state.config.lock_wait;
            coalescer.book(&state.pool, &state.locks, wait, ticket, resource_id, date).await
        }
        Some(date) => {
            let turn = state.turn(state.pool.names().booking(resource_id, date.day())).await?;
            state
                .with_pool(move |pool| {
                    service::book(pool, turn, &ticket, resource_id, date, once.as_ref(), max_future)
                })
                .await
        }
        None => {
            let nights = stays::night_locks(state.pool.names(), resource_id, stay);
            let turns = state.locks.turns_in_order(nights, state.config.lock_wait).await?;
            state
                .with_pool(move |pool| {
                    stays::book_stay(pool, turns, &ticket, resource_id, stay, once.as_ref(), max_future)
                })
                .await
        }
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
    /// A stay picked in the page's form (HTML only): its nights and price are shown.
    check_in: Option<String>,
    check_out: Option<String>,
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

    /// The stay picked, as typed, when the stay form was sent.
    fn picked(&self) -> Option<Picked> {
        (self.check_in.is_some() || self.check_out.is_some()).then(|| Picked {
            check_in: self.check_in.clone().unwrap_or_default(),
            check_out: self.check_out.clone().unwrap_or_default(),
        })
    }
}

/// The check-in and check-out days of the page's stay form, as typed: shown back in the form,
/// and read as a [`Stay`].
#[derive(Clone, Debug, Default, Deserialize)]
struct Picked {
    check_in: String,
    check_out: String,
}

impl Picked {
    fn stay(&self) -> Result<Stay, BookingError> {
        Stay::parse(&self.check_in, &self.check_out, service::today())
    }

    /// This page again, showing the same stay (the login and language links come back to it).
    fn page(&self, resource_id: i64) -> String {
        let query =
            serde_urlencoded::to_string([("check_in", &self.check_in), ("check_out", &self.check_out)])
                .unwrap_or_default();
        format!("/resources/{resource_id}?{query}")
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
    /// What the stay form holds: empty, or the stay picked.
    picked: Picked,
    /// The stay picked, with its nights and price, or why those dates are no stay.
    preview: Option<Result<Preview, String>>,
}

impl ResourcePage {
    /// Whether `day` is the one a booking was just refused for (its row is marked).
    fn refused_on(&self, day: &NaiveDate) -> bool {
        self.refused.as_ref().is_some_and(|r| r.night.as_ref() == Some(day))
    }

    /// Whether `day` is a night of the stay shown.
    fn in_stay(&self, day: &NaiveDate) -> bool {
        matches!(&self.preview, Some(Ok(p)) if p.stay.check_in() <= *day && *day < p.stay.check_out())
    }

    /// Whether some day shown is beyond the booking window: the page then says what the window is.
    fn shows_beyond_window(&self) -> bool {
        self.days.iter().any(|d| d.date > self.last_day)
    }

    /// The day bookings open for `day`: the window's length before it.
    fn opens_on(&self, day: &NaiveDate) -> NaiveDate {
        *day - chrono::Days::new(super::model::HORIZON_DAYS.unsigned_abs())
    }

    /// The login page, coming back to this page and the stay it shows.
    fn log_in_to_book(&self) -> String {
        let next = self.picked.page(self.resource.id);
        format!("/login?{}", serde_urlencoded::to_string([("next", next)]).unwrap_or_default())
    }

    /// The earliest check-out day the form offers: the morning after tonight.
    fn first_check_out(&self) -> NaiveDate {
        self.today + chrono::Days::new(1)
    }

    /// The latest check-out day the form offers: the morning after the last bookable night.
    fn last_check_out(&self) -> NaiveDate {
        self.last_day + chrono::Days::new(1)
    }
}

/// A stay picked on the resource page, before it is booked: its nights, its price, and what
/// the page's snapshot of those nights says stands in the way (the sentence the booking itself
/// would answer). A snapshot, like the table: the booking decides under the nights' locks.
struct Preview {
    stay: Stay,
    night_price: i64,
    total: i64,
    blocked: Option<String>,
}

impl Preview {
    fn of(stay: Stay, resource: &Resource, days: &[DayAvailability], lang: crate::i18n::Lang) -> Self {
        let nights = days.iter().filter(|d| d.date >= stay.check_in() && d.date < stay.check_out());
        let blocked = nights
            .filter_map(|d| {
                if d.mine {
                    Some(BookingError::NightBooked { night: d.date })
                } else if let Some(reason) = &d.closed {
                    Some(BookingError::Closed { day: d.date, reason: reason.clone() })
                } else if d.available == 0 {
                    Some(BookingError::NightFull { night: d.date, capacity: d.capacity })
                } else {
                    None
                }
            })
            .map(|in_the_way| in_the_way.problem().message_in(lang))
            .next();
        Self {
            stay,
            night_price: resource.price_cents,
            total: resource.price_cents.saturating_mul(i64::from(stay.nights())),
            blocked,
        }
    }
}

const PAGE_DAYS: u32 = 14;

async fn resource_page(
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<FromQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let picked = query.picked();
    // A stay picked is shown from its check-in day, all its nights in the table.
    let from = match picked.as_ref().map(Picked::stay) {
        Some(Ok(stay)) if query.from.is_none() => stay.check_in(),
        _ => query.start()?,
    };
    let shown = Shown { from, saved: query.saved.is_some(), refused: None, picked };
    render_resource_page(&state, ctx, path.into_inner(), shown).await
}

/// What the resource page shows besides the days.
struct Shown {
    from: NaiveDate,
    saved: bool,
    refused: Option<Refused>,
    picked: Option<Picked>,
}

/// A booking the page's form just sent and the day refused: said on the page the customer was
/// on, next to the night it is about, with the places as they are now.
pub struct Refused {
    /// The booking's day, when it was one day: the sentence names it.
    pub day: Option<NaiveDate>,
    /// The night whose row is marked: the day's, or the night of a stay the refusal names.
    pub night: Option<NaiveDate>,
    pub message: String,
    status: StatusCode,
}

async fn render_resource_page(
    state: &AppState,
    ctx: PageContext,
    id: i64,
    shown: Shown,
) -> actix_web::Result<HttpResponse> {
    let Shown { from, saved, refused, picked } = shown;
    let viewer = ctx.user.as_ref().map(|u| u.id);
    let (resource, days) =
        state.db(move |conn| service::availability(conn, id, from, PAGE_DAYS, viewer)).await?;
    let step = chrono::Days::new(u64::from(PAGE_DAYS));
    let preview = picked.as_ref().map(|picked| {
        picked.stay().map(|stay| Preview::of(stay, &resource, &days, ctx.lang)).map_err(|no| no.problem())
    });
    // Dates that are no stay answer like a refused form: 422, the sentence in place.
    let status = match (&refused, &preview) {
        (Some(r), _) => r.status,
        (None, Some(Err(no))) => no.status,
        _ => StatusCode::OK,
    };
    let preview = preview.map(|p| p.map_err(|no| no.message_in(ctx.lang)));
    let mut response = html(&ResourcePage {
        ctx,
        resource,
        days,
        today: service::today(),
        last_day: super::model::last_bookable_day(service::today()),
        saved,
        refused,
        picked: picked.unwrap_or_default(),
        preview,
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

/// The booking form of one day. A booking the day refuses (taken, full, closed, not a bookable
/// date) answers in place: the resource page again, the message next to the day, the places as
/// they are now, with the refusal's status. Anything else (an ended session, a busy server) is
/// a page of its own.
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
        book(&state, &coalescer, &claimed, resource_id, Stay::one_night(date), key).await
    };
    match booked.await {
        Ok(booked) => Ok(see_other(&format!("/bookings?booked={}", booked.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let day = parse_day(form.date.trim());
            let from =
                day.filter(|day| *day >= service::today()).unwrap_or_else(service::today).min(LAST_DAY);
            let place =
                InPlace { resource_id, from, day, shown_as: format!("/resources/{resource_id}?from={from}") };
            answer_in_place(&state, &req, refused, place, None).await
        }
        Err(BookingError::UnknownResource(id)) => Err(BookingError::ResourceNotFound(id).into()),
        Err(other) => Err(other.into()),
    }
}

#[derive(Deserialize)]
struct StayForm {
    check_in: String,
    check_out: String,
    idempotency_key: Option<String>,
}

/// The stay form, sent from a stay's preview on the resource page. Answered like the form of
/// one day: booked → my bookings; refused → the resource page again, from the check-in day,
/// the sentence naming the night in the way and that night's row marked.
async fn book_stay_form(
    claimed: Claimed,
    req: HttpRequest,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<StayForm>,
    state: web::Data<AppState>,
    coalescer: web::Data<Coalescer>,
) -> actix_web::Result<HttpResponse> {
    let resource_id = path.into_inner();
    let picked = Picked { check_in: form.check_in.clone(), check_out: form.check_out.clone() };
    let booked = async {
        let stay = picked.stay()?;
        let key = IdempotencyKey::from_form(form.idempotency_key.as_deref())?;
        book(&state, &coalescer, &claimed, resource_id, stay, key).await
    };
    match booked.await {
        Ok(booked) => Ok(see_other(&format!("/bookings?booked={}", booked.id))),
        Err(refused) if refused.is_answered_in_place() => {
            let from = picked.stay().map_or_else(|_| service::today(), Stay::check_in);
            let place = InPlace { resource_id, from, day: None, shown_as: picked.page(resource_id) };
            answer_in_place(&state, &req, refused, place, Some(picked)).await
        }
        Err(BookingError::UnknownResource(id)) => Err(BookingError::ResourceNotFound(id).into()),
        Err(other) => Err(other.into()),
    }
}

/// Where a refused form is answered: the resource page from `from`, standing for `shown_as`.
struct InPlace {
    resource_id: i64,
    from: NaiveDate,
    /// The day of a booking of one day, which the sentence names.
    day: Option<NaiveDate>,
    shown_as: String,
}

/// The resource page again, with the refusal in place and the places as they are now.
async fn answer_in_place(
    state: &AppState,
    req: &HttpRequest,
    refused: BookingError,
    place: InPlace,
    picked: Option<Picked>,
) -> actix_web::Result<HttpResponse> {
    // The page's context (who is logged in) only now: a booking that goes through costs no
    // session lookup beyond the one `Claimed` already made.
    let ctx = PageContext::extract(req).await?;
    let problem = refused.problem();
    let night = refused.night().or(place.day);
    let refused =
        Refused { day: place.day, night, message: problem.message_in(ctx.lang), status: problem.status };
    let ctx = ctx.shown_as(place.shown_as);
    let shown = Shown { from: place.from, saved: false, refused: Some(refused), picked };
    render_resource_page(state, ctx, place.resource_id, shown).await
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

/// One day (`date`), or a stay from a check-in day to a check-out day (`from`, `to`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct BookRequest {
    #[schema(minimum = 1)]
    resource_id: i64,
    /// The day to book: one night. Not with `from` and `to`.
    #[schema(format = Date)]
    date: Option<String>,
    /// A stay's check-in day, its first night; with `to`.
    #[schema(format = Date)]
    from: Option<String>,
    /// A stay's check-out day, the morning after its last night: 1 to 14 nights after `from`.
    #[schema(format = Date)]
    to: Option<String>,
}

documented_answers!(BookAnswers:
    BookingError[InvalidDate, PastDate, TooFarAhead, InvalidId, InvalidStay, UnknownResource, FullyBooked,
        AlreadyBooked, NightFull, NightBooked, Closed, Quota],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Book a resource for a day (`date`), or for a stay of 1 to 14 nights (`from` the check-in day,
/// `to` the check-out day): under the named lock of each day, taken in ascending date order.
/// A stay is one reservation: every night of it is booked, or none, and a refusal names the
/// first night in the way (`night`). With an `Idempotency-Key`, a resend of the same request
/// (within 24 h) gets the first answer back and books nothing.
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
    let stay =
        Stay::requested(body.date.as_deref(), body.from.as_deref(), body.to.as_deref(), service::today())?;
    let booked = book(&state, &coalescer, &claimed, resource_id, stay, key).await?;
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
