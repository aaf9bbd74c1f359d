//! Rerun a whole transaction when InnoDB chose it as a deadlock victim (1213). Nothing else is
//! retried — in particular not a row lock wait timeout (1205): it already waited the whole
//! `innodb_lock_wait_timeout` holding a pooled connection, and the row is still held by
//! someone slow or stuck; waiting that long twice more would hold the connection for three
//! timeouts. It ends the request with 503 busy and `Retry-After` instead, at once.
//!
//! The classic advice is to retry "Deadlock found" three times, 100 ms apart. Two details make
//! that safe here: InnoDB rolls back the *whole* transaction of a deadlock victim, so the retry
//! must rerun the whole closure, never one statement; and clients that collided once will
//! collide again if they wait the same time, so the backoff is exponential with full jitter.
//! Attempts are counted (returned, and totalled in `/metrics`) so tests can see a retry happen.

use std::time::Duration;

use diesel::result::Error as DbError;
use rand::Rng;

use crate::db::errors::{Failure, classify};

/// A lock conflict that a fresh attempt of the same transaction may not meet again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockConflict {
    /// MySQL 1213: InnoDB chose this transaction as a deadlock victim and rolled it back.
    Deadlock,
    /// MySQL 1205: a row lock stayed held longer than `innodb_lock_wait_timeout`.
    LockWaitTimeout,
}

/// Errors that may carry a [`LockConflict`]; feature errors implement it by handing over their
/// database variant.
pub trait MayConflict {
    /// The database's error this is or carries, if any (with the server's details).
    fn database_error(&self) -> Option<&DbError>;

    fn lock_conflict(&self) -> Option<LockConflict> {
        self.database_error().and_then(conflict_of)
    }
}

impl MayConflict for DbError {
    fn database_error(&self) -> Option<&DbError> {
        Some(self)
    }
}

/// A deadlock (MySQL 1213, PostgreSQL 40P01) or a serialization failure (40001: retry the whole
/// transaction, as for a deadlock), or a lock wait that ran out (1205, 55P03), as
/// `db::errors::classify` tells them.
fn conflict_of(error: &DbError) -> Option<LockConflict> {
    match classify(error)? {
        Failure::Deadlock => Some(LockConflict::Deadlock),
        Failure::LockWaitTimeout => Some(LockConflict::LockWaitTimeout),
        Failure::LostConnection | Failure::NotPreparable => None,
    }
}

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Upper bound of the wait before the second attempt; doubles for each later one.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 3, base_delay: Duration::from_millis(20), max_delay: Duration::from_millis(250) }
    }
}

impl RetryPolicy {
    /// Full jitter: a uniformly random wait up to `base · 2^(retry-1)`, capped.
    fn delay_before(&self, attempt: u32) -> Duration {
        let ceiling =
            self.base_delay.saturating_mul(1 << (attempt.saturating_sub(2)).min(16)).min(self.max_delay);
        let micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::rng().random_range(0..=micros))
    }
}

/// The result of the last attempt and how many attempts were made.
#[derive(Debug)]
pub struct Attempted<T, E> {
    pub result: Result<T, E>,
    pub attempts: u32,
}

impl LockConflict {
    fn label(self) -> &'static str {
        match self {
            LockConflict::Deadlock => "deadlock",
            LockConflict::LockWaitTimeout => "lock_wait_timeout",
        }
    }
}

/// Runs `transaction` — which must open, run and commit (or roll back) a whole transaction —
/// until it succeeds, fails with anything but a lock conflict, or `policy.max_attempts` is
/// spent. Blocks the thread while backing off: call it from `web::block`.
pub fn retry_on_lock_conflict<T, E: MayConflict>(
    policy: &RetryPolicy,
    mut transaction: impl FnMut() -> Result<T, E>,
) -> Attempted<T, E> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = transaction();
        let conflict = match &result {
            Err(e) => e.lock_conflict(),
            Ok(_) => None,
        };
        match conflict {
            None | Some(LockConflict::LockWaitTimeout) => return Attempted { result, attempts },
            Some(_) if attempts >= policy.max_attempts => {
                crate::metrics::record(|m| m.transaction_gave_up.inc());
                return Attempted { result, attempts };
            }
            Some(kind) => {
                crate::metrics::record(|m| m.transaction_retries.with_label_values(&[kind.label()]).inc());
                log::info!("attempt {attempts} hit {kind:?}; retrying the whole transaction");
                std::thread::sleep(policy.delay_before(attempts + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use diesel::result::DatabaseErrorKind;

    use super::*;
    use crate::db::errors::database_error;

    fn deadlock() -> DbError {
        database_error(
            DatabaseErrorKind::SerializationFailure,
            "Deadlock found when trying to get lock; try restarting transaction",
        )
    }

    fn timeout() -> DbError {
        database_error(DatabaseErrorKind::Unknown, "Lock wait timeout exceeded; try restarting transaction")
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..Default::default()
        }
    }

    #[test]
    fn deadlocks_and_lock_wait_timeouts_are_recognised_and_nothing_else() {
        assert_eq!(deadlock().lock_conflict(), Some(LockConflict::Deadlock));
        assert_eq!(timeout().lock_conflict(), Some(LockConflict::LockWaitTimeout));
        let user_lock_deadlock = database_error(
            DatabaseErrorKind::Unknown,
            "Deadlock found when trying to get user-level lock; try rolling back",
        );
        assert_eq!(
            user_lock_deadlock.lock_conflict(),
            None,
            "3058 means the code takes named locks out of order"
        );
        assert_eq!(DbError::NotFound.lock_conflict(), None);
        assert_eq!(
            database_error(DatabaseErrorKind::UniqueViolation, "Duplicate entry").lock_conflict(),
            None
        );
    }

    #[test]
    fn a_conflict_is_retried_until_the_transaction_succeeds() {
        let mut calls = 0;
        let outcome = retry_on_lock_conflict(&fast(), || {
            calls += 1;
            if calls == 1 { Err(deadlock()) } else { Ok("done") }
        });
        assert_eq!(outcome.attempts, 2);
        assert_eq!(outcome.result.ok(), Some("done"));
    }

    #[test]
    fn retries_stop_after_max_attempts_with_the_last_error() {
        let mut calls = 0;
        let outcome = retry_on_lock_conflict(&fast(), || -> Result<(), DbError> {
            calls += 1;
            Err(deadlock())
        });
        assert_eq!((calls, outcome.attempts), (3, 3));
        assert!(matches!(outcome.result, Err(e) if e.lock_conflict() == Some(LockConflict::Deadlock)));
    }

    #[test]
    fn a_lock_wait_timeout_is_not_waited_out_again() {
        let mut calls = 0;
        let outcome = retry_on_lock_conflict(&fast(), || -> Result<(), DbError> {
            calls += 1;
            Err(timeout())
        });
        assert_eq!((calls, outcome.attempts), (1, 1), "one timeout is enough: answer busy");
        assert!(matches!(outcome.result, Err(e) if e.lock_conflict() == Some(LockConflict::LockWaitTimeout)));
    }

    #[test]
    fn other_errors_are_not_retried() {
        let mut calls = 0;
        let outcome = retry_on_lock_conflict(&fast(), || -> Result<(), DbError> {
            calls += 1;
            Err(DbError::NotFound)
        });
        assert_eq!((calls, outcome.attempts), (1, 1));
    }

    #[test]
    fn backoff_grows_but_stays_under_its_cap() {
        let policy = RetryPolicy::default();
        for attempt in 2..10 {
            assert!(policy.delay_before(attempt) <= policy.max_delay);
        }
    }
}
