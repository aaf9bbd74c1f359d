//! MySQL 8.0+ and MariaDB 10.6+: named locks are `GET_LOCK`, held by the session; there is no
//! transaction-scoped lock; deadlocks are told by `SHOW ENGINE INNODB STATUS`.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::result::Error as DbError;
use diesel::sql_types::{BigInt, Integer, Text, Untyped};

use super::{Asked, Deadlock, Dialect, NamedLock, NamedLockListing, ServerFacts, SessionOwner, innodb};
use crate::db::cached_sql;
use crate::db::conn::{DbConn, Engine};

/// MySQL and MariaDB.
pub struct Mysql;

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
// The lock functions are declared for diesel's query builder, which keeps the prepared statement
// of each distinct query on the connection and reuses it. All answers are read as
// `Nullable<BigInt>`: the servers disagree on the width and signedness of these results (MariaDB
// answers `IS_USED_LOCK` as an unsigned BIGINT), and NULL is a real answer of each.

/// `GET_LOCK` waits whole seconds. What is left of a turn's wait is rounded to the nearest
/// second: down would turn a 1 s wait that lost a few milliseconds in the queue into no wait at
/// all; the nearest passes the deadline by half a second at most.
fn whole_seconds(wait: Duration) -> i32 {
    i32::try_from((wait.as_millis() + 500) / 1000).unwrap_or(i32::MAX)
}

const MARIADB_LOCKS: &str = "SELECT m.TABLE_SCHEMA AS name, CAST(m.THREAD_ID AS SIGNED) AS connection_id, \
       CAST(p.TIME AS SIGNED) AS state_secs, p.USER AS db_user, p.HOST AS host, p.DB AS db, \
       p.COMMAND AS command \
     FROM information_schema.METADATA_LOCK_INFO m \
     LEFT JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID \
     WHERE m.LOCK_TYPE = 'User lock' AND m.TABLE_SCHEMA LIKE CONCAT(?, '%') \
     ORDER BY state_secs DESC, name";

const MYSQL_LOCKS: &str = "SELECT m.OBJECT_NAME AS name, CAST(t.PROCESSLIST_ID AS SIGNED) AS connection_id, \
       CAST(t.PROCESSLIST_TIME AS SIGNED) AS state_secs, t.PROCESSLIST_USER AS db_user, \
       t.PROCESSLIST_HOST AS host, t.PROCESSLIST_DB AS db, t.PROCESSLIST_COMMAND AS command \
     FROM performance_schema.metadata_locks m \
     JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID \
     WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK' AND m.LOCK_STATUS = 'GRANTED' AND m.OBJECT_NAME LIKE CONCAT(?, '%') \
     ORDER BY state_secs DESC, name";

impl Dialect for Mysql {
    fn engine(&self) -> Engine {
        Engine::Mysql
    }

    fn fragment(&self, token: &str) -> Option<&'static str> {
        Some(match token {
            "now" => "NOW(6)",
            "? microseconds" => "INTERVAL ? MICROSECOND",
            "share" => "LOCK IN SHARE MODE",
            "signed" => "SIGNED",
            _ => return None,
        })
    }

    /// Strict mode turns silent truncation into errors; UTC keeps DATETIME values unambiguous.
    fn session_settings(&self, row_lock_wait_secs: u32) -> String {
        format!(
            "SET SESSION innodb_lock_wait_timeout = {row_lock_wait_secs}, \
             SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO', \
             time_zone = '+00:00'"
        )
    }

    /// Sessions run at InnoDB's REPEATABLE READ; this applies to the next transaction only.
    fn read_committed_for_next_transaction(&self) -> Option<&'static str> {
        Some("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    }

    /// MariaDB's client library (libmariadb, which diesel's `mysqlclient-sys` links): a locking
    /// read that loses a deadlock after it has sent a row ends its result set with the error,
    /// and the prepared statement is left expecting the rest of the rows. Run again, it first
    /// reads for them (the server has already ended them) and waits for ever without sending a
    /// byte, while the server shows the session idle. Closing it is safe; prepared anew, it
    /// runs.
    fn statement_unsafe_after_an_error(&self) -> bool {
        true
    }

    /// MySQL has no `RETURNING`, and the value is per session, so it is read on the connection
    /// that inserted.
    fn last_insert_id(&self, conn: &mut DbConn) -> QueryResult<i64> {
        cached_sql::<BigInt>("SELECT LAST_INSERT_ID()").get_result(conn)
    }

    fn can_wait(&self, wait: Duration) -> bool {
        whole_seconds(wait) > 0
    }

    /// `SELECT GET_LOCK(name, wait)`, the wait in whole seconds: 1 granted, 0 held elsewhere for
    /// the whole wait, NULL refused (a killed query, out of memory, a user-level-lock deadlock).
    fn lock(&self, conn: &mut DbConn, name: &str, wait: Duration) -> QueryResult<Asked> {
        Ok(match diesel::select(get_lock(name, whole_seconds(wait))).get_result::<Option<i64>>(conn)? {
            Some(1) => Asked::Granted,
            Some(0) => Asked::Held,
            answer => Asked::Refused(format!("GET_LOCK returned {answer:?}")),
        })
    }

    /// `SELECT RELEASE_LOCK(name), RELEASE_ALL_LOCKS()`, one statement. `RELEASE_LOCK` must
    /// answer 1: 0 (held by another session) and NULL (not held at all)
    /// both mean our bookkeeping is wrong. `RELEASE_ALL_LOCKS` then must find nothing: anything
    /// it finds is a lock the work took on our connection (a second `GET_LOCK` of the same name
    /// counts twice, so one `RELEASE_LOCK` would have left it held).
    fn unlock(&self, conn: &mut DbConn, name: &str) -> Result<(), String> {
        match diesel::select((release_lock(name), release_all_locks()))
            .get_result::<(Option<i64>, Option<i64>)>(conn)
        {
            Ok((Some(1), Some(0))) => Ok(()),
            Ok((released, leftover)) => {
                Err(format!("RELEASE_LOCK returned {released:?}, RELEASE_ALL_LOCKS found {leftover:?} more"))
            }
            Err(e) => Err(format!("release failed: {e}")),
        }
    }

    /// `SELECT RELEASE_ALL_LOCKS()`, which answers how many locks the session let go of,
    /// counting a lock taken twice twice: it must be exactly as many as were taken. More means
    /// the work took a lock on our connection (or one of ours twice); fewer, that one of ours
    /// was gone before its release. (MySQL 5.7 and MariaDB 10.0.2 gave a session several named
    /// locks at once; before, a second `GET_LOCK` let go of the first.)
    fn unlock_several(&self, conn: &mut DbConn, names: &[&str]) -> Result<(), String> {
        match diesel::select(release_all_locks()).get_result::<Option<i64>>(conn) {
            Ok(Some(released)) if usize::try_from(released).is_ok_and(|n| n == names.len()) => Ok(()),
            Ok(released) => {
                Err(format!("RELEASE_ALL_LOCKS let go of {released:?} locks, {} taken", names.len()))
            }
            Err(e) => Err(format!("release failed: {e}")),
        }
    }

    /// `IS_USED_LOCK`: works on every server, no plugin needed.
    fn holder_of(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>> {
        diesel::select(is_used_lock(name)).get_result(conn)
    }

    fn session_id(&self, conn: &mut DbConn) -> QueryResult<i64> {
        diesel::select(connection_id()).get_result(conn)
    }

    /// `KILL` takes no placeholders; `id` is an integer, never text a person typed.
    fn end_session(&self, conn: &mut DbConn, id: i64) -> QueryResult<()> {
        conn.batch_execute(&format!("KILL CONNECTION {id}"))
    }

    /// 1095 "You are not owner of thread": another account's session (the app has no
    /// `CONNECTION_ADMIN`).
    fn refused_to_end(&self, error: &DbError) -> bool {
        error.to_string().contains("not owner of thread")
    }

    /// `information_schema.PROCESSLIST` shows other accounts' sessions only with `PROCESS`.
    fn session_owner(&self, conn: &mut DbConn, id: i64) -> QueryResult<Option<SessionOwner>> {
        cached_sql::<Untyped>(
            "SELECT USER AS account, DB AS `database` FROM information_schema.PROCESSLIST WHERE ID = ?",
        )
        .bind::<BigInt, _>(id)
        .get_result(conn)
        .optional()
    }

    /// Where the server tells who holds which named lock:
    /// - MariaDB: `information_schema.METADATA_LOCK_INFO`, after `INSTALL SONAME
    ///   'metadata_lock_info'` (its `TABLE_SCHEMA` column carries the lock name for `User lock`
    ///   rows);
    /// - MySQL 8: `performance_schema.metadata_locks` (`OBJECT_TYPE = 'USER LEVEL LOCK'`);
    /// - anywhere: `IS_USED_LOCK(name)` answers for one name the admin already knows.
    ///
    /// The server kind is asked, not guessed from which query happens to succeed: on MariaDB the
    /// performance_schema tables exist but stay empty while it is off, which would read as "no
    /// locks". The prefix is hex and colons only, so it needs no LIKE escaping.
    fn list_named_locks(&self, conn: &mut DbConn, prefix: &str) -> QueryResult<NamedLockListing> {
        let version: String = diesel::select(diesel::dsl::sql::<Text>("VERSION()")).get_result(conn)?;
        let mariadb = version.to_ascii_lowercase().contains("mariadb");
        let (source, sql, enable, gap) = if mariadb {
            (
                "metadata_lock_info",
                MARIADB_LOCKS,
                "run INSTALL SONAME 'metadata_lock_info' as a privileged user",
                "mariadb_plugin",
            )
        } else {
            (
                "performance_schema",
                MYSQL_LOCKS,
                "start the server with performance_schema=ON",
                "mysql_performance_schema",
            )
        };
        Ok(match diesel::sql_query(sql).bind::<Text, _>(prefix).load(conn) {
            Ok(locks) => NamedLockListing { source, note: None, gap: None, locks },
            Err(e) => {
                // The server's words go to the log and the API; the screen says what it means.
                log::warn!("listing named locks from {source}: {e}");
                NamedLockListing {
                    source: "unavailable",
                    note: Some(format!(
                        "This server cannot list named locks ({e}). To see them here, {enable}. Meanwhile, \
                         look a lock up by name (IS_USED_LOCK)."
                    )),
                    gap: Some(gap),
                    locks: Vec::new(),
                }
            }
        })
    }

    /// The name is echoed through `CAST(? AS CHAR)`: a bare `?` column has no type when the
    /// statement is prepared, and the MySQL client library reports it as NULL-typed, which
    /// diesel cannot read.
    fn look_up_named_lock(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<NamedLock>> {
        diesel::sql_query(
            "SELECT CAST(? AS CHAR(64)) AS name, CAST(h.id AS SIGNED) AS connection_id, \
               CAST(p.TIME AS SIGNED) AS state_secs, \
               p.USER AS db_user, p.HOST AS host, p.DB AS db, p.COMMAND AS command \
             FROM (SELECT IS_USED_LOCK(?) AS id) h \
             LEFT JOIN information_schema.PROCESSLIST p ON p.ID = h.id \
             WHERE h.id IS NOT NULL",
        )
        .bind::<Text, _>(name)
        .bind::<Text, _>(name)
        .get_result(conn)
        .optional()
    }

    fn is_listed_label(&self, _: &str) -> bool {
        false
    }

    fn has_transaction_scoped_lock(&self) -> bool {
        false
    }

    /// Never asked ([`has_transaction_scoped_lock`](Dialect::has_transaction_scoped_lock)):
    /// `GET_LOCK` belongs to the session.
    fn lock_for_transaction(&self, _: &mut DbConn, name: &str, _: Duration) -> QueryResult<Asked> {
        Ok(Asked::Refused(format!("MySQL has no transaction-scoped lock for {name}")))
    }

    /// MySQL and MariaDB have none: a unique key compares equal values, never overlapping ranges,
    /// and a CHECK constraint sees one row.
    fn has_exclusion_constraints(&self) -> bool {
        false
    }

    /// Refuses servers on which named locks cannot be trusted (`docs/server-facts.md`).
    fn check_server(&self, conn: &mut DbConn) -> anyhow::Result<ServerFacts> {
        let facts = ServerFacts::read(conn).map_err(|e| {
            anyhow::anyhow!("cannot read the server's version and settings ({e}); refusing to start")
        })?;
        if let Some(reason) = facts.refusal() {
            anyhow::bail!(reason);
        }
        log::info!(
            "database server {} (named locks per session: several; binlog_format={})",
            facts.version,
            facts.binlog_format().unwrap_or("off")
        );
        Ok(facts)
    }

    /// A MySQL session need not belong to any database.
    fn database_to_create_from(&self) -> &'static str {
        ""
    }

    fn create_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()> {
        conn.batch_execute(&format!(
            "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        ))
    }

    fn drop_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()> {
        conn.batch_execute(&format!("DROP DATABASE IF EXISTS `{name}`"))
    }

    /// InnoDB's latest deadlock, if it is the one `conn` lost. Only the latest is kept: by now
    /// it may be another one, which is not ours to report (its own victim, if it is one of
    /// ours, reports it).
    fn deadlock_evidence(&self, conn: &mut DbConn, url: &str, _: &DbError) -> Result<Option<String>, String> {
        let status = innodb_status(url).map_err(|e| e.to_string())?;
        let Some(section) = innodb::section(&status) else { return Ok(None) };
        let me = self.session_id(conn).map_err(|e| e.to_string())?;
        if !innodb::parse(section).transactions.iter().any(|party| party.thread_id == Some(me)) {
            log::info!("the latest deadlock on the server is not the one connection {me} lost");
            return Ok(None);
        }
        Ok(Some(section.to_string()))
    }

    fn read_deadlock(&self, section: &str) -> Deadlock {
        innodb::parse(section)
    }
}

/// `SHOW ENGINE INNODB STATUS`, over a connection of its own. diesel sends every statement as a
/// prepared one, and this one then answers no result metadata ("No metadata exists"), so it goes
/// over the text protocol of the `mysql` crate. Deadlocks are rare: a connection per reading.
fn innodb_status(url: &str) -> Result<String, mysql::Error> {
    use mysql::prelude::Queryable;
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(url)?)?;
    let row: Option<(String, String, String)> = conn.query_first("SHOW ENGINE INNODB STATUS")?;
    Ok(row.map(|(_, _, status)| status).unwrap_or_default())
}

/// Read with `SHOW GLOBAL VARIABLES`, which every supported server answers without privileges:
/// `information_schema.GLOBAL_VARIABLES` is gone from MySQL 8, and reading it there used to fail
/// quietly and leave a Galera node's `wsrep_on` unknown, hence accepted.
const FACT_VARIABLES: [&str; 5] =
    ["wsrep_on", "group_replication_single_primary_mode", "binlog_format", "read_only", "tidb_version"];

impl ServerFacts {
    /// Asks the server; any error is an error (the check fails closed).
    pub fn read(conn: &mut DbConn) -> QueryResult<Self> {
        let version = diesel::select(diesel::dsl::sql::<Text>("VERSION()")).get_result(conn)?;
        let names = FACT_VARIABLES.map(|n| format!("'{n}'")).join(", ");
        let rows: Vec<Variable> =
            diesel::sql_query(format!("SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"))
                .load(conn)?;
        let variables = rows.into_iter().map(|v| (v.name.to_ascii_lowercase(), v.value)).collect();
        Ok(Self { version, variables })
    }

    fn variable(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }

    fn is_on(&self, name: &str) -> bool {
        self.variable(name).is_some_and(is_on)
    }

    pub fn is_mariadb(&self) -> bool {
        self.version.to_ascii_lowercase().contains("mariadb")
    }

    pub fn is_tidb(&self) -> bool {
        self.version.to_ascii_lowercase().contains("tidb") || self.variable("tidb_version").is_some()
    }

    pub fn binlog_format(&self) -> Option<&str> {
        self.variable("binlog_format")
    }

    /// MySQL 8.0+ or MariaDB 10.6+: the releases that have everything the locking relies on
    /// (several named locks per session, `RELEASE_ALL_LOCKS`, `FOR UPDATE SKIP LOCKED`).
    pub fn is_supported_version(&self) -> bool {
        if self.is_mariadb() { self.version_at_least(10, 6) } else { self.version_at_least(8, 0) }
    }

    fn version_at_least(&self, major: u32, minor: u32) -> bool {
        let mut parts =
            self.version.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        found >= (major, minor)
    }

    /// Why named locks cannot be trusted on this server, if they cannot. Decided from the facts
    /// alone, so it is tested over servers this machine does not run.
    pub fn refusal(&self) -> Option<String> {
        if self.is_tidb() {
            return Some(format!(
                "server {} is TiDB: its GET_LOCK waits at least 1 s (the app asks with 0 first), \
                 detects no deadlock between named locks, and IS_USED_LOCK names no holder (the admin \
                 screen needs it). haita does not run on TiDB.",
                self.version
            ));
        }
        if self.is_on("wsrep_on") {
            return Some(
                "this server is a Galera / Percona XtraDB Cluster node (wsrep_on=ON): GET_LOCK is not \
                 replicated across the cluster, so named locks would not exclude anything. Point \
                 DATABASE_URL at a single primary."
                    .into(),
            );
        }
        if self.variable("group_replication_single_primary_mode").is_some_and(|v| !is_on(v)) {
            return Some(
                "group replication is set up multi-primary (group_replication_single_primary_mode=OFF): \
                 GET_LOCK holds on one member only, so two members could both book the same place. \
                 Use single-primary mode and point DATABASE_URL at the primary."
                    .into(),
            );
        }
        if self.is_on("read_only") {
            return Some(
                "this server is read-only (a replica?). Named locks and row locks must run on the primary."
                    .into(),
            );
        }
        if self.binlog_format().is_some_and(|f| f.eq_ignore_ascii_case("STATEMENT")) {
            return Some(
                "binlog_format=STATEMENT: statements that use GET_LOCK are unsafe to replicate, and \
                 InnoDB refuses writes at READ COMMITTED (which first edit-lock acquires and stock \
                 receipts run at) with a statement-based binary log. Use ROW (MySQL's default) or MIXED."
                    .into(),
            );
        }
        if !self.is_supported_version() {
            return Some(format!(
                "server {} is too old: haita needs MySQL 8.0+ or MariaDB 10.6+ (several named locks per \
                 session, RELEASE_ALL_LOCKS, SKIP LOCKED)",
                self.version
            ));
        }
        None
    }
}

#[derive(QueryableByName)]
struct Variable {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

fn is_on(value: &str) -> bool {
    value.eq_ignore_ascii_case("ON") || value == "1"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts as a server would report them: its version and `SHOW GLOBAL VARIABLES` rows.
    fn facts(version: &str, variables: &[(&str, &str)]) -> ServerFacts {
        ServerFacts {
            version: version.into(),
            variables: variables.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }

    #[test]
    fn only_mysql_8_and_mariadb_10_6_or_later_are_supported() {
        for ok in
            ["8.0.36", "8.4.3", "9.1.0", "10.6.21-MariaDB", "10.11.19-MariaDB-0+deb12u1", "11.4.2-MariaDB"]
        {
            assert!(facts(ok, &[]).is_supported_version(), "{ok}");
        }
        for old in ["5.7.44", "10.5.27-MariaDB", "10.0.38-MariaDB"] {
            assert!(!facts(old, &[]).is_supported_version(), "{old}");
            assert!(facts(old, &[]).refusal().is_some_and(|r| r.contains("too old")), "{old}");
        }
    }

    #[test]
    fn single_servers_and_single_primary_groups_are_accepted() {
        let accepted = [
            facts(
                "10.11.19-MariaDB-0+deb12u1",
                &[("wsrep_on", "OFF"), ("binlog_format", "MIXED"), ("read_only", "OFF")],
            ),
            facts("8.0.36", &[("binlog_format", "ROW"), ("read_only", "OFF")]),
            facts("8.4.3", &[("group_replication_single_primary_mode", "ON"), ("read_only", "OFF")]),
        ];
        for server in accepted {
            assert_eq!(server.refusal(), None, "{server:?}");
        }
    }

    #[test]
    fn clusters_without_cluster_wide_named_locks_replicas_and_tidb_are_refused() {
        for (server, why) in [
            // Percona XtraDB Cluster 8: MySQL 8 (no information_schema.GLOBAL_VARIABLES), wsrep on.
            (facts("8.0.36-28.1", &[("wsrep_on", "ON"), ("read_only", "OFF")]), "wsrep_on=ON"),
            (facts("10.11.6-MariaDB", &[("wsrep_on", "ON")]), "wsrep_on=ON"),
            (facts("8.0.36", &[("group_replication_single_primary_mode", "OFF")]), "multi-primary"),
            (facts("8.0.36", &[("read_only", "ON")]), "read-only"),
            (facts("8.0.11-TiDB-v7.5.1", &[("tidb_version", "Release Version: v7.5.1")]), "TiDB"),
            (facts("5.7.25-TiDB-v8.1.0", &[]), "TiDB"),
            (facts("10.11.6-MariaDB", &[("binlog_format", "STATEMENT")]), "binlog_format=STATEMENT"),
        ] {
            let refusal = server.refusal();
            assert!(refusal.as_deref().is_some_and(|r| r.contains(why)), "{server:?}: {refusal:?}");
        }
    }

    #[test]
    fn get_lock_waits_are_rounded_to_the_nearest_second() {
        assert!(!Mysql.can_wait(Duration::from_millis(400)));
        assert!(Mysql.can_wait(Duration::from_millis(600)));
        assert_eq!(whole_seconds(Duration::from_millis(1_490)), 1);
    }
}
