//! A lock table: the lock is a row of `demo_lock_rows`, its name the primary key, with an owner
//! token and an expiry.
//!
//! - **acquire**: delete the row if it has expired, then insert ours. The primary key lets one
//!   insert win; the others get a duplicate key and ask again later. Each ask is two short
//!   statements on a pooled connection, given back before the pause between asks.
//! - **release**: delete the row *if it still carries our token*. A holder whose row expired and
//!   was taken over deletes nothing, and learns that it lost the lock.
//!
//! It needs nothing but the database, works across every instance that shares it, and survives
//! a restart of the app. Expiry is judged by the database's clock alone (`{now}`: the
//! statement's start on both engines), so the
//! instances' clocks may drift. Like every lease it is exclusive only until it expires: a holder
//! that pauses past its expiry may find another holder inside. No session holds it, so a crashed
//! holder's row stays until it expires — choose the TTL as the longest the work may take.

use std::time::Duration;

use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Text};
use diesel::{QueryResult, RunQueryDsl};

use super::{poll, token};
use crate::db::{DbPool, cached_sql};
use crate::infra::Infra;
use crate::locking::retry::MayConflict;

/// The database's clock, to the microsecond, in UTC on both engines (the pool's sessions run in
/// UTC): `{now}`, the time the statement started on both engines.
const DELETE_EXPIRED: &str = "DELETE FROM demo_lock_rows WHERE name = ? AND expires_at < {now}";
const INSERT: &str =
    "INSERT INTO demo_lock_rows (name, owner, expires_at) VALUES (?, ?, {now} + {? microseconds})";

#[derive(Debug, thiserror::Error)]
pub enum LockRowError {
    #[error("lock row {name} is held elsewhere; gave up after {waited:?}")]
    TimedOut { name: String, waited: Duration },
    #[error(transparent)]
    Infra(#[from] Infra),
}

/// A held lock row. Dropping it releases it (if still ours); [`LockRow::release`] also says
/// whether it still was.
pub struct LockRow<'a> {
    pool: &'a DbPool,
    name: String,
    owner: String,
    released: bool,
}

impl<'a> LockRow<'a> {
    /// Takes the lock `name` for `ttl`, asking again while another owner's row is unexpired, for
    /// at most `wait`.
    pub fn acquire(
        pool: &'a DbPool,
        name: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Self, LockRowError> {
        let owner = token();
        let micros = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let taken = poll(wait, || {
            let mut conn = pool.get().map_err(Infra::from)?;
            let asked =
                cached_sql::<()>(DELETE_EXPIRED).bind::<Text, _>(name).execute(&mut conn).and_then(|_| {
                    cached_sql::<()>(INSERT)
                        .bind::<Text, _>(name)
                        .bind::<Text, _>(&owner)
                        .bind::<BigInt, _>(micros)
                        .execute(&mut conn)
                });
            match asked {
                Ok(_) => Ok(Some(())),
                Err(DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(None),
                // Two inserts that met a delete of the same row may deadlock on its key (one is
                // rolled back): a statement of its own, so nothing is lost; ask again.
                Err(e) if e.lock_conflict().is_some() => Ok(None),
                Err(e) => Err(LockRowError::Infra(e.into())),
            }
        })?;
        match taken {
            Some(()) => Ok(Self { pool, name: name.to_string(), owner, released: false }),
            None => Err(LockRowError::TimedOut { name: name.to_string(), waited: wait }),
        }
    }

    /// Releases the lock. `Ok(false)`: the row had expired and was no longer ours.
    pub fn release(mut self) -> Result<bool, Infra> {
        self.released = true;
        Ok(self.delete_if_ours()? == 1)
    }

    fn delete_if_ours(&self) -> Result<usize, Infra> {
        let mut conn = self.pool.get()?;
        let deleted: QueryResult<usize> =
            cached_sql::<()>("DELETE FROM demo_lock_rows WHERE name = ? AND owner = ?")
                .bind::<Text, _>(&self.name)
                .bind::<Text, _>(&self.owner)
                .execute(&mut conn);
        Ok(deleted?)
    }
}

impl Drop for LockRow<'_> {
    fn drop(&mut self) {
        if !self.released
            && let Err(e) = self.delete_if_ours()
        {
            log::warn!("lock row {}: release failed ({e}); it expires by itself", self.name);
        }
    }
}
