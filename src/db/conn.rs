//! One connection type for every engine haita runs on, and the pool's manager for it.
//!
//! diesel's `MultiConnection` derive turns an enum of connections into a connection of its own,
//! with a backend (`MultiBackend`) that writes each statement in the dialect of the connection
//! it runs on: placeholders, quoting, `LIMIT`. The services are written once, against
//! [`DbConn`]; where the engines differ in more than syntax (named locks, server checks, a few
//! words of SQL), the code asks the connection's [`Dialect`](super::Dialect).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use diesel::r2d2::{ManageConnection, R2D2Connection};
use diesel::{Connection, ConnectionError, ConnectionResult};

/// A connection to MySQL/MariaDB or to PostgreSQL.
#[derive(diesel::MultiConnection)]
pub enum DbConn {
    Mysql(diesel::MysqlConnection),
    Postgres(diesel::PgConnection),
}

/// The database engines haita runs on, chosen by the scheme of `DATABASE_URL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// MySQL 8.0+ or MariaDB 10.6+: `mysql://`.
    Mysql,
    /// PostgreSQL 15+: `postgres://` or `postgresql://`.
    Postgres,
}

impl Engine {
    /// The engine a URL names, or why it names none.
    pub fn of_url(url: &str) -> Result<Self, String> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("mysql" | "mariadb") => Ok(Self::Mysql),
            Some("postgres" | "postgresql") => Ok(Self::Postgres),
            _ => Err(format!(
                "DATABASE_URL must start with mysql:// (MySQL, MariaDB) or postgres:// (PostgreSQL), not {:?}",
                url.split("://").next().unwrap_or_default()
            )),
        }
    }
}

impl DbConn {
    /// Connects to the engine the URL's scheme names. diesel's derived `establish` tries each
    /// engine in turn and, when all fail, reports none of their reasons; this one reports the
    /// server's own ("Access denied", "database does not exist").
    pub fn open(url: &str) -> ConnectionResult<Self> {
        match Engine::of_url(url).map_err(ConnectionError::InvalidConnectionUrl)? {
            // libmysqlclient wants `mysql://`; `mariadb://` is accepted as a courtesy.
            Engine::Mysql => match url.strip_prefix("mariadb://") {
                Some(rest) => diesel::MysqlConnection::establish(&format!("mysql://{rest}")).map(Self::Mysql),
                None => diesel::MysqlConnection::establish(url).map(Self::Mysql),
            },
            Engine::Postgres => diesel::PgConnection::establish(url).map(Self::Postgres),
        }
    }

    /// The engine, for what is told to a person; code that must do something differently per
    /// engine asks [`dialect`](Self::dialect).
    pub fn engine(&self) -> Engine {
        match self {
            Self::Mysql(_) => Engine::Mysql,
            Self::Postgres(_) => Engine::Postgres,
        }
    }

    /// The answers to every question whose answer differs between the engines.
    pub fn dialect(&self) -> &'static dyn super::Dialect {
        self.engine().dialect()
    }
}

/// Runs `$work` on the engine's own connection (`$c`): for the few query-builder features the
/// shared backend lacks, which both engines have (`for_update()`, `skip_locked()`, inserting
/// several rows in one statement). The same expression is compiled once per engine.
macro_rules! on_engine {
    ($conn:expr, |$c:ident| $work:expr) => {
        match $crate::db::conn::deref($conn) {
            $crate::db::DbConn::Mysql($c) => $work,
            $crate::db::DbConn::Postgres($c) => $work,
        }
    };
}
pub(crate) use on_engine;

/// The connection behind a pooled one, or the connection itself (for [`on_engine`]).
pub fn deref(conn: &mut DbConn) -> &mut DbConn {
    conn
}

/// The r2d2 manager: opens [`DbConn`]s with [`DbConn::open`], so that a failed connect is
/// reported (and logged by the pool) with the server's reason.
#[derive(Debug, Clone)]
pub struct Manager {
    url: String,
    /// Connections being opened now, from the moment `connect` starts until the pool's
    /// customizer has prepared the session (it calls [`Manager::opened`]), or `connect` failed.
    opening: Arc<AtomicUsize>,
}

impl Manager {
    pub fn new(url: &str) -> Self {
        Self { url: url.to_string(), opening: Arc::default() }
    }

    /// The count of connections being opened, for whoever must wait until none is.
    pub fn opening(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.opening)
    }

    /// A connection `connect` returned is ready (or was given up on): no longer opening.
    pub fn opened(opening: &AtomicUsize) {
        opening.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ManageConnection for Manager {
    type Connection = DbConn;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<DbConn, Self::Error> {
        /// Counts the connection as opening until it is handed over; on any other way out
        /// (an error, a panic) it is no longer opening.
        struct Opening<'a>(&'a AtomicUsize, bool);
        impl Drop for Opening<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    Manager::opened(self.0);
                }
            }
        }
        self.opening.fetch_add(1, Ordering::AcqRel);
        let mut opening = Opening(&self.opening, false);
        let conn = DbConn::open(&self.url).map_err(diesel::r2d2::Error::ConnectionError)?;
        opening.1 = true; // the pool's customizer takes it from here
        Ok(conn)
    }

    fn is_valid(&self, conn: &mut DbConn) -> Result<(), Self::Error> {
        conn.ping().map_err(diesel::r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut DbConn) -> bool {
        conn.is_broken()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_scheme_chooses_the_engine() {
        assert_eq!(Engine::of_url("mysql://root@127.0.0.1:3306/haita"), Ok(Engine::Mysql));
        assert_eq!(Engine::of_url("MariaDB://u:p@h/haita"), Ok(Engine::Mysql));
        assert_eq!(Engine::of_url("postgres://postgres@127.0.0.1/haita"), Ok(Engine::Postgres));
        assert_eq!(Engine::of_url("postgresql://h/haita"), Ok(Engine::Postgres));
        for wrong in ["sqlite://haita.db", "haita", "http://h/haita"] {
            assert!(Engine::of_url(wrong).is_err_and(|e| e.contains("mysql://")), "{wrong}");
        }
    }
}
