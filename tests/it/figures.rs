//! Statements per request, in one place. `statements.rs` asserts each against the server's own
//! counters, and the docs test (`tests/docs`) checks every page that states one, where the
//! number is marked `<!-- figure: booking.mysql -->8<!-- /figure -->`. Change a path's
//! statements and its figure here, and `scripts/dev docs` rewrites the pages.
//!
//! Included by both test crates with `#[path]`, so it is plain data and one lookup.

/// One request's statements on each engine, in steady state (every statement cached).
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    pub name: &'static str,
    /// On MySQL/MariaDB (`Questions`).
    pub mysql: u64,
    /// On PostgreSQL (as diesel runs them, `BEGIN` and `COMMIT` included).
    pub postgres: u64,
}

/// MySQL sends `RELEASE_LOCK` after a booking's or a receipt's COMMIT, and `SET TRANSACTION
/// ISOLATION LEVEL READ COMMITTED` before a transaction that must take no gap locks; on
/// PostgreSQL the lock is transaction-scoped and sessions are at READ COMMITTED already.
pub const STATEMENTS: &[Figure] = &[
    // GET_LOCK, START TRANSACTION, the user's row FOR UPDATE (the quota), the day's read, INSERT,
    // LAST_INSERT_ID, COMMIT, RELEASE_LOCK.
    Figure { name: "booking", mysql: 8, postgres: 7 },
    // GET_LOCK, START TRANSACTION, the user's row, the day's read, ROLLBACK, RELEASE_LOCK.
    Figure { name: "booking_refused", mysql: 6, postgres: 5 },
    // The same six, and which sessions ended.
    Figure { name: "booking_session_ended", mysql: 7, postgres: 6 },
    // A booking, its idempotency key's claim and its stored answer.
    Figure { name: "booking_keyed", mysql: 10, postgres: 9 },
    // GET_LOCK, START TRANSACTION, the user's row, the claim (a duplicate), the stored answer,
    // COMMIT, RELEASE_LOCK.
    Figure { name: "booking_keyed_resend", mysql: 7, postgres: 6 },
    // Five requests on a day with three places: GET_LOCK, START TRANSACTION, the users' rows,
    // three reads (the day, the others' bookings that day, their future bookings), three INSERTs
    // with their ids, COMMIT, RELEASE_LOCK.
    Figure { name: "booking_batch_of_five", mysql: 14, postgres: 14 },
    // A stay of n nights takes n statements more than this, one lock per night: START
    // TRANSACTION, the user's row, the resource, the nights, INSERT, LAST_INSERT_ID, COMMIT, and
    // on MySQL RELEASE_ALL_LOCKS() (one statement for all the nights' locks).
    Figure { name: "stay", mysql: 8, postgres: 7 },
    // A refused stay: n locks and START TRANSACTION, the user's row, the resource, the nights,
    // ROLLBACK, RELEASE_ALL_LOCKS().
    Figure { name: "stay_refused", mysql: 6, postgres: 5 },
    // START TRANSACTION, the user's row FOR UPDATE, their orders of the last minute, the
    // catalog, the stock row FOR UPDATE, the product's live holds, UPDATE, the order, its id
    // (read back), its line, its ledger movement, COMMIT (an order of several products: one more
    // FOR UPDATE, live holds and UPDATE each).
    Figure { name: "order", mysql: 12, postgres: 12 },
    // Coalesced single-line orders of one product, all of a batch's in one transaction: START
    // TRANSACTION, the users' rows, the catalog, their orders of the last minute, the stock row
    // FOR UPDATE, its live holds, the orders (one INSERT for all), their ids, their lines, their
    // ledger movements, one UPDATE of the stock row, COMMIT: twelve, for one order or 32. Five
    // orders:
    Figure { name: "order_batch_of_five", mysql: 12, postgres: 12 },
    // START TRANSACTION, the user's row FOR UPDATE, the product's name, the stock row FOR UPDATE,
    // its live holds, the customer's own live hold of it, the customer's recent holds (limits),
    // INSERT, its id, COMMIT.
    Figure { name: "hold", mysql: 10, postgres: 10 },
    // START TRANSACTION, the user's row FOR UPDATE, their orders of the last minute, the hold's
    // product, the stock row FOR UPDATE with its live holds, the hold FOR UPDATE, UPDATE it used,
    // then the order's own path (the catalog, the stock row and its live holds again, UPDATE, the
    // order, its id, its line, its ledger movement), the hold's order id, COMMIT.
    Figure { name: "order_from_hold", mysql: 18, postgres: 18 },
    // The product's existence, GET_LOCK, SET TRANSACTION ISOLATION LEVEL READ COMMITTED, START
    // TRANSACTION, the stock row FOR UPDATE, UPDATE, the ledger movement, its id, COMMIT,
    // RELEASE_LOCK.
    Figure { name: "receipt", mysql: 10, postgres: 8 },
    // GET_LOCK, SET TRANSACTION ISOLATION LEVEL READ COMMITTED, START TRANSACTION, the row FOR
    // UPDATE, the next epoch, INSERT, the lock as shown, its audit event, COMMIT, RELEASE_LOCK.
    Figure { name: "edit_lock_acquire", mysql: 10, postgres: 9 },
    // UPDATE, the lock as shown.
    Figure { name: "edit_lock_heartbeat", mysql: 2, postgres: 2 },
    // START TRANSACTION, DELETE, the audit event, COMMIT.
    Figure { name: "edit_lock_release", mysql: 4, postgres: 4 },
    // Taken, kept alive once and released: the three above.
    Figure { name: "edit_lock_cycle", mysql: 16, postgres: 15 },
];

/// What one request may read beyond what it counts, on each engine: index dives, the rows it
/// locks, the checks of its insert (`reads.rs` adds the rows it counts and asserts the sum
/// against the server's counters). Pages state them as `<!-- figure: reads/booking.mysql -->`.
pub const READS: &[Figure] = &[
    // The user's and the resource's rows, the user's fortnight, the session, the closure, the
    // insert and its foreign keys, the lock's own bookkeeping.
    Figure { name: "booking", mysql: 20, postgres: 20 },
    // The user's row and their recent orders' range, the catalog, the stock row, the live
    // holds' range, the inserts of the order, its line and its movement, and their checks.
    Figure { name: "order", mysql: 20, postgres: 20 },
    // The product, the stock row, the live holds' range, the customer's own live hold, the
    // insert; then the release.
    Figure { name: "hold_and_release", mysql: 20, postgres: 20 },
];

/// The figure of `name`.
///
/// # Panics
/// When there is none: a test or a page names a figure this table does not hold.
pub fn statements(name: &str) -> Figure {
    STATEMENTS
        .iter()
        .find(|f| f.name == name)
        .copied()
        .unwrap_or_else(|| panic!("tests/it/figures.rs has no figure {name:?}"))
}

impl Figure {
    /// The figure on the engine named `engine` (`mysql`, `postgres`), as the pages' markers
    /// name it.
    pub fn on_engine(self, engine: &str) -> Option<u64> {
        match engine {
            "mysql" => Some(self.mysql),
            "postgres" => Some(self.postgres),
            _ => None,
        }
    }
}
