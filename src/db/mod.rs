//! Everything that talks to the database server and knows nothing of the features: connections
//! and the pool, the engine's dialect, transactions, statements diesel can cache, what an error
//! means, migrations, and the databases themselves.
//!
//! - [`conn`]: one connection type for both engines, and the pool's manager for it;
//! - [`pool`]: the r2d2 pool and what it has seen of the server's health;
//! - [`off_executor`]: the one door from async code to the pool and the blocking threads;
//! - [`dialect`]: every difference between MySQL/MariaDB and PostgreSQL, answered in one place;
//! - [`transaction`]: a transaction in two round trips;
//! - [`cached`]: hand-written SQL that diesel prepares once per connection;
//! - [`errors`]: what a database error means, decided in one function;
//! - [`lock_names`]: named-lock names every supported server takes the same way;
//! - [`migrations`], [`database`]: the schema's history; the database a URL names.
//!
//! diesel is synchronous: nothing here may run on the async executor; async code reaches it
//! through an [`OffExecutor`].

pub mod cached;
pub mod conn;
pub mod database;
pub mod dialect;
pub mod errors;
pub mod lock_names;
pub mod migrations;
pub mod off_executor;
pub mod pool;
mod text_enum;
pub mod transaction;

use diesel::QueryResult;

pub use cached::{CachedSql, Sql, cached_sql};
pub use conn::{DbConn, Engine, MultiBackend};
pub use database::{ScratchDatabase, ensure_database_exists, redact, split_database_url};
pub use dialect::{Dialect, ServerFacts};
pub use migrations::{MIGRATIONS, Migrations};
pub use off_executor::OffExecutor;
pub use pool::{CheckoutError, DbPool, IDLE_CHECK, OUTAGE_NOTICE, PooledConn, build_pool, statements_run};
pub(crate) use text_enum::text_enum;
pub use transaction::{transaction, transaction_read_committed};

/// Refuses servers on which named locks cannot be trusted, and warns about risky settings
/// (`docs/server-facts.md`). Fails closed: a server that cannot be asked is refused too.
pub fn check_server(conn: &mut DbConn) -> anyhow::Result<ServerFacts> {
    conn.dialect().check_server(conn)
}

/// The generated id of the row this session inserted last: the value is per session, so it
/// must be read on the connection that inserted.
pub fn last_insert_id(conn: &mut DbConn) -> QueryResult<i64> {
    conn.dialect().last_insert_id(conn)
}

/// Now, to the microsecond: what a `DATETIME(6)` keeps. Rows that are returned without being
/// read back set their times here rather than by a column default, so the answer and the row agree.
pub fn now_micros() -> chrono::NaiveDateTime {
    chrono::SubsecRound::trunc_subsecs(chrono::Utc::now().naive_utc(), 6)
}
