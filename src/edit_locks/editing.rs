//! Editing a resource under its edit lock: opening the editor, and the save that proves, in its
//! own transaction, that the saver still holds the lock.

use std::time::Duration;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer};

use super::service::{self, Acquired, Policy};
use super::{EditLockError, EditLockKey, EditLockToken, FieldError, LockView, Owner};
use crate::audit::{self, Action};
use crate::bookings::model::Resource;
use crate::db::DbPool;
use crate::schema::resources;

pub const NAME_MAX: usize = 100;
pub const DESCRIPTION_MAX: usize = 2000;
pub const CAPACITY_MAX: i32 = 10_000;

/// Validated changes to a resource; `None` leaves a field as it is (JSON `PATCH`). Built only by
/// [`ResourceChanges::parse`], so the service never sees an empty name or a capacity of 0.
#[derive(Clone, Debug, Default, AsChangeset)]
#[diesel(table_name = resources, check_for_backend(diesel::mysql::Mysql))]
pub struct ResourceChanges {
    name: Option<String>,
    description: Option<String>,
    capacity: Option<i32>,
}

/// Input as it arrives, before validation: the HTML form sends text for every field.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct ResourceInput {
    pub name: Option<String>,
    pub description: Option<String>,
    pub capacity: Option<String>,
}

impl ResourceChanges {
    /// Every problem at once, so the form can mark each field.
    pub fn parse(input: &ResourceInput) -> Result<Self, EditLockError> {
        let mut errors = Vec::new();
        let mut fail = |field, message: String| errors.push(FieldError { field, message });
        let name = input.name.as_deref().map(str::trim).map(str::to_string);
        if let Some(name) = &name {
            let chars = name.chars().count();
            if chars == 0 || chars > NAME_MAX {
                fail("name", format!("give a name of 1 to {NAME_MAX} characters"));
            }
        }
        let description = input.description.as_deref().map(|d| d.trim().replace("\r\n", "\n"));
        if description.as_ref().is_some_and(|d| d.chars().count() > DESCRIPTION_MAX) {
            fail("description", format!("at most {DESCRIPTION_MAX} characters"));
        }
        let capacity = match input.capacity.as_deref().map(str::trim) {
            None => None,
            Some(text) => match text.parse::<i32>() {
                Ok(n) if (1..=CAPACITY_MAX).contains(&n) => Some(n),
                _ => {
                    fail("capacity", format!("a whole number from 1 to {CAPACITY_MAX}, not {:?}", cut(text)));
                    None
                }
            },
        };
        if input.name.is_none() && input.description.is_none() && input.capacity.is_none() {
            fail("body", "nothing to change: send name, description or capacity".into());
        }
        if errors.is_empty() {
            Ok(Self { name, description, capacity })
        } else {
            Err(EditLockError::Invalid(errors))
        }
    }
}

fn cut(text: &str) -> String {
    text.chars().take(20).collect()
}

/// Opens the editor: the resource, and the lock taken (or renewed) for `owner`.
pub fn open(
    pool: &DbPool,
    lock_wait: Duration,
    ttl: Duration,
    resource_id: i64,
    owner: &Owner,
    policy: Policy,
) -> Result<(Resource, Acquired, LockView), EditLockError> {
    // Answer an unknown resource before taking a lock for it.
    find_resource(&mut *pool.get()?, resource_id)?;
    let (acquired, lock) =
        service::acquire(pool, lock_wait, ttl, &EditLockKey::resource(resource_id), owner, policy)?;
    let resource = find_resource(&mut *pool.get()?, resource_id)?;
    Ok((resource, acquired, lock))
}

pub fn find_resource(conn: &mut MysqlConnection, id: i64) -> Result<Resource, EditLockError> {
    Resource::by_id(id)
        .select(Resource::as_select())
        .first(conn)
        .optional()?
        .ok_or(EditLockError::ResourceNotFound(id))
}

/// After a save, keep the lock (an API client may save again) or end it (the HTML form's Save
/// closes the editor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThenLock {
    Keep,
    Release,
}

/// Saves `changes` if — and only if — `owner` holds the resource's unexpired edit lock at the
/// moment of the save. The check and the update are one transaction: the edit-lock row is locked
/// `FOR UPDATE` first ([`service::claim`]), so a takeover or force release either committed
/// before (and the save is refused) or waits until the save has committed.
pub fn save(
    conn: &mut MysqlConnection,
    resource_id: i64,
    owner: &Owner,
    changes: &ResourceChanges,
    then: ThenLock,
) -> Result<Resource, EditLockError> {
    conn.transaction(|conn| {
        let token = service::claim(conn, &EditLockKey::resource(resource_id), owner)?;
        let saved = update(conn, &token, resource_id, changes)?;
        if then == ThenLock::Release {
            service::release_claimed(conn, token)?;
        }
        Ok(saved)
    })
}

#[derive(QueryableByName)]
struct BusiestDay {
    #[diesel(sql_type = Date)]
    day: NaiveDate,
    #[diesel(sql_type = BigInt)]
    confirmed: i64,
}

#[derive(QueryableByName)]
struct Current {
    #[diesel(sql_type = Integer)]
    version: i32,
}

/// The update itself; `token` proves the caller holds the lock in this transaction.
fn update(
    conn: &mut MysqlConnection,
    token: &EditLockToken,
    resource_id: i64,
    changes: &ResourceChanges,
) -> Result<Resource, EditLockError> {
    debug_assert_eq!(token.key(), &EditLockKey::resource(resource_id));
    // The resource row is locked before bookings are counted. A booking reads the capacity with
    // a shared lock under its day's named lock (bookings::service), so this waits for bookings in
    // flight to commit and later bookings wait for us: none can be counted against the old
    // capacity while we lower it.
    let current: Current = diesel::sql_query("SELECT version FROM resources WHERE id = ? FOR UPDATE")
        .bind::<BigInt, _>(resource_id)
        .get_result(conn)
        .optional()?
        .ok_or(EditLockError::ResourceNotFound(resource_id))?;
    if let Some(capacity) = changes.capacity {
        // Past days keep their history; only today and later must still fit. A locking read, so
        // it sees every booking committed before our lock on the resource row, whatever the
        // snapshot of this transaction.
        let busiest: Option<BusiestDay> = diesel::sql_query(
            "SELECT day, COUNT(*) AS confirmed FROM reservations \
             WHERE resource_id = ? AND status = 'confirmed' AND day >= ? \
             GROUP BY day HAVING COUNT(*) > ? ORDER BY confirmed DESC, day LIMIT 1 LOCK IN SHARE MODE",
        )
        .bind::<BigInt, _>(resource_id)
        .bind::<Date, _>(crate::bookings::service::today())
        .bind::<Integer, _>(capacity)
        .get_result(conn)
        .optional()?;
        if let Some(BusiestDay { day, confirmed }) = busiest {
            return Err(EditLockError::CapacityBelowBookings { capacity, day, confirmed });
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
    find_resource(conn, resource_id)
}
