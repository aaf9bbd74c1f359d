//! `haita bench bookings --stays`: what keeping stays of several nights apart costs, three ways,
//! in the same run, in a scratch database of its own.
//!
//! Clients (threads of this process, on one pool of `POOL_SIZE` connections) book random stays
//! of 1 to 7 nights of resources with one place, as fast as they can, for a few seconds per
//! cell and path:
//!
//! - **named locks**, the baseline: the statements of a stay booked under the day locks, written
//!   by hand. One named lock per night, taken in ascending date order (two overlapping stays then
//!   never each hold a night the other waits for), the check that none of the nights is full,
//!   and one `demo_bookings` row per night, in one transaction (`db::transaction`, as the app's).
//!   MySQL and MariaDB: `GET_LOCK` on the session before the transaction, one
//!   `RELEASE_ALL_LOCKS()` after the commit, as the app lets go of a stay's locks; PostgreSQL:
//!   `pg_advisory_xact_lock` inside the transaction, let go by its commit.
//! - **app**: the app's own stay path, its service called in this process (no HTTP): a stay of
//!   several nights through `bookings::stays::book_stay`, one night through `service::book`,
//!   as the app's routes choose, on real `resources` and `reservations`, each client a user of
//!   its own. The same day locks in the same order, plus what the app adds: the user's row and
//!   quota, the closures, the session check, one `reservations` row per stay.
//! - **exclusion constraint**, PostgreSQL only: one `INSERT` of the stay into `demo_stays`,
//!   whose constraint refuses one that overlaps another (23P01: refused). Nothing else. Two
//!   inserts that meet inside the constraint's index may wait for each other; PostgreSQL then
//!   aborts one (40P01) after `deadlock_timeout`, and it is sent again (`retried`).
//!
//! None goes through HTTP or the app's per-key queue (each client waits at the server). The last
//! column is each path's throughput over the named locks' in the same cell, the same run.
//!
//! Keys: **hot** is one resource, check-ins within four weeks: soon most nights are taken and
//! most answers are refusals, as on a sold-out month. **spread** gives attempt `i` eight days of
//! one of 256 resources that no other attempt asked for (until the 256 × 45 are used once):
//! nothing waits, nearly everything is booked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Date, Integer, Nullable, Text};
use rand::{Rng, RngCore};

use super::bookings::Keys;
use crate::auth::session::Ticket;
use crate::bookings::{self, BookingError, model};
use crate::config::Config;
use crate::db::conn::on_engine;
use crate::db::{self, CheckoutError, DbConn, DbPool, Engine, ScratchDatabase, cached_sql};
use crate::lab::demo::{Strategy, create_resource, lock_name};
use crate::lab::schema::{demo_bookings, demo_stays};
use crate::lab::stats::percentile_ms;
use crate::locking::retry::{MayConflict, RetryPolicy, retry_on_lock_conflict};
use crate::locking::{Turn, TurnsInOrder};
use crate::resources::model::NewResource;
use crate::schema::resources;

/// The nights of a stay: one to a week.
const NIGHTS: std::ops::RangeInclusive<u32> = 1..=7;
/// The days the hot resource's check-ins fall in.
const HOT_DAYS: u64 = 28;
/// Resources of the spread pattern, and the eight-day slots each one has.
const SPREAD_RESOURCES: u64 = 256;
const SLOTS: u64 = 45;
/// Places per night of every resource here: the exclusion constraint can hold no more.
const CAPACITY: i32 = 1;

/// The ways of keeping stays apart, in the order of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    NamedLocks,
    App,
    Exclusion,
}

impl Path {
    const ALL: [Path; 3] = [Path::NamedLocks, Path::App, Path::Exclusion];

    fn label(self) -> &'static str {
        match self {
            Self::NamedLocks => "named locks",
            Self::App => "app book_stay",
            Self::Exclusion => "exclusion constraint",
        }
    }

    /// Whether the servers of `engine` can take this path.
    fn runs_on(self, engine: Engine) -> bool {
        self != Self::Exclusion || engine.dialect().has_exclusion_constraints()
    }
}

/// What to measure: the key patterns and client counts of `bench bookings`, its window and
/// repetitions.
pub(super) struct Plan {
    pub(super) patterns: Vec<Keys>,
    pub(super) clients: Vec<u32>,
    pub(super) window: Duration,
    pub(super) repeat: u32,
}

/// One stay asked for.
#[derive(Clone, Copy, Debug)]
struct Stay {
    resource_id: i64,
    check_in: NaiveDate,
    nights: u32,
}

impl Stay {
    fn check_out(&self) -> NaiveDate {
        self.check_in + chrono::Days::new(self.nights.into())
    }

    fn nights(&self) -> impl Iterator<Item = NaiveDate> {
        self.check_in.iter_days().take(self.nights as usize)
    }
}

/// The resources of one measurement (fresh, so no run finds another's stays) and how attempt
/// `i` picks its stay.
struct Target {
    keys: Keys,
    resources: Vec<i64>,
    first_day: NaiveDate,
}

impl Target {
    /// Real resources for the app's path, demo resources for the others.
    fn fresh(pool: &DbPool, keys: Keys, path: Path) -> anyhow::Result<Self> {
        let mut conn = pool.get()?;
        let count = if keys == Keys::Hot { 1 } else { SPREAD_RESOURCES };
        let resources = (0..count)
            .map(|i| match path {
                Path::App => {
                    let name = format!("stays bench {i} {:x}", rand::rng().next_u64());
                    diesel::insert_into(resources::table)
                        .values(NewResource {
                            name: &name,
                            description: "",
                            capacity: CAPACITY,
                            price_cents: 0,
                        })
                        .execute(&mut conn)?;
                    Ok(db::last_insert_id(&mut conn)?)
                }
                Path::NamedLocks | Path::Exclusion => {
                    Ok(create_resource(&mut conn, Strategy::ExclusionConstraint, CAPACITY)?)
                }
            })
            .collect::<anyhow::Result<_>>()?;
        let first_day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
        Ok(Self { keys, resources, first_day })
    }

    fn stay(&self, i: u64) -> Stay {
        let mut rng = rand::rng();
        let nights = rng.random_range(NIGHTS);
        match self.keys {
            Keys::Hot => Stay {
                resource_id: self.resources[0],
                check_in: self.first_day + chrono::Days::new(rng.random_range(0..HOT_DAYS)),
                nights,
            },
            Keys::Spread => {
                let resource = usize::try_from(i / SLOTS % SPREAD_RESOURCES).unwrap_or(0);
                Stay {
                    resource_id: self.resources[resource],
                    check_in: self.first_day + chrono::Days::new(i % SLOTS * 8),
                    nights,
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Booked,
    Refused,
    /// A lock wait ran out, or a deadlock came back three times: a client's 503.
    Busy,
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    booked: u64,
    refused: u64,
    busy: u64,
    errors: u64,
    /// Statements sent again after a deadlock (the exclusion constraint's).
    retried: u64,
    first_error: Option<String>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        self.booked += other.booked;
        self.refused += other.refused;
        self.busy += other.busy;
        self.errors += other.errors;
        self.retried += other.retried;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn answered(&self) -> u64 {
        self.booked + self.refused
    }
}

/// One path's measurement of one cell.
#[derive(Default)]
struct Measured {
    answered_per_sec: f64,
    booked_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU time of this process (the clients and the statements' client side) per answer.
    cpu_us: f64,
    /// CPU time of the database server per answer, when it runs on this machine (NaN otherwise).
    db_cpu_us: f64,
    /// Statements and commits the server counted per answer; `None` on PostgreSQL.
    statements: Option<f64>,
    commits: Option<f64>,
    tally: Tally,
}

impl Measured {
    fn median(mut runs: Vec<Measured>) -> Measured {
        runs.sort_by(|a, b| a.answered_per_sec.total_cmp(&b.answered_per_sec));
        let middle = runs.len() / 2;
        runs.into_iter().nth(middle).unwrap_or_default()
    }
}

/// One row of the table: a path in a cell, and its throughput over the named locks'.
struct Row {
    path: Path,
    keys: Keys,
    clients: usize,
    /// `None`: the server cannot run this path.
    measured: Option<Measured>,
    ratio: f64,
}

/// Runs the plan on a scratch database next to `config`'s, prints the table row by row, and
/// checks that no night was booked twice.
pub(super) fn run(config: &Config, plan: &Plan) -> anyhow::Result<()> {
    let (_, name) = db::split_database_url(&config.database_url)?;
    let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
    let bench_config = Config { database_url: scratch.url.clone(), ..config.clone() };
    let pool = crate::prepare_database(&bench_config)?;
    crate::lab::prepare(&pool)?;
    let engine = pool.engine();
    let users = super::bookings::create_users(&pool, plan.clients.iter().copied().max().unwrap_or(1))?;

    print!("{}", header(&scratch.name, engine, bench_config.pool_size, plan));
    for &keys in &plan.patterns {
        for &clients in &plan.clients {
            let clients = clients as usize;
            let mut runs: [Vec<Measured>; 3] = Default::default();
            for _ in 0..plan.repeat {
                for (path, runs) in Path::ALL.into_iter().zip(&mut runs) {
                    if path.runs_on(engine) {
                        let target = Target::fresh(&pool, keys, path)?;
                        let users = &users[..clients];
                        runs.push(measure(&pool, &bench_config, path, &target, users, plan.window)?);
                    }
                }
            }
            let medians = runs.map(|runs| (!runs.is_empty()).then(|| Measured::median(runs)));
            let base = medians[0].as_ref().map_or(0.0, |m| m.answered_per_sec).max(f64::MIN_POSITIVE);
            for (path, measured) in Path::ALL.into_iter().zip(medians) {
                let ratio = measured.as_ref().map_or(0.0, |m| m.answered_per_sec / base);
                print!("{}", report_row(&Row { path, keys, clients, measured, ratio }));
            }
        }
    }
    let twice = nights_booked_twice(&pool)?;
    print!("{}", footer(twice));
    drop(pool);
    drop(scratch);
    anyhow::ensure!(twice == 0, "a night was booked twice under load");
    Ok(())
}

/// A thread per user booking stays of `target` by `path` for `window`.
fn measure(
    pool: &DbPool,
    config: &Config,
    path: Path,
    target: &Target,
    users: &[Ticket],
    window: Duration,
) -> anyhow::Result<Measured> {
    let counted = super::ServerCounters::read(pool)?;
    let cpu = super::process_cpu("/proc/self/stat");
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = started + window;
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let workers: Vec<_> = users
            .iter()
            .zip(0..)
            .map(|(ticket, client)| {
                let next = &next;
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    while Instant::now() < deadline {
                        let stay = target.stay(next.fetch_add(1, Ordering::Relaxed));
                        let began = Instant::now();
                        let answer = match path {
                            Path::NamedLocks => book_under_day_locks(pool, config, &stay, client),
                            Path::App => book_in_the_app(pool, config, &stay, ticket),
                            Path::Exclusion => insert_stay(pool, &stay, client, &mut tally.retried),
                        };
                        tally.latencies.push(began.elapsed());
                        match answer {
                            Ok(Outcome::Booked) => tally.booked += 1,
                            Ok(Outcome::Refused) => tally.refused += 1,
                            Ok(Outcome::Busy) => tally.busy += 1,
                            Err(e) if is_busy(&e) => tally.busy += 1,
                            Err(e) => {
                                tally.errors += 1;
                                tally.first_error.get_or_insert_with(|| format!("{e:#}"));
                            }
                        }
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_default()).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut tally = Tally::default();
    tallies.into_iter().for_each(|t| tally.add(t));
    tally.latencies.sort_unstable();
    let answered = tally.answered().max(1) as f64;
    let done = super::ServerCounters::read(pool)?.since(&counted);
    let per_answer = |count: Option<u64>| count.map(|n| n as f64 / answered);
    Ok(Measured {
        answered_per_sec: tally.answered() as f64 / elapsed,
        booked_per_sec: tally.booked as f64 / elapsed,
        p50_ms: percentile_ms(&tally.latencies, 50.0),
        p99_ms: percentile_ms(&tally.latencies, 99.0),
        cpu_us: super::process_cpu("/proc/self/stat").saturating_sub(cpu).as_secs_f64() * 1e6 / answered,
        db_cpu_us: done.cpu.map_or(f64::NAN, |cpu| cpu.as_secs_f64() * 1e6 / answered),
        statements: per_answer(done.statements),
        commits: per_answer(done.commits),
        tally,
    })
}

/// A bounded wait that ran out: the pool's, a lock's (`lock_timeout`), or a deadlock met three
/// times. A client would be told 503 busy.
fn is_busy(error: &anyhow::Error) -> bool {
    error.downcast_ref::<CheckoutError>().is_some_and(|e| matches!(e, CheckoutError::Busy(_)))
        || error.downcast_ref::<DbError>().is_some_and(|e| e.lock_conflict().is_some())
}

/// The named-lock path: a lock per night in ascending date order, then check and insert in one
/// transaction, on one connection. A lock not granted within `LOCK_WAIT_SECS` (PostgreSQL:
/// within the session's `lock_timeout`) is a busy answer.
fn book_under_day_locks(pool: &DbPool, config: &Config, stay: &Stay, client: i32) -> anyhow::Result<Outcome> {
    let names: Vec<_> = stay.nights().map(|night| lock_name(pool.names(), stay.resource_id, night)).collect();
    let mut conn = pool.get()?;
    match conn.engine() {
        Engine::Mysql => {
            let wait = i32::try_from(config.lock_wait.as_secs()).unwrap_or(i32::MAX);
            let mut held = 0;
            let mut answer = Ok(Outcome::Busy);
            for name in &names {
                let granted: Option<i64> = cached_sql::<Nullable<BigInt>>("SELECT GET_LOCK(?, ?)")
                    .bind::<Text, _>(name.as_str())
                    .bind::<Integer, _>(wait)
                    .get_result(&mut conn)?;
                if granted != Some(1) {
                    break;
                }
                held += 1;
            }
            if held == names.len() {
                answer = db::transaction(&mut conn, |conn| check_and_insert(conn, stay, client));
            }
            // Committed above; only now may the next stay look at these nights. The session holds
            // nothing else, so one statement lets go of them all.
            if held > 0 {
                cached_sql::<Nullable<BigInt>>("SELECT RELEASE_ALL_LOCKS()").execute(&mut conn)?;
            }
            answer
        }
        // The locks are the transaction's: its commit lets go of them all.
        Engine::Postgres => db::transaction(&mut conn, |conn| {
            for name in &names {
                cached_sql::<()>("SELECT pg_advisory_xact_lock(?)")
                    .bind::<BigInt, _>(name.advisory_key())
                    .execute(conn)?;
            }
            check_and_insert(conn, stay, client)
        }),
    }
}

/// The app's path, as its routes take it: a stay of several nights through `book_stay` under
/// the nights' locks in order, one night as the booking of its day.
fn book_in_the_app(pool: &DbPool, config: &Config, asked: &Stay, ticket: &Ticket) -> anyhow::Result<Outcome> {
    let today = bookings::service::today();
    let stay = model::Stay::parse(&asked.check_in.to_string(), &asked.check_out().to_string(), today)?;
    let resource_id = asked.resource_id;
    let booked = match stay.single_day() {
        Some(day) => {
            let turn = Turn::unqueued(pool.names().booking(resource_id, day.day()), config.lock_wait);
            bookings::service::book(pool, turn, ticket, resource_id, day, None, u32::MAX)
        }
        None => {
            let nights = bookings::stays::night_locks(pool.names(), resource_id, stay);
            let turns = TurnsInOrder::unqueued(nights, config.lock_wait);
            bookings::stays::book_stay(pool, turns, ticket, resource_id, stay, None, u32::MAX)
        }
    };
    match booked {
        Ok(_) => Ok(Outcome::Booked),
        // A night full, or already the user's own (one user per client books on and on).
        Err(
            BookingError::FullyBooked { .. }
            | BookingError::NightFull { .. }
            | BookingError::AlreadyBooked
            | BookingError::NightBooked { .. },
        ) => Ok(Outcome::Refused),
        Err(BookingError::Infra(e)) if e.is_busy() => Ok(Outcome::Busy),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// Whether a night of the stay is full, and if none is, a row per night.
fn check_and_insert(conn: &mut DbConn, stay: &Stay, client: i32) -> anyhow::Result<Outcome> {
    let full_nights: i64 = cached_sql::<BigInt>(
        "SELECT COUNT(*) FROM (SELECT day FROM demo_bookings \
         WHERE demo_resource_id = ? AND day >= ? AND day < ? \
         GROUP BY day HAVING COUNT(*) >= ?) full_nights",
    )
    .bind::<BigInt, _>(stay.resource_id)
    .bind::<Date, _>(stay.check_in)
    .bind::<Date, _>(stay.check_out())
    .bind::<Integer, _>(CAPACITY)
    .get_result(conn)?;
    if full_nights > 0 {
        return Ok(Outcome::Refused);
    }
    let rows: Vec<_> = stay
        .nights()
        .map(|day| {
            (
                demo_bookings::demo_resource_id.eq(stay.resource_id),
                demo_bookings::day.eq(day),
                demo_bookings::client.eq(client),
            )
        })
        .collect();
    on_engine!(conn, |c| diesel::insert_into(demo_bookings::table).values(&rows).execute(c))?;
    Ok(Outcome::Booked)
}

/// The exclusion-constraint path: one INSERT, sent again after a deadlock.
fn insert_stay(pool: &DbPool, stay: &Stay, client: i32, retried: &mut u64) -> anyhow::Result<Outcome> {
    let mut conn = pool.get()?;
    let tried = retry_on_lock_conflict(&RetryPolicy::default(), || {
        diesel::insert_into(demo_stays::table)
            .values((
                demo_stays::demo_resource_id.eq(stay.resource_id),
                demo_stays::check_in.eq(stay.check_in),
                demo_stays::check_out.eq(stay.check_out()),
                demo_stays::client.eq(client),
            ))
            .execute(&mut conn)
    });
    *retried += u64::from(tried.attempts - 1);
    match tried.result {
        Ok(_) => Ok(Outcome::Booked),
        Err(DbError::DatabaseError(DatabaseErrorKind::ExclusionViolation, _)) => Ok(Outcome::Refused),
        Err(e) => Err(e.into()),
    }
}

/// Nights booked beyond their one place after the bench: days of `demo_bookings` with two rows
/// or more, and pairs of `demo_stays` or of confirmed `reservations` that share a night.
fn nights_booked_twice(pool: &DbPool) -> anyhow::Result<i64> {
    let mut conn = pool.get()?;
    let days: i64 = cached_sql::<BigInt>(
        "SELECT COUNT(*) FROM (SELECT 1 FROM demo_bookings GROUP BY demo_resource_id, day \
         HAVING COUNT(*) > 1) x",
    )
    .get_result(&mut conn)
    .context("counting nights booked twice")?;
    let stays: i64 = cached_sql::<BigInt>(
        "SELECT COUNT(*) FROM demo_stays a JOIN demo_stays b \
         ON b.demo_resource_id = a.demo_resource_id AND b.id > a.id \
         AND b.check_in < a.check_out AND a.check_in < b.check_out",
    )
    .get_result(&mut conn)?;
    let reservations: i64 = cached_sql::<BigInt>(
        "SELECT COUNT(*) FROM reservations a JOIN reservations b \
         ON b.resource_id = a.resource_id AND b.id > a.id \
         AND b.day < a.check_out AND a.day < b.check_out \
         WHERE a.status = 'confirmed' AND b.status = 'confirmed'",
    )
    .get_result(&mut conn)?;
    Ok(days + stays + reservations)
}

// ---- the table ---------------------------------------------------------------------------

fn header(database: &str, engine: Engine, pool_size: u32, plan: &Plan) -> String {
    let (server, note) = match engine {
        Engine::Mysql => (
            "MySQL/MariaDB",
            "exclusion constraint: n/a, MariaDB and MySQL have none; only the named locks are measured\n"
                .to_string(),
        ),
        Engine::Postgres => ("PostgreSQL", format!("{}\n", super::NOT_COUNTED_ON_POSTGRES)),
    };
    format!(
        "haita bench bookings --stays: database {database} ({server}), pool {pool_size} connections, \
         {} s per cell, median of {}\n\
         stays of 1–7 nights, one place a night, from this process (no HTTP, no per-key queue)\n\
         named locks: a lock per night in ascending order, check, a row per night, commit; \
         app: the app's stay path in process (book_stay); exclusion constraint: one INSERT, 23P01 = refused\n\
         {note}\n\
         {:<20} {:<7} {:>7} | {:>8} {:>8} {:>7} {:>7} {:>6} {:>6} {:>5} {:>6} {:>5} {:>7} | {:>7}\n",
        plan.window.as_secs(),
        plan.repeat,
        "path",
        "keys",
        "clients",
        "ans/s",
        "booked/s",
        "p50 ms",
        "p99 ms",
        "cpu µs",
        "db µs",
        "stmts",
        "commit",
        "busy",
        "retried",
        "÷ locks"
    )
}

fn report_row(row: &Row) -> String {
    let keys = if row.keys == Keys::Hot { "hot" } else { "spread" };
    let head = format!("{:<20} {:<7} {:>7} |", row.path.label(), keys, row.clients);
    let Some(m) = &row.measured else {
        return format!("{head} n/a: MariaDB and MySQL have no exclusion constraint\n");
    };
    let counted = |value: Option<f64>, width: usize, decimals: usize| {
        value.map_or_else(|| format!("{:>width$}", "n/a"), |v| format!("{v:>width$.decimals$}"))
    };
    let mut out = format!(
        "{head} {:>8.0} {:>8.0} {:>7.2} {:>7.2} {:>6.0} {:>6.0} {} {} {:>5} {:>7} | {:>7.2}\n",
        m.answered_per_sec,
        m.booked_per_sec,
        m.p50_ms,
        m.p99_ms,
        m.cpu_us,
        m.db_cpu_us,
        counted(m.statements, 5, 1),
        counted(m.commits, 6, 2),
        m.tally.busy,
        m.tally.retried,
        row.ratio
    );
    if m.tally.errors > 0 {
        out.push_str(&format!(
            "    {} errors (first: {})\n",
            m.tally.errors,
            m.tally.first_error.as_deref().unwrap_or("")
        ));
    }
    out
}

fn footer(twice: i64) -> String {
    format!("\nnights booked twice after the bench: {twice} (must be 0)\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan { patterns: vec![Keys::Hot], clients: vec![16], window: Duration::from_secs(2), repeat: 3 }
    }

    fn measured(answered_per_sec: f64) -> Measured {
        Measured {
            answered_per_sec,
            booked_per_sec: 120.4,
            p50_ms: 5.125,
            p99_ms: 20.5,
            cpu_us: 350.2,
            db_cpu_us: 410.4,
            statements: Some(14.25),
            commits: Some(1.0),
            tally: Tally { busy: 2, retried: 3, ..Tally::default() },
        }
    }

    #[test]
    fn both_paths_line_up_under_the_header_with_their_ratio_to_the_named_locks() {
        let header = header("haita_bench_00ff", Engine::Postgres, 16, &plan());
        assert!(header.starts_with(
            "haita bench bookings --stays: database haita_bench_00ff (PostgreSQL), pool 16 connections, 2 s per cell, median of 3\n"
        ));
        assert!(header.contains(super::super::NOT_COUNTED_ON_POSTGRES));
        let locks = Row {
            path: Path::NamedLocks,
            keys: Keys::Hot,
            clients: 16,
            measured: Some(measured(1000.0)),
            ratio: 1.0,
        };
        let exclusion = Row {
            path: Path::Exclusion,
            keys: Keys::Hot,
            clients: 16,
            measured: Some(Measured { statements: None, commits: None, ..measured(2500.0) }),
            ratio: 2.5,
        };
        assert_eq!(
            report_row(&locks),
            "named locks          hot          16 |     1000      120    5.12   20.50    350    410  14.2   1.00     2       3 |    1.00\n"
        );
        assert_eq!(
            report_row(&exclusion),
            "exclusion constraint hot          16 |     2500      120    5.12   20.50    350    410   n/a    n/a     2       3 |    2.50\n"
        );
        let width = |text: &str| text.lines().last().map(|l| l.chars().count());
        assert_eq!(width(&header), width(&report_row(&locks)));
        assert_eq!(width(&header), width(&report_row(&exclusion)));
    }

    #[test]
    fn on_mariadb_the_exclusion_row_says_why_it_is_not_measured() {
        let header = header("haita_bench_00ff", Engine::Mysql, 16, &plan());
        assert!(header.contains("exclusion constraint: n/a, MariaDB and MySQL have none"), "{header}");
        let row = Row { path: Path::Exclusion, keys: Keys::Spread, clients: 4, measured: None, ratio: 0.0 };
        assert_eq!(
            report_row(&row),
            "exclusion constraint spread        4 | n/a: MariaDB and MySQL have no exclusion constraint\n"
        );
    }

    #[test]
    fn a_stay_covers_its_nights_and_spread_stays_never_share_one() {
        let day = |d| NaiveDate::from_ymd_opt(2300, 1, d).expect("day");
        let stay = Stay { resource_id: 1, check_in: day(30), nights: 3 };
        assert_eq!(stay.check_out(), NaiveDate::from_ymd_opt(2300, 2, 2).expect("day"));
        assert_eq!(
            stay.nights().collect::<Vec<_>>(),
            [day(30), day(31), NaiveDate::from_ymd_opt(2300, 2, 1).expect("day")]
        );
        let target = Target { keys: Keys::Spread, resources: (1..=256).collect(), first_day: day(1) };
        // The first three resources' slots, and the first of the fourth.
        let stays: Vec<Stay> = (0..=SLOTS * 3).map(|i| target.stay(i)).collect();
        assert_eq!(stays.iter().map(|s| s.resource_id).max(), Some(4));
        for (i, a) in stays.iter().enumerate() {
            assert!(NIGHTS.contains(&a.nights));
            let overlapping = stays[i + 1..].iter().filter(|b| {
                b.resource_id == a.resource_id && b.check_in < a.check_out() && a.check_in < b.check_out()
            });
            assert_eq!(overlapping.count(), 0, "{a:?}");
        }
    }
}
