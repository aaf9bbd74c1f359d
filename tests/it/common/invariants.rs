//! The invariants listed in `docs/README.md`, checked in the database after concurrent load.

use std::collections::{BTreeMap, HashMap};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

use super::TestDb;

#[derive(QueryableByName, Debug)]
struct Violation {
    #[diesel(sql_type = Text)]
    what: String,
}

fn violations(db: &TestDb, sql: &str) -> Vec<String> {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(sql)
        .load::<Violation>(&mut db.raw_connection())
        .expect("invariant query")
        .into_iter()
        .map(|v| v.what)
        .collect()
}

/// One night of a confirmed reservation: (resource, user, night).
type BookedNight = (i64, i64, chrono::NaiveDate);

/// Every confirmed reservation as the nights it covers, one per night of each, a booking of one
/// day and a stay alike, and the resources' capacities.
fn confirmed_nights(db: &TestDb) -> (Vec<BookedNight>, HashMap<i64, i32>) {
    use haita::schema::{reservations::dsl as r, resources::dsl as s};
    let mut conn = db.raw_connection();
    let stays: Vec<(i64, i64, chrono::NaiveDate, chrono::NaiveDate)> = r::reservations
        .filter(r::status.eq("confirmed"))
        .select((r::resource_id, r::user_id, r::day, r::check_out))
        .load(&mut conn)
        .expect("confirmed reservations");
    let nights = stays
        .into_iter()
        .flat_map(|(resource, user, day, check_out)| {
            day.iter_days()
                .take_while(move |night| *night < check_out)
                .map(move |night| (resource, user, night))
        })
        .collect();
    let capacities = s::resources.select((s::id, s::capacity)).load(&mut conn).expect("capacities");
    (nights, capacities.into_iter().collect())
}

/// 1. No night of a resource is covered by more confirmed reservations than its capacity:
///    bookings of that day and stays that cover it, counted together.
pub fn no_day_over_capacity(db: &TestDb) {
    let (nights, capacity) = confirmed_nights(db);
    let mut counted: BTreeMap<(i64, chrono::NaiveDate), i32> = BTreeMap::new();
    for (resource, _, night) in nights {
        *counted.entry((resource, night)).or_default() += 1;
    }
    let found: Vec<String> = counted
        .into_iter()
        .filter(|((resource, _), n)| *n > capacity[resource])
        .map(|((resource, night), n)| {
            format!("resource {resource} on {night}: {n} confirmed, capacity {}", capacity[&resource])
        })
        .collect();
    assert!(found.is_empty(), "invariant 1 (capacity) violated: {found:?}");
}

/// 2. No user holds two confirmed reservations covering the same night of one resource.
pub fn no_user_booked_twice(db: &TestDb) {
    let (nights, _) = confirmed_nights(db);
    let mut counted: BTreeMap<(i64, i64, chrono::NaiveDate), i32> = BTreeMap::new();
    for key in nights {
        *counted.entry(key).or_default() += 1;
    }
    let found: Vec<String> = counted
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((resource, user, night), n)| format!("user {user} has {n} on resource {resource} {night}"))
        .collect();
    assert!(found.is_empty(), "invariant 2 (one per user and night) violated: {found:?}");
}

#[derive(QueryableByName)]
pub struct HeldLock {
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = BigInt)]
    pub connection_id: i64,
}

/// Named locks held right now by sessions connected to this test's database: on PostgreSQL, the
/// advisory locks of its sessions, named by key (a key does not tell its name).
pub fn named_locks_held(db: &TestDb) -> Vec<HeldLock> {
    if db.pool.engine() == haita::db::Engine::Postgres {
        return haita::db::cached_sql::<diesel::sql_types::Untyped>(
            "SELECT 'advisory key ' || ((CAST(l.classid AS BIGINT) << 32) | CAST(l.objid AS BIGINT)) AS name, \
             CAST(l.pid AS BIGINT) AS connection_id \
             FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND l.granted AND d.datname = ?",
        )
        .bind::<Text, _>(&db.name)
        .load(&mut db.raw_connection())
        .expect("list held advisory locks");
    }
    let mariadb = "SELECT m.TABLE_SCHEMA AS name, CAST(m.THREAD_ID AS SIGNED) AS connection_id \
         FROM information_schema.METADATA_LOCK_INFO m JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID \
         WHERE m.LOCK_TYPE = 'User lock' AND p.DB = ?";
    let mysql = "SELECT m.OBJECT_NAME AS name, CAST(t.PROCESSLIST_ID AS SIGNED) AS connection_id \
         FROM performance_schema.metadata_locks m JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID \
         WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK' AND t.PROCESSLIST_DB = ?";
    let mut conn = db.raw_connection();
    haita::db::cached_sql::<diesel::sql_types::Untyped>(mariadb)
        .bind::<Text, _>(&db.name)
        .load(&mut conn)
        .or_else(|_| {
            haita::db::cached_sql::<diesel::sql_types::Untyped>(mysql)
                .bind::<Text, _>(&db.name)
                .load(&mut conn)
        })
        .expect("list held named locks (MariaDB: INSTALL SONAME 'metadata_lock_info')")
}

/// Sessions of this test's database waiting now for a named lock that another session holds:
/// on MySQL a `GET_LOCK` that waits (state `User lock`), on PostgreSQL an advisory lock not yet
/// granted.
pub fn named_lock_waiters(db: &TestDb) -> i64 {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND STATE = 'User lock'",
        "SELECT COUNT(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = ?",
    ))
    .bind::<Text, _>(&db.name)
    .get_result::<Waiting>(&mut db.raw_connection())
    .expect("named lock waiters")
    .n
}

/// 5. After every request has completed, no pooled connection holds a named lock.
pub fn no_named_lock_left_held(db: &TestDb) {
    let held: Vec<String> = named_locks_held(db)
        .iter()
        .map(|l| format!("{} by connection {}", l.name, l.connection_id))
        .collect();
    assert!(held.is_empty(), "invariant 5 violated, named locks still held: {held:?}");
}

/// Users holding confirmed reservations of one resource that cover the night of `day`.
pub fn confirmed_users_on(db: &TestDb, resource_id: i64, day: chrono::NaiveDate) -> Vec<i64> {
    use haita::schema::reservations::dsl as r;
    r::reservations
        .filter(r::resource_id.eq(resource_id))
        .filter(r::day.le(day))
        .filter(r::check_out.gt(day))
        .filter(r::status.eq("confirmed"))
        .select(r::user_id)
        .load(&mut db.raw_connection())
        .expect("users")
}

/// Confirmed reservations of one resource that cover the night of `day`.
pub fn confirmed_on(db: &TestDb, resource_id: i64, day: chrono::NaiveDate) -> i64 {
    use haita::schema::reservations::dsl as r;
    r::reservations
        .filter(r::resource_id.eq(resource_id))
        .filter(r::day.le(day))
        .filter(r::check_out.gt(day))
        .filter(r::status.eq("confirmed"))
        .count()
        .get_result(&mut db.raw_connection())
        .expect("count")
}

/// Invariant 7: the holder of an edit lock, as (user id, session), or `None`. The primary key on
/// `lock_key` makes two rows impossible; tests check that the *right* one holds it.
pub fn edit_lock_owner(db: &TestDb, key: &str) -> Option<(i64, String)> {
    use haita::schema::edit_locks::dsl as l;
    l::edit_locks
        .filter(l::lock_key.eq(key))
        .select((l::owner_user_id, l::owner_session))
        .first(&mut db.raw_connection())
        .optional()
        .expect("edit lock owner")
}

pub fn edit_lock_expiry(db: &TestDb, key: &str) -> Option<chrono::NaiveDateTime> {
    use haita::schema::edit_locks::dsl as l;
    l::edit_locks
        .filter(l::lock_key.eq(key))
        .select(l::expires_at)
        .first(&mut db.raw_connection())
        .optional()
        .expect("edit lock expiry")
}

#[derive(QueryableByName)]
struct Expired {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    expired: bool,
}

#[derive(QueryableByName)]
struct Waiting {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// How often a test may read `information_schema.INNODB_TRX`, at the fastest. InnoDB refreshes
/// that table's cache only for a read that comes more than 100 ms after the previous read by
/// anyone on the server: polled faster, from one test or from several at once, it shows the same
/// old contents for ever, and a lock wait that began after the first read is never seen. Wide
/// enough that a few tests polling it at once still leave a long gap between two reads.
pub const INNODB_TRX_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether a transaction on this connection's database waits for a row lock now (InnoDB's
/// `LOCK WAIT`, PostgreSQL's `Lock` wait event). On MySQL, read it no more often than
/// [`INNODB_TRX_EVERY`].
pub fn a_transaction_waits_for_a_lock(conn: &mut haita::db::DbConn) -> bool {
    haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
        "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
        "SELECT COUNT(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    ))
    .get_result::<Waiting>(conn)
    .expect("lock waits")
    .n > 0
}

/// How often to poll [`a_transaction_waits_for_a_lock`] on `db`'s engine.
pub fn lock_wait_poll_interval(db: &TestDb) -> std::time::Duration {
    match db.pool.engine() {
        haita::db::Engine::Mysql => INNODB_TRX_EVERY,
        haita::db::Engine::Postgres => super::poll::INTERVAL,
    }
}

/// Waits (bounded) until a transaction on this test's database waits for a row lock: the
/// moment a request is known to be blocked behind a transaction the test holds open.
pub async fn wait_until_a_transaction_waits_for_a_lock(db: &TestDb) {
    let mut conn = db.raw_connection();
    // Bounded generously: on a loaded machine a request can take seconds to reach the database.
    super::poll::until_async_every(
        "a transaction to wait for a lock",
        std::time::Duration::from_secs(20),
        lock_wait_poll_interval(db),
        async || a_transaction_waits_for_a_lock(&mut conn),
    )
    .await;
}

/// Waits (bounded) until the database clock has passed the lock's expiry. Tests give the app a
/// short TTL and ask the database, never comparing wall-clock durations themselves. Asked on a
/// pooled connection: its session runs in UTC, like the app's that wrote the expiry (a raw
/// session's `NOW(6)` is in the server's own time zone).
pub fn wait_until_edit_lock_expired(db: &TestDb, key: &str) {
    let mut conn = db.conn();
    super::poll::until(
        &format!("edit lock {key} to expire by the database's clock"),
        std::time::Duration::from_secs(15),
        || {
            let state: Option<Expired> =
                haita::db::cached_sql::<diesel::sql_types::Untyped>(haita::db::Sql::per_engine(
                    "SELECT expires_at <= NOW(6) AS expired FROM edit_locks WHERE lock_key = ?",
                    "SELECT expires_at <= LOCALTIMESTAMP AS expired FROM edit_locks WHERE lock_key = ?",
                ))
                .bind::<Text, _>(key)
                .get_result(&mut conn)
                .optional()
                .expect("expiry");
            state.is_none_or(|s| s.expired)
        },
    );
}

/// The audit actions recorded about `subject`, oldest first.
pub fn audit_actions(db: &TestDb, subject: &str) -> Vec<String> {
    use haita::schema::audit_events::dsl as a;
    a::audit_events
        .filter(a::subject.eq(subject))
        .order(a::id)
        .select(a::action)
        .load(&mut db.raw_connection())
        .expect("audit")
}

/// (name, capacity, version) of a resource.
pub fn resource_row(db: &TestDb, id: i64) -> (String, i32, i32) {
    use haita::schema::resources::dsl as r;
    r::resources
        .filter(r::id.eq(id))
        .select((r::name, r::capacity, r::version))
        .first(&mut db.raw_connection())
        .expect("resource")
}

/// 3. `on_hand` never below 0 (the column is UNSIGNED) and equal to the sum of the product's
///    ledger; a product without a stock row has no ledger either.
pub fn stock_matches_ledger(db: &TestDb) {
    let mysql = "SELECT CONCAT('product ', p.id, ': on_hand ', COALESCE(s.on_hand, 'none'), ', ledger ', COALESCE(m.total, 'none')) AS what \
         FROM products p LEFT JOIN stock_levels s ON s.product_id = p.id \
         LEFT JOIN (SELECT product_id, SUM(delta) AS total FROM stock_movements GROUP BY product_id) m ON m.product_id = p.id \
         WHERE NOT (s.on_hand <=> m.total)";
    let postgres = "SELECT 'product ' || p.id || ': on_hand ' || COALESCE(CAST(s.on_hand AS TEXT), 'none') \
           || ', ledger ' || COALESCE(CAST(m.total AS TEXT), 'none') AS what \
         FROM products p LEFT JOIN stock_levels s ON s.product_id = p.id \
         LEFT JOIN (SELECT product_id, SUM(delta) AS total FROM stock_movements GROUP BY product_id) m ON m.product_id = p.id \
         WHERE s.on_hand IS DISTINCT FROM m.total";
    let found =
        violations(db, if db.pool.engine() == haita::db::Engine::Postgres { postgres } else { mysql });
    assert!(found.is_empty(), "invariant 3 (stock = ledger) violated: {found:?}");
}

/// 4. Each order's lines match its `-delta` ledger rows exactly, and no order exists without
///    lines (a failed order leaves no trace).
pub fn orders_match_ledger(db: &TestDb) {
    let found = violations(
        db,
        "SELECT CONCAT('order ', o.id, ' product ', COALESCE(l.product_id, m.product_id), \
                ': line ', COALESCE(CAST(l.quantity AS CHAR(12)), 'none'), \
                ', ledger ', COALESCE(CAST(-m.delta AS CHAR(12)), 'none')) AS what \
         FROM orders o \
         LEFT JOIN order_lines l ON l.order_id = o.id \
         LEFT JOIN stock_movements m ON m.order_id = o.id AND m.product_id = l.product_id \
         WHERE l.product_id IS NULL OR m.id IS NULL OR -m.delta <> l.quantity \
         UNION ALL \
         SELECT CONCAT('ledger row ', m.id, ' of order ', m.order_id, ' has no order line') \
         FROM stock_movements m LEFT JOIN order_lines l ON l.order_id = m.order_id AND l.product_id = m.product_id \
         WHERE m.order_id IS NOT NULL AND l.order_id IS NULL",
    );
    assert!(found.is_empty(), "invariant 4 (orders = ledger) violated: {found:?}");
}

/// Current stock of one product (0 when it has no stock row).
pub fn on_hand(db: &TestDb, product_id: i64) -> u32 {
    use haita::schema::stock_levels::dsl as s;
    s::stock_levels
        .find(product_id)
        .select(s::on_hand)
        .first::<i32>(&mut db.raw_connection())
        .optional()
        .expect("on_hand")
        .map_or(0, |n| u32::try_from(n).expect("on_hand is never negative"))
}
