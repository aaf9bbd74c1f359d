//! What the hot paths cost the server, counted by the server: in steady state nothing is
//! prepared (every statement is reused from the connection's cache) and a booking takes at most
//! eight statements: `GET_LOCK`, the transaction (its first statement locks the user's row, for
//! the per-user quota), `RELEASE_LOCK` on MySQL; on PostgreSQL seven,
//! its lock being transaction-scoped (`pg_try_advisory_xact_lock` inside the transaction, no
//! release to send). `LAST_INSERT_ID()` is `lastval()` there.
//!
//! Each test runs the real service functions on a pool of exactly one connection, so that the
//! counters of that one session (MySQL's `SHOW SESSION STATUS`; on PostgreSQL, see
//! [`Commands::of_postgres`]) are exactly the work done.
//! The first round warms the connection's statement cache; the rounds after it are measured.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use haita::auth::session::Ticket;
use haita::bookings::model::BookingDate;
use haita::bookings::service as bookings;
use haita::db::{self, DbPool, Engine, cached_sql};
use haita::locking::Turn;

use crate::common::{TestDb, create_resource, create_user, log_in_directly, on_both_engines, test_config};
use crate::figures;

/// One connection, so the session's counters are the pool's.
fn single_connection_pool(db: &TestDb) -> DbPool {
    db::build_pool(&haita::config::Config { pool_size: 1, ..test_config(&db.url) }).expect("pool")
}

/// The session's command counters.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Commands {
    /// Commands run (`Questions`): prepared executions, plain queries, and the multi-statement
    /// switches diesel's `batch_execute` sends around each of its queries.
    statements: u64,
    prepares: u64,
    closes: u64,
}

impl Commands {
    /// Read on the pool's one connection, with a statement that is itself cached (so it adds
    /// no prepare) and counts one statement, which [`Commands::of`] subtracts.
    fn read(pool: &DbPool) -> Self {
        let rows: Vec<(String, String)> = cached_sql::<(Text, Text)>(
            "SHOW SESSION STATUS WHERE Variable_name IN ('Com_stmt_prepare', 'Com_stmt_close', 'Questions')",
        )
        .load(&mut *pool.get().expect("the pool's connection"))
        .expect("session status");
        let value = |name: &str| {
            rows.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0)
        };
        // Questions counts both plain queries and prepared executions.
        Self {
            statements: value("Questions"),
            prepares: value("Com_stmt_prepare"),
            closes: value("Com_stmt_close"),
        }
    }

    /// Asserts that nothing was prepared (or closed) and that exactly `statements` ran.
    fn assert_cached(&self, statements: u64) {
        assert_eq!((self.prepares, self.closes), (0, 0), "something was prepared: {self:?}");
        assert_eq!(self.statements, statements, "{self:?}");
    }

    /// Runs `work` and returns what the session did for it.
    fn of(pool: &DbPool, work: impl FnOnce()) -> Self {
        if pool.engine() == Engine::Postgres {
            return Self::of_postgres(pool, work);
        }
        let before = Self::read(pool);
        work();
        let after = Self::read(pool);
        Self {
            // The SHOW that read `after` is counted in `after`: one query to subtract.
            statements: after.statements - before.statements - 1,
            prepares: after.prepares - before.prepares,
            closes: after.closes - before.closes,
        }
    }

    /// PostgreSQL keeps no per-session statement counter without an extension, so there the
    /// statements are counted as diesel runs them ([`haita::db::statements_run`], `BEGIN` and
    /// `COMMIT` included). What was prepared is still the server's word: its
    /// `pg_prepared_statements` lists the session's named statements with their `prepare_time`,
    /// so one prepared during the work is newer than the clock read before it, and one closed
    /// has left the list. (A statement diesel does not cache runs as the unnamed statement,
    /// which that view does not show; the MySQL run of these tests is the one that sees those.)
    fn of_postgres(pool: &DbPool, work: impl FnOnce()) -> Self {
        #[derive(QueryableByName)]
        struct Prepared {
            #[diesel(sql_type = Text)]
            now: String,
            #[diesel(sql_type = BigInt)]
            newer: i64,
            #[diesel(sql_type = BigInt)]
            total: i64,
        }
        let read = |since: &str| -> (Prepared, u64) {
            let mut conn = pool.get().expect("the pool's connection");
            let prepared = cached_sql::<diesel::sql_types::Untyped>(
                "SELECT CAST(clock_timestamp() AS TEXT) AS now, \
                   COUNT(*) FILTER (WHERE prepare_time > CAST(? AS TIMESTAMPTZ)) AS newer, COUNT(*) AS total \
                 FROM pg_prepared_statements",
            )
            .bind::<Text, _>(since)
            .get_result(&mut *conn)
            .expect("prepared statements");
            (prepared, haita::db::statements_run(&mut conn).expect("a pooled connection"))
        };
        let (before, run_before) = read("-infinity");
        work();
        let (after, run_after) = read(&before.now);
        Self {
            // The read of `after` is counted in `run_after`: one statement to subtract.
            statements: run_after - run_before - 1,
            prepares: u64::try_from(after.newer).expect("a count"),
            closes: u64::try_from(before.total + after.newer - after.total).expect("a count"),
        }
    }
}

/// The figure `name` of `tests/it/figures.rs` (the pages state the same numbers) on the pool's
/// engine.
fn figure(pool: &DbPool, name: &str) -> u64 {
    let engine = match pool.engine() {
        Engine::Mysql => "mysql",
        Engine::Postgres => "postgres",
    };
    figures::statements(name).on_engine(engine).expect("a figure per engine")
}

/// The day `n` days from today, as the booking form sends it.
fn day(n: u64) -> String {
    (bookings::today() + chrono::Days::new(n)).to_string()
}

fn book(pool: &DbPool, user: &Ticket, resource_id: i64, days_ahead: u64) -> Result<(), bookings::Verdict> {
    let date = BookingDate::parse(&day(days_ahead), bookings::today()).expect("valid day");
    let turn = Turn::unqueued(pool.names().booking(resource_id, date.day()), Duration::from_secs(5));
    match bookings::book(pool, turn, user, resource_id, date, None, 30) {
        Ok(_) => Ok(()),
        Err(haita::bookings::BookingError::FullyBooked { .. }) => Err(bookings::Verdict::FullyBooked),
        Err(haita::bookings::BookingError::AlreadyBooked) => Err(bookings::Verdict::AlreadyBooked),
        Err(haita::bookings::BookingError::SessionEnded) => Err(bookings::Verdict::SessionEnded),
        Err(other) => panic!("booking failed: {other}"),
    }
}

/// Includes the session check: the day's read checks the booking's ticket too.
#[test]
fn a_booking_prepares_nothing_in_steady_state_and_takes_eight_statements() {
    let db = TestDb::new();
    let user = log_in_directly(&db, create_user(&db, "counted", haita::auth::Role::Customer).id);
    let other = log_in_directly(&db, create_user(&db, "other", haita::auth::Role::Customer).id);
    let gone = log_in_directly(&db, create_user(&db, "gone", haita::auth::Role::Customer).id);
    let resource = create_resource(&db, "Counted room", 1);
    let pool = single_connection_pool(&db);
    book(&pool, &user, resource, 1).expect("warm-up booking");
    assert_eq!(book(&pool, &other, resource, 1), Err(bookings::Verdict::FullyBooked), "warm-up refusal");
    haita::db::cached_sql::<diesel::sql_types::Untyped>("DELETE FROM user_sessions WHERE id = ?")
        .bind::<Text, _>(gone.session_id())
        .execute(&mut db.raw_connection())
        .expect("log out elsewhere");
    assert_eq!(book(&pool, &gone, resource, 2), Err(bookings::Verdict::SessionEnded), "warm-up");

    let booked = Commands::of(&pool, || {
        for day in 2..=11 {
            book(&pool, &user, resource, day).expect("a free day");
        }
    });
    // GET_LOCK, START TRANSACTION, the user's row FOR UPDATE (the quota), the day's read,
    // INSERT, LAST_INSERT_ID, COMMIT, RELEASE_LOCK.
    booked.assert_cached(10 * figure(&pool, "booking"));

    let refused = Commands::of(&pool, || {
        for day in 2..=11 {
            assert_eq!(book(&pool, &other, resource, day), Err(bookings::Verdict::FullyBooked));
        }
    });
    // GET_LOCK, START TRANSACTION, the user's row, the day's read, ROLLBACK, RELEASE_LOCK.
    refused.assert_cached(10 * figure(&pool, "booking_refused"));

    let ended = Commands::of(&pool, || {
        for day in 12..=21 {
            assert_eq!(book(&pool, &gone, resource, day), Err(bookings::Verdict::SessionEnded));
        }
    });
    // The same six, and the sessions' own check once the day's read counted one short.
    ended.assert_cached(10 * figure(&pool, "booking_session_ended"));
}

/// An idempotency key costs its claim and its answer; a resend costs the user's row lock, the
/// claim and one read.
#[test]
fn a_keyed_booking_takes_two_statements_more_and_its_resend_seven() {
    use haita::idempotency::IdempotencyKey;
    let db = TestDb::new();
    let user = log_in_directly(&db, create_user(&db, "keyed", haita::auth::Role::Customer).id);
    let resource = create_resource(&db, "Keyed room", 1);
    let pool = single_connection_pool(&db);
    let keyed = |days_ahead: u64| {
        let date = BookingDate::parse(&day(days_ahead), bookings::today()).expect("valid day");
        let turn = Turn::unqueued(pool.names().booking(resource, date.day()), Duration::from_secs(5));
        let once = IdempotencyKey::parse(&format!("key-{days_ahead}"))
            .expect("key")
            .bind(user.user_id(), &format!("book {resource} {days_ahead}"));
        bookings::book(&pool, turn, &user, resource, date, Some(&once), 30).expect("booked or replayed").id
    };
    keyed(1);
    keyed(1);

    let (mut booked, mut replayed) = (Vec::new(), Vec::new());
    let fresh = Commands::of(&pool, || booked.extend((2..=11).map(keyed)));
    // GET_LOCK, START TRANSACTION, the user's row, the claim, the day's read, INSERT,
    // LAST_INSERT_ID, the answer, COMMIT, RELEASE_LOCK.
    fresh.assert_cached(10 * figure(&pool, "booking_keyed"));

    let resent = Commands::of(&pool, || replayed.extend((2..=11).map(keyed)));
    // GET_LOCK, START TRANSACTION, the user's row, the claim (a duplicate), the stored answer,
    // COMMIT, RELEASE_LOCK.
    resent.assert_cached(10 * figure(&pool, "booking_keyed_resend"));
    assert_eq!(replayed, booked, "each resend answers its first booking");
}

#[test]
fn a_batch_of_bookings_prepares_nothing_in_steady_state() {
    let db = TestDb::new();
    let users: Vec<Ticket> = (0..5)
        .map(|i| log_in_directly(&db, create_user(&db, &format!("batch{i}"), haita::auth::Role::Customer).id))
        .collect();
    let resource = create_resource(&db, "Batch room", 3);
    let pool = single_connection_pool(&db);
    let batch = |days_ahead: u64| {
        let date = BookingDate::parse(&day(days_ahead), bookings::today()).expect("valid day");
        let turn = Turn::unqueued(pool.names().booking(resource, date.day()), Duration::from_secs(5));
        let answers =
            haita::bookings::batch::book_batch(&pool, turn, resource, date, &users, 30).expect("batch");
        assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 3, "capacity 3");
    };
    batch(1);
    let counted = Commands::of(&pool, || (2..=6).for_each(batch));
    // GET_LOCK, START TRANSACTION, the users' rows FOR UPDATE, three reads (the day, the other
    // users' bookings that day, their future bookings for the quota), three INSERTs with their
    // LAST_INSERT_ID, COMMIT, RELEASE_LOCK.
    counted.assert_cached(5 * figure(&pool, "booking_batch_of_five"));
}

/// A request alone at its day, with coalescing on (the default), runs through the coalescer
/// exactly as a JSON booking without a key does, and the coalescer books it with the lesson,
/// [`bookings::book`]: the same statements, counted by the server. Only requests that queued
/// behind one another form a batch.
#[test]
fn a_lone_booking_through_the_coalescer_sends_the_lessons_statements() {
    use haita::bookings::coalesce;
    let db = TestDb::new();
    let user = log_in_directly(&db, create_user(&db, "alone", haita::auth::Role::Customer).id);
    let resource = create_resource(&db, "Alone room", 1);
    let pool = single_connection_pool(&db);
    let door = haita::db::OffExecutor::new(pool.clone(), haita::metrics::Metrics::new());
    let locks = std::sync::Arc::new(haita::locking::LockQueue::new(4));
    let coalescer = std::sync::Arc::new(coalesce::coalescer(door, locks.clone(), 30, locks.cutoff().clone()));
    let alone = |days_ahead: u64| {
        let date = BookingDate::parse(&day(days_ahead), bookings::today()).expect("valid day");
        let booked = actix_web::rt::System::new().block_on(coalesce::book(
            &coalescer,
            Duration::from_secs(5),
            user.clone(),
            resource,
            date,
        ));
        booked.expect("a free day");
    };
    alone(1);
    let counted = Commands::of(&pool, || (2..=11).for_each(alone));
    // GET_LOCK, START TRANSACTION, the user's row FOR UPDATE, the day's read, INSERT,
    // LAST_INSERT_ID, COMMIT, RELEASE_LOCK: the lesson's.
    counted.assert_cached(10 * figure(&pool, "booking"));
}

on_both_engines!(
    a_stay_of_n_nights_takes_one_statement_more_per_night,
    a_stay_of_n_nights_takes_one_statement_more_per_night_on_postgres => stays_counted
);

/// A stay takes each night's lock, one statement per night, and otherwise the statements of one
/// booking and one read more (the nights are read apart from the resource). On MySQL their
/// release is one statement however many there are (`RELEASE_ALL_LOCKS()`); on PostgreSQL the
/// COMMIT lets go of them. So a stay of n nights costs n + `stay` statements, a refused one
/// n + `stay_refused`.
async fn stays_counted(db: TestDb) {
    use haita::bookings::BookingError;
    use haita::bookings::model::Stay;
    use haita::bookings::stays;
    use haita::locking::TurnsInOrder;
    let guest = log_in_directly(&db, create_user(&db, "guest", haita::auth::Role::Customer).id);
    let other = log_in_directly(&db, create_user(&db, "other", haita::auth::Role::Customer).id);
    let resource = create_resource(&db, "Counted guest room", 1);
    let pool = single_connection_pool(&db);
    let stay = |user: &Ticket, from: u64, nights: u64| {
        let stay = Stay::parse(&day(from), &day(from + nights), bookings::today()).expect("a stay");
        let turns =
            TurnsInOrder::unqueued(stays::night_locks(pool.names(), resource, stay), Duration::from_secs(5));
        stays::book_stay(&pool, turns, user, resource, stay, None, 30)
    };
    stay(&guest, 1, 2).expect("warm-up stay");
    assert!(matches!(stay(&other, 1, 2), Err(BookingError::NightFull { .. })), "warm-up refusal");

    for (from, nights) in [(10, 2), (20, 5), (40, 14)] {
        let booked = Commands::of(&pool, || {
            stay(&guest, from, nights).expect("free nights");
        });
        // n × GET_LOCK, START TRANSACTION, the user's row FOR UPDATE, the resource, the nights,
        // INSERT, LAST_INSERT_ID, COMMIT, RELEASE_ALL_LOCKS().
        booked.assert_cached(nights + figure(&pool, "stay"));
        let refused = Commands::of(&pool, || {
            assert!(matches!(stay(&other, from, nights), Err(BookingError::NightFull { .. })));
        });
        // n × GET_LOCK, START TRANSACTION, the user's row, the resource, the nights, ROLLBACK,
        // RELEASE_ALL_LOCKS().
        refused.assert_cached(nights + figure(&pool, "stay_refused"));
    }
}

#[test]
fn an_order_and_a_receipt_prepare_nothing_in_steady_state() {
    use haita::inventory::model::Quantity;
    use haita::orders::model::Cart;
    let db = TestDb::new();
    let customer = create_user(&db, "buyer", haita::auth::Role::Customer);
    let staff = create_user(&db, "keeper", haita::auth::Role::Staff);
    let product = crate::common::create_product(&db, "COUNT-1", 250, 100);
    let pool = single_connection_pool(&db);
    let order = || {
        let cart = Cart::parse(&[(product, 1)]).expect("cart");
        haita::orders::service::place_order(&pool, &Default::default(), customer.id, &cart, None, 100)
            .expect("order");
    };
    let receive = || {
        let turn = Turn::unqueued(pool.names().stock(product), Duration::from_secs(5));
        let one = Quantity::parse(1, 100).expect("quantity");
        haita::inventory::service::receive(&pool, turn, staff.id, product, one).expect("receipt");
    };
    order();
    receive();

    let ordered = Commands::of(&pool, || (0..10).for_each(|_| order()));
    // START TRANSACTION, the user's row FOR UPDATE and the user's orders of the last minute
    // (the rate), the catalog, the stock row FOR UPDATE and the product's live holds, UPDATE,
    // INSERT order, its id, INSERT line, INSERT ledger movement, COMMIT.
    ordered.assert_cached(10 * figure(&pool, "order"));

    let received = Commands::of(&pool, || (0..10).for_each(|_| receive()));
    // The product's existence, GET_LOCK, SET TRANSACTION ISOLATION LEVEL READ COMMITTED (no gap
    // locks: the named lock serialises the product), START TRANSACTION, the stock row FOR UPDATE,
    // UPDATE, INSERT movement, LAST_INSERT_ID, COMMIT, RELEASE_LOCK.
    received.assert_cached(10 * figure(&pool, "receipt"));
}

/// Orders coalesced on one product (`orders::batch::order_batch`): one transaction for the
/// batch, whose orders, lines and ledger movements are each written by one statement, so twelve
/// statements and one commit whether the batch holds one order or five (or 32).
#[test]
fn a_batch_of_orders_prepares_nothing_in_steady_state_and_takes_twelve_statements_however_long() {
    use haita::orders::batch::{BatchedOrder, order_batch};
    use haita::orders::coalesce;
    use haita::orders::model::Cart;
    let db = TestDb::new();
    let buyers: Vec<i64> =
        (0..5).map(|i| create_user(&db, &format!("batched{i}"), haita::auth::Role::Customer).id).collect();
    let product = crate::common::create_product(&db, "COUNT-BATCH", 250, 1000);
    let pool = single_connection_pool(&db);
    let batch = |buyers: &[i64]| {
        let line = Cart::parse(&[(product, 1)]).expect("cart").lines()[0];
        let orders: Vec<BatchedOrder> =
            buyers.iter().map(|&user| BatchedOrder::new(user, line, None)).collect();
        let batched = order_batch(&pool, &Default::default(), product, &orders, 100).expect("batch");
        assert!(batched.answers.iter().all(Result::is_ok), "every order placed");
    };
    batch(&buyers);

    let five = Commands::of(&pool, || (0..5).for_each(|_| batch(&buyers)));
    // START TRANSACTION, the users' rows FOR UPDATE, the catalog, the users' orders of the last
    // minute, the stock row FOR UPDATE and its live holds, INSERT the orders, their ids, INSERT
    // their lines, INSERT their ledger movements, one UPDATE of the stock row, COMMIT.
    five.assert_cached(5 * figure(&pool, "order_batch_of_five"));

    // An order alone at its product, through the coalescer as an order request goes: the
    // lesson's twelve, `place_order`'s.
    let door = haita::db::OffExecutor::new(pool.clone(), haita::metrics::Metrics::new());
    let coalescer = std::sync::Arc::new(coalesce::coalescer(door, 1000, haita::locking::Cutoff::default()));
    let alone = || {
        let cart = Cart::parse(&[(product, 1)]).expect("cart");
        let order = coalesce::order(&coalescer, Duration::from_secs(5), buyers[0], cart, None);
        actix_web::rt::System::new().block_on(order).expect("placed");
    };
    alone();
    let counted = Commands::of(&pool, || (0..10).for_each(|_| alone()));
    counted.assert_cached(10 * figure(&pool, "order"));
    assert_eq!(figure(&pool, "order_batch_of_five"), figure(&pool, "order"));
}

#[test]
fn a_hold_and_an_order_from_it_prepare_nothing_in_steady_state() {
    use haita::holds::model::{HoldLength, HoldRequest};
    let db = TestDb::new();
    let customer = create_user(&db, "holder", haita::auth::Role::Customer);
    let product = crate::common::create_product(&db, "COUNT-H", 250, 100);
    let pool = single_connection_pool(&db);
    let request =
        HoldRequest::parse(product, 1, HoldLength::full(Duration::from_secs(600))).expect("a hold request");
    let hold = || {
        haita::holds::service::hold(&pool, customer.id, &request, &crate::common::NO_HOLD_LIMITS, None)
            .expect("hold")
            .id
    };
    let order = |id| {
        haita::holds::service::order_from_hold(&pool, customer.id, id, None, 100).expect("order from hold");
    };
    order(hold());

    let (mut held, mut ordered) = (Commands::default(), Commands::default());
    for _ in 0..10 {
        let mut id = 0;
        let one = Commands::of(&pool, || id = hold());
        let other = Commands::of(&pool, || order(id));
        for (total, one) in [(&mut held, one), (&mut ordered, other)] {
            total.statements += one.statements;
            total.prepares += one.prepares;
            total.closes += one.closes;
        }
    }
    // START TRANSACTION, the product's name, the stock row FOR UPDATE, its live holds, the
    // customer's own live hold, INSERT, its id, COMMIT.
    held.assert_cached(10 * figure(&pool, "hold"));
    // The order's own path, and around it the user's row and rate, the hold's product, the stock
    // row and the hold FOR UPDATE, the hold marked used and given its order.
    ordered.assert_cached(10 * figure(&pool, "order_from_hold"));
}

#[test]
fn an_edit_lock_prepares_nothing_in_steady_state() {
    use haita::edit_locks::service::{self as edit_locks, Policy};
    use haita::edit_locks::{EditLockKey, Owner};
    let db = TestDb::new();
    let staff = create_user(&db, "editor", haita::auth::Role::Staff);
    let resource = create_resource(&db, "Edited room", 1);
    let pool = single_connection_pool(&db);
    let key = EditLockKey::resource(resource);
    let owner = Owner { user_id: staff.id, session: "counted-session".into() };
    let ttl = Duration::from_secs(60);
    let cycle = || {
        let turn = Turn::unqueued(pool.names().edit_lock(key.as_str()), Duration::from_secs(5));
        edit_locks::acquire(&pool, turn, ttl, &key, &owner, Policy::FreeOrMine).expect("acquire");
        edit_locks::heartbeat(&mut pool.get().expect("conn"), ttl, &key, &owner, None).expect("heartbeat");
        assert!(
            edit_locks::release(&mut pool.get().expect("conn"), &key, &owner, None, edit_locks::BY_ITS_OWNER)
                .expect("release")
        );
    };
    cycle();
    let counted = Commands::of(&pool, || (0..5).for_each(|_| cycle()));
    // Acquire: GET_LOCK, SET TRANSACTION ISOLATION LEVEL READ COMMITTED, START TRANSACTION, the
    // row FOR UPDATE, the next epoch, INSERT, the lock as shown, the audit event, COMMIT,
    // RELEASE_LOCK. Heartbeat: UPDATE, the lock as shown. Release: START TRANSACTION, DELETE, the
    // audit event, COMMIT.
    let parts = ["edit_lock_acquire", "edit_lock_heartbeat", "edit_lock_release"];
    let cycle = figure(&pool, "edit_lock_cycle");
    assert_eq!(parts.iter().map(|p| figure(&pool, p)).sum::<u64>(), cycle, "figures.rs adds up");
    counted.assert_cached(5 * cycle);
}

/// `cached_sql` binds each value to its placeholder, in order, and a count that does not match
/// the placeholders is an error before anything is sent.
#[test]
fn cached_sql_binds_each_value_to_its_placeholder_and_refuses_a_mismatch() {
    use diesel::sql_types::BigInt;
    let db = TestDb::new();
    let mut conn = db.raw_connection();
    let matched: i64 =
        cached_sql::<BigInt>("SELECT CASE WHEN ? = 'x' AND 1 IN (?, ?) AND ? = 3 THEN ? ELSE 0 END")
            .bind::<Text, _>("x")
            .bind_each::<BigInt, _>([1i64, 2])
            .bind::<BigInt, _>(3i64)
            .bind::<BigInt, _>(7i64)
            .get_result(&mut conn)
            .expect("bound in order");
    assert_eq!(matched, 7);
    let too_few = cached_sql::<BigInt>("SELECT ? + ?").bind::<BigInt, _>(1i64).get_result::<i64>(&mut conn);
    let too_many =
        cached_sql::<BigInt>("SELECT ?").bind_each::<BigInt, _>([1i64, 2]).get_result::<i64>(&mut conn);
    for refused in [too_few, too_many] {
        assert!(
            matches!(&refused, Err(diesel::result::Error::QueryBuilderError(e)) if e.to_string().contains("cached_sql")),
            "{refused:?}"
        );
    }
    let exact = cached_sql::<BigInt>("SELECT ? + 1").bind::<BigInt, _>(1i64).get_result::<i64>(&mut conn);
    assert_eq!(exact.expect("one value, one placeholder"), 2);
}
