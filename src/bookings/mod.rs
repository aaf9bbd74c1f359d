//! Bookings: a customer books a resource for a date without ever exceeding its capacity.
//!
//! The hazard (`docs/named-lock-check-then-insert.md`): two requests milliseconds apart both count the day's
//! confirmed bookings, both see a free place, both insert, and the day is overbooked. There is
//! no row to `SELECT … FOR UPDATE` before the first booking exists, and locking the resource row
//! would serialise every date of that resource. So the check-then-insert runs under a named lock
//! keyed by resource *and date* — `GET_LOCK('haita:{tag}:book:{resource}:{date}')` — held on the very
//! connection that runs the transaction (`service.rs`, `crate::locking`).

pub mod coalesce;
pub mod model;
pub mod routes;
pub mod service;

use actix_web::http::StatusCode;
use chrono::NaiveDate;

use crate::http::error::{AsProblem, Problem};
use crate::http::input::{FIRST_DAY, LAST_DAY};
use crate::idempotency::{IdempotencyError, Refusal};
use crate::infra::{Infra, infra_error};

/// Serializable so that a refusal can be stored as the answer to an `Idempotency-Key`
/// (`crate::idempotency`); only refusals ([`Refusal::is_answer`]) ever are.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum BookingError {
    #[error("invalid date {0:?}")]
    InvalidDate(String),
    #[error("{0} is in the past")]
    PastDate(NaiveDate),
    #[error("{0} is beyond the booking horizon")]
    TooFarAhead(NaiveDate),
    #[error("invalid {0}")]
    InvalidId(String),
    #[error("invalid range: {0}")]
    InvalidRange(String),
    #[error("resource {0} does not exist")]
    UnknownResource(i64),
    #[error("resource {0} not found")]
    ResourceNotFound(i64),
    #[error("reservation not found")]
    ReservationNotFound,
    #[error("fully booked (capacity {capacity})")]
    FullyBooked { capacity: i32 },
    #[error("already booked by this user")]
    AlreadyBooked,
    /// The resource is closed that day (maintenance, `crate::batch::closure`).
    #[error("closed on {day}: {reason}")]
    Closed { day: NaiveDate, reason: String },
    #[error("already cancelled")]
    AlreadyCancelled,
    /// The request's session ended (logged out, expired, ended by an admin) before it booked.
    #[error("the session has ended")]
    SessionEnded,
    #[error(transparent)]
    #[serde(skip)]
    Idempotency(#[from] IdempotencyError),
    #[error(transparent)]
    #[serde(skip)]
    Infra(#[from] Infra),
}

impl BookingError {
    /// What the booking form answers on the resource page itself, next to the day: the day's
    /// own answer, or a date the form should not have sent. The rest (an ended session, a busy
    /// server, an unknown resource) are pages of their own.
    pub fn is_answered_in_place(&self) -> bool {
        matches!(
            self,
            Self::FullyBooked { .. }
                | Self::AlreadyBooked
                | Self::Closed { .. }
                | Self::PastDate(_)
                | Self::TooFarAhead(_)
                | Self::InvalidDate(_)
        )
    }
}

impl Refusal for BookingError {
    /// What the day decided: the same request would be refused the same way a second later.
    fn is_answer(&self) -> bool {
        matches!(
            self,
            Self::FullyBooked { .. } | Self::AlreadyBooked | Self::Closed { .. } | Self::UnknownResource(_)
        )
    }
}

impl AsProblem for BookingError {
    fn problem(&self) -> Problem {
        use StatusCode as S;
        let invalid = |code, message: String| Problem::new(S::UNPROCESSABLE_ENTITY, code, message);
        let said = |code, key, args: &[(&'static str, String)]| {
            Problem::words(S::UNPROCESSABLE_ENTITY, code, key, args)
        };
        match self {
            Self::InvalidDate(given) => said(
                "invalid_date",
                "booking.invalid_date",
                &[
                    ("given", format!("{given:?}")),
                    ("first", FIRST_DAY.to_string()),
                    ("last", LAST_DAY.to_string()),
                ],
            ),
            Self::PastDate(day) => said("past_date", "booking.past_date", &[("day", day.to_string())]),
            Self::TooFarAhead(day) => said(
                "too_far_ahead",
                "booking.too_far_ahead",
                &[("day", day.to_string()), ("days", model::HORIZON_DAYS.to_string())],
            ),
            Self::InvalidId(field) => invalid("invalid_id", format!("{field} must be a positive number.")),
            Self::InvalidRange(why) => invalid("invalid_range", why.clone()),
            Self::UnknownResource(id) => {
                said("unknown_resource", "booking.no_resource", &[("id", id.to_string())])
            }
            Self::ResourceNotFound(id) => {
                Problem::words(S::NOT_FOUND, "not_found", "booking.no_resource", &[("id", id.to_string())])
            }
            Self::ReservationNotFound => {
                Problem::words(S::NOT_FOUND, "not_found", "booking.no_reservation", &[])
            }
            Self::FullyBooked { capacity } => Problem::words(
                S::CONFLICT,
                "fully_booked",
                "booking.fully_booked",
                &[("capacity", capacity.to_string())],
            ),
            Self::AlreadyBooked => {
                Problem::words(S::CONFLICT, "already_booked", "booking.already_booked", &[])
            }
            Self::Closed { day, reason } => Problem::words(
                S::CONFLICT,
                "closed",
                "booking.closed_on",
                &[("day", day.to_string()), ("reason", reason.clone())],
            )
            .with("reason", reason.clone()),
            Self::AlreadyCancelled => {
                Problem::words(S::CONFLICT, "already_cancelled", "booking.already_cancelled", &[])
            }
            Self::SessionEnded => crate::auth::AuthError::NotLoggedIn.problem(),
            Self::Idempotency(e) => e.problem(),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(BookingError);
