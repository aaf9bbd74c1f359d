use std::fmt;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text, Timestamp};
use serde::Serialize;

use super::EditLockError;
use crate::auth::SessionUser;

/// What an edit lock is for: `resource:42`. Built from a kind and an id only, so keys never vary
/// in case and always fit the 64-character column and named-lock name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EditLockKey(String);

impl EditLockKey {
    pub fn resource(id: i64) -> Self {
        Self(format!("resource:{id}"))
    }

    /// A key typed by an admin or sent in a URL: `kind:id`, lower-case kind, positive id.
    pub fn parse(text: &str) -> Result<Self, EditLockError> {
        let valid = text.split_once(':').is_some_and(|(kind, id)| {
            (1..=32).contains(&kind.len())
                && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                && id.parse::<i64>().is_ok_and(|n| n > 0)
                && !id.starts_with(['+', '0'])
        });
        if valid {
            Ok(Self(text.to_string()))
        } else {
            Err(EditLockError::InvalidKey(text.chars().take(70).collect()))
        }
    }

    /// The resource this key locks, if it locks one (`resource:{id}`).
    pub fn resource_id(&self) -> Option<i64> {
        self.0.strip_prefix("resource:")?.parse().ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EditLockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who may hold an edit lock: a user *in one session*. The same user in two browsers is two
/// owners (a user logged in on several devices needs the session too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub user_id: i64,
    pub session: String,
}

impl From<&SessionUser> for Owner {
    fn from(user: &SessionUser) -> Self {
        Self { user_id: user.id, session: user.session_id.clone() }
    }
}

/// An edit lock as a person sees it, with every time judged by the database clock (`NOW(6)`):
/// several app instances share one database, and their clocks may disagree.
#[derive(Clone, Debug, QueryableByName, Serialize, utoipa::ToSchema)]
pub struct LockView {
    #[diesel(sql_type = Text)]
    pub key: String,
    #[diesel(sql_type = BigInt)]
    pub owner_user_id: i64,
    #[diesel(sql_type = Text)]
    pub owner_username: String,
    #[diesel(sql_type = Text)]
    pub owner_display_name: String,
    /// Not shown to other users; the admin screen shows its first characters.
    #[diesel(sql_type = Text)]
    #[serde(skip)]
    pub owner_session: String,
    /// Which acquisition of this key this is: higher than every one before it. A save presents
    /// the epoch its editor was opened with, and is refused if the lock was acquired again since
    /// (taken over, or ended and retaken, even by the same user in another tab).
    #[diesel(sql_type = BigInt)]
    pub epoch: i64,
    #[diesel(sql_type = Timestamp)]
    #[serde(with = "crate::wire::utc")]
    pub acquired_at: NaiveDateTime,
    #[diesel(sql_type = Timestamp)]
    #[serde(with = "crate::wire::utc")]
    pub heartbeat_at: NaiveDateTime,
    #[diesel(sql_type = Timestamp)]
    #[serde(with = "crate::wire::utc")]
    pub expires_at: NaiveDateTime,
    #[diesel(sql_type = Bool)]
    pub held_by_batch: bool,
    /// `expires_at <= NOW(6)` on the database: free to be taken over.
    #[diesel(sql_type = Bool)]
    pub expired: bool,
    #[diesel(sql_type = BigInt)]
    pub age_secs: i64,
    /// Negative once expired.
    #[diesel(sql_type = BigInt)]
    pub remaining_secs: i64,
}

/// Every read of a lock goes through this projection, so "expired" means the same everywhere.
/// PostgreSQL's clock is `LOCALTIMESTAMP` (UTC: the sessions' time zone), the start of the
/// transaction rather than of the statement; in the short transactions here that only ever
/// makes a lock look a little younger, which errs on the side of the holder.
pub(super) const LOCK_VIEW: (&str, &str) = (
    "SELECT l.lock_key AS `key`, l.owner_user_id, \
       u.username AS owner_username, u.display_name AS owner_display_name, l.owner_session, \
       l.epoch, l.acquired_at, l.heartbeat_at, l.expires_at, l.held_by_batch, \
       l.expires_at <= NOW(6) AS expired, \
       TIMESTAMPDIFF(SECOND, l.acquired_at, NOW(6)) AS age_secs, \
       TIMESTAMPDIFF(SECOND, NOW(6), l.expires_at) AS remaining_secs \
     FROM edit_locks l JOIN users u ON u.id = l.owner_user_id",
    "SELECT l.lock_key AS key, l.owner_user_id, \
       u.username AS owner_username, u.display_name AS owner_display_name, l.owner_session, \
       l.epoch, l.acquired_at, l.heartbeat_at, l.expires_at, l.held_by_batch, \
       l.expires_at <= LOCALTIMESTAMP AS expired, \
       CAST(TRUNC(EXTRACT(EPOCH FROM LOCALTIMESTAMP - l.acquired_at)) AS BIGINT) AS age_secs, \
       CAST(TRUNC(EXTRACT(EPOCH FROM l.expires_at - LOCALTIMESTAMP)) AS BIGINT) AS remaining_secs \
     FROM edit_locks l JOIN users u ON u.id = l.owner_user_id",
);

impl LockView {
    pub fn is_owned_by(&self, owner: &Owner) -> bool {
        self.owner_user_id == owner.user_id && self.owner_session == owner.session
    }

    /// Enough of the session id to tell two sessions apart on the admin screen.
    pub fn session_hint(&self) -> &str {
        self.owner_session.get(..8).unwrap_or(&self.owner_session)
    }

    /// "Carol (carol)" for messages.
    pub fn holder_name(&self) -> String {
        format!("{} ({})", self.owner_display_name, self.owner_username)
    }
}

/// Proof that `owner` holds the unexpired edit lock `key`, and that the edit-lock row is locked
/// `FOR UPDATE` by the current transaction. Only [`super::service::recheck_for_save`] makes one.
///
/// It is valid until the transaction that made it ends: until then a takeover, a release or
/// an admin's force release of this lock waits for our row lock, so whatever is done with the
/// token is done by the holder. Functions that change a locked thing take `&EditLockToken`;
/// without the lock there is nothing to call them with.
#[derive(Debug)]
pub struct EditLockToken {
    pub(super) key: EditLockKey,
    pub(super) owner: Owner,
}

impl EditLockToken {
    pub fn key(&self) -> &EditLockKey {
        &self.key
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kind_and_positive_id_only() {
        assert_eq!(EditLockKey::resource(42).as_str(), "resource:42");
        assert_eq!(EditLockKey::parse("resource:42").map(|k| k.0).ok().as_deref(), Some("resource:42"));
        for bad in [
            "",
            "resource",
            "resource:",
            "resource:0",
            "resource:-1",
            "resource:042",
            "Resource:1",
            "r:1:2",
            "x:+1",
        ] {
            assert!(EditLockKey::parse(bad).is_err(), "{bad:?}");
        }
    }
}
