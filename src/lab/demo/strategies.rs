//! Fourteen ways to book one place of a demo resource on one day, one function each, side by side.
//!
//! Every function makes one booking attempt: it answers [`Answer::Confirmed`] after inserting a
//! row into `demo_bookings`, [`Answer::Full`] when the day has no place left, or an error. All of
//! them pause for [`Attempt::pause`] between "the day is free" and the insert, so the race window
//! is wide enough to see on a small machine; a correct strategy must stay correct however long
//! that pause is.
//!
//! One books stays rather than days, and checks nothing before it writes:
//! [`Strategy::ExclusionConstraint`] inserts a stay of [`Attempt::nights`] into `demo_stays`, whose
//! exclusion constraint refuses one that overlaps another (PostgreSQL only; it pauses between its
//! insert and its commit instead).
//!
//! Three are wrong on purpose and run only inside a race (`race.rs`), on a pool of their own:
//! [`Strategy::NoLock`], [`Strategy::NamedLockPoolPitfall`] and [`Strategy::RedisLockExpiring`].
//! Three more run only there because they are about many clients at once:
//! [`Strategy::NamedLockUnqueued`] (what the per-key queue prevents: waiters filling the pool),
//! [`Strategy::NamedLockCoalesced`] (clients of one day sharing a batch) and
//! [`Strategy::RedisLockFenced`] (a holder paused on purpose, and refused).
//!
//! Five take a lock kept outside the database's lock functions (`crate::lab::locks`): a Redis
//! lease three ways, a file lock and a lock table.

use std::fmt;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use serde::{Deserialize, Serialize};

use super::DemoError;
use super::lanes::{Decided, Lanes};
use super::model::{DemoResource, NewDemoBooking, NewDemoStay, bookings_on};
use crate::db::conn::on_engine;
use crate::db::errors::is_lock_timeout;
use crate::db::{DbConn, DbPool, Engine, cached_sql};
use crate::i18n::Lang;
use crate::infra::Infra;
use crate::lab::locks::OutsideLocks;
use crate::lab::locks::file::FileLock;
use crate::lab::locks::table::LockRow;
use crate::lab::schema::{demo_bookings, demo_resources, demo_stays};
use crate::locking::retry::{RetryPolicy, retry_on_lock_conflict};
use crate::locking::{LockName, NamedLockGuard, Namespace, Turn};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    NoLock,
    NamedLock,
    NamedLockCoalesced,
    NamedLockUnqueued,
    NamedLockPoolPitfall,
    ParentRowLock,
    UniqueSlot,
    Serializable,
    ExclusionConstraint,
    RedisLock,
    RedisLockExpiring,
    RedisLockFenced,
    FileLock,
    LockTable,
}

impl Strategy {
    pub const ALL: [Strategy; 14] = [
        Strategy::NoLock,
        Strategy::NamedLock,
        Strategy::NamedLockCoalesced,
        Strategy::NamedLockUnqueued,
        Strategy::NamedLockPoolPitfall,
        Strategy::ParentRowLock,
        Strategy::UniqueSlot,
        Strategy::Serializable,
        Strategy::ExclusionConstraint,
        Strategy::RedisLock,
        Strategy::RedisLockExpiring,
        Strategy::RedisLockFenced,
        Strategy::FileLock,
        Strategy::LockTable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::NoLock => "no-lock",
            Self::NamedLock => "named-lock",
            Self::NamedLockCoalesced => "named-lock-coalesced",
            Self::NamedLockUnqueued => "named-lock-unqueued",
            Self::NamedLockPoolPitfall => "named-lock-pool-pitfall",
            Self::ParentRowLock => "parent-row-lock",
            Self::UniqueSlot => "unique-slot",
            Self::Serializable => "serializable",
            Self::ExclusionConstraint => "exclusion-constraint",
            Self::RedisLock => "redis-lock",
            Self::RedisLockExpiring => "redis-lock-expiring",
            Self::RedisLockFenced => "redis-lock-fenced",
            Self::FileLock => "file-lock",
            Self::LockTable => "lock-table",
        }
    }

    pub fn parse(text: &str) -> Result<Self, DemoError> {
        Self::ALL.into_iter().find(|s| s.name() == text.trim()).ok_or_else(|| DemoError::Invalid {
            field: "strategy",
            message: format!(
                "unknown strategy {:?}; use all or one of: {}",
                text.chars().take(40).collect::<String>(),
                Self::ALL.map(Self::name).join(", ")
            ),
        })
    }

    /// Whether the strategy never books a day beyond its capacity.
    pub fn is_correct(self) -> bool {
        !matches!(self, Self::NoLock | Self::NamedLockPoolPitfall | Self::RedisLockExpiring)
    }

    /// Why the strategy runs only inside a race (its clients on a pool and in lanes of their
    /// own), never as one booking on the app's pool; `None` when it may.
    pub fn race_only(self) -> Option<&'static str> {
        match self {
            Self::NoLock | Self::NamedLockPoolPitfall => {
                Some("it is deliberately unsafe; on the app's pool the pitfall would leak locks into it")
            }
            Self::NamedLockUnqueued => Some("its waiters would take the app's pooled connections"),
            Self::NamedLockCoalesced => Some("it batches the clients of a race that book the same day"),
            Self::RedisLockExpiring => Some("it is deliberately unsafe: a holder pauses past its lease"),
            Self::RedisLockFenced => Some("a holder pauses past its lease on purpose, to be refused"),
            Self::ExclusionConstraint => {
                Some("its clients book stays of several nights, and this endpoint books one day")
            }
            Self::NamedLock
            | Self::ParentRowLock
            | Self::UniqueSlot
            | Self::Serializable
            | Self::RedisLock
            | Self::FileLock
            | Self::LockTable => None,
        }
    }

    /// Whether its clients book stays (a check-in day and [`Attempt::nights`]) into `demo_stays`,
    /// rather than one day into `demo_bookings`.
    pub fn books_stays(self) -> bool {
        self == Self::ExclusionConstraint
    }

    /// Why the servers of `engine` cannot run it (the text's key in `src/i18n/texts.yml`), or
    /// `None` when they can. Only the dialect knows what a server has.
    pub fn unavailable_on(self, engine: Engine) -> Option<&'static str> {
        match self {
            Self::ExclusionConstraint if !engine.dialect().has_exclusion_constraints() => {
                Some("strategy.exclusion.unavailable")
            }
            _ => None,
        }
    }

    /// The strategies the servers of `engine` can run, in the order of [`Strategy::ALL`]: what
    /// "all" means there.
    pub fn available_on(engine: Engine) -> Vec<Strategy> {
        Self::ALL.into_iter().filter(|s| s.unavailable_on(engine).is_none()).collect()
    }

    /// What it does and what it costs, in two lines, for the demo page, in `lang`, naming the
    /// named-lock functions of `engine`.
    pub fn explanation(self, lang: impl std::borrow::Borrow<Lang>, engine: Engine) -> [String; 2] {
        let (does, costs) = match self {
            Self::NoLock => ("strategy.no_lock.does", "strategy.no_lock.costs"),
            Self::NamedLock => ("strategy.named_lock.does", "strategy.named_lock.costs"),
            Self::NamedLockCoalesced => ("strategy.coalesced.does", "strategy.coalesced.costs"),
            Self::NamedLockUnqueued => ("strategy.unqueued.does", "strategy.unqueued.costs"),
            Self::NamedLockPoolPitfall => ("strategy.pool_pitfall.does", "strategy.pool_pitfall.costs"),
            Self::ParentRowLock => ("strategy.parent_row_lock.does", "strategy.parent_row_lock.costs"),
            Self::UniqueSlot => ("strategy.unique_slot.does", "strategy.unique_slot.costs"),
            Self::Serializable => ("strategy.serializable.does", "strategy.serializable.costs"),
            Self::ExclusionConstraint => ("strategy.exclusion.does", "strategy.exclusion.costs"),
            Self::RedisLock => ("strategy.redis_lock.does", "strategy.redis_lock.costs"),
            Self::RedisLockExpiring => ("strategy.redis_expiring.does", "strategy.redis_expiring.costs"),
            Self::RedisLockFenced => ("strategy.redis_fenced.does", "strategy.redis_fenced.costs"),
            Self::FileLock => ("strategy.file_lock.does", "strategy.file_lock.costs"),
            Self::LockTable => ("strategy.lock_table.does", "strategy.lock_table.costs"),
        };
        let lang = *lang.borrow();
        let words = lock_words(engine);
        [lang.t_with(does, &words), lang.t_with(costs, &words)]
    }

    /// The function in this file that implements the strategy (shown by `/demo/code/{name}`).
    pub fn function(self) -> &'static str {
        match self {
            Self::NoLock => "no_lock",
            Self::NamedLock => "named_lock",
            Self::NamedLockCoalesced => "named_lock_coalesced",
            Self::NamedLockUnqueued => "named_lock_unqueued",
            Self::NamedLockPoolPitfall => "named_lock_pool_pitfall",
            Self::ParentRowLock => "parent_row_lock",
            Self::UniqueSlot => "unique_slot",
            Self::Serializable => "serializable",
            Self::ExclusionConstraint => "exclusion_constraint",
            Self::RedisLock => "redis_lock",
            Self::RedisLockExpiring => "redis_lock_expiring",
            Self::RedisLockFenced => "redis_lock_fenced",
            Self::FileLock => "file_lock",
            Self::LockTable => "lock_table",
        }
    }

    /// The source of [`Strategy::function`], cut out of this file as compiled.
    pub fn source(self) -> &'static str {
        let file = include_str!("strategies.rs");
        let head = format!("\nfn {}(", self.function());
        let Some(start) = file.find(&head) else { return "" };
        // Include the doc comment above the function.
        let start = file[..start].rfind("\n\n").map_or(start, |i| i + 2);
        let end = file[start..].find("\n}\n").map_or(file.len(), |i| start + i + 3);
        &file[start..end]
    }

    /// One booking attempt. Blocks (database, queue and pause): call it off the async executor.
    pub fn book(self, attempt: Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
        match self {
            Self::NoLock => no_lock(&attempt),
            Self::NamedLock => named_lock(attempt),
            Self::NamedLockCoalesced => named_lock_coalesced(attempt, seen),
            Self::NamedLockUnqueued => named_lock_unqueued(&attempt),
            Self::NamedLockPoolPitfall => named_lock_pool_pitfall(&attempt, seen),
            Self::ParentRowLock => parent_row_lock(&attempt, seen),
            Self::UniqueSlot => unique_slot(&attempt, seen),
            Self::Serializable => serializable(&attempt, seen),
            Self::ExclusionConstraint => exclusion_constraint(&attempt, seen),
            Self::RedisLock => redis_lock(&attempt, seen),
            Self::RedisLockExpiring => redis_lock_expiring(&attempt, seen),
            Self::RedisLockFenced => redis_lock_fenced(&attempt, seen),
            Self::FileLock => file_lock(&attempt),
            Self::LockTable => lock_table(&attempt, seen),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the demo's texts name the server's named-lock functions (`%{lock}`, `%{unlock}`, and
/// `%{lock_call}` for the call that takes a day's lock).
pub fn lock_words(engine: Engine) -> [(&'static str, String); 3] {
    let (lock, unlock, call) = match engine {
        Engine::Mysql => ("GET_LOCK", "RELEASE_LOCK", "GET_LOCK('haita:…:{resource}:{day}')"),
        Engine::Postgres => (
            "pg_advisory_lock",
            "pg_advisory_unlock",
            "pg_advisory_lock(the 64-bit key of 'haita:…:{resource}:{day}')",
        ),
    };
    [("lock", lock.into()), ("unlock", unlock.into()), ("lock_call", call.into())]
}

/// One client's attempt to book `day` of demo resource `resource_id`.
pub struct Attempt<'a> {
    pub pool: &'a DbPool,
    pub resource_id: i64,
    pub day: NaiveDate,
    pub client: i32,
    /// The nights booked from `day` on: 1 (the day) for every strategy but those that
    /// [book stays](Strategy::books_stays).
    pub nights: u32,
    /// Slept between "the day has room" and the insert.
    pub pause: Duration,
    /// How long the attempt may wait for its lock, in the queue and in GET_LOCK together.
    pub lock_wait: Duration,
    pub queue: Queue<'a>,
    /// The Redis server and the lock directory of the strategies that lock outside the database.
    pub outside: &'a OutsideLocks,
}

/// What stands in front of the named lock, as the app's per-key queue does.
pub enum Queue<'a> {
    /// Clients that are threads (a race, a bench) wait for their turn in lanes they share.
    Lanes(&'a Lanes),
    /// A request of the demo API: its handler already awaited its turn in the app's queue,
    /// holding nothing, or took none because its strategy takes no named lock.
    Taken(Option<Turn>),
}

impl Attempt<'_> {
    /// This attempt's turn at its day's lock: at most one client per day goes on to the server.
    fn turn(&mut self) -> Result<Turn, DemoError> {
        let name = lock_name(self.pool.names(), self.resource_id, self.day);
        match &mut self.queue {
            Queue::Lanes(lanes) => Ok(lanes.turn(name, self.lock_wait)?),
            Queue::Taken(turn) => turn
                .take()
                .filter(|turn| turn.name() == &name)
                .ok_or_else(|| anyhow::anyhow!("no turn at {name} was taken before the attempt").into()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Confirmed,
    Full,
}

/// What an attempt noticed on the way, beyond its answer; the race adds these up.
#[derive(Debug, Default)]
pub struct Seen {
    /// Whole transactions rerun after a deadlock or lock wait timeout.
    pub retries: u32,
    /// Inserts that lost slot to another client under the unique key.
    pub slot_collisions: u32,
    /// The lock was granted only because this session already held it for someone else.
    pub reentered: bool,
    /// The release did not answer 1 (true on PostgreSQL): it ran on a session that did not hold
    /// the lock.
    pub missed_release: bool,
    /// The connection ids (sessions) this attempt used, so leaked locks can be traced to them.
    pub sessions: Vec<i64>,
    /// Batches of its day this client booked, its own and others' (`named-lock-coalesced`).
    pub batches: u32,
    /// This client was the day's holder paused past its lease (`redis-lock-expiring`, `-fenced`).
    pub paused: bool,
    /// Its lease or lock row had expired when it released it: another client may have been
    /// inside with it.
    pub lease_lost: bool,
    /// The database refused its write: its fencing token was older than one already shown.
    pub fenced_off: bool,
}

/// The named lock of one demo resource and day: the same shape as `Namespace::booking`, in a
/// scope of its own so a demo run never waits for a real booking.
pub fn lock_name(names: &Namespace, resource_id: i64, day: NaiveDate) -> LockName {
    names.name("demo", &format!("{resource_id}:{}", day.format("%Y-%m-%d")))
}

/// The counter the fencing tokens of one demo resource's leases come from: one per resource, so
/// its number only grows across the resource's days, as its `fence` column does.
pub fn fence_counter(names: &Namespace, resource_id: i64) -> LockName {
    names.name("demo", &format!("{resource_id}:fence"))
}

fn capacity_of(conn: &mut DbConn, resource_id: i64) -> Result<i32, DemoError> {
    DemoResource::by_id(resource_id)
        .select(demo_resources::capacity)
        .first(conn)
        .optional()?
        .ok_or(DemoError::UnknownDemoResource(resource_id))
}

/// The check-then-insert every strategy but `unique-slot` runs. Correct only when something
/// outside it stops two clients from running it for the same day at once.
fn check_then_insert(conn: &mut DbConn, a: &Attempt<'_>) -> Result<Answer, DemoError> {
    if !has_room(conn, a)? {
        return Ok(Answer::Full);
    }
    std::thread::sleep(a.pause); // the race window: another client's count may run right now
    insert_booking(conn, a)?;
    Ok(Answer::Confirmed)
}

/// Whether the day has a place left, as far as `conn` can see.
fn has_room(conn: &mut DbConn, a: &Attempt<'_>) -> Result<bool, DemoError> {
    let capacity = capacity_of(conn, a.resource_id)?;
    let confirmed: i64 = bookings_on(a.resource_id, a.day).count().get_result(conn)?;
    Ok(confirmed < i64::from(capacity))
}

fn insert_booking(conn: &mut DbConn, a: &Attempt<'_>) -> Result<(), DemoError> {
    diesel::insert_into(demo_bookings::table)
        .values(NewDemoBooking { demo_resource_id: a.resource_id, day: a.day, client: a.client, slot: None })
        .execute(conn)?;
    Ok(())
}

/// WRONG. A transaction is not a lock: each client counts what has committed so far (its own
/// snapshot under MySQL's REPEATABLE READ, the count statement's under PostgreSQL's READ
/// COMMITTED), every one of them sees the day free, and every one inserts.
fn no_lock(a: &Attempt<'_>) -> Result<Answer, DemoError> {
    let mut conn = a.pool.get()?;
    conn.transaction(|conn| check_then_insert(conn, a))
}

/// The app's booking path (`bookings::service::book`), step for step, on the demo tables:
/// wait in memory for the day's turn, holding no connection (one client per day goes on to
/// the server); lock on a pooled connection, *then* begin (so the snapshot follows the previous
/// holder's commit), check and insert on that same connection, commit, and only then release.
fn named_lock(mut a: Attempt<'_>) -> Result<Answer, DemoError> {
    let turn = a.turn()?;
    let mut held = NamedLockGuard::acquire_in_turn(a.pool.get()?, turn)?;
    let answer = held.conn().transaction(|conn| check_then_insert(conn, &a))?;
    drop(held); // committed above; only now may the next client look at this day
    Ok(answer)
}

/// Correct, and built for a hot day, as `bookings::coalesce` is for real bookings: the
/// clients of one day queue, and the one at the front books everybody queued so far (at most
/// 32, in arrival order) under one lock, in one transaction with one commit. Each client gets
/// the answer it would have got alone in that order. Should a batch fail as a whole, its
/// clients go on one by one as `named-lock`.
fn named_lock_coalesced(mut a: Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let Queue::Lanes(lanes) = a.queue else { return Err(DemoError::RaceOnly(Strategy::NamedLockCoalesced)) };
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let deadline = Instant::now() + a.lock_wait;
    let decided = lanes.batches.book((a.resource_id, a.day), a.client, deadline, |clients, deadline| {
        seen.batches += 1;
        let turn = lanes.queue.turn_queued_elsewhere(name.clone(), deadline);
        let mut held = NamedLockGuard::acquire_in_turn(a.pool.get()?, turn)?;
        let answers = held.conn().transaction(|conn| {
            let capacity = capacity_of(conn, a.resource_id)?;
            let confirmed: i64 = bookings_on(a.resource_id, a.day).count().get_result(conn)?;
            let free = usize::try_from(i64::from(capacity) - confirmed).unwrap_or(0).min(clients.len());
            if free > 0 {
                std::thread::sleep(a.pause); // the race window, once for the whole batch
            }
            let rows: Vec<NewDemoBooking> = clients[..free]
                .iter()
                .map(|&client| NewDemoBooking {
                    demo_resource_id: a.resource_id,
                    day: a.day,
                    client,
                    slot: None,
                })
                .collect();
            if !rows.is_empty() {
                on_engine!(conn, |c| diesel::insert_into(demo_bookings::table).values(&rows).execute(c))?;
            }
            let answer = |i| if i < free { Answer::Confirmed } else { Answer::Full };
            Ok::<_, DemoError>((0..clients.len()).map(answer).collect())
        })?;
        drop(held); // committed above; only now may the next batch look at this day
        Ok(answers)
    });
    match decided {
        Decided::Answer(answer) => answer,
        Decided::Alone => {
            a.lock_wait = deadline.saturating_duration_since(Instant::now());
            named_lock(a)
        }
    }
}

/// Correct, but it starves the pool: `named-lock` without the per-key queue, as the app was
/// before it. Every client takes a pooled connection and then waits in GET_LOCK *on it*; with
/// one hot day, the waiters hold every connection, and a request that needs no lock at all
/// (a product list, a booking of another day) waits for one, up to the pool's timeout.
fn named_lock_unqueued(a: &Attempt<'_>) -> Result<Answer, DemoError> {
    let conn = a.pool.get()?; // held through the whole wait below
    let mut held =
        NamedLockGuard::acquire(conn, lock_name(a.pool.names(), a.resource_id, a.day), a.lock_wait)?;
    let answer = held.conn().transaction(|conn| check_then_insert(conn, a))?;
    drop(held);
    Ok(answer)
}

/// WRONG, as docs/named-lock-guard.md warns: each statement on whatever connection the pool hands
/// out next, like `db.Exec("SELECT GET_LOCK(…)")` on Go's `*sql.DB`. On PostgreSQL the same
/// statements by hand are `pg_advisory_lock(key)` and `pg_advisory_unlock(key)`, with the name's
/// 64-bit key: a session-level advisory lock belongs to the session and stacks when taken again,
/// exactly as GET_LOCK does, so the same two pitfalls follow.
///
/// 1. GET_LOCK, and the connection goes back to the pool still holding the lock. The next
///    client handed that session takes the "same" lock again at once (a session may hold a lock
///    twice) and is inside the critical section together with the first.
/// 2. The check-then-insert runs on another connection, which holds nothing.
/// 3. RELEASE_LOCK runs on yet another: it answers 0 or NULL (pg_advisory_unlock: false), and the
///    lock stays held by a session sitting idle in the pool, until that session is closed. Every
///    other client now waits the full timeout for a lock nobody will release.
fn named_lock_pool_pitfall(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    {
        let mut conn = a.pool.get()?;
        let me = conn.dialect().session_id(&mut conn)?;
        seen.sessions.push(me);
        // This session already holds the lock: it will be granted again without waiting.
        seen.reentered = conn.dialect().holder_of(&mut conn, name.as_str())? == Some(me);
        let granted = match conn.engine() {
            Engine::Mysql => {
                let wait_secs = i32::try_from(a.lock_wait.as_secs()).unwrap_or(i32::MAX);
                cached_sql::<Nullable<BigInt>>("SELECT GET_LOCK(?, ?)")
                    .bind::<Text, _>(name.as_str())
                    .bind::<Integer, _>(wait_secs)
                    .get_result::<Option<i64>>(&mut *conn)?
                    == Some(1)
            }
            // pg_advisory_lock waits until `lock_timeout`, set for this one transaction; the lock
            // is the session's, and outlives the transaction.
            Engine::Postgres => crate::db::transaction(&mut conn, |conn| {
                cached_sql::<()>("SELECT set_config('lock_timeout', ?, true)")
                    // 0 would mean "no limit" to PostgreSQL: wait a millisecond at least.
                    .bind::<Text, _>(format!("{}ms", a.lock_wait.as_millis().max(1)))
                    .execute(conn)?;
                cached_sql::<()>("SELECT pg_advisory_lock(?)")
                    .bind::<BigInt, _>(name.advisory_key())
                    .execute(conn)
            })
            .map(|_| true)
            .or_else(|e| if is_lock_timeout(&e) { Ok(false) } else { Err(e) })?,
        };
        if !granted {
            return Err(DemoError::Busy(format!("{name} stayed held for {:?}", a.lock_wait)));
        }
    } // back to the pool, still holding the lock
    between_statements();

    let answer = a.pool.get().map_err(DemoError::from).and_then(|mut conn| {
        seen.sessions.push(conn.dialect().session_id(&mut conn)?);
        conn.transaction(|conn| check_then_insert(conn, a))
    });

    between_statements();
    let released = a.pool.get().map_err(DemoError::from).and_then(|mut conn| {
        seen.sessions.push(conn.dialect().session_id(&mut conn)?);
        let released = match conn.engine() {
            Engine::Mysql => {
                cached_sql::<Nullable<BigInt>>("SELECT RELEASE_LOCK(?)")
                    .bind::<Text, _>(name.as_str())
                    .get_result::<Option<i64>>(&mut *conn)?
                    == Some(1)
            }
            Engine::Postgres => cached_sql::<Bool>("SELECT pg_advisory_unlock(?)")
                .bind::<BigInt, _>(name.advisory_key())
                .get_result::<bool>(&mut *conn)?,
        };
        Ok::<_, DemoError>(released)
    });
    seen.missed_release = !matches!(released, Ok(true)); // and nobody checks the answer
    answer
}

/// A request does a little of its own work between two statements (here 1 ms). Meanwhile a
/// busy pool hands the connection it just returned to another request — r2d2 would otherwise
/// give it straight back to the same thread, which is how this bug hides under light load.
fn between_statements() {
    std::thread::sleep(Duration::from_millis(1));
}

/// Correct: `SELECT … FOR UPDATE` on the resource's row serialises every booking of the
/// resource. The row exists before any booking does, so there is no gap lock to deadlock on
/// (the trouble of docs/named-lock-upsert.md) — but bookings of *other* days queue here too.
fn parent_row_lock(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let mut conn = a.pool.get()?;
    let tried = retry_on_lock_conflict(&RetryPolicy::default(), || {
        conn.transaction(|conn| {
            let parent = demo_resources::table.find(a.resource_id).select(demo_resources::id);
            on_engine!(conn, |c| parent.for_update().first::<i64>(c))
                .optional()?
                .ok_or(DemoError::UnknownDemoResource(a.resource_id))?;
            check_then_insert(conn, a)
        })
    });
    seen.retries += tried.attempts - 1;
    tried.result
}

/// Correct without any lock of our own: each place of the day is a slot 0…capacity−1, and the
/// unique key (resource, day, slot) lets only one insert per slot commit. The loser gets a
/// duplicate-key error, re-reads in a fresh transaction (a fresh snapshot, which now shows the
/// winner's row) and tries the next free slot. Each lost insert means one more slot taken, so
/// capacity + 1 tries always decide. Needs a fixed capacity per day.
fn unique_slot(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let mut conn = a.pool.get()?;
    let capacity = capacity_of(&mut conn, a.resource_id)?;
    for _ in 0..=capacity {
        let tried = retry_on_lock_conflict(&RetryPolicy::default(), || {
            conn.transaction(|conn| {
                let taken: Vec<Option<i32>> =
                    bookings_on(a.resource_id, a.day).select(demo_bookings::slot).load(conn)?;
                let Some(slot) = (0..capacity).find(|s| !taken.contains(&Some(*s))) else {
                    return Ok(Answer::Full);
                };
                std::thread::sleep(a.pause);
                diesel::insert_into(demo_bookings::table)
                    .values(NewDemoBooking {
                        demo_resource_id: a.resource_id,
                        day: a.day,
                        client: a.client,
                        slot: Some(slot),
                    })
                    .execute(conn)?;
                Ok(Answer::Confirmed)
            })
        });
        seen.retries += tried.attempts - 1;
        match tried.result {
            Err(DemoError::Infra(Infra::Database(
                DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _),
                _,
            ))) => {
                seen.slot_collisions += 1;
            }
            decided => return decided,
        }
    }
    Err(DemoError::Busy(format!("no slot decided after {} tries", capacity + 1)))
}

/// Correct: under SERIALIZABLE, InnoDB turns the count into a locking read that holds shared
/// next-key locks on the day's range. Two clients that both counted cannot both insert: each
/// insert waits for the other's shared lock, InnoDB detects the deadlock (1213) and rolls one
/// back, and the whole transaction is retried with backoff (docs/row-locks-in-order.md).
///
/// PostgreSQL's SERIALIZABLE blocks nobody: it notes what each transaction read (predicate
/// locks), and when two that both counted the day free both insert, it aborts one of them with
/// a serialization failure (40001) at its insert or its commit. The same retry reruns it.
fn serializable(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let mut conn = a.pool.get()?;
    let tried = retry_on_lock_conflict(&RetryPolicy::default(), || match conn.engine() {
        // Without SESSION this applies to the next transaction only: the connection goes back to
        // the pool at the server's default level. (diesel's `build_transaction` is Postgres-only.)
        Engine::Mysql => {
            conn.batch_execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")?;
            conn.transaction(|conn| check_then_insert(conn, a))
        }
        // PostgreSQL takes it as the transaction's first statement, for that transaction only.
        Engine::Postgres => conn.transaction(|conn| {
            conn.batch_execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")?;
            check_then_insert(conn, a)
        }),
    });
    seen.retries += tried.attempts - 1;
    tried.result
}

/// Correct with no lock and no check, on PostgreSQL only, for one place: the client books its
/// stay (check-in `day`, `nights` nights) by inserting it, and the table refuses a stay that
/// shares a night with another of the resource: its constraint `EXCLUDE USING gist
/// (demo_resource_id WITH =, daterange(check_in, check_out) WITH &&)` fails the insert with
/// 23P01, answered "full". An insert that overlaps a stay not yet committed waits for that
/// transaction, then fails (or goes through, had it rolled back); the pause, here between insert
/// and commit, only makes those waits longer. Two inserts that meet inside the index may each
/// wait for the other: PostgreSQL then aborts one with a deadlock (40P01), and it is rerun.
///
/// A constraint compares two rows at a time: it can say "these two overlap", never "a third
/// would be one too many". So one place only, and nothing on MariaDB or MySQL, which have no
/// exclusion constraint (`unavailable_on`).
fn exclusion_constraint(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let stay = NewDemoStay {
        demo_resource_id: a.resource_id,
        check_in: a.day,
        check_out: a.day + chrono::Days::new(a.nights.into()),
        client: a.client,
    };
    let mut conn = a.pool.get()?;
    let tried = retry_on_lock_conflict(&RetryPolicy::default(), || {
        conn.transaction(|conn| {
            diesel::insert_into(demo_stays::table).values(&stay).execute(conn)?;
            std::thread::sleep(a.pause); // overlapping inserts wait for this commit meanwhile
            Ok::<_, DbError>(())
        })
    });
    seen.retries += tried.attempts - 1;
    match tried.result {
        Ok(()) => Ok(Answer::Confirmed),
        Err(DbError::DatabaseError(DatabaseErrorKind::ExclusionViolation, _)) => Ok(Answer::Full),
        Err(e) => Err(e.into()),
    }
}

/// The lease of `redis-lock` and the row of `lock-table`: far longer than an attempt takes (the
/// race's pause is a second at most), so it runs out only under a holder that died.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// The lease of the two strategies that show one running out.
pub const SHORT_LEASE: Duration = Duration::from_millis(200);
/// How long the day's first holder pauses in those two: three times its lease.
pub const PAUSED_FOR: Duration = Duration::from_millis(600);

/// Correct while every holder finishes within its lease: `SET key token NX PX 10000` in Redis,
/// asked again every few milliseconds while another client holds it, holding no connection
/// meanwhile. Check, insert and commit on a connection taken once the lease is granted; then
/// release, which deletes the key only if it still carries our token (a script run inside
/// Redis). The lease is exclusive for its TTL and not a moment longer: see `redis-lock-expiring`.
fn redis_lock(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let lease = a.outside.redis.acquire(name.as_str(), LEASE_TTL, a.lock_wait)?;
    let answer = a.pool.get()?.transaction(|conn| check_then_insert(conn, a))?;
    seen.lease_lost = !lease.release()?; // committed above; only now may the next client look
    Ok(answer)
}

/// WRONG, as every lease is once its holder pauses past it. The lease of `redis-lock`, for
/// 200 ms, and the first holder of each day to find it free pauses 600 ms before its insert, as
/// a GC pause, a swapped-out VM or a slow disk would. Redis lets the next client in after 200 ms;
/// it finds the day free (the paused holder has written nothing yet) and books it. Then the
/// paused holder wakes, still "holding the lock" as far as it knows, and books the day again.
/// Its release finds the key gone: too late to undo anything.
fn redis_lock_expiring(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let lease = a.outside.redis.acquire(name.as_str(), SHORT_LEASE, a.lock_wait)?;
    let answer = a.pool.get()?.transaction(|conn| {
        if !has_room(conn, a)? {
            return Ok(Answer::Full);
        }
        seen.paused = pause_if_first(a, &name)?;
        insert_booking(conn, a)?;
        Ok::<_, DemoError>(Answer::Confirmed)
    })?;
    seen.lease_lost = !lease.release()?;
    Ok(answer)
}

/// Correct, with the same 200 ms lease and the same pause, because the database has the last
/// word: the lease comes with a fencing token, the next number of the resource's counter, handed
/// out by the script that grants the lease, so a later grant always has a higher one.
///
/// 1. Right after the grant, before reading anything, the holder raises the resource's `fence`
///    to its token. Finding a higher one means a newer holder exists: stop.
/// 2. Check the day (and pause, if first).
/// 3. Write in a transaction that locks the resource's row and finds its own token still on
///    it. A newer holder has raised the fence meanwhile? Then nothing is written.
///
/// A newer holder raises the fence before it reads, and the raise waits for a write in progress
/// to commit: every write that got in is seen by every later holder's check.
fn redis_lock_fenced(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let counter = fence_counter(a.pool.names(), a.resource_id);
    let lease = a.outside.redis.acquire_fenced(name.as_str(), counter.as_str(), SHORT_LEASE, a.lock_wait)?;
    let token =
        lease.fencing_token().ok_or_else(|| anyhow::anyhow!("a fenced lease came without a token"))?;
    let mut conn = a.pool.get()?;
    let fenced = fenced_check_then_insert(&mut conn, a, &name, token, seen);
    seen.lease_lost = !lease.release()?;
    match fenced? {
        Some(answer) => Ok(answer),
        None => {
            seen.fenced_off = true;
            Err(DemoError::FencedOff(token))
        }
    }
}

/// Steps 1–3 of `redis-lock-fenced`. `None`: the fence showed a newer token, nothing written.
fn fenced_check_then_insert(
    conn: &mut DbConn,
    a: &Attempt<'_>,
    name: &LockName,
    token: i64,
    seen: &mut Seen,
) -> Result<Option<Answer>, DemoError> {
    let resource = demo_resources::table.find(a.resource_id);
    let raised = diesel::update(resource.filter(demo_resources::fence.lt(token)))
        .set(demo_resources::fence.eq(token))
        .execute(conn)?;
    if raised == 0 {
        return Ok(None);
    }
    if !has_room(conn, a)? {
        return Ok(Some(Answer::Full));
    }
    seen.paused = pause_if_first(a, name)?;
    conn.transaction(|conn| {
        let fence: i64 = on_engine!(conn, |c| resource.select(demo_resources::fence).for_update().first(c))?;
        if fence != token {
            return Ok(None);
        }
        insert_booking(conn, a)?;
        Ok(Some(Answer::Confirmed))
    })
}

/// Sleeps the attempt's pause, or [`PAUSED_FOR`] if this is the first holder of the day to get
/// here (the two lease-expiry strategies); says which.
fn pause_if_first(a: &Attempt<'_>, name: &LockName) -> Result<bool, DemoError> {
    let first = a.outside.redis.first_to_claim(&format!("{name}:paused"), Duration::from_secs(60))?;
    std::thread::sleep(if first { PAUSED_FOR } else { a.pause });
    Ok(first)
}

/// Correct on one host: `flock` on a file per day in the lock directory, asked for again every
/// few milliseconds while another client holds it. The kernel keeps the lock while the file is
/// open and frees it when the holder closes it or its process dies, so it cannot run out under a
/// paused holder. Other hosts do not see it (over NFS, not reliably).
fn file_lock(a: &Attempt<'_>) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let Some(held) = FileLock::acquire(&a.outside.dir, name.as_str(), a.lock_wait)
        .map_err(|e| anyhow::anyhow!("the lock file of {name}: {e}"))?
    else {
        return Err(DemoError::Busy(format!("the lock file of {name} stayed locked")));
    };
    let answer = a.pool.get()?.transaction(|conn| check_then_insert(conn, a))?;
    drop(held); // committed above
    Ok(answer)
}

/// Correct while every holder finishes before its row expires: the lock is a row of
/// `demo_lock_rows` (name, owner token, expiry). Delete it if expired, insert ours; the primary
/// key lets one insert win, and the others ask again every few milliseconds. The release
/// deletes the row only if it still carries our token.
fn lock_table(a: &Attempt<'_>, seen: &mut Seen) -> Result<Answer, DemoError> {
    let name = lock_name(a.pool.names(), a.resource_id, a.day);
    let row = LockRow::acquire(a.pool, name.as_str(), LEASE_TTL, a.lock_wait)?;
    let answer = a.pool.get()?.transaction(|conn| check_then_insert(conn, a))?;
    seen.lease_lost = !row.release()?; // committed above
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_list_the_known_ones() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()).expect("known"), s);
            assert_eq!(serde_json::to_string(&s).expect("json"), format!("\"{}\"", s.name()));
        }
        let err = Strategy::parse("optimistic").expect_err("unknown");
        assert!(err.to_string().contains("no-lock, named-lock"), "{err}");
    }

    #[test]
    fn the_texts_name_the_lock_functions_of_the_engine_they_run_on() {
        for lang in [Lang::En, Lang::Ja] {
            for s in Strategy::ALL {
                for engine in [Engine::Mysql, Engine::Postgres] {
                    let lines = s.explanation(lang, engine).join(" ");
                    assert!(!lines.contains("%{"), "{s} on {engine:?}: {lines}");
                    let foreign = if engine == Engine::Mysql { "pg_advisory" } else { "GET_LOCK" };
                    assert!(!lines.contains(foreign), "{s} on {engine:?}: {lines}");
                }
            }
            let pitfall = Strategy::NamedLockPoolPitfall.explanation(lang, Engine::Postgres)[0].clone();
            assert!(
                pitfall.contains("pg_advisory_lock") && pitfall.contains("pg_advisory_unlock"),
                "{pitfall}"
            );
        }
    }

    #[test]
    fn every_strategy_shows_its_own_function_with_its_doc_comment() {
        for s in Strategy::ALL {
            let source = s.source();
            assert!(source.contains(&format!("fn {}(", s.function())), "{s}: {source}");
            assert!(source.starts_with("///"), "{s} starts with its doc comment: {source}");
            assert!(source.trim_end().ends_with('}'), "{s}");
        }
    }
}
