//! The audit log: who acquired, took over, released or force-released which lock, and who saved
//! which resource.
//!
//! Pessimistic locks must be releasable by an administrator (`docs/pessimistic-edit-lock.md`); an action that
//! strong needs a trail. Every event is written with [`record`] on the caller's connection,
//! inside the caller's transaction, so the log and the change it describes commit or roll back
//! together: the log never claims a release that did not happen, nor misses one that did.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

use crate::db::DbConn;
use crate::schema::{audit_events, users};

/// The closed set of things the log records; `as_str` is what the `action` column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    EditLockAcquired,
    EditLockExpired,
    EditLockTakenOver,
    EditLockReleased,
    EditLockForceReleased,
    EditLockBatchSeized,
    NamedLockForceReleased,
    ResourceSaved,
    ResourceClosed,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EditLockAcquired => "edit_lock.acquired",
            Self::EditLockExpired => "edit_lock.expired",
            Self::EditLockTakenOver => "edit_lock.taken_over",
            Self::EditLockReleased => "edit_lock.released",
            Self::EditLockForceReleased => "edit_lock.force_released",
            Self::EditLockBatchSeized => "edit_lock.batch_seized",
            Self::NamedLockForceReleased => "named_lock.force_released",
            Self::ResourceSaved => "resource.saved",
            Self::ResourceClosed => "resource.closed",
        }
    }
}

/// Appends one event. Runs in the caller's transaction (see the module docs). Over-long text is
/// cut rather than refused: losing the end of a sentence is better than losing the event.
pub fn record(
    conn: &mut DbConn,
    actor_user_id: Option<i64>,
    action: Action,
    subject: &str,
    detail: &str,
) -> QueryResult<()> {
    use diesel::sql_types::{BigInt, Nullable, Text};
    // Cached: an audit event is written on every edit-lock change.
    crate::db::cached_sql::<()>(
        "INSERT INTO audit_events (actor_user_id, action, subject, detail) VALUES (?, ?, ?, ?)",
    )
    .bind::<Nullable<BigInt>, _>(actor_user_id)
    .bind::<Text, _>(action.as_str())
    .bind::<Text, _>(cut(subject, 100))
    .bind::<Text, _>(cut(detail, 1000))
    .execute(conn)
    .map(drop)
}

fn cut(text: &str, max_chars: usize) -> &str {
    text.char_indices().nth(max_chars).map_or(text, |(at, _)| &text[..at])
}

/// One line of the log as the admin screen shows it.
#[derive(Clone, Debug, Queryable, Serialize, utoipa::ToSchema)]
pub struct AuditEvent {
    pub id: i64,
    #[serde(with = "crate::wire::utc")]
    pub at: NaiveDateTime,
    pub actor: Option<String>,
    pub action: String,
    pub subject: String,
    pub detail: String,
}

impl AuditEvent {
    /// "edit_lock.released by root at 2026-11-24 10:42:07 UTC — by the batch run …": the event for a person
    /// told their lock is gone.
    pub fn sentence(&self) -> String {
        let by = self.actor.as_ref().map(|actor| format!(" by {actor}")).unwrap_or_default();
        format!("{}{by} at {} — {}", self.action, crate::wire::utc::text(&self.at), self.detail)
    }
}

/// A page of the log, newest first, and the id to pass as `before` for the next (older) page.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub events: Vec<AuditEvent>,
    pub older: Option<i64>,
}

pub const MAX_PAGE: i64 = 200;

/// Keyset paging on the primary key (`id < before`): every page costs the same however deep the
/// admin scrolls, and new events arriving meanwhile do not shift the pages already seen.
pub fn page(conn: &mut DbConn, before: Option<i64>, limit: i64) -> QueryResult<AuditPage> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut query = audit_events::table
        .left_join(users::table)
        .select((
            audit_events::id,
            audit_events::at,
            users::username.nullable(),
            audit_events::action,
            audit_events::subject,
            audit_events::detail,
        ))
        .order(audit_events::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(audit_events::id.lt(before));
    }
    let mut events: Vec<AuditEvent> = query.load(conn)?;
    let older = if events.len() > limit as usize {
        events.truncate(limit as usize);
        events.last().map(|e| e.id)
    } else {
        None
    };
    Ok(AuditPage { events, older })
}

/// The newest event about `subject`: among `actions` if given, by `actor` if given, after the
/// event `after` if given (e.g. who released a user's lock and why; what ended someone's edit
/// lock since they took it, past the acquisition that followed).
pub fn latest_of(
    conn: &mut DbConn,
    subject: &str,
    actions: Option<&[Action]>,
    actor: Option<i64>,
    after: Option<i64>,
) -> QueryResult<Option<AuditEvent>> {
    let mut query =
        audit_events::table.left_join(users::table).filter(audit_events::subject.eq(subject)).into_boxed();
    if let Some(actions) = actions {
        query = query.filter(audit_events::action.eq_any(actions.iter().map(|a| a.as_str())));
    }
    if let Some(actor) = actor {
        query = query.filter(audit_events::actor_user_id.eq(actor));
    }
    if let Some(after) = after {
        query = query.filter(audit_events::id.gt(after));
    }
    query
        .select((
            audit_events::id,
            audit_events::at,
            users::username.nullable(),
            audit_events::action,
            audit_events::subject,
            audit_events::detail,
        ))
        .order(audit_events::id.desc())
        .first(conn)
        .optional()
}

/// An event as the person it concerns is told of it: who did it by id and by the name people
/// know them by (a page says "Admin released your lock", and knows whether "you" did).
#[derive(Clone, Debug, Queryable)]
pub struct Told {
    pub id: i64,
    pub at: NaiveDateTime,
    pub actor_user_id: Option<i64>,
    pub actor_name: Option<String>,
    pub action: String,
    pub detail: String,
}

/// The first `limit` events about `subject` among `actions` after the event `after`, oldest
/// first: what happened next (e.g. what ended someone's edit lock after they acquired it).
pub fn next_of(
    conn: &mut DbConn,
    subject: &str,
    actions: &[Action],
    after: i64,
    limit: i64,
) -> QueryResult<Vec<Told>> {
    audit_events::table
        .left_join(users::table)
        .filter(audit_events::subject.eq(subject))
        .filter(audit_events::action.eq_any(actions.iter().map(|a| a.as_str())))
        .filter(audit_events::id.gt(after))
        .select((
            audit_events::id,
            audit_events::at,
            audit_events::actor_user_id,
            users::display_name.nullable(),
            audit_events::action,
            audit_events::detail,
        ))
        .order(audit_events::id.asc())
        .limit(limit)
        .load(conn)
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(super::cut("会議室", 2), "会議");
        assert_eq!(super::cut("short", 100), "short");
    }
}
