//! `haita bench coalescing`: one hot day, bookings unqueued, one at a time and in coalesced batches.
//!
//! All three run in this process on the same pool, without HTTP, through exactly what a booking
//! request runs: *unqueued* is every client at the server at once (each with its own turn, as
//! before the per-key queue); *one at a time* is the per-key queue's turn and `service::book`;
//! *coalesced* is `bookings::coalesce::Coalescer`. Every attempt books a user who has no booking
//! yet on a day with room for all, so every attempt is a real insert and commit. The server's
//! own counters (`SHOW GLOBAL STATUS`) give the statements and commits per booking; run on a
//! quiet server, since they count everything it does.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Text;

use crate::bookings::coalesce::Coalescer;
use crate::bookings::model::BookingDate;
use crate::bookings::service;
use crate::config::Config;
use crate::db::{self, DbPool, ScratchDatabase};
use crate::locking::{LockQueue, Turn};

/// Users created up front: each booking needs one without a booking that day.
const USERS: i64 = 200_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// Every client at the server at once, as before the per-key queue (`Turn::alone`).
    Unqueued,
    /// The per-key queue: one request per day at the server, one booking per transaction.
    OneAtATime,
    Coalesced,
}

impl Path {
    const ALL: [Path; 3] = [Path::Unqueued, Path::OneAtATime, Path::Coalesced];

    fn label(self) -> &'static str {
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
    statements_per_booking: f64,
    commits_per_booking: f64,
}

pub fn run(config: &Config, clients: usize, seconds: u64) -> anyhow::Result<()> {
    anyhow::ensure!((1..=512).contains(&clients), "--clients must be between 1 and 512");
    let (_, name) = db::split_database_url(&config.database_url)?;
    let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
    let bench_config = Config { pool_size: config.pool_size, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&bench_config)?;
    db::run_migrations(&pool)?;
    let resource = prepare(&mut *pool.get()?)?;
    let next_user = Arc::new(AtomicI64::new(1));
    let duration = Duration::from_secs(seconds);

    let mut results = Vec::new();
    // Alternate the paths, three times each, on fresh days; the median run is reported.
    for round in 0..3 {
        for (n, path) in (0u64..).zip(Path::ALL) {
            let day = service::today() + chrono::Days::new(10 + round * 3 + n);
            let day = BookingDate::parse(&day.to_string(), service::today())?;
            results.push(measure(&pool, &bench_config, path, resource, day, &next_user, clients, duration)?);
        }
    }
    drop(pool);
    drop(scratch);
    print!("{}", report(&results, clients, seconds));
    Ok(())
}

fn prepare(conn: &mut MysqlConnection) -> anyhow::Result<i64> {
    // The recursion limit of a CTE is `cte_max_recursion_depth` on MySQL and
    // `max_recursive_iterations` on MariaDB.
    conn.batch_execute(&format!("SET SESSION cte_max_recursion_depth = {USERS}"))
        .or_else(|_| conn.batch_execute(&format!("SET SESSION max_recursive_iterations = {USERS}")))?;
    conn.batch_execute(&format!(
        "INSERT INTO users (username, display_name, password_hash, role) \
           WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {USERS}) \
           SELECT CONCAT('b', i), CONCAT('b', i), '-', 'customer' FROM n; \
         INSERT INTO resources (name, description, capacity) VALUES ('Hot day', '', 1000000)"
    ))?;
    Ok(db::last_insert_id(conn)?)
}

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

/// (statements, commits) the server has run since it started.
fn server_counters(pool: &DbPool) -> anyhow::Result<(u64, u64)> {
    let rows: Vec<Status> =
        diesel::sql_query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit')")
            .load(&mut *pool.get()?)?;
    let value = |name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.value.parse::<u64>().ok());
    // Questions: every statement clients sent, prepared executions included (not the
    // prepares and closes themselves).
    Ok((value("Questions").unwrap_or(0), value("Com_commit").unwrap_or(0)))
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
    let (statements_before, commits_before) = server_counters(pool)?;
    let (booked, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    actix_web::rt::System::new().block_on({
        let (pool, booked, busy, next_user) = (pool.clone(), booked.clone(), busy.clone(), next_user.clone());
        let (locks, coalescer, wait) = (
            Arc::new(LockQueue::new(config.lock_waiters_max)),
            Arc::new(Coalescer::default()),
            config.lock_wait,
        );
        async move {
            let tasks = (0..clients).map(|_| {
                let (pool, booked, busy, next_user) =
                    (pool.clone(), booked.clone(), busy.clone(), next_user.clone());
                let (locks, coalescer) = (locks.clone(), coalescer.clone());
                actix_web::rt::spawn(async move {
                    let end = Instant::now() + duration;
                    while Instant::now() < end {
                        let user = next_user.fetch_add(1, Ordering::Relaxed);
                        if user > USERS {
                            break;
                        }
                        let answer = match path {
                            Path::Coalesced => coalescer.book(&pool, &locks, wait, user, resource, day).await,
                            Path::Unqueued => {
                                let (pool, name) = (pool.clone(), pool.names().booking(resource, day.day()));
                                actix_web::web::block(move || {
                                    service::book(&pool, Turn::alone(name, wait), user, resource, day)
                                })
                                .await
                                .unwrap_or_else(|e| Err(e.into()))
                            }
                            Path::OneAtATime => {
                                match locks.turn(pool.names().booking(resource, day.day()), wait).await {
                                    Ok(turn) => {
                                        let pool = pool.clone();
                                        actix_web::web::block(move || {
                                            service::book(&pool, turn, user, resource, day)
                                        })
                                        .await
                                        .unwrap_or_else(|e| Err(e.into()))
                                    }
                                    Err(e) => Err(e.into()),
                                }
                            }
                        };
                        let counter = if answer.is_ok() { &booked } else { &busy };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            });
            futures_util::future::join_all(tasks).await;
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (statements_after, commits_after) = server_counters(pool)?;
    let booked = booked.load(Ordering::Relaxed);
    Ok(Measured {
        path,
        booked,
        busy: busy.load(Ordering::Relaxed),
        per_second: booked as f64 / elapsed,
        statements_per_booking: statements_after.saturating_sub(statements_before) as f64
            / booked.max(1) as f64,
        commits_per_booking: commits_after.saturating_sub(commits_before) as f64 / booked.max(1) as f64,
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
            out.push_str(&format!(
                "{:<14} {:>10.0} {:>8} {:>11} {:>13.1} {:>11.2}\n",
                path.label(),
                m.per_second,
                m.busy,
                m.booked,
                m.statements_per_booking,
                m.commits_per_booking
            ));
        }
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
