//! Listing the live named locks of this application, and freeing one by ending its session.
//!
//! Where each server tells who holds which named lock, and how a session is ended, is the
//! engine's dialect's answer (`db::dialect`, `docs/server-facts.md`); what may be freed, and the
//! checks right before the kill, are the same on every engine and live here.

use std::time::Duration;

use diesel::QueryResult;
use serde::Serialize;

use super::AdminError;
use crate::audit::{self, Action};
use crate::db::DbConn;
pub use crate::db::dialect::NamedLock;
use crate::db::dialect::{Dialect, NamedLockListing};
use crate::locking::Namespace;
use crate::locking::names::MAX_LEN;

/// A name the admin may look up or free: one of this deployment's (`haita:{tag}:` prefix), at
/// most 64 characters. Another deployment's locks on the same server are not ours to kill.
#[derive(Clone, Debug)]
pub struct OurLockName(String);

impl OurLockName {
    /// On PostgreSQL, a lock as listed (`advisory key N`) is accepted too. A key does not tell
    /// whose it is: the listing covers only this deployment's database, where the locks are
    /// normally haita's, but any session of that database may take one. The screen shows each
    /// holder's user, host and state; the admin decides, and the audit log keeps the reason.
    pub fn parse(names: &Namespace, dialect: &dyn Dialect, text: &str) -> Result<Self, AdminError> {
        let text = text.trim();
        if dialect.is_listed_label(text)
            || names.owns(text) && text.len() <= MAX_LEN && !text.chars().any(char::is_control)
        {
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

/// The live named locks of this deployment, and where the server told them from.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listing {
    /// What every lock name of this deployment starts with: `haita:{tag}:`, the tag a hash of
    /// the database name. Other deployments' locks on the same server are not listed.
    pub prefix: String,
    /// `metadata_lock_info` (MariaDB), `performance_schema` (MySQL), `pg_locks` or `unavailable`.
    pub source: &'static str,
    /// Why the listing is unavailable and how to enable it, in the server's words.
    pub note: Option<String>,
    /// What the listing cannot show on this server, as a code: `mariadb_plugin`,
    /// `mysql_performance_schema` (the listing could not be read), `advisory_keys` (PostgreSQL
    /// lists keys, not names). The screen words it in the reader's language.
    pub gap: Option<&'static str>,
    pub locks: Vec<NamedLock>,
}

/// Every named lock of this deployment held right now. Named locks are server-wide, not per
/// database; the namespace's prefix (`haita:{tag}:`) is what keeps other deployments' locks off
/// this list (`Dialect::list_named_locks` says where each server tells them).
pub fn list(conn: &mut DbConn, names: &Namespace) -> QueryResult<Listing> {
    let NamedLockListing { source, note, gap, locks } =
        conn.dialect().list_named_locks(conn, names.prefix())?;
    Ok(Listing { prefix: names.prefix().to_string(), source, note, gap, locks })
}

/// Who holds `name`, and what the server says about that session.
pub fn lookup(conn: &mut DbConn, name: &OurLockName) -> QueryResult<Option<NamedLock>> {
    conn.dialect().look_up_named_lock(conn, name.as_str())
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
/// given), not the one serving this request, and a session of the app's own account in its own
/// database. The window between that check and the kill is one round trip; a
/// server offers nothing atomic to narrow it further.
pub fn force_release(
    conn: &mut DbConn,
    name: &OurLockName,
    expected: Option<i64>,
    admin_user_id: i64,
    reason: &str,
) -> Result<Killed, AdminError> {
    let dialect = conn.dialect();
    let before = lookup(conn, name)?;
    let holder = dialect
        .holder_of(conn, name.as_str())?
        .ok_or_else(|| AdminError::NotHeld(name.as_str().to_string()))?;
    if let Some(expected) = expected.filter(|e| *e != holder) {
        return Err(AdminError::HolderChanged { name: name.as_str().to_string(), expected, now: holder });
    }
    let own = dialect.session_id(conn)?;
    if holder == own {
        return Err(AdminError::OwnConnection(name.as_str().to_string()));
    }
    // A name with our prefix is no proof of whose session holds it: any session on the server
    // may take any name (a person's CLI, another application). Only a session of the app's own
    // account in its own database is ours to end; anyone else's is left alone, whatever the
    // account's privileges would allow.
    let ours = dialect.session_owner(conn, own)?;
    let theirs = dialect.session_owner(conn, holder)?;
    if theirs.is_none() && dialect.holder_of(conn, name.as_str())? != Some(holder) {
        return Err(AdminError::NotHeld(name.as_str().to_string())); // it ended in between
    }
    if theirs.is_none() || theirs != ours {
        return Err(AdminError::NotOurSession {
            name: name.as_str().to_string(),
            holder,
            account: theirs.as_ref().and_then(|t| t.account.clone()),
            database: theirs.and_then(|t| t.database),
        });
    }
    if let Err(e) = dialect.end_session(conn, holder) {
        // 1094 "Unknown thread id": the session ended by itself in between. A refusal ("You are
        // not owner of thread", "permission denied to terminate process") is not expected for a
        // session of our own account, but the server has the last word.
        return match dialect.holder_of(conn, name.as_str())? {
            None => Err(AdminError::NotHeld(name.as_str().to_string())),
            Some(_) if dialect.refused_to_end(&e) => {
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
        if dialect.holder_of(conn, name.as_str())? != Some(holder) {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Killed { name: name.as_str().to_string(), connection_id: holder, freed })
}
