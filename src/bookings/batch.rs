//! The coalesced path of bookings: the requests that queued for one day, booked with the steps
//! of [`super::service::book`] run once for all of them ([`book_batch`]). `super::coalesce`
//! gathers them; a request alone at its day runs `book` itself.

use super::BookingError;
use super::model::{BookingDate, Reservation};
use super::service::{check_then_insert, check_then_insert_one};
use crate::auth::session::Ticket;
use crate::db::DbPool;
use crate::locking::retry::{LockConflict, MayConflict};
use crate::locking::{NamedLockGuard, Turn};

/// Coalescing, the layer that books many requests at once (`bookings::coalesce` gathers them):
/// the users of `tickets`, in arrival order, on one resource and day, with the steps of [`book`]
/// run once for all of them — one lock, one read of the day, one commit, instead of one each.
/// Every request still gets its own answer, the one it would have got alone in that order
/// ([`decide_in_arrival_order`]).
///
/// The lock is the session's, held by a guard, on both engines: it must outlive the transaction.
/// If the batch's transaction is chosen as a deadlock victim, no request is failed for it: each
/// is then run on its own, in order, under the same lock ([`one_by_one_after_deadlock`]).
///
/// The outer error is what every request of the batch would have met anyway (the lock stayed
/// held, the resource does not exist, a row stayed locked).
pub fn book_batch(
    pool: &DbPool,
    turn: Turn,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
    max_future: u32,
) -> Result<Vec<Result<Reservation, BookingError>>, BookingError> {
    debug_assert_eq!(turn.name(), &pool.names().booking(resource_id, date.day()));
    let users: Vec<i64> = tickets.iter().map(Ticket::user_id).collect();
    // 1. Take the day's lock, held by a guard that outlives the transaction.
    let mut day_lock = NamedLockGuard::acquire_pooled(pool, turn)?;
    // 2. BEGIN on the connection that holds it.
    let decided = crate::db::transaction(day_lock.conn(), |conn| {
        // 3. Lock all the users' rows, in ascending id: two batches of two days sharing users
        //    queue instead of deadlocking, and each user's quota is decided as if alone.
        crate::auth::quota::lock_users(conn, &users)?;
        // 4. Read the day once, 5. decide each request in arrival order, 6. insert the granted.
        check_then_insert(conn, resource_id, date, tickets, max_future)
    }); // 7. COMMIT
    let answers = match decided {
        Ok(answers) => answers,
        // A deadlock (with a capacity change, say) is about this transaction, not about any one
        // request.
        Err(batch_failed) if batch_failed.lock_conflict() == Some(LockConflict::Deadlock) => {
            one_by_one_after_deadlock(
                &mut day_lock,
                pool,
                &batch_failed,
                resource_id,
                date,
                tickets,
                max_future,
            )
        }
        // Anything else (a row lock held past its timeout, a lost connection) would meet every
        // single request too; the callers answer it, each within its own deadline.
        Err(other) => return Err(other),
    };
    // 8. Release: committed above; only now may the next batch look at this day.
    drop(day_lock);
    Ok(answers)
}

/// The batch's fallback when its transaction lost a deadlock: steps 2 to 7 of [`book`] for each
/// request on its own, in arrival order, under the lock the batch still holds — exactly as
/// without coalescing. The deadlock is recorded (`crate::deadlocks`) with what became of it.
fn one_by_one_after_deadlock(
    day_lock: &mut NamedLockGuard,
    pool: &DbPool,
    batch_failed: &BookingError,
    resource_id: i64,
    date: BookingDate,
    tickets: &[Ticket],
    max_future: u32,
) -> Vec<Result<Reservation, BookingError>> {
    debug_assert_eq!(day_lock.name().scope(), "book");
    log::warn!("a batch of {} bookings deadlocked; serving each on its own", tickets.len());
    let report = batch_failed
        .database_error()
        .and_then(|error| crate::deadlocks::capture(day_lock.conn(), pool.url(), "booking batch", error));
    let answers: Vec<_> = tickets
        .iter()
        .map(|ticket| {
            crate::db::transaction(day_lock.conn(), |conn| {
                crate::auth::quota::lock_users(conn, &[ticket.user_id()])?;
                check_then_insert_one(conn, resource_id, date, ticket, max_future)
            })
        })
        .collect();
    if let Some(report) = report {
        let booked = answers.iter().filter(|a| a.is_ok()).count();
        let outcome = format!("served one by one: {booked} of {} booked", tickets.len());
        crate::deadlocks::settle(day_lock.conn(), report, &outcome);
    }
    answers
}
