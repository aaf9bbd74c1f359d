//! Every difference in behaviour between MySQL/MariaDB and PostgreSQL, answered in one place.
//!
//! haita runs the same patterns on two engines, and most of its SQL reads the same on both
//! (diesel's `MultiBackend` writes each engine's placeholders). What does not — how a named lock
//! is taken, released, looked up and freed; the transaction-scoped lock PostgreSQL has and
//! MySQL lacks; how one transaction is put at READ COMMITTED; what every session is set to;
//! which servers can be trusted; what a deadlock looked like — is a question the code asks the
//! connection's [`Dialect`], never "which engine is this?". [`mysql`] and [`postgres`] answer
//! each question side by side, so a reader compares them, and a new question does not compile
//! until both engines answer it.
//!
//! The few SQL words that differ inside otherwise shared statements are written as tokens in
//! the statement's text and filled in by the dialect when it is sent ([`Dialect::fragment`]):
//!
//! | token | MySQL/MariaDB | PostgreSQL |
//! |---|---|---|
//! | `{now}` | `NOW(6)` | `CAST(statement_timestamp() AS timestamp)` |
//! | `{? microseconds}` | `INTERVAL ? MICROSECOND` | `? * INTERVAL '1 microsecond'` |
//! | `{share}` | `LOCK IN SHARE MODE` | `FOR SHARE` |
//! | `{signed}` | `SIGNED` | `BIGINT` |
//!
//! (MariaDB knows the shared row lock only as `LOCK IN SHARE MODE`, PostgreSQL only as
//! `FOR SHARE`; `CAST(SUM(…) AS {signed})` reads a sum as a 64-bit integer, where MySQL's `SUM`
//! gives a decimal and MySQL has no `BIGINT` cast.) A token no dialect knows is
//! refused before the statement is sent ([`UnknownToken`]). Statements whose shape differs,
//! upserts above all, are written out once per engine with `Sql::per_engine`, the two texts side
//! by side where the statement is used, so that a reader of the feature sees both; nothing else
//! of an engine is written outside this module.

mod innodb;
pub mod mysql;
pub mod postgres;

use std::borrow::Cow;
use std::time::Duration;

use diesel::QueryResult;
use diesel::result::Error as DbError;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde::Serialize;

use super::conn::{DbConn, Engine};

/// The questions whose answers differ between the engines. One static value per engine:
/// [`DbConn::dialect`], [`Engine::dialect`].
pub trait Dialect: Send + Sync {
    /// The engine, for what is told to a person (logs, the admin screen, the lab).
    fn engine(&self) -> Engine;

    /// The SQL a `{token}` of a statement's text stands for, `None` for an unknown token.
    fn fragment(&self, token: &str) -> Option<&'static str>;

    /// What every pooled session is set to when it is opened: the bound on row-lock waits,
    /// UTC, strictness, the isolation the locking reads rely on.
    fn session_settings(&self, row_lock_wait_secs: u32) -> String;

    /// The statement that puts the next transaction (only) at READ COMMITTED, where it is not
    /// the session's level already.
    fn read_committed_for_next_transaction(&self) -> Option<&'static str>;

    /// Whether a prepared statement that met an error must not be run again on its connection
    /// (`db::pool::renew_statements_after_an_error`).
    fn statement_unsafe_after_an_error(&self) -> bool;

    /// The generated id of the row this session inserted last.
    fn last_insert_id(&self, conn: &mut DbConn) -> QueryResult<i64>;

    // -- Named locks held by a session (`locking::NamedLockGuard`) --

    /// Whether the server can wait `wait` at all: `GET_LOCK` counts whole seconds.
    fn can_wait(&self, wait: Duration) -> bool;

    /// Asks for the named lock `name` on this session, waiting at most `wait` for a holder
    /// elsewhere to let go: MySQL's `SELECT GET_LOCK(name, wait)`, PostgreSQL's
    /// `pg_try_advisory_lock` (no wait) or `pg_advisory_lock` (each dialect shows its statements).
    fn lock(&self, conn: &mut DbConn, name: &str, wait: Duration) -> QueryResult<Asked>;

    /// Lets go of `name` (`RELEASE_LOCK`, `pg_advisory_unlock`), and checks that the session
    /// holds no named lock any more. `Err` says
    /// what was wrong: the session cannot be trusted and must be closed.
    fn unlock(&self, conn: &mut DbConn, name: &str) -> Result<(), String>;

    /// Lets go of every lock of `names`, each taken once on this session and in the order given
    /// (`locking::NamedLocksInOrder`), in one statement, and checks that the session holds no
    /// named lock any more. `Err` says what was wrong: the session must be closed.
    fn unlock_several(&self, conn: &mut DbConn, names: &[&str]) -> Result<(), String>;

    /// The session holding `name`, if any.
    fn holder_of(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>>;

    /// This session's id, as [`holder_of`](Self::holder_of) and the server's process list
    /// report it.
    fn session_id(&self, conn: &mut DbConn) -> QueryResult<i64>;

    /// Ends the server session `id`, which frees every named lock it holds. The server frees
    /// them asynchronously, after this returned.
    fn end_session(&self, conn: &mut DbConn, id: i64) -> QueryResult<()>;

    /// Whether `error` (of [`end_session`](Self::end_session)) is the server refusing for lack
    /// of a privilege.
    fn refused_to_end(&self, error: &DbError) -> bool;

    /// Whose session `id` is: the account it logged in as and the database it is in, as the
    /// server's process list tells this session; `None` when it shows no such session here
    /// (it has ended, or the account may not see other accounts' sessions). Asked of
    /// [`session_id`](Self::session_id), it is the app's own account and database.
    fn session_owner(&self, conn: &mut DbConn, id: i64) -> QueryResult<Option<SessionOwner>>;

    /// The live named locks whose names start with `prefix`, and who holds them.
    fn list_named_locks(&self, conn: &mut DbConn, prefix: &str) -> QueryResult<NamedLockListing>;

    /// Who holds `name` now, with what the server says about that session.
    fn look_up_named_lock(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<NamedLock>>;

    /// Whether `text` names a lock as [`list_named_locks`](Self::list_named_locks) lists it
    /// without a name of ours (PostgreSQL lists keys, not names).
    fn is_listed_label(&self, text: &str) -> bool;

    // -- A named lock that lives exactly one transaction (`locking::transaction_under_lock`) --

    /// Whether the server has a lock that its transaction's end lets go of. Without one, the
    /// session's lock is held by a guard around the transaction.
    fn has_transaction_scoped_lock(&self) -> bool;

    /// The transaction-scoped lock of `name` (`pg_try_advisory_xact_lock`,
    /// `pg_advisory_xact_lock`), as the transaction's statement, waiting at most `wait` (zero:
    /// only asking). `Asked::Held` after a wait leaves the transaction aborted.
    fn lock_for_transaction(&self, conn: &mut DbConn, name: &str, wait: Duration) -> QueryResult<Asked>;

    // -- What a table's constraints can say --

    /// Whether a constraint can forbid two rows whose ranges overlap (`EXCLUDE USING gist (…
    /// WITH &&)`), so that the table itself refuses a second booking of the same nights with no
    /// lock in the application. The lab's `exclusion-constraint` strategy runs only where it can.
    fn has_exclusion_constraints(&self) -> bool;

    // -- The server --

    /// What the server is, or why haita must not run on it (fails closed).
    fn check_server(&self, conn: &mut DbConn) -> anyhow::Result<ServerFacts>;

    /// The database to connect to in order to create another one (`""`: none, the server).
    fn database_to_create_from(&self) -> &'static str;

    /// Creates the database `name` (letters, digits and underscores) unless it exists.
    fn create_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()>;

    /// Drops the database `name`, even while sessions are still connected to it.
    fn drop_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()>;

    // -- Deadlock evidence (`crate::deadlocks`) --

    /// What the server tells about the deadlock `conn`'s transaction just lost with `error`, as
    /// text to store; `None` when it tells nothing that is surely ours. `url` is the database's,
    /// for a statement that needs a connection of its own.
    fn deadlock_evidence(
        &self,
        conn: &mut DbConn,
        url: &str,
        error: &DbError,
    ) -> Result<Option<String>, String>;

    /// A stored [`deadlock_evidence`](Self::deadlock_evidence) text, read back.
    fn read_deadlock(&self, section: &str) -> Deadlock;
}

/// How a request for a lock ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Granted,
    /// Held elsewhere for the whole wait.
    Held,
    /// The server could not take it (`GET_LOCK` answered NULL): what it answered.
    Refused(String),
}

impl Engine {
    /// The dialect of this engine.
    pub fn dialect(self) -> &'static dyn Dialect {
        self.pick(&mysql::Mysql, &postgres::Postgres)
    }

    /// The one of two things written per engine (two statement texts, two migration sets) that
    /// this engine takes: the only place outside the dialects that tells the engines apart.
    pub fn pick<T>(self, mysql: T, postgres: T) -> T {
        match self {
            Engine::Mysql => mysql,
            Engine::Postgres => postgres,
        }
    }
}

/// A `{token}` no dialect knows, in the text of a statement: a typo in the code, refused before
/// the statement is sent (the server would only have said "syntax error near {").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SQL token {{{token}}} in: {text}")]
pub struct UnknownToken {
    pub token: String,
    pub text: String,
}

/// `text` with each `{token}` replaced by the dialect's [`fragment`](Dialect::fragment);
/// borrowed as it is when it has none. A brace with no closing one is SQL's own (it is kept);
/// a `{…}` the dialect does not know is an error.
pub fn expand<'a>(dialect: &dyn Dialect, text: &'a str) -> Result<Cow<'a, str>, UnknownToken> {
    if !text.contains('{') {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push('{');
            rest = after;
            continue;
        };
        let token = &after[..close];
        let fragment = dialect
            .fragment(token)
            .ok_or_else(|| UnknownToken { token: token.to_string(), text: text.to_string() })?;
        out.push_str(fragment);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// What the server says about itself, read once at start.
#[derive(Debug, Clone, Default)]
pub struct ServerFacts {
    pub version: String,
    /// Lower-cased variable name → value, for the variables that decide whether named locks can
    /// be trusted (MySQL/MariaDB).
    pub variables: std::collections::BTreeMap<String, String>,
}

/// One live named lock and the server session (connection) holding it.
#[derive(Clone, Debug, diesel::QueryableByName, Serialize, utoipa::ToSchema)]
pub struct NamedLock {
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = BigInt)]
    pub connection_id: i64,
    /// How long the holding connection has been in its current state (`PROCESSLIST.TIME`): for an
    /// idle holder, how long it has been idle while keeping everyone else out.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub state_secs: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    pub db_user: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub host: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub db: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub command: Option<String>,
}

/// Whose a server session is (`Dialect::session_owner`): what decides whether the app may end
/// it. A lock name says nothing about that, since any session on the server may take any name.
#[derive(Clone, Debug, PartialEq, Eq, diesel::QueryableByName)]
pub struct SessionOwner {
    /// The account (MySQL `PROCESSLIST.USER`, PostgreSQL `usename`).
    #[diesel(sql_type = Nullable<Text>)]
    pub account: Option<String>,
    /// The database it is in (`PROCESSLIST.DB`, `datname`); none for a MySQL session that chose
    /// none.
    #[diesel(sql_type = Nullable<Text>)]
    pub database: Option<String>,
}

/// The live named locks, and where the server told them from.
#[derive(Debug)]
pub struct NamedLockListing {
    /// `metadata_lock_info` (MariaDB), `performance_schema` (MySQL), `pg_locks` or `unavailable`.
    pub source: &'static str,
    /// Why the listing is unavailable and how to enable it, or how to read it (the server's
    /// words, for the API and the log).
    pub note: Option<String>,
    /// What the listing cannot show on this server, as a code the admin screen words in the
    /// reader's language: `mariadb_plugin`, `mysql_performance_schema` (it could not be read),
    /// `advisory_keys` (PostgreSQL lists keys, not names).
    pub gap: Option<&'static str>,
    pub locks: Vec<NamedLock>,
}

/// One deadlock as the server described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Deadlock {
    /// The server's own timestamp line of the event.
    pub at: String,
    /// Usually two; the server may list more when a cycle involves more.
    pub transactions: Vec<Party>,
    /// The number (1, 2, …) of the transaction the server rolled back.
    pub victim: Option<u32>,
}

impl Deadlock {
    /// Whether the server rolled `party` back to break the deadlock.
    pub fn rolled_back(&self, party: &Party) -> bool {
        self.victim == Some(party.number)
    }
}

/// One transaction of a deadlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Party {
    pub number: u32,
    /// InnoDB's transaction id, as its lock lines name it.
    pub trx_id: String,
    /// The server connection (`CONNECTION_ID()`, PostgreSQL's backend pid) that ran it.
    pub thread_id: Option<i64>,
    /// The statement it was running when it had to wait.
    pub statement: String,
    /// Locks it held that the other one waited for: "index PRIMARY of table `db`.`t`, lock_mode X …".
    pub holds: Vec<String>,
    /// The lock it waited for.
    pub waits_for: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_become_each_engines_words_and_plain_text_is_borrowed() {
        let text = "UPDATE t SET at = {now}, until = {now} + {? microseconds} WHERE id = ? {share}";
        let expand = |dialect, text| expand(dialect, text).expect("known tokens");
        assert_eq!(
            expand(Engine::Mysql.dialect(), text),
            "UPDATE t SET at = NOW(6), until = NOW(6) + INTERVAL ? MICROSECOND WHERE id = ? LOCK IN SHARE MODE"
        );
        assert_eq!(
            expand(Engine::Postgres.dialect(), text),
            "UPDATE t SET at = CAST(statement_timestamp() AS timestamp), \
             until = CAST(statement_timestamp() AS timestamp) + ? * INTERVAL '1 microsecond' WHERE id = ? FOR SHARE"
        );
        assert!(matches!(expand(Engine::Mysql.dialect(), "SELECT 1"), Cow::Borrowed("SELECT 1")));
        assert_eq!(expand(Engine::Mysql.dialect(), "SELECT '{'"), "SELECT '{'");
    }

    #[test]
    fn an_unknown_token_is_refused_before_the_server_sees_it() {
        for engine in [Engine::Mysql, Engine::Postgres] {
            let refused = super::expand(engine.dialect(), "SELECT {nwo}").expect_err("a typo");
            assert_eq!(refused.token, "nwo");
            assert!(refused.to_string().contains("{nwo}"), "{refused}");
        }
    }
}
