//! HTTP for bookings: thin handlers that parse input, run the service off the executor and
//! render HTML ([`pages`]: the resource page with its day and stay forms, my bookings) or JSON
//! ([`api`]). Both book through one function, [`book`], which picks the path a request takes.

mod api;
mod pages;

pub use api::Api;

use actix_web::web;

use super::BookingError;
use super::coalesce::{self, Coalescer};
use super::model::{Reservation, Stay};
use super::service;
use super::stays;
use crate::app::AppState;
use crate::auth::AuthError;
use crate::auth::session::Claimed;
use crate::idempotency::IdempotencyKey;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/resources/{id}", web::get().to(pages::resource_page))
        .route("/resources/{id}/bookings", web::post().to(pages::book_form))
        .route("/resources/{id}/stays", web::post().to(pages::book_stay_form))
        .route("/bookings", web::get().to(pages::my_bookings_page))
        .route("/bookings/{id}/cancel", web::post().to(pages::cancel_form))
        .route("/api/v1/resources/{id}/availability", web::get().to(api::availability_json))
        .service(
            web::resource("/api/v1/reservations")
                .route(web::get().to(api::my_reservations_json))
                .route(web::post().to(api::book_json)),
        )
        .route("/api/v1/reservations/{id}", web::delete().to(api::cancel_json));
}

/// Books for the request's user, by one of three paths that run the same steps:
/// - [`service::book`], the lesson, for a day with an idempotency key (every form sends one)
///   and for every day with `BOOKING_COALESCING=false`. A keyed request runs on its own under
///   the day's lock, never in a coalesced batch: its stored answer belongs to one transaction
///   of one request.
/// - the coalescer ([`coalesce::book`]) for the other days: a request alone at its day runs
///   [`service::book`] too; requests that queued for one day are booked together under one
///   lock, in arrival order (`batch::book_batch`).
/// - [`stays::book_stay`] for a stay of several nights, one at a time under the day lock of
///   each night, taken in ascending date order. (A stay of one night is a booking of its day.)
///
/// The session is checked first, before any queue or lock: a cookie whose session has ended (a
/// logout, in this browser or elsewhere) takes no day's lock, so it cannot hold up the people
/// booking that day. The check is batched with this instance's other checks
/// (`auth::session::SessionChecks`): under load one statement serves dozens of requests. The
/// booking checks again in its read of the day, under the lock, for a session that ends while
/// the request waits its turn.
async fn book(
    state: &AppState,
    coalescer: &std::sync::Arc<Coalescer>,
    claimed: &Claimed,
    resource_id: i64,
    stay: Stay,
    key: Option<IdempotencyKey>,
) -> Result<Reservation, BookingError> {
    let ticket = claimed.ticket.clone();
    let live = state.sessions.check(&state.off_executor, ticket.clone()).await.map_err(|e| match e {
        AuthError::CheckFailed(problem) => BookingError::SessionCheck(problem),
        _ => BookingError::SessionEnded,
    })?;
    if live.is_none() {
        claimed.forget();
        return Err(BookingError::SessionEnded);
    }
    let once = key.map(|key| key.bind(ticket.user_id(), &stay.described(resource_id)));
    let max_future = state.config.max_future_bookings;
    let booked = match stay.single_day() {
        Some(date) if state.config.coalesce_bookings && once.is_none() => {
            let wait = state.config.lock_wait;
            coalesce::book(coalescer, wait, ticket, resource_id, date).await
        }
        Some(date) => {
            let turn = state.turn(state.pool().names().booking(resource_id, date.day())).await?;
            state
                .off_executor
                .with_pool(move |pool| {
                    service::book(pool, turn, &ticket, resource_id, date, once.as_ref(), max_future)
                })
                .await
        }
        None => {
            let nights = stays::night_locks(state.pool().names(), resource_id, stay);
            let turns = state.locks.turns_in_order(nights, state.config.lock_wait).await?;
            state
                .off_executor
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
