use chrono::{NaiveDate, NaiveDateTime};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use super::BookingError;
use crate::db::text_enum;
use crate::schema::reservations;
use crate::wire::input::{parse_day, quoted};

text_enum! {
    pub enum ReservationStatus {
        Confirmed => "confirmed",
        Cancelled => "cancelled",
    }
}

#[derive(Clone, Debug, Queryable, Selectable, Identifiable, Serialize, Deserialize, utoipa::ToSchema)]
#[diesel(table_name = reservations, check_for_backend(crate::db::MultiBackend))]
pub struct Reservation {
    pub id: i64,
    pub resource_id: i64,
    pub user_id: i64,
    /// The first night: the day of a one-day booking, a stay's check-in day.
    #[serde(rename = "date")]
    pub day: NaiveDate,
    /// The day after the last night: a stay's check-out day (`day` + 1 for one night).
    #[serde(rename = "to")]
    pub check_out: NaiveDate,
    pub status: ReservationStatus,
    #[serde(with = "crate::wire::utc")]
    pub created_at: NaiveDateTime,
    #[serde(with = "crate::wire::utc::option")]
    pub cancelled_at: Option<NaiveDateTime>,
}

impl Reservation {
    pub fn by_id(id: i64) -> reservations::BoxedQuery<'static, crate::db::MultiBackend> {
        reservations::table.filter(reservations::id.eq(id)).into_boxed()
    }

    /// How many nights it covers: 1 for a booking of one day.
    pub fn nights(&self) -> i64 {
        (self.check_out - self.day).num_days()
    }
}

/// How far ahead a booking may be made.
pub const HORIZON_DAYS: i64 = 365;

/// A day that can be booked: a real calendar date, not before `today`, within the horizon.
/// Built once from user input (parse, don't validate); the service never sees a raw string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BookingDate(NaiveDate);

/// The last day bookings are open for, seen from `today`.
pub fn last_bookable_day(today: NaiveDate) -> NaiveDate {
    today + chrono::Days::new(HORIZON_DAYS.unsigned_abs())
}

impl BookingDate {
    pub fn parse(input: &str, today: NaiveDate) -> Result<Self, BookingError> {
        let day = parse_day(input).ok_or_else(|| BookingError::InvalidDate(quoted(input)))?;
        if day < today {
            return Err(BookingError::PastDate(day));
        }
        if day > last_bookable_day(today) {
            return Err(BookingError::TooFarAhead(day));
        }
        Ok(Self(day))
    }

    pub fn day(self) -> NaiveDate {
        self.0
    }
}

pub use crate::resources::model::{MAX_NIGHTS, first_check_in_covering};

/// What a customer asks for: the nights from a check-in day up to, not including, a check-out
/// day — 1 to [`MAX_NIGHTS`] of them, the first not before today, the last within the booking
/// horizon. A booking of one day is a stay of one night. Built once from user input, like
/// [`BookingDate`]; the service never sees the raw strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stay {
    first: BookingDate,
    check_out: NaiveDate,
}

/// Why the dates sent for a stay are no stay (all answered `422 invalid_stay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StayProblem {
    /// The check-out day is the check-in day or before it.
    CheckOutNotAfterCheckIn { check_in: NaiveDate, check_out: NaiveDate },
    /// More nights than one stay may have.
    TooManyNights { nights: i64 },
    /// Only one of check-in and check-out was sent.
    Incomplete,
    /// Neither a day nor a stay was sent.
    NoDates,
    /// A `date` and a `from`/`to` together: one night, or a stay, not both.
    DateAndStay,
}

impl Stay {
    /// The stay from `check_in` to `check_out`, as a form or the API sends them.
    pub fn parse(check_in: &str, check_out: &str, today: NaiveDate) -> Result<Self, BookingError> {
        let first = parse_day(check_in).ok_or_else(|| BookingError::InvalidDate(quoted(check_in)))?;
        let check_out = parse_day(check_out).ok_or_else(|| BookingError::InvalidDate(quoted(check_out)))?;
        if check_out <= first {
            return Err(StayProblem::CheckOutNotAfterCheckIn { check_in: first, check_out }.into());
        }
        let nights = (check_out - first).num_days();
        if nights > i64::from(MAX_NIGHTS) {
            return Err(StayProblem::TooManyNights { nights }.into());
        }
        // The first night must be bookable today, and so must the last: both within the window.
        let first = BookingDate::parse(check_in, today)?;
        let last = check_out - chrono::Days::new(1);
        if last > last_bookable_day(today) {
            return Err(BookingError::TooFarAhead(last));
        }
        Ok(Self { first, check_out })
    }

    /// What a request names: a `date` (one night) or a `from` and a `to` (a stay), never both.
    pub fn requested(
        date: Option<&str>,
        from: Option<&str>,
        to: Option<&str>,
        today: NaiveDate,
    ) -> Result<Self, BookingError> {
        match (date, from, to) {
            (Some(date), None, None) => Ok(Self::one_night(BookingDate::parse(date, today)?)),
            (None, Some(from), Some(to)) => Self::parse(from, to, today),
            (Some(_), _, _) => Err(StayProblem::DateAndStay.into()),
            (None, None, None) => Err(StayProblem::NoDates.into()),
            (None, _, _) => Err(StayProblem::Incomplete.into()),
        }
    }

    pub fn one_night(day: BookingDate) -> Self {
        Self { first: day, check_out: day.day() + chrono::Days::new(1) }
    }

    pub fn check_in(self) -> NaiveDate {
        self.first.day()
    }

    pub fn check_out(self) -> NaiveDate {
        self.check_out
    }

    pub fn nights(self) -> u32 {
        u32::try_from((self.check_out - self.first.day()).num_days()).unwrap_or(MAX_NIGHTS)
    }

    /// Each night, in ascending date order.
    pub fn each_night(self) -> impl Iterator<Item = NaiveDate> {
        self.first.day().iter_days().take(self.nights() as usize)
    }

    pub fn last_night(self) -> NaiveDate {
        self.check_out - chrono::Days::new(1)
    }

    /// The one day, when the stay is one night: such a stay is a booking of one day, in every
    /// way (`service::book`, coalescing).
    pub fn single_day(self) -> Option<BookingDate> {
        (self.nights() == 1).then_some(self.first)
    }

    /// The request as an idempotency key is bound to it: a resend with the same key must ask
    /// for the same nights. A stay of one night reads as the booking of that day it is.
    pub fn described(self, resource_id: i64) -> String {
        match self.single_day() {
            Some(day) => format!("book resource {resource_id} on {}", day.day()),
            None => format!("book resource {resource_id} from {} to {}", self.check_in(), self.check_out),
        }
    }
}

/// A positive database id from user input.
pub fn parse_id(value: i64, field: &'static str) -> Result<i64, BookingError> {
    if value > 0 { Ok(value) } else { Err(BookingError::InvalidId(field.to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, 23).expect("valid")
    }

    #[test]
    fn iso_dates_from_today_to_the_horizon_are_bookable() {
        assert!(BookingDate::parse("2026-11-23", today()).is_ok());
        assert!(BookingDate::parse("2027-11-23", today()).is_ok());
    }

    #[test]
    fn malformed_past_and_far_dates_are_refused_with_their_reason() {
        for bad in
            ["2026-02-30", "23/11/2026", "2026-11-23T10:00", "", "2026-1-5", "+2026-11-23", "+262142-12-18"]
        {
            assert!(matches!(BookingDate::parse(bad, today()), Err(BookingError::InvalidDate(_))), "{bad}");
        }
        assert!(matches!(BookingDate::parse("2026-11-22", today()), Err(BookingError::PastDate(_))));
        assert!(matches!(BookingDate::parse("2027-11-24", today()), Err(BookingError::TooFarAhead(_))));
    }

    fn stay(from: &str, to: &str) -> Result<Stay, BookingError> {
        Stay::parse(from, to, today())
    }

    #[test]
    fn a_stay_is_its_nights_from_check_in_up_to_check_out() {
        let three = stay("2026-12-30", "2027-01-02").expect("three nights");
        assert_eq!(three.nights(), 3);
        let nights: Vec<String> = three.each_night().map(|n| n.to_string()).collect();
        assert_eq!(
            nights,
            ["2026-12-30", "2026-12-31", "2027-01-01"],
            "ascending, the check-out day not among them"
        );
        assert_eq!(three.single_day(), None);
        let one = stay("2026-11-23", "2026-11-24").expect("one night");
        assert_eq!(one.single_day(), BookingDate::parse("2026-11-23", today()).ok(), "a booking of that day");
        assert_eq!(Stay::one_night(BookingDate::parse("2026-11-23", today()).expect("day")), one);
        assert_eq!(one.described(7), "book resource 7 on 2026-11-23", "the key of a booking of that day");
        assert_eq!(three.described(7), "book resource 7 from 2026-12-30 to 2027-01-02");
        // The horizon's last night may be booked; its check-out is the morning after.
        assert!(stay("2027-11-22", "2027-11-24").is_ok());
        assert!(stay("2026-11-23", "2026-12-07").is_ok(), "fourteen nights");
    }

    #[test]
    fn dates_that_are_no_stay_are_refused_with_their_reason() {
        let no = |from, to| stay(from, to).expect_err("no stay");
        assert!(matches!(
            no("2026-12-01", "2026-12-01"),
            BookingError::InvalidStay(StayProblem::CheckOutNotAfterCheckIn { .. })
        ));
        assert!(matches!(
            no("2026-12-05", "2026-12-01"),
            BookingError::InvalidStay(StayProblem::CheckOutNotAfterCheckIn { .. })
        ));
        assert!(matches!(
            no("2026-11-23", "2026-12-08"),
            BookingError::InvalidStay(StayProblem::TooManyNights { nights: 15 })
        ));
        assert!(matches!(no("2026-11-22", "2026-11-24"), BookingError::PastDate(_)));
        assert!(
            matches!(no("2027-11-23", "2027-11-25"), BookingError::TooFarAhead(_)),
            "the last night past the horizon"
        );
        assert!(matches!(no("2026-12-01", "soon"), BookingError::InvalidDate(_)));
        let asked = |date, from, to| Stay::requested(date, from, to, today());
        assert!(matches!(asked(None, None, None), Err(BookingError::InvalidStay(StayProblem::NoDates))));
        assert!(matches!(
            asked(None, Some("2026-12-01"), None),
            Err(BookingError::InvalidStay(StayProblem::Incomplete))
        ));
        assert!(matches!(
            asked(Some("2026-12-01"), Some("2026-12-01"), Some("2026-12-03")),
            Err(BookingError::InvalidStay(StayProblem::DateAndStay))
        ));
        assert_eq!(asked(Some("2026-12-01"), None, None).ok().map(Stay::nights), Some(1));
    }
}
