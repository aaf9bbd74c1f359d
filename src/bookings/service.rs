//! The booking rules and the locking that makes them hold under concurrency.
//!
//! Read [`book`] first: the lesson, check-then-insert under the day's named lock, step by step.
//! Its steps 4 to 6 are [`check_then_insert`] (the day's read, the rules of
//! [`decide_in_arrival_order`], the insert), which [`super::batch::book_batch`], the coalesced
//! path, runs for many requests under one lock.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Nullable, Text, Timestamp};
use serde::Serialize;

use super::BookingError;
use super::model::{BookingDate, Reservation, ReservationStatus, Stay, first_check_in_covering};
use crate::auth::session::{self, Ticket};
use crate::db::cached::ListStatements;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::idempotency::{self, Once};
use crate::locking::{Isolation, Turn};
use crate::resources::Resource;
use crate::schema::{reservations, resource_closures, resources};

/// Books `resource_id` on `date` for the user of `ticket`: at most `capacity` confirmed bookings
/// per day and at most one per user and day, however many requests arrive at once, on however
/// many instances of the app. **This is the lesson** (`docs/named-lock-check-then-insert.md`):
/// read it top to bottom.
///
/// 1. Take the day's named lock — `haita:{tag}:book:{resource}:{date}`, on a pooled connection,
///    bounded wait (→ 503 busy) — and
/// 2. BEGIN on that same connection. The lock is held for exactly this one transaction
///    ([`transaction_under_lock`](crate::locking::transaction_under_lock)). On MySQL the
///    lock comes first, so that the transaction's snapshot is taken after the previous holder
///    committed (under REPEATABLE READ a snapshot taken before the lock would still see the old
///    count). On PostgreSQL BEGIN comes first and the transaction-scoped advisory lock is its
///    first statement, which is right at READ COMMITTED, where each statement reads what has
///    committed when it starts.
/// 3. Lock the user's row (`SELECT … FOR UPDATE` on `users`): the per-user quota counted in
///    step 4 is then exact ([`crate::auth::quota`]).
/// 4. Read the day, 5. decide, 6. insert if the day and the user allow it:
///    [`check_then_insert`], the very steps a coalesced batch runs for each of its requests.
/// 7. COMMIT (a refusal: ROLLBACK), then
/// 8. release the lock — on PostgreSQL the COMMIT itself lets go of it.
///
/// The layers around it, each named where it applies:
/// - **The per-key queue** (before step 1, off the pool): the caller waited in memory for this
///   instance's turn at the day's lock ([`Turn`], `locking::queue`), so one hot day cannot take
///   every connection.
/// - **Ask with 0 first** (inside step 1): the lock is asked for without waiting; only a lock
///   held elsewhere is waited for, within the turn and the waiting budget
///   (`locking::named::ask_then_wait`).
/// - **The session check folded into the read** (step 4): whether the ticket's session is still
///   live is one more column of the day's read, not a statement of its own; a session that has
///   ended books nothing ([`BookingError::SessionEnded`]).
/// - **Idempotency** (around steps 4–6): with a key (`once`), they run at most once per key, and
///   a retry gets the first answer back, booked or refused, and books nothing
///   ([`crate::idempotency`]). The claim comes after step 3 (the user's row lock must precede
///   every read of the transaction), so a replayed request gets its stored answer, never a
///   quota refusal.
/// - **Coalescing** (instead of this function, for requests that queue): without a key, and with
///   `BOOKING_COALESCING` on, requests that queue for one day are booked in batches, steps 1–8
///   once for many ([`super::batch::book_batch`]). Here come the keyed requests, every request the coalescer
///   finds alone at its day, all of them with `BOOKING_COALESCING=false`, and any a batch hands
///   back.
///
/// The quota: the user may hold at most `max_future` confirmed bookings of today or later
/// (`MAX_FUTURE_BOOKINGS_PER_USER`), past which the booking is refused with
/// [`BookingError::Quota`]. The day's lock cannot make that count exact: two requests of one
/// user for two *different* days hold two different day locks and would both count the same
/// total. Hence step 3: a second request of the same user, whatever its day, waits there until
/// the first has committed, and then counts the first one's booking too.
pub fn book(
    pool: &DbPool,
    turn: Turn,
    ticket: &Ticket,
    resource_id: i64,
    date: BookingDate,
    once: Option<&Once>,
    max_future: u32,
) -> Result<Reservation, BookingError> {
    debug_assert_eq!(turn.name(), &pool.names().booking(resource_id, date.day()));
    // 1. Take the day's lock and 2. BEGIN (on PostgreSQL: BEGIN, then the lock).
    crate::locking::transaction_under_lock(pool, turn, Isolation::SessionDefault, |conn| {
        // 3. Lock the user's row: the quota of step 4 counts after it.
        crate::auth::quota::lock_users(conn, &[ticket.user_id()])?;
        // Idempotency: steps 4 to 6 at most once per key (without a key, they just run).
        idempotency::once(conn, once, |conn| {
            // 4. Read the day, 5. decide, 6. insert if granted.
            check_then_insert_one(conn, resource_id, date, ticket, max_future)
        })
    })
    // 7. COMMIT, or ROLLBACK on a refusal, and 8. release: both done as the call returns.
    .and_then(std::convert::identity)
}

/// Steps 4 to 6 of [`book`], for the requests of `tickets` in arrival order ([`book`] passes its
/// one request): read the day, decide each request against it, insert the granted ones.
/// Only ever run in a transaction that holds the day's lock and has locked the users' rows
/// ([`book`], [`super::batch::book_batch`]).
///
/// The outer error is the transaction's (a statement failed, the resource does not exist); each
/// inner result is one request's answer.
pub(super) fn check_then_insert(
    conn: &mut DbConn,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
    max_future: u32,
) -> Result<Vec<Result<Reservation, BookingError>>, BookingError> {
    // 4. Read the day: capacity, the count, the closure, the users' bookings, the sessions.
    let day = read_day(conn, resource_id, date, tickets, max_future)?
        .ok_or(BookingError::UnknownResource(resource_id))?;
    // 5. Decide each request in arrival order, each seeing the ones before it.
    let verdicts = day.decide(tickets);
    // 6. Insert the granted ones; the refused get their answer.
    tickets
        .iter()
        .zip(verdicts)
        .map(|(ticket, verdict)| match verdict {
            Verdict::Insert => Ok(Ok(insert(conn, ticket.user_id(), resource_id, Stay::one_night(date))?)),
            refused => Ok(Err(day.refusal(refused, ticket, date))),
        })
        .collect()
}

/// [`check_then_insert`] for one request, and its answer: what [`book`] runs, and what a batch
/// runs for each of its requests when it falls back to them one by one.
pub(super) fn check_then_insert_one(
    conn: &mut DbConn,
    resource_id: i64,
    date: BookingDate,
    ticket: &Ticket,
    max_future: u32,
) -> Result<Reservation, BookingError> {
    let mut answers = check_then_insert(conn, resource_id, date, std::slice::from_ref(ticket), max_future)?;
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => answer,
        _ => Err(bad_batch()),
    }
}

/// A batch holds one request at least and never more than `coalesce::MAX_BATCH`, which the
/// longest statement texts take: anything else is a bug here, not something a request did.
fn bad_batch() -> BookingError {
    BookingError::Infra(diesel::result::Error::QueryBuilderError("batch empty or too long".into()).into())
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
    /// The requesting users' confirmed bookings of today or later, counted after their rows were
    /// locked ([`crate::auth::quota`]); a user without any is missing.
    held: HashMap<i64, i64>,
    /// `MAX_FUTURE_BOOKINGS_PER_USER`.
    max_future: i64,
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
///
/// What each count reads is bounded by the days and the user it is about, never by the history
/// (the budget `tests/it/reads.rs` holds it to, from the server's own counters):
/// - "the day's count" counts stays too: every confirmed reservation that covers the night,
///   `day <= night < check_out`, found in a range of the slot index no longer than a stay can
///   be ([`first_check_in_covering`]): the reservations that began in the fortnight up to the
///   night, read from the index alone. A stay that covers this night took this day's lock as
///   well (`stays::book_stay`), so the count is as exact as it is for bookings of one day. (One
///   range per stay length would read only the night's own reservations, a fifth of the
///   entries on a hotel's data, but planning fourteen ranges cost MariaDB more CPU than the
///   entries it saved: `docs/benchmarks.md`);
/// - the user's own booking of the night: the user's reservations that began in that
///   fortnight (`reservations_by_user`), a handful at most;
/// - the user's future bookings (`held`), counted in nights — a booking of one day is one, a
///   stay its `nights` — over the bookings not over yet (`check_out` after today), so that the
///   quota holds stays to the same number of nights as days (`MAX_FUTURE_BOOKINGS_PER_USER`).
///   The index `reservations_future_by_user` ends the range where the user's future ends and
///   holds the nights, so it reads one entry per future booking and no row: at most the quota
///   itself, since every booking holds a night at least.
///
/// The resource's id is bound in the user's subquery rather than taken from the outer row, so
/// that the server plans it as a range of the user's index with every bound known.
static READ_DAY: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        &format!(
            "SELECT r.capacity, \
             (SELECT COUNT(*) FROM reservations x WHERE x.resource_id = r.id \
               AND x.day BETWEEN ? AND ? AND x.status = 'confirmed' AND x.check_out > ?) AS confirmed, \
             (SELECT COUNT(*) FROM reservations x WHERE x.user_id = ? AND x.day BETWEEN ? AND ? \
               AND x.resource_id = ? AND x.status = 'confirmed' AND x.check_out > ?) AS mine, \
             (SELECT c.reason FROM resource_closures c WHERE c.resource_id = r.id AND c.day = ?) AS closed, \
             (SELECT COUNT(*) FROM user_sessions s WHERE {}) AS live, \
             (SELECT COALESCE(SUM(x.nights), 0) FROM reservations x \
               WHERE x.user_id = ? AND x.status = 'confirmed' AND x.check_out > ?) AS held \
             FROM resources r WHERE r.id = ? {{share}}",
            session::LIVE_SESSION
        ),
        &[1, 4, 8, 16, super::coalesce::MAX_BATCH],
    )
});

/// The other users of a batch who already hold a booking that day: each one's reservations
/// that began in the fortnight up to it (`reservations_by_user`). Four statement texts cover
/// every batch up to `coalesce::MAX_BATCH`.
static READ_BOOKED: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT user_id FROM reservations \
         WHERE user_id IN ({list}) AND day BETWEEN ? AND ? AND resource_id = ? AND status = 'confirmed' \
           AND check_out > ?",
        &[4, 8, 16, super::coalesce::MAX_BATCH],
    )
});

/// The nights of the bookings not over yet of a batch's other users (the first one's are
/// counted by [`READ_DAY`]), from `reservations_future_by_user` alone.
static READ_HELD: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT user_id, SUM(nights) FROM reservations \
         WHERE user_id IN ({list}) AND status = 'confirmed' AND check_out > ? GROUP BY user_id",
        &[4, 8, 16, super::coalesce::MAX_BATCH],
    )
});

/// Reads the day for the requests of `tickets` (in arrival order); `None` when the resource
/// does not exist. One statement for a single request (the common case); a batch adds two for
/// its other users (their bookings that day, their future bookings), and one more only when some
/// of its sessions have ended. Only ever called after the users' rows were locked
/// ([`crate::auth::quota::lock_users`]), so the future bookings it counts are final until COMMIT.
fn read_day(
    conn: &mut DbConn,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
    max_future: u32,
) -> Result<Option<Day>, BookingError> {
    let users: Vec<i64> = tickets.iter().map(Ticket::user_id).collect();
    let mut sessions: Vec<&str> = tickets.iter().map(Ticket::session_id).collect();
    let (read_day, padded) = READ_DAY.padded(&sessions).ok_or_else(bad_batch)?;
    let (today, night) = (today(), date.day());
    let earliest = first_check_in_covering(night);
    type Row = (i32, i64, i64, Option<String>, i64, i64);
    let row: Option<Row> = cached_sql::<(Integer, BigInt, BigInt, Nullable<Text>, BigInt, BigInt)>(read_day)
        .bind::<Date, _>(earliest)
        .bind::<Date, _>(night)
        .bind::<Date, _>(night)
        .bind::<BigInt, _>(users[0])
        .bind::<Date, _>(earliest)
        .bind::<Date, _>(night)
        .bind::<BigInt, _>(resource_id)
        .bind::<Date, _>(night)
        .bind::<Date, _>(night)
        .bind::<Timestamp, _>(session::live_after())
        .bind_each::<Text, _>(padded)
        .bind::<BigInt, _>(users[0])
        .bind::<Date, _>(today)
        .bind::<BigInt, _>(resource_id)
        .get_result(conn)
        .optional()?;
    let Some((capacity, confirmed, mine, closed, live, first_held)) = row else { return Ok(None) };
    let mut held = HashMap::from([(users[0], first_held)]);
    let mut booked: HashSet<i64> = if mine > 0 { HashSet::from([users[0]]) } else { HashSet::new() };
    if let Some(others) = users.get(1..).filter(|others| !others.is_empty()) {
        let (sql, padded) = READ_BOOKED.padded(others).ok_or_else(bad_batch)?;
        let found: Vec<i64> = cached_sql::<BigInt>(sql)
            .bind_each::<BigInt, _>(padded)
            .bind::<Date, _>(earliest)
            .bind::<Date, _>(night)
            .bind::<BigInt, _>(resource_id)
            .bind::<Date, _>(night)
            .load(conn)?;
        booked.extend(found);
        let (sql, padded) = READ_HELD.padded(others).ok_or_else(bad_batch)?;
        let counted: Vec<(i64, i64)> = cached_sql::<(BigInt, BigInt)>(sql)
            .bind_each::<BigInt, _>(padded)
            .bind::<Date, _>(today)
            .load(conn)?;
        held.extend(counted);
    }
    // The count is of distinct sessions (a double click sends one session twice).
    sessions.sort_unstable();
    sessions.dedup();
    let live = if usize::try_from(live).is_ok_and(|live| live == sessions.len()) {
        vec![true; tickets.len()]
    } else {
        session::current(conn, tickets)?.iter().map(Option::is_some).collect()
    };
    let max_future = i64::from(max_future);
    Ok(Some(Day { capacity, confirmed, booked, closed, live, held, max_future }))
}

const INSERT: &str = "INSERT INTO reservations (resource_id, user_id, day, check_out, status, created_at) \
     VALUES (?, ?, ?, ?, 'confirmed', ?)";

/// Inserts one confirmed booking — of one day, or a stay — and returns it as stored, without
/// reading it back: only the id comes from the server. `created_at` is set here rather than by
/// the column's default for that reason (to the microsecond, what DATETIME(6) keeps).
pub(super) fn insert(
    conn: &mut DbConn,
    user_id: i64,
    resource_id: i64,
    stay: Stay,
) -> QueryResult<Reservation> {
    let created_at = crate::db::now_micros();
    cached_sql::<()>(INSERT)
        .bind::<BigInt, _>(resource_id)
        .bind::<BigInt, _>(user_id)
        .bind::<Date, _>(stay.check_in())
        .bind::<Date, _>(stay.check_out())
        .bind::<Timestamp, _>(created_at)
        .execute(conn)?;
    Ok(Reservation {
        id: crate::db::last_insert_id(conn)?,
        resource_id,
        user_id,
        day: stay.check_in(),
        check_out: stay.check_out(),
        status: ReservationStatus::Confirmed,
        created_at,
        cancelled_at: None,
    })
}

/// What one request gets: step 5 of [`book`], for one request or each of a batch's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Insert,
    AlreadyBooked,
    FullyBooked,
    /// The user holds `MAX_FUTURE_BOOKINGS_PER_USER` future bookings already.
    OverQuota,
    Closed,
    SessionEnded,
}

impl Day {
    /// What a refused request of `ticket` is answered.
    fn refusal(&self, verdict: Verdict, ticket: &Ticket, date: BookingDate) -> BookingError {
        match verdict {
            Verdict::AlreadyBooked | Verdict::Insert => BookingError::AlreadyBooked,
            Verdict::FullyBooked => BookingError::FullyBooked { capacity: self.capacity },
            Verdict::OverQuota => {
                BookingError::Quota { held: self.held.get(&ticket.user_id()).copied().unwrap_or(0) }
            }
            Verdict::Closed => {
                BookingError::Closed { day: date.day(), reason: self.closed.clone().unwrap_or_default() }
            }
            Verdict::SessionEnded => BookingError::SessionEnded,
        }
    }

    /// Step 5 of [`book`]: the verdict of each request of `tickets` (as read by [`read_day`]),
    /// by [`decide_in_arrival_order`]. A request whose session has ended books nothing and takes
    /// no place from the ones after it.
    fn decide(&self, tickets: &[Ticket]) -> Vec<Verdict> {
        if self.closed.is_some() {
            let closed = |&live: &bool| if live { Verdict::Closed } else { Verdict::SessionEnded };
            return self.live.iter().map(closed).collect();
        }
        let live_users: Vec<i64> =
            tickets.iter().zip(&self.live).filter(|(_, live)| **live).map(|(t, _)| t.user_id()).collect();
        let quota = Quota { max: self.max_future, held: &self.held };
        let mut decided =
            decide_in_arrival_order(self.capacity, self.confirmed, &self.booked, &quota, &live_users)
                .into_iter();
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

/// The per-user cap on future bookings as a batch sees it: `max`, and what each user holds
/// already (a user missing from `held` holds none).
pub struct Quota<'a> {
    pub max: i64,
    pub held: &'a HashMap<i64, i64>,
}

/// The booking rules, with no database in sight: the requests of one resource and day (one, or a
/// batch's), in arrival order, against the day as it stands (`confirmed` bookings, of which
/// `booked` users hold one) and the users' future bookings (`quota`). For each request: the
/// user's own booking first, then the capacity, then the user's quota, each request seeing the
/// ones before it — a user twice in a batch counts the first one's booking. So a batch gets
/// exactly the answers its requests would have got one after another.
pub fn decide_in_arrival_order(
    capacity: i32,
    confirmed: i64,
    booked: &HashSet<i64>,
    quota: &Quota<'_>,
    users: &[i64],
) -> Vec<Verdict> {
    let mut confirmed = confirmed;
    let mut booked = booked.clone();
    let mut held = quota.held.clone();
    users
        .iter()
        .map(|user| {
            let mine = held.entry(*user).or_insert(0);
            if booked.contains(user) {
                Verdict::AlreadyBooked
            } else if confirmed >= i64::from(capacity) {
                Verdict::FullyBooked
            } else if *mine >= quota.max {
                Verdict::OverQuota
            } else {
                booked.insert(*user);
                confirmed += 1;
                *mine += 1;
                Verdict::Insert
            }
        })
        .collect()
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
        return Err(BookingError::InvalidRange { max: MAX_AVAILABILITY_DAYS });
    }
    let resource = Resource::find(conn, resource_id)?.ok_or(BookingError::ResourceNotFound(resource_id))?;
    let to = from + chrono::Days::new(u64::from(days) - 1);
    // Every confirmed reservation with a night in the range, stays that began before it too,
    // counted per span of nights (a few dozen rows however many bookings there are).
    let in_range = reservations::table
        .filter(reservations::resource_id.eq(resource_id))
        .filter(reservations::day.between(first_check_in_covering(from), to))
        .filter(reservations::status.eq(ReservationStatus::Confirmed))
        .filter(reservations::check_out.gt(from));
    let spans: Vec<(NaiveDate, NaiveDate, i64)> = in_range
        .group_by((reservations::day, reservations::check_out))
        .select((reservations::day, reservations::check_out, diesel::dsl::count_star()))
        .load(conn)?;
    let mine: Vec<(NaiveDate, NaiveDate)> = match viewer {
        Some(user_id) => in_range
            .filter(reservations::user_id.eq(user_id))
            .select((reservations::day, reservations::check_out))
            .load(conn)?,
        None => Vec::new(),
    };
    let covers =
        |date: NaiveDate| move |(day, check_out): &(NaiveDate, NaiveDate)| *day <= date && date < *check_out;
    let closed: Vec<(NaiveDate, String)> = resource_closures::table
        .filter(resource_closures::resource_id.eq(resource_id))
        .filter(resource_closures::day.between(from, to))
        .select((resource_closures::day, resource_closures::reason))
        .load(conn)?;
    let days = from
        .iter_days()
        .take(days as usize)
        .map(|date| {
            let confirmed = spans
                .iter()
                .filter(|(day, check_out, _)| covers(date)(&(*day, *check_out)))
                .map(|(_, _, n)| n)
                .sum();
            DayAvailability {
                date,
                capacity: resource.capacity,
                confirmed,
                available: (i64::from(resource.capacity) - confirmed).max(0),
                mine: mine.iter().any(covers(date)),
                closed: closed.iter().find(|(d, _)| *d == date).map(|(_, why)| why.clone()),
            }
        })
        .collect();
    Ok((resource, days))
}

pub use crate::resources::model::today;

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::{Quota, Verdict};

    fn none() -> HashSet<i64> {
        HashSet::new()
    }

    /// No user holds anything and the cap is far away.
    fn decide(capacity: i32, confirmed: i64, booked: &HashSet<i64>, users: &[i64]) -> Vec<Verdict> {
        let held = HashMap::new();
        super::decide_in_arrival_order(capacity, confirmed, booked, &Quota { max: 30, held: &held }, users)
    }

    #[test]
    fn a_batch_fills_the_day_in_arrival_order_and_refuses_the_rest() {
        use Verdict::*;
        assert_eq!(decide(2, 0, &none(), &[1, 2, 3]), [Insert, Insert, FullyBooked]);
        // Someone outside the batch (user 9) holds one of the three places.
        assert_eq!(decide(3, 1, &none(), &[1, 2, 3]), [Insert, Insert, FullyBooked]);
        assert_eq!(decide(1, 0, &none(), &[]), []);
    }

    #[test]
    fn one_booking_per_user_holds_within_a_batch_and_against_the_day() {
        use Verdict::*;
        assert_eq!(decide(5, 0, &none(), &[1, 1, 2]), [Insert, AlreadyBooked, Insert]);
        assert_eq!(decide(5, 1, &HashSet::from([1]), &[1, 2]), [AlreadyBooked, Insert]);
        // The user's own booking is checked before the capacity, as a single request would.
        assert_eq!(decide(1, 1, &HashSet::from([1]), &[1]), [AlreadyBooked]);
    }

    #[test]
    fn a_user_at_the_cap_is_refused_and_one_under_it_books_once() {
        use Verdict::*;
        let held = HashMap::from([(1, 3), (2, 2)]);
        let quota = Quota { max: 3, held: &held };
        assert_eq!(
            super::decide_in_arrival_order(9, 0, &none(), &quota, &[1, 2, 3]),
            [OverQuota, Insert, Insert]
        );
        // A full day is said before the quota: cancelling another booking would not help.
        assert_eq!(super::decide_in_arrival_order(0, 0, &none(), &quota, &[1]), [FullyBooked]);
    }
}
