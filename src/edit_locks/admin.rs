//! The admin's transitions of edit locks: ending someone's lock with a reason
//! ([`force_release`]) and sweeping the expired ones ([`release_expired`]). The same steps as
//! the editor's own (`super::service`): the row locked first, then the change and its audit event
//! in one transaction.

use diesel::prelude::*;
use diesel::sql_types::{Text, Untyped};

use super::model::LockView;
use super::service::{REASON, at, find, lock_as_shown, row_for_update};
use super::{EditLockError, EditLockKey};
use crate::audit::{self, Action};
use crate::db::{DbConn, cached_sql};

/// An admin ends someone's lock (locks whose owner vanished must be releasable), with a reason
/// in the audit log. Refused for batch-held locks: the batch relies on them until it finishes.
pub fn force_release(
    conn: &mut DbConn,
    key: &EditLockKey,
    admin_user_id: i64,
    reason: &str,
) -> Result<LockView, EditLockError> {
    crate::db::transaction(conn, |conn| {
        // 1. Lock the row: a save in flight finishes first (it holds it), later ones see it gone.
        let row = row_for_update(conn, key)?.ok_or_else(|| EditLockError::NoSuchLock(key.clone()))?;
        // 2. Never a batch's.
        if row.held_by_batch {
            return Err(EditLockError::BatchHeld(key.clone()));
        }
        // 3. Delete it, 4. audit who held it, since when, and the admin's reason.
        let lock = lock_as_shown(conn, key)?;
        cached_sql::<()>("DELETE FROM edit_locks WHERE lock_key = ?")
            .bind::<Text, _>(key.as_str())
            .execute(conn)?;
        audit::record(
            conn,
            Some(admin_user_id),
            Action::EditLockForceReleased,
            key.as_str(),
            &format!(
                "held by {} (session {}) since {}, {}{REASON}{reason}",
                lock.owner_username,
                lock.session_hint(),
                at(lock.acquired_at),
                if lock.expired { "expired" } else { "not expired" }
            ),
        )?;
        Ok(lock)
    })
}

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Text)]
    lock_key: String,
}

/// The admin's "release all expired": removes every expired lock that no batch holds, each with
/// an audit event, and answers which.
pub fn release_expired(conn: &mut DbConn, admin_user_id: i64) -> Result<Vec<LockView>, EditLockError> {
    crate::db::transaction(conn, |conn| {
        // Locked in key order, like every multi-row lock here, so two admins cannot deadlock.
        let keys: Vec<Key> = cached_sql::<Untyped>(
            "SELECT lock_key FROM edit_locks WHERE expires_at <= {now} AND NOT held_by_batch \
             ORDER BY lock_key FOR UPDATE",
        )
        .load(conn)?;
        let mut released = Vec::with_capacity(keys.len());
        for Key { lock_key } in keys {
            let key = EditLockKey::parse(&lock_key)?;
            let Some(lock) = find(conn, &key)? else { continue };
            cached_sql::<()>("DELETE FROM edit_locks WHERE lock_key = ? AND expires_at <= {now}")
                .bind::<Text, _>(&lock_key)
                .execute(conn)?;
            audit::record(
                conn,
                Some(admin_user_id),
                Action::EditLockExpired,
                &lock_key,
                &format!(
                    "lock of {} expired at {}; removed by \"release all expired\"",
                    lock.owner_username,
                    at(lock.expires_at)
                ),
            )?;
            released.push(lock);
        }
        Ok(released)
    })
}
