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

use crate::db::DbConn;
use diesel::prelude::*;
use diesel::sql_types::{Integer, Text};

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

/// The session (connection id) holding `name`, if any. Works on every server, no plugin needed.
pub fn holder_of(conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>> {
    diesel::select(is_used_lock(name)).get_result(conn)
}

/// This connection's server-side id, as `IS_USED_LOCK` and the process list report it.
pub fn own_connection_id(conn: &mut DbConn) -> QueryResult<i64> {
    diesel::select(connection_id()).get_result(conn)
}

/// Ends the server session `id`, which frees every named lock it holds. The server does the
/// freeing asynchronously, after `KILL` has returned.
pub fn kill_connection(conn: &mut DbConn, id: i64) -> QueryResult<()> {
    use diesel::connection::SimpleConnection;
    // KILL takes no placeholders; `id` is an integer, never text a person typed.
    conn.batch_execute(&format!("KILL CONNECTION {id}"))
}
