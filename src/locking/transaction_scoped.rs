//! A named lock whose life is exactly one transaction: [`transaction_under_lock`].
//!
//! Where everything done under a lock is one transaction (a single booking, a stock receipt), the
//! lock need not outlive it. PostgreSQL has that form: `pg_advisory_xact_lock`, taken by a
//! statement of the transaction and let go by its `COMMIT` or `ROLLBACK`. There is nothing to
//! release, so none of the session form's hazards ([`NamedLockGuard`]) can arise: no release on
//! the wrong connection, no lock riding back into the pool, no check afterwards that the session
//! holds nothing more. And the booking sends one statement fewer.
//!
//! MySQL's `GET_LOCK` belongs to the session and has no such form: there,
//! [`transaction_under_lock`] is the guard around the transaction. The caller writes its work
//! once, for both. What each engine is sent:
//!
//! ```text
//! MySQL                                   PostgreSQL
//! SELECT GET_LOCK(name, 0)                BEGIN
//! BEGIN                                   SELECT pg_try_advisory_xact_lock(key)
//! …the work…                              …the work…
//! COMMIT                                  COMMIT            -- lets go of the lock
//! SELECT RELEASE_LOCK(name), RELEASE_ALL_LOCKS()
//! ```
//!
//! (When the lock is held elsewhere, the first question is followed by one that waits: see
//! [`ask_then_wait`].)

use std::time::Instant;

use diesel::result::Error as DbError;

use super::named::{AcquireError, LockError, NamedLockGuard, NamedLocksInOrder, NotTaken, ask_then_wait};
use super::queue::{Turn, TurnsInOrder};
use crate::db::dialect::Asked;
use crate::db::errors::lost_connection;
use crate::db::{CheckoutError, DbConn, DbPool};
use crate::metrics::{self, Family};

/// Runs `work` in one transaction that holds the lock of `turn` from before its first read to
/// its end — the named lock held for exactly one transaction:
///
/// - on MySQL, the session's named lock held by a guard around the transaction: take the lock
///   ([`NamedLockGuard::acquire_pooled`]); BEGIN; the work; COMMIT; release (the guard's drop);
/// - on PostgreSQL, the transaction-scoped advisory lock: BEGIN; take the lock as the
///   transaction's first statement ([`take`]); the work; COMMIT, which lets go of it.
///
/// Either way the lock is waited for alike ([`ask_then_wait`]): asked without waiting first,
/// then within what is left of the turn and the waiting budget.
///
/// `isolation` is the MySQL transaction's: READ COMMITTED for work whose named lock already
/// serialises what it touches and which REPEATABLE READ's gap locks would only make deadlock
/// (`db::transaction_read_committed`). PostgreSQL's sessions run at READ COMMITTED anyway.
///
/// As with [`NamedLockGuard::acquire_pooled`], a connection found dead before any of the work
/// was sent is replaced once: the transaction had done nothing, and its lock went with it.
///
/// On PostgreSQL the lock is taken inside the transaction, which is right only at READ
/// COMMITTED (the pool's PostgreSQL sessions run in it, `db::build_pool`): each statement then
/// reads what had committed when it started, so the work sees the previous holder's commit.
/// Under REPEATABLE READ the snapshot would be taken by the lock's own statement, before its
/// wait, and the work would count without the previous holder's booking: the check-then-insert
/// race again.
pub fn transaction_under_lock<T, E>(
    pool: &DbPool,
    turn: Turn,
    isolation: Isolation,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError> + From<LockError> + From<CheckoutError>,
{
    if !pool.dialect().has_transaction_scoped_lock() {
        return transaction_in_guard(pool, turn, isolation, work);
    }
    transaction_taking(pool, std::slice::from_ref(&turn), work)
}

/// [`transaction_under_lock`] for work that needs several named locks at once — a stay holds
/// the day lock of each of its nights — all held from before the transaction's first read to
/// its end, and **taken in the order of `turns`** (ascending names, [`TurnsInOrder`]):
///
/// - on MySQL, one session's named locks held by a guard around the transaction
///   ([`NamedLocksInOrder`]): `GET_LOCK` each in order; BEGIN; the work; COMMIT; release them all;
/// - on PostgreSQL, transaction-scoped advisory locks: BEGIN; take each in order ([`take`]); the
///   work; COMMIT, which lets go of them all.
///
/// Why the order: two stays that share two nights, one taking them up the calendar and the other
/// down, would each take its first night and wait for its second, which the other holds. Neither
/// can go on; the server notices and fails one of them (a deadlock error: MariaDB 1213, MySQL
/// 3058, PostgreSQL 40P01), or both wait out their time. Taken in one order, whoever holds the
/// lower night goes first and the other waits for it, holding nothing the first needs.
///
/// Each lock is asked for as [`transaction_under_lock`] asks for its one: without waiting first,
/// then within what is left of its turn and the waiting budget; a lock not had gives back those
/// taken before it.
pub fn transaction_under_locks<T, E>(
    pool: &DbPool,
    turns: TurnsInOrder,
    isolation: Isolation,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError> + From<LockError> + From<CheckoutError>,
{
    if !pool.dialect().has_transaction_scoped_lock() {
        let mut held = NamedLocksInOrder::acquire_pooled(pool, turns).map_err(|e| match e {
            AcquireError::Pool(e) => E::from(e),
            AcquireError::Lock(e) => E::from(e),
        })?;
        let done = in_transaction(held.conn(), isolation, work);
        drop(held); // released after the COMMIT (or ROLLBACK) above
        return done;
    }
    transaction_taking(pool, turns.turns(), work)
}

/// PostgreSQL's one transaction that takes the locks of `turns`, in their order, before `work`.
/// A connection found dead before any of the work was sent is replaced once: the transaction
/// had done nothing, and its locks went with it.
fn transaction_taking<T, E>(
    pool: &DbPool,
    turns: &[Turn],
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError> + From<LockError> + From<CheckoutError>,
{
    let mut work = Some(work);
    let mut conn = pool.get()?;
    let mut outcome = attempt(&mut conn, turns, &mut work);
    if matches!(&outcome, Err(Failure::Db(e)) if work.is_some() && lost_connection(e)) {
        crate::db::transaction::mark_broken(&mut conn);
        drop(conn); // r2d2 closes it
        conn = pool.get()?;
        outcome = attempt(&mut conn, turns, &mut work);
    }
    outcome.map_err(|failure| match failure {
        Failure::Db(e) => e.into(),
        Failure::Lock(e) => e.into(),
        Failure::Work(e) => e,
    })
}

fn in_transaction<T, E>(
    conn: &mut DbConn,
    isolation: Isolation,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError>,
{
    match isolation {
        Isolation::SessionDefault => crate::db::transaction(conn, work),
        Isolation::ReadCommitted => crate::db::transaction_read_committed(conn, work),
    }
}

/// MySQL's [`transaction_under_lock`]: take the session's lock, BEGIN, the work, COMMIT, and
/// only then release (the guard is dropped last), so the next holder reads our commit.
fn transaction_in_guard<T, E>(
    pool: &DbPool,
    turn: Turn,
    isolation: Isolation,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError> + From<LockError> + From<CheckoutError>,
{
    let mut held = NamedLockGuard::acquire_pooled(pool, turn).map_err(|e| match e {
        AcquireError::Pool(e) => E::from(e),
        AcquireError::Lock(e) => E::from(e),
    })?;
    let done = in_transaction(held.conn(), isolation, work);
    drop(held); // released after the COMMIT (or ROLLBACK) above
    done
}

/// The isolation of the MySQL transaction around the work ([`transaction_under_lock`]).
pub enum Isolation {
    /// The session's: REPEATABLE READ on MySQL.
    SessionDefault,
    ReadCommitted,
}

/// Why a transaction-scoped attempt failed: the work's own error, the lock, or a statement of
/// the transaction itself (`BEGIN`, the lock's, `COMMIT`).
enum Failure<E> {
    Db(DbError),
    Lock(LockError),
    Work(E),
}

impl<E> From<DbError> for Failure<E> {
    fn from(error: DbError) -> Self {
        Self::Db(error)
    }
}

/// PostgreSQL's one transaction: BEGIN, the locks in order, then `work` (taken out of its
/// `Option` only once the locks are held, so the caller can tell whether any of it ran), COMMIT.
fn attempt<T, E>(
    conn: &mut DbConn,
    turns: &[Turn],
    work: &mut Option<impl FnOnce(&mut DbConn) -> Result<T, E>>,
) -> Result<T, Failure<E>> {
    let mut granted = None;
    let done = crate::db::transaction(conn, |conn| {
        for turn in turns {
            take(conn, turn)?;
        }
        granted = Some(Instant::now());
        let Some(work) = work.take() else {
            // `transaction_under_lock` tries again only while the work has not run.
            return Err(Failure::Db(DbError::QueryBuilderError("the locked work ran already".into())));
        };
        work(conn).map_err(Failure::Work)
    });
    // Held until the transaction ended, COMMIT or ROLLBACK included, like the guard's until its
    // release.
    if let Some(granted) = granted {
        for turn in turns {
            metrics::held(Family::Named, turn.name().scope(), granted.elapsed());
        }
    }
    done
}

/// The transaction's "take the lock", its first statement: [`ask_then_wait`] with
/// `SELECT pg_try_advisory_xact_lock(key)`, then `pg_advisory_xact_lock(key)` bounded by
/// `lock_timeout`, as the question (`Dialect::lock_for_transaction` shows the statements).
fn take<E>(conn: &mut DbConn, turn: &Turn) -> Result<(), Failure<E>> {
    let name = turn.name();
    let dialect = conn.dialect();
    let ask = |wait| match dialect.lock_for_transaction(conn, name.as_str(), wait) {
        Ok(Asked::Granted) => Ok(true),
        // After a wait the transaction is aborted now; its rollback ends it.
        Ok(Asked::Held) => Ok(false),
        Ok(Asked::Refused(detail)) => {
            Err(Failure::Lock(LockError::Failed { name: name.clone(), detail, source: None }))
        }
        Err(e) => Err(Failure::Db(e)),
    };
    ask_then_wait(turn, |wait| dialect.can_wait(wait), ask).map_err(|not| match not {
        NotTaken::TimedOut(waited) => Failure::Lock(LockError::TimedOut { name: name.clone(), waited }),
        NotTaken::Crowded => Failure::Lock(LockError::Crowded { name: name.clone() }),
        NotTaken::Failed(failed) => failed,
    })
}
