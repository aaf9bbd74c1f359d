//! PostgreSQL 15+: named locks are advisory locks on 64-bit keys, in a session form and a
//! transaction-scoped form; every lock wait is bounded by `lock_timeout`; a deadlock is told only
//! by the victim's error.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::result::Error as DbError;
use diesel::sql_types::{BigInt, Bool, Nullable, Text, Untyped};
use sha2::{Digest, Sha256};

use super::{Asked, Deadlock, Dialect, NamedLock, NamedLockListing, Party, ServerFacts, SessionOwner};
use crate::db::conn::{DbConn, Engine};
use crate::db::errors::is_lock_timeout;
use crate::db::{cached_sql, transaction};

/// PostgreSQL.
pub struct Postgres;

/// How an advisory lock is listed to the admin: a key does not tell the name it was hashed
/// from, so the listing names each lock `advisory key N`, and that label is accepted back
/// wherever a name is (its key is then `N` itself).
pub const ADVISORY_LABEL: &str = "advisory key ";

/// The key in an [`ADVISORY_LABEL`]ed name, if `text` is one.
pub fn labelled_advisory_key(text: &str) -> Option<i64> {
    text.strip_prefix(ADVISORY_LABEL)?.parse().ok()
}

/// The key of the advisory lock that stands for the named lock `name`: the first 64 bits of the
/// SHA-256 of the whole name. PostgreSQL locks numbers, not names; `hashtext()` would give 32
/// bits, and with a few ten thousand live names (one per resource and day) two of them would
/// share a key, so one booking would wait for another it has nothing to do with. At 64 bits that
/// takes billions. An [`ADVISORY_LABEL`]ed name is its key; the two cannot be confused, since
/// every name of ours starts `haita:`.
pub fn advisory_key(name: &str) -> i64 {
    if let Some(key) = labelled_advisory_key(name) {
        return key;
    }
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The statement's `lock_timeout` for this transaction only (`set_config(…, true)`).
fn bound_wait(conn: &mut DbConn, wait: &str) -> QueryResult<()> {
    cached_sql::<Text>("SELECT set_config('lock_timeout', ?, true)")
        .bind::<Text, _>(wait)
        .get_result::<String>(conn)?;
    Ok(())
}

fn millis(wait: Duration) -> String {
    format!("{}ms", wait.as_millis())
}

impl Dialect for Postgres {
    fn engine(&self) -> Engine {
        Engine::Postgres
    }

    fn fragment(&self, token: &str) -> Option<&'static str> {
        Some(match token {
            // The time the *statement* started, as MySQL's NOW(6) is: PostgreSQL's LOCALTIMESTAMP is the
            // transaction's start, which for a transaction that queued for a row lock is a clock
            // from before the wait. A hold judged live by it may have expired, and been taken by
            // someone else, while the transaction waited (`crate::catalog::stock`).
            "now" => "CAST(statement_timestamp() AS timestamp)",
            "? microseconds" => "? * INTERVAL '1 microsecond'",
            "share" => "FOR SHARE",
            "signed" => "BIGINT",
            _ => return None,
        })
    }

    /// `lock_timeout` bounds every lock wait (rows and advisory locks alike), as
    /// `innodb_lock_wait_timeout` bounds row waits; a named lock's own wait overrides it for its
    /// one transaction. READ COMMITTED is PostgreSQL's default, said here because the locking
    /// reads rely on it: they see the latest committed row.
    fn session_settings(&self, row_lock_wait_secs: u32) -> String {
        format!(
            "SET lock_timeout = '{row_lock_wait_secs}s'; SET TimeZone = 'UTC'; \
             SET default_transaction_isolation = 'read committed'"
        )
    }

    /// The sessions run at READ COMMITTED already, and a locking read takes no gap locks at any
    /// level.
    fn read_committed_for_next_transaction(&self) -> Option<&'static str> {
        None
    }

    /// A statement that failed leaves nothing pending: the next `Bind`/`Execute` starts afresh.
    fn statement_unsafe_after_an_error(&self) -> bool {
        false
    }

    /// `lastval()`: the same thing as MySQL's `LAST_INSERT_ID()` for identity columns (no trigger
    /// of ours draws on a sequence).
    fn last_insert_id(&self, conn: &mut DbConn) -> QueryResult<i64> {
        cached_sql::<BigInt>("SELECT lastval()").get_result(conn)
    }

    fn can_wait(&self, wait: Duration) -> bool {
        wait.as_millis() > 0
    }

    /// `pg_try_advisory_lock` when not waiting; else `pg_advisory_lock` with `lock_timeout` set
    /// to the wait for its transaction only, so the session's own bound on row waits is back as
    /// soon as the statement is done. A session-level advisory lock outlives the transaction it
    /// was taken in. `key` is the name's [`advisory_key`]:
    ///
    /// ```text
    /// SELECT pg_try_advisory_lock(key)                -- wait zero: true granted, false held
    ///
    /// BEGIN                                           -- a wait: lock_timeout for this transaction
    /// SELECT set_config('lock_timeout', '800ms', true)
    /// SELECT pg_advisory_lock(key)                    -- granted, or "lock timeout" (held)
    /// COMMIT                                          -- the lock stays: it is the session's
    /// ```
    fn lock(&self, conn: &mut DbConn, name: &str, wait: Duration) -> QueryResult<Asked> {
        let key = advisory_key(name);
        let granted = if wait.is_zero() {
            cached_sql::<Bool>("SELECT pg_try_advisory_lock(?)").bind::<BigInt, _>(key).get_result(conn)?
        } else {
            transaction(conn, |conn| {
                bound_wait(conn, &millis(wait))?;
                cached_sql::<()>("SELECT pg_advisory_lock(?)").bind::<BigInt, _>(key).execute(conn)?;
                Ok(true)
            })
            .or_else(|e| if is_lock_timeout(&e) { Ok(false) } else { Err(e) })?
        };
        Ok(if granted { Asked::Granted } else { Asked::Held })
    }

    /// `pg_advisory_unlock(key)` and the session's advisory locks left, counted after it, in one
    /// statement. `pg_advisory_unlock` must answer true, and the session must hold no advisory lock after
    /// it (the checks `RELEASE_LOCK` and `RELEASE_ALL_LOCKS` make on MySQL). The count is read
    /// after the unlock: the CTE runs first, then the row's target list.
    fn unlock(&self, conn: &mut DbConn, name: &str) -> Result<(), String> {
        let released = cached_sql::<(Bool, BigInt)>(
            "WITH released AS MATERIALIZED (SELECT pg_advisory_unlock(?) AS ok) \
             SELECT ok, (SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) \
             FROM released",
        )
        .bind::<BigInt, _>(advisory_key(name))
        .get_result::<(bool, i64)>(conn);
        match released {
            Ok((true, 0)) => Ok(()),
            Ok((released, leftover)) => {
                Err(format!("pg_advisory_unlock returned {released}, {leftover} advisory locks still held"))
            }
            Err(e) => Err(format!("release failed: {e}")),
        }
    }

    /// `pg_advisory_unlock` of each name's key, and the session's advisory locks left, counted
    /// after them, in one statement: each unlock must answer true, and nothing may be left (the
    /// checks of [`unlock`](Dialect::unlock), for several keys). The keys travel as one text,
    /// comma-separated, so that one cached statement serves any number of them.
    fn unlock_several(&self, conn: &mut DbConn, names: &[&str]) -> Result<(), String> {
        let keys: Vec<String> = names.iter().map(|name| advisory_key(name).to_string()).collect();
        let released = cached_sql::<(BigInt, BigInt)>(
            "WITH released AS MATERIALIZED ( \
               SELECT COUNT(*) FILTER (WHERE NOT pg_advisory_unlock(CAST(k AS BIGINT))) AS refused \
               FROM unnest(string_to_array(?, ',')) AS k) \
             SELECT refused, (SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) \
             FROM released",
        )
        .bind::<Text, _>(keys.join(","))
        .get_result::<(i64, i64)>(conn);
        match released {
            Ok((0, 0)) => Ok(()),
            Ok((refused, leftover)) => Err(format!(
                "pg_advisory_unlock refused {refused} of {} keys, {leftover} advisory locks still held",
                names.len()
            )),
            Err(e) => Err(format!("release failed: {e}")),
        }
    }

    /// The name's key looked up in `pg_locks`, where a 64-bit key shows as two 32-bit halves
    /// (`objsubid` 1 marks the form).
    fn holder_of(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<i64>> {
        cached_sql::<BigInt>(
            "SELECT CAST(pid AS BIGINT) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND ((CAST(classid AS BIGINT) << 32) | CAST(objid AS BIGINT)) = ?",
        )
        .bind::<BigInt, _>(advisory_key(name))
        .get_result(conn)
        .optional()
    }

    /// The backend's pid.
    fn session_id(&self, conn: &mut DbConn) -> QueryResult<i64> {
        cached_sql::<BigInt>("SELECT CAST(pg_backend_pid() AS BIGINT)").get_result(conn)
    }

    fn end_session(&self, conn: &mut DbConn, id: i64) -> QueryResult<()> {
        let ended = cached_sql::<Bool>("SELECT pg_terminate_backend(CAST(? AS INTEGER))")
            .bind::<BigInt, _>(id)
            .get_result::<bool>(conn)?;
        if ended { Ok(()) } else { Err(DbError::QueryBuilderError(format!("no session {id} to end").into())) }
    }

    /// Another role's session (the app has no `pg_signal_backend`), or a superuser's.
    fn refused_to_end(&self, error: &DbError) -> bool {
        error.to_string().contains("permission denied to terminate")
    }

    /// `pg_stat_activity` shows every session's role and database to any role.
    fn session_owner(&self, conn: &mut DbConn, id: i64) -> QueryResult<Option<SessionOwner>> {
        cached_sql::<Untyped>(
            "SELECT CAST(usename AS TEXT) AS account, CAST(datname AS TEXT) AS database \
             FROM pg_stat_activity WHERE pid = CAST(? AS INTEGER)",
        )
        .bind::<BigInt, _>(id)
        .get_result(conn)
        .optional()
    }

    /// The advisory locks of this database, from `pg_locks` and `pg_stat_activity`. A key is a
    /// hash: the name it came from cannot be read back, so each lock is listed by its key
    /// ([`ADVISORY_LABEL`]), which the admin may free as listed or look up by name. Any session
    /// of this database may take an advisory lock: the listing shows each holder's user, host
    /// and state, and the admin decides.
    fn list_named_locks(&self, conn: &mut DbConn, _prefix: &str) -> QueryResult<NamedLockListing> {
        let locks = cached_sql::<Untyped>(
            "SELECT ? || ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) AS name, \
               CAST(l.pid AS BIGINT) AS connection_id, \
               CAST(EXTRACT(EPOCH FROM now() - a.state_change) AS BIGINT) AS state_secs, \
               CAST(a.usename AS TEXT) AS db_user, host(a.client_addr) AS host, CAST(a.datname AS TEXT) AS db, \
               a.state AS command \
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY state_secs DESC, name",
        )
        .bind::<Text, _>(ADVISORY_LABEL)
        .load(conn)?;
        Ok(NamedLockListing {
            source: "pg_locks",
            note: Some(
                "PostgreSQL names an advisory lock by a 64-bit key (the first 8 bytes of the name's SHA-256), \
                 so locks are listed by key. Free one as listed, or look a lock up by name."
                    .into(),
            ),
            gap: Some("advisory_keys"),
            locks,
        })
    }

    fn look_up_named_lock(&self, conn: &mut DbConn, name: &str) -> QueryResult<Option<NamedLock>> {
        let Some(pid) = self.holder_of(conn, name)? else { return Ok(None) };
        cached_sql::<Untyped>(
            "SELECT CAST(? AS TEXT) AS name, CAST(a.pid AS BIGINT) AS connection_id, \
               CAST(EXTRACT(EPOCH FROM now() - a.state_change) AS BIGINT) AS state_secs, \
               CAST(a.usename AS TEXT) AS db_user, host(a.client_addr) AS host, CAST(a.datname AS TEXT) AS db, \
               a.state AS command \
             FROM pg_stat_activity a WHERE a.pid = CAST(? AS INTEGER)",
        )
        .bind::<Text, _>(name)
        .bind::<BigInt, _>(pid)
        .get_result(conn)
        .optional()
    }

    fn is_listed_label(&self, text: &str) -> bool {
        labelled_advisory_key(text).is_some()
    }

    fn has_transaction_scoped_lock(&self) -> bool {
        true
    }

    /// `pg_try_advisory_xact_lock` when not waiting; else `pg_advisory_xact_lock` bounded by
    /// `lock_timeout`, set for this transaction and put back right after, so the work's row
    /// waits keep the session's own bound. A wait that runs out aborts the transaction; its
    /// rollback ends it. Statements of the caller's transaction:
    ///
    /// ```text
    /// SELECT pg_try_advisory_xact_lock(key)            -- wait zero: true granted, false held
    ///
    /// SELECT current_setting('lock_timeout')           -- a wait: the session's bound, kept
    /// SELECT set_config('lock_timeout', '800ms', true)
    /// SELECT pg_advisory_xact_lock(key)                -- granted, or "lock timeout" (held)
    /// SELECT set_config('lock_timeout', <kept>, true)  -- the work's row waits: the session's bound
    /// ```
    ///
    /// No release follows: the transaction's COMMIT or ROLLBACK lets go of the lock.
    fn lock_for_transaction(&self, conn: &mut DbConn, name: &str, wait: Duration) -> QueryResult<Asked> {
        let key = advisory_key(name);
        if wait.is_zero() {
            let granted: bool = cached_sql::<Bool>("SELECT pg_try_advisory_xact_lock(?)")
                .bind::<BigInt, _>(key)
                .get_result(conn)?;
            return Ok(if granted { Asked::Granted } else { Asked::Held });
        }
        let session_bound: String =
            cached_sql::<Text>("SELECT current_setting('lock_timeout')").get_result(conn)?;
        bound_wait(conn, &millis(wait))?;
        match cached_sql::<()>("SELECT pg_advisory_xact_lock(?)").bind::<BigInt, _>(key).execute(conn) {
            Ok(_) => {}
            Err(e) if is_lock_timeout(&e) => return Ok(Asked::Held),
            Err(e) => return Err(e),
        }
        bound_wait(conn, &session_bound)?;
        Ok(Asked::Granted)
    }

    /// `EXCLUDE USING gist`, with the btree_gist extension for the `=` on plain columns beside
    /// the range's `&&`.
    fn has_exclusion_constraints(&self) -> bool {
        true
    }

    fn check_server(&self, conn: &mut DbConn) -> anyhow::Result<ServerFacts> {
        let facts: PostgresFacts = cached_sql::<Untyped>(
            "SELECT version() AS version, CAST(current_setting('server_version_num') AS INTEGER) AS version_num, \
             pg_is_in_recovery() AS in_recovery, current_setting('lc_messages') AS lc_messages",
        )
        .get_result(conn)
        .map_err(|e| anyhow::anyhow!("cannot read the server's version and settings ({e}); refusing to start"))?;
        if let Some(reason) = facts.refusal() {
            anyhow::bail!(reason);
        }
        log::info!("database server {} (named locks: advisory locks, 64-bit keys)", facts.version);
        Ok(ServerFacts { version: facts.version, variables: std::collections::BTreeMap::new() })
    }

    /// A session always belongs to a database, and without one named it is the database named
    /// like the user, which an app's role seldom has: the server's `postgres` database, which
    /// every cluster has and every role may connect to unless an administrator revoked that.
    fn database_to_create_from(&self) -> &'static str {
        "postgres"
    }

    /// PostgreSQL has no `CREATE DATABASE IF NOT EXISTS`. Another instance may create it between
    /// the look and the creation: its database is as good as ours.
    fn create_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()> {
        let found = cached_sql::<BigInt>("SELECT COUNT(*) FROM pg_database WHERE datname = ?")
            .bind::<Text, _>(name)
            .get_result::<i64>(conn)?;
        if found == 0 {
            match conn
                .batch_execute(&format!("CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0"))
            {
                Err(e) if e.to_string().contains("already exists") => {}
                created => created?,
            }
        }
        Ok(())
    }

    /// Sessions left behind (a pool still closing) would otherwise block the drop.
    fn drop_database(&self, conn: &mut DbConn, name: &str) -> QueryResult<()> {
        conn.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
    }

    fn deadlock_evidence(
        &self,
        conn: &mut DbConn,
        _url: &str,
        error: &DbError,
    ) -> Result<Option<String>, String> {
        deadlock_section(conn, error).map_err(|e| e.to_string())
    }

    fn read_deadlock(&self, section: &str) -> Deadlock {
        parse_deadlock(section)
    }
}

/// What haita needs of a PostgreSQL server, read once at start.
#[derive(QueryableByName)]
struct PostgresFacts {
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    version_num: i32,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    in_recovery: bool,
    #[diesel(sql_type = Text)]
    lc_messages: String,
}

impl PostgresFacts {
    /// Why haita cannot run on this server, if it cannot.
    fn refusal(&self) -> Option<String> {
        if self.version_num < 150_000 {
            return Some(format!("server {} is too old: haita needs PostgreSQL 15+", self.version));
        }
        if self.in_recovery {
            return Some(
                "this server is a standby (pg_is_in_recovery): advisory locks and row locks must run on \
                 the primary"
                    .into(),
            );
        }
        // diesel reports a lock timeout (55P03) and a deadlock (40P01) with the server's message
        // only, not its SQLSTATE, so the messages must be the untranslated ones (`db::errors`).
        let english = ["", "C", "POSIX"].contains(&self.lc_messages.as_str())
            || self.lc_messages.starts_with("C.")
            || self.lc_messages.starts_with("en");
        if !english {
            return Some(format!(
                "lc_messages is {:?}: haita tells lock timeouts and deadlocks apart by the server's \
                 English messages. Run ALTER ROLE <haita's role> SET lc_messages = 'C' (as a superuser).",
                self.lc_messages
            ));
        }
        None
    }
}

/// PostgreSQL keeps no record of a deadlock: its description is the DETAIL of the victim's
/// error (40P01), one line per session of the cycle ("Process 12 waits for ShareLock on
/// transaction 345; blocked by process 67."). The statements are only in the server's log; the
/// other sessions' are read from `pg_stat_activity` now, and kept only while that session is
/// still in the deadlock's transaction (its `backend_xid` is the one we waited for): then its
/// statement is the one that waited, or came right after it. Stored as: the time,
/// `victim: process <pid>` (ours), the DETAIL lines, and `process <pid> statement: <text>` lines
/// ([`parse_deadlock`] reads it back).
fn deadlock_section(conn: &mut DbConn, error: &DbError) -> QueryResult<Option<String>> {
    let DbError::DatabaseError(_, info) = error else { return Ok(None) };
    let Some(detail) = info.details() else { return Ok(None) };
    let me = Postgres.session_id(conn)?;
    let mut lines =
        vec![chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC").to_string(), format!("victim: process {me}")];
    lines.extend(detail.lines().map(str::to_string));
    // Another party's statement is worth keeping only while it is still in the very transaction
    // of the deadlock: the one whose id the DETAIL names as what we waited for.
    let others: Vec<(i64, String)> = parse_deadlock(&lines.join("\n"))
        .transactions
        .iter()
        .filter(|party| party.thread_id != Some(me))
        .filter_map(|party| {
            let xid = party.holds.iter().find_map(|held| held.strip_prefix("transaction "))?;
            Some((party.thread_id?, xid.to_string()))
        })
        .collect();
    for (pid, xid) in others {
        let statement = cached_sql::<Nullable<Text>>(
            "SELECT query FROM pg_stat_activity WHERE pid = CAST(? AS INTEGER) \
               AND backend_xid = CAST(CAST(? AS TEXT) AS xid) AND query <> '<insufficient privilege>'",
        )
        .bind::<BigInt, _>(pid)
        .bind::<Text, _>(&xid)
        .get_result::<Option<String>>(conn)
        .optional()?
        .flatten();
        if let Some(statement) = statement {
            let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
            lines.push(format!("process {pid} statement: {statement}"));
        }
    }
    Ok(Some(lines.join("\n")))
}

/// A deadlock as [`deadlock_section`] stored it. PostgreSQL names what a session waits for
/// (`ShareLock on transaction 345`: a row lock, waited for as the holder's transaction) and who
/// blocks it; the blocker holds the object waited for.
fn parse_deadlock(section: &str) -> Deadlock {
    let mut lines = section.lines();
    let at = lines.next().unwrap_or_default().trim().to_string();
    let mut transactions: Vec<Party> = Vec::new();
    let mut victim_pid: Option<i64> = None;
    fn party(transactions: &mut Vec<Party>, pid: i64) -> &mut Party {
        if let Some(at) = transactions.iter().position(|p| p.thread_id == Some(pid)) {
            return &mut transactions[at];
        }
        let number = u32::try_from(transactions.len() + 1).unwrap_or(u32::MAX);
        transactions.push(Party {
            number,
            trx_id: String::new(),
            thread_id: Some(pid),
            statement: String::new(),
            holds: Vec::new(),
            waits_for: Vec::new(),
        });
        let last = transactions.len() - 1;
        &mut transactions[last]
    }
    for line in lines {
        if let Some(pid) = line.strip_prefix("victim: process ") {
            victim_pid = pid.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("Process ") {
            let Some((pid, rest)) = rest.split_once(" waits for ") else { continue };
            let Some((wanted, blocker)) = rest.split_once("; blocked by process ") else { continue };
            let (Ok(pid), Ok(blocker)) = (pid.trim().parse(), blocker.trim().trim_end_matches('.').parse())
            else {
                continue;
            };
            party(&mut transactions, pid).waits_for.push(wanted.to_string());
            let object = wanted.split_once(" on ").map_or(wanted, |(_, object)| object);
            party(&mut transactions, blocker).holds.push(object.to_string());
        } else if let Some(rest) = line.strip_prefix("process ") {
            let Some((pid, statement)) = rest.split_once(" statement: ") else { continue };
            if let Ok(pid) = pid.trim().parse() {
                party(&mut transactions, pid).statement = statement.to_string();
            }
        }
    }
    let victim =
        transactions.iter().find(|p| p.thread_id.is_some() && p.thread_id == victim_pid).map(|p| p.number);
    Deadlock { at, transactions, victim }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_label_is_its_own_key_and_no_name_of_ours_is_a_label() {
        assert_eq!(advisory_key("advisory key -42"), -42);
        assert!(Postgres.is_listed_label("advisory key 7"));
        assert!(!Postgres.is_listed_label("haita:abc123:book:1:2026-12-24"));
    }

    /// As stored from PostgreSQL 15's DETAIL for an order and a script locking two stock rows in
    /// opposite orders; the script was still in its transaction.
    #[test]
    fn a_postgresql_deadlock_names_sessions_what_each_waits_for_and_who_holds_it() {
        let section = "2026-11-24 22:36:01 UTC\n\
            victim: process 17515\n\
            Process 17515 waits for ShareLock on transaction 154557; blocked by process 17521.\n\
            Process 17521 waits for ShareLock on transaction 154558; blocked by process 17515.\n\
            process 17521 statement: SELECT product_id FROM stock_levels WHERE product_id = $1 FOR UPDATE";
        let party = |number, pid, statement: &str, holds: &str, waits: &str| Party {
            number,
            trx_id: String::new(),
            thread_id: Some(pid),
            statement: statement.into(),
            holds: vec![holds.into()],
            waits_for: vec![waits.into()],
        };
        assert_eq!(
            parse_deadlock(section),
            Deadlock {
                at: "2026-11-24 22:36:01 UTC".into(),
                transactions: vec![
                    party(1, 17515, "", "transaction 154558", "ShareLock on transaction 154557"),
                    party(
                        2,
                        17521,
                        "SELECT product_id FROM stock_levels WHERE product_id = $1 FOR UPDATE",
                        "transaction 154557",
                        "ShareLock on transaction 154558",
                    ),
                ],
                victim: Some(1),
            }
        );
    }
}
