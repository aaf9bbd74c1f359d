//! A race: many clients book the same day at the same instant, round after round, and the
//! damage is then counted in the database, not taken from the answers.
//!
//! Round `r` books day `first_day + r` of a fresh demo resource of capacity 1. Every client waits
//! at a barrier, so all of a round's attempts start together; a client's attempt is one call of
//! the strategy, timed from its queue (or pool checkout) to its answer. A strategy that books
//! stays gives round `r` a fortnight of its own instead, from `first_day + 14·r`: each client
//! asks for a random check-in in its first week and 1 to 7 nights, so the round's stays overlap
//! one another and none reaches into the next round's.
//!
//! While the clients run, a reporter counts the bookings so far in the database every
//! [`REPORT_EVERY`] and hands them to the race's watcher (the page's live view, `live.rs`).
//!
//! While the clients run, a bystander makes a request that needs no lock (a connection from the
//! race's pool and `SELECT 1`) every few milliseconds and samples how many connections the
//! clients hold: the contention that leaks out of a strategy into the rest of an app.
//!
//! Each strategy runs on a pool of its own, as large as the race's connection budget
//! ([`Bounds::connections`], at most [`MAX_RACE_CONNECTIONS`]; less for a visitor's race), the
//! app's pool (`POOL_SIZE`) or the number of clients, whichever is smallest: the pool-pitfall
//! strategy leaves locks held by idle pooled sessions, and those must never reach the app's pool.
//! The strategies run one after another and each pool is closed before the next opens, so a
//! whole race never holds more connections of its own than that budget at once (its reporter and
//! its bookkeeping borrow from the app's pool, within `POOL_SIZE`). Before, each strategy opened
//! up to `POOL_SIZE` connections, as many again as the app, whoever started the race. After the run, every day's lock is checked: one still
//! held by a session of this run is a leaked lock, and exactly those sessions are closed (`KILL`;
//! on PostgreSQL `pg_terminate_backend`) before the pool is dropped.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use chrono::{NaiveDate, NaiveDateTime};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Untyped};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::DemoError;
use super::lanes::Lanes;
use super::model::{NewDemoRace, NewDemoResource};
use super::strategies::{self, Answer, Attempt, Queue, Seen, Strategy, lock_name};
use crate::config::Config;
use crate::db::{self, DbConn, DbPool, Sql, cached_sql};
use crate::i18n::Lang;
use crate::lab::locks::{OutsideLocks, file};
use crate::lab::schema::{demo_bookings, demo_races, demo_resources, demo_stays};
use crate::lab::stats::percentile_ms;
use crate::locking::Namespace;

pub const MAX_CLIENTS: u32 = 256;
pub const MAX_ATTEMPTS: u32 = 10_000;
pub const MAX_PAUSE_MS: u32 = 1_000;
pub const DEFAULT_CLIENTS: u32 = 32;
pub const DEFAULT_ATTEMPTS: u32 = 128;
/// A few milliseconds between check and insert: enough for the race to show on two cores.
pub const DEFAULT_PAUSE_MS: u32 = 5;
/// No strategy runs longer than this; the rounds not started by then are skipped.
pub const TIME_CAP: Duration = Duration::from_secs(10);
/// The named lock's wait in a race (GET_LOCK's timeout, PostgreSQL's `lock_timeout`): long enough for a round's queue, short enough that a leaked
/// lock costs seconds, not minutes.
const LOCK_WAIT: Duration = Duration::from_secs(1);
/// How often a running strategy's bookings are counted for its watchers: a few times a second
/// is live enough to watch, and one small query each time costs the race nothing it would show.
const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Every demo resource has one place per day, so any second booking of a day is a double booking.
pub const CAPACITY: i32 = 1;
/// The nights of a stay, for a strategy that books stays: one to a week.
const STAY_NIGHTS: std::ops::RangeInclusive<u32> = 1..=7;
/// The days of one round of stays: a check-in in the first week, at most seven nights.
const STAY_ROUND_DAYS: u32 = 14;

/// How long after their previous race a user may start another through the app (a race holds up
/// to 256 threads and [`MAX_RACE_CONNECTIONS`] connections for up to 130 s; the CLI is the
/// operator's own).
pub const COOLDOWN: Duration = Duration::from_secs(30);
/// The connections a race may hold at once, whoever starts it: its budget, not the app's.
pub const MAX_RACE_CONNECTIONS: u32 = 16;
/// How long after a visitor's race another may start from the same address (an IPv6 /64), on the
/// instance that ran it: a visitor cannot keep the race slot busy, and other visitors get a turn.
/// From the race's start; a visitor's race is small enough to last seconds.
pub const VISITOR_COOLDOWN: Duration = Duration::from_secs(120);

/// How big a race one may start, and the connections it may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_clients: u32,
    pub max_attempts: u32,
    pub max_pause_ms: u32,
    /// The race's connection budget: no strategy's pool is larger.
    pub connections: u32,
    /// How long after a race from one client address (an IPv6 /64) the next race from it may
    /// start, on the instance that ran it, whoever is logged in: so that logging in as one
    /// account after another (the demo's are published) does not start races back to back.
    pub address_cooldown: Duration,
}

impl Bounds {
    /// A logged-in user's race and the operator's (`haita demo race`).
    pub const LOGGED_IN: Self = Self {
        max_clients: MAX_CLIENTS,
        max_attempts: MAX_ATTEMPTS,
        max_pause_ms: MAX_PAUSE_MS,
        connections: MAX_RACE_CONNECTIONS,
        address_cooldown: COOLDOWN,
    };
    /// A visitor's race (nobody logged in): small and short, enough to see every strategy's
    /// outcome. Anyone can start it, so it must cost little: 8 clients, 64 attempts, 4 connections.
    /// A demo account's race is one too: its password is on the login page, so it is anyone's.
    pub const VISITOR: Self = Self {
        max_clients: 8,
        max_attempts: 64,
        max_pause_ms: 20,
        connections: 4,
        address_cooldown: VISITOR_COOLDOWN,
    };

    /// What a logged-in user may start: a visitor's race for a demo account.
    pub fn of_account(is_demo: bool) -> Self {
        if is_demo { Self::VISITOR } else { Self::LOGGED_IN }
    }
}
/// Races kept, with their demo resources and bookings; older ones are deleted after each race.
pub const KEEP_RACES: i64 = 20;

/// What to race, parsed and bounded once.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RaceSpec {
    pub strategies: Vec<Strategy>,
    pub clients: u32,
    pub attempts: u32,
    pub pause_ms: u32,
    /// The connections the race may hold at once ([`Bounds::connections`]).
    pub connections: u32,
}

impl RaceSpec {
    /// `names`: strategy names, or `all` (every strategy the servers of `engine` can run). Missing
    /// numbers take the defaults, within `bounds`; numbers beyond `bounds` are refused, naming the
    /// field and the bound; a strategy the server cannot run is refused, saying why.
    pub fn parse(
        names: &[&str],
        clients: Option<u32>,
        attempts: Option<u32>,
        pause_ms: Option<u32>,
        bounds: &Bounds,
        engine: db::Engine,
    ) -> Result<Self, DemoError> {
        let mut strategies = Vec::new();
        for name in names {
            let chosen = if name.trim() == "all" {
                Strategy::available_on(engine)
            } else {
                let strategy = Strategy::parse(name)?;
                if let Some(why) = strategy.unavailable_on(engine) {
                    return Err(DemoError::Unavailable { strategy, why });
                }
                vec![strategy]
            };
            for s in chosen {
                if !strategies.contains(&s) {
                    strategies.push(s);
                }
            }
        }
        if strategies.is_empty() {
            return Err(DemoError::Invalid {
                field: "strategy",
                message: "pick at least one strategy".into(),
            });
        }
        let bounded = |field, value: Option<u32>, default, range: std::ops::RangeInclusive<u32>| {
            let value = value.unwrap_or(default);
            if range.contains(&value) {
                Ok(value)
            } else {
                Err(DemoError::Invalid {
                    field,
                    message: format!("must be between {} and {}, got {value}", range.start(), range.end()),
                })
            }
        };
        let b = bounds;
        Ok(Self {
            strategies,
            clients: bounded("clients", clients, DEFAULT_CLIENTS.min(b.max_clients), 1..=b.max_clients)?,
            attempts: bounded(
                "attempts",
                attempts,
                DEFAULT_ATTEMPTS.min(b.max_attempts),
                1..=b.max_attempts,
            )?,
            pause_ms: bounded(
                "pause_ms",
                pause_ms,
                DEFAULT_PAUSE_MS.min(b.max_pause_ms),
                0..=b.max_pause_ms,
            )?,
            connections: b.connections,
        })
    }

    fn rounds(&self) -> u32 {
        self.attempts.div_ceil(self.clients)
    }
}

/// One strategy's run: what was asked, what was answered, and what the database holds after.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StrategyResult {
    pub strategy: Strategy,
    pub demo_resource_id: i64,
    /// Attempts made (fewer than asked when the time cap stopped the run).
    pub attempts: u32,
    /// Bookings in the database after the run.
    pub confirmed: i64,
    /// Bookings beyond capacity, summed over the days: what must always be 0.
    pub double_bookings: i64,
    /// Days with more bookings than places.
    pub overbooked_days: i64,
    /// "Fully booked" answers.
    pub refused: u32,
    /// Attempts that gave up on a bounded wait (lock, pool, retries): a 503 "busy" to a client.
    pub busy: u32,
    /// Attempts that failed otherwise (a bug if not 0).
    pub errors: u32,
    /// Whole transactions rerun after a deadlock (on PostgreSQL also a serialization failure).
    pub deadlocks_retried: u32,
    pub slot_collisions: u32,
    /// Attempts whose lock (`GET_LOCK`, `pg_advisory_lock`) was granted only because their
    /// session already held it.
    pub reentered: u32,
    /// Releases (`RELEASE_LOCK`, `pg_advisory_unlock`) that ran on a session not holding the lock.
    pub missed_releases: u32,
    /// Locks still held by a session of this run after every attempt had finished.
    pub leaked_locks: u32,
    /// The sessions closed to free those locks.
    pub closed_sessions: Vec<i64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub elapsed_ms: u64,
    /// The time cap stopped the run before every round had started.
    pub capped: bool,
    /// Transactions that booked a whole batch of one day (`named-lock-coalesced`).
    #[serde(default)]
    pub batches: u32,
    /// The race's pool, and the most of its connections the clients held at once.
    #[serde(default)]
    pub pool_size: u32,
    #[serde(default)]
    pub pool_peak_in_use: u32,
    /// p99 of a bystander that needs no lock (a connection and `SELECT 1`, every few
    /// milliseconds while the race runs): what a product list would have waited.
    #[serde(default)]
    pub bystander_p99_ms: f64,
    /// Holders paused past their lease on purpose (`redis-lock-expiring`, `redis-lock-fenced`).
    #[serde(default)]
    pub paused: u32,
    /// Releases that found the lease or lock row expired and no longer theirs.
    #[serde(default)]
    pub leases_lost: u32,
    /// Writes the database refused for an outdated fencing token (`redis-lock-fenced`).
    #[serde(default)]
    pub fenced_off: u32,
    pub first_error: Option<String>,
    /// The race ran on PostgreSQL: what `serializable` retried were serialization failures
    /// (40001), not deadlocks.
    #[serde(default)]
    pub on_postgres: bool,
    /// What happened, in a sentence or two naming the pitfall and the page of `docs/` on it.
    pub verdict: String,
}

impl StrategyResult {
    fn explain(&self) -> String {
        self.explain_in(Lang::En)
    }

    /// What happened, in `lang`: the sentence stored as `verdict` is the English one, and a page
    /// says it again in its reader's language from the same numbers.
    pub fn explain_in(&self, lang: impl std::borrow::Borrow<Lang>) -> String {
        let lang = *lang.borrow();
        let engine = if self.on_postgres { db::Engine::Postgres } else { db::Engine::Mysql };
        let words = strategies::lock_words(engine);
        // "1 booking", "2 bookings": the count and its noun, in `lang`.
        let n = |count: i64, one: &str, many: &str| {
            let mut args = vec![("n", count.to_string())];
            args.extend(words.iter().cloned());
            lang.t_with(if count == 1 { one } else { many }, args)
        };
        // A verdict's text with the named-lock functions of the race's engine.
        let t_with = |key: &str, args: &[(&str, String)]| {
            let mut all = args.to_vec();
            all.extend(words.iter().cloned());
            lang.t_with(key, all)
        };
        // What a strategy that books stays puts beyond capacity is nights.
        let bookings = |count: i64| {
            if self.strategy.books_stays() {
                n(count, "count.night.one", "count.night.many")
            } else {
                n(count, "count.booking.one", "count.booking.many")
            }
        };
        let busy = if self.busy > 0 {
            format!(
                " {}",
                lang.t_with(
                    "verdict.busy",
                    [("attempts", n(self.busy.into(), "count.attempt.one", "count.attempt.many"))]
                )
            )
        } else {
            String::new()
        };
        if self.strategy.is_correct() && self.double_bookings > 0 {
            return lang.t_with("verdict.bug", [("bookings", bookings(self.double_bookings))]);
        }
        let with_busy = |text: String| text + &busy;
        let releases = n(self.leases_lost.into(), "count.lease_release.one", "count.lease_release.many");
        let lost = if self.leases_lost > 0 {
            lang.t_with("verdict.lease_lost", [("releases", releases.clone())])
        } else {
            String::new()
        };
        let paused = n(self.paused.into(), "count.holder.one", "count.holder.many");
        match self.strategy {
            Strategy::NoLock if self.double_bookings > 0 => lang.t_with(
                "verdict.no_lock",
                [
                    ("bookings", bookings(self.double_bookings)),
                    ("days", n(self.overbooked_days, "count.day.one", "count.day.many")),
                ],
            ),
            Strategy::NoLock => lang.t("verdict.no_lock.lucky").into_owned(),
            Strategy::NamedLockPoolPitfall
                if self.leaked_locks + self.reentered + self.missed_releases == 0
                    && self.double_bookings == 0 =>
            {
                lang.t("verdict.pitfall.lucky").into_owned()
            }
            Strategy::NamedLockPoolPitfall => {
                let mut text = lang.t_with(
                    "verdict.pitfall",
                    [
                        (
                            "releases",
                            n(self.missed_releases.into(), "count.release.one", "count.release.many"),
                        ),
                        ("locks", n(self.leaked_locks.into(), "count.lock.one", "count.lock.many")),
                        ("requests", n(self.reentered.into(), "count.request.one", "count.request.many")),
                    ],
                );
                text.push(' ');
                text.push_str(&if self.double_bookings > 0 {
                    lang.t_with("verdict.pitfall.met", [("bookings", bookings(self.double_bookings))])
                } else {
                    lang.t("verdict.pitfall.by_luck").into_owned()
                });
                text.push_str(&lang.t("verdict.pitfall.why"));
                if !self.closed_sessions.is_empty() {
                    let ids = self.closed_sessions.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
                    text.push(' ');
                    text.push_str(&lang.t_with("verdict.pitfall.closed", [("sessions", ids)]));
                }
                with_busy(text)
            }
            Strategy::NamedLock => with_busy(t_with(
                "verdict.named_lock",
                &[
                    ("peak", self.pool_peak_in_use.to_string()),
                    ("pool", self.pool_size.to_string()),
                    ("p99", format!("{:.1}", self.bystander_p99_ms)),
                ],
            )),
            Strategy::NamedLockCoalesced => with_busy(lang.t_with(
                "verdict.coalesced",
                [
                    (
                        "transactions",
                        n(self.batches.into(), "count.transaction.one", "count.transaction.many"),
                    ),
                    ("attempts", n(self.attempts.into(), "count.attempt.one", "count.attempt.many")),
                ],
            )),
            Strategy::NamedLockUnqueued => with_busy(t_with(
                "verdict.unqueued",
                &[
                    ("peak", self.pool_peak_in_use.to_string()),
                    ("pool", self.pool_size.to_string()),
                    ("p99", format!("{:.1}", self.bystander_p99_ms)),
                ],
            )),
            Strategy::ParentRowLock => with_busy(lang.t("verdict.parent_row_lock").into_owned()),
            Strategy::UniqueSlot => with_busy(lang.t_with(
                "verdict.unique_slot",
                [("inserts", n(self.slot_collisions.into(), "count.insert.one", "count.insert.many"))],
            )),
            Strategy::Serializable if self.on_postgres => with_busy(lang.t_with(
                "verdict.serializable.postgres",
                [(
                    "failures",
                    n(
                        self.deadlocks_retried.into(),
                        "count.serialization_failure.one",
                        "count.serialization_failure.many",
                    ),
                )],
            )),
            Strategy::Serializable => with_busy(lang.t_with(
                "verdict.serializable",
                [(
                    "deadlocks",
                    n(self.deadlocks_retried.into(), "count.deadlock.one", "count.deadlock.many"),
                )],
            )),
            Strategy::ExclusionConstraint => {
                let mut text = lang.t_with(
                    "verdict.exclusion",
                    [("stays", n(self.refused.into(), "count.stay.one", "count.stay.many"))],
                );
                if self.deadlocks_retried > 0 {
                    text.push_str(&lang.t_with(
                        "verdict.exclusion.deadlocks",
                        [(
                            "deadlocks",
                            n(self.deadlocks_retried.into(), "count.deadlock.one", "count.deadlock.many"),
                        )],
                    ));
                }
                with_busy(text)
            }
            Strategy::RedisLock => with_busy(
                lang.t_with("verdict.redis_lock", [("ttl", strategies::LEASE_TTL.as_secs().to_string())])
                    + &lost,
            ),
            Strategy::RedisLockExpiring if self.double_bookings > 0 => with_busy(lang.t_with(
                "verdict.redis_expiring",
                [
                    ("holders", paused),
                    ("paused", strategies::PAUSED_FOR.as_millis().to_string()),
                    ("ttl", strategies::SHORT_LEASE.as_millis().to_string()),
                    ("bookings", bookings(self.double_bookings)),
                    ("releases", releases),
                ],
            )),
            Strategy::RedisLockExpiring => {
                with_busy(lang.t("verdict.redis_expiring.lucky").into_owned() + &lost)
            }
            Strategy::RedisLockFenced => with_busy(
                lang.t_with(
                    "verdict.redis_fenced",
                    [
                        ("holders", paused),
                        ("paused", strategies::PAUSED_FOR.as_millis().to_string()),
                        ("ttl", strategies::SHORT_LEASE.as_millis().to_string()),
                        ("writes", n(self.fenced_off.into(), "count.write.one", "count.write.many")),
                    ],
                ) + &lost,
            ),
            Strategy::FileLock => with_busy(lang.t("verdict.file_lock").into_owned()),
            Strategy::LockTable => with_busy(
                lang.t_with(
                    "verdict.lock_table",
                    [
                        ("peak", self.pool_peak_in_use.to_string()),
                        ("pool", self.pool_size.to_string()),
                        ("p99", format!("{:.1}", self.bystander_p99_ms)),
                    ],
                ) + &lost,
            ),
        }
    }
}

/// A finished race, as stored in `demo_races` and shown on `/demo`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RaceReport {
    #[serde(default)]
    pub id: i64,
    pub started_by: String,
    #[serde(with = "crate::wire::utc")]
    pub started_at: NaiveDateTime,
    pub clients: u32,
    pub attempts: u32,
    pub pause_ms: u32,
    pub capacity: i32,
    pub results: Vec<StrategyResult>,
}

impl RaceReport {
    pub fn rounds(&self) -> u32 {
        self.attempts.div_ceil(self.clients.max(1))
    }

    /// Whether one of its strategies booked stays (its rounds are fortnights, its damage nights).
    pub fn books_stays(&self) -> bool {
        self.results.iter().any(|r| r.strategy.books_stays())
    }

    /// The page's table as text, for `haita demo race`.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "race #{}: {} clients, {} attempts ({} rounds, one day each), pause {} ms, capacity {} per day\n",
            self.id,
            self.clients,
            self.attempts,
            self.rounds(),
            self.pause_ms,
            self.capacity
        );
        if self.books_stays() {
            out.push_str(&Lang::En.t("demo.race.stays"));
            out.push('\n');
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>9} {:>7} {:>8} {:>5} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>10} {:>12} {:>10} {:>6}",
            "strategy",
            "attempts",
            "confirmed",
            "double",
            "refused",
            "busy",
            "deadlock↻",
            "leaked",
            "reused",
            "p50 ms",
            "p99 ms",
            "elapsed",
            "pool peak",
            "bystander ms",
            "lease lost",
            "fenced"
        );
        for r in &self.results {
            let _ = writeln!(
                out,
                "{:<24} {:>8} {:>9} {:>7} {:>8} {:>5} {:>9} {:>6} {:>8} {:>8.1} {:>8.1} {:>6}ms {:>10} {:>12.1} {:>10} {:>6}{}",
                r.strategy.name(),
                r.attempts,
                r.confirmed,
                r.double_bookings,
                r.refused,
                r.busy,
                r.deadlocks_retried,
                r.leaked_locks,
                r.reentered,
                r.p50_ms,
                r.p99_ms,
                r.elapsed_ms,
                format!("{}/{}", r.pool_peak_in_use, r.pool_size),
                r.bystander_p99_ms,
                r.leases_lost,
                r.fenced_off,
                if r.capped { " (time cap)" } else { "" }
            );
        }
        out.push('\n');
        for r in &self.results {
            let _ = writeln!(out, "{}: {}", r.strategy.name(), r.verdict);
            if let Some(e) = &r.first_error {
                let _ = writeln!(out, "    first error: {e}");
            }
        }
        out
    }
}

/// How far one strategy of a running race has got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Attempts answered so far.
    pub attempts: u32,
    /// Bookings in the database so far.
    pub confirmed: i64,
    /// Bookings beyond capacity so far, counted in the database like the final ones.
    pub double_bookings: i64,
}

/// What a race tells whoever watches it, from the race's own threads.
pub enum Progress<'a> {
    /// Strategy `index` of the spec is running and has got this far.
    Running { index: usize, tally: Tally },
    /// Strategy `index` has finished.
    Done { index: usize, result: &'a StrategyResult },
}

/// A race's watcher: called a few times a second per strategy, so it must be quick.
pub type Watch<'a> = &'a (dyn Fn(Progress<'_>) + Sync);

/// Runs every strategy of `spec`, one after the other, and stores the report. Blocks for up to
/// [`TIME_CAP`] per strategy: call it through `db::OffExecutor` or from a thread. `watch` hears how far each
/// strategy has got while it runs.
pub fn run(
    pool: &DbPool,
    config: &Config,
    outside: &OutsideLocks,
    spec: &RaceSpec,
    started_by: &str,
    watch: Watch<'_>,
) -> Result<RaceReport, DemoError> {
    let started_at = chrono::Utc::now().naive_utc();
    let mut results = Vec::with_capacity(spec.strategies.len());
    for (index, &strategy) in spec.strategies.iter().enumerate() {
        let result = run_strategy(pool, config, outside, spec, strategy, &|tally| {
            watch(Progress::Running { index, tally });
        })?;
        watch(Progress::Done { index, result: &result });
        results.push(result);
    }
    let mut report = RaceReport {
        id: 0,
        started_by: started_by.to_string(),
        started_at,
        clients: spec.clients,
        attempts: spec.attempts,
        pause_ms: spec.pause_ms,
        capacity: CAPACITY,
        results,
    };
    let json = serde_json::to_string(&report).map_err(anyhow::Error::from)?;
    let mut conn = pool.get()?;
    conn.transaction(|conn| {
        diesel::insert_into(demo_races::table)
            .values(NewDemoRace { started_by, report: &json })
            .execute(conn)?;
        report.id = crate::db::last_insert_id(conn)?;
        Ok::<_, DemoError>(())
    })?;
    forget_old_races(&mut conn)?;
    Ok(report)
}

/// How long `started_by` must still wait before another race, if at all.
pub fn cooldown_left(conn: &mut DbConn, started_by: &str) -> Result<Option<Duration>, DemoError> {
    let last: Option<NaiveDateTime> = demo_races::table
        .filter(demo_races::started_by.eq(started_by))
        .order(demo_races::id.desc())
        .select(demo_races::created_at)
        .first(conn)
        .optional()?;
    let since = |at: NaiveDateTime| (chrono::Utc::now().naive_utc() - at).to_std().unwrap_or_default();
    Ok(last.map(since).and_then(|since| COOLDOWN.checked_sub(since)).filter(|left| !left.is_zero()))
}

/// Deletes the races older than the newest [`KEEP_RACES`], with the demo resources and bookings
/// they made. A race runs for minutes at most, so resources younger than ten minutes are left
/// alone: another instance's race may still be using them.
fn forget_old_races(conn: &mut DbConn) -> Result<(), DemoError> {
    let oldest_kept: Option<(i64, String)> = demo_races::table
        .order(demo_races::id.desc())
        .offset(KEEP_RACES - 1)
        .select((demo_races::id, demo_races::report))
        .first(conn)
        .optional()?;
    let Some((race_id, report)) = oldest_kept else { return Ok(()) };
    let Ok(report) = serde_json::from_str::<RaceReport>(&report) else { return Ok(()) };
    let Some(first_kept) = report.results.iter().map(|r| r.demo_resource_id).min() else { return Ok(()) };
    let settled = chrono::Utc::now().naive_utc() - chrono::TimeDelta::minutes(10);
    conn.transaction(|conn| {
        let old = demo_resources::table
            .filter(demo_resources::id.lt(first_kept))
            .filter(demo_resources::created_at.lt(settled))
            .select(demo_resources::id);
        diesel::delete(demo_bookings::table.filter(demo_bookings::demo_resource_id.eq_any(old)))
            .execute(conn)?;
        diesel::delete(demo_stays::table.filter(demo_stays::demo_resource_id.eq_any(old))).execute(conn)?;
        diesel::delete(
            demo_resources::table
                .filter(demo_resources::id.lt(first_kept))
                .filter(demo_resources::created_at.lt(settled)),
        )
        .execute(conn)?;
        diesel::delete(demo_races::table.filter(demo_races::id.lt(race_id))).execute(conn)?;
        Ok(())
    })
}

/// The race `id`, or the latest one when `id` is `None`; `None` when there is none yet.
pub fn load(conn: &mut DbConn, id: Option<i64>) -> Result<Option<RaceReport>, DemoError> {
    let query = demo_races::table.select((demo_races::id, demo_races::report)).into_boxed();
    let row: Option<(i64, String)> = match id {
        Some(id) => Some(
            query.filter(demo_races::id.eq(id)).first(conn).optional()?.ok_or(DemoError::RaceNotFound(id))?,
        ),
        None => query.order(demo_races::id.desc()).first(conn).optional()?,
    };
    row.map(|(id, json)| {
        let mut report: RaceReport = serde_json::from_str(&json).map_err(anyhow::Error::from)?;
        report.id = id;
        Ok(report)
    })
    .transpose()
}

/// A fresh demo resource: a parent row for `parent-row-lock`, and a key no earlier run used.
/// `bench bookings` books such throwaway resources too.
pub fn create_resource(conn: &mut DbConn, strategy: Strategy, capacity: i32) -> Result<i64, DemoError> {
    conn.transaction(|conn| {
        diesel::insert_into(demo_resources::table)
            .values(NewDemoResource { strategy: strategy.name(), capacity })
            .execute(conn)?;
        Ok(crate::db::last_insert_id(conn)?)
    })
}

/// What one client saw over all its rounds.
#[derive(Default)]
struct ClientLog {
    latencies: Vec<Duration>,
    refused: u32,
    busy: u32,
    errors: u32,
    retries: u32,
    slot_collisions: u32,
    reentered: u32,
    missed_releases: u32,
    sessions: Vec<i64>,
    first_error: Option<String>,
    /// Rounds this client started.
    rounds: u32,
    batches: u32,
    paused: u32,
    leases_lost: u32,
    fenced_off: u32,
}

struct Round<'a> {
    strategy: Strategy,
    pool: &'a DbPool,
    lanes: &'a Lanes,
    outside: &'a OutsideLocks,
    resource_id: i64,
    first_day: NaiveDate,
    spec: &'a RaceSpec,
    barrier: Barrier,
    stop: AtomicBool,
    deadline: Instant,
    /// Attempts answered so far, by all clients.
    answered: AtomicU32,
}

fn run_strategy(
    pool: &DbPool,
    config: &Config,
    outside: &OutsideLocks,
    spec: &RaceSpec,
    strategy: Strategy,
    report: &(dyn Fn(Tally) + Sync),
) -> Result<StrategyResult, DemoError> {
    let resource_id = create_resource(&mut *pool.get()?, strategy, CAPACITY)?;
    let first_day = far_day();
    let race_pool = db::build_pool(&Config {
        pool_size: spec.clients.min(config.pool_size).min(spec.connections).max(1),
        pool_timeout: TIME_CAP,
        ..config.clone()
    })
    .map_err(|e| anyhow::anyhow!("cannot open the race's pool: {e}"))?;
    let mut sessions = warm_up(&race_pool)?;
    // The app's waiting budget, LOCK_WAITERS_MAX, defaults to a quarter of the pool.
    let lanes = Lanes::new((race_pool.max_size() as usize / 4).max(1))?;

    let round = Round {
        strategy,
        pool: &race_pool,
        lanes: &lanes,
        outside,
        resource_id,
        first_day,
        spec,
        barrier: Barrier::new(spec.clients as usize),
        stop: AtomicBool::new(false),
        deadline: Instant::now() + TIME_CAP,
        answered: AtomicU32::new(0),
    };
    report(Tally::default());
    let started = Instant::now();
    let racing = AtomicBool::new(true);
    let (logs, bystander): (Vec<ClientLog>, Bystander) = std::thread::scope(|scope| {
        let (round, racing) = (&round, &racing);
        let bystander = scope.spawn(move || Bystander::watch(round.pool, racing));
        // On the app's pool, not the race's: the count must not queue behind the clients.
        scope.spawn(move || report_while_racing(pool, round, racing, report));
        let clients: Vec<_> =
            (0..spec.clients).map(|client| scope.spawn(move || run_client(round, client))).collect();
        let logs = clients.into_iter().map(|c| c.join().unwrap_or_default()).collect();
        racing.store(false, Ordering::Relaxed);
        (logs, bystander.join().unwrap_or_default())
    });
    let elapsed = started.elapsed();
    drop(lanes);

    let mut total = ClientLog::default();
    for log in logs {
        total.latencies.extend(log.latencies);
        total.refused += log.refused;
        total.busy += log.busy;
        total.errors += log.errors;
        total.retries += log.retries;
        total.slot_collisions += log.slot_collisions;
        total.reentered += log.reentered;
        total.missed_releases += log.missed_releases;
        sessions.extend(log.sessions);
        total.rounds = total.rounds.max(log.rounds);
        total.first_error = total.first_error.or(log.first_error);
        total.batches += log.batches;
        total.paused += log.paused;
        total.leases_lost += log.leases_lost;
        total.fenced_off += log.fenced_off;
    }
    total.latencies.sort_unstable();

    let race_pool_size = race_pool.max_size();
    let mut conn = pool.get()?;
    let days_raced = first_day.iter_days().take(total.rounds as usize);
    let leaks = close_leaked_sessions(&mut conn, pool.names(), resource_id, days_raced, &sessions)?;
    drop(race_pool); // closes every other session of this run
    let damage = count_damage(&mut conn, strategy, resource_id)?;
    if strategy == Strategy::FileLock {
        // Every attempt has finished: nobody can be holding or opening these files now.
        for day in first_day.iter_days().take(total.rounds as usize) {
            let name = lock_name(pool.names(), resource_id, day);
            let _ = std::fs::remove_file(file::path_of(&outside.dir, name.as_str()));
        }
    }

    let attempts = u32::try_from(total.latencies.len()).unwrap_or(u32::MAX);
    let mut result = StrategyResult {
        strategy,
        demo_resource_id: resource_id,
        attempts,
        confirmed: damage.confirmed,
        double_bookings: damage.beyond,
        overbooked_days: damage.days,
        refused: total.refused,
        busy: total.busy,
        errors: total.errors,
        deadlocks_retried: total.retries,
        slot_collisions: total.slot_collisions,
        reentered: total.reentered,
        missed_releases: total.missed_releases,
        leaked_locks: leaks.locks,
        closed_sessions: leaks.sessions,
        p50_ms: percentile_ms(&total.latencies, 50.0),
        p99_ms: percentile_ms(&total.latencies, 99.0),
        elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        capped: attempts < spec.attempts,
        batches: total.batches,
        pool_size: race_pool_size,
        pool_peak_in_use: bystander.peak_in_use,
        bystander_p99_ms: bystander.p99_ms(),
        paused: total.paused,
        leases_lost: total.leases_lost,
        fenced_off: total.fenced_off,
        first_error: total.first_error,
        on_postgres: pool.engine() == db::Engine::Postgres,
        verdict: String::new(),
    };
    result.verdict = result.explain();
    Ok(result)
}

fn run_client(round: &Round<'_>, client: u32) -> ClientLog {
    let spec = round.spec;
    let mut log = ClientLog::default();
    for r in 0..spec.rounds() {
        // One client decides for all whether the time is up, between two barriers, so every
        // client leaves at the same round and nobody waits forever at the next barrier.
        if round.barrier.wait().is_leader() && Instant::now() >= round.deadline {
            round.stop.store(true, Ordering::Relaxed);
        }
        round.barrier.wait();
        if round.stop.load(Ordering::Relaxed) {
            break;
        }
        log.rounds = r + 1;
        if r * spec.clients + client >= spec.attempts {
            continue; // the last round may need fewer clients
        }
        let (day, nights) = if round.strategy.books_stays() {
            let mut rng = rand::rng();
            let fortnight = round.first_day + chrono::Days::new(u64::from(r * STAY_ROUND_DAYS));
            (fortnight + chrono::Days::new(rng.random_range(0..7)), rng.random_range(STAY_NIGHTS))
        } else {
            (round.first_day + chrono::Days::new(u64::from(r)), 1)
        };
        let attempt = Attempt {
            pool: round.pool,
            resource_id: round.resource_id,
            day,
            nights,
            client: i32::try_from(client).unwrap_or(i32::MAX),
            pause: Duration::from_millis(u64::from(spec.pause_ms)),
            lock_wait: LOCK_WAIT,
            queue: Queue::Lanes(round.lanes),
            outside: round.outside,
        };
        let mut seen = Seen::default();
        let started = Instant::now();
        // A panic must not leave the other clients stuck at the barrier.
        let answer = std::panic::catch_unwind(AssertUnwindSafe(|| round.strategy.book(attempt, &mut seen)))
            .unwrap_or_else(|_| Err(DemoError::Internal(anyhow::anyhow!("the attempt panicked"))));
        log.latencies.push(started.elapsed());
        round.answered.fetch_add(1, Ordering::Relaxed);
        match answer {
            Ok(Answer::Confirmed) => {}
            Ok(Answer::Full) => log.refused += 1,
            // Counted as `fenced_off` (from `seen`): refused by design, neither busy nor a bug.
            Err(DemoError::FencedOff(_)) => {}
            Err(e) if e.is_busy() => log.busy += 1,
            Err(e) => {
                log.errors += 1;
                log.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        log.retries += seen.retries;
        log.slot_collisions += seen.slot_collisions;
        log.reentered += u32::from(seen.reentered);
        log.missed_releases += u32::from(seen.missed_release);
        log.sessions.extend(seen.sessions);
        log.batches += seen.batches;
        log.paused += u32::from(seen.paused);
        log.leases_lost += u32::from(seen.lease_lost);
        log.fenced_off += u32::from(seen.fenced_off);
    }
    log
}

/// Every [`REPORT_EVERY`] while the race runs: the attempts answered and the bookings counted in
/// the database so far. A count that fails (the pool is busy) is skipped, not waited for.
fn report_while_racing(
    pool: &DbPool,
    round: &Round<'_>,
    racing: &AtomicBool,
    report: &(dyn Fn(Tally) + Sync),
) {
    let mut next = Instant::now() + REPORT_EVERY;
    let mut last = Tally::default();
    while racing.load(Ordering::Relaxed) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        next += REPORT_EVERY;
        let mut tally = Tally { attempts: round.answered.load(Ordering::Relaxed), ..last };
        if let Ok(damage) = pool
            .get()
            .map_err(DemoError::from)
            .and_then(|mut c| count_damage(&mut c, round.strategy, round.resource_id))
        {
            (tally.confirmed, tally.double_bookings) = (damage.confirmed, damage.beyond);
        }
        if tally != last {
            report(tally);
            last = tally;
        }
    }
}

/// A request that needs no lock, made over and over while a race runs, on the race's pool.
#[derive(Default)]
struct Bystander {
    latencies: Vec<Duration>,
    /// The most connections the race's clients held at once, sampled before each request.
    peak_in_use: u32,
}

impl Bystander {
    fn watch(pool: &DbPool, racing: &AtomicBool) -> Self {
        let mut seen = Self::default();
        while racing.load(Ordering::Relaxed) {
            let state = pool.state();
            seen.peak_in_use = seen.peak_in_use.max(state.connections - state.idle_connections);
            let started = Instant::now();
            if let Ok(mut conn) = pool.get() {
                let _ =
                    diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>("1")).execute(&mut conn);
            }
            seen.latencies.push(started.elapsed());
            std::thread::sleep(Duration::from_millis(2));
        }
        seen.latencies.sort_unstable();
        seen
    }

    fn p99_ms(&self) -> f64 {
        percentile_ms(&self.latencies, 99.0)
    }
}

/// Opens every connection of the pool before the race (so no client times the connect), and
/// returns their session ids.
fn warm_up(pool: &DbPool) -> Result<Vec<i64>, DemoError> {
    let mut held = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..pool.max_size() {
        let mut conn = pool.get()?;
        ids.push(conn.dialect().session_id(&mut conn)?);
        held.push(conn);
    }
    Ok(ids)
}

/// A random day centuries ahead: named locks are server-wide, and this keeps a demo's lock
/// names apart from real bookings and from other races on the same server.
fn far_day() -> NaiveDate {
    let start = NaiveDate::from_ymd_opt(2200, 1, 1).unwrap_or(NaiveDate::MAX);
    start + chrono::Days::new(rand::rng().random_range(0..200_000))
}

struct Leaks {
    locks: u32,
    sessions: Vec<i64>,
}

/// Finds the days whose lock is still held by one of `ours` and closes exactly those sessions —
/// never a session this run did not open. Closing a session frees every lock it holds.
fn close_leaked_sessions(
    conn: &mut DbConn,
    names: &Namespace,
    resource_id: i64,
    days: impl Iterator<Item = NaiveDate>,
    ours: &[i64],
) -> Result<Leaks, DemoError> {
    let dialect = conn.dialect();
    let ours: BTreeSet<i64> = ours.iter().copied().collect();
    let mut leaked = Vec::new();
    let mut sessions = BTreeSet::new();
    for day in days {
        let name = lock_name(names, resource_id, day);
        if let Some(holder) = dialect.holder_of(conn, name.as_str())?.filter(|h| ours.contains(h)) {
            leaked.push(name);
            sessions.insert(holder);
        }
    }
    for id in &sessions {
        dialect.end_session(conn, *id)?;
    }
    // KILL returns before the session is gone: wait, bounded, until its locks are free.
    let deadline = Instant::now() + Duration::from_secs(5);
    for name in &leaked {
        while dialect.holder_of(conn, name.as_str())?.is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(Leaks {
        locks: u32::try_from(leaked.len()).unwrap_or(u32::MAX),
        sessions: sessions.into_iter().collect(),
    })
}

struct Damage {
    confirmed: i64,
    beyond: i64,
    days: i64,
}

#[derive(QueryableByName)]
struct DamageRow {
    #[diesel(sql_type = BigInt)]
    confirmed: i64,
    #[diesel(sql_type = BigInt)]
    beyond: i64,
    #[diesel(sql_type = BigInt)]
    days: i64,
}

/// Counted in the database: bookings, bookings beyond capacity, and days over capacity; for a
/// strategy that books stays, stays, nights booked beyond capacity and nights over capacity.
fn count_damage(conn: &mut DbConn, strategy: Strategy, resource_id: i64) -> Result<Damage, DemoError> {
    if strategy.books_stays() {
        count_stay_damage(conn, resource_id)
    } else {
        count_day_damage(conn, resource_id)
    }
}

/// The days' damage. The sums are cast back to 64-bit integers (MySQL answers DECIMAL,
/// PostgreSQL NUMERIC), and a day over capacity counts as 1 (MySQL would sum `n > capacity`
/// itself; PostgreSQL sums no booleans).
fn count_day_damage(conn: &mut DbConn, resource_id: i64) -> Result<Damage, DemoError> {
    const DAMAGE: Sql = Sql::per_engine(
        "SELECT CAST(COALESCE(SUM(n), 0) AS SIGNED) AS confirmed, \
                CAST(COALESCE(SUM(GREATEST(n - capacity, 0)), 0) AS SIGNED) AS beyond, \
                CAST(COALESCE(SUM(n > capacity), 0) AS SIGNED) AS days \
         FROM (SELECT COUNT(*) AS n, r.capacity FROM demo_bookings b \
               JOIN demo_resources r ON r.id = b.demo_resource_id \
               WHERE b.demo_resource_id = ? GROUP BY b.day, r.capacity) per_day",
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS confirmed, \
                CAST(COALESCE(SUM(GREATEST(n - capacity, 0)), 0) AS BIGINT) AS beyond, \
                CAST(COALESCE(SUM(CASE WHEN n > capacity THEN 1 ELSE 0 END), 0) AS BIGINT) AS days \
         FROM (SELECT COUNT(*) AS n, r.capacity FROM demo_bookings b \
               JOIN demo_resources r ON r.id = b.demo_resource_id \
               WHERE b.demo_resource_id = ? GROUP BY b.day, r.capacity) per_day",
    );
    let row: DamageRow = cached_sql::<Untyped>(DAMAGE).bind::<BigInt, _>(resource_id).get_result(conn)?;
    Ok(Damage { confirmed: row.confirmed, beyond: row.beyond, days: row.days })
}

/// The stays' damage, night by night: each stay is unrolled into its nights (a recursive query,
/// one row per night, check_in … check_out − 1), and the nights are counted as the days are
/// above. The statements differ only in how a day is added to a date.
fn count_stay_damage(conn: &mut DbConn, resource_id: i64) -> Result<Damage, DemoError> {
    const DAMAGE: Sql = Sql::per_engine(
        "WITH RECURSIVE nights (night, check_out) AS ( \
             SELECT check_in, check_out FROM demo_stays WHERE demo_resource_id = ? \
             UNION ALL \
             SELECT night + INTERVAL 1 DAY, check_out FROM nights WHERE night + INTERVAL 1 DAY < check_out) \
         SELECT CAST((SELECT COUNT(*) FROM demo_stays WHERE demo_resource_id = ?) AS SIGNED) AS confirmed, \
                CAST(COALESCE(SUM(GREATEST(n - r.capacity, 0)), 0) AS SIGNED) AS beyond, \
                CAST(COALESCE(SUM(n > r.capacity), 0) AS SIGNED) AS days \
         FROM (SELECT COUNT(*) AS n FROM nights GROUP BY night) per_night \
         JOIN demo_resources r ON r.id = ?",
        "WITH RECURSIVE nights (night, check_out) AS ( \
             SELECT check_in, check_out FROM demo_stays WHERE demo_resource_id = ? \
             UNION ALL \
             SELECT night + 1, check_out FROM nights WHERE night + 1 < check_out) \
         SELECT CAST((SELECT COUNT(*) FROM demo_stays WHERE demo_resource_id = ?) AS BIGINT) AS confirmed, \
                CAST(COALESCE(SUM(GREATEST(n - r.capacity, 0)), 0) AS BIGINT) AS beyond, \
                CAST(COALESCE(SUM(CASE WHEN n > r.capacity THEN 1 ELSE 0 END), 0) AS BIGINT) AS days \
         FROM (SELECT COUNT(*) AS n FROM nights GROUP BY night) per_night \
         JOIN demo_resources r ON r.id = ?",
    );
    let row: DamageRow = cached_sql::<Untyped>(DAMAGE)
        .bind::<BigInt, _>(resource_id)
        .bind::<BigInt, _>(resource_id)
        .bind::<BigInt, _>(resource_id)
        .get_result(conn)?;
    Ok(Damage { confirmed: row.confirmed, beyond: row.beyond, days: row.days })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::answers::Declared;

    #[test]
    fn specs_are_bounded_with_a_message_naming_the_field() {
        let parse = |names: &[&str], clients, attempts, pause| {
            RaceSpec::parse(names, clients, attempts, pause, &Bounds::LOGGED_IN, db::Engine::Postgres)
        };
        let spec = parse(&["all"], None, None, None).expect("defaults");
        assert_eq!(spec.strategies.len(), Strategy::ALL.len());
        assert_eq!((spec.clients, spec.attempts, spec.pause_ms), (32, 128, 5));
        assert_eq!(spec.connections, MAX_RACE_CONNECTIONS);
        for (clients, attempts, pause, field) in [
            (Some(0), None, None, "clients"),
            (Some(257), None, None, "clients"),
            (None, Some(10_001), None, "attempts"),
            (None, None, Some(1_001), "pause_ms"),
        ] {
            let err = parse(&["no-lock"], clients, attempts, pause).expect_err("out of range");
            assert!(err.to_string().contains(field), "{err}");
        }
        assert!(parse(&[], None, None, None).is_err());
        let twice = parse(&["no-lock", "all"], None, None, None).expect("dedup");
        assert_eq!(twice.strategies.len(), Strategy::ALL.len());
    }

    #[test]
    fn all_means_what_the_server_can_run_and_a_strategy_it_cannot_is_refused_saying_why() {
        let parse =
            |names: &[&str], engine| RaceSpec::parse(names, None, None, None, &Bounds::LOGGED_IN, engine);
        let on_postgres = parse(&["all"], db::Engine::Postgres).expect("all");
        assert!(on_postgres.strategies.contains(&Strategy::ExclusionConstraint));
        let on_mysql = parse(&["all"], db::Engine::Mysql).expect("all");
        assert_eq!(on_mysql.strategies.len(), Strategy::ALL.len() - 1);
        assert!(!on_mysql.strategies.contains(&Strategy::ExclusionConstraint));

        let refused =
            parse(&["named-lock", "exclusion-constraint"], db::Engine::Mysql).expect_err("no constraint");
        assert!(matches!(refused, DemoError::Unavailable { strategy: Strategy::ExclusionConstraint, .. }));
        assert!(refused.to_string().starts_with("exclusion-constraint runs only on PostgreSQL"), "{refused}");
        assert_eq!(refused.answer().code, "strategy_unavailable");
        assert_eq!(refused.answer().status, actix_web::http::StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn a_visitors_race_is_small_and_holds_few_connections() {
        let visitor = |clients, attempts| {
            RaceSpec::parse(&["all"], clients, attempts, None, &Bounds::VISITOR, db::Engine::Postgres)
        };
        let spec = visitor(None, None).expect("defaults");
        assert_eq!((spec.clients, spec.attempts, spec.connections), (8, 64, 4));
        let err = visitor(Some(9), None).expect_err("more clients than a visitor may ask for");
        assert!(err.to_string().contains("between 1 and 8"), "{err}");
        assert!(visitor(None, Some(65)).is_err(), "more attempts than a visitor may ask for");
    }
}
