//! The locks outside the database's lock functions (`haita::lab::locks`), each documented by
//! what it does and does not guarantee: on a real Redis (`REDIS_URL`, the machine's own by
//! default), real files and a real lock table. Many clients at once are the race's business
//! (`demo.rs`); these pin down each primitive's edges.

use std::time::{Duration, Instant};

use haita::lab::locks::file::{FileLock, path_of};
use haita::lab::locks::redis::{LeaseError, RedisLocks};
use haita::lab::locks::table::{LockRow, LockRowError};

use crate::common::{TestDb, poll};

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn redis() -> RedisLocks {
    RedisLocks::new(&redis_url()).expect("a Redis URL")
}

/// Whether Redis still has `key`: asked of Redis itself, whose clock expires a lease.
fn redis_has(key: &str) -> bool {
    let mut conn = redis::Client::open(redis_url()).and_then(|c| c.get_connection()).expect("Redis");
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut conn).expect("EXISTS") > 0
}

/// A key no other test (or earlier run) uses.
fn fresh_key(what: &str) -> String {
    format!("haita-test:{what}:{:x}", rand::random::<u64>())
}

const SHORT: Duration = Duration::from_millis(50);

#[test]
fn a_lease_is_exclusive_until_released_and_then_free_at_once() {
    let redis = redis();
    let key = fresh_key("exclusive");
    let held = redis.acquire(&key, Duration::from_secs(10), SHORT).expect("free");
    let asked = Instant::now();
    match redis.acquire(&key, Duration::from_secs(10), SHORT) {
        Err(LeaseError::TimedOut { .. }) => {}
        other => panic!("a held lease must not be granted twice: {:?}", other.map(|_| ())),
    }
    assert!(asked.elapsed() >= SHORT, "it asked again for the whole wait");
    assert!(held.release().expect("release"), "our own lease is ours to release");
    redis.acquire(&key, Duration::from_secs(10), SHORT).expect("free again after the release");
}

/// The guarantee ends with the TTL, and the token-checked release is what keeps the late holder
/// from freeing the lease of the holder after it.
#[test]
fn a_lease_runs_out_under_its_holder_whose_release_then_leaves_the_next_holder_alone() {
    let redis = redis();
    let key = fresh_key("expiry");
    let late = redis.acquire(&key, Duration::from_millis(100), SHORT).expect("free");
    // The holder "pauses" past its TTL: until Redis has expired the lease by its own clock.
    poll::until("the lease to expire in Redis", Duration::from_secs(10), || !redis_has(&key));
    let next = redis.acquire(&key, Duration::from_secs(10), SHORT).expect("expired, so free");
    assert!(!late.release().expect("release"), "the late holder learns it lost the lease");
    match redis.acquire(&key, Duration::from_secs(10), SHORT) {
        Err(LeaseError::TimedOut { .. }) => {}
        other => panic!("the late release must not free the next holder's lease: {:?}", other.map(|_| ())),
    }
    assert!(next.release().expect("release"), "the next holder's lease was left in place");
}

#[test]
fn fencing_tokens_grow_with_every_grant_and_a_dropped_lease_is_released() {
    let redis = redis();
    let (key, counter) = (fresh_key("fenced"), fresh_key("fence"));
    let mut last = 0;
    for _ in 0..3 {
        let lease = redis.acquire_fenced(&key, &counter, Duration::from_secs(10), SHORT).expect("free");
        let token = lease.fencing_token().expect("a fenced lease has a token");
        assert!(token > last, "{token} after {last}");
        last = token;
        drop(lease); // released by its drop, or the next grant would time out
    }
    let plain = redis.acquire(&key, Duration::from_secs(10), SHORT).expect("free");
    assert_eq!(plain.fencing_token(), None);
    match redis.acquire_fenced(&key, &counter, Duration::from_secs(10), SHORT) {
        Err(LeaseError::TimedOut { .. }) => {}
        other => panic!("held: {:?}", other.map(|_| ())),
    }
}

/// No Redis at the address: a quick error that says so, not a hang and not "held elsewhere".
#[test]
fn without_redis_an_acquire_fails_quickly_and_says_why() {
    let nobody = RedisLocks::new("redis://127.0.0.1:1").expect("a Redis URL");
    let asked = Instant::now();
    match nobody.acquire(&fresh_key("nobody"), Duration::from_secs(10), Duration::from_secs(30)) {
        Err(LeaseError::Redis(why)) => assert!(!why.is_empty()),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(asked.elapsed() < Duration::from_secs(10), "bounded by the checkout, not the lock wait");
    assert!(RedisLocks::new("http://not-redis").is_err(), "a URL that is not Redis's is refused up front");
}

#[test]
fn a_file_lock_excludes_every_other_open_file_and_is_free_once_dropped() {
    let dir = std::env::temp_dir().join(format!("haita-test-locks-{:x}", rand::random::<u64>()));
    let name = "haita:abc123:demo:7:2200-01-01";
    let held = FileLock::acquire(&dir, name, SHORT).expect("io").expect("free");
    assert_eq!(held.path(), path_of(&dir, name));
    assert_eq!(
        path_of(&dir, name).file_name().and_then(|n| n.to_str()),
        Some("haita_abc123_demo_7_2200-01-01.lock")
    );
    // Another thread, another open file: flock locks belong to the open file, not the thread.
    let other = std::thread::scope(|s| {
        s.spawn(|| FileLock::acquire(&dir, name, SHORT).expect("io").is_some()).join().expect("thread")
    });
    assert!(!other, "a held file lock must not be granted twice");
    drop(held);
    assert!(FileLock::acquire(&dir, name, SHORT).expect("io").is_some(), "free after the drop");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn a_lock_row_is_exclusive_until_it_expires_and_a_late_release_leaves_the_next_owner_alone() {
    let db = TestDb::new();
    haita::lab::prepare(&db.pool).expect("lab migrations");
    let name = "haita:test:row";
    let late = LockRow::acquire(&db.pool, name, Duration::from_millis(200), SHORT).expect("free");
    match LockRow::acquire(&db.pool, name, Duration::from_secs(10), SHORT) {
        Err(LockRowError::TimedOut { .. }) => {}
        other => panic!("a held row must not be granted twice: {:?}", other.map(|_| ())),
    }
    poll::until("the lock row to expire by the database's clock", Duration::from_secs(10), || {
        row_expired(&db, name)
    });
    let next = LockRow::acquire(&db.pool, name, Duration::from_secs(10), SHORT).expect("expired, so free");
    assert!(!late.release().expect("release"), "the late owner learns it lost the row");
    match LockRow::acquire(&db.pool, name, Duration::from_secs(10), SHORT) {
        Err(LockRowError::TimedOut { .. }) => {}
        other => panic!("the late release must not free the next owner's row: {:?}", other.map(|_| ())),
    }
    assert!(next.release().expect("release"));
    let again = LockRow::acquire(&db.pool, name, Duration::from_secs(10), SHORT).expect("free after release");
    drop(again);
    use diesel::prelude::*;
    use haita::lab::schema::demo_lock_rows;
    let left: i64 = demo_lock_rows::table.count().get_result(&mut db.conn()).expect("count");
    assert_eq!(left, 0, "a dropped row is deleted");
}

#[derive(diesel::QueryableByName)]
struct Expired {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    expired: bool,
}

/// Whether the lock row `name` is past its expiry by the database's clock, as the next
/// acquire judges it (strictly before now); a row that is gone counts as expired. Asked on a
/// pooled connection: its session runs in UTC, as the one that wrote the expiry.
fn row_expired(db: &TestDb, name: &str) -> bool {
    use diesel::prelude::*;
    haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT expires_at < NOW(6) AS expired FROM demo_lock_rows WHERE name = ?",
        "SELECT expires_at < LOCALTIMESTAMP AS expired FROM demo_lock_rows WHERE name = ?",
    ))
    .bind::<diesel::sql_types::Text, _>(name)
    .get_result::<Expired>(&mut db.conn())
    .optional()
    .expect("lock row expiry")
    .is_none_or(|row| row.expired)
}
