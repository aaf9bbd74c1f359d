//! Closing a resource on a day (maintenance): no new booking that day, and the bookings already
//! made are counted and named, never cancelled silently.
//!
//! A closure is a write to a resource that staff edit under edit locks, and to a day that
//! bookings check under the day's named lock. So [`close_day`] needs both: it runs on the
//! connection that holds the day's booking lock (the guard), and its first statement proves, in
//! its own transaction, that the closer holds the resource's edit lock ([`service::recheck_for_save`]), as
//! every save of a resource does. A booking of that day therefore either committed before the
//! closure (and is in [`Closed::Closed::bookings`]) or reads the closure and is refused.

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Nullable, Text, Timestamp};

use super::ResourceError;
use crate::audit::{self, Action};
use crate::db::{DbConn, cached_sql};
use crate::edit_locks::service;
use crate::edit_locks::{EditLockKey, Owner};
use crate::locking::NamedLockGuard;

/// One day to close, and why.
pub struct Closing<'a> {
    pub resource_id: i64,
    pub day: NaiveDate,
    pub reason: &'a str,
    /// The batch run doing it, for the record.
    pub run_id: Option<i64>,
}

/// How the resource's row is locked before the day is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLock {
    /// `FOR UPDATE`: wait (up to the server's lock wait timeout) for bookings of other days in
    /// flight, which read the row in share mode.
    Wait,
    /// `FOR UPDATE SKIP LOCKED`: a row locked right now is left alone ([`Closed::RowBusy`]).
    SkipLocked,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// Closed now; these confirmed bookings (ids) were made before, and stand.
    Closed { bookings: Vec<i64> },
    /// It was closed already (an earlier run); nothing changed.
    AlreadyClosed,
    /// [`RowLock::SkipLocked`] met the row locked; nothing changed.
    RowBusy,
}

/// Closes the day of `closing` as `owner`, who must hold the resource's edit lock in acquisition
/// `epoch`; `held` must be the day's booking lock (see the module).
pub fn close_day(
    held: &mut NamedLockGuard,
    owner: &Owner,
    epoch: i64,
    closing: &Closing<'_>,
    row_lock: RowLock,
) -> Result<Closed, ResourceError> {
    debug_assert_eq!(held.name().scope(), "book");
    let Closing { resource_id, day, reason, run_id } = *closing;
    let key = EditLockKey::resource(resource_id);
    crate::db::transaction(held.conn(), |conn| {
        let token = service::recheck_for_save(conn, &key, owner, epoch)?;
        let lock_row = match row_lock {
            RowLock::Wait => "SELECT version FROM resources WHERE id = ? FOR UPDATE",
            RowLock::SkipLocked => "SELECT version FROM resources WHERE id = ? FOR UPDATE SKIP LOCKED",
        };
        let locked: Option<i32> =
            cached_sql::<Integer>(lock_row).bind::<BigInt, _>(resource_id).get_result(conn).optional()?;
        if locked.is_none() {
            // Resources are never deleted: a row that is not returned is one locked right now.
            return match row_lock {
                RowLock::SkipLocked => Ok(Closed::RowBusy),
                RowLock::Wait => Err(ResourceError::NotFound(resource_id)),
            };
        }
        let already: Option<i32> =
            cached_sql::<Integer>("SELECT 1 FROM resource_closures WHERE resource_id = ? AND day = ?")
                .bind::<BigInt, _>(resource_id)
                .bind::<Date, _>(day)
                .get_result(conn)
                .optional()?;
        if already.is_some() {
            return Ok(Closed::AlreadyClosed);
        }
        // Under the day's lock, so no booking of the day is in flight: this is all of them,
        // stays that cover the night included (a stay takes the lock of each of its days).
        let bookings: Vec<i64> = cached_sql::<BigInt>(
            "SELECT id FROM reservations WHERE resource_id = ? AND day BETWEEN ? AND ? \
               AND status = 'confirmed' AND check_out > ? ORDER BY id",
        )
        .bind::<BigInt, _>(resource_id)
        .bind::<Date, _>(super::model::first_check_in_covering(day))
        .bind::<Date, _>(day)
        .bind::<Date, _>(day)
        .load(conn)?;
        cached_sql::<()>(
            "INSERT INTO resource_closures \
               (resource_id, day, reason, bookings_at_close, run_id, closed_by, closed_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind::<BigInt, _>(resource_id)
        .bind::<Date, _>(day)
        .bind::<Text, _>(reason)
        .bind::<Integer, _>(i32::try_from(bookings.len()).unwrap_or(i32::MAX))
        .bind::<Nullable<BigInt>, _>(run_id)
        .bind::<BigInt, _>(token.owner().user_id)
        .bind::<Timestamp, _>(crate::db::now_micros())
        .execute(conn)?;
        cached_sql::<()>("UPDATE resources SET version = version + 1 WHERE id = ?")
            .bind::<BigInt, _>(resource_id)
            .execute(conn)?;
        let standing = match bookings.as_slice() {
            [] => "no booking stands".to_string(),
            ids => format!(
                "{} booking(s) stand and must be dealt with: {}",
                ids.len(),
                ids.iter().map(|id| format!("#{id}")).collect::<Vec<_>>().join(", ")
            ),
        };
        let by = run_id.map(|id| format!(" by batch run {id}")).unwrap_or_default();
        audit::record(
            conn,
            Some(token.owner().user_id),
            Action::ResourceClosed,
            key.as_str(),
            &format!("closed on {day}{by} ({reason}); {standing}"),
        )?;
        Ok(Closed::Closed { bookings })
    })
}

/// A resource's closed days from `from` on, with why (the editor and the read-only view).
pub fn upcoming(
    conn: &mut DbConn,
    resource_id: i64,
    from: NaiveDate,
) -> QueryResult<Vec<(NaiveDate, String)>> {
    use crate::schema::resource_closures as c;
    c::table
        .filter(c::resource_id.eq(resource_id))
        .filter(c::day.ge(from))
        .order(c::day)
        .select((c::day, c::reason))
        .limit(100)
        .load(conn)
}
