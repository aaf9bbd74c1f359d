//! The life of an edit lock, one function per step, each read top to bottom: [`acquire`] (or
//! take over), [`heartbeat`], [`recheck_for_save`] (in the save's transaction) and [`release`];
//! the admin's transitions, [`super::admin::force_release`] and
//! [`super::admin::release_expired`], are beside it and use the same steps. Every change writes
//! its audit event in the same transaction (the audit layer); drafts, what an editor typed and
//! has not saved, are kept around these by the editor (`resources::editing`, [`super::drafts`]).
//!
//! Every transition is checked against the same rules (the row locked first with
//! [`row_for_update`], the epoch, the owner, the database's clock), which live here once.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text, Timestamp, Untyped};

use super::model::{LOCK_VIEW, LockView};
use super::{EditLockError, EditLockKey, EditLockToken, Owner};
use crate::audit::{self, Action};
use crate::db::{DbConn, DbPool, Sql, cached_sql};
use crate::locking::{NamedLockGuard, Turn};

/// What an acquirer may do about a lock someone else holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Opening the edit page: take a free lock or renew my own, nothing else. Taking over
    /// someone's expired lock is a deliberate act (a button), not a side effect of a page view.
    FreeOrMine,
    /// The "take over" button and the JSON acquire: also take an *expired* lock of someone else.
    TakeOverExpired,
    /// The "continue here" button: also take the lock of *the same user in another session*
    /// (another browser, or one left open before logging in again), live or expired, at once —
    /// it is their own work; never a batch's, never another person's.
    ContinueHere,
    /// A batch job takes a free or expired lock, and waits or skips when someone holds it (the
    /// `wait` and `skip` policies of a batch). Marked `held_by_batch`, like the next.
    BatchWhenFree,
    /// A batch job takes the lock whoever holds it (the `steal` policy of a batch); the lock is
    /// then marked `held_by_batch` and no admin may force it open.
    SeizeForBatch,
}

#[derive(Clone, Debug)]
pub enum Acquired {
    /// There was no lock; now there is, and it is ours.
    New,
    /// It was already ours (this user, this session); its expiry was pushed back.
    Renewed { was_expired: bool },
    /// It was someone else's (expired, or seized by a batch); here is who had it.
    TookOver(Box<LockView>),
}

/// Takes the edit lock `key` for `owner`, for `ttl` from now by the database clock. **The
/// lesson's acquire** (`docs/pessimistic-edit-lock.md`), read top to bottom:
///
/// 1. Take the key's named lock, `haita:{tag}:edit:{key}`: before the first acquire there is no
///    row to `SELECT … FOR UPDATE`, so concurrent first acquirers are serialised by it instead
///    (the guard's acquire asks without waiting first: `locking::ask_then_wait`).
/// 2. BEGIN on the connection that holds it, at READ COMMITTED.
/// 3. Lock the edit-lock row, if there is one ([`row_for_update`]).
/// 4. Decide, from that row alone, who gets the lock ([`decide`]).
/// 5. Write: insert a row, renew our own, or take someone else's over. A new holder gets the
///    next **fencing epoch** ([`next_epoch`]): a save made under an earlier acquisition is then
///    refused ([`recheck_for_save`]), even by the same person in another tab.
/// 6. Audit (a layer): the acquisition's event, in the same transaction ([`record_acquired`]).
/// 7. COMMIT, then
/// 8. release the named lock, so the next acquirer sees our row.
pub fn acquire(
    pool: &DbPool,
    turn: Turn,
    ttl: Duration,
    key: &EditLockKey,
    owner: &Owner,
    policy: Policy,
) -> Result<(Acquired, LockView), EditLockError> {
    debug_assert_eq!(turn.name(), &pool.names().edit_lock(key.as_str()));
    let ttl_micros = micros(ttl);
    let batch = matches!(policy, Policy::BatchWhenFree | Policy::SeizeForBatch);
    // 1. Take the key's named lock.
    let mut named_lock = NamedLockGuard::acquire_pooled(pool, turn)?;
    // 2. BEGIN. The named lock serialises this key; REPEATABLE READ's gap lock on a missing row
    //    would only make first acquires of neighbouring keys deadlock
    //    (`db::transaction_read_committed`).
    let acquired = crate::db::transaction_read_committed(named_lock.conn(), |conn| {
        // 3. Lock the row.
        let current = row_for_update(conn, key)?;
        // 4. Decide, and 5. write.
        let acquired = match decide(current.as_ref(), owner, policy) {
            Decision::Insert => {
                next_epoch(conn, key)?;
                insert(conn, key, owner, ttl_micros, batch)?;
                Acquired::New
            }
            Decision::Renew { was_expired } => {
                extend(conn, key, owner, ttl_micros, false, None)?;
                Acquired::Renewed { was_expired }
            }
            Decision::TakeOver => {
                let previous = lock_as_shown(conn, key)?;
                next_epoch(conn, key)?;
                hand_over(conn, key, owner, ttl_micros, batch)?;
                Acquired::TookOver(Box::new(previous))
            }
            Decision::Refuse => return Err(EditLockError::Locked(Box::new(lock_as_shown(conn, key)?))),
        };
        let lock = lock_as_shown(conn, key)?;
        // 6. Audit.
        record_acquired(conn, owner, key, &acquired, &lock, batch)?;
        Ok((acquired, lock))
    }); // 7. COMMIT (or ROLLBACK)
    // 8. Release the named lock, only now.
    drop(named_lock);
    acquired
}

/// The lock `key` as shown to people (its holder's name, its times), read in the caller's
/// transaction after its row was locked: there is one.
pub(super) fn lock_as_shown(conn: &mut DbConn, key: &EditLockKey) -> Result<LockView, EditLockError> {
    find(conn, key)?.ok_or_else(|| EditLockError::NoSuchLock(key.clone()))
}

/// What an acquire does, decided from the locked row alone (see [`decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No row: insert one for the acquirer.
    Insert,
    /// The acquirer's own row (same user, same session): push its expiry back.
    Renew { was_expired: bool },
    /// Someone else's row that this policy may take: an expired one, any one for a batch, the
    /// acquirer's own other session's for "continue here".
    TakeOver,
    /// Someone else's row this policy must leave alone: 423 with who holds it.
    Refuse,
}

/// The rule of who gets an edit lock, with no database in sight: `row` is the current holder as
/// read `FOR UPDATE` (`None` when there is no row), judged by the database clock.
pub fn decide(row: Option<&Holder>, owner: &Owner, policy: Policy) -> Decision {
    match row {
        None => Decision::Insert,
        Some(row) if row.is_owned_by(owner) => Decision::Renew { was_expired: row.expired },
        Some(_) if policy == Policy::SeizeForBatch => Decision::TakeOver,
        Some(row)
            if policy == Policy::ContinueHere && row.owner_user_id == owner.user_id && !row.held_by_batch =>
        {
            Decision::TakeOver
        }
        Some(row) if row.expired && matches!(policy, Policy::TakeOverExpired | Policy::BatchWhenFree) => {
            Decision::TakeOver
        }
        Some(_) => Decision::Refuse,
    }
}

fn insert(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    ttl_micros: i64,
    batch: bool,
) -> QueryResult<usize> {
    cached_sql::<()>(
        "INSERT INTO edit_locks \
           (lock_key, owner_user_id, owner_session, epoch, acquired_at, heartbeat_at, expires_at, held_by_batch) \
         VALUES (?, ?, ?, (SELECT last_epoch FROM edit_lock_epochs WHERE lock_key = ?), \
           {now}, {now}, {now} + {? microseconds}, ?)",
    )
    .bind::<Text, _>(key.as_str())
    .bind::<BigInt, _>(owner.user_id)
    .bind::<Text, _>(&owner.session)
    .bind::<Text, _>(key.as_str())
    .bind::<BigInt, _>(ttl_micros)
    .bind::<Bool, _>(batch)
    .execute(conn)
}

/// Counts one more acquisition of `key`: its epoch, which [`insert`] and [`hand_over`] give the
/// lock. Called under the key's named lock (and the upsert's row lock holds until commit), so no
/// two acquisitions get the same number; the counter outlives the lock rows, which are deleted.
fn next_epoch(conn: &mut DbConn, key: &EditLockKey) -> QueryResult<usize> {
    cached_sql::<()>(Sql::per_engine(
        "INSERT INTO edit_lock_epochs (lock_key, last_epoch) VALUES (?, 1) \
         ON DUPLICATE KEY UPDATE last_epoch = last_epoch + 1",
        "INSERT INTO edit_lock_epochs (lock_key, last_epoch) VALUES (?, 1) \
         ON CONFLICT (lock_key) DO UPDATE SET last_epoch = edit_lock_epochs.last_epoch + 1",
    ))
    .bind::<Text, _>(key.as_str())
    .execute(conn)
}

/// Gives the existing row to `owner`, as if newly acquired.
fn hand_over(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    ttl_micros: i64,
    batch: bool,
) -> QueryResult<usize> {
    cached_sql::<()>(
        "UPDATE edit_locks SET owner_user_id = ?, owner_session = ?, \
           epoch = (SELECT last_epoch FROM edit_lock_epochs WHERE lock_key = edit_locks.lock_key), \
           acquired_at = {now}, heartbeat_at = {now}, expires_at = {now} + {? microseconds}, \
           held_by_batch = ? \
         WHERE lock_key = ?",
    )
    .bind::<BigInt, _>(owner.user_id)
    .bind::<Text, _>(&owner.session)
    .bind::<BigInt, _>(ttl_micros)
    .bind::<Bool, _>(batch)
    .bind::<Text, _>(key.as_str())
    .execute(conn)
}

/// The audit layer of [`acquire`]: the acquisition's event, in its transaction, worded for the
/// admin reading the log. A takeover of an expired lock first records that it expired, with its
/// last heartbeat: nobody saw that moment, the next acquirer is the first to notice.
fn record_acquired(
    conn: &mut DbConn,
    owner: &Owner,
    key: &EditLockKey,
    acquired: &Acquired,
    lock: &LockView,
    batch: bool,
) -> Result<(), EditLockError> {
    if let Acquired::TookOver(previous) = acquired
        && previous.expired
    {
        let detail = format!(
            "lock of {} expired at {} (last heartbeat {}); seen by the next acquirer",
            previous.owner_username,
            at(previous.expires_at),
            at(previous.heartbeat_at)
        );
        audit::record(conn, Some(owner.user_id), Action::EditLockExpired, key.as_str(), &detail)?;
    }
    let (action, detail) = audit_entry(acquired, lock, batch);
    audit::record(conn, Some(owner.user_id), action, key.as_str(), &detail)?;
    Ok(())
}

/// The event of an acquire and its detail.
fn audit_entry(acquired: &Acquired, lock: &LockView, batch: bool) -> (Action, String) {
    match acquired {
        Acquired::New => (
            Action::EditLockAcquired,
            format!("{}until {}", if batch { "by a batch job, " } else { "" }, at(lock.expires_at)),
        ),
        Acquired::Renewed { was_expired } => (
            Action::EditLockAcquired,
            format!(
                "already held by this session{}; now until {}",
                if *was_expired { " (expired, nobody had taken it over)" } else { "" },
                at(lock.expires_at)
            ),
        ),
        Acquired::TookOver(previous) if batch => (
            Action::EditLockBatchSeized,
            format!(
                "taken by a batch job from {} (session {})",
                previous.owner_username,
                previous.session_hint()
            ),
        ),
        // "Continue here": the same person, from their other session, live or not.
        Acquired::TookOver(previous) if previous.owner_user_id == lock.owner_user_id => (
            Action::EditLockTakenOver,
            format!(
                "continued here from their other session {} (which held it until {})",
                previous.session_hint(),
                at(previous.expires_at)
            ),
        ),
        Acquired::TookOver(previous) => (
            Action::EditLockTakenOver,
            format!(
                "from {} (session {}), expired at {}",
                previous.owner_username,
                previous.session_hint(),
                at(previous.expires_at)
            ),
        ),
    }
}

/// Pushes back the expiry of `owner`'s lock: the page's heartbeat. Only an unexpired lock is
/// extended: once expired it may already have been seen as free, so the owner must acquire it
/// again (and may find someone else did). With `epoch`, only the acquisition the caller's page
/// was opened under: a later one of the same owner is refused, and left as it was.
pub fn heartbeat(
    conn: &mut DbConn,
    ttl: Duration,
    key: &EditLockKey,
    owner: &Owner,
    epoch: Option<i64>,
) -> Result<LockView, EditLockError> {
    // 1. Push back the expiry, in one statement that is also the check: only this owner's
    //    unexpired lock (of this epoch) changes.
    if extend(conn, key, owner, micros(ttl), true, epoch)? {
        return find(conn, key)?.ok_or_else(|| EditLockError::NotHeld { key: key.clone(), last: None });
    }
    // 2. Nothing changed: say why.
    match (find(conn, key)?, epoch) {
        (Some(mine), Some(opened)) if mine.is_owned_by(owner) && !mine.expired && mine.epoch != opened => {
            Err(EditLockError::Superseded { key: key.clone(), opened, current: mine.epoch })
        }
        // Someone else holds it now: who, and what ended this page's hold (an admin's reason, a
        // batch), which the acquisition that followed would hide.
        (Some(other), _) if !other.is_owned_by(owner) => {
            Err(EditLockError::TakenOver { holder: Box::new(other), how: how_it_ended(conn, key, owner)? })
        }
        _ => Err(not_mine(conn, key, owner)?),
    }
}

/// The events that end someone's hold on a lock.
pub(super) const ENDINGS: [Action; 5] = [
    Action::EditLockReleased,
    Action::EditLockForceReleased,
    Action::EditLockBatchSeized,
    Action::EditLockTakenOver,
    Action::EditLockExpired,
];

/// What ended `owner`'s hold on `key`, in a sentence: the latest ending event since their latest
/// acquisition of it (an older one would be about somebody else's hold). `None` when nothing
/// was recorded since: the lock simply expired.
fn how_it_ended(conn: &mut DbConn, key: &EditLockKey, owner: &Owner) -> QueryResult<Option<String>> {
    let acquisitions = [Action::EditLockAcquired, Action::EditLockTakenOver];
    let Some(taken) = audit::latest_of(conn, key.as_str(), Some(&acquisitions), Some(owner.user_id), None)?
    else {
        return Ok(None);
    };
    Ok(audit::latest_of(conn, key.as_str(), Some(&ENDINGS), None, Some(taken.id))?
        .map(|event| event.sentence()))
}

/// The audit detail of a release by the lock's owner through the page or the API.
pub const BY_ITS_OWNER: &str = "by its owner";

/// Releases `owner`'s own lock (Cancel, leaving the page, the API's DELETE, a batch job done with
/// a row), with `detail` in the audit log: a batch says there what it did, which is what the
/// editor it took the lock from reads when their next save is refused. Answers whether there was
/// one; someone else's lock is never touched.
///
/// `if_heartbeat` makes the release conditional on the last heartbeat the caller saw. A page
/// that is reloaded sends its release-on-leave *and* the new page's acquire, in either order; if
/// the acquire wins, it renews the lock (a new `heartbeat_at`) and the late release must not
/// end the lock the new page now relies on.
pub fn release(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    if_heartbeat: Option<NaiveDateTime>,
    detail: &str,
) -> Result<bool, EditLockError> {
    crate::db::transaction(conn, |conn| {
        // 1. Delete the row, in one statement that is also the check: only this owner's (at
        //    this heartbeat).
        let deleted = cached_sql::<()>(
            "DELETE FROM edit_locks WHERE lock_key = ? AND owner_user_id = ? AND owner_session = ? \
               AND (? IS NULL OR heartbeat_at = ?)",
        )
        .bind::<Text, _>(key.as_str())
        .bind::<BigInt, _>(owner.user_id)
        .bind::<Text, _>(&owner.session)
        .bind::<Nullable<Timestamp>, _>(if_heartbeat)
        .bind::<Nullable<Timestamp>, _>(if_heartbeat)
        .execute(conn)?;
        if deleted == 1 {
            // 2. Audit, in the same transaction.
            audit::record(conn, Some(owner.user_id), Action::EditLockReleased, key.as_str(), detail)?;
            return Ok(true);
        }
        // Nothing deleted: someone else's lock (423 with who), or none.
        match find(conn, key)? {
            Some(other) if !other.is_owned_by(owner) => Err(EditLockError::Locked(Box::new(other))),
            _ => Ok(false),
        }
    })
}

/// Logging out ends the edit locks of the session that logs out (`session`), or of every session
/// of `user_id` (`None`: "log out everywhere"), **in the logout's own transaction**: a person who
/// logs out in the editor and logs in again finds the record free, not locked by their former
/// self for the lock's lifetime. Batch-held locks are left alone (the batch relies on them).
/// Answers the keys released.
///
/// 1. Lock the rows, in key order like every multi-row lock here (`release_expired`), so that
///    a save in flight finishes first and two logouts cannot deadlock;
/// 2. delete each and audit it, with the session, in the caller's transaction.
pub fn release_on_logout(conn: &mut DbConn, user_id: i64, session: Option<&str>) -> QueryResult<Vec<String>> {
    // 1. Lock the rows.
    let held: Vec<SessionLock> = cached_sql::<Untyped>(
        "SELECT lock_key, owner_session FROM edit_locks \
         WHERE owner_user_id = ? AND (? IS NULL OR owner_session = ?) AND NOT held_by_batch \
         ORDER BY lock_key FOR UPDATE",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<Nullable<Text>, _>(session)
    .bind::<Nullable<Text>, _>(session)
    .load(conn)?;
    // 2. Delete and audit each.
    for lock in &held {
        cached_sql::<()>("DELETE FROM edit_locks WHERE lock_key = ?")
            .bind::<Text, _>(&lock.lock_key)
            .execute(conn)?;
        let hint = lock.owner_session.get(..8).unwrap_or(&lock.owner_session);
        audit::record(
            conn,
            Some(user_id),
            Action::EditLockReleased,
            &lock.lock_key,
            &format!("{ON_LOGOUT} (session {hint})"),
        )?;
    }
    Ok(held.into_iter().map(|lock| lock.lock_key).collect())
}

/// The audit detail of a release by logging out (see [`release_on_logout`]).
pub const ON_LOGOUT: &str = "on logout";

#[derive(QueryableByName)]
struct SessionLock {
    #[diesel(sql_type = Text)]
    lock_key: String,
    #[diesel(sql_type = Text)]
    owner_session: String,
}

/// The save's re-check, inside the save's own transaction, before its update:
///
/// 1. lock the edit-lock row `FOR UPDATE` — a takeover or force release then either committed
///    before (and is seen here) or waits until the save has committed;
/// 2. if `owner` holds it unexpired *in the acquisition `epoch`* (the fencing epoch its editor
///    was opened under), return the token that proves it (see [`EditLockToken`]). The same
///    owner in a later acquisition is refused ([`EditLockError::Superseded`]): whatever that
///    editor showed may have changed since. Anyone else: who holds it, or that nobody does.
pub fn recheck_for_save(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    epoch: i64,
) -> Result<EditLockToken, EditLockError> {
    // 1. Lock the row, 2. check owner, expiry and epoch.
    match row_for_update(conn, key)? {
        Some(row) if row.is_owned_by(owner) && !row.expired && row.epoch == epoch => {
            Ok(EditLockToken { key: key.clone(), owner: owner.clone() })
        }
        Some(row) if row.is_owned_by(owner) && !row.expired => {
            Err(EditLockError::Superseded { key: key.clone(), opened: epoch, current: row.epoch })
        }
        _ => Err(not_mine(conn, key, owner)?),
    }
}

/// Inside the save's transaction: ends the lock the token proves we hold (a save that also
/// closes the editor), with its audit event. Consumes the token: after this there is nothing
/// left to prove.
pub fn release_after_save(conn: &mut DbConn, token: EditLockToken) -> Result<(), EditLockError> {
    cached_sql::<()>("DELETE FROM edit_locks WHERE lock_key = ?")
        .bind::<Text, _>(token.key.as_str())
        .execute(conn)?;
    audit::record(
        conn,
        Some(token.owner.user_id),
        Action::EditLockReleased,
        token.key.as_str(),
        "saved and closed",
    )?;
    Ok(())
}

/// What precedes the admin's reason in a force release's audit detail: the displaced editor's
/// page reads the reason back from there (`super::ending`). The words before it are ours (names,
/// a session hint, times), so its first occurrence is where the reason starts.
pub(super) const REASON: &str = "; reason: ";

/// [`LOCK_VIEW`] with a tail, in each engine's words.
fn lock_view(tail: &str) -> (String, String) {
    (format!("{} {tail}", LOCK_VIEW.0), format!("{} {tail}", LOCK_VIEW.1))
}
static FIND: LazyLock<(String, String)> = LazyLock::new(|| lock_view("WHERE l.lock_key = ?"));
static LIST: LazyLock<(String, String)> = LazyLock::new(|| lock_view("ORDER BY l.acquired_at, l.lock_key"));

/// Who holds `key`, if anyone (expired locks included; see [`LockView::expired`]).
pub fn find(conn: &mut DbConn, key: &EditLockKey) -> QueryResult<Option<LockView>> {
    cached_sql::<Untyped>(Sql::per_engine(&FIND.0, &FIND.1))
        .bind::<Text, _>(key.as_str())
        .get_result(conn)
        .optional()
}

/// Every edit lock, oldest first (the admin screen).
pub fn list(conn: &mut DbConn) -> QueryResult<Vec<LockView>> {
    cached_sql::<Untyped>(Sql::per_engine(&LIST.0, &LIST.1)).load(conn)
}

/// The edit-lock row as a locking read: only `edit_locks` is read, so only its row is locked
/// (joining `users` here would lock the owner's user row too, and foreign-key checks of other
/// inserts take shared locks on user rows — a needless way to deadlock).
#[derive(Clone, Debug, QueryableByName)]
pub struct Holder {
    #[diesel(sql_type = BigInt)]
    pub owner_user_id: i64,
    #[diesel(sql_type = Text)]
    pub owner_session: String,
    #[diesel(sql_type = BigInt)]
    pub epoch: i64,
    #[diesel(sql_type = Bool)]
    pub held_by_batch: bool,
    /// `expires_at <= {now}`, by the database clock.
    #[diesel(sql_type = Bool)]
    pub expired: bool,
}

impl Holder {
    fn is_owned_by(&self, owner: &Owner) -> bool {
        self.owner_user_id == owner.user_id && self.owner_session == owner.session
    }
}

pub(super) fn row_for_update(conn: &mut DbConn, key: &EditLockKey) -> QueryResult<Option<Holder>> {
    cached_sql::<Untyped>(
        "SELECT owner_user_id, owner_session, epoch, held_by_batch, expires_at <= {now} AS expired \
         FROM edit_locks WHERE lock_key = ? FOR UPDATE",
    )
    .bind::<Text, _>(key.as_str())
    .get_result(conn)
    .optional()
}

/// Moves `owner`'s expiry to `ttl` from now; `only_unexpired` refuses to revive an expired lock,
/// `epoch` (when given) any acquisition but that one.
fn extend(
    conn: &mut DbConn,
    key: &EditLockKey,
    owner: &Owner,
    ttl_micros: i64,
    only_unexpired: bool,
    epoch: Option<i64>,
) -> QueryResult<bool> {
    let changed = cached_sql::<()>(
        "UPDATE edit_locks SET heartbeat_at = {now}, expires_at = {now} + {? microseconds} \
         WHERE lock_key = ? AND owner_user_id = ? AND owner_session = ? \
           AND (? = FALSE OR expires_at > {now}) AND (? IS NULL OR epoch = ?)",
    )
    .bind::<BigInt, _>(ttl_micros)
    .bind::<Text, _>(key.as_str())
    .bind::<BigInt, _>(owner.user_id)
    .bind::<Text, _>(&owner.session)
    .bind::<Bool, _>(only_unexpired)
    .bind::<Nullable<BigInt>, _>(epoch)
    .bind::<Nullable<BigInt>, _>(epoch)
    .execute(conn)?;
    Ok(changed == 1)
}

/// Why `owner` does not hold `key`: someone else does (423 with who), or nobody does.
fn not_mine(conn: &mut DbConn, key: &EditLockKey, owner: &Owner) -> Result<EditLockError, EditLockError> {
    Ok(match find(conn, key)? {
        Some(other) if !other.is_owned_by(owner) => EditLockError::Locked(Box::new(other)),
        _ => EditLockError::NotHeld { key: key.clone(), last: how_it_ended(conn, key, owner)? },
    })
}

/// Times in audit details, to the second: the event's own `at` column keeps full precision.
pub(super) fn at(time: NaiveDateTime) -> String {
    crate::wire::utc::text(&time)
}

fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(user_id: i64, session: &str) -> Owner {
        Owner { user_id, session: session.into() }
    }

    fn held_by(user_id: i64, session: &str, expired: bool, batch: bool) -> Holder {
        Holder {
            owner_user_id: user_id,
            owner_session: session.into(),
            epoch: 1,
            held_by_batch: batch,
            expired,
        }
    }

    const ALL: [Policy; 5] = [
        Policy::FreeOrMine,
        Policy::TakeOverExpired,
        Policy::ContinueHere,
        Policy::BatchWhenFree,
        Policy::SeizeForBatch,
    ];

    #[test]
    fn a_free_lock_is_taken_under_every_policy() {
        for policy in ALL {
            assert_eq!(decide(None, &owner(1, "a"), policy), Decision::Insert, "{policy:?}");
        }
    }

    #[test]
    fn my_own_lock_is_renewed_even_when_it_expired() {
        for policy in ALL {
            for expired in [false, true] {
                let row = held_by(1, "a", expired, false);
                assert_eq!(
                    decide(Some(&row), &owner(1, "a"), policy),
                    Decision::Renew { was_expired: expired },
                    "{policy:?}"
                );
            }
        }
    }

    #[test]
    fn the_same_user_in_another_session_is_someone_else() {
        let row = held_by(1, "laptop", false, false);
        assert_eq!(decide(Some(&row), &owner(1, "phone"), Policy::TakeOverExpired), Decision::Refuse);
    }

    #[test]
    fn continue_here_takes_only_the_same_users_other_session_at_once() {
        let here = owner(1, "phone");
        for expired in [false, true] {
            let mine_elsewhere = held_by(1, "laptop", expired, false);
            assert_eq!(decide(Some(&mine_elsewhere), &here, Policy::ContinueHere), Decision::TakeOver);
            let someone_else = held_by(2, "b", expired, false);
            assert_eq!(decide(Some(&someone_else), &here, Policy::ContinueHere), Decision::Refuse);
            let a_batch_of_mine = held_by(1, "batch:closure:run:1", expired, true);
            assert_eq!(decide(Some(&a_batch_of_mine), &here, Policy::ContinueHere), Decision::Refuse);
        }
        assert_eq!(decide(None, &here, Policy::ContinueHere), Decision::Insert);
    }

    #[test]
    fn a_live_lock_of_someone_else_is_refused_to_people() {
        let row = held_by(2, "b", false, false);
        assert_eq!(decide(Some(&row), &owner(1, "a"), Policy::FreeOrMine), Decision::Refuse);
        assert_eq!(decide(Some(&row), &owner(1, "a"), Policy::TakeOverExpired), Decision::Refuse);
        assert_eq!(decide(Some(&row), &owner(9, "batch"), Policy::BatchWhenFree), Decision::Refuse);
    }

    #[test]
    fn an_expired_lock_is_taken_over_only_deliberately() {
        let row = held_by(2, "b", true, false);
        assert_eq!(
            decide(Some(&row), &owner(1, "a"), Policy::FreeOrMine),
            Decision::Refuse,
            "opening a page"
        );
        assert_eq!(decide(Some(&row), &owner(1, "a"), Policy::TakeOverExpired), Decision::TakeOver);
        assert_eq!(decide(Some(&row), &owner(9, "batch"), Policy::BatchWhenFree), Decision::TakeOver);
    }

    #[test]
    fn a_batch_seizes_any_lock_and_people_cannot_take_a_live_batch_lock() {
        for expired in [false, true] {
            let row = held_by(2, "b", expired, false);
            assert_eq!(decide(Some(&row), &owner(9, "batch"), Policy::SeizeForBatch), Decision::TakeOver);
        }
        let batch_row = held_by(9, "batch", false, true);
        assert_eq!(decide(Some(&batch_row), &owner(1, "a"), Policy::TakeOverExpired), Decision::Refuse);
    }
}
