//! The one error of the plumbing every feature shares, and its one mapping to HTTP.
//!
//! Each feature keeps an error enum of its own with only its business answers (`FullyBooked`,
//! `InsufficientStock`, …) and embeds [`Infra`] for everything else: the pool had no connection
//! in time, the database refused or lost a statement, the blocking thread pool failed, a named
//! lock was not granted. Those failures mean the same thing whichever feature meets them, so they
//! are answered in one place, here, and every feature answers a deadlock or a lost connection
//! the same way:
//!
//! | failure | answer |
//! |---|---|
//! | named lock not granted within its wait (`GET_LOCK` answered 0) | 503 `busy` + `Retry-After` |
//! | deadlock (1213) or row lock wait timeout (1205) that reached the client | 503 `busy` + `Retry-After` |
//! | no pooled connection within `POOL_TIMEOUT_SECS` | 503 `busy` + `Retry-After` |
//! | the connection to the server was lost, the server is going away, or the pool cannot reach it | 503 `unavailable` + `Retry-After` |
//! | this instance is shutting down and the request was still waiting in memory for a lock | 503 `draining` + `Retry-After` |
//! | anything else (a bug, a broken invariant) | 500, cause chain logged, nothing sent |
//!
//! A feature's `impl AsProblem` ends with `Self::Infra(e) => e.problem()`; the
//! `infra_error!` macro gives the feature enum the `From` conversions, so
//! `?` works on diesel, r2d2, blocking and lock errors alike.

use diesel::result::Error as DbError;

use crate::db::CheckoutError;
use crate::db::errors::{Failure, classify_message, lost_connection};
use crate::locking::retry::MayConflict;
use crate::locking::{AcquireError, LockError};
use crate::wire::answers::{Answer, Carried};
use crate::wire::error::{AsProblem, Problem};

/// Pool, database, blocking pool, named lock: the failures no feature decides about.
#[derive(Debug, thiserror::Error)]
pub enum Infra {
    #[error(transparent)]
    Pool(#[from] CheckoutError),
    /// A statement failed; where its error entered the app's errors, so that a 500 (a bug) can
    /// be found from its log line.
    #[error("database error {1}")]
    Database(#[source] DbError, Site),
    #[error(transparent)]
    Blocking(#[from] actix_web::error::BlockingError),
    #[error(transparent)]
    Lock(#[from] LockError),
    /// This request rode in a coalesced batch (one transaction for many requests) whose
    /// connection was lost ([`Infra::may_have_committed`]): the batch may have committed, so the
    /// request is not tried again on its own, which could place it twice.
    #[error("the connection of the batch this request was in was lost; the batch may have committed")]
    LostInBatch,
}

/// The `?` that turned a failure into an [`Infra`]: `From` conversions of ours are
/// `#[track_caller]`, so this is the feature's own line, not this file's.
#[derive(Debug, Clone, Copy)]
pub struct Site(&'static std::panic::Location<'static>);

impl Site {
    #[track_caller]
    fn here() -> Self {
        Self(std::panic::Location::caller())
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {}:{}", self.0.file(), self.0.line())
    }
}

impl From<DbError> for Infra {
    #[track_caller]
    fn from(error: DbError) -> Self {
        Self::Database(error, Site::here())
    }
}

impl From<AcquireError> for Infra {
    fn from(error: AcquireError) -> Self {
        match error {
            AcquireError::Pool(e) => Self::Pool(e),
            AcquireError::Lock(e) => Self::Lock(e),
        }
    }
}

impl Infra {
    /// A bounded wait ran out (lock, row lock, pool): the client should retry, and nothing is
    /// wrong with the app. Benchmarks and the demo count these apart from real failures.
    pub fn is_busy(&self) -> bool {
        match self {
            Self::Pool(CheckoutError::Busy(_))
            | Self::Lock(LockError::TimedOut { .. } | LockError::Crowded { .. }) => true,
            Self::Pool(CheckoutError::Down(_)) | Self::LostInBatch => false,
            Self::Database(e, _) => e.lock_conflict().is_some(),
            // Nothing was waited out: the instance is leaving.
            Self::Lock(LockError::Failed { .. } | LockError::ShuttingDown { .. }) | Self::Blocking(_) => {
                false
            }
        }
    }

    /// The server went away or the connection to it broke: not our bug, and it may come back.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Database(e, _) => lost_connection(e),
            Self::Lock(LockError::Failed { source: Some(e), .. }) => lost_connection(e),
            Self::Pool(CheckoutError::Down(_)) | Self::LostInBatch => true,
            // r2d2 reports why its last connect failed in the checkout error's text.
            Self::Pool(CheckoutError::Busy(e)) => {
                classify_message(&e.to_string()) == Some(Failure::LostConnection)
            }
            _ => false,
        }
    }

    /// The connection was lost while a statement ran. If that statement was a COMMIT, it may
    /// have landed: the work must not be done again unless it is known not to have been (an
    /// idempotency key). A checkout that found the server down never started anything.
    pub fn may_have_committed(&self) -> bool {
        match self {
            Self::Database(e, _) | Self::Lock(LockError::Failed { source: Some(e), .. }) => {
                lost_connection(e)
            }
            _ => false,
        }
    }
}

/// A feature error that carries an `Infra` answers what its problem says, and is never `[kept]`
/// nor answered in place: the infrastructure decided nothing about the request.
impl Carried for Infra {
    fn carried_answer(&self) -> Answer {
        let problem = self.problem();
        Answer::new(problem.status, problem.error)
    }
}

/// Infra answers 503 (busy or unavailable, with `Retry-After`) or 500; it is carried by every
/// feature error and documented once for all operations (`crate::openapi`), not per variant.
impl AsProblem for Infra {
    fn problem(&self) -> Problem {
        if self.is_unavailable() {
            return Problem::unavailable();
        }
        match self {
            Self::Lock(e @ (LockError::TimedOut { name, .. } | LockError::Crowded { name })) => {
                let cause =
                    if matches!(e, LockError::Crowded { .. }) { "lock_waiters" } else { "named_lock" };
                Problem::busy(match name.scope() {
                    "book" => "busy.book",
                    "stock" => "busy.stock",
                    // Queued behind a flash sale's batches (`orders::coalesce`).
                    "order" => "busy.demand",
                    "edit" => "busy.edit",
                    _ => "busy.server",
                })
                .because(cause)
            }
            Self::Lock(LockError::ShuttingDown { .. }) => Problem::draining(),
            Self::Database(e, _) if e.lock_conflict().is_some() => {
                Problem::busy("busy.demand").because("row_lock")
            }
            Self::Pool(_) => Problem::busy("busy.server").because("pool"),
            Self::Database(..)
            | Self::Blocking(_)
            | Self::Lock(LockError::Failed { .. })
            | Self::LostInBatch => Problem::internal(),
        }
    }
}

impl MayConflict for Infra {
    fn database_error(&self) -> Option<&diesel::result::Error> {
        match self {
            Self::Database(e, _) => Some(e),
            _ => None,
        }
    }
}

/// Gives a feature error with an `Infra(Infra)` variant the `From` conversions of every
/// infrastructure failure (so `?` works on each) and its `ResponseError` through `AsProblem`.
macro_rules! infra_error {
    ($error:ty) => {
        $crate::infra::infra_error!(@from $error, $crate::db::CheckoutError);
        $crate::infra::infra_error!(@from $error, diesel::result::Error);
        $crate::infra::infra_error!(@from $error, actix_web::error::BlockingError);
        $crate::infra::infra_error!(@from $error, $crate::locking::LockError);
        $crate::infra::infra_error!(@from $error, $crate::locking::AcquireError);
        impl $crate::locking::retry::MayConflict for $error {
            fn database_error(&self) -> Option<&diesel::result::Error> {
                match self {
                    Self::Infra(e) => e.database_error(),
                    _ => None,
                }
            }
        }
        $crate::wire::error::http_error!($error);
    };
    (@from $error:ty, $cause:ty) => {
        impl From<$cause> for $error {
            #[track_caller]
            fn from(error: $cause) -> Self {
                Self::Infra($crate::infra::Infra::from(error))
            }
        }
    };
}
pub(crate) use infra_error;

#[cfg(test)]
mod tests {
    use diesel::result::DatabaseErrorKind;

    use super::*;
    use crate::db::errors::database_error;

    fn server_said(kind: DatabaseErrorKind, message: &'static str) -> Infra {
        Infra::from(database_error(kind, message))
    }

    fn answer(infra: &Infra) -> (u16, &'static str, bool) {
        let problem = infra.problem();
        (problem.status.as_u16(), problem.error, problem.retry_after.is_some())
    }

    #[test]
    fn lock_conflicts_are_busy_in_every_feature() {
        let deadlock = server_said(
            DatabaseErrorKind::SerializationFailure,
            "Deadlock found when trying to get lock; try restarting transaction",
        );
        let wait =
            server_said(DatabaseErrorKind::Unknown, "Lock wait timeout exceeded; try restarting transaction");
        assert_eq!(answer(&deadlock), (503, "busy", true));
        assert_eq!(answer(&wait), (503, "busy", true));
        assert!(deadlock.is_busy() && wait.is_busy());
    }

    #[test]
    fn a_lost_connection_is_unavailable_not_a_bug() {
        for message in [
            "MySQL server has gone away",
            "Server has gone away",
            "Lost connection to MySQL server during query",
            "Lost connection to server during query",
            "Connection was killed",
            "Server shutdown in progress",
        ] {
            let lost = server_said(DatabaseErrorKind::Unknown, message);
            assert_eq!(answer(&lost), (503, "unavailable", true), "{message}");
        }
        let closed = server_said(DatabaseErrorKind::ClosedConnection, "closed");
        assert_eq!(answer(&closed), (503, "unavailable", true));
        let commit_then_rollback = Infra::from(DbError::RollbackErrorOnCommit {
            commit_error: Box::new(database_error(DatabaseErrorKind::Unknown, "Server has gone away")),
            rollback_error: Box::new(database_error(DatabaseErrorKind::Unknown, "Server has gone away")),
        });
        assert_eq!(answer(&commit_then_rollback), (503, "unavailable", true));
    }

    #[test]
    fn a_named_lock_timeout_is_busy_and_worded_for_its_scope() {
        let timed_out = Infra::Lock(LockError::TimedOut {
            name: crate::locking::Namespace::for_database("haita").stock(3),
            waited: std::time::Duration::from_secs(5),
        });
        let problem = timed_out.problem();
        assert_eq!((problem.status.as_u16(), problem.error), (503, "busy"));
        assert!(problem.message.contains("receiving this product"), "{}", problem.message);
    }

    #[test]
    fn a_request_turned_away_by_a_stopping_instance_is_draining() {
        let turned_away = Infra::Lock(LockError::ShuttingDown {
            name: crate::locking::Namespace::for_database("haita").stock(3),
        });
        assert_eq!(answer(&turned_away), (503, "draining", true));
        assert!(!turned_away.is_busy() && !turned_away.is_unavailable());
    }

    #[test]
    fn other_database_errors_are_internal() {
        assert_eq!(answer(&Infra::from(DbError::NotFound)), (500, "internal", false));
        let duplicate = server_said(DatabaseErrorKind::UniqueViolation, "Duplicate entry");
        assert_eq!(answer(&duplicate), (500, "internal", false));
    }

    #[test]
    fn a_database_error_names_the_line_that_met_it() {
        fn fails() -> Result<(), Infra> {
            Err(DbError::NotFound)?;
            Ok(())
        }
        let error = fails().expect_err("fails");
        let line = line!() - 4;
        assert!(
            error.to_string().contains(&format!("at src/infra.rs:{line}")),
            "{error} should name src/infra.rs:{line}"
        );
    }
}
