//! One user's requests, one after another: the lock that makes a per-user quota exact.
//!
//! The hazard: a quota is a check-then-insert over *all* of a user's rows (their future bookings,
//! their orders of the last minute), while the locks the features already take are narrower — a
//! booking holds the lock of its resource and day only. Two bookings of one user for two
//! different days run at once under two different day locks; each counts 29 future bookings
//! against a cap of 30, each inserts, and the user holds 31. Every request of one user for a
//! different day would overshoot the cap by one more.
//!
//! So a request that counts against a quota first locks its user's row (`SELECT … FOR UPDATE`
//! on `users`), as the first statement of its transaction, and counts after it. The row lock
//! lives until COMMIT or ROLLBACK: a second request of the same user waits at that statement
//! until the first has committed its row (or given up), and only then counts — so it sees it.
//!
//! Why the row and not a named lock per user: the row lock is part of the transaction the
//! feature already runs (no second `GET_LOCK`, no second connection, released by the COMMIT on
//! both engines, never leaked by a panic), and its wait is bounded by `ROW_LOCK_WAIT_SECS` like
//! every row lock. Different users never wait for each other.
//!
//! Order, so that nothing deadlocks: a booking takes its day's named lock, *then* the user rows
//! (in ascending id for a coalesced batch of several users), and nothing that holds a user's row
//! ever waits for a day's lock; an order takes the user's row before its stock rows, in the same
//! place in every order. Why it must be the transaction's *first* statement: under MySQL's
//! REPEATABLE READ the snapshot is taken by the first plain read, and on PostgreSQL (READ
//! COMMITTED) by each statement — a count read before the lock was granted could miss the
//! booking it waited for.

use std::sync::LazyLock;

use diesel::prelude::*;
use diesel::sql_types::BigInt;

use crate::db::cached::ListStatements;
use crate::db::{DbConn, cached_sql};

/// Sizes up to a coalesced booking batch (`bookings::coalesce::MAX_BATCH`, 32; one request
/// is the common case). `ORDER BY id` fixes the order the rows are locked in: ascending, on
/// both engines (MySQL scans the primary key in that order; PostgreSQL locks rows as the
/// sorted result yields them).
static LOCK_USERS: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new("SELECT id FROM users WHERE id IN ({list}) ORDER BY id FOR UPDATE", &[1, 4, 16, 32])
});

/// Locks the rows of `users` until the caller's transaction ends. Call it first in the
/// transaction, before anything is read (see the module's comment). Returns how many exist.
pub fn lock_users(conn: &mut DbConn, users: &[i64]) -> QueryResult<usize> {
    let mut ids = users.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let Some((sql, padded)) = LOCK_USERS.padded(&ids) else {
        return Err(diesel::result::Error::QueryBuilderError("no users, or too many, to lock".into()));
    };
    let locked: Vec<i64> = cached_sql::<BigInt>(sql).bind_each::<BigInt, _>(padded).load(conn)?;
    Ok(locked.len())
}
