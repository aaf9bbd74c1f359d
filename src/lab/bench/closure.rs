//! `haita bench closure`: what a maintenance closure costs the people beside it.
//!
//! On a scratch database with `resources` resources, customers book (the booking service, under
//! each day's lock, as a request does) and staff edit resources (take the edit lock, type for a
//! moment, save under it), first with no batch, then while a closure of `days` days runs over
//! every resource with each policy. It prints the bookings' and the saves' p50/p99, how many
//! bookings met a closed day, how many saves were refused (their lock was stolen), how many
//! resource-days the run left for later, and how long each run took.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use diesel::connection::SimpleConnection;
use rand::Rng;

use crate::auth::session::{self, Ticket};
use crate::batch::closure::Closure;
use crate::batch::guard::BatchLock;
use crate::batch::{self, Policy};
use crate::bookings::model::BookingDate;
use crate::bookings::{BookingError, service};
use crate::config::Config;
use crate::db::{self, DbPool, ScratchDatabase};
use crate::edit_locks::service::{self as edit_locks, Policy as LockPolicy};
use crate::edit_locks::{EditLockError, EditLockKey, Owner};
use crate::lab::stats::percentile_ms;
use crate::locking::Turn;
use crate::resources::ResourceError;
use crate::resources::editing::{self, ThenLock};
use crate::resources::model::{ResourceChanges, ResourceInput};

/// One scenario's numbers.
pub struct Measured {
    pub scenario: &'static str,
    pub run: Option<Duration>,
    /// Resource-days the run left for a later run.
    pub left: usize,
    pub bookings: Latencies,
    /// Bookings refused because their day was closed.
    pub closed: usize,
    pub saves: Latencies,
    /// Saves refused because the editor's lock was taken (steal) or could not be had.
    pub refused: usize,
}

#[derive(Default)]
pub struct Latencies {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Latencies {
    fn of(mut all: Vec<Duration>) -> Self {
        all.sort_unstable();
        Self { count: all.len(), p50_ms: percentile_ms(&all, 50.0), p99_ms: percentile_ms(&all, 99.0) }
    }
}

/// How long the people are measured with no batch running.
const BASELINE: Duration = Duration::from_secs(2);
/// How long an editor types between taking the lock and saving.
const TYPING: Duration = Duration::from_millis(50);

pub fn run(
    database_url: &str,
    resources: usize,
    days: u64,
    customers: usize,
    editors: usize,
) -> anyhow::Result<Vec<Measured>> {
    let (_, name) = db::split_database_url(database_url)?;
    let scratch = ScratchDatabase::create(database_url, &format!("{name}_bench_"))?;
    let config =
        Config { pool_size: u32::try_from(customers + editors + 6)?, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&config)?;
    crate::run_migrations(&pool)?;
    let people = prepare(&pool, resources, customers, editors)?;
    let ids: Arc<Vec<i64>> = Arc::new((1..=i64::try_from(resources)?).collect());

    let mut results = Vec::new();
    let scenarios = [
        ("no batch", None),
        ("wait", Some(Policy::Wait)),
        ("steal", Some(Policy::Steal)),
        ("skip", Some(Policy::Skip)),
    ];
    for (k, (scenario, policy)) in scenarios.into_iter().enumerate() {
        // Each scenario closes days of its own; customers book those and as many after them.
        let from = service::today() + chrono::Days::new(10 + 30 * u64::try_from(k)?);
        let stop = Arc::new(AtomicBool::new(false));
        let booking: Vec<_> = people
            .customers
            .iter()
            .cloned()
            .map(|ticket| {
                let (pool, ids, stop) = (pool.clone(), ids.clone(), stop.clone());
                std::thread::spawn(move || book_until(&pool, &ticket, &ids, from, days * 2, &stop))
            })
            .collect();
        let editing: Vec<_> = people
            .editors
            .iter()
            .map(|&editor| {
                let (pool, ids, stop) = (pool.clone(), ids.clone(), stop.clone());
                std::thread::spawn(move || edit_until(&pool, editor, &ids, &stop))
            })
            .collect();
        let (run, left) = match policy {
            None => {
                std::thread::sleep(BASELINE);
                (None, 0)
            }
            Some(policy) => {
                let closure = Closure {
                    from,
                    to: from + chrono::Days::new(days - 1),
                    reason: format!("bench {scenario}"),
                    resources: Vec::new(),
                    policy,
                    by: people.closer,
                    wait: Duration::from_secs(10),
                    throttle: Duration::ZERO,
                    report_dir: None,
                };
                let began = Instant::now();
                let summary = batch::run(&pool, &BatchLock::Db, &closure)
                    .map_err(|e| anyhow::anyhow!("the closure ({scenario}): {e}"))?;
                (Some(began.elapsed()), summary.skipped)
            }
        };
        stop.store(true, Ordering::Relaxed);
        let (mut booked, mut closed) = (Vec::new(), 0);
        for thread in booking {
            let (latencies, refused) =
                thread.join().map_err(|_| anyhow::anyhow!("a customer panicked"))??;
            booked.extend(latencies);
            closed += refused;
        }
        let (mut saved, mut refused) = (Vec::new(), 0);
        for thread in editing {
            let (latencies, lost) = thread.join().map_err(|_| anyhow::anyhow!("an editor panicked"))??;
            saved.extend(latencies);
            refused += lost;
        }
        results.push(Measured {
            scenario,
            run,
            left,
            bookings: Latencies::of(booked),
            closed,
            saves: Latencies::of(saved),
            refused,
        });
    }
    drop(pool);
    drop(scratch);
    Ok(results)
}

struct People {
    closer: i64,
    customers: Vec<Ticket>,
    editors: Vec<i64>,
}

/// The resources, the staff member who closes them, logged-in customers and the editors.
fn prepare(pool: &DbPool, resources: usize, customers: usize, editors: usize) -> anyhow::Result<People> {
    let mut conn = pool.get()?;
    let rows: Vec<String> = (0..resources).map(|i| format!("('Room {i}', '', 1000000)")).collect();
    conn.batch_execute(&format!(
        "INSERT INTO resources (name, description, capacity) VALUES {}",
        rows.join(",")
    ))?;
    let mut user = |name: String, role: &str| -> anyhow::Result<i64> {
        conn.batch_execute(&format!(
            "INSERT INTO users (username, display_name, password_hash, role) VALUES ('{name}', '{name}', '-', '{role}')"
        ))?;
        Ok(db::last_insert_id(&mut conn)?)
    };
    let closer = user("closer".into(), "staff")?;
    let editors = (0..editors).map(|i| user(format!("editor{i}"), "staff")).collect::<anyhow::Result<_>>()?;
    let customer_ids: Vec<i64> =
        (0..customers).map(|i| user(format!("customer{i}"), "customer")).collect::<anyhow::Result<_>>()?;
    let customers = customer_ids
        .into_iter()
        .map(|id| Ok(Ticket::new(id, session::open(&mut conn, id)?)))
        .collect::<anyhow::Result<_>>()?;
    Ok(People { closer, customers, editors })
}

/// A customer booking random resources on random days of `span` days from `from`, as a request
/// does: each booking's latency, and how many met a closed day.
fn book_until(
    pool: &DbPool,
    ticket: &Ticket,
    ids: &[i64],
    from: NaiveDate,
    span: u64,
    stop: &AtomicBool,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let (mut latencies, mut closed) = (Vec::new(), 0);
    let mut rng = rand::rng();
    while !stop.load(Ordering::Relaxed) {
        let resource = ids[rng.random_range(0..ids.len())];
        let day = from + chrono::Days::new(rng.random_range(0..span));
        let date = BookingDate::parse(&day.to_string(), service::today())?;
        let turn = Turn::unqueued(pool.names().booking(resource, day), Duration::from_secs(5));
        let began = Instant::now();
        // A benchmark's customer books more days than a person may: no cap.
        match service::book(pool, turn, ticket, resource, date, None, u32::MAX) {
            Ok(_) | Err(BookingError::AlreadyBooked) => {}
            Err(BookingError::Closed { .. }) => closed += 1,
            Err(e) => anyhow::bail!("a customer's booking: {e}"),
        }
        latencies.push(began.elapsed());
    }
    Ok((latencies, closed))
}

/// A staff member editing random resources: take the edit lock, type, save under it. Each save's
/// latency, and how many saves were refused because the lock was someone else's by then.
fn edit_until(
    pool: &DbPool,
    editor: i64,
    ids: &[i64],
    stop: &AtomicBool,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let owner = Owner { user_id: editor, session: format!("bench-editor-{editor}") };
    let typed = ResourceInput { description: Some(format!("edited by {editor}")), ..Default::default() };
    let changes = ResourceChanges::parse(&typed)?;
    let (mut latencies, mut refused) = (Vec::new(), 0);
    let mut rng = rand::rng();
    while !stop.load(Ordering::Relaxed) {
        let id = ids[rng.random_range(0..ids.len())];
        let key = EditLockKey::resource(id);
        let turn = Turn::unqueued(pool.names().edit_lock(key.as_str()), Duration::from_secs(5));
        let lock = match edit_locks::acquire(
            pool,
            turn,
            Duration::from_secs(60),
            &key,
            &owner,
            LockPolicy::TakeOverExpired,
        ) {
            Ok((_, lock)) => lock,
            // A batch holds it: this editor opens another resource.
            Err(EditLockError::Locked(_)) => continue,
            Err(e) => anyhow::bail!("an editor's acquire: {e}"),
        };
        std::thread::sleep(TYPING);
        let began = Instant::now();
        match editing::save(&mut *pool.get()?, id, &owner, lock.epoch, &changes, ThenLock::Release) {
            Ok(_) => latencies.push(began.elapsed()),
            Err(ResourceError::EditLock(_)) => refused += 1,
            Err(e) => anyhow::bail!("an editor's save: {e}"),
        }
    }
    Ok((latencies, refused))
}

pub fn report(results: &[Measured], resources: usize, days: u64, customers: usize, editors: usize) -> String {
    let mut out = format!(
        "{customers} customers booking and {editors} staff editing while a closure of {days} days runs over \
         {resources} resources\n\
         scenario  | batch run | left by it | bookings | p50 ms | p99 ms | closed day | saves | p50 ms | p99 ms | refused\n"
    );
    for m in results {
        let run = m.run.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
        out.push_str(&format!(
            "{:<9} | {:>9} | {:>10} | {:>8} | {:>6.2} | {:>6.2} | {:>10} | {:>5} | {:>6.2} | {:>6.2} | {:>7}\n",
            m.scenario,
            run,
            m.left,
            m.bookings.count,
            m.bookings.p50_ms,
            m.bookings.p99_ms,
            m.closed,
            m.saves.count,
            m.saves.p50_ms,
            m.saves.p99_ms,
            m.refused
        ));
    }
    out
}
