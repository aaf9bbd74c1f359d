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
//! The guard's life, as the server sees it (MySQL; `db::dialect` has PostgreSQL's words):
//!
//! ```text
//! SELECT GET_LOCK(name, 0)                       -- acquire: ask without waiting (ask_then_wait)
//! SELECT GET_LOCK(name, wait)                    --   only if held elsewhere, within the budget
//! …the work, on NamedLockGuard::conn…
//! SELECT RELEASE_LOCK(name), RELEASE_ALL_LOCKS() -- drop: must answer 1 and 0
//! ```
//!
//! On PostgreSQL the same guard holds a session-level advisory lock (`pg_advisory_lock`), keyed
//! by the first 64 bits of the name's SHA-256 ([`LockName::advisory_key`]). It has the same two
//! hazards (it belongs to the session, and a session may take it twice), so the same guard
//! answers them; the wait is bounded by `lock_timeout`, set for the one transaction that asks.

use std::time::{Duration, Instant};

use super::LockName;
use super::queue::{Turn, TurnsInOrder};
use crate::db::dialect::Asked;
use crate::db::errors::lost_connection;
use crate::db::{CheckoutError, DbConn, DbPool, PooledConn};
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
    /// The instance is shutting down: the request was still waiting in memory for its turn at
    /// the lock when the shutdown budget was about to run out ([`Cutoff`](super::Cutoff)), and
    /// did nothing.
    #[error("this instance is shutting down; the request waiting in memory for {name} was turned away")]
    ShuttingDown { name: LockName },
    /// `GET_LOCK` answered NULL: the server could not take the lock (killed query, out of memory,
    /// or a user-level-lock deadlock, error 3058, when locks are taken out of order).
    #[error("server could not take named lock {name}: {detail}")]
    Failed { name: LockName, detail: String, source: Option<diesel::result::Error> },
}

/// Why [`NamedLockGuard::acquire_pooled`] holds no lock: no connection was had, or the lock was
/// not granted.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error(transparent)]
    Pool(#[from] CheckoutError),
    #[error(transparent)]
    Lock(#[from] LockError),
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
    /// Takes `name` on `conn`, waiting at most `wait` (whole seconds on MySQL).
    /// For callers that are alone with their lock names (migrations at start, tools); request
    /// handlers queue first and use [`NamedLockGuard::acquire_in_turn`].
    ///
    /// On timeout the connection goes back to the pool untouched. On any other failure it may
    /// be in an unknown state (did the server grant the lock before the error?), so it is closed.
    pub fn acquire(conn: PooledConn, name: LockName, wait: Duration) -> Result<Self, LockError> {
        Self::acquire_in_turn(conn, Turn::unqueued(name, wait))
    }

    /// Takes the lock of `turn` on `conn` ([`ask_then_wait`]): `SELECT GET_LOCK(name, 0)` first;
    /// only when the lock is held elsewhere does it wait at the server
    /// (`SELECT GET_LOCK(name, wait)`), for what is left of the turn's deadline, and only if the
    /// instance's waiting budget has room (else [`LockError::Crowded`] at once).
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
    pub fn acquire_pooled(pool: &DbPool, turn: Turn) -> Result<Self, AcquireError> {
        let mut conn = pool.get()?;
        match take(&mut conn, &turn) {
            Err(LockError::Failed { source: Some(e), .. }) if lost_connection(&e) => {
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

/// Several named locks held by one session, taken one after another in the order of a
/// [`TurnsInOrder`] and let go of together: MySQL's form of a stay's locks, one per night
/// ([`transaction_under_locks`](super::transaction_under_locks); PostgreSQL takes them inside
/// the transaction instead). MySQL 5.7 and MariaDB 10.0.2 gave a session several named locks at
/// once; before, a second `GET_LOCK` let go of the first. The hazards are those of
/// [`NamedLockGuard`], and so are the answers: the guard owns the connection, the work runs on
/// it, the release must let go of exactly what was taken or the session is closed.
///
/// ```text
/// SELECT GET_LOCK(name1, 0)            -- in the order of the names: ascending dates
/// SELECT GET_LOCK(name2, 0)            -- (each waited for only if held elsewhere)
/// …the work, on NamedLocksInOrder::conn…
/// SELECT RELEASE_ALL_LOCKS()           -- drop: must answer 2, the locks taken
/// ```
pub struct NamedLocksInOrder {
    conn: PooledConn,
    /// The turns whose locks the session holds, in the order taken. Dropped after the release,
    /// like [`NamedLockGuard`]'s one turn.
    held: Vec<Turn>,
    /// When the last of them was granted.
    granted: Instant,
}

impl NamedLocksInOrder {
    /// Takes the locks of `turns` on one connection of `pool`, in their order, each as
    /// [`NamedLockGuard::acquire_in_turn`] takes its one (ask with 0, then wait within what is
    /// left of the turn and the waiting budget). A lock not had gives back those taken before
    /// it. The first statement may meet a connection that died in the pool, as with
    /// [`NamedLockGuard::acquire_pooled`]: then it is sent once more, on another connection.
    pub fn acquire_pooled(pool: &DbPool, turns: TurnsInOrder) -> Result<Self, AcquireError> {
        let mut guard = Self { conn: pool.get()?, held: Vec::new(), granted: Instant::now() };
        for turn in turns.into_turns() {
            match take(&mut guard.conn, &turn) {
                Err(LockError::Failed { source: Some(e), .. })
                    if guard.held.is_empty() && lost_connection(&e) =>
                {
                    guard.conn = pool.get()?; // the dead one, marked broken, is closed
                    take(&mut guard.conn, &turn)?;
                }
                // Returning drops the guard, which lets go of the locks taken so far.
                taken => taken?,
            }
            guard.held.push(turn);
        }
        guard.granted = Instant::now();
        Ok(guard)
    }

    /// The connection that holds the locks. Everything done under them must run here.
    pub fn conn(&mut self) -> &mut DbConn {
        &mut self.conn
    }

    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        self.held.iter().map(Turn::name)
    }
}

impl Drop for NamedLocksInOrder {
    /// All the locks in one statement (`Dialect::unlock_several`), which must let go of exactly
    /// those taken; otherwise the session is closed, as [`NamedLockGuard`]'s is.
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let names: Vec<&str> = self.held.iter().map(|turn| turn.name().as_str()).collect();
        let released = self.conn.dialect().unlock_several(&mut self.conn, &names);
        for turn in &self.held {
            metrics::held(Family::Named, turn.name().scope(), self.granted.elapsed());
        }
        if let Err(problem) = released {
            log::error!("named locks {}: {problem}; closing their connection", names.join(", "));
            close_instead_of_returning(&mut self.conn);
        }
    }
}

/// The guard's "take the lock": [`ask_then_wait`] with this session's `GET_LOCK` (or
/// `pg_advisory_lock`) as the question.
fn take(conn: &mut PooledConn, turn: &Turn) -> Result<(), LockError> {
    let name = turn.name();
    let dialect = conn.dialect();
    ask_then_wait(turn, |wait| dialect.can_wait(wait), |wait| ask(conn, name, wait)).map_err(
        |not| match not {
            NotTaken::TimedOut(waited) => LockError::TimedOut { name: name.clone(), waited },
            NotTaken::Crowded => LockError::Crowded { name: name.clone() },
            NotTaken::Failed(failed) => failed,
        },
    )
}

/// How every named lock is taken in a turn, the session's ([`NamedLockGuard`]) and the
/// transaction's ([`transaction_under_lock`](super::transaction_under_lock)) alike. The lesson
/// is two lines: ask for the lock, waiting at most what is left of the turn; run the work. This
/// adds one named optimisation and one guard rail:
///
/// 1. **Ask with 0 first.** `ask(0)` (`SELECT GET_LOCK(name, 0)`, `pg_try_advisory_lock`)
///    answers at once. A free lock, the common case, costs that one statement and takes no
///    place in the waiting budget.
/// 2. **Then wait within the budget.** Only when the lock is held elsewhere is the server asked
///    again, waiting for what is left of the turn's deadline, and only while this instance has
///    a free place among the `LOCK_WAITERS_MAX` sessions that may wait at the server at once
///    ([`NotTaken::Crowded`] at once otherwise: a session waiting holds a pooled connection).
///
/// `ask(wait)` sends one question: `Ok(true)` granted, `Ok(false)` held elsewhere for the whole
/// wait, `Err` the question failed. The wait and its outcome are counted in the metrics.
pub(super) fn ask_then_wait<E>(
    turn: &Turn,
    can_wait: impl Fn(Duration) -> bool,
    mut ask: impl FnMut(Duration) -> Result<bool, E>,
) -> Result<(), NotTaken<E>> {
    let asked = Instant::now();
    let result = match ask(Duration::ZERO) {
        Ok(true) => Ok(()),
        Ok(false) => {
            let wait = turn.remaining();
            if !can_wait(wait) {
                Err(NotTaken::TimedOut(wait))
            } else {
                match turn.try_wait_slot() {
                    None => Err(NotTaken::Crowded),
                    Some(_waiting) => match ask(wait) {
                        Ok(true) => Ok(()),
                        Ok(false) => Err(NotTaken::TimedOut(wait)),
                        Err(e) => Err(NotTaken::Failed(e)),
                    },
                }
            }
        }
        Err(e) => Err(NotTaken::Failed(e)),
    };
    let name = turn.name();
    metrics::waited(Family::Named, name.scope(), asked.elapsed());
    let outcome = match &result {
        Ok(()) => "acquired",
        Err(NotTaken::TimedOut(_)) => "timed_out",
        Err(NotTaken::Crowded) => "crowded",
        Err(NotTaken::Failed(_)) => "failed",
    };
    metrics::record(|m| m.named_lock_acquisitions.with_label_values(&[name.scope(), outcome]).inc());
    result
}

/// Why [`ask_then_wait`] holds no lock.
pub(super) enum NotTaken<E> {
    /// Held elsewhere for the whole wait, which was this long (or too short for the server to
    /// wait at all: `GET_LOCK` counts whole seconds).
    TimedOut(Duration),
    /// Held elsewhere, and the waiting budget was spent.
    Crowded,
    /// The question itself failed.
    Failed(E),
}

/// One `SELECT GET_LOCK(name, wait)`, or its PostgreSQL counterpart (`Dialect::lock`, which
/// shows the statements). On any answer but "granted" or "held elsewhere" the session may be in
/// an unknown state (did the server grant the lock before the error?), so it is closed.
fn ask(conn: &mut PooledConn, name: &LockName, wait: Duration) -> Result<bool, LockError> {
    let failed = match conn.dialect().lock(conn, name.as_str(), wait) {
        Ok(Asked::Granted) => return Ok(true),
        Ok(Asked::Held) => return Ok(false),
        Ok(Asked::Refused(detail)) => LockError::Failed { name: name.clone(), detail, source: None },
        Err(e) => LockError::Failed { name: name.clone(), detail: e.to_string(), source: Some(e) },
    };
    close_instead_of_returning(conn);
    Err(failed)
}

impl Drop for NamedLockGuard {
    /// The release must answer that it let go, and the session must hold no named lock after it
    /// (`Dialect::unlock`): anything else means our bookkeeping is wrong, or the work took a lock
    /// on our connection. Either way the session cannot be trusted, so it is closed rather than
    /// pooled.
    fn drop(&mut self) {
        let released = self.conn.dialect().unlock(&mut self.conn, self.name.as_str());
        metrics::held(Family::Named, self.name.scope(), self.granted.elapsed());
        if let Err(problem) = released {
            log::error!("named lock {}: {problem}; closing its connection", self.name);
            close_instead_of_returning(&mut self.conn);
        }
    }
}

/// Marks the connection broken, so r2d2 closes it when it is dropped instead of pooling it again.
fn close_instead_of_returning(conn: &mut PooledConn) {
    metrics::record(|m| m.named_lock_sessions_closed.inc());
    crate::db::transaction::mark_broken(conn);
}
