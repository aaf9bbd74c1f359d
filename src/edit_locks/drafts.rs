//! Drafts: what an editor typed and has not saved, kept for them on the server.
//!
//! A pessimistic edit lock protects the record, not the person: when someone takes the lock over
//! (their own expired, an admin's force release), the displaced editor's unsaved input exists
//! only in their browser, and "try again" or a closed tab loses it. So the input is kept, per
//! user and locked record, in three moments:
//!
//! - while they type: the editor's script sends the form with its heartbeat when it changed
//!   (`PUT /api/v1/resources/{id}/draft`), so a closed laptop loses at most one heartbeat of work;
//! - when their heartbeat learns the lock is gone: the script sends the form at once;
//! - when their save is refused because they no longer hold the lock: the server keeps what the
//!   save carried (no script needed).
//!
//! The next time they open the editor, the draft is offered back (restore or discard). Saving
//! and cancelling discard it. A draft is never applied by itself: the record may have changed
//! meanwhile, and only its author can judge. Keeping a draft needs no lock at all — it is the
//! user's own, not the record's.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text, Timestamp};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::EditLockKey;
use crate::db::{DbConn, Sql, cached_sql};

/// A kept draft: the fields as typed, when and why it was kept.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Draft<T> {
    pub fields: T,
    #[serde(with = "crate::wire::utc")]
    pub saved_at: NaiveDateTime,
    pub why: String,
}

/// The longest `why` kept (the column's width, in characters).
const WHY_MAX: usize = 300;

/// Keeps `fields` as `user_id`'s draft of `key`, replacing an older one.
pub fn keep(
    conn: &mut DbConn,
    user_id: i64,
    key: &EditLockKey,
    fields: &impl Serialize,
    why: &str,
) -> QueryResult<()> {
    let fields =
        serde_json::to_string(fields).map_err(|e| diesel::result::Error::SerializationError(e.into()))?;
    let why: String = why.chars().take(WHY_MAX).collect();
    cached_sql::<()>(Sql::per_engine(
        "INSERT INTO edit_drafts (user_id, lock_key, fields, why, saved_at) VALUES (?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE fields = VALUES(fields), why = VALUES(why), saved_at = VALUES(saved_at)",
        "INSERT INTO edit_drafts (user_id, lock_key, fields, why, saved_at) VALUES (?, ?, ?, ?, ?) \
         ON CONFLICT (user_id, lock_key) \
         DO UPDATE SET fields = EXCLUDED.fields, why = EXCLUDED.why, saved_at = EXCLUDED.saved_at",
    ))
    .bind::<BigInt, _>(user_id)
    .bind::<Text, _>(key.as_str())
    .bind::<Text, _>(fields)
    .bind::<Text, _>(why)
    .bind::<Timestamp, _>(crate::db::now_micros())
    .execute(conn)?;
    Ok(())
}

/// `user_id`'s draft of `key`, if one is kept. A draft whose fields no longer read as `T` (the
/// form changed shape since) is as good as none.
pub fn find<T: DeserializeOwned>(
    conn: &mut DbConn,
    user_id: i64,
    key: &EditLockKey,
) -> QueryResult<Option<Draft<T>>> {
    let row: Option<(String, NaiveDateTime, String)> = cached_sql::<(Text, Timestamp, Text)>(
        "SELECT fields, saved_at, why FROM edit_drafts WHERE user_id = ? AND lock_key = ?",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<Text, _>(key.as_str())
    .get_result(conn)
    .optional()?;
    Ok(row.and_then(|(fields, saved_at, why)| {
        let fields = serde_json::from_str(&fields)
            .map_err(|e| log::warn!("draft of {key} for user {user_id} cannot be read: {e}"))
            .ok()?;
        Some(Draft { fields, saved_at, why })
    }))
}

/// Drops `user_id`'s draft of `key` (saved, cancelled, or discarded by its author).
pub fn discard(conn: &mut DbConn, user_id: i64, key: &EditLockKey) -> QueryResult<()> {
    cached_sql::<()>("DELETE FROM edit_drafts WHERE user_id = ? AND lock_key = ?")
        .bind::<BigInt, _>(user_id)
        .bind::<Text, _>(key.as_str())
        .execute(conn)?;
    Ok(())
}
