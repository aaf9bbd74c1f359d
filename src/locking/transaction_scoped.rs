//! A named lock whose life is exactly one transaction.
//!
//! Where everything done under a lock is one transaction (a single booking, a stock receipt), the
//! lock need not
//! outlive it. PostgreSQL has that form: `pg_advisory_xact_lock`, taken by a statement of the
//! transaction and let go by its `COMMIT` or `ROLLBACK`. There is nothing to release, so none of
//! the session form's hazards ([`NamedLockGuard`]) can arise: no release on the wrong
//! connection, no lock riding back into the pool, no check afterwards that the session holds
//! nothing more. And the booking sends one statement fewer.
//!
//! MySQL's `GET_LOCK` belongs to the session and has no such form: there, [`in_one_transaction`]
//! is the guard around the transaction. The caller writes its work once, for both.

use std::time::{Duration, Instant};

use diesel::result::Error as DbError;

use super::named::{AcquireError, LockError, NamedLockGuard};
use super::queue::Turn;
use crate::db::dialect::Asked;
use crate::db::errors::lost_connection;
use crate::db::{CheckoutError, DbConn, DbPool};
use crate::metrics::{self, Family};

/// Runs `work` in one transaction that holds the lock of `turn` from its first statement to its
/// end: on PostgreSQL the transaction-scoped advisory lock, on MySQL the session's named lock
/// held by a guard around the transaction. The lock is waited for like the guard's: asked
/// without waiting first, then within what is left of the turn and the waiting budget.
///
/// `isolation` is the MySQL transaction's: READ COMMITTED for work whose named lock already
/// serialises what it touches and which REPEATABLE READ's gap locks would only make deadlock
/// (`db::transaction_read_committed`). PostgreSQL's sessions run at READ COMMITTED anyway.
///
/// As with [`NamedLockGuard::acquire_pooled`], a connection found dead before any of the work
/// was sent is replaced once: the transaction had done nothing, and its lock went with it.
///
/// On PostgreSQL the lock is taken inside the transaction, which is right only at READ COMMITTED (the pool's
/// PostgreSQL sessions run in it, `db::build_pool`): each statement then reads what had
/// committed when it started, so the work sees the previous holder's commit. Under REPEATABLE
/// READ the snapshot would be taken by the lock's own statement, before its wait, and the work
/// would count without the previous holder's booking: the check-then-insert race again.
pub fn in_one_transaction<T, E>(
    pool: &DbPool,
    turn: Turn,
    isolation: Isolation,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbError> + From<LockError> + From<CheckoutError>,
{
    if !pool.dialect().has_transaction_scoped_lock() {
        let mut held = NamedLockGuard::acquire_pooled(pool, turn).map_err(|e| match e {
            AcquireError::Pool(e) => E::from(e),
            AcquireError::Lock(e) => E::from(e),
        })?;
        // Committed before the guard lets go.
        return match isolation {
            Isolation::SessionDefault => crate::db::transaction(held.conn(), work),
            Isolation::ReadCommitted => crate::db::transaction_read_committed(held.conn(), work),
        };
    }
    let mut work = Some(work);
    let mut conn = pool.get()?;
    let mut outcome = attempt(&mut conn, &turn, &mut work);
    if matches!(&outcome, Err(Failure::Db(e)) if work.is_some() && lost_connection(e)) {
        crate::db::transaction::mark_broken(&mut conn);
        drop(conn); // r2d2 closes it
        conn = pool.get()?;
        outcome = attempt(&mut conn, &turn, &mut work);
    }
    outcome.map_err(|failure| match failure {
        Failure::Db(e) => e.into(),
        Failure::Lock(e) => e.into(),
        Failure::Work(e) => e,
    })
}

/// The isolation of the MySQL transaction around the work ([`in_one_transaction`]).
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

/// One transaction: the lock, then `work` (taken out of its `Option` only once the lock is
/// held, so the caller can tell whether any of it ran).
fn attempt<T, E>(
    conn: &mut DbConn,
    turn: &Turn,
    work: &mut Option<impl FnOnce(&mut DbConn) -> Result<T, E>>,
) -> Result<T, Failure<E>> {
    let mut granted = None;
    let done = crate::db::transaction(conn, |conn| {
        take(conn, turn)?;
        granted = Some(Instant::now());
        let Some(work) = work.take() else {
            // `in_one_transaction` tries again only while the work has not run.
            return Err(Failure::Db(DbError::QueryBuilderError("the locked work ran already".into())));
        };
        work(conn).map_err(Failure::Work)
    });
    // Held until the transaction ended, COMMIT or ROLLBACK included, like the guard's until its
    // release.
    if let Some(granted) = granted {
        metrics::held(Family::Named, turn.name().scope(), granted.elapsed());
    }
    done
}

/// The transaction-scoped lock asked without waiting; when it is held elsewhere and the turn
/// and the waiting budget allow, asked again with what is left of the turn's wait
/// (`Dialect::lock_for_transaction`).
fn take<E>(conn: &mut DbConn, turn: &Turn) -> Result<(), Failure<E>> {
    let name = turn.name();
    let dialect = conn.dialect();
    let timed_out = |waited| Failure::Lock(LockError::TimedOut { name: name.clone(), waited });
    let ask = |conn: &mut DbConn, wait| match dialect.lock_for_transaction(conn, name.as_str(), wait) {
        Ok(Asked::Granted) => Ok(()),
        // After a wait the transaction is aborted now; its rollback ends it.
        Ok(Asked::Held) => Err(timed_out(wait)),
        Ok(Asked::Refused(detail)) => {
            Err(Failure::Lock(LockError::Failed { name: name.clone(), detail, source: None }))
        }
        Err(e) => Err(Failure::Db(e)),
    };
    let asked = Instant::now();
    let mut result = ask(conn, Duration::ZERO);
    if matches!(result, Err(Failure::Lock(LockError::TimedOut { .. }))) {
        let wait = turn.remaining();
        result = if !dialect.can_wait(wait) {
            Err(timed_out(wait))
        } else {
            match turn.try_wait_slot() {
                None => Err(Failure::Lock(LockError::Crowded { name: name.clone() })),
                Some(_waiting) => ask(conn, wait),
            }
        };
    }
    metrics::waited(Family::Named, name.scope(), asked.elapsed());
    let outcome = match &result {
        Ok(()) => "acquired",
        Err(Failure::Lock(LockError::TimedOut { .. })) => "timed_out",
        Err(Failure::Lock(LockError::Crowded { .. })) => "crowded",
        Err(_) => "failed",
    };
    metrics::record(|m| m.named_lock_acquisitions.with_label_values(&[name.scope(), outcome]).inc());
    result
}
