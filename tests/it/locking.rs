//! The named-lock guard against the real server: what it guarantees, shown one by one.

use std::time::Duration;

use diesel::prelude::*;
use haita::config::Config;
use haita::db::{self, DbConn, DbPool};
use haita::locking::{LockError, LockName, NamedLockGuard};
use rand::Rng;

use crate::common::{TestDb, on_both_engines, server, test_config};

fn unique_name() -> LockName {
    haita::locking::Namespace::for_database("locking_tests")
        .name("test", &format!("{:016x}", rand::rng().random::<u64>()))
}

fn small_pool(db: &TestDb, size: u32) -> DbPool {
    db::build_pool(&Config { pool_size: size, ..test_config(&db.url) }).expect("pool")
}

/// Whether any session holds `name`, asked from a session of its own.
fn is_free(db: &TestDb, name: &LockName) -> bool {
    server::is_free(&mut db.raw_connection(), name)
}

fn session_exists(db: &TestDb, id: i64) -> bool {
    server::session_exists(&mut db.raw_connection(), id)
}

fn holder(db: &TestDb, name: &LockName) -> Option<i64> {
    server::holder_of(&mut db.raw_connection(), name.as_str()).expect("holder")
}

fn connection_id(conn: &mut DbConn) -> i64 {
    server::connection_id(conn).expect("connection id")
}

#[test]
fn a_held_lock_makes_a_second_session_time_out() {
    let db = TestDb::new();
    let pool = small_pool(&db, 4);
    let name = unique_name();
    let mut first =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("first");
    let holder_id = connection_id(first.conn());

    let second = NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::from_secs(1));
    assert!(matches!(second, Err(LockError::TimedOut { .. })), "second session must not get the lock");
    assert_eq!(holder(&db, &name), Some(holder_id));
}

#[test]
fn dropping_the_guard_releases_the_lock() {
    let db = TestDb::new();
    let pool = small_pool(&db, 4);
    let name = unique_name();
    let guard =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    assert!(!is_free(&db, &name));
    drop(guard);
    assert!(is_free(&db, &name));
    NamedLockGuard::acquire(pool.get().expect("conn"), name, Duration::ZERO).expect("free again");
}

#[test]
fn lock_is_released_when_the_work_fails() {
    let db = TestDb::new();
    let pool = small_pool(&db, 4);
    let name = unique_name();
    let work = || -> Result<(), diesel::result::Error> {
        let mut held =
            NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
        held.conn().transaction(|conn| {
            haita::db::cached_sql::<diesel::sql_types::Untyped>("SELECT * FROM no_such_table")
                .execute(conn)?;
            Ok(())
        })
    };
    assert!(work().is_err());
    assert!(is_free(&db, &name), "an error inside the work must not leak the lock");
}

#[test]
fn lock_is_released_when_the_work_panics() {
    let db = TestDb::new();
    let pool = small_pool(&db, 4);
    let name = unique_name();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut held =
            NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
        let _ = held
            .conn()
            .transaction(|_| -> Result<(), diesel::result::Error> { panic!("bug inside the locked work") });
    }));
    assert!(outcome.is_err(), "the panic propagates");
    assert!(is_free(&db, &name), "a panic inside the work must not leak the lock");
}

#[test]
fn a_connection_whose_release_failed_is_closed_not_pooled() {
    let db = TestDb::new();
    let pool = small_pool(&db, 2);
    let name = unique_name();
    let mut held =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let id = connection_id(held.conn());
    // Misbehaving work releases the lock behind the guard's back: the guard's own release then
    // finds nothing to release, so it cannot vouch for the session any more.
    assert!(server::release(held.conn(), &name));
    drop(held);

    assert!(!session_exists(&db, id), "the session must be closed, not returned to the pool");
    for _ in 0..4 {
        let mut conn = pool.get().expect("conn");
        assert_ne!(connection_id(&mut conn), id, "the pool handed out the distrusted connection");
    }
}

#[test]
fn a_lock_taken_twice_by_the_work_is_not_left_behind_in_the_pool() {
    // The second pool pitfall (`docs/named-lock-guard.md`): the same session may take a lock twice and then needs
    // two releases. If the work re-enters the lock, one release leaves it held and the next
    // request to get this pooled connection would walk straight in.
    let db = TestDb::new();
    let pool = small_pool(&db, 2);
    let name = unique_name();
    let mut held =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let id = connection_id(held.conn());
    assert!(server::try_lock(held.conn(), &name), "same session re-enters");
    drop(held);

    assert!(is_free(&db, &name), "the re-entered lock must not survive the guard");
    assert!(!session_exists(&db, id), "a session that held more than its guard's lock is closed");
}

#[test]
fn a_timed_out_attempt_returns_its_connection_to_the_pool() {
    let db = TestDb::new();
    let pool = small_pool(&db, 2);
    let name = unique_name();
    let _holder =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let mut waiter = pool.get().expect("conn");
    let waiter_id = connection_id(&mut waiter);
    let timed_out = NamedLockGuard::acquire(waiter, name, Duration::ZERO);
    assert!(matches!(timed_out, Err(LockError::TimedOut { .. })));
    let mut again = pool.get().expect("conn");
    assert_eq!(connection_id(&mut again), waiter_id, "a clean timeout keeps the connection");
}

#[test]
fn the_work_runs_on_the_session_that_holds_the_lock() {
    let db = TestDb::new();
    let pool = small_pool(&db, 4);
    let name = unique_name();
    let mut held =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let work_session = connection_id(held.conn());
    assert_eq!(server::holder_of(held.conn(), name.as_str()).expect("holder"), Some(work_session));
}

#[test]
fn a_long_key_becomes_a_name_the_server_accepts() {
    let db = TestDb::new();
    let pool = small_pool(&db, 2);
    let name = pool.names().name("test", &format!("{:x}-{}", rand::rng().random::<u64>(), "k".repeat(300)));
    assert!(name.as_str().len() <= 64, "{name}");
    let mut held =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let id = connection_id(held.conn());
    assert_eq!(holder(&db, &name), Some(id));
}

#[test]
fn a_lock_survives_rollback_so_only_the_guard_releases_it() {
    // Named locks are not transactional: ROLLBACK leaves them held (`docs/server-facts.md`).
    let db = TestDb::new();
    let pool = small_pool(&db, 2);
    let name = unique_name();
    let mut held =
        NamedLockGuard::acquire(pool.get().expect("conn"), name.clone(), Duration::ZERO).expect("lock");
    let _ = held.conn().transaction(|_| -> Result<(), diesel::result::Error> {
        Err(diesel::result::Error::RollbackTransaction)
    });
    assert!(!is_free(&db, &name), "still held after rollback");
    drop(held);
    assert!(is_free(&db, &name));
}

mod retry {
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;
    use haita::db::{DbConn, Engine};
    use haita::locking::retry::{LockConflict, MayConflict, RetryPolicy, retry_on_lock_conflict};

    use crate::common::invariants::{a_transaction_waits_for_a_lock, lock_wait_poll_interval};
    use crate::common::{TestDb, create_resource, poll, test_config};

    /// How long a side waits to see the other blocked: far beyond any reasonable wait.
    const WAIT: Duration = Duration::from_secs(20);

    fn fast() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            ..Default::default()
        }
    }

    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        #[expect(dead_code, reason = "only the lock matters")]
        id: i64,
    }

    fn lock_row(conn: &mut DbConn, id: i64) -> QueryResult<()> {
        haita::db::cached_sql::<diesel::sql_types::Untyped>(
            "SELECT id FROM resources WHERE id = ? FOR UPDATE",
        )
        .bind::<BigInt, _>(id)
        .load::<Row>(conn)?;
        Ok(())
    }

    fn touch_row(conn: &mut DbConn, id: i64) -> QueryResult<()> {
        haita::db::cached_sql::<diesel::sql_types::Untyped>(
            "UPDATE resources SET version = version + 1 WHERE id = ?",
        )
        .bind::<BigInt, _>(id)
        .execute(conn)?;
        Ok(())
    }

    #[test]
    fn a_real_deadlock_victim_succeeds_when_its_whole_transaction_is_retried() {
        let db = TestDb::new();
        let (a, b, c) =
            (create_resource(&db, "A", 1), create_resource(&db, "B", 1), create_resource(&db, "C", 1));
        let both_hold_one = Arc::new(Barrier::new(2));

        // The engines pick the victim differently, and the test arranges for the light
        // transaction to be it on each. InnoDB rolls back the transaction that has changed fewer
        // rows: the "heavy" one changes two, so the other is chosen; there the light one closes
        // the cycle once the heavy one is seen waiting. PostgreSQL aborts the session whose
        // deadlock check runs first, after `deadlock_timeout` of waiting: the one that began
        // waiting first, so there the heavy one closes the cycle once the light one is seen waiting.
        let (heavy_waits_for_a_waiter, light_waits_for_a_waiter) = match db.pool.engine() {
            Engine::Mysql => (false, true),
            Engine::Postgres => (true, false),
        };
        let interval = lock_wait_poll_interval(&db);
        let until_the_other_waits = move |url: &str| {
            let mut watcher = DbConn::open(url).expect("connect");
            poll::until_every("the other transaction to wait for a row lock", WAIT, interval, || {
                a_transaction_waits_for_a_lock(&mut watcher)
            });
        };
        let heavy = std::thread::spawn({
            let (url, both_hold_one) = (db.url.clone(), both_hold_one.clone());
            move || {
                let mut conn = DbConn::open(&url).expect("connect");
                conn.transaction(|conn| {
                    touch_row(conn, a)?;
                    touch_row(conn, c)?;
                    both_hold_one.wait();
                    if heavy_waits_for_a_waiter {
                        until_the_other_waits(&url);
                    }
                    touch_row(conn, b) // waits for the light transaction: half of the cycle
                })
            }
        });

        // Deliberately below the ordering rule: B first, then A — the opposite of `heavy`.
        let mut light = db.raw_connection();
        let mut first_attempt = true;
        let outcome = retry_on_lock_conflict(&fast(), || {
            light.transaction(|conn| {
                lock_row(conn, b)?;
                if std::mem::take(&mut first_attempt) {
                    both_hold_one.wait();
                    if light_waits_for_a_waiter {
                        until_the_other_waits(&db.url);
                    }
                }
                lock_row(conn, a)
            })
        });

        assert_eq!(outcome.attempts, 2, "the first attempt was the deadlock victim, the second succeeded");
        assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        heavy.join().expect("heavy thread").expect("the heavy transaction commits");
    }

    #[test]
    fn a_lock_wait_timeout_ends_in_a_clean_error_without_waiting_again() {
        let db = TestDb::new();
        let row = create_resource(&db, "held", 1);
        let mut holder = db.raw_connection();
        holder.batch_execute("BEGIN").expect("begin");
        lock_row(&mut holder, row).expect("holder locks the row");

        // Pool connections wait ROW_LOCK_WAIT_SECS (here 1 s) for a row: innodb_lock_wait_timeout,
        // lock_timeout on PostgreSQL.
        let pool =
            haita::db::build_pool(&haita::config::Config { row_lock_wait_secs: 1, ..test_config(&db.url) })
                .expect("pool");
        let mut conn = pool.get().expect("conn");
        let outcome = retry_on_lock_conflict(&fast(), || conn.transaction(|conn| lock_row(conn, row)));

        assert_eq!(outcome.attempts, 1, "a row held past the lock wait timeout is not waited for again");
        let error = outcome.result.expect_err("the row stayed locked");
        assert_eq!(error.lock_conflict(), Some(LockConflict::LockWaitTimeout));
        holder.batch_execute("ROLLBACK").expect("rollback");
        assert!(conn.transaction(|conn| lock_row(conn, row)).is_ok(), "the same connection works afterwards");
    }
}

on_both_engines!(
    several_locks_are_held_by_one_session_and_let_go_of_together,
    several_locks_are_held_by_one_session_and_let_go_of_together_on_postgres => several_locks_together
);

/// A stay's locks on the session form (`NamedLocksInOrder`, MySQL's): all held by one session,
/// taken in the names' order whatever order they were given in, and all let go of by the drop,
/// the connection going back to the pool.
async fn several_locks_together(db: TestDb) {
    use haita::locking::{NamedLocksInOrder, TurnsInOrder};
    let pool = small_pool(&db, 2);
    let names = vec![unique_name(), unique_name(), unique_name()];
    let turns = TurnsInOrder::unqueued(names.clone(), Duration::from_secs(1));
    let mut sorted = names.clone();
    sorted.sort();
    assert!(turns.names().eq(sorted.iter()), "taken in the names' order");
    let mut held = NamedLocksInOrder::acquire_pooled(&pool, turns).expect("three locks");
    let id = connection_id(held.conn());
    for name in &names {
        assert_eq!(holder(&db, name), Some(id), "{name} held by the guard's session");
    }
    drop(held);
    for name in &names {
        assert!(is_free(&db, name), "{name} let go of");
    }
    assert!(session_exists(&db, id), "a clean release keeps the session in the pool");
}

on_both_engines!(
    several_locks_give_back_those_taken_when_one_is_held_elsewhere,
    several_locks_give_back_those_taken_when_one_is_held_elsewhere_on_postgres => several_locks_one_held
);

/// The second of three names is held by another session: the guard takes the first, waits out
/// its turn for the second, and gives the first back.
async fn several_locks_one_held(db: TestDb) {
    use haita::locking::{AcquireError, NamedLocksInOrder, TurnsInOrder};
    let pool = small_pool(&db, 2);
    let mut names = vec![unique_name(), unique_name(), unique_name()];
    names.sort();
    let other = db.session_holding(&names[1]);
    let turns = TurnsInOrder::unqueued(names.clone(), Duration::from_secs(1));
    let refused = NamedLocksInOrder::acquire_pooled(&pool, turns);
    assert!(
        matches!(refused, Err(AcquireError::Lock(LockError::TimedOut { .. }))),
        "the held one is waited out"
    );
    assert!(is_free(&db, &names[0]), "the first is given back");
    assert!(is_free(&db, &names[2]), "the third was never taken");
    drop(other);
}

on_both_engines!(
    a_session_holding_more_than_its_several_locks_is_closed,
    a_session_holding_more_than_its_several_locks_is_closed_on_postgres => several_locks_and_one_more
);

/// The work takes one more lock on the guard's connection: the release finds more than it took,
/// and the session is closed rather than pooled, its extra lock ending with it.
async fn several_locks_and_one_more(db: TestDb) {
    use haita::locking::{NamedLocksInOrder, TurnsInOrder};
    let pool = small_pool(&db, 2);
    let (names, extra) = (vec![unique_name(), unique_name()], unique_name());
    let mut held =
        NamedLocksInOrder::acquire_pooled(&pool, TurnsInOrder::unqueued(names.clone(), Duration::ZERO))
            .expect("locks");
    let id = connection_id(held.conn());
    assert!(server::try_lock(held.conn(), &extra), "the work takes a lock of its own");
    drop(held);
    assert!(!session_exists(&db, id), "the session is closed, not pooled");
    for name in names.iter().chain([&extra]) {
        assert!(is_free(&db, name), "{name} ends with the session");
    }
}
