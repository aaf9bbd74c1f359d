//! `haita bench stuck-holder`: one day's lock held by a stuck session while clients pile onto
//! that day, and what requests that do not need that lock wait meanwhile.
//!
//! A plain session of its own (not one of the app's) takes the hot day's named lock and holds
//! it for `--hold` seconds, as a slow or hung holder would. Meanwhile `--clients` tasks book
//! that day over and over, and two bystanders each alternate a booking of another resource and
//! the product list, one request every 20 ms. Both paths run in this process, through what a
//! request runs (`coalescing::Booker`):
//!
//! - *unqueued*: every booking waits in `GET_LOCK` (on PostgreSQL `pg_advisory_lock`) on a pooled
//!   connection, as before the per-key queue and the waiting budget;
//! - *coalesced*: the app's default — the per-key queue, the budget and hot-day batches.
//!
//! Printed per path: the bystanders' p50, p99 and slowest answer and how many failed, and what
//! the hot day's clients were told.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use diesel::prelude::*;

use super::coalescing::{Booker, Path, prepare};
use crate::bookings::model::BookingDate;
use crate::bookings::{BookingError, service};
use crate::config::Config;
use crate::db::dialect::Asked;
use crate::db::{self, DbConn, DbPool, ScratchDatabase, cached_sql};
use crate::lab::stats::percentile_ms;
use crate::locking::LockName;

const USERS: i64 = 20_000;
const BYSTANDERS: usize = 2;
const BYSTANDER_EVERY: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Bystanders {
    latencies: Vec<Duration>,
    failed: u64,
    first_failure: Option<String>,
}

#[derive(Default)]
struct HotDay {
    booked: u64,
    busy: u64,
    errors: u64,
}

struct Measured {
    path: Path,
    bystanders: Bystanders,
    hot: HotDay,
}

pub fn run(config: &Config, clients: usize, hold_secs: u64) -> anyhow::Result<()> {
    anyhow::ensure!((1..=512).contains(&clients), "--clients must be between 1 and 512");
    anyhow::ensure!((1..=60).contains(&hold_secs), "--hold must be between 1 and 60 seconds");
    let (_, name) = db::split_database_url(&config.database_url)?;
    let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
    let bench_config = Config { pool_size: config.pool_size, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&bench_config)?;
    crate::run_migrations(&pool)?;
    let mut conn = pool.get()?;
    let hot = prepare(&mut conn, USERS)?;
    cached_sql::<()>(
        "INSERT INTO resources (name, description, capacity) VALUES ('Quiet days', '', 1000000)",
    )
    .execute(&mut conn)?;
    let other = db::last_insert_id(&mut conn)?;
    drop(conn);
    let next_user = Arc::new(AtomicI64::new(1));
    let hold = Duration::from_secs(hold_secs);

    let mut results = Vec::new();
    for path in [Path::Unqueued, Path::Coalesced] {
        let day =
            BookingDate::parse(&(service::today() + chrono::Days::new(1)).to_string(), service::today())?;
        results.push(measure(&pool, &bench_config, path, (hot, other), day, &next_user, clients, hold)?);
    }
    drop(pool);
    drop(scratch);
    print!("{}", report(&results, clients, &bench_config, hold));
    Ok(())
}

/// Takes `name` on a session of its own and keeps it for `hold`; returns once it is held.
fn stuck_holder(url: &str, name: &LockName, hold: Duration) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut conn = DbConn::open(url)?;
    let got = conn.dialect().lock(&mut conn, name.as_str(), Duration::ZERO)?;
    anyhow::ensure!(got == Asked::Granted, "the stuck holder could not take {name}: {got:?}");
    Ok(std::thread::spawn(move || {
        std::thread::sleep(hold);
        drop(conn); // closing the session frees its lock
    }))
}

#[expect(clippy::too_many_arguments, reason = "one measurement's inputs, passed once")]
fn measure(
    pool: &DbPool,
    config: &Config,
    path: Path,
    (hot, other): (i64, i64),
    day: BookingDate,
    next_user: &Arc<AtomicI64>,
    clients: usize,
    hold: Duration,
) -> anyhow::Result<Measured> {
    let holder = stuck_holder(&config.database_url, &pool.names().booking(hot, day.day()), hold)?;
    let booker = Booker::new(pool, config);
    let end = Instant::now() + hold;
    let (hot_day, bystanders) = actix_web::rt::System::new().block_on(async {
        let hot_clients = (0..clients).map(|_| {
            let (booker, next_user) = (booker.clone(), next_user.clone());
            actix_web::rt::spawn(async move {
                let mut seen = HotDay::default();
                while Instant::now() < end {
                    match booker.book(path, next_user.fetch_add(1, Ordering::Relaxed), hot, day).await {
                        Ok(_) => seen.booked += 1,
                        Err(BookingError::Infra(e)) if e.is_busy() => seen.busy += 1,
                        Err(_) => seen.errors += 1,
                    }
                }
                seen
            })
        });
        let bystanders = (0..BYSTANDERS).map(|_| {
            let (booker, next_user) = (booker.clone(), next_user.clone());
            actix_web::rt::spawn(async move {
                let mut seen = Bystanders::default();
                let mut list = false;
                while Instant::now() < end {
                    let started = Instant::now();
                    let answer = if list {
                        booker
                            .db()
                            .with_conn(|conn| -> anyhow::Result<()> {
                                crate::catalog::service::list_with_stock(conn)?;
                                Ok(())
                            })
                            .await
                    } else {
                        let user = next_user.fetch_add(1, Ordering::Relaxed);
                        booker.book(path, user, other, day).await.map(|_| ()).map_err(anyhow::Error::from)
                    };
                    seen.latencies.push(started.elapsed());
                    if let Err(e) = answer {
                        seen.failed += 1;
                        seen.first_failure.get_or_insert_with(|| e.to_string());
                    }
                    list = !list;
                    actix_web::rt::time::sleep(BYSTANDER_EVERY).await;
                }
                seen
            })
        });
        let (hot, bystanders) = futures_util::future::join(
            futures_util::future::join_all(hot_clients),
            futures_util::future::join_all(bystanders),
        )
        .await;
        let mut total = HotDay::default();
        for seen in hot.into_iter().flatten() {
            total.booked += seen.booked;
            total.busy += seen.busy;
            total.errors += seen.errors;
        }
        let mut all = Bystanders::default();
        for mut seen in bystanders.into_iter().flatten() {
            all.latencies.append(&mut seen.latencies);
            all.failed += seen.failed;
            all.first_failure = all.first_failure.or(seen.first_failure);
        }
        all.latencies.sort_unstable();
        (total, all)
    });
    let _ = holder.join();
    Ok(Measured { path, bystanders, hot: hot_day })
}

fn report(results: &[Measured], clients: usize, config: &Config, hold: Duration) -> String {
    let mut out = format!(
        "a stuck holder: one day's lock held {} s by another session, {clients} clients booking that day, \
         {BYSTANDERS} bystanders (another resource's booking, the product list) every {} ms; \
         pool {}, LOCK_WAIT {} s, LOCK_WAITERS_MAX {}\n\
         {:<10} {:>9} {:>14} {:>14} {:>14} {:>10} | {:>10} {:>10} {:>7}\n",
        hold.as_secs(),
        BYSTANDER_EVERY.as_millis(),
        config.pool_size,
        config.lock_wait.as_secs(),
        config.lock_waiters_max,
        "path",
        "requests",
        "bystander p50",
        "bystander p99",
        "bystander max",
        "failed",
        "hot booked",
        "hot busy",
        "errors"
    );
    for m in results {
        let b = &m.bystanders;
        let max = b.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        out.push_str(&format!(
            "{:<10} {:>9} {:>11.1} ms {:>11.1} ms {:>11.1} ms {:>10} | {:>10} {:>10} {:>7}\n",
            m.path.label(),
            b.latencies.len(),
            percentile_ms(&b.latencies, 50.0),
            percentile_ms(&b.latencies, 99.0),
            max,
            b.failed,
            m.hot.booked,
            m.hot.busy,
            m.hot.errors
        ));
        if let Some(first) = &b.first_failure {
            out.push_str(&format!("    first bystander failure: {first}\n"));
        }
    }
    if let [unqueued, coalesced] = results {
        let p99 = |m: &Measured| percentile_ms(&m.bystanders.latencies, 99.0);
        out.push_str(&format!(
            "bystander p99, unqueued / coalesced: {:.0}\n",
            p99(unqueued) / p99(coalesced).max(f64::MIN_POSITIVE)
        ));
    }
    out
}
