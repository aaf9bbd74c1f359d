//! What a booking, an order and a hold read, counted by the server: every index entry and row
//! their statements touched. On MySQL/MariaDB the session's `Handler_read_*` counters (an index dive, each next
//! entry, each row of a scan) and, on MariaDB, the entries its engine turned down itself
//! (`Handler_icp_attempts` less `Handler_icp_match`); on PostgreSQL the database's
//! `idx_tup_read` and `seq_tup_read` (index entries the index returned and rows of sequential
//! scans, flushed with `pg_stat_force_next_flush`: an entry the B-tree rejects by a condition
//! of its own is not counted there, so the same booking reads fewer there).
//!
//! The budget (`figures::READS`) is what the booking's reads are about plus a fixed overhead:
//! the reservations that began in the fortnight up to the night (the day's count reads them
//! from the slot index: a stay of up to fourteen nights may cover the night), the user's
//! bookings not over yet (the quota), and the engine's constant share (the user's and the
//! resource's rows, the session, the closure, the insert's checks). What it must never read is
//! the rest of the history: the days before the fortnight and after the night, the user's past.
//! So the test books a night of a resource in the middle of eighty days of dense history, with a
//! user who has a long past, and the budget is far below the history: a count whose window
//! began sixty days before the night instead of thirteen read 825 entries on MariaDB against a
//! budget of 167.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Text};
use haita::auth::Role;
use haita::auth::session::Ticket;
use haita::bookings::model::BookingDate;
use haita::bookings::service as bookings;
use haita::db::{self, DbPool, Engine, cached_sql};
use haita::locking::Turn;

use crate::common::{TestDb, create_resource, create_user, log_in_directly, test_config};
use crate::figures;

/// Reservations starting on each day of the history, and cancelled ones beside them.
const STARTS_PER_DAY: i64 = 8;
const CANCELLED_PER_DAY: i64 = 2;
/// The history spans this many days on each side of the night booked.
const SPAN: i64 = 40;

/// The server's count of what was read, for the one connection of `pool`.
fn reads(pool: &DbPool) -> u64 {
    let mut conn = pool.get().expect("the pool's connection");
    match pool.engine() {
        Engine::Mysql => {
            // An entry that the engine itself rejects by a condition pushed down to it (index
            // condition pushdown) never reaches a `Handler_read_*` counter; MariaDB counts those
            // checks apart (`Handler_icp_attempts`, of which `Handler_icp_match` passed).
            let rows: Vec<(String, String)> = cached_sql::<(Text, Text)>(
                "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%' \
                 OR Variable_name IN ('Handler_icp_attempts', 'Handler_icp_match')",
            )
            .load(&mut *conn)
            .expect("status");
            let value =
                |name: &str| rows.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.parse::<u64>().ok());
            let handler: u64 = rows
                .iter()
                .filter(|(name, _)| name.starts_with("Handler_read"))
                .filter_map(|(_, value)| value.parse::<u64>().ok())
                .sum();
            let rejected =
                value("Handler_icp_attempts").unwrap_or(0) - value("Handler_icp_match").unwrap_or(0);
            handler + rejected
        }
        Engine::Postgres => {
            // A backend reports its counts when it goes idle, at most once a second unless told
            // to flush at the next chance; the statement after this one then reads them.
            conn.batch_execute("SELECT pg_stat_force_next_flush()").expect("flush");
            let read: i64 = cached_sql::<BigInt>(
                "SELECT CAST(COALESCE((SELECT SUM(idx_tup_read) FROM pg_stat_user_indexes), 0) \
                   + COALESCE((SELECT SUM(seq_tup_read) FROM pg_stat_user_tables), 0) AS BIGINT)",
            )
            .get_result(&mut *conn)
            .expect("statistics");
            u64::try_from(read).expect("a count")
        }
    }
}

/// What `work` read, less what reading the counters itself reads (measured with no work).
fn read_by(pool: &DbPool, work: impl FnOnce()) -> u64 {
    let counting = {
        let before = reads(pool);
        reads(pool) - before
    };
    let before = reads(pool);
    work();
    reads(pool) - before - counting
}

/// The fixed part of `name`'s read budget on `engine` (`figures::READS`).
fn overhead(name: &str, engine: &str) -> u64 {
    let budget = figures::READS.iter().find(|f| f.name == name);
    budget
        .and_then(|f| f.on_engine(engine))
        .unwrap_or_else(|| panic!("tests/it/figures.rs has no read budget {name:?}"))
}

/// Fresh statistics for `tables`, as a database that has lived has: a planner that still
/// believes them empty may scan them whole.
fn analyze(db: &TestDb, tables: &[&str]) {
    let sql = match db.pool.engine() {
        Engine::Mysql => format!("ANALYZE TABLE {}", tables.join(", ")),
        Engine::Postgres => format!("ANALYZE {}", tables.join(", ")),
    };
    db.raw_connection().batch_execute(&sql).expect("analyze");
}

fn book(pool: &DbPool, user: &Ticket, resource: i64, night: chrono::NaiveDate) -> bool {
    let date = BookingDate::parse(&night.to_string(), bookings::today()).expect("a day within the horizon");
    let turn = Turn::unqueued(pool.names().booking(resource, date.day()), Duration::from_secs(5));
    match bookings::book(pool, turn, user, resource, date, None, 30) {
        Ok(_) => true,
        Err(haita::bookings::BookingError::FullyBooked { .. }) => false,
        Err(other) => panic!("booking failed: {other}"),
    }
}

#[test]
fn a_booking_reads_its_fortnight_and_the_users_future_not_the_history_around_them() {
    let db = TestDb::new();
    let resource = create_resource(&db, "Busy hotel", 1000);
    let elsewhere = create_resource(&db, "Elsewhere", 1000);
    let guests: Vec<i64> =
        (0..20).map(|i| create_user(&db, &format!("guest{i}"), Role::Customer).id).collect();
    let booker = create_user(&db, "booker", Role::Customer).id;
    let today = bookings::today();
    let night = today + chrono::Days::new(60);
    // Eighty days of stays of 1 to 7 nights around the night, cancelled ones among them; and
    // the booker's own bookings: six not over yet elsewhere, four in the past.
    let mut rows = Vec::new();
    for offset in -SPAN..=SPAN {
        let day = night + chrono::TimeDelta::days(offset);
        for j in 0..STARTS_PER_DAY + CANCELLED_PER_DAY {
            let nights = (offset + j).rem_euclid(7) + 1;
            let status = if j < STARTS_PER_DAY { "confirmed" } else { "cancelled" };
            let user = guests[usize::try_from((offset + SPAN) * 3 + j).expect("positive") % guests.len()];
            rows.push(format!(
                "({resource}, {user}, '{day}', '{}', '{status}', '{day} 09:00:00')",
                day + chrono::TimeDelta::days(nights)
            ));
        }
    }
    for n in 1..=6 {
        let day = today + chrono::Days::new(n);
        rows.push(format!(
            "({elsewhere}, {booker}, '{day}', '{}', 'confirmed', '{day} 09:00:00')",
            day + chrono::Days::new(1)
        ));
    }
    for n in 1..=40 {
        let day = today - chrono::Days::new(n * 3);
        rows.push(format!(
            "({elsewhere}, {booker}, '{day}', '{}', 'confirmed', '{day} 09:00:00')",
            day + chrono::Days::new(1)
        ));
    }
    db.raw_connection()
        .batch_execute(&format!(
            "INSERT INTO reservations (resource_id, user_id, day, check_out, status, created_at) VALUES {}",
            rows.join(", ")
        ))
        .expect("the history");
    analyze(&db, &["reservations"]);
    // Every reservation that began in the fortnight up to the night, cancelled ones too: the
    // slot index's range that the day's count reads.
    let fortnight: i64 = cached_sql::<BigInt>(
        "SELECT COUNT(*) FROM reservations WHERE resource_id = ? AND day BETWEEN ? AND ?",
    )
    .bind::<BigInt, _>(resource)
    .bind::<Date, _>(haita::bookings::model::first_check_in_covering(night))
    .bind::<Date, _>(night)
    .get_result(&mut db.raw_connection())
    .expect("the fortnight's count");
    let history = i64::try_from(rows.len()).expect("a count");

    let user = log_in_directly(&db, booker);
    let pool = db::build_pool(&haita::config::Config { pool_size: 1, ..test_config(&db.url) }).expect("pool");
    // Warm the connection's statement cache on another night; then the night itself.
    assert!(book(&pool, &user, resource, night + chrono::Days::new(1)));
    let read = read_by(&pool, || assert!(book(&pool, &user, resource, night)));

    let engine = match pool.engine() {
        Engine::Mysql => "mysql",
        Engine::Postgres => "postgres",
    };
    let overhead = overhead("booking", engine);
    // The user's bookings not over yet: six elsewhere and the warm-up.
    let held = 7;
    let budget = u64::try_from(fortnight + held).expect("a count") + overhead;
    eprintln!(
        "a booking read {read} (budget {budget}: the fortnight's {fortnight} reservations, the user's \
         {held} future bookings, {overhead} more) among {history} reservations"
    );
    assert!(
        read <= budget,
        "a booking read {read} entries, more than the fortnight's {fortnight} reservations, the user's \
         {held} future bookings and {overhead}: it reads the history around them"
    );
    assert!(
        budget * 2 < u64::try_from(history).expect("a count"),
        "the history is no bigger than the budget"
    );
}

/// Holds in the history of the product ordered: half released, half expired.
const HOLDS: usize = 4000;

/// An order and a hold read the stock row, the product's live holds (`stock_holds_live`: not
/// ended, not expired), the user's row and their orders of the last minute: never the holds that
/// ended or expired, nor the user's older orders. Each one's budget is the live holds it counts
/// plus its own overhead; the history beside them is many times that. (With the orders table as
/// small as one customer's orders, PostgreSQL read it whole, 917 rows for one order: a plan
/// for a table that small, which a table of many customers' orders does not get.)
#[test]
fn an_order_and_a_hold_read_the_live_holds_not_the_ended_ones() {
    use haita::holds::model::{HoldLength, HoldRequest};
    use haita::orders::model::Cart;
    let db = TestDb::new();
    let customer = create_user(&db, "buyer", Role::Customer).id;
    let others: Vec<i64> =
        (0..4).map(|i| create_user(&db, &format!("other{i}"), Role::Customer).id).collect();
    let product = crate::common::create_product(&db, "READS-1", 250, 100_000);
    // Holds released, holds expired without an end, two live ones of other customers.
    // The database's clock `hours` from now, in UTC as the app reads it, in the engine's words.
    let at = |hours: i64| match db.pool.engine() {
        Engine::Mysql => format!("UTC_TIMESTAMP(6) + INTERVAL {hours} HOUR"),
        Engine::Postgres => format!("LOCALTIMESTAMP + INTERVAL '{hours} hours'"),
    };
    let mut holds = Vec::new();
    for i in 0..HOLDS {
        let user = others[i % others.len()];
        let (expires, ended) = if i < HOLDS / 2 {
            (at(1), format!("'released', {}", at(0)))
        } else {
            (at(-1), "NULL, NULL".into())
        };
        holds.push(format!("({product}, {user}, 1, {}, {expires}, {ended})", at(-2)));
    }
    for user in &others[..2] {
        holds.push(format!("({product}, {user}, 1, {}, {}, NULL, NULL)", at(0), at(1)));
    }
    // The customer's 300 orders of the days before, and the other customers' many: a table as
    // small as one customer's orders is read whole by PostgreSQL's planner, rightly.
    let orders: Vec<String> = (1..=HOLDS)
        .map(|i| {
            let user = if i <= 300 { customer } else { others[i % others.len()] };
            format!("({user}, {}, 250)", at(-i64::try_from(i % 300 + 1).expect("small")))
        })
        .collect();
    let sql = format!(
        "INSERT INTO stock_holds (product_id, user_id, quantity, created_at, expires_at, ended, ended_at) VALUES {}; \
         INSERT INTO orders (user_id, created_at, total_cents) VALUES {}",
        holds.join(", "),
        orders.join(", ")
    );
    db.raw_connection().batch_execute(&sql).expect("the history");
    analyze(&db, &["stock_holds", "orders"]);
    let live = 2;

    let pool = db::build_pool(&haita::config::Config { pool_size: 1, ..test_config(&db.url) }).expect("pool");
    let order = || {
        let cart = Cart::parse(&[(product, 1)]).expect("cart");
        haita::orders::service::place_order(&pool, &Default::default(), customer, &cart, None, 100)
            .expect("order");
    };
    let request =
        HoldRequest::parse(product, 1, HoldLength::full(Duration::from_secs(600))).expect("a hold request");
    let hold = || {
        let id = haita::holds::service::hold(&pool, customer, &request, &crate::common::NO_HOLD_LIMITS, None)
            .expect("hold")
            .id;
        haita::holds::service::release(&mut pool.get().expect("the connection"), customer, id)
            .expect("release");
    };
    // Warm the statement cache; the warm-up order is one of the last minute from then on.
    order();
    hold();
    let engine = match pool.engine() {
        Engine::Mysql => "mysql",
        Engine::Postgres => "postgres",
    };
    for (name, read, counted) in
        [("order", read_by(&pool, order), live + 1), ("hold_and_release", read_by(&pool, hold), live)]
    {
        let overhead = overhead(name, engine);
        let budget = counted + overhead;
        eprintln!(
            "{name} read {read} (budget {budget}: {counted} live holds and recent orders, {overhead} more)"
        );
        assert!(
            read <= budget,
            "{name} read {read} entries, more than {budget}: it reads ended holds or old orders"
        );
        assert!(budget * 4 < HOLDS as u64, "the history is no bigger than the budget");
    }
}
