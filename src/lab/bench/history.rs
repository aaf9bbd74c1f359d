//! A database shaped like a real deployment, for the benches to book on: `--data realistic`.
//!
//! A booking's reads are only as cheap as the rows around the night it books: the night's own
//! reservations, the stays that began in the days before it, the user's other bookings. A scratch
//! database with nothing in it hides every one of those costs, and one with a few users who each
//! hold thousands of bookings (`--data hot-user`, the benches' earlier shape) shows one that no
//! real user can reach (the quota stops them at `MAX_FUTURE_BOOKINGS_PER_USER` nights). So the
//! benches book on a history:
//!
//! - `users` customers (10 000 by default), each with a live session;
//! - 100 resources: 80 that are let by the night (hotel-like, 5–40 places, stays of 1–7 nights,
//!   one or two nights most often) and 20 that are booked by the day (1–4 places, one night);
//! - about `reservations` reservations (1 000 000 by default) laid place by place over the past
//!   years and the next 300 days: a place is taken about three nights in four up to two weeks
//!   ahead, less and less over the next three months, one night in twenty-seven after that; one
//!   reservation in fourteen was cancelled;
//! - every user within the quota (at most half of it held in future nights, so the bench's own
//!   bookings fit), never two reservations of one user on one night of one resource, and never
//!   more than a resource's places on a night: the invariants the app keeps, kept by the data it
//!   starts from ([`check`] proves it after every bench).
//!
//! Deterministic (a fixed seed): the same data for the app and the raw path, and from run to run.

use std::collections::HashMap;
use std::fmt::Write as _;

use chrono::NaiveDate;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::auth::session::Ticket;
use crate::bookings::service::today;
use crate::db::{DbConn, Engine, cached_sql};

/// How the benches' data is shaped (`--data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Data {
    /// A history like a real site's: many users, each within the quotas, a million reservations.
    Realistic,
    /// The pathological case: one user per client, each booking thousands, the quotas lifted.
    HotUser,
}

/// The size of a realistic history (`--users`, `--history`).
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub users: u32,
    pub reservations: u64,
}

/// What [`seed`] made: the users' sessions and the resources, hotel-like ones first.
pub struct History {
    pub tickets: Vec<Ticket>,
    /// `(id, capacity)`, the ones let by the night first.
    pub resources: Vec<(i64, i32)>,
    pub reservations: u64,
}

/// Resources let by the night, and booked by the day.
const HOTELS: usize = 80;
const ROOMS: usize = 20;
/// Days ahead the history reaches.
const AHEAD: i64 = 300;
/// Stay lengths of a hotel-like resource, 1 to 7 nights, and how often each is chosen (in %).
const LENGTHS: [(u32, u32); 7] = [(1, 25), (2, 25), (3, 20), (4, 10), (5, 8), (6, 6), (7, 6)];
/// Rows per INSERT.
const CHUNK: usize = 1000;
/// A live session's id for user `id`: the prefix and the zero-padded id, 43 characters as the
/// app's own session ids are.
const SESSION_PREFIX: &str = "bench-history-";
const SESSION_DIGITS: usize = 43 - SESSION_PREFIX.len();

/// Fills the (freshly migrated) database of `conn` with a history of `size`, reporting progress
/// on stderr.
pub fn seed(conn: &mut DbConn, size: Size, max_future: u32) -> anyhow::Result<History> {
    let started = std::time::Instant::now();
    let users = insert_users(conn, size.users)?;
    let mut rng = StdRng::seed_from_u64(0x0068_6169_7461); // "haita"
    let resources = insert_resources(conn, &mut rng)?;
    let plan = Plan::new(&resources, size.reservations);
    let budget = i64::from(max_future / 2);
    let rows = plan.lay_out(&mut rng, &users, budget);
    let total = rows.len() as u64;
    for (n, chunk) in rows.chunks(CHUNK).enumerate() {
        insert_reservations(conn, chunk)?;
        if n % 100 == 99 {
            eprintln!("history: {} of {total} reservations", (n + 1) * CHUNK);
        }
    }
    if conn.engine() == Engine::Postgres {
        // Fresh statistics, as a database that has lived would have: the planner otherwise
        // guesses from an empty table.
        // VACUUM refuses to run inside a transaction, which a multi-statement text is.
        for table in ["reservations", "users", "user_sessions"] {
            conn.batch_execute(&format!("VACUUM ANALYZE {table}"))?;
        }
    } else {
        conn.batch_execute("ANALYZE TABLE reservations, users, user_sessions")?;
    }
    eprintln!(
        "history: {} users, {} resources, {total} reservations in {:.1} s",
        users.len(),
        resources.len(),
        started.elapsed().as_secs_f64()
    );
    let tickets = users.iter().map(|&id| ticket(id)).collect();
    Ok(History { tickets, resources, reservations: total })
}

/// The ticket of the session [`insert_users`] opened for user `id`.
fn ticket(id: i64) -> Ticket {
    Ticket::new(id, format!("{SESSION_PREFIX}{id:0SESSION_DIGITS$}"))
}

/// `n` customers who cannot log in (no password hash matches `-`), each with a session that
/// lives a day; their ids in ascending order.
/// (Told apart from earlier users by id, not by name: PostgreSQL's case-insensitive collation
/// of usernames refuses `LIKE`.)
fn insert_users(conn: &mut DbConn, n: u32) -> anyhow::Result<Vec<i64>> {
    let before = max_id(conn, "users")?;
    let sessions = |digits: &str| {
        format!(
            "INSERT INTO user_sessions (id, user_id, created_at, expires_at) \
               SELECT {digits}, id, {{now}}, {{now}} + {{day}} FROM users WHERE id > {before}"
        )
    };
    match conn.engine() {
        Engine::Mysql => {
            conn.batch_execute(&format!("SET SESSION cte_max_recursion_depth = {n}"))
                .or_else(|_| conn.batch_execute(&format!("SET SESSION max_recursive_iterations = {n}")))?;
            conn.batch_execute(&format!(
                "INSERT INTO users (username, display_name, password_hash, role) \
                   WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) \
                   SELECT CONCAT('guest', i), CONCAT('Guest ', i), '-', 'customer' FROM n; {}",
                sessions(&format!("CONCAT('{SESSION_PREFIX}', LPAD(id, {SESSION_DIGITS}, '0'))"))
                    .replace("{now}", "UTC_TIMESTAMP(6)")
                    .replace("{day}", "INTERVAL 1 DAY")
            ))?;
        }
        Engine::Postgres => conn.batch_execute(&format!(
            "INSERT INTO users (username, display_name, password_hash, role) \
               SELECT 'guest' || i, 'Guest ' || i, '-', 'customer' FROM generate_series(1, {n}) AS n(i); {}",
            sessions(&format!("'{SESSION_PREFIX}' || LPAD(CAST(id AS TEXT), {SESSION_DIGITS}, '0')"))
                .replace("{now}", "LOCALTIMESTAMP")
                .replace("{day}", "INTERVAL '1 day'")
        ))?,
    }
    Ok(cached_sql::<BigInt>("SELECT id FROM users WHERE id > ? ORDER BY id")
        .bind::<BigInt, _>(before)
        .load(conn)?)
}

/// The highest id of `table` so far (0 when empty).
fn max_id(conn: &mut DbConn, table: &str) -> anyhow::Result<i64> {
    // A BIGINT on both engines: the column's type, which COALESCE keeps.
    Ok(cached_sql::<BigInt>(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}")).get_result(conn)?)
}

/// The hotel-like resources (5–40 places) and the ones booked by the day (1–4).
fn insert_resources(conn: &mut DbConn, rng: &mut StdRng) -> anyhow::Result<Vec<(i64, i32)>> {
    let before = max_id(conn, "resources")?;
    let mut sql = String::from("INSERT INTO resources (name, description, capacity, price_cents) VALUES ");
    for i in 0..HOTELS + ROOMS {
        let (name, capacity, price) = if i < HOTELS {
            (format!("History hotel {i}"), rng.random_range(5..=40), 9_000)
        } else {
            (format!("History room {i}"), rng.random_range(1..=4), 0)
        };
        let comma = if i == 0 { "" } else { ", " };
        write!(sql, "{comma}('{name}', '', {capacity}, {price})")?;
    }
    conn.batch_execute(&sql)?;
    let found: Vec<(i64, i32)> =
        cached_sql::<(BigInt, Integer)>("SELECT id, capacity FROM resources WHERE id > ? ORDER BY id")
            .bind::<BigInt, _>(before)
            .load(conn)?;
    Ok(found)
}

/// One reservation of the history.
#[derive(Clone, Copy)]
struct Row {
    resource: i64,
    user: i64,
    day: NaiveDate,
    nights: u32,
    cancelled: bool,
}

/// Where the history starts, so that it holds about the number of reservations asked for.
struct Plan<'a> {
    resources: &'a [(i64, i32)],
    first: NaiveDate,
    today: NaiveDate,
}

/// How often a place is taken `ahead` days from today (negative: in the past).
fn occupancy(ahead: i64) -> f64 {
    if ahead <= 14 { 0.75 } else { 0.75 * (1.0 - (ahead - 14) as f64 / 90.0).max(0.05) }
}

impl<'a> Plan<'a> {
    fn new(resources: &'a [(i64, i32)], reservations: u64) -> Self {
        let mean_length: f64 = LENGTHS.iter().map(|&(n, w)| f64::from(n * w)).sum::<f64>() / 100.0;
        // Reservations started per day over all places, past occupancy, cancelled ones included.
        let per_day: f64 = resources
            .iter()
            .enumerate()
            .map(|(i, &(_, capacity))| {
                let length = if i < HOTELS { mean_length } else { 1.0 };
                f64::from(capacity) * 0.75 / length * (15.0 / 14.0)
            })
            .sum();
        let ahead: f64 = (0..AHEAD).map(occupancy).sum::<f64>() / 0.75;
        let past = ((reservations as f64 / per_day) - ahead).max(30.0) as i64;
        let today = today();
        Self { resources, first: today - chrono::Days::new(past.unsigned_abs()), today }
    }

    /// Every place's timeline, from the first day to `AHEAD` days from today: a reservation,
    /// a gap that keeps the occupancy, the next. Users are drawn at random among those for whom
    /// the reservation breaks no rule (their future nights within `budget`, no other
    /// reservation of theirs on those nights of the resource); a reservation nobody may take is
    /// left out.
    fn lay_out(&self, rng: &mut StdRng, users: &[i64], budget: i64) -> Vec<Row> {
        let last = self.today + chrono::Days::new(AHEAD.unsigned_abs());
        let mut rows = Vec::new();
        let mut future_nights: HashMap<i64, i64> = HashMap::new();
        // The nights each user holds of each resource, as [day, check_out) spans.
        let mut held: HashMap<(i64, i64), Vec<(NaiveDate, NaiveDate)>> = HashMap::new();
        for (i, &(resource, capacity)) in self.resources.iter().enumerate() {
            for _place in 0..capacity {
                let mut day = self.first + chrono::Days::new(rng.random_range(0..7));
                while day < last {
                    let nights = if i < HOTELS { length(rng) } else { 1 };
                    let ahead = (day - self.today).num_days();
                    let taken = occupancy(ahead);
                    // A gap of about nights × (1 − taken) / taken days on average.
                    let mean_gap = f64::from(nights) * (1.0 - taken) / taken;
                    let gap = rng.random_range(0.0..=2.0 * mean_gap).round() as u64;
                    let check_out = day + chrono::Days::new(u64::from(nights));
                    // One in fourteen was cancelled: it takes no place, and the place is let again.
                    let cancelled = rng.random_ratio(1, 14);
                    let counts = check_out > self.today && !cancelled;
                    let user = (0..8).map(|_| users[rng.random_range(0..users.len())]).find(|user| {
                        let free = held
                            .get(&(*user, resource))
                            .is_none_or(|spans| spans.iter().all(|&(d, c)| c <= day || check_out <= d));
                        let within = !counts
                            || future_nights.get(user).copied().unwrap_or(0) + i64::from(nights) <= budget;
                        free && within
                    });
                    if let Some(user) = user {
                        rows.push(Row { resource, user, day, nights, cancelled });
                        if !cancelled {
                            held.entry((user, resource)).or_default().push((day, check_out));
                            if counts {
                                *future_nights.entry(user).or_insert(0) += i64::from(nights);
                            }
                        }
                    }
                    // After a cancelled one the place is let again from the next day.
                    day = if cancelled {
                        day + chrono::Days::new(1)
                    } else {
                        check_out + chrono::Days::new(gap)
                    };
                }
            }
        }
        rows
    }
}

/// A stay's length, by [`LENGTHS`].
fn length(rng: &mut StdRng) -> u32 {
    let mut pick = rng.random_range(0..100);
    for &(nights, weight) in &LENGTHS {
        if pick < weight {
            return nights;
        }
        pick -= weight;
    }
    1
}

/// One INSERT of up to [`CHUNK`] reservations; every value a number or a date this module made.
fn insert_reservations(conn: &mut DbConn, rows: &[Row]) -> anyhow::Result<()> {
    let mut sql = String::from(
        "INSERT INTO reservations (resource_id, user_id, day, check_out, status, created_at, cancelled_at) VALUES ",
    );
    for (n, row) in rows.iter().enumerate() {
        let check_out = row.day + chrono::Days::new(u64::from(row.nights));
        let created = row.day - chrono::Days::new(20);
        let (status, cancelled_at) = if row.cancelled {
            ("cancelled", format!("'{created} 13:00:00'"))
        } else {
            ("confirmed", "NULL".into())
        };
        let comma = if n == 0 { "" } else { ", " };
        write!(
            sql,
            "{comma}({}, {}, '{}', '{check_out}', '{status}', '{created} 12:00:00', {cancelled_at})",
            row.resource, row.user, row.day
        )?;
    }
    conn.batch_execute(&sql)?;
    Ok(())
}

/// What broke an invariant, if anything did: nights of a resource with more confirmed
/// reservations than places, and users with two confirmed reservations of one resource on one
/// night. Counted from today on (the bench books nothing earlier), in Rust over the rows.
pub fn check(conn: &mut DbConn) -> anyhow::Result<(u64, u64)> {
    let today = today();
    let rows: Vec<(i64, i64, NaiveDate, NaiveDate, i32)> =
        cached_sql::<(BigInt, BigInt, Date, Date, Integer)>(
            "SELECT x.resource_id, x.user_id, x.day, x.check_out, r.capacity \
             FROM reservations x JOIN resources r ON r.id = x.resource_id \
             WHERE x.status = 'confirmed' AND x.check_out > ?",
        )
        .bind::<Date, _>(today)
        .load(conn)?;
    let mut per_night: HashMap<(i64, NaiveDate), (i64, i32)> = HashMap::new();
    let mut per_user: HashMap<(i64, i64, NaiveDate), u32> = HashMap::new();
    for (resource, user, day, check_out, capacity) in rows {
        for night in day.iter_days().take_while(|night| *night < check_out) {
            per_night.entry((resource, night)).or_insert((0, capacity)).0 += 1;
            *per_user.entry((resource, user, night)).or_insert(0) += 1;
        }
    }
    let over = per_night.values().filter(|(count, capacity)| *count > i64::from(*capacity)).count();
    let twice = per_user.values().filter(|count| **count > 1).count();
    Ok((over as u64, twice as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stay_lengths_are_weighted_to_a_hundred_and_short_stays_come_first() {
        assert_eq!(LENGTHS.iter().map(|&(_, w)| w).sum::<u32>(), 100);
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = [0u32; 8];
        (0..10_000).for_each(|_| seen[length(&mut rng) as usize] += 1);
        assert!(seen[1] > seen[7] * 2, "{seen:?}");
        assert_eq!(seen[0], 0);
    }

    #[test]
    fn places_are_taken_less_far_ahead() {
        assert!(occupancy(-100) > occupancy(100));
        assert!(occupancy(AHEAD) > 0.0);
    }
}
