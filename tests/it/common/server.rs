//! What the server itself says about sessions and named locks, asked in each engine's words: a
//! MySQL named lock is `GET_LOCK(name)`, a PostgreSQL one is the session-level advisory lock on
//! the name's 64-bit key. Tests use these to hold, free and look up locks behind the app's back.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use haita::db::{DbConn, Engine, Sql, cached_sql};
use haita::locking::LockName;

/// The session holding `name`, if any (`Dialect::holder_of`).
pub fn holder_of(conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>> {
    conn.dialect().holder_of(conn, name)
}

/// This session's id, as [`holder_of`] reports a holder.
pub fn connection_id(conn: &mut DbConn) -> QueryResult<i64> {
    conn.dialect().session_id(conn)
}

/// Ends the session `id` (an admin's `KILL`, a crashed process), which frees its locks.
pub fn end_session(conn: &mut DbConn, id: i64) -> QueryResult<()> {
    conn.dialect().end_session(conn, id)
}

/// Takes `name` on this session without waiting: true when granted. Taking it again on the same
/// session succeeds and counts once more on both engines (each re-entry needs its own release).
pub fn try_lock(conn: &mut DbConn, name: &LockName) -> bool {
    ask(conn, name, "SELECT COALESCE(GET_LOCK(?, 0), 0) = 1", "SELECT pg_try_advisory_lock(?)")
}

/// A yes/no question about `name`: MySQL's lock functions take the name, PostgreSQL's its key.
fn ask(conn: &mut DbConn, name: &LockName, mysql: &str, postgres: &str) -> bool {
    match conn.engine() {
        Engine::Mysql => cached_sql::<Bool>(mysql).bind::<Text, _>(name.as_str()).get_result(conn),
        Engine::Postgres => {
            cached_sql::<Bool>(postgres).bind::<BigInt, _>(name.advisory_key()).get_result(conn)
        }
    }
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Takes `name` on this session, waiting at most `wait` (whole seconds on MySQL): true when
/// granted in time.
pub fn lock_within(conn: &mut DbConn, name: &LockName, wait: Duration) -> bool {
    match conn.engine() {
        Engine::Mysql => cached_sql::<Bool>("SELECT COALESCE(GET_LOCK(?, ?), 0) = 1")
            .bind::<Text, _>(name.as_str())
            .bind::<BigInt, _>(i64::try_from(wait.as_secs()).expect("seconds"))
            .get_result(conn)
            .expect("take the lock"),
        Engine::Postgres => {
            // The wait is bounded by `lock_timeout`, set for this one transaction only.
            let granted = conn.transaction(|conn| {
                cached_sql::<Text>("SELECT set_config('lock_timeout', ?, true)")
                    .bind::<Text, _>(format!("{}ms", wait.as_millis().max(1)))
                    .get_result::<String>(conn)?;
                cached_sql::<()>("SELECT pg_advisory_lock(?)")
                    .bind::<BigInt, _>(name.advisory_key())
                    .execute(conn)
            });
            match granted {
                Ok(_) => true,
                Err(e) if haita::db::errors::is_lock_timeout(&e) => false,
                Err(e) => panic!("take the lock: {e}"),
            }
        }
    }
}

/// Releases one hold of `name` on this session: true when this session held it.
pub fn release(conn: &mut DbConn, name: &LockName) -> bool {
    ask(conn, name, "SELECT COALESCE(RELEASE_LOCK(?), 0) = 1", "SELECT pg_advisory_unlock(?)")
}

/// Whether any session holds `name`.
pub fn is_free(conn: &mut DbConn, name: &LockName) -> bool {
    holder_of(conn, name.as_str()).expect("holder").is_none()
}

/// Whether the server still has session `id`. Closing is asynchronous on the server side, so a
/// session seen once more gets a moment before this concludes it is still there.
pub fn session_exists(conn: &mut DbConn, id: i64) -> bool {
    for _ in 0..50 {
        let found: i64 = cached_sql::<BigInt>(Sql::per_engine(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
            "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?",
        ))
        .bind::<BigInt, _>(id)
        .get_result(conn)
        .expect("sessions");
        if found == 0 {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Releases every named lock this session holds.
pub fn release_all(conn: &mut DbConn) {
    cached_sql::<()>(Sql::per_engine("DO RELEASE_ALL_LOCKS()", "SELECT pg_advisory_unlock_all()"))
        .execute(conn)
        .expect("release all locks");
}
