//! Stays of several nights: a customer books a resource from a check-in day to a check-out day,
//! every night of it or none (`docs/stays.md`).
//!
//! A stay meets the day's hazard (`service::book`) once per night: each night needs a free
//! place and the customer no other booking of it, and each night's count is exact only under
//! that night's day lock, the very lock a booking of that one day takes. So a stay takes the day
//! lock of every night and holds them all across its one transaction ([`book_stay`]): a stay
//! and a booking of one of its days exclude each other, as two bookings of that day do.
//!
//! It brings a hazard of its own: several locks. Two stays that share nights, one taking the
//! locks up the calendar and the other down, would each hold a night the other waits for — a
//! deadlock, which the server breaks by failing one of them (MariaDB 1213, MySQL 3058,
//! PostgreSQL 40P01). The locks are therefore always taken in ascending date order
//! ([`TurnsInOrder`], `locking::transaction_under_locks`): whoever holds the earlier night goes
//! first, and the other waits holding nothing the first needs.
//!
//! Stays are not coalesced. A day's batch (`batch::book_batch`) decides many requests for one
//! night against one read of it; a stay needs every one of its nights, so it would have to join
//! several batches at once. It takes the one-at-a-time path instead, and still excludes the
//! batches of its days: a batch holds the same day lock, so whichever of the two comes first,
//! the other waits for it at the server.

use std::sync::LazyLock;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Nullable, Text, Timestamp};

use super::BookingError;
use super::model::{Reservation, Stay, first_check_in_covering};
use super::service::{insert, today};
use crate::auth::session::{self, Ticket};
use crate::db::{DbConn, DbPool, cached_sql};
use crate::idempotency::{self, Once};
use crate::locking::{Isolation, LockName, Namespace, TurnsInOrder};

/// Books `resource_id` for the nights of `stay` for the user of `ticket`: every night within
/// the capacity and at most one booking per user and night, however many stays and bookings of
/// one day arrive at once, on however many instances. [`service::book`](super::service::book),
/// for several nights:
///
/// 1. Take every night's day lock, **in ascending date order** (`turns`, from
///    [`night_locks`]), and 2. BEGIN — on PostgreSQL BEGIN first, then the locks, as the
///    transaction's first statements. All of them are held for exactly this one transaction
///    (`locking::transaction_under_locks`).
/// 3. Lock the user's row, for the per-user quota (which counts a stay's nights).
/// 4. Read the stay: the resource (its capacity, a closed night, the session, the user's
///    future bookings) and the reservations that cover its nights ([`read_stay`]).
/// 5. Decide: night by night, the user's own booking, then the capacity; then the quota
///    ([`decide_stay`]). A refusal names the first night it is about.
/// 6. Insert one reservation, from the check-in day to the check-out day.
/// 7. COMMIT (a refusal: ROLLBACK), then 8. release every lock — on PostgreSQL the COMMIT
///    itself lets go of them.
///
/// The per-key queue and the waiting budget apply to each lock, within one wait for them all
/// (`LOCK_WAIT_SECS`): a night held elsewhere for longer answers 503 busy, and the locks taken
/// before it are given back. With an idempotency key, steps 4–6 run at most once per key, as
/// for a booking of one day.
pub fn book_stay(
    pool: &DbPool,
    turns: TurnsInOrder,
    ticket: &Ticket,
    resource_id: i64,
    stay: Stay,
    once: Option<&Once>,
    max_future: u32,
) -> Result<Reservation, BookingError> {
    debug_assert!(turns.names().eq(night_locks(pool.names(), resource_id, stay).iter()));
    // 1. Take each night's lock in ascending date order, and 2. BEGIN.
    crate::locking::transaction_under_locks(pool, turns, Isolation::SessionDefault, |conn| {
        // 3. Lock the user's row: the quota of step 4 counts after it.
        crate::auth::quota::lock_users(conn, &[ticket.user_id()])?;
        idempotency::once(conn, once, |conn| {
            // 4. Read the stay.
            let read = read_stay(conn, resource_id, stay, ticket, max_future)?
                .ok_or(BookingError::UnknownResource(resource_id))?;
            // 5. Decide, and 6. insert if every night allows it.
            match read.decide() {
                StayVerdict::Insert => Ok(insert(conn, ticket.user_id(), resource_id, stay)?),
                refused => Err(read.refusal(refused)),
            }
        })
    })
    // 7. COMMIT, or ROLLBACK on a refusal, and 8. release: both done as the call returns.
    .and_then(std::convert::identity)
}

/// The locks a stay takes: each night's day lock, the one a booking of that day takes
/// (`Namespace::booking`), in ascending date order.
pub fn night_locks(names: &Namespace, resource_id: i64, stay: Stay) -> Vec<LockName> {
    stay.each_night().map(|night| names.booking(resource_id, night)).collect()
}

/// One night of a stay as the booking rules see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Night {
    pub night: NaiveDate,
    /// Confirmed reservations covering it: bookings of that day and stays alike.
    pub confirmed: i64,
    /// Whether the user holds one of them.
    pub mine: bool,
}

/// What a stay gets: step 5 of [`book_stay`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StayVerdict {
    Insert,
    SessionEnded,
    /// A night is closed (the first closed one, from the read).
    Closed,
    /// The user already has a booking covering this night.
    NightBooked(NaiveDate),
    /// This night has no free place.
    NightFull(NaiveDate),
    OverQuota,
}

/// The booking rules for a stay, with no database in sight: the rules of one day
/// (`service::decide_in_arrival_order`) applied to each night in date order — the user's own
/// booking first, then the capacity — and then the user's quota, counted in nights: `held`
/// already, and the stay's own must fit under `max_future` (as a booking of one day adds one).
/// The first night that fails decides, so a refusal names the earliest night in the way.
pub fn decide_stay(
    live: bool,
    closed: bool,
    capacity: i32,
    nights: &[Night],
    held: i64,
    max_future: i64,
) -> StayVerdict {
    if !live {
        return StayVerdict::SessionEnded;
    }
    if closed {
        return StayVerdict::Closed;
    }
    for night in nights {
        if night.mine {
            return StayVerdict::NightBooked(night.night);
        }
        if night.confirmed >= i64::from(capacity) {
            return StayVerdict::NightFull(night.night);
        }
    }
    let wanted = i64::try_from(nights.len()).unwrap_or(i64::MAX);
    if held.saturating_add(wanted) > max_future { StayVerdict::OverQuota } else { StayVerdict::Insert }
}

/// Confirmed reservations of one span of nights, `[day, check_out)`, and how many of them are
/// the user's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub day: NaiveDate,
    pub check_out: NaiveDate,
    pub confirmed: i64,
    pub mine: i64,
}

/// Each night of `stay`, with the spans covering it counted.
pub fn nights_of(stay: Stay, spans: &[Span]) -> Vec<Night> {
    stay.each_night()
        .map(|night| {
            let covering = spans.iter().filter(|s| s.day <= night && night < s.check_out);
            let (confirmed, mine) = covering.fold((0, 0), |(c, m), s| (c + s.confirmed, m + s.mine));
            Night { night, confirmed, mine: mine > 0 }
        })
        .collect()
}

/// A stay as read under its locks: step 4 of [`book_stay`].
pub struct StayRead {
    capacity: i32,
    /// The first closed night, and why.
    closed: Option<(NaiveDate, String)>,
    live: bool,
    nights: Vec<Night>,
    /// The nights of the user's confirmed bookings not over yet.
    held: i64,
    max_future: i64,
}

impl StayRead {
    fn decide(&self) -> StayVerdict {
        let closed = self.closed.is_some();
        decide_stay(self.live, closed, self.capacity, &self.nights, self.held, self.max_future)
    }

    fn refusal(&self, verdict: StayVerdict) -> BookingError {
        match verdict {
            StayVerdict::NightFull(night) => BookingError::NightFull { night, capacity: self.capacity },
            StayVerdict::NightBooked(night) => BookingError::NightBooked { night },
            StayVerdict::OverQuota => BookingError::StayQuota {
                held: self.held,
                nights: i64::try_from(self.nights.len()).unwrap_or(i64::MAX),
                max: self.max_future,
            },
            StayVerdict::SessionEnded => BookingError::SessionEnded,
            StayVerdict::Closed | StayVerdict::Insert => match &self.closed {
                Some((day, reason)) => BookingError::Closed { day: *day, reason: reason.clone() },
                None => BookingError::SessionEnded,
            },
        }
    }
}

/// The resource as a stay needs it, in one statement: its capacity (under the shared row lock
/// of `service`'s day read, for the same reason: a save lowering the capacity waits for us, or
/// we for it), its first closed night within the stay and why, whether the session is live,
/// and the nights the user holds in bookings not over yet (the quota counts nights).
static READ_RESOURCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT r.capacity, \
         (SELECT MIN(c.day) FROM resource_closures c WHERE c.resource_id = r.id AND c.day BETWEEN ? AND ?) AS closed_on, \
         (SELECT c.reason FROM resource_closures c WHERE c.resource_id = r.id AND c.day BETWEEN ? AND ? \
           ORDER BY c.day LIMIT 1) AS closed, \
         (SELECT COUNT(*) FROM user_sessions s WHERE {}) AS live, \
         (SELECT COALESCE(SUM(x.nights), 0) FROM reservations x \
           WHERE x.user_id = ? AND x.status = 'confirmed' AND x.check_out > ?) AS held \
         FROM resources r WHERE r.id = ? {{share}}",
        session::LIVE_SESSION.replace("{list}", "?")
    )
});

/// The confirmed reservations covering any night of the stay, counted per span of nights, and
/// the user's among them: a range of the slot index that starts a longest stay before the
/// check-in day (`first_check_in_covering`).
const READ_NIGHTS: &str = "SELECT day, check_out, COUNT(*) AS confirmed, \
       COUNT(CASE WHEN user_id = ? THEN 1 END) AS mine \
     FROM reservations \
     WHERE resource_id = ? AND day BETWEEN ? AND ? AND status = 'confirmed' AND check_out > ? \
     GROUP BY day, check_out";

/// Step 4 of [`book_stay`], two statements; `None` when the resource does not exist. Only ever
/// called under the locks of every night and after the user's row was locked.
fn read_stay(
    conn: &mut DbConn,
    resource_id: i64,
    stay: Stay,
    ticket: &Ticket,
    max_future: u32,
) -> Result<Option<StayRead>, BookingError> {
    let (first, last, today) = (stay.check_in(), stay.last_night(), today());
    type Row = (i32, Option<NaiveDate>, Option<String>, i64, i64);
    let row: Option<Row> =
        cached_sql::<(Integer, Nullable<Date>, Nullable<Text>, BigInt, BigInt)>(READ_RESOURCE.as_str())
            .bind::<Date, _>(first)
            .bind::<Date, _>(last)
            .bind::<Date, _>(first)
            .bind::<Date, _>(last)
            .bind::<Timestamp, _>(session::live_after())
            .bind::<Text, _>(ticket.session_id())
            .bind::<BigInt, _>(ticket.user_id())
            .bind::<Date, _>(today)
            .bind::<BigInt, _>(resource_id)
            .get_result(conn)
            .optional()?;
    let Some((capacity, closed_on, reason, live, held)) = row else { return Ok(None) };
    let spans: Vec<(NaiveDate, NaiveDate, i64, i64)> =
        cached_sql::<(Date, Date, BigInt, BigInt)>(READ_NIGHTS)
            .bind::<BigInt, _>(ticket.user_id())
            .bind::<BigInt, _>(resource_id)
            .bind::<Date, _>(first_check_in_covering(first))
            .bind::<Date, _>(last)
            .bind::<Date, _>(first)
            .load(conn)?;
    let spans: Vec<Span> = spans
        .into_iter()
        .map(|(day, check_out, confirmed, mine)| Span { day, check_out, confirmed, mine })
        .collect();
    Ok(Some(StayRead {
        capacity,
        closed: closed_on.map(|day| (day, reason.unwrap_or_default())),
        live: live > 0,
        nights: nights_of(stay, &spans),
        held,
        max_future: i64::from(max_future),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bookings::model::Stay;

    fn day(n: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 12, n).expect("a December day")
    }

    fn stay(from: u32, to: u32) -> Stay {
        Stay::parse(&day(from).to_string(), &day(to).to_string(), day(1)).expect("a stay")
    }

    fn night(n: u32, confirmed: i64, mine: bool) -> Night {
        Night { night: day(n), confirmed, mine }
    }

    #[test]
    fn every_night_counts_the_stays_and_days_that_cover_it() {
        let spans = [
            Span { day: day(1), check_out: day(4), confirmed: 2, mine: 0 }, // nights 1–3
            Span { day: day(3), check_out: day(4), confirmed: 1, mine: 1 }, // night 3, the user's
            Span { day: day(5), check_out: day(6), confirmed: 1, mine: 0 }, // night 5
        ];
        assert_eq!(
            nights_of(stay(2, 6), &spans),
            [night(2, 2, false), night(3, 3, true), night(4, 0, false), night(5, 1, false)]
        );
    }

    #[test]
    fn the_first_night_in_the_way_decides_and_is_named() {
        use StayVerdict::*;
        let free = [night(2, 0, false), night(3, 1, false)];
        assert_eq!(decide_stay(true, false, 2, &free, 0, 30), Insert);
        let full_then_mine = [night(2, 0, false), night(3, 2, false), night(4, 0, true)];
        assert_eq!(decide_stay(true, false, 2, &full_then_mine, 0, 30), NightFull(day(3)));
        // Within one night, the user's own booking is said before the capacity, as for one day.
        let both = [night(2, 2, true)];
        assert_eq!(decide_stay(true, false, 2, &both, 0, 30), NightBooked(day(2)));
    }

    #[test]
    fn a_closed_resource_an_ended_session_and_the_quota_refuse_a_stay_whole() {
        use StayVerdict::*;
        let free = [night(2, 0, false), night(3, 0, false)];
        assert_eq!(decide_stay(false, true, 2, &free, 0, 30), SessionEnded);
        assert_eq!(decide_stay(true, true, 2, &free, 0, 30), Closed);
        assert_eq!(decide_stay(true, false, 2, &free, 30, 30), OverQuota);
        // The quota counts nights: two more fit under 30 with 28 held, not with 29.
        assert_eq!(decide_stay(true, false, 2, &free, 28, 30), Insert);
        assert_eq!(decide_stay(true, false, 2, &free, 29, 30), OverQuota);
        // A full night is said before the quota: cancelling another booking would not help.
        assert_eq!(decide_stay(true, false, 1, &[night(2, 1, false)], 30, 30), NightFull(day(2)));
    }
}
