use chrono::{NaiveDate, NaiveDateTime};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use super::BookingError;
use crate::db::text_enum;
use crate::http::input::{parse_day, quoted};
use crate::schema::reservations;

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
    #[serde(rename = "date")]
    pub day: NaiveDate,
    pub status: ReservationStatus,
    #[serde(with = "crate::http::utc")]
    pub created_at: NaiveDateTime,
    #[serde(with = "crate::http::utc::option")]
    pub cancelled_at: Option<NaiveDateTime>,
}

impl Reservation {
    pub fn by_id(id: i64) -> reservations::BoxedQuery<'static, crate::db::MultiBackend> {
        reservations::table.filter(reservations::id.eq(id)).into_boxed()
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
}
