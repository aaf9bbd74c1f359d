//! What a database error means, decided in one function: [`classify`].
//!
//! Callers need to know a few things of an error: was this transaction a deadlock victim (run
//! it again), did a lock wait run out (answer 503 busy), is the connection gone (503
//! unavailable, a fresh connection), or did the server refuse to prepare a statement. They ask
//! here and never read an error's text themselves.
//!
//! diesel keeps each server's own code (MySQL's errno, PostgreSQL's SQLSTATE) to itself and
//! hands over a [`DatabaseErrorKind`] for a few of them: 1213 and 40001 are
//! `SerializationFailure`, PostgreSQL's connection exceptions (08xxx) and a broken libpq
//! connection `ClosedConnection`. Everything else arrives as `Unknown` with the server's message,
//! so for those the message is all there is to go by. The wordings below are the servers' and
//! client libraries' own, in English: MySQL and MariaDB always send English here, and the start-up
//! check refuses a PostgreSQL that would translate them (`lc_messages`).

use diesel::result::{DatabaseErrorKind, Error as DbError};

/// What a database error means to the code that met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The server rolled this transaction back to break a deadlock (MySQL 1213, PostgreSQL
    /// 40P01), or could not serialise it (40001): the whole transaction may be run again.
    Deadlock,
    /// A lock wait ran out: MySQL 1205 (`innodb_lock_wait_timeout`), PostgreSQL 55P03
    /// (`lock_timeout`, row and advisory locks alike).
    LockWaitTimeout,
    /// The connection to the server is gone, or the server is going away.
    LostConnection,
    /// The server refused to prepare the statement (MySQL 1295, `ER_UNSUPPORTED_PS`).
    NotPreparable,
}

/// Deadlocks whose kind diesel does not set (PostgreSQL's 40P01).
const DEADLOCK: &[&str] = &["deadlock detected"];

/// MySQL 1205 and PostgreSQL 55P03.
const LOCK_WAIT_TIMEOUT: &[&str] = &["Lock wait timeout exceeded", "canceling statement due to lock timeout"];

/// Client errors 2006 / 2013 and their MariaDB wordings, a server shutting down (1053), a
/// killed connection (1927); libpq's and PostgreSQL's for a backend that died or was
/// terminated, a server shutting down or still starting. Compared lower-cased.
const LOST_CONNECTION: &[&str] = &[
    "server has gone away",
    "lost connection",
    "can't connect",
    "connection was killed",
    "shutdown in progress",
    "connection refused",
    "server closed the connection unexpectedly",
    "terminating connection",
    "no connection to the server",
    "could not connect to server",
    "the database system is shutting down",
    "the database system is starting up",
    "could not receive data from server",
];

/// MySQL's and MariaDB's wording of 1295.
const NOT_PREPARABLE: &[&str] = &["prepared statement protocol"];

/// What `error` means, or `None` for anything else (a constraint, a bug, a bad statement).
pub fn classify(error: &DbError) -> Option<Failure> {
    match error {
        DbError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => Some(Failure::Deadlock),
        DbError::DatabaseError(DatabaseErrorKind::ClosedConnection, _) => Some(Failure::LostConnection),
        DbError::DatabaseError(_, info) => classify_message(info.message()),
        // COMMIT failed and so did the ROLLBACK after it: the connection died mid-transaction.
        DbError::RollbackErrorOnCommit { commit_error, rollback_error } => [commit_error, rollback_error]
            .into_iter()
            .find_map(|e| (classify(e) == Some(Failure::LostConnection)).then_some(Failure::LostConnection)),
        // diesel gives up on a connection whose ROLLBACK failed: in practice, a dead one.
        DbError::BrokenTransactionManager => Some(Failure::LostConnection),
        _ => None,
    }
}

/// [`classify`] for a server's or client library's message alone: what an r2d2 error, which
/// carries only text, is read with too.
pub fn classify_message(message: &str) -> Option<Failure> {
    if DEADLOCK.iter().any(|m| message.starts_with(m)) {
        return Some(Failure::Deadlock);
    }
    if LOCK_WAIT_TIMEOUT.iter().any(|m| message.starts_with(m)) {
        return Some(Failure::LockWaitTimeout);
    }
    if NOT_PREPARABLE.iter().any(|m| message.contains(m)) {
        return Some(Failure::NotPreparable);
    }
    let lower = message.to_ascii_lowercase();
    LOST_CONNECTION.iter().any(|m| lower.contains(m)).then_some(Failure::LostConnection)
}

/// Whether `error` means the connection is gone.
pub fn lost_connection(error: &DbError) -> bool {
    classify(error) == Some(Failure::LostConnection)
}

/// Whether `error` is a lock wait that ran out.
pub fn is_lock_timeout(error: &DbError) -> bool {
    classify(error) == Some(Failure::LockWaitTimeout)
}

/// A database error as the server would report it, for unit tests of error handling.
#[cfg(test)]
pub(crate) fn database_error(kind: DatabaseErrorKind, message: &'static str) -> DbError {
    struct ServerSaid(&'static str);

    impl diesel::result::DatabaseErrorInformation for ServerSaid {
        fn message(&self) -> &str {
            self.0
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            None
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    DbError::DatabaseError(kind, Box::new(ServerSaid(message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(kind: DatabaseErrorKind, message: &str) -> DbError {
        DbError::DatabaseError(kind, Box::new(message.to_string()))
    }

    #[test]
    fn each_servers_words_are_classified() {
        let unknown = |m| classify(&server_error(DatabaseErrorKind::Unknown, m));
        assert_eq!(
            classify(&server_error(
                DatabaseErrorKind::SerializationFailure,
                "Deadlock found when trying to get lock; try restarting transaction"
            )),
            Some(Failure::Deadlock)
        );
        assert_eq!(unknown("deadlock detected"), Some(Failure::Deadlock));
        assert_eq!(
            unknown("Lock wait timeout exceeded; try restarting transaction"),
            Some(Failure::LockWaitTimeout)
        );
        assert_eq!(unknown("canceling statement due to lock timeout"), Some(Failure::LockWaitTimeout));
        assert_eq!(
            unknown("This command is not supported in the prepared statement protocol yet"),
            Some(Failure::NotPreparable)
        );
        for lost in [
            "MySQL server has gone away",
            "Lost connection to server during query",
            "Connection was killed",
            "server closed the connection unexpectedly",
            "terminating connection due to administrator command",
        ] {
            assert_eq!(unknown(lost), Some(Failure::LostConnection), "{lost}");
        }
        assert_eq!(
            classify(&server_error(DatabaseErrorKind::ClosedConnection, "")),
            Some(Failure::LostConnection)
        );
        assert_eq!(classify(&DbError::BrokenTransactionManager), Some(Failure::LostConnection));
        assert_eq!(unknown("Duplicate entry '1' for key 'PRIMARY'"), None);
        assert_eq!(classify(&DbError::NotFound), None);
    }
}
