//! Listing the live named locks of this application, and freeing one by ending its session.
//!
//! Where the server tells who holds which named lock (`docs/server-facts.md`):
//! - MariaDB: `information_schema.METADATA_LOCK_INFO`, after `INSTALL SONAME 'metadata_lock_info'`
//!   (its `TABLE_SCHEMA` column carries the lock name for `User lock` rows);
//! - MySQL 8: `performance_schema.metadata_locks` (`OBJECT_TYPE = 'USER LEVEL LOCK'`);
//! - anywhere: `IS_USED_LOCK(name)` answers for one name the admin already knows — the fallback.
//!
//! The server kind is asked, not guessed from which query happens to succeed: on MariaDB the
//! performance_schema tables exist but stay empty while it is off, which would read as "no locks".

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde::Serialize;

use super::AdminError;
use crate::audit::{self, Action};
use crate::db::{DbConn, Engine, cached_sql};
use crate::locking::Namespace;
use crate::locking::names::{ADVISORY_LABEL, MAX_LEN, labelled_advisory_key};
use crate::locking::sql::{holder_of, kill_connection, own_connection_id};

/// A name the admin may look up or free: one of this deployment's (`haita:{tag}:` prefix), at
/// most 64 characters. Another deployment's locks on the same server are not ours to kill.
#[derive(Clone, Debug)]
pub struct OurLockName(String);

impl OurLockName {
    /// On PostgreSQL, a lock as listed (`advisory key N`) is accepted too. A key does not tell
    /// whose it is: the listing covers only this deployment's database, where the locks are
    /// normally haita's, but any session of that database may take one. The screen shows each
    /// holder's user, host and state; the admin decides, and the audit log keeps the reason.
    pub fn parse(names: &Namespace, engine: Engine, text: &str) -> Result<Self, AdminError> {
        let text = text.trim();
        let listed_key = engine == Engine::Postgres && labelled_advisory_key(text).is_some();
        if listed_key || names.owns(text) && text.len() <= MAX_LEN && !text.chars().any(char::is_control) {
            Ok(Self(text.to_string()))
        } else {
            Err(AdminError::NotOurs {
                name: text.chars().take(80).collect(),
                prefix: names.prefix().to_string(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One live named lock and the server session (connection) holding it.
#[derive(Clone, Debug, QueryableByName, Serialize, utoipa::ToSchema)]
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

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listing {
    /// What every lock name of this deployment starts with: `haita:{tag}:`, the tag a hash of
    /// the database name. Other deployments' locks on the same server are not listed.
    pub prefix: String,
    /// `metadata_lock_info` (MariaDB), `performance_schema` (MySQL) or `unavailable`.
    pub source: &'static str,
    /// Why the listing is unavailable and how to enable it.
    pub note: Option<String>,
    pub locks: Vec<NamedLock>,
}

const MARIADB: &str = "SELECT m.TABLE_SCHEMA AS name, CAST(m.THREAD_ID AS SIGNED) AS connection_id, \
       CAST(p.TIME AS SIGNED) AS state_secs, p.USER AS db_user, p.HOST AS host, p.DB AS db, \
       p.COMMAND AS command \
     FROM information_schema.METADATA_LOCK_INFO m \
     LEFT JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID \
     WHERE m.LOCK_TYPE = 'User lock' AND m.TABLE_SCHEMA LIKE CONCAT(?, '%') \
     ORDER BY state_secs DESC, name";

const MYSQL: &str = "SELECT m.OBJECT_NAME AS name, CAST(t.PROCESSLIST_ID AS SIGNED) AS connection_id, \
       CAST(t.PROCESSLIST_TIME AS SIGNED) AS state_secs, t.PROCESSLIST_USER AS db_user, \
       t.PROCESSLIST_HOST AS host, t.PROCESSLIST_DB AS db, t.PROCESSLIST_COMMAND AS command \
     FROM performance_schema.metadata_locks m \
     JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID \
     WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK' AND m.LOCK_STATUS = 'GRANTED' AND m.OBJECT_NAME LIKE CONCAT(?, '%') \
     ORDER BY state_secs DESC, name";

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = Text)]
    version: String,
}

/// Every named lock of this deployment held right now. Named locks are server-wide, not per
/// database; the namespace's prefix (`haita:{tag}:`) is what keeps other deployments' locks off
/// this list. The prefix is hex and colons only, so it needs no LIKE escaping.
pub fn list(conn: &mut DbConn, names: &Namespace) -> QueryResult<Listing> {
    if conn.engine() == Engine::Postgres {
        return list_advisory(conn, names);
    }
    let Version { version } = diesel::sql_query("SELECT VERSION() AS version").get_result(conn)?;
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let (source, sql, enable) = if mariadb {
        ("metadata_lock_info", MARIADB, "run INSTALL SONAME 'metadata_lock_info' as a privileged user")
    } else {
        ("performance_schema", MYSQL, "start the server with performance_schema=ON")
    };
    Ok(match diesel::sql_query(sql).bind::<Text, _>(names.prefix()).load(conn) {
        Ok(locks) => Listing { prefix: names.prefix().to_string(), source, note: None, locks },
        Err(e) => Listing {
            prefix: names.prefix().to_string(),
            source: "unavailable",
            note: Some(format!(
                "This server cannot list named locks ({e}). To see them here, {enable}. Meanwhile, look \
                 a lock up by name (IS_USED_LOCK)."
            )),
            locks: Vec::new(),
        },
    })
}

/// PostgreSQL's advisory locks of this database, from `pg_locks` and `pg_stat_activity`. A key is
/// a hash: the name it came from cannot be read back, so each lock is listed by its key
/// ([`ADVISORY_LABEL`]), which the admin may free as listed or look up by name.
fn list_advisory(conn: &mut DbConn, names: &Namespace) -> QueryResult<Listing> {
    let locks = cached_sql::<diesel::sql_types::Untyped>(
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
    Ok(Listing {
        prefix: names.prefix().to_string(),
        source: "pg_locks",
        note: Some(
            "PostgreSQL names an advisory lock by a 64-bit key (the first 8 bytes of the name's SHA-256), \
             so locks are listed by key. Free one as listed, or look a lock up by name."
                .into(),
        ),
        locks,
    })
}

/// Who holds `name`, asked with `IS_USED_LOCK` (works on every server, no plugin needed).
/// The name is echoed through `CAST(? AS CHAR)`: a bare `?` column has no type when the statement
/// is prepared, and the MySQL client library reports it as NULL-typed, which diesel cannot read.
pub fn lookup(conn: &mut DbConn, name: &OurLockName) -> QueryResult<Option<NamedLock>> {
    if conn.engine() == Engine::Postgres {
        let Some(pid) = holder_of(conn, name.as_str())? else { return Ok(None) };
        return cached_sql::<diesel::sql_types::Untyped>(
            "SELECT CAST(? AS TEXT) AS name, CAST(a.pid AS BIGINT) AS connection_id, \
               CAST(EXTRACT(EPOCH FROM now() - a.state_change) AS BIGINT) AS state_secs, \
               CAST(a.usename AS TEXT) AS db_user, host(a.client_addr) AS host, CAST(a.datname AS TEXT) AS db, \
               a.state AS command \
             FROM pg_stat_activity a WHERE a.pid = CAST(? AS INTEGER)",
        )
        .bind::<Text, _>(name.as_str())
        .bind::<BigInt, _>(pid)
        .get_result(conn)
        .optional();
    }
    diesel::sql_query(
        "SELECT CAST(? AS CHAR(64)) AS name, CAST(h.id AS SIGNED) AS connection_id, \
           CAST(p.TIME AS SIGNED) AS state_secs, \
           p.USER AS db_user, p.HOST AS host, p.DB AS db, p.COMMAND AS command \
         FROM (SELECT IS_USED_LOCK(?) AS id) h \
         LEFT JOIN information_schema.PROCESSLIST p ON p.ID = h.id \
         WHERE h.id IS NOT NULL",
    )
    .bind::<Text, _>(name.as_str())
    .bind::<Text, _>(name.as_str())
    .get_result(conn)
    .optional()
}

/// Whether the server refused to end another account's session for lack of a privilege.
fn refused(error: &diesel::result::Error) -> bool {
    let text = error.to_string();
    text.contains("not owner of thread") || text.contains("permission denied to terminate")
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Killed {
    pub name: String,
    pub connection_id: i64,
    /// Whether the lock was seen free afterwards (a killed session lets go within moments).
    pub freed: bool,
}

/// Frees `name` by ending the session that holds it (`KILL CONNECTION`), after checking — right
/// before the kill — that the holder is still the connection the admin saw (`expected`, when
/// given) and not our own. The window between that check and the kill is one round trip; a
/// server offers nothing atomic to narrow it further.
pub fn force_release(
    conn: &mut DbConn,
    name: &OurLockName,
    expected: Option<i64>,
    admin_user_id: i64,
    reason: &str,
) -> Result<Killed, AdminError> {
    let before = lookup(conn, name)?;
    let holder =
        holder_of(conn, name.as_str())?.ok_or_else(|| AdminError::NotHeld(name.as_str().to_string()))?;
    if let Some(expected) = expected.filter(|e| *e != holder) {
        return Err(AdminError::HolderChanged { name: name.as_str().to_string(), expected, now: holder });
    }
    if holder == own_connection_id(conn)? {
        return Err(AdminError::OwnConnection(name.as_str().to_string()));
    }
    if let Err(e) = kill_connection(conn, holder) {
        // 1094 "Unknown thread id": the session ended by itself in between. 1095 "You are not
        // owner of thread": another account's session, and no CONNECTION_ADMIN (on PostgreSQL,
        // "permission denied to terminate process": no pg_signal_backend, or a superuser's).
        return match holder_of(conn, name.as_str())? {
            None => Err(AdminError::NotHeld(name.as_str().to_string())),
            Some(_) if refused(&e) => {
                Err(AdminError::KillRefused { name: name.as_str().to_string(), holder })
            }
            Some(_) => Err(e.into()),
        };
    }
    let detail = format!(
        "killed connection {holder} ({}@{}, in its state for {} s); reason: {reason}",
        before.as_ref().and_then(|b| b.db_user.as_deref()).unwrap_or("?"),
        before.as_ref().and_then(|b| b.host.as_deref()).unwrap_or("?"),
        before.as_ref().and_then(|b| b.state_secs).map_or("?".to_string(), |s| s.to_string()),
    );
    audit::record(conn, Some(admin_user_id), Action::NamedLockForceReleased, name.as_str(), &detail)?;
    // The server frees the session's locks as it tears the session down, which is asynchronous.
    let mut freed = false;
    for _ in 0..40 {
        if holder_of(conn, name.as_str())? != Some(holder) {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Killed { name: name.as_str().to_string(), connection_id: holder, freed })
}
