//! Bookings: a customer books a resource for a date without ever exceeding its capacity.
//!
//! The hazard (`docs/named-lock-check-then-insert.md`): two requests milliseconds apart both count the day's
//! confirmed bookings, both see a free place, both insert, and the day is overbooked. There is
//! no row to `SELECT … FOR UPDATE` before the first booking exists, and locking the resource row
//! would serialise every date of that resource. So the check-then-insert runs under a named lock
//! keyed by resource *and date* — `GET_LOCK('haita:{tag}:book:{resource}:{date}')` — held on the very
//! connection that runs the transaction (`service::book`, the lesson, and `crate::locking`).

pub mod batch;
pub mod coalesce;
pub mod model;
pub mod routes;
pub mod service;
pub mod stays;

use chrono::NaiveDate;

use crate::idempotency::IdempotencyError;
use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};
use model::StayProblem;

/// Serializable so that a refusal can be stored as the answer to an `Idempotency-Key`
/// (`crate::idempotency`); only refusals declared `[kept]` ever are.
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
    /// Availability asked for too many days, or none: at most `max`.
    #[error("days must be between 1 and {max}")]
    InvalidRange { max: u32 },
    /// The dates sent are no stay (`model::Stay`): which way, said in the answer.
    #[error("not a stay: {0:?}")]
    InvalidStay(StayProblem),
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
    /// A night of a stay has no free place: the first such night (`stays::decide_stay`).
    #[error("the night of {night} is fully booked (capacity {capacity})")]
    NightFull { night: NaiveDate, capacity: i32 },
    /// The user already has a booking of this resource covering a night of the stay.
    #[error("already booked by this user for the night of {night}")]
    NightBooked { night: NaiveDate },
    /// The resource is closed that day (maintenance, `crate::batch::closure`).
    #[error("closed on {day}: {reason}")]
    Closed { day: NaiveDate, reason: String },
    #[error("already cancelled")]
    AlreadyCancelled,
    /// The user already holds `held` confirmed bookings of today or later, the most one person
    /// may hold (`MAX_FUTURE_BOOKINGS_PER_USER`, [`service::book`]).
    #[error("already holding {held} future bookings, the most one user may hold")]
    Quota { held: i64 },
    /// A stay of `nights` would take the user's booked nights (`held`) past `max`
    /// (`MAX_FUTURE_BOOKINGS_PER_USER`, counted in nights: `stays::decide_stay`).
    #[error("holding {held} future nights, {nights} more would pass {max}")]
    StayQuota { held: i64, nights: i64, max: i64 },
    /// The request's session ended (logged out, expired, ended by an admin) before it booked.
    #[error("the session has ended")]
    SessionEnded,
    /// The session could not be checked before the booking (the database busy or down): the
    /// answer to give.
    #[error("the session could not be checked: {}", .0.message)]
    #[serde(skip)]
    SessionCheck(Problem),
    #[error(transparent)]
    #[serde(skip)]
    Idempotency(#[from] IdempotencyError),
    #[error(transparent)]
    #[serde(skip)]
    Infra(#[from] Infra),
}

impl BookingError {
    /// The night a refusal is about, when it names one: the page marks that night's row.
    pub fn night(&self) -> Option<NaiveDate> {
        match self {
            Self::NightFull { night, .. } | Self::NightBooked { night } => Some(*night),
            Self::Closed { day, .. } => Some(*day),
            _ => None,
        }
    }
}

impl From<StayProblem> for BookingError {
    fn from(problem: StayProblem) -> Self {
        Self::InvalidStay(problem)
    }
}

// `[kept]`: what the day decided, so the same request would be refused the same way a second
// later. `[in_place]`: what the booking form answers on the resource page itself, next to the
// day: the day's own answer, or a date the form should not have sent; the rest (an ended
// session, a busy server, an unknown resource) are pages of their own.
answers! { BookingError {
    InvalidDate => UNPROCESSABLE_ENTITY "invalid_date" [in_place],
    PastDate => UNPROCESSABLE_ENTITY "past_date" [in_place],
    TooFarAhead => UNPROCESSABLE_ENTITY "too_far_ahead" [in_place],
    InvalidId => UNPROCESSABLE_ENTITY "invalid_id",
    InvalidRange => UNPROCESSABLE_ENTITY "invalid_range",
    InvalidStay => UNPROCESSABLE_ENTITY "invalid_stay" [in_place],
    UnknownResource => UNPROCESSABLE_ENTITY "unknown_resource" [kept],
    ResourceNotFound => NOT_FOUND "not_found",
    ReservationNotFound => NOT_FOUND "not_found",
    FullyBooked => CONFLICT "fully_booked" [kept, in_place],
    AlreadyBooked => CONFLICT "already_booked" [kept, in_place],
    NightFull => CONFLICT "fully_booked" [kept, in_place],
    NightBooked => CONFLICT "already_booked" [kept, in_place],
    Closed => CONFLICT "closed" [kept, in_place],
    AlreadyCancelled => CONFLICT "already_cancelled",
    Quota => CONFLICT "booking_quota" [in_place],
    StayQuota => CONFLICT "booking_quota" [in_place],
    SessionEnded => UNAUTHORIZED "not_logged_in",
} carries { SessionCheck, Idempotency, Infra } }

impl AsProblem for BookingError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            // The days a person may mean, not the widest the parser accepts (FIRST_DAY..LAST_DAY,
            // which the API documents): today as the example, and the booking window.
            Self::InvalidDate(given) => {
                let today = service::today();
                answer.said(
                    "booking.invalid_date",
                    &[
                        ("given", format!("{given:?}")),
                        ("today", today.to_string()),
                        ("last", model::last_bookable_day(today).to_string()),
                    ],
                )
            }
            Self::PastDate(day) => answer.said("booking.past_date", &[("day", day.to_string())]),
            Self::TooFarAhead(day) => answer.said(
                "booking.too_far_ahead",
                &[("day", day.to_string()), ("days", model::HORIZON_DAYS.to_string())],
            ),
            Self::InvalidId(field) => answer.said("request.positive_id", &[("field", field.clone())]),
            Self::InvalidRange { max } => answer.said("booking.invalid_days", &[("max", max.to_string())]),
            Self::InvalidStay(StayProblem::CheckOutNotAfterCheckIn { check_in, check_out }) => answer.said(
                "booking.check_out_not_after",
                &[("check_in", check_in.to_string()), ("check_out", check_out.to_string())],
            ),
            Self::InvalidStay(StayProblem::TooManyNights { nights }) => answer.said(
                "booking.too_many_nights",
                &[("nights", nights.to_string()), ("max", model::MAX_NIGHTS.to_string())],
            ),
            Self::InvalidStay(StayProblem::Incomplete) => answer.said("booking.stay_incomplete", &[]),
            Self::InvalidStay(StayProblem::NoDates) => answer.said("booking.no_dates", &[]),
            Self::InvalidStay(StayProblem::DateAndStay) => answer.said("booking.date_and_stay", &[]),
            Self::UnknownResource(id) | Self::ResourceNotFound(id) => {
                answer.said("booking.no_resource", &[("id", id.to_string())])
            }
            Self::ReservationNotFound => answer.said("booking.no_reservation", &[]),
            // "all 1 places" is no sentence: one place is said apart (in both languages).
            Self::FullyBooked { capacity: 1 } => answer.said("booking.fully_booked.one", &[]),
            Self::FullyBooked { capacity } => {
                answer.said("booking.fully_booked", &[("capacity", capacity.to_string())])
            }
            Self::AlreadyBooked => answer.said("booking.already_booked", &[]),
            Self::NightFull { night, capacity: 1 } => answer
                .said("booking.night_full.one", &[("night", night.to_string())])
                .with("night", night.to_string()),
            Self::NightFull { night, capacity } => answer
                .said(
                    "booking.night_full",
                    &[("night", night.to_string()), ("capacity", capacity.to_string())],
                )
                .with("night", night.to_string()),
            Self::NightBooked { night } => answer
                .said("booking.night_booked", &[("night", night.to_string())])
                .with("night", night.to_string()),
            Self::Closed { day, reason } => answer
                .said("booking.closed_on", &[("day", day.to_string()), ("reason", reason.clone())])
                .with("reason", reason.clone()),
            Self::AlreadyCancelled => answer.said("booking.already_cancelled", &[]),
            Self::StayQuota { held, nights, max } => answer
                .said(
                    "booking.stay_quota",
                    &[("held", held.to_string()), ("nights", nights.to_string()), ("max", max.to_string())],
                )
                .with("held", *held),
            Self::Quota { held } => {
                answer.said("booking.quota", &[("held", held.to_string())]).with("held", *held)
            }
            Self::SessionEnded => answer.said("error.not_logged_in", &[]),
            Self::SessionCheck(problem) => problem.clone(),
            Self::Idempotency(e) => e.problem(),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(BookingError);
