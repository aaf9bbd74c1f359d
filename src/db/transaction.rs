//! A transaction in two round trips instead of six.
//!
//! diesel's `Connection::transaction` sends `BEGIN` and `COMMIT` through `batch_execute`, which
//! on MySQL switches multi-statement mode on before each of them and off after: three round
//! trips per statement, six per transaction, on every write path. [`transaction`] sends
//! `START TRANSACTION`, `COMMIT` and `ROLLBACK` as prepared statements the connection keeps
//! (see `cached`), one round trip each.
//!
//! MariaDB prepares all three. A server that refuses to prepare one of them (error 1295, "not
//! supported in the prepared statement protocol") makes the whole process fall back to plain
//! text for all three, once, for good.

use std::sync::atomic::{AtomicBool, Ordering};

use diesel::connection::{SimpleConnection, TransactionManager};
use diesel::prelude::*;
use diesel::result::Error;

use super::cached_sql;
use super::conn::DbConn;
use super::errors::{Failure, classify};

/// Whether this server prepares the transaction statements (until one is refused).
static PREPARED: AtomicBool = AtomicBool::new(true);

/// Runs `work` in a transaction on `conn`: committed if it returns `Ok`, rolled back if it
/// returns `Err`. A connection whose `COMMIT` or `ROLLBACK` failed is in an unknown state, so
/// it is marked broken and the pool closes it instead of handing it out again.
///
/// Not for nesting: inside `work`, do not open another transaction (diesel's included).
pub fn transaction<T, E: From<Error>>(
    conn: &mut DbConn,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E> {
    run(conn, "START TRANSACTION")?;
    finish(conn, work)
}

/// Runs `work` in the transaction just started on `conn`, then commits or rolls back.
fn finish<T, E: From<Error>>(
    conn: &mut DbConn,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E> {
    match work(conn) {
        Ok(value) => match run(conn, "COMMIT") {
            Ok(()) => Ok(value),
            Err(commit_failed) => {
                // The COMMIT may or may not have landed; whatever is left open is undone.
                if run(conn, "ROLLBACK").is_err() {
                    mark_broken(conn);
                }
                Err(commit_failed.into())
            }
        },
        Err(e) => {
            if run(conn, "ROLLBACK").is_err() {
                mark_broken(conn);
            }
            // A retry runs the same statements again, on this connection.
            super::pool::renew_statements_after_an_error(conn);
            Err(e)
        }
    }
}

/// [`transaction`] at READ COMMITTED, for work a named lock already serialises per key.
///
/// Under REPEATABLE READ, a locking read of a row that does not exist locks the *gap* it would
/// go in, and inserting there needs that gap free of other transactions' gap locks. Two such
/// transactions for different missing keys that fall in one gap each hold a gap lock and wait to
/// insert into it: a deadlock, though the keys never meet. At READ COMMITTED a locking read
/// takes no gap lock; the named lock does that job for the one key that matters.
pub fn transaction_read_committed<T, E: From<Error>>(
    conn: &mut DbConn,
    work: impl FnOnce(&mut DbConn) -> Result<T, E>,
) -> Result<T, E> {
    // PostgreSQL's sessions run at READ COMMITTED already, and a locking read there takes no
    // gap locks at any level: nothing to set.
    let Some(read_committed) = conn.dialect().read_committed_for_next_transaction() else {
        return transaction(conn, work);
    };
    // Applies to the next transaction only; the connection's default is left as it was. Should
    // that transaction not start, the setting would carry over to whatever runs next on the
    // connection: it is closed instead of pooled.
    run(conn, read_committed)?;
    if let Err(e) = run(conn, "START TRANSACTION") {
        mark_broken(conn);
        return Err(e.into());
    }
    finish(conn, work)
}

fn run(conn: &mut DbConn, sql: &'static str) -> QueryResult<()> {
    if PREPARED.load(Ordering::Relaxed) {
        match cached_sql::<()>(sql).execute(conn) {
            Ok(_) => return Ok(()),
            Err(e) if classify(&e) == Some(Failure::NotPreparable) => {
                log::info!("the server does not prepare {sql:?}; sending transaction statements as text");
                PREPARED.store(false, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    conn.batch_execute(sql)
}

/// Marks a connection broken, so r2d2 closes it when it is dropped instead of pooling it again:
/// diesel's r2d2 manager reports a connection as broken when its transaction manager is in
/// error, which is exactly the state `set_in_error` records.
pub fn mark_broken(conn: &mut DbConn) {
    <DbConn as TransactionManager<DbConn>>::transaction_manager_status_mut(conn).set_in_error();
}
