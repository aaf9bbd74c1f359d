//! Resources: the rooms, courts and benches that customers book, and how staff edit them.
//!
//! A resource's description is a long form and staff collide on it often, so an optimistic save
//! would throw away a person's work. Editing therefore runs under a pessimistic edit lock
//! (`crate::edit_locks`, keyed `resource:{id}`): opening the editor takes it, and the save proves
//! in its own transaction that the saver still holds it (`editing::save`). See
//! `docs/pessimistic-edit-lock.md`.
//!
//! Bookings read resources (capacity) and lock the row in share mode while they count a day;
//! a save that lowers the capacity locks it exclusively first, so the two never interleave.

pub mod closures;
pub mod editing;
pub mod model;
pub mod routes;

use chrono::NaiveDate;

pub use model::{FieldError, Resource};

use crate::auth::AuthError;
use crate::edit_locks::EditLockError;
use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    EditLock(#[from] EditLockError),
    #[error("resource {0} not found")]
    NotFound(i64),
    #[error("invalid input")]
    Invalid(Vec<FieldError>),
    #[error("capacity {capacity} is below the {confirmed} confirmed bookings on {day}")]
    CapacityBelowBookings { capacity: i32, day: NaiveDate, confirmed: i64 },
    /// A save without the epoch of the lock its editor was opened under (`Edit-Lock-Epoch`).
    #[error("no edit-lock epoch")]
    EpochRequired,
    #[error("edit-lock epoch {0:?} is not a number")]
    BadEpoch(String),
    #[error("no draft kept for resource {0}")]
    NoDraft(i64),
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { ResourceError {
    NotFound => NOT_FOUND "not_found",
    EpochRequired => PRECONDITION_REQUIRED "precondition_required",
    BadEpoch => BAD_REQUEST "bad_epoch",
    NoDraft => NOT_FOUND "not_found",
    Invalid => UNPROCESSABLE_ENTITY "invalid_input",
    CapacityBelowBookings => UNPROCESSABLE_ENTITY "capacity_below_bookings",
} carries { Auth, EditLock, Infra } }

impl AsProblem for ResourceError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Auth(e) => e.problem(),
            Self::EditLock(e) => e.problem(),
            Self::NotFound(id) => answer.said("booking.no_resource", &[("id", id.to_string())]),
            Self::EpochRequired => answer.said("resource_form.epoch_required", &[]),
            Self::BadEpoch(given) => {
                answer.said("resource_form.bad_epoch", &[("given", format!("{given:?}"))])
            }
            Self::NoDraft(_) => answer.said("resource_form.no_draft", &[]),
            Self::Invalid(errors) => {
                let message =
                    errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>();
                answer
                    .said("resource_form.invalid", &[("detail", message.join("; "))])
                    .with("fields", serde_json::to_value(errors).unwrap_or_default())
            }
            Self::CapacityBelowBookings { capacity, day, confirmed } => answer
                .said(
                    "field.capacity_below_bookings",
                    &[
                        ("capacity", capacity.to_string()),
                        ("day", day.to_string()),
                        ("confirmed", confirmed.to_string()),
                    ],
                )
                .with("day", day.to_string())
                .with("confirmed", *confirmed),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(ResourceError);
