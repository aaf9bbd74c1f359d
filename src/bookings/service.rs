//! The booking rules and the locking that makes them hold under concurrency.

use std::collections::HashSet;
use std::sync::LazyLock;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Nullable, Text, Timestamp};
use serde::Serialize;

use super::BookingError;
use super::model::{BookingDate, Reservation, ReservationStatus};
use crate::auth::session::{self, Ticket};
use crate::db::cached::ListStatements;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::idempotency::{self, Once};
use crate::locking::retry::{LockConflict, MayConflict};
use crate::locking::{Isolation, NamedLockGuard, Turn};
use crate::resources::Resource;
use crate::schema::{reservations, resource_closures, resources};

/// Books `resource_id` on `date` for the user of `ticket`: at most `capacity` confirmed bookings
/// per day and at most one per user and day, however many requests arrive at once, on however
/// many instances of the app.
///
/// The order of the steps is the lesson:
/// 0. (before this, off the pool) wait in memory for this instance's turn at the day's lock;
/// 1. take the date's named lock on a pooled connection (bounded wait → 503 busy);
/// 2. *then* start the transaction on that same connection, so its snapshot is taken after the
///    previous holder committed (under REPEATABLE READ a snapshot taken before the lock would
///    still see the old count);
/// 3. count, check, insert, commit;
/// 4. release the lock (dropping the guard) only after the commit.
///
/// That is MySQL's order. On PostgreSQL the lock is transaction-scoped
/// ([`crate::locking::in_one_transaction`]): steps 1 and 2 swap (the transaction's first
/// statement takes the lock, which is right at READ COMMITTED, where each statement reads what
/// has committed when it starts) and step 4 is the COMMIT itself.
///
/// Requests served one by one come here: those with an idempotency key, all of them with
/// `COALESCE_BOOKINGS=0`, and any the coalescer hands back; the others are booked in batches
/// ([`book_batch`]).
///
/// The ticket is checked in step 3's read: a session that has ended books nothing
/// ([`BookingError::SessionEnded`]), and a live one costs no statement of its own.
///
/// With an idempotency key (`once`), step 3 runs at most once per key: a retry gets the first
/// answer back, booked or refused, and books nothing ([`crate::idempotency`]).
pub fn book(
    pool: &DbPool,
    turn: Turn,
    ticket: &Ticket,
    resource_id: i64,
    date: BookingDate,
    once: Option<&Once>,
) -> Result<Reservation, BookingError> {
    debug_assert_eq!(turn.name(), &pool.names().booking(resource_id, date.day()));
    // The day's lock lives exactly as long as the check-then-insert transaction: on PostgreSQL
    // the transaction-scoped advisory lock, let go by the COMMIT itself.
    crate::locking::in_one_transaction(pool, turn, Isolation::SessionDefault, |conn| {
        check_then_insert(conn, ticket, resource_id, date, once)
    })
    .and_then(std::convert::identity)
}

/// A day of one resource as the booking rules see it, read under the day's lock.
struct Day {
    capacity: i32,
    /// Confirmed bookings that day.
    confirmed: i64,
    /// Which of the requesting users already hold one of them.
    booked: HashSet<i64>,
    /// Why the resource is closed that day, if it is. A closure is inserted under this same
    /// day's lock (`batch::closure`), so it is never half-seen.
    closed: Option<String>,
    /// Whether each request's session is live, in arrival order.
    live: Vec<bool>,
}

/// Capacity, the day's count, whether the (first) requesting user is among them, whether the
/// resource is closed that day (and why), and how many of the requests' sessions are live, in
/// one statement. The resource's row is read with a
/// shared lock: staff may lower the capacity while we count (`resources::editing`), and that
/// save locks the row exclusively before it checks the bookings, so it waits for us to commit —
/// or we wait for it and read the new capacity. Bookings only share this lock, so they still
/// run in parallel across days. The subqueries are plain reads (a locking clause covers only
/// its own `SELECT`): they lock no booking and no session.
///
/// The sessions are checked here rather than before the request reached the pool
/// (`auth::session::Claimed`): one hop and one statement fewer per booking. The price is that a
/// request whose session has just ended gets as far as the day's lock before it is refused,
/// which any logged-in user could do anyway; the cookie is sealed, so nobody else can.
/// `{share}` is the shared row lock in the engine's words (`db::dialect`).
static READ_DAY: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        &format!(
            "SELECT r.capacity, \
             (SELECT COUNT(*) FROM reservations x \
               WHERE x.resource_id = r.id AND x.day = ? AND x.status = 'confirmed') AS confirmed, \
             (SELECT COUNT(*) FROM reservations x \
               WHERE x.resource_id = r.id AND x.day = ? AND x.status = 'confirmed' AND x.user_id = ?) AS mine, \
             (SELECT c.reason FROM resource_closures c WHERE c.resource_id = r.id AND c.day = ?) AS closed, \
             (SELECT COUNT(*) FROM user_sessions s WHERE {}) AS live \
             FROM resources r WHERE r.id = ? {{share}}",
            session::LIVE_SESSION
        ),
        &[1, 4, 8, 16, super::coalesce::MAX_BATCH],
    )
});

/// The other users of a batch who already hold a booking that day. Four statement texts cover
/// every batch up to `coalesce::MAX_BATCH`.
static READ_BOOKED: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT user_id FROM reservations \
         WHERE resource_id = ? AND day = ? AND status = 'confirmed' AND user_id IN ({list})",
        &[4, 8, 16, super::coalesce::MAX_BATCH],
    )
});

/// Reads the day for the requests of `tickets` (in arrival order); `None` when the resource
/// does not exist. One statement for a single request (the common case); a batch adds one for
/// its other users, and one more only when some of its sessions have ended.
fn read_day(
    conn: &mut DbConn,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
) -> Result<Option<Day>, BookingError> {
    // A batch holds one request at least and never more than MAX_BATCH, which the longest
    // texts take: anything else is a bug here, not something a request did.
    let bad_batch = || {
        BookingError::Infra(diesel::result::Error::QueryBuilderError("batch empty or too long".into()).into())
    };
    let users: Vec<i64> = tickets.iter().map(Ticket::user_id).collect();
    let mut sessions: Vec<&str> = tickets.iter().map(Ticket::session_id).collect();
    let (read_day, padded) = READ_DAY.padded(&sessions).ok_or_else(bad_batch)?;
    type Row = (i32, i64, i64, Option<String>, i64);
    let row: Option<Row> = cached_sql::<(Integer, BigInt, BigInt, Nullable<Text>, BigInt)>(read_day)
        .bind::<Date, _>(date.day())
        .bind::<Date, _>(date.day())
        .bind::<BigInt, _>(users[0])
        .bind::<Date, _>(date.day())
        .bind::<Timestamp, _>(session::live_after())
        .bind_each::<Text, _>(padded)
        .bind::<BigInt, _>(resource_id)
        .get_result(conn)
        .optional()?;
    let Some((capacity, confirmed, mine, closed, live)) = row else { return Ok(None) };
    let mut booked: HashSet<i64> = if mine > 0 { HashSet::from([users[0]]) } else { HashSet::new() };
    if let Some(others) = users.get(1..).filter(|others| !others.is_empty()) {
        let (sql, others) = READ_BOOKED.padded(others).ok_or_else(bad_batch)?;
        let found: Vec<i64> = cached_sql::<BigInt>(sql)
            .bind::<BigInt, _>(resource_id)
            .bind::<Date, _>(date.day())
            .bind_each::<BigInt, _>(others)
            .load(conn)?;
        booked.extend(found);
    }
    // The count is of distinct sessions (a double click sends one session twice).
    sessions.sort_unstable();
    sessions.dedup();
    let live = if usize::try_from(live).is_ok_and(|live| live == sessions.len()) {
        vec![true; tickets.len()]
    } else {
        session::current(conn, tickets)?.iter().map(Option::is_some).collect()
    };
    Ok(Some(Day { capacity, confirmed, booked, closed, live }))
}

const INSERT: &str = "INSERT INTO reservations (resource_id, user_id, day, status, created_at) \
     VALUES (?, ?, ?, 'confirmed', ?)";

/// Inserts one confirmed booking and returns it as stored, without reading it back: only the
/// id comes from the server. `created_at` is set here rather than by the column's default for
/// that reason (to the microsecond, what DATETIME(6) keeps).
fn insert(conn: &mut DbConn, user_id: i64, resource_id: i64, date: BookingDate) -> QueryResult<Reservation> {
    let created_at = crate::db::now_micros();
    cached_sql::<()>(INSERT)
        .bind::<BigInt, _>(resource_id)
        .bind::<BigInt, _>(user_id)
        .bind::<Date, _>(date.day())
        .bind::<Timestamp, _>(created_at)
        .execute(conn)?;
    Ok(Reservation {
        id: crate::db::last_insert_id(conn)?,
        resource_id,
        user_id,
        day: date.day(),
        status: ReservationStatus::Confirmed,
        created_at,
        cancelled_at: None,
    })
}

/// Check-then-insert. Correct only while `held` is the lock of this resource and day — which is
/// why it takes the guard: without the lock there is nothing to call it with.
fn insert_if_free(
    held: &mut NamedLockGuard,
    ticket: &Ticket,
    resource_id: i64,
    date: BookingDate,
    once: Option<&Once>,
) -> Result<Reservation, BookingError> {
    debug_assert_eq!(held.name().scope(), "book");
    crate::db::transaction(held.conn(), |conn| check_then_insert(conn, ticket, resource_id, date, once))
        .and_then(std::convert::identity)
}

/// The transaction's work for one request: read the day, decide, insert. Only ever run in a
/// transaction that holds the day's lock ([`insert_if_free`], [`book`]).
fn check_then_insert(
    conn: &mut DbConn,
    ticket: &Ticket,
    resource_id: i64,
    date: BookingDate,
    once: Option<&Once>,
) -> Result<Result<Reservation, BookingError>, BookingError> {
    idempotency::once(conn, once, |conn| {
        let tickets = std::slice::from_ref(ticket);
        let day =
            read_day(conn, resource_id, date, tickets)?.ok_or(BookingError::UnknownResource(resource_id))?;
        match day.verdicts(tickets)[0] {
            Verdict::Insert => Ok(insert(conn, ticket.user_id(), resource_id, date)?),
            Verdict::AlreadyBooked => Err(BookingError::AlreadyBooked),
            Verdict::FullyBooked => Err(BookingError::FullyBooked { capacity: day.capacity }),
            Verdict::Closed => Err(day.closed_error(date)),
            Verdict::SessionEnded => Err(BookingError::SessionEnded),
        }
    })
}

/// What one request of a batch gets, decided exactly as [`insert_if_free`] would decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Insert,
    AlreadyBooked,
    FullyBooked,
    Closed,
    SessionEnded,
}

impl Day {
    fn closed_error(&self, date: BookingDate) -> BookingError {
        BookingError::Closed { day: date.day(), reason: self.closed.clone().unwrap_or_default() }
    }

    /// The verdict of each request of `tickets` (as read by [`read_day`]): a request whose
    /// session has ended books nothing and takes no place from the ones after it.
    fn verdicts(&self, tickets: &[Ticket]) -> Vec<Verdict> {
        if self.closed.is_some() {
            let closed = |&live: &bool| if live { Verdict::Closed } else { Verdict::SessionEnded };
            return self.live.iter().map(closed).collect();
        }
        let live_users: Vec<i64> =
            tickets.iter().zip(&self.live).filter(|(_, live)| **live).map(|(t, _)| t.user_id()).collect();
        let mut decided = decide_batch(self.capacity, self.confirmed, &self.booked, &live_users).into_iter();
        self.live
            .iter()
            .map(
                |&live| {
                    if live { decided.next().unwrap_or(Verdict::SessionEnded) } else { Verdict::SessionEnded }
                },
            )
            .collect()
    }
}

/// The booking rules for several requests of one resource and day, in arrival order, against
/// the day as it stands (`confirmed` bookings, of which `booked` users hold one). The same
/// checks, in the same order, as running the requests one after another: the user's own
/// booking first, then the capacity, each request seeing the ones before it.
pub fn decide_batch(capacity: i32, confirmed: i64, booked: &HashSet<i64>, users: &[i64]) -> Vec<Verdict> {
    let mut confirmed = confirmed;
    let mut booked = booked.clone();
    users
        .iter()
        .map(|user| {
            if booked.contains(user) {
                Verdict::AlreadyBooked
            } else if confirmed >= i64::from(capacity) {
                Verdict::FullyBooked
            } else {
                booked.insert(*user);
                confirmed += 1;
                Verdict::Insert
            }
        })
        .collect()
}

/// Books the users of `tickets` (in arrival order) on one resource and day under one lock and one
/// transaction: one `GET_LOCK`, one read of the day, one commit for all of them, instead of one
/// each. Every request still gets its own answer, the one it would have got alone in that order.
///
/// The outer error is what every request of the batch would have met anyway (the lock stayed
/// held, the resource does not exist, a row stayed locked). If the batch's transaction is
/// chosen as a deadlock victim, no request is failed for it: each is then run on its own, in
/// order, under the same lock, exactly as without coalescing.
pub fn book_batch(
    pool: &DbPool,
    turn: Turn,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
) -> Result<Vec<Result<Reservation, BookingError>>, BookingError> {
    debug_assert_eq!(turn.name(), &pool.names().booking(resource_id, date.day()));
    let mut held = NamedLockGuard::acquire_pooled(pool, turn)?;
    let answers = match insert_batch_if_free(&mut held, resource_id, date, tickets) {
        Ok(answers) => answers,
        // A deadlock (with a capacity change, say) is about this transaction, not about any one
        // request: each is served on its own, in order, under the same lock.
        Err(batch_failed) if batch_failed.lock_conflict() == Some(LockConflict::Deadlock) => {
            log::warn!("a batch of {} bookings deadlocked; serving each on its own", tickets.len());
            let report = batch_failed
                .database_error()
                .and_then(|error| crate::deadlocks::capture(held.conn(), pool.url(), "booking batch", error));
            let answers: Vec<_> = tickets
                .iter()
                .map(|ticket| insert_if_free(&mut held, ticket, resource_id, date, None))
                .collect();
            if let Some(report) = report {
                let booked = answers.iter().filter(|a| a.is_ok()).count();
                let outcome = format!("served one by one: {booked} of {} booked", tickets.len());
                crate::deadlocks::settle(held.conn(), report, &outcome);
            }
            answers
        }
        // Anything else (a row lock held past its timeout, a lost connection) would meet every
        // single request too; the callers answer it, each within its own deadline.
        Err(other) => return Err(other),
    };
    drop(held); // committed above; only now may the next batch look at this day
    Ok(answers)
}

/// Check-then-insert for a whole batch, under the day's lock (hence the guard).
fn insert_batch_if_free(
    held: &mut NamedLockGuard,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
) -> Result<Vec<Result<Reservation, BookingError>>, BookingError> {
    debug_assert_eq!(held.name().scope(), "book");
    crate::db::transaction(held.conn(), |conn| {
        let day =
            read_day(conn, resource_id, date, tickets)?.ok_or(BookingError::UnknownResource(resource_id))?;
        tickets
            .iter()
            .zip(day.verdicts(tickets))
            .map(|(ticket, verdict)| match verdict {
                Verdict::Insert => Ok(Ok(insert(conn, ticket.user_id(), resource_id, date)?)),
                Verdict::AlreadyBooked => Ok(Err(BookingError::AlreadyBooked)),
                Verdict::FullyBooked => Ok(Err(BookingError::FullyBooked { capacity: day.capacity })),
                Verdict::Closed => Ok(Err(day.closed_error(date))),
                Verdict::SessionEnded => Ok(Err(BookingError::SessionEnded)),
            })
            .collect()
    })
}

/// Cancels the user's own confirmed reservation. Freeing a place needs no lock: it can only
/// make the capacity check of a concurrent booking more conservative, never wrong.
pub fn cancel(conn: &mut DbConn, user_id: i64, reservation_id: i64) -> Result<Reservation, BookingError> {
    crate::db::transaction(conn, |conn| {
        let mine = Reservation::by_id(reservation_id).filter(reservations::user_id.eq(user_id));
        let changed = diesel::update(
            reservations::table
                .filter(reservations::id.eq(reservation_id))
                .filter(reservations::user_id.eq(user_id))
                .filter(reservations::status.eq(ReservationStatus::Confirmed)),
        )
        .set((
            reservations::status.eq(ReservationStatus::Cancelled),
            reservations::cancelled_at.eq(chrono::Utc::now().naive_utc()),
        ))
        .execute(conn)?;
        let reservation = mine
            .select(Reservation::as_select())
            .first(conn)
            .optional()?
            .ok_or(BookingError::ReservationNotFound)?;
        if changed == 0 {
            return Err(BookingError::AlreadyCancelled);
        }
        Ok(reservation)
    })
}

/// A user's reservations, newest day first, with the resource's name.
pub fn my_reservations(conn: &mut DbConn, user_id: i64) -> Result<Vec<(Reservation, String)>, BookingError> {
    Ok(reservations::table
        .inner_join(resources::table)
        .filter(reservations::user_id.eq(user_id))
        .order((reservations::day.desc(), reservations::id.desc()))
        .select((Reservation::as_select(), resources::name))
        .limit(500)
        .load(conn)?)
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DayAvailability {
    pub date: NaiveDate,
    pub capacity: i32,
    pub confirmed: i64,
    pub available: i64,
    /// Whether the viewer has a confirmed booking that day (false when anonymous).
    pub mine: bool,
    /// Why the resource is closed that day, when it is (no booking is taken then).
    pub closed: Option<String>,
}

pub const MAX_AVAILABILITY_DAYS: u32 = 62;

/// Per-day counts for `days` days from `from`. A snapshot: a place shown free may be taken by
/// the time the user books it, which the booking itself then answers with 409.
pub fn availability(
    conn: &mut DbConn,
    resource_id: i64,
    from: NaiveDate,
    days: u32,
    viewer: Option<i64>,
) -> Result<(Resource, Vec<DayAvailability>), BookingError> {
    if !(1..=MAX_AVAILABILITY_DAYS).contains(&days) {
        return Err(BookingError::InvalidRange(format!(
            "days must be between 1 and {MAX_AVAILABILITY_DAYS}."
        )));
    }
    let resource = Resource::find(conn, resource_id)?.ok_or(BookingError::ResourceNotFound(resource_id))?;
    let to = from + chrono::Days::new(u64::from(days) - 1);
    let in_range = reservations::table
        .filter(reservations::resource_id.eq(resource_id))
        .filter(reservations::status.eq(ReservationStatus::Confirmed))
        .filter(reservations::day.between(from, to));
    let counts: Vec<(NaiveDate, i64)> = in_range
        .group_by(reservations::day)
        .select((reservations::day, diesel::dsl::count_star()))
        .load(conn)?;
    let mine: Vec<NaiveDate> = match viewer {
        Some(user_id) => {
            in_range.filter(reservations::user_id.eq(user_id)).select(reservations::day).load(conn)?
        }
        None => Vec::new(),
    };
    let closed: Vec<(NaiveDate, String)> = resource_closures::table
        .filter(resource_closures::resource_id.eq(resource_id))
        .filter(resource_closures::day.between(from, to))
        .select((resource_closures::day, resource_closures::reason))
        .load(conn)?;
    let days = from
        .iter_days()
        .take(days as usize)
        .map(|date| {
            let confirmed = counts.iter().find(|(d, _)| *d == date).map_or(0, |(_, n)| *n);
            DayAvailability {
                date,
                capacity: resource.capacity,
                confirmed,
                available: (i64::from(resource.capacity) - confirmed).max(0),
                mine: mine.contains(&date),
                closed: closed.iter().find(|(d, _)| *d == date).map(|(_, why)| why.clone()),
            }
        })
        .collect();
    Ok((resource, days))
}

pub use crate::resources::model::today;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{Verdict, decide_batch};

    fn none() -> HashSet<i64> {
        HashSet::new()
    }

    #[test]
    fn a_batch_fills_the_day_in_arrival_order_and_refuses_the_rest() {
        use Verdict::*;
        assert_eq!(decide_batch(2, 0, &none(), &[1, 2, 3]), [Insert, Insert, FullyBooked]);
        // Someone outside the batch (user 9) holds one of the three places.
        assert_eq!(decide_batch(3, 1, &none(), &[1, 2, 3]), [Insert, Insert, FullyBooked]);
        assert_eq!(decide_batch(1, 0, &none(), &[]), []);
    }

    #[test]
    fn one_booking_per_user_holds_within_a_batch_and_against_the_day() {
        use Verdict::*;
        assert_eq!(decide_batch(5, 0, &none(), &[1, 1, 2]), [Insert, AlreadyBooked, Insert]);
        assert_eq!(decide_batch(5, 1, &HashSet::from([1]), &[1, 2]), [AlreadyBooked, Insert]);
        // The user's own booking is checked before the capacity, as a single request would.
        assert_eq!(decide_batch(1, 1, &HashSet::from([1]), &[1]), [AlreadyBooked]);
    }
}
