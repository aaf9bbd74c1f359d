//! The server's lock functions, declared once so every caller builds the same statement.
//!
//! Declared functions go through diesel's query builder, which keeps the prepared statement of
//! each distinct query on the connection and reuses it; a hand-written `sql_query` string is
//! prepared and closed again on every call. They also give the answers their SQL types once,
//! instead of a `QueryableByName` struct per call site.
//!
//! All answers are read as `Nullable<BigInt>`: the servers disagree on the width and signedness
//! of these results (MariaDB answers `IS_USED_LOCK` as an unsigned BIGINT), and NULL is a real
//! answer of each ("the server could not take it", "nobody holds it").

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Text};

use crate::db::{DbConn, Engine, cached_sql};

#[diesel::declare_sql_function]
extern "SQL" {
    /// 1 granted, 0 timed out after `timeout` seconds, NULL the server could not take it.
    #[sql_name = "GET_LOCK"]
    fn get_lock(name: Text, timeout: Integer) -> Nullable<BigInt>;
    /// 1 released, 0 held by another session, NULL not held at all.
    #[sql_name = "RELEASE_LOCK"]
    fn release_lock(name: Text) -> Nullable<BigInt>;
    /// How many named locks this session still held (each re-entry counts once more).
    #[sql_name = "RELEASE_ALL_LOCKS"]
    fn release_all_locks() -> Nullable<BigInt>;
    /// The connection id of the session holding `name`, NULL when nobody does.
    #[sql_name = "IS_USED_LOCK"]
    fn is_used_lock(name: Text) -> Nullable<BigInt>;
    #[sql_name = "CONNECTION_ID"]
    fn connection_id() -> BigInt;
}

/// The session (connection id; on PostgreSQL the backend's pid) holding `name`, if any. Works on
/// every server, no plugin needed. On PostgreSQL the name's advisory key is looked up in
/// `pg_locks`, where a 64-bit key shows as two 32-bit halves (`objsubid` 1 marks the form).
pub fn holder_of(conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>> {
    match conn.engine() {
        Engine::Mysql => diesel::select(is_used_lock(name)).get_result(conn),
        Engine::Postgres => cached_sql::<BigInt>(
            "SELECT CAST(pid AS BIGINT) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = ?",
        )
        .bind::<BigInt, _>(super::names::advisory_key(name))
        .get_result(conn)
        .optional(),
    }
}

/// This connection's server-side id, as `IS_USED_LOCK` and the process list report it (on
/// PostgreSQL, the backend's pid).
pub fn own_connection_id(conn: &mut DbConn) -> QueryResult<i64> {
    match conn.engine() {
        Engine::Mysql => diesel::select(connection_id()).get_result(conn),
        Engine::Postgres => cached_sql::<BigInt>("SELECT CAST(pg_backend_pid() AS BIGINT)").get_result(conn),
    }
}

/// Ends the server session `id`, which frees every named lock it holds. The server does the
/// freeing asynchronously, after `KILL` (`pg_terminate_backend`) has returned.
pub fn kill_connection(conn: &mut DbConn, id: i64) -> QueryResult<()> {
    use diesel::connection::SimpleConnection;
    match conn.engine() {
        // KILL takes no placeholders; `id` is an integer, never text a person typed.
        Engine::Mysql => conn.batch_execute(&format!("KILL CONNECTION {id}")),
        Engine::Postgres => {
            let ended = cached_sql::<Bool>("SELECT pg_terminate_backend(CAST(? AS INTEGER))")
                .bind::<BigInt, _>(id)
                .get_result::<bool>(conn)?;
            if ended {
                Ok(())
            } else {
                Err(diesel::result::Error::QueryBuilderError(format!("no session {id} to end").into()))
            }
        }
    }
}
