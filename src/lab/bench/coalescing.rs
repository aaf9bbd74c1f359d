//! `haita bench coalescing`: one hot day, bookings unqueued, one at a time and in coalesced batches.
//!
//! All three run in this process on the same pool, without HTTP, through exactly what a booking
//! request runs: *unqueued* is every client at the server at once (each with its own turn, as
//! before the per-key queue); *one at a time* is the per-key queue's turn and `service::book`;
//! *coalesced* is `bookings::coalesce::Coalescer`. Every attempt books a user who has no booking
//! yet on a day with room for all, so every attempt is a real insert and commit. The database
//! first gets a realistic history (`history.rs`, `--history`, a million reservations by
//! default), so that the indexes each booking reads are the size of a real site's; each
//! measurement's day is a fortnight (`MAX_NIGHTS`) after the one before, so that its count
//! reads that day's bookings, not the thousands an earlier measurement left on the days before
//! it. The server's
//! own counters (`SHOW GLOBAL STATUS`) give the statements and commits per booking; run on a
//! quiet server, since they count everything it does. PostgreSQL keeps no such count without
//! an extension: there the two columns say `n/a` (`super::NOT_COUNTED_ON_POSTGRES`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;

use super::ServerCounters;
use crate::auth::session::Ticket;
use crate::bookings::BookingError;
use crate::bookings::coalesce::{self, Coalescer};
use crate::bookings::model::{BookingDate, Reservation};
use crate::bookings::service;
use crate::config::Config;
use crate::db::{self, DbConn, DbPool, Engine, OffExecutor, ScratchDatabase};
use crate::locking::{LockQueue, Turn};

/// Users created up front: each booking needs one without a booking that day.
const USERS: i64 = 200_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// Every client at the server at once, as before the per-key queue (`Turn::unqueued`).
    Unqueued,
    /// The per-key queue: one request per day at the server, one booking per transaction.
    OneAtATime,
    Coalesced,
}

impl Path {
    const ALL: [Path; 3] = [Path::Unqueued, Path::OneAtATime, Path::Coalesced];

    pub(super) fn label(self) -> &'static str {
        match self {
            Path::Unqueued => "unqueued",
            Path::OneAtATime => "one at a time",
            Path::Coalesced => "coalesced",
        }
    }
}

pub struct Measured {
    path: Path,
    booked: u64,
    busy: u64,
    per_second: f64,
    /// `None` where the server keeps no count of its statements and commits (PostgreSQL).
    statements_per_booking: Option<f64>,
    commits_per_booking: Option<f64>,
}

pub fn run(config: &Config, clients: usize, seconds: u64, history: u64) -> anyhow::Result<()> {
    anyhow::ensure!((1..=512).contains(&clients), "--clients must be between 1 and 512");
    let (_, name) = db::split_database_url(&config.database_url)?;
    let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
    let bench_config = Config { pool_size: config.pool_size, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&bench_config)?;
    crate::run_migrations(&pool)?;
    // The bench's own users first: they are ids 1 to USERS (see `ticket`).
    let resource = prepare(&mut *pool.get()?, USERS)?;
    if history > 0 {
        let size = super::history::Size { users: 10_000, reservations: history };
        super::history::seed(&mut *pool.get()?, size, bench_config.max_future_bookings)?;
    }
    let next_user = Arc::new(AtomicI64::new(1));
    let duration = Duration::from_secs(seconds);

    let mut results = Vec::new();
    // Alternate the paths, three times each, on fresh days; the median run is reported.
    for round in 0..3 {
        for (n, path) in (0u64..).zip(Path::ALL) {
            let day = service::today()
                + chrono::Days::new(10 + (round * 3 + n) * u64::from(crate::bookings::model::MAX_NIGHTS));
            let day = BookingDate::parse(&day.to_string(), service::today())?;
            results.push(measure(&pool, &bench_config, path, resource, day, &next_user, clients, duration)?);
        }
    }
    drop(pool);
    drop(scratch);
    print!("{}", report(&results, clients, seconds));
    Ok(())
}

/// `users` users (ids 1…`users`, no password, each with a session: see [`ticket`]) and a
/// resource with room for all of them on any day.
pub(super) fn prepare(conn: &mut DbConn, users: i64) -> anyhow::Result<i64> {
    match conn.engine() {
        Engine::Mysql => {
            // The recursion limit of a CTE is `cte_max_recursion_depth` on MySQL and
            // `max_recursive_iterations` on MariaDB.
            conn.batch_execute(&format!("SET SESSION cte_max_recursion_depth = {users}")).or_else(|_| {
                conn.batch_execute(&format!("SET SESSION max_recursive_iterations = {users}"))
            })?;
            conn.batch_execute(&format!(
                "INSERT INTO users (username, display_name, password_hash, role) \
                   WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {users}) \
                   SELECT CONCAT('b', i), CONCAT('b', i), '-', 'customer' FROM n; \
                 INSERT INTO user_sessions (id, user_id, created_at, expires_at) \
                   SELECT CONCAT('{SESSION_PREFIX}', LPAD(id, {SESSION_DIGITS}, '0')), id, \
                     UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY FROM users; \
                 INSERT INTO resources (name, description, capacity) VALUES ('Hot day', '', 1000000)"
            ))?;
        }
        // The pool's sessions run in UTC, so LOCALTIMESTAMP is UTC_TIMESTAMP(6).
        Engine::Postgres => conn.batch_execute(&format!(
            "INSERT INTO users (username, display_name, password_hash, role) \
               SELECT 'b' || i, 'b' || i, '-', 'customer' FROM generate_series(1, {users}) AS n(i); \
             INSERT INTO user_sessions (id, user_id, created_at, expires_at) \
               SELECT '{SESSION_PREFIX}' || LPAD(CAST(id AS TEXT), {SESSION_DIGITS}, '0'), id, \
                 LOCALTIMESTAMP, LOCALTIMESTAMP + INTERVAL '1 day' FROM users; \
             INSERT INTO resources (name, description, capacity) VALUES ('Hot day', '', 1000000)"
        ))?,
    }
    Ok(db::last_insert_id(conn)?)
}

/// Session ids are 43 characters: the prefix and the user id, zero-padded.
const SESSION_PREFIX: &str = "bench-session-";
const SESSION_DIGITS: usize = 43 - SESSION_PREFIX.len();

/// The ticket of the session `prepare` opened for `user`.
fn ticket(user: i64) -> Ticket {
    Ticket::new(user, format!("{SESSION_PREFIX}{user:0SESSION_DIGITS$}"))
}

/// What a booking request runs, path by path, with the instance's queue and coalescer.
#[derive(Clone)]
pub(super) struct Booker {
    /// The door an instance would have, with metrics of the benchmark's own.
    db: OffExecutor,
    locks: Arc<LockQueue>,
    coalescer: Arc<Coalescer>,
    wait: Duration,
}

impl Booker {
    pub(super) fn new(pool: &DbPool, config: &Config) -> Self {
        let db = OffExecutor::new(pool.clone(), crate::metrics::Metrics::new());
        let locks = Arc::new(LockQueue::new(config.lock_waiters_max));
        // The benchmark's customers book far more days than a person may: it measures the
        // locking, whose cost (the user's row lock included) is the same under any cap.
        let coalescer = coalesce::coalescer(db.clone(), locks.clone(), u32::MAX, locks.cutoff().clone());
        Self { db, locks, coalescer: Arc::new(coalescer), wait: config.lock_wait }
    }

    /// The way to the database this booker's requests take.
    pub(super) fn db(&self) -> &OffExecutor {
        &self.db
    }

    /// One booking, as a request on `path` makes it: off the async executor where it blocks.
    pub(super) async fn book(
        &self,
        path: Path,
        user: i64,
        resource: i64,
        day: BookingDate,
    ) -> Result<Reservation, BookingError> {
        let (wait, name) = (self.wait, self.db.pool().names().booking(resource, day.day()));
        let turn = match path {
            Path::Coalesced => {
                return coalesce::book(&self.coalescer, wait, ticket(user), resource, day).await;
            }
            Path::Unqueued => Turn::unqueued(name, wait),
            Path::OneAtATime => self.locks.turn(name, wait).await?,
        };
        self.db
            .with_pool(move |pool| service::book(pool, turn, &ticket(user), resource, day, None, u32::MAX))
            .await
    }
}

#[expect(clippy::too_many_arguments, reason = "one measurement's inputs, passed once")]
fn measure(
    pool: &DbPool,
    config: &Config,
    path: Path,
    resource: i64,
    day: BookingDate,
    next_user: &Arc<AtomicI64>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Measured> {
    let before = ServerCounters::read(pool)?;
    let (booked, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let booker = Booker::new(pool, config);
    actix_web::rt::System::new().block_on(async {
        let tasks = (0..clients).map(|_| {
            let (booker, booked, busy, next_user) =
                (booker.clone(), booked.clone(), busy.clone(), next_user.clone());
            actix_web::rt::spawn(async move {
                let end = Instant::now() + duration;
                while Instant::now() < end {
                    let user = next_user.fetch_add(1, Ordering::Relaxed);
                    if user > USERS {
                        break;
                    }
                    let answer = booker.book(path, user, resource, day).await;
                    let counter = if answer.is_ok() { &booked } else { &busy };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        });
        futures_util::future::join_all(tasks).await;
    });
    let elapsed = started.elapsed().as_secs_f64();
    let done = ServerCounters::read(pool)?.since(&before);
    let booked = booked.load(Ordering::Relaxed);
    Ok(Measured {
        path,
        booked,
        busy: busy.load(Ordering::Relaxed),
        per_second: booked as f64 / elapsed,
        statements_per_booking: done.statements.map(|n| n as f64 / booked.max(1) as f64),
        commits_per_booking: done.commits.map(|n| n as f64 / booked.max(1) as f64),
    })
}

/// The median run of each path, and the ratio coalesced / one at a time.
pub fn report(results: &[Measured], clients: usize, seconds: u64) -> String {
    let median = |path: Path| -> Option<&Measured> {
        let mut runs: Vec<&Measured> = results.iter().filter(|m| m.path == path).collect();
        runs.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
        runs.get(runs.len() / 2).copied()
    };
    let mut out = format!(
        "hot day, {clients} clients, {seconds} s per run, median of {} runs per path\n\
         {:<14} {:>10} {:>8} {:>11} {:>13} {:>11}\n",
        results.iter().filter(|m| m.path == Path::Coalesced).count(),
        "path",
        "booked/s",
        "refused",
        "bookings",
        "statements/b",
        "commits/b"
    );
    for path in Path::ALL {
        if let Some(m) = median(path) {
            let counted = |value: Option<f64>, width: usize, decimals: usize| {
                value.map_or_else(|| format!("{:>width$}", "n/a"), |v| format!("{v:>width$.decimals$}"))
            };
            out.push_str(&format!(
                "{:<14} {:>10.0} {:>8} {:>11} {} {}\n",
                path.label(),
                m.per_second,
                m.busy,
                m.booked,
                counted(m.statements_per_booking, 13, 1),
                counted(m.commits_per_booking, 11, 2)
            ));
        }
    }
    if results.iter().any(|m| m.statements_per_booking.is_none()) {
        out.push_str(super::NOT_COUNTED_ON_POSTGRES);
        out.push('\n');
    }
    if let (Some(unqueued), Some(alone), Some(batched)) =
        (median(Path::Unqueued), median(Path::OneAtATime), median(Path::Coalesced))
    {
        let ratio = |a: &Measured, b: &Measured| a.per_second / b.per_second.max(f64::MIN_POSITIVE);
        out.push_str(&format!(
            "coalesced / one at a time: {:.2}; coalesced / unqueued: {:.2}\n",
            ratio(batched, alone),
            ratio(batched, unqueued)
        ));
    }
    out
}
