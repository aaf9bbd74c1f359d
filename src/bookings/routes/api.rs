//! The booking API under `/api/v1`: availability, booking a day or a stay, my reservations,
//! cancelling; each documented in OpenAPI with the answers it gives.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::book;
use super::pages::{FromQuery, PAGE_DAYS};
use crate::app::AppState;
use crate::auth::SessionUser;
use crate::auth::session::Claimed;
use crate::bookings::BookingError;
use crate::bookings::coalesce::Coalescer;
use crate::bookings::model::{Reservation, Stay, parse_id};
use crate::bookings::service::{self, DayAvailability};
use crate::idempotency::IdempotencyError;
use crate::idempotency::KeyHeader;
use crate::resources::Resource;
use crate::wire::answers::documented_answers;
use crate::wire::input::quoted;

#[derive(utoipa::OpenApi)]
#[openapi(paths(availability_json, book_json, my_reservations_json, cancel_json))]
pub struct Api;

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
pub(super) async fn availability_json(
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
    let (resource, days) =
        state.off_executor.with_conn(move |conn| service::availability(conn, id, from, days, viewer)).await?;
    Ok(HttpResponse::Ok().json(AvailabilityBody { resource, days }))
}

/// One day (`date`), or a stay from a check-in day to a check-out day (`from`, `to`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BookRequest {
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
        AlreadyBooked, NightFull, NightBooked, Closed, Quota, StayQuota],
    IdempotencyError[BadKey, Reused, Unreadable]);

/// Book a resource for a day (`date`), or for a stay of 1 to 14 nights (`from` the check-in day,
/// `to` the check-out day): under the named lock of each day, taken in ascending date order.
/// A stay is one reservation: every night of it is booked, or none, and a refusal names the
/// first night in the way (`night`). With an `Idempotency-Key`, a resend of the same request
/// (within 24 h) gets the first answer back and books nothing.
#[utoipa::path(post, path = "/api/v1/reservations", tag = "bookings", request_body = BookRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, e.g. a UUID; per user, kept 24 h")),
    responses((status = 201, description = "Booked; Location names it", body = Reservation), BookAnswers))]
pub(super) async fn book_json(
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
pub(super) async fn my_reservations_json(
    user: SessionUser,
    state: web::Data<AppState>,
) -> Result<HttpResponse, BookingError> {
    let mine = state.off_executor.with_conn(move |conn| service::my_reservations(conn, user.id)).await?;
    Ok(HttpResponse::Ok().json(mine.into_iter().map(|(r, _)| r).collect::<Vec<_>>()))
}

documented_answers!(CancelAnswers: BookingError[ReservationNotFound, AlreadyCancelled]);

/// Cancel one of the caller's reservations.
#[utoipa::path(delete, path = "/api/v1/reservations/{id}", tag = "bookings",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Reservation id")),
    responses((status = 200, body = Reservation), CancelAnswers))]
pub(super) async fn cancel_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, BookingError> {
    let id = path.into_inner();
    let cancelled = state.off_executor.with_conn(move |conn| service::cancel(conn, user.id, id)).await?;
    Ok(HttpResponse::Ok().json(cancelled))
}
