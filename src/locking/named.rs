//! `GET_LOCK` / `RELEASE_LOCK` held by a guard that owns its connection.
//!
//! A MySQL named lock belongs to a *session*, not to a transaction and not to the code that asked
//! for it. `docs/named-lock-guard.md` shows the two ways a connection pool breaks that:
//!
//! 1. `GET_LOCK` runs on one pooled connection and `RELEASE_LOCK` on another. The release
//!    returns 0 or NULL, nobody checks, and the lock leaks until that first connection closes.
//! 2. The connection that still holds a lock goes back to the pool. The next request that gets
//!    it "acquires" the same lock instantly (the same session may take a lock twice), and two
//!    requests are inside the critical section together.
//!
//! [`NamedLockGuard`] makes both impossible by construction: it *owns* the pooled connection on
//! which `GET_LOCK` succeeded, lends only that connection to the work done under the lock, and
//! runs `RELEASE_LOCK` on it when dropped — after success, after an error and while unwinding
//! from a panic. If the release does not answer 1, or the session still holds any other named
//! lock afterwards, the connection is marked broken and r2d2 closes it instead of handing it out
//! again; closing the session frees whatever it held.
//!
//! Commit before release: run the transaction to completion on [`NamedLockGuard::conn`] while the
//! guard is alive. Releasing first would let the next holder read the state before our commit.
//!
//! On PostgreSQL the same guard holds a session-level advisory lock (`pg_advisory_lock`), keyed
//! by the first 64 bits of the name's SHA-256 ([`LockName::advisory_key`]). It has the same two
//! hazards (it belongs to the session, and a session may take it twice), so the same guard
//! answers them; the wait is bounded by `lock_timeout`, set for the one transaction that asks.

use std::time::{Duration, Instant};

use diesel::prelude::*;

use super::LockName;
use super::queue::Turn;
use super::sql::{get_lock, release_all_locks, release_lock};
use crate::db::{DbConn, DbPool, Engine, PooledConn, cached_sql};
use crate::infra::Infra;
use crate::metrics::{self, Family};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// `GET_LOCK` answered 0, or the request's turn in the queue did not come: another session
    /// held the lock for the whole wait.
    #[error("named lock {name} is held elsewhere; gave up after {waited:?}")]
    TimedOut { name: LockName, waited: Duration },
    /// The lock was held elsewhere and this instance already has `LOCK_WAITERS_MAX` sessions
    /// waiting at the server: refused at once rather than take one more connection to wait.
    #[error("named lock {name} is held elsewhere and the waiting budget is spent")]
    Crowded { name: LockName },
    /// `GET_LOCK` answered NULL: the server could not take the lock (killed query, out of memory,
    /// or a user-level-lock deadlock, error 3058, when locks are taken out of order).
    #[error("server could not take named lock {name}: {detail}")]
    Failed { name: LockName, detail: String, source: Option<diesel::result::Error> },
}

/// Proof that this process holds the named lock [`NamedLockGuard::name`], and the connection
/// (session) that holds it. Functions whose correctness depends on the lock take the guard.
pub struct NamedLockGuard {
    conn: PooledConn,
    name: LockName,
    /// Dropped after the release (fields drop after `Drop::drop`): the next request queued for
    /// this key reaches the server only once we have let go.
    _turn: Option<Turn>,
    /// When `GET_LOCK` granted it: the hold time is measured to the release.
    granted: Instant,
}

impl NamedLockGuard {
    /// Takes `name` on `conn`, waiting at most `wait` (whole seconds; MySQL's granularity).
    /// For callers that are alone with their lock names (migrations at start, tools); request
    /// handlers queue first and use [`NamedLockGuard::acquire_in_turn`].
    ///
    /// On timeout the connection goes back to the pool untouched. On any other failure it may
    /// be in an unknown state (did the server grant the lock before the error?), so it is closed.
    pub fn acquire(conn: PooledConn, name: LockName, wait: Duration) -> Result<Self, LockError> {
        Self::acquire_in_turn(conn, Turn::alone(name, wait))
    }

    /// Takes the lock of `turn` on `conn`. It first asks without waiting; only when the lock is
    /// held elsewhere does it wait at the server, for what is left of the turn's deadline, and
    /// only if the instance's waiting budget has room (else [`LockError::Crowded`] at once).
    pub fn acquire_in_turn(mut conn: PooledConn, turn: Turn) -> Result<Self, LockError> {
        take(&mut conn, &turn)?;
        Ok(Self { conn, name: turn.name().clone(), _turn: Some(turn), granted: Instant::now() })
    }

    /// [`acquire_in_turn`](Self::acquire_in_turn) on a connection of `pool`, for a request whose
    /// first statement is this `GET_LOCK`. Connections are not tested at checkout, so after a
    /// database restart that statement is the one to meet a connection that died in the pool.
    /// It is safe to send again — a lost session holds no lock, and nothing else was sent — so
    /// it is, once, on another connection (the pool tests the others before handing them out
    /// once one was found lost).
    pub fn acquire_pooled(pool: &DbPool, turn: Turn) -> Result<Self, Infra> {
        let mut conn = pool.get()?;
        match take(&mut conn, &turn) {
            Err(LockError::Failed { source: Some(e), .. }) if crate::infra::lost_connection(&e) => {
                drop(conn); // marked broken: r2d2 closes it
                conn = pool.get()?;
                take(&mut conn, &turn)?;
            }
            taken => taken?,
        }
        Ok(Self { conn, name: turn.name().clone(), _turn: Some(turn), granted: Instant::now() })
    }

    /// The connection that holds the lock. Everything done "under the lock" must run here.
    pub fn conn(&mut self) -> &mut DbConn {
        &mut self.conn
    }

    pub fn name(&self) -> &LockName {
        &self.name
    }
}

/// Asks for the lock of `turn` on `conn`: see [`NamedLockGuard::acquire_in_turn`].
fn take(conn: &mut PooledConn, turn: &Turn) -> Result<(), LockError> {
    let name = turn.name();
    let asked = Instant::now();
    let mut result = ask(conn, name, Duration::ZERO);
    if matches!(result, Err(LockError::TimedOut { .. })) {
        let wait = turn.remaining();
        let too_short = match conn.engine() {
            Engine::Mysql => whole_seconds(wait) == 0,
            Engine::Postgres => wait.as_millis() == 0,
        };
        result = if too_short {
            Err(LockError::TimedOut { name: name.clone(), waited: wait })
        } else {
            match turn.try_wait_slot() {
                None => Err(LockError::Crowded { name: name.clone() }),
                Some(_waiting) => ask(conn, name, wait),
            }
        };
    }
    metrics::waited(Family::Named, name.scope(), asked.elapsed());
    let outcome = match &result {
        Ok(()) => "acquired",
        Err(LockError::TimedOut { .. }) => "timed_out",
        Err(LockError::Crowded { .. }) => "crowded",
        Err(LockError::Failed { .. }) => "failed",
    };
    metrics::record(|m| m.named_lock_acquisitions.with_label_values(&[name.scope(), outcome]).inc());
    result
}

/// `GET_LOCK` waits whole seconds (MySQL's granularity). What is left of a turn's wait is
/// rounded to the nearest second: down would turn a 1 s wait that lost a few milliseconds in the
/// queue into no wait at all; the nearest passes the deadline by half a second at most.
fn whole_seconds(wait: Duration) -> i32 {
    i32::try_from((wait.as_millis() + 500) / 1000).unwrap_or(i32::MAX)
}

/// One `GET_LOCK(name, wait)`, or its PostgreSQL counterpart.
fn ask(conn: &mut PooledConn, name: &LockName, wait: Duration) -> Result<(), LockError> {
    if conn.engine() == Engine::Postgres {
        return ask_advisory(conn, name, wait);
    }
    let wait_secs = whole_seconds(wait);
    match diesel::select(get_lock(name.as_str(), wait_secs)).get_result::<Option<i64>>(&mut **conn) {
        Ok(Some(1)) => Ok(()),
        Ok(Some(0)) => Err(LockError::TimedOut { name: name.clone(), waited: wait }),
        Ok(answer) => {
            close_instead_of_returning(conn);
            Err(LockError::Failed {
                name: name.clone(),
                detail: format!("GET_LOCK returned {answer:?}"),
                source: None,
            })
        }
        Err(e) => {
            close_instead_of_returning(conn);
            Err(LockError::Failed { name: name.clone(), detail: e.to_string(), source: Some(e) })
        }
    }
}

/// `pg_try_advisory_lock` when not waiting; else `pg_advisory_lock` with `lock_timeout` set to
/// the wait for its transaction only (`set_config(…, true)`), so the session's own bound on row
/// waits is back as soon as the statement is done. A session-level advisory lock outlives the
/// transaction it was taken in.
fn ask_advisory(conn: &mut PooledConn, name: &LockName, wait: Duration) -> Result<(), LockError> {
    let key = name.advisory_key();
    let asked: Result<bool, diesel::result::Error> = if wait.is_zero() {
        cached_sql::<diesel::sql_types::Bool>("SELECT pg_try_advisory_lock(?)")
            .bind::<diesel::sql_types::BigInt, _>(key)
            .get_result(&mut **conn)
    } else {
        crate::db::transaction(conn, |conn| {
            cached_sql::<()>("SELECT set_config('lock_timeout', ?, true)")
                .bind::<diesel::sql_types::Text, _>(format!("{}ms", wait.as_millis()))
                .execute(conn)?;
            cached_sql::<()>("SELECT pg_advisory_lock(?)")
                .bind::<diesel::sql_types::BigInt, _>(key)
                .execute(conn)?;
            Ok(true)
        })
        .or_else(|e| if crate::locking::retry::is_lock_timeout(&e) { Ok(false) } else { Err(e) })
    };
    match asked {
        Ok(true) => Ok(()),
        Ok(false) => Err(LockError::TimedOut { name: name.clone(), waited: wait }),
        Err(e) => {
            close_instead_of_returning(conn);
            Err(LockError::Failed { name: name.clone(), detail: e.to_string(), source: Some(e) })
        }
    }
}

/// `pg_advisory_unlock` must answer true, and the session must hold no advisory lock after it
/// (the checks `RELEASE_LOCK` and `RELEASE_ALL_LOCKS` make on MySQL). The count is read after
/// the unlock: the CTE runs first, then the row's target list.
fn release_advisory(conn: &mut PooledConn, name: &LockName) -> Result<(), String> {
    let released = cached_sql::<(diesel::sql_types::Bool, diesel::sql_types::BigInt)>(
        "WITH released AS MATERIALIZED (SELECT pg_advisory_unlock(?) AS ok) \
         SELECT ok, (SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) \
         FROM released",
    )
    .bind::<diesel::sql_types::BigInt, _>(name.advisory_key())
    .get_result::<(bool, i64)>(&mut **conn);
    match released {
        Ok((true, 0)) => Ok(()),
        Ok((released, leftover)) => {
            Err(format!("pg_advisory_unlock returned {released}, {leftover} advisory locks still held"))
        }
        Err(e) => Err(format!("release failed: {e}")),
    }
}

impl Drop for NamedLockGuard {
    fn drop(&mut self) {
        if self.conn.engine() == Engine::Postgres {
            let released = release_advisory(&mut self.conn, &self.name);
            metrics::held(Family::Named, self.name.scope(), self.granted.elapsed());
            if let Err(problem) = released {
                log::error!("named lock {}: {problem}; closing its connection", self.name);
                close_instead_of_returning(&mut self.conn);
            }
            return;
        }
        // RELEASE_LOCK must answer 1: 0 (held by another session) and NULL (not held at all)
        // both mean our bookkeeping is wrong. RELEASE_ALL_LOCKS then must find nothing: anything
        // it finds is a lock the work took on our connection (a second GET_LOCK of the same name
        // counts twice, so one RELEASE_LOCK would have left it held). Either way the session
        // cannot be trusted, so it is closed rather than pooled.
        let released =
            diesel::select((release_lock(self.name.as_str()), release_all_locks()))
                .get_result::<(Option<i64>, Option<i64>)>(&mut *self.conn);
        metrics::held(Family::Named, self.name.scope(), self.granted.elapsed());
        let problem = match released {
            Ok((Some(1), Some(0))) => return,
            Ok((released, leftover)) => {
                format!("RELEASE_LOCK returned {released:?}, RELEASE_ALL_LOCKS found {leftover:?} more")
            }
            Err(e) => format!("release failed: {e}"),
        };
        log::error!("named lock {}: {problem}; closing its connection", self.name);
        close_instead_of_returning(&mut self.conn);
    }
}

/// Marks the connection broken, so r2d2 closes it when it is dropped instead of pooling it again.
fn close_instead_of_returning(conn: &mut PooledConn) {
    metrics::record(|m| m.named_lock_sessions_closed.inc());
    crate::db::transaction::mark_broken(conn);
}
