//! Editing a resource under its edit lock: opening the editor, and the save that proves, in its
//! own transaction, that the saver still holds the lock.

use std::time::Duration;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Untyped};

use super::model::{ResourceChanges, ResourceInput};
use super::{FieldError, Resource, ResourceError};
use crate::audit::{self, Action};
use crate::db::{DbConn, DbPool, Sql, cached_sql};
use crate::edit_locks::drafts::{self, Draft};
use crate::edit_locks::ending::{self, Ending};
use crate::edit_locks::service::{self, Acquired, Policy};
use crate::edit_locks::{EditLockError, EditLockKey, EditLockToken, LockView, Owner};
use crate::locking::Turn;
use crate::schema::resources;

/// Opens the editor: the resource, and the lock taken (or renewed) for `owner`.
pub fn open(
    pool: &DbPool,
    turn: Turn,
    ttl: Duration,
    resource_id: i64,
    owner: &Owner,
    policy: Policy,
) -> Result<(Resource, Acquired, LockView), ResourceError> {
    // Answer an unknown resource before taking a lock for it.
    find(&mut *pool.get()?, resource_id)?;
    let (acquired, lock) =
        service::acquire(pool, turn, ttl, &EditLockKey::resource(resource_id), owner, policy)?;
    let resource = find(&mut *pool.get()?, resource_id)?;
    Ok((resource, acquired, lock))
}

pub fn find(conn: &mut DbConn, id: i64) -> Result<Resource, ResourceError> {
    Resource::find(conn, id)?.ok_or(ResourceError::NotFound(id))
}

/// The resource as stored and its edit lock, if any: what the editor and the read-only view show.
pub fn find_with_lock(conn: &mut DbConn, id: i64) -> Result<(Resource, Option<LockView>), ResourceError> {
    let resource = find(conn, id)?;
    let lock = service::find(conn, &EditLockKey::resource(id))?;
    Ok((resource, lock))
}

/// After a save, keep the lock (an API client may save again) or end it (the HTML form's Save
/// closes the editor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThenLock {
    Keep,
    Release,
}

/// Saves `changes` if — and only if — `owner` holds the resource's unexpired edit lock at the
/// moment of the save, in the acquisition `epoch` the editor was opened under. The check and the
/// update are one transaction: the edit-lock row is locked `FOR UPDATE` first
/// ([`service::recheck_for_save`]), so a takeover or force release either committed before (and the save
/// is refused) or waits until the save has committed.
pub fn save(
    conn: &mut DbConn,
    resource_id: i64,
    owner: &Owner,
    epoch: i64,
    changes: &ResourceChanges,
    then: ThenLock,
) -> Result<Resource, ResourceError> {
    crate::db::transaction(conn, |conn| {
        let key = EditLockKey::resource(resource_id);
        let token = service::recheck_for_save(conn, &key, owner, epoch)?;
        let saved = update(conn, &token, resource_id, changes)?;
        if then == ThenLock::Release {
            service::release_after_save(conn, token)?;
        }
        // Their work is in the record now: a draft of it would only offer it twice.
        drafts::discard(conn, owner.user_id, &key)?;
        Ok(saved)
    })
}

/// Confirmed reservations of one span of nights, `[day, check_out)`.
#[derive(QueryableByName)]
struct Span {
    #[diesel(sql_type = Date)]
    day: NaiveDate,
    #[diesel(sql_type = Date)]
    check_out: NaiveDate,
    #[diesel(sql_type = BigInt)]
    confirmed: i64,
}

/// The night from `from` on that the most of `spans` cover, the earliest of equals, with how
/// many cover it.
fn busiest_night(spans: &[Span], from: NaiveDate) -> Option<(NaiveDate, i64)> {
    let mut nights = std::collections::BTreeMap::<NaiveDate, i64>::new();
    for span in spans {
        for night in span.day.max(from).iter_days().take_while(|night| *night < span.check_out) {
            *nights.entry(night).or_default() += span.confirmed;
        }
    }
    // Ascending nights: `max_by_key` keeps the last of equals, so reverse for the earliest.
    nights.into_iter().rev().max_by_key(|(_, confirmed)| *confirmed)
}

#[derive(QueryableByName)]
struct Current {
    #[diesel(sql_type = Integer)]
    version: i32,
}

/// The update itself; `token` proves the caller holds the lock in this transaction.
fn update(
    conn: &mut DbConn,
    token: &EditLockToken,
    resource_id: i64,
    changes: &ResourceChanges,
) -> Result<Resource, ResourceError> {
    debug_assert_eq!(token.key(), &EditLockKey::resource(resource_id));
    // The resource row is locked before bookings are counted. A booking reads the capacity with
    // a shared lock under its day's named lock (bookings::service), so this waits for bookings in
    // flight to commit and later bookings wait for us: none can be counted against the old
    // capacity while we lower it.
    let current: Current = cached_sql::<Untyped>("SELECT version FROM resources WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(resource_id)
        .get_result(conn)
        .optional()?
        .ok_or(ResourceError::NotFound(resource_id))?;
    if let Some(capacity) = changes.capacity {
        // Past nights keep their history; only today and later must still fit. On MySQL a
        // locking read, so it sees every booking committed before our lock on the resource row,
        // whatever the snapshot of this transaction. PostgreSQL refuses a locking clause beside
        // GROUP BY and needs none: at READ COMMITTED each statement reads a snapshot taken when
        // it starts, after our lock was granted. Stays cover several nights, so the bookings
        // are read per span of nights and counted night by night here.
        let today = super::model::today();
        let spans: Vec<Span> = cached_sql::<Untyped>(Sql::per_engine(
            "SELECT day, check_out, COUNT(*) AS confirmed FROM reservations \
             WHERE resource_id = ? AND status = 'confirmed' AND day >= ? AND check_out > ? \
             GROUP BY day, check_out LOCK IN SHARE MODE",
            "SELECT day, check_out, COUNT(*) AS confirmed FROM reservations \
             WHERE resource_id = ? AND status = 'confirmed' AND day >= ? AND check_out > ? \
             GROUP BY day, check_out",
        ))
        .bind::<BigInt, _>(resource_id)
        .bind::<Date, _>(super::model::first_check_in_covering(today))
        .bind::<Date, _>(today)
        .load(conn)?;
        if let Some((day, confirmed)) = busiest_night(&spans, today).filter(|(_, n)| *n > i64::from(capacity))
        {
            return Err(ResourceError::CapacityBelowBookings { capacity, day, confirmed });
        }
    }
    diesel::update(resources::table.filter(resources::id.eq(resource_id)))
        .set((changes, resources::version.eq(resources::version + 1)))
        .execute(conn)?;
    audit::record(
        conn,
        Some(token.owner().user_id),
        Action::ResourceSaved,
        token.key().as_str(),
        &format!("version {} → {}", current.version, current.version + 1),
    )?;
    find(conn, resource_id)
}

/// What the editor's Save button leads to; the handler only renders it.
pub enum FormSaved {
    Saved,
    /// The input does not fit (a field, or a capacity below a future day's bookings); the saver
    /// still holds the lock, so the editor is shown again with the errors.
    Invalid {
        resource: Resource,
        lock: LockView,
        errors: Vec<FieldError>,
    },
    /// The saver no longer holds the lock: taken over, expired or force-released. Nothing was
    /// written but their input, kept as their draft (`edit_locks::drafts`); `ending` says what
    /// happened to them (an admin's reason, say) and who holds the lock now, so the page can show
    /// the user's input back with the why.
    Refused {
        resource: Resource,
        ending: Ending,
    },
}

/// The HTML form's save: validates, saves and closes the editor — or decides which page explains
/// why not. Input errors are reported only to a saver who still holds the lock; anyone else
/// first needs to know that the lock is gone.
pub fn save_form(
    conn: &mut DbConn,
    resource_id: i64,
    owner: &Owner,
    epoch: i64,
    input: &ResourceInput,
) -> Result<FormSaved, ResourceError> {
    let saved = ResourceChanges::parse(input)
        .and_then(|changes| save(conn, resource_id, owner, epoch, &changes, ThenLock::Release));
    let key = EditLockKey::resource(resource_id);
    let errors = match saved {
        Ok(_) => return Ok(FormSaved::Saved),
        Err(ResourceError::Invalid(errors)) => errors,
        Err(e @ ResourceError::CapacityBelowBookings { .. }) => {
            let problem = crate::wire::error::AsProblem::problem(&e);
            vec![FieldError { field: "capacity", message: problem.message, words: problem.words }]
        }
        Err(ResourceError::EditLock(
            EditLockError::Locked(_) | EditLockError::NotHeld { .. } | EditLockError::Superseded { .. },
        )) => {
            drafts::keep(conn, owner.user_id, &key, input, KEPT_WHEN_REFUSED)?;
            let resource = find(conn, resource_id)?;
            let ending = ending::ending(conn, &key, owner, Some(epoch))?;
            return Ok(FormSaved::Refused { resource, ending });
        }
        Err(other) => return Err(other),
    };
    let resource = find(conn, resource_id)?;
    Ok(match service::find(conn, &key)? {
        Some(lock) if lock.is_owned_by(owner) && !lock.expired => {
            FormSaved::Invalid { resource, lock, errors }
        }
        _ => {
            drafts::keep(conn, owner.user_id, &key, input, KEPT_WHEN_REFUSED)?;
            FormSaved::Refused { resource, ending: ending::ending(conn, &key, owner, Some(epoch))? }
        }
    })
}

/// Why a refused save's input is kept as a draft, as its author reads it when it is offered back.
const KEPT_WHEN_REFUSED: &str = "kept when your save was refused because you no longer held the edit lock";

// ---- Around the editor: what its pages and the JSON API read and do -----------------------

/// What a browser meets after asking for the lock, with the user's kept draft either way.
pub enum Opened {
    /// The lock is ours: the editor.
    Editing(Resource, LockView, Option<Draft<ResourceInput>>),
    /// Someone else holds it (even an expired lock, which taking over is its own button).
    Locked(Resource, Box<LockView>, Option<Draft<ResourceInput>>),
}

/// [`open`], or whose lock stands in the way; and the user's kept draft.
pub fn open_editor(
    pool: &DbPool,
    turn: Turn,
    ttl: Duration,
    resource_id: i64,
    owner: &Owner,
    policy: Policy,
) -> Result<Opened, ResourceError> {
    let key = EditLockKey::resource(resource_id);
    match open(pool, turn, ttl, resource_id, owner, policy) {
        Ok((resource, _, lock)) => {
            let draft = drafts::find(&mut *pool.get()?, owner.user_id, &key)?;
            Ok(Opened::Editing(resource, lock, draft))
        }
        Err(ResourceError::EditLock(EditLockError::Locked(lock))) => {
            let mut conn = pool.get()?;
            let resource = find(&mut conn, resource_id)?;
            let draft = drafts::find(&mut conn, owner.user_id, &key)?;
            Ok(Opened::Locked(resource, lock, draft))
        }
        Err(other) => Err(other),
    }
}

/// What the edit page decides from.
pub struct EditorState {
    pub resource: Resource,
    pub lock: Option<LockView>,
    /// The viewer's kept draft of the resource.
    pub draft: Option<Draft<ResourceInput>>,
}

/// The resource, its edit lock and `user_id`'s kept draft of it.
pub fn editor_state(conn: &mut DbConn, resource_id: i64, user_id: i64) -> Result<EditorState, ResourceError> {
    let (resource, lock) = find_with_lock(conn, resource_id)?;
    let draft = drafts::find(conn, user_id, &EditLockKey::resource(resource_id))?;
    Ok(EditorState { resource, lock, draft })
}

/// The read-only view of a resource.
pub struct ResourceView {
    pub resource: Resource,
    /// Who is editing it.
    pub lock: Option<LockView>,
    /// The days it is closed from today on, and why.
    pub closed: Vec<(NaiveDate, String)>,
}

pub fn view(conn: &mut DbConn, resource_id: i64) -> Result<ResourceView, ResourceError> {
    let (resource, lock) = find_with_lock(conn, resource_id)?;
    let closed = super::closures::upcoming(conn, resource_id, super::model::today())?;
    Ok(ResourceView { resource, lock, closed })
}

/// How `owner`'s hold on the resource's lock, in the acquisition `epoch` their page was opened
/// under, ended (`edit_locks::ending`): what their page says once its heartbeat is refused.
pub fn ending_of(
    conn: &mut DbConn,
    resource_id: i64,
    owner: &Owner,
    epoch: Option<i64>,
) -> Result<Ending, ResourceError> {
    find(conn, resource_id)?;
    Ok(ending::ending(conn, &EditLockKey::resource(resource_id), owner, epoch)?)
}

/// Cancel: "I do not want these changes" — nothing to offer back later, and my lock (if I still
/// hold it) released. A lock someone else holds by now is theirs to keep.
pub fn cancel(conn: &mut DbConn, resource_id: i64, owner: &Owner) -> Result<(), ResourceError> {
    let key = EditLockKey::resource(resource_id);
    drafts::discard(conn, owner.user_id, &key)?;
    match service::release(conn, &key, owner, None, service::BY_ITS_OWNER) {
        Ok(_) | Err(EditLockError::Locked(_)) => Ok(()),
        Err(other) => Err(other.into()),
    }
}

/// The resource's edit lock (404 when it has none, or there is no such resource).
pub fn lock_of(conn: &mut DbConn, resource_id: i64) -> Result<LockView, ResourceError> {
    find(conn, resource_id)?;
    let key = EditLockKey::resource(resource_id);
    service::find(conn, &key)?.ok_or(ResourceError::EditLock(EditLockError::NoSuchLock(key)))
}

/// The JSON save of an existing resource: 404 for an unknown one, else [`save`], lock kept.
pub fn patch(
    conn: &mut DbConn,
    resource_id: i64,
    owner: &Owner,
    epoch: i64,
    changes: &ResourceChanges,
) -> Result<Resource, ResourceError> {
    find(conn, resource_id)?;
    save(conn, resource_id, owner, epoch, changes, ThenLock::Keep)
}

/// Keeps `input` as `user_id`'s draft of resource `resource_id`, saying `why`.
pub fn keep_draft(
    conn: &mut DbConn,
    resource_id: i64,
    user_id: i64,
    input: &ResourceInput,
    why: &str,
) -> Result<(), ResourceError> {
    find(conn, resource_id)?;
    Ok(drafts::keep(conn, user_id, &EditLockKey::resource(resource_id), input, why)?)
}

/// `user_id`'s kept draft of resource `resource_id` (404 when none is kept).
pub fn draft_of(
    conn: &mut DbConn,
    resource_id: i64,
    user_id: i64,
) -> Result<Draft<ResourceInput>, ResourceError> {
    find(conn, resource_id)?;
    drafts::find(conn, user_id, &EditLockKey::resource(resource_id))?
        .ok_or(ResourceError::NoDraft(resource_id))
}

/// Discards `user_id`'s kept draft of resource `resource_id`, if there is one.
pub fn discard_draft(conn: &mut DbConn, resource_id: i64, user_id: i64) -> Result<(), ResourceError> {
    Ok(drafts::discard(conn, user_id, &EditLockKey::resource(resource_id))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(n: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 12, n).expect("a December day")
    }

    fn span(from: u32, to: u32, confirmed: i64) -> Span {
        Span { day: day(from), check_out: day(to), confirmed }
    }

    #[test]
    fn the_busiest_night_counts_every_stay_that_covers_it_from_today_on() {
        // Nights 1–4, 3–5 and 4: night 4 is covered three times, by all of them.
        let spans = [span(1, 5, 1), span(3, 6, 1), span(4, 5, 1)];
        assert_eq!(busiest_night(&spans, day(1)), Some((day(4), 3)));
        // Two nights as busy: the earlier one is named.
        assert_eq!(busiest_night(&[span(1, 2, 2), span(5, 6, 2)], day(1)), Some((day(1), 2)));
        // A stay under way counts from today; past nights are history.
        assert_eq!(busiest_night(&[span(1, 4, 5), span(3, 4, 1)], day(3)), Some((day(3), 6)));
        assert_eq!(busiest_night(&[], day(1)), None);
    }
}
