//! `haita bench bookings`: what the app's HTTP path costs on top of the locking itself.
//!
//! For each correct strategy, each key pattern and each client count, `clients` clients book as
//! fast as they can for a few seconds, twice:
//!
//! - **app**: through the real HTTP endpoint of the app running as a process of its own (this
//!   binary's `serve`, see `server.rs`), driven by `clients` HTTP clients in this process —
//!   `POST /api/v1/reservations` for `named-lock` (the app's booking path, real tables), and
//!   `POST /api/v1/demo/bookings` for the other strategies (demo tables). The server's CPU and
//!   the load generator's are read apart;
//! - **raw**: the same service function — the very same statements — called from `clients`
//!   threads of this process on a pool of the same size, without HTTP.
//!
//! Keys: **hot** is one resource and one day for everybody (every attempt queues for the same
//! lock; after the first booking each attempt answers "full"); **spread** gives each attempt a
//! new day (resource `i / 360`, day `i % 360`), so only `parent-row-lock`, which locks the whole
//! resource, still queues. Throughput counts answered attempts (booked or refused) per second.
//!
//! Everything happens in a database of its own, `<DATABASE_URL's name>_bench_<random>`, dropped at
//! the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::NaiveDate;
use diesel::prelude::*;
use rand::RngCore;

use super::history::{Data, History, Size};
use super::server::ServerProcess;
use crate::auth::Role;
use crate::auth::service::{UserSpec, create_user};
use crate::auth::session::{self, Ticket};
use crate::bookings::model::BookingDate;
use crate::bookings::{BookingError, service as bookings};
use crate::config::Config;
use crate::db::{self, DbPool, Engine, ScratchDatabase, cached_sql};
use crate::lab::demo::{Answer, Attempt, Queue, Seen, Strategy, create_resource};
use crate::lab::locks::OutsideLocks;
use crate::lab::stats::percentile_ms;
use crate::locking::Turn;
use crate::resources::model::NewResource;
use crate::schema::resources;

#[derive(clap::Args)]
pub struct BookingsBench {
    /// Client counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<u32>,
    /// Correct strategies to measure, comma-separated, or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    strategy: Vec<String>,
    /// Key patterns, comma-separated: hot, spread.
    #[arg(long, value_delimiter = ',', default_value = "hot,spread")]
    keys: Vec<String>,
    /// Seconds measured per cell, path and repetition.
    #[arg(long, default_value_t = 2)]
    seconds: u64,
    /// Repetitions per cell, app and raw alternating; the median is printed (the machine is
    /// shared, and one noisy second should not decide a ratio).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Measure only one path (app or raw), e.g. under a profiler.
    #[arg(long)]
    only: Option<String>,
    /// The app path's load generator: `wrk` (a process of its own, with a Lua script), `builtin`
    /// (HTTP clients in this process), or `auto` (wrk when installed).
    #[arg(long, default_value = "auto")]
    driver: String,
    /// Stays of 1–7 nights instead of days: a named lock per night in ascending order against
    /// PostgreSQL's exclusion constraint, as raw statements (`stays.rs`); takes --clients,
    /// --keys, --seconds and --repeat.
    #[arg(long)]
    stays: bool,
    /// What `named-lock` books on: `realistic`, a history like a real site's (`history.rs`:
    /// many users taking turns, each within the quotas); `hot-user`, one user per client on
    /// empty resources of one place, each user booking thousands with the quotas lifted.
    #[arg(long, value_enum, default_value = "realistic")]
    data: Data,
    /// Users of the realistic history.
    #[arg(long, default_value_t = 10_000)]
    users: u32,
    /// Reservations of the realistic history (past, present and future).
    #[arg(long, default_value_t = 1_000_000)]
    history: u64,
}

/// Who sends the app path's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Driver {
    /// HTTP clients (reqwest) in the bench's own process.
    Builtin,
    /// `wrk`, see `wrk.rs`.
    Wrk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Keys {
    Hot,
    Spread,
}

/// Days per resource in the spread pattern: within the booking horizon of the real endpoint.
pub(super) const DAYS: u64 = 360;
const PASSWORD: &str = "bench-password-not-secret";

/// One booking target.
#[derive(Clone, Copy)]
struct Key {
    resource_id: i64,
    day: NaiveDate,
}

/// The resources of one measurement (fresh for each, so no run finds another's bookings) and
/// how attempt number `i` picks its key.
pub(super) struct Target {
    strategy: Strategy,
    keys: Keys,
    pub(super) resources: Vec<i64>,
    pub(super) first_day: NaiveDate,
    /// On a realistic history: attempt `i` books as user `i % users` of the history, and the
    /// spread keys follow that user ([`Target::key`]); else each client books as its own user.
    pub(super) users: Option<usize>,
    /// The first attempt's number: on a history each measurement starts where no earlier one
    /// went, so that no user meets their own booking of an earlier measurement.
    pub(super) first_attempt: u64,
}

impl Target {
    /// The path the app path posts to, and the strategy its body names (the demo endpoint's).
    pub(super) fn endpoint(&self) -> (&'static str, Option<&'static str>) {
        match self.strategy {
            Strategy::NamedLock => ("/api/v1/reservations", None),
            other => ("/api/v1/demo/bookings", Some(other.name())),
        }
    }

    /// Whether attempt `i` books resource `i / DAYS`, day `i % DAYS` (else all the first day).
    pub(super) fn spread(&self) -> bool {
        self.keys == Keys::Spread
    }

    fn key(&self, i: u64) -> Key {
        match (self.keys, self.users) {
            (Keys::Hot, _) => Key { resource_id: self.resources[0], day: self.first_day },
            // User u's k-th attempt: every user on a resource and day of their own, each next
            // attempt of theirs 37 resources and 7 days further (`wrk.rs` computes the same).
            (Keys::Spread, Some(users)) => {
                let (u, k) = (i % users as u64, i / users as u64);
                let resource = usize::try_from((u + 37 * k) % self.resources.len() as u64).unwrap_or(0);
                Key {
                    resource_id: self.resources[resource],
                    day: self.first_day + chrono::Days::new((13 * u + 7 * k) % DAYS),
                }
            }
            (Keys::Spread, None) => {
                let resource = usize::try_from(i / DAYS).unwrap_or(0) % self.resources.len();
                Key {
                    resource_id: self.resources[resource],
                    day: self.first_day + chrono::Days::new(i % DAYS),
                }
            }
        }
    }
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    booked: u64,
    refused: u64,
    busy: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        self.booked += other.booked;
        self.refused += other.refused;
        self.busy += other.busy;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn record(&mut self, started: Instant, outcome: Outcome, detail: impl FnOnce() -> String) {
        self.latencies.push(started.elapsed());
        match outcome {
            Outcome::Booked => self.booked += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Busy => self.busy += 1,
            Outcome::Error => {
                self.errors += 1;
                self.first_error.get_or_insert_with(detail);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Outcome {
    Booked,
    Refused,
    Busy,
    Error,
}

#[derive(Default)]
struct Measured {
    answered_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU time of this bench process per answered attempt: on the app path the load
    /// generator alone, on the raw path the service code and its client threads together.
    cpu_us: f64,
    /// CPU time of the app's server process per answered attempt (app path only).
    server_cpu_us: f64,
    /// CPU time of the database server per answered attempt, when it runs on this machine
    /// (NaN otherwise).
    db_cpu_us: f64,
    /// Blocking-pool hops per answered attempt on the app path of `named-lock`: the server's
    /// coalesced booking batches and session-check batches (one hop each), from its `/metrics`.
    hops: f64,
    /// Statements, prepares and commits the database counted per answered attempt (see
    /// [`ServerWork`]); `None` where the engine keeps no such count.
    statements: Option<f64>,
    prepares: Option<f64>,
    commits: Option<f64>,
    tally: Tally,
}

impl Measured {
    fn from(mut tally: Tally, elapsed: Duration) -> Self {
        tally.latencies.sort_unstable();
        Self {
            answered_per_sec: (tally.booked + tally.refused) as f64 / elapsed.as_secs_f64(),
            p50_ms: percentile_ms(&tally.latencies, 50.0),
            p99_ms: percentile_ms(&tally.latencies, 99.0),
            cpu_us: 0.0,
            server_cpu_us: 0.0,
            db_cpu_us: f64::NAN,
            hops: 0.0,
            statements: None,
            prepares: None,
            commits: None,
            tally,
        }
    }

    /// What a `wrk` run reported; CPU and server counters are filled in by the caller.
    fn from_wrk(report: &super::wrk::Report) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let tally = Tally {
            booked: report.booked,
            refused: report.refused,
            busy: report.busy,
            errors: report.errors,
            first_error: report.first_error.clone(),
            latencies: Vec::new(),
        };
        Self {
            answered_per_sec: (tally.booked + tally.refused) as f64 / report.elapsed.as_secs_f64().max(1e-9),
            p50_ms: ms(report.p50),
            p99_ms: ms(report.p99),
            ..Self::from(tally, report.elapsed)
        }
    }

    /// The repetition with the median throughput.
    fn median(mut runs: Vec<Measured>) -> Measured {
        runs.sort_by(|a, b| a.answered_per_sec.total_cmp(&b.answered_per_sec));
        let middle = runs.len() / 2;
        runs.into_iter().nth(middle).unwrap_or_default()
    }
}

/// CPU time (user + system) of this process and of the server process, from `/proc`.
struct CpuClock {
    bench: Duration,
    server: Duration,
}

impl CpuClock {
    fn start(server: &ServerProcess) -> Self {
        Self { bench: super::process_cpu("/proc/self/stat"), server: server.cpu() }
    }

    /// Microseconds per answered attempt: (this process, the server process).
    fn per_answer(&self, server: &ServerProcess, m: &Measured) -> (f64, f64) {
        let since = |now: Duration, then: Duration| per_answer(now.saturating_sub(then), m);
        (since(super::process_cpu("/proc/self/stat"), self.bench), since(server.cpu(), self.server))
    }
}

/// `cpu` in microseconds per answered attempt of `m`.
fn per_answer(cpu: Duration, m: &Measured) -> f64 {
    cpu.as_secs_f64() * 1e6 / (m.tally.booked + m.tally.refused).max(1) as f64
}

/// The server's own count of the work done: statements and commits since it started
/// (`SHOW GLOBAL STATUS`, so run on a quiet server: it counts every client; none on PostgreSQL).
struct ServerWork(super::ServerCounters);

impl ServerWork {
    fn start(pool: &DbPool) -> anyhow::Result<Self> {
        Ok(Self(super::ServerCounters::read(pool)?))
    }

    fn per_answer(&self, pool: &DbPool, m: &mut Measured) -> anyhow::Result<()> {
        let done = super::ServerCounters::read(pool)?.since(&self.0);
        let answered = (m.tally.booked + m.tally.refused).max(1) as f64;
        let per_answer = |count: Option<u64>| count.map(|n| n as f64 / answered);
        m.statements = per_answer(done.statements);
        m.prepares = per_answer(done.prepares);
        m.commits = per_answer(done.commits);
        m.db_cpu_us = done.cpu.map_or(f64::NAN, |cpu| cpu.as_secs_f64() * 1e6 / answered);
        Ok(())
    }
}

/// `haita bench bookings`: parse, prepare, then measure cell after cell, printing each row as it
/// is measured (a full run takes minutes), and finally check that nothing was overbooked.
pub fn run(config: &Config, options: &BookingsBench) -> anyhow::Result<()> {
    if std::env::var_os("RUST_LOG").is_none() {
        // One access-log line per request would be part of what is measured.
        log::set_max_level(log::LevelFilter::Warn);
    }
    let plan = options.plan()?;
    if options.stays {
        let Plan { patterns, clients, window, repeat, .. } = plan;
        return super::stays::run(config, &super::stays::Plan { patterns, clients, window, repeat });
    }
    let bench = Prepared::new(config, &plan)?;
    let server = ServerProcess::start(&bench.config, plan.data == Data::HotUser)?;
    let cookies = match &bench.history {
        Some(history) => super::cookies::mint(&server.session_key()?, &history.tickets)?,
        None => Vec::new(),
    };
    print!("{}", describe_data(plan.data, bench.history.as_ref()));
    print!(
        "{}",
        report_header(
            &bench.scratch.name,
            bench.app_pool.engine(),
            bench.config.pool_size,
            plan.window,
            plan.driver
        )
    );

    let base = server.base_url();
    actix_web::rt::System::new().block_on(async {
        let clients = log_in(&base, &bench.users).await?;
        for cell in plan.cells() {
            let row = measure_cell(&bench, &server, &plan, cell, &base, &clients, &cookies).await?;
            print!("{}", report_row(&row));
        }
        anyhow::Ok(())
    })?;
    drop(server);
    let overbooked = count_overbooked(&bench.app_pool)?;
    print!("{}", report_footer(&overbooked));
    anyhow::ensure!(
        overbooked.real + overbooked.twice == 0 && overbooked.demo == 0,
        "a correct strategy double-booked under load"
    );
    Ok(())
}

// ---- options -----------------------------------------------------------------------------

/// The options, checked once: what to measure and how long.
struct Plan {
    strategies: Vec<Strategy>,
    patterns: Vec<Keys>,
    clients: Vec<u32>,
    window: Duration,
    repeat: u32,
    app: bool,
    raw: bool,
    driver: Driver,
    data: Data,
    size: Size,
}

/// One row of the table.
#[derive(Clone, Copy)]
struct Cell {
    strategy: Strategy,
    keys: Keys,
    clients: usize,
}

impl BookingsBench {
    fn plan(&self) -> anyhow::Result<Plan> {
        let strategies: Vec<Strategy> = if self.strategy.iter().any(|s| s == "all") {
            Strategy::ALL.into_iter().filter(|s| s.race_only().is_none()).collect()
        } else {
            self.strategy.iter().map(|s| Strategy::parse(s)).collect::<Result<_, _>>()?
        };
        if let Some((one, why)) = strategies.iter().find_map(|s| s.race_only().map(|why| (s, why))) {
            anyhow::bail!(
                "{one} only runs inside a race ({why}); `haita bench coalescing` measures the queue and the batches"
            );
        }
        let patterns = self
            .keys
            .iter()
            .map(|k| match k.as_str() {
                "hot" => Ok(Keys::Hot),
                "spread" => Ok(Keys::Spread),
                other => Err(anyhow::anyhow!("unknown key pattern {other:?}: use hot, spread")),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(
            self.clients.iter().all(|c| (1..=256).contains(c)),
            "clients must be between 1 and 256"
        );
        Ok(Plan {
            strategies,
            patterns,
            clients: self.clients.clone(),
            window: Duration::from_secs(self.seconds.clamp(1, 60)),
            repeat: self.repeat.clamp(1, 9),
            app: self.only.as_deref() != Some("raw"),
            raw: self.only.as_deref() != Some("app"),
            driver: match self.driver.as_str() {
                "builtin" => Driver::Builtin,
                "wrk" if super::wrk::installed() => Driver::Wrk,
                "wrk" => anyhow::bail!("--driver wrk: wrk is not installed (apt-get install wrk)"),
                "auto" if super::wrk::installed() => Driver::Wrk,
                "auto" => Driver::Builtin,
                other => anyhow::bail!("unknown driver {other:?}: use auto, wrk, builtin"),
            },
            data: match self.data {
                Data::Realistic => {
                    anyhow::ensure!(
                        (100..=1_000_000).contains(&self.users),
                        "--users must be between 100 and 1000000"
                    );
                    anyhow::ensure!(self.history <= 20_000_000, "--history must be at most 20000000");
                    Data::Realistic
                }
                Data::HotUser => Data::HotUser,
            },
            size: Size { users: self.users, reservations: self.history },
        })
    }
}

impl Plan {
    fn most_clients(&self) -> u32 {
        self.clients.iter().copied().max().unwrap_or(1)
    }

    /// Strategy by strategy, then key pattern, then client count: the order of the table.
    fn cells(&self) -> impl Iterator<Item = Cell> + '_ {
        self.strategies.iter().flat_map(move |&strategy| {
            self.patterns.iter().flat_map(move |&keys| {
                self.clients.iter().map(move |&n| Cell { strategy, keys, clients: n as usize })
            })
        })
    }
}

// ---- preparation -------------------------------------------------------------------------

/// What every cell is measured in: a scratch database, pools of the same size for both paths
/// (the app's in its own process), and one user per client.
struct Prepared {
    config: Config,
    app_pool: DbPool,
    raw_pool: DbPool,
    /// The raw path's Redis and lock directory (the app has its own, from the same variables).
    outside: OutsideLocks,
    /// One logged-in session per user: the raw path books with their tickets, which the
    /// booking checks as it does over HTTP.
    users: Vec<Ticket>,
    /// The realistic history `named-lock` books on (`--data realistic`).
    history: Option<History>,
    /// Measurements made on the history so far: each gets a day of its own for a hot key, and
    /// attempts of its own ([`Target::first_attempt`]).
    measurements: AtomicU64,
    /// Last, so it is dropped after the pools, however the bench ends.
    scratch: ScratchDatabase,
}

impl Prepared {
    /// The scratch database, migrated (the lab's tables too), and its users.
    fn new(config: &Config, plan: &Plan) -> anyhow::Result<Self> {
        let users = plan.most_clients();
        let (_, name) = db::split_database_url(&config.database_url)?;
        let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
        // The app's own settings (session key, throttles) are the server process's: see
        // `ServerProcess::start`.
        let bench_config = Config { database_url: scratch.url.clone(), ..config.clone() };
        let app_pool = crate::prepare_database(&bench_config)?;
        crate::lab::prepare(&app_pool)?;
        let raw_pool = db::build_pool(&bench_config)?;
        let users = create_users(&app_pool, users)?;
        let history = match plan.data {
            Data::Realistic => Some(super::history::seed(
                &mut *app_pool.get()?,
                plan.size,
                bench_config.max_future_bookings,
            )?),
            Data::HotUser => None,
        };
        let outside = OutsideLocks::in_dir(&crate::lab::Settings::from_env()?, super::server::lock_dir())?;
        let measurements = AtomicU64::new(0);
        Ok(Self { config: bench_config, app_pool, raw_pool, outside, users, history, measurements, scratch })
    }
}

pub(super) fn create_users(pool: &DbPool, n: u32) -> anyhow::Result<Vec<Ticket>> {
    let mut conn = pool.get()?;
    (0..n)
        .map(|i| {
            let username = format!("bench{i:03}");
            let spec = UserSpec {
                username: &username,
                display_name: &username,
                password: PASSWORD,
                role: Role::Customer,
                is_demo: true,
            };
            let id = create_user(&mut conn, &spec)?.id;
            Ok(Ticket::new(id, session::open(&mut conn, id)?))
        })
        .collect()
}

/// One logged-in bench user: an HTTP client for the built-in driver, and its session cookie
/// (`name=value`), which every request sends (wrk's too).
struct Client {
    http: reqwest::Client,
    cookie: String,
}

async fn log_in(base: &str, users: &[Ticket]) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(users.len());
    for i in 0..users.len() {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(1)
            // actix closes a connection idle for 5 s (its keep-alive); a client reusing one
            // just then gets "error sending request". Between cells a client idles longer, so
            // it lets go of its connection first.
            .pool_idle_timeout(Duration::from_secs(2))
            .build()?;
        let response = http
            .post(format!("{base}/api/v1/session"))
            .json(&serde_json::json!({"username": format!("bench{i:03}"), "password": PASSWORD}))
            .send()
            .await?;
        anyhow::ensure!(response.status().is_success(), "bench user {i} could not log in");
        let cookie = response
            .headers()
            .get(reqwest::header::SET_COOKIE)
            .and_then(|set| set.to_str().ok()?.split(';').next().map(str::to_owned))
            .with_context(|| format!("bench user {i} got no session cookie"))?;
        clients.push(Client { http, cookie });
    }
    Ok(clients)
}

// ---- measurement -------------------------------------------------------------------------

/// One row of the table, measured: both paths, each the median of the repetitions (a path not
/// measured, `--only`, is all zeros).
struct Row {
    cell: Cell,
    app: Measured,
    raw: Measured,
}

/// Measures one cell `plan.repeat` times, raw and app alternating, each on fresh resources.
async fn measure_cell(
    bench: &Prepared,
    app_server: &ServerProcess,
    plan: &Plan,
    cell: Cell,
    base: &str,
    clients: &[Client],
    history_cookies: &[String],
) -> anyhow::Result<Row> {
    let n = cell.clients;
    let (mut raws, mut apps) = (Vec::new(), Vec::new());
    for _ in 0..plan.repeat {
        if plan.raw {
            let target = bench.target(cell.strategy, cell.keys)?;
            let (cpu, server) = (CpuClock::start(app_server), ServerWork::start(&bench.app_pool)?);
            let mut raw = measure_raw(
                &bench.raw_pool,
                &bench.config,
                &bench.outside,
                &target,
                (bench.who(n), n),
                plan.window,
            );
            raw.cpu_us = cpu.per_answer(app_server, &raw).0;
            server.per_answer(&bench.app_pool, &mut raw)?;
            raws.push(raw);
        }
        if plan.app {
            let target = bench.target(cell.strategy, cell.keys)?;
            let (cpu, server) = (CpuClock::start(app_server), ServerWork::start(&bench.app_pool)?);
            let hops_before = blocking_hops(app_server).await?;
            let mut app = match plan.driver {
                Driver::Builtin => {
                    let mut app =
                        measure_app(base, &clients[..n], history_cookies, &target, plan.window).await;
                    (app.cpu_us, app.server_cpu_us) = cpu.per_answer(app_server, &app);
                    app
                }
                Driver::Wrk => {
                    let cookies: Vec<String> = match target.users {
                        Some(_) => history_cookies.to_vec(),
                        None => clients[..n].iter().map(|c| c.cookie.clone()).collect(),
                    };
                    let report = super::wrk::run(base, &cookies, n, &target, plan.window)?;
                    let mut app = Measured::from_wrk(&report);
                    app.server_cpu_us = cpu.per_answer(app_server, &app).1;
                    app.cpu_us = per_answer(report.cpu, &app);
                    app
                }
            };
            let answered = (app.tally.booked + app.tally.refused).max(1) as f64;
            // The demo endpoint's own hop is not in the counts: shown as NaN, not as too few.
            app.hops = match cell.strategy {
                Strategy::NamedLock => (blocking_hops(app_server).await? - hops_before) / answered,
                _ => f64::NAN,
            };
            server.per_answer(&bench.app_pool, &mut app)?;
            apps.push(app);
        }
    }
    Ok(Row { cell, app: Measured::median(apps), raw: Measured::median(raws) })
}

/// The blocking hops the server has made for bookings so far: one per coalesced booking batch
/// and one per session-check batch (the two drainers' histograms count their batches).
async fn blocking_hops(server: &ServerProcess) -> anyhow::Result<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.base_url()))
        .bearer_auth(server.metrics_token())
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let count = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(count("haita_booking_batch_size_count") + count("haita_session_check_batch_size_count"))
}

impl Prepared {
    /// What one measurement books: on a realistic history, its resources (spread) or its
    /// largest one on a day no measurement booked before (hot), by its users in turn; else
    /// [`fresh_target`].
    fn target(&self, strategy: Strategy, keys: Keys) -> anyhow::Result<Target> {
        let Some(history) = self.history.as_ref().filter(|_| strategy == Strategy::NamedLock) else {
            return fresh_target(&self.app_pool, strategy, keys);
        };
        let tomorrow = bookings::today() + chrono::Days::new(1);
        let measurement = self.measurements.fetch_add(1, Ordering::Relaxed);
        let (resources, first_day) = match keys {
            Keys::Spread => (history.resources.iter().map(|&(id, _)| id).collect(), tomorrow),
            Keys::Hot => {
                let largest = history.resources.iter().max_by_key(|&&(_, capacity)| capacity);
                (
                    largest.map(|&(id, _)| id).into_iter().collect(),
                    tomorrow + chrono::Days::new(measurement % DAYS),
                )
            }
        };
        let users = history.tickets.len();
        // Sixteen rounds of every user per measurement: more than a measurement sends.
        let first_attempt = measurement * 16 * users as u64;
        Ok(Target { strategy, keys, resources, first_day, users: Some(users), first_attempt })
    }

    /// Whom the raw path books as with `clients` clients: each client its own user, or the
    /// history's users in turn, within the quota as the app's are.
    fn who(&self, clients: usize) -> Who<'_> {
        match &self.history {
            Some(history) => {
                Who::Rotating { tickets: &history.tickets, max_future: self.config.max_future_bookings }
            }
            None => Who::PerClient(&self.users[..clients]),
        }
    }
}

/// Who books on the raw path (see [`Prepared::who`]).
#[derive(Clone, Copy)]
enum Who<'a> {
    /// One user per client, the quota lifted: each books thousands.
    PerClient(&'a [Ticket]),
    /// Attempt `i` books as `tickets[i % len]`, under the real quota.
    Rotating { tickets: &'a [Ticket], max_future: u32 },
}

/// Fresh resources for one measurement: real ones for the app's booking path, demo ones for
/// the other strategies. Days start tomorrow, inside the real endpoint's horizon.
fn fresh_target(pool: &DbPool, strategy: Strategy, keys: Keys) -> anyhow::Result<Target> {
    let mut conn = pool.get()?;
    let count = if keys == Keys::Hot { 1 } else { 64 };
    let resources = (0..count)
        .map(|i| -> anyhow::Result<i64> {
            if strategy == Strategy::NamedLock {
                let name = format!("bench {i} {:x}", rand::rng().next_u64());
                diesel::insert_into(resources::table)
                    .values(NewResource { name: &name, description: "", capacity: 1, price_cents: 0 })
                    .execute(&mut conn)?;
                Ok(crate::db::last_insert_id(&mut conn)?)
            } else {
                Ok(create_resource(&mut conn, strategy, 1)?)
            }
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Target {
        strategy,
        keys,
        resources,
        first_day: bookings::today() + chrono::Days::new(1),
        users: None,
        first_attempt: 0,
    })
}

fn classify_booking(result: &Result<impl Sized, BookingError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Booked,
        // A realistic history's users meet the quota and closures as real ones do.
        Err(
            BookingError::FullyBooked { .. }
            | BookingError::AlreadyBooked
            | BookingError::Quota { .. }
            | BookingError::Closed { .. },
        ) => Outcome::Refused,
        Err(BookingError::Infra(e)) if e.is_busy() => Outcome::Busy,
        Err(_) => Outcome::Error,
    }
}

/// `clients` threads calling the service function directly, on a pool of the app's size.
fn measure_raw(
    pool: &DbPool,
    config: &Config,
    outside: &OutsideLocks,
    target: &Target,
    (who, clients): (Who<'_>, usize),
    window: Duration,
) -> Measured {
    let next = AtomicU64::new(target.first_attempt);
    let started = Instant::now();
    let deadline = started + window;
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|client| {
                let next = &next;
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    while Instant::now() < deadline {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let key = target.key(i);
                        let (ticket, max_future) = match who {
                            // Measures the locking: a hot user has no cap.
                            Who::PerClient(tickets) => (&tickets[client], u32::MAX),
                            Who::Rotating { tickets, max_future } => {
                                (&tickets[usize::try_from(i).unwrap_or(0) % tickets.len()], max_future)
                            }
                        };
                        let began = Instant::now();
                        if target.strategy == Strategy::NamedLock {
                            let result = BookingDate::parse(&key.day.to_string(), bookings::today())
                                .and_then(|day| {
                                    bookings::book(
                                        pool,
                                        Turn::unqueued(
                                            pool.names().booking(key.resource_id, day.day()),
                                            config.lock_wait,
                                        ),
                                        ticket,
                                        key.resource_id,
                                        day,
                                        None,
                                        max_future,
                                    )
                                });
                            tally.record(began, classify_booking(&result), || format!("{:?}", result.err()));
                        } else {
                            let attempt = Attempt {
                                pool,
                                resource_id: key.resource_id,
                                day: key.day,
                                nights: 1,
                                client: i32::try_from(ticket.user_id()).unwrap_or(i32::MAX),
                                pause: Duration::ZERO,
                                lock_wait: config.lock_wait,
                                // `named-lock` books real reservations above; the others take no named lock.
                                queue: Queue::Taken(None),
                                outside,
                            };
                            let result = target.strategy.book(attempt, &mut Seen::default());
                            let outcome = match &result {
                                Ok(Answer::Confirmed) => Outcome::Booked,
                                Ok(Answer::Full) => Outcome::Refused,
                                Err(e) if e.is_busy() => Outcome::Busy,
                                Err(_) => Outcome::Error,
                            };
                            tally.record(began, outcome, || format!("{:?}", result.err()));
                        }
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_default()).collect()
    });
    let elapsed = started.elapsed();
    let mut total = Tally::default();
    tallies.into_iter().for_each(|t| total.add(t));
    Measured::from(total, elapsed)
}

/// `clients` concurrent HTTP clients, each logged in as its own user, against the running app.
/// On a realistic history (`target.users`), attempt `i` sends the cookie of user `i % users`
/// (`history_cookies`) on its client's connection; else each client its own.
async fn measure_app(
    base: &str,
    clients: &[Client],
    history_cookies: &[String],
    target: &Target,
    window: Duration,
) -> Measured {
    let next = Arc::new(AtomicU64::new(target.first_attempt));
    let started = Instant::now();
    let deadline = started + window;
    let (path, strategy) = target.endpoint();
    let url = format!("{base}{path}");
    let tasks = clients.iter().map(|client| {
        let (next, url) = (next.clone(), url.clone());
        async move {
            let mut tally = Tally::default();
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let key = target.key(i);
                let cookie = match target.users {
                    Some(users) => &history_cookies[usize::try_from(i).unwrap_or(0) % users],
                    None => &client.cookie,
                };
                let body = match strategy {
                    None => serde_json::json!({"resource_id": key.resource_id, "date": key.day.to_string()}),
                    Some(name) => serde_json::json!({
                        "strategy": name, "resource_id": key.resource_id, "date": key.day.to_string()
                    }),
                };
                let began = Instant::now();
                let request = client.http.post(&url).header(reqwest::header::COOKIE, cookie);
                let outcome = match request.json(&body).send().await {
                    Ok(r) if r.status() == 201 => Outcome::Booked,
                    Ok(r) if r.status() == 409 => Outcome::Refused,
                    Ok(r) if r.status() == 503 => Outcome::Busy,
                    Ok(r) => {
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        tally.record(began, Outcome::Error, || format!("{status} {text}"));
                        continue;
                    }
                    Err(e) => {
                        tally.record(began, Outcome::Error, || e.to_string());
                        continue;
                    }
                };
                tally.record(began, outcome, String::new);
            }
            tally
        }
    });
    let tallies = futures_util::future::join_all(tasks).await;
    let elapsed = started.elapsed();
    let mut total = Tally::default();
    tallies.into_iter().for_each(|t| total.add(t));
    Measured::from(total, elapsed)
}

/// Nights holding more bookings than their places (real), users booked twice on a night
/// (real), and demo keys holding more than their one place.
struct Overbooked {
    real: u64,
    twice: u64,
    demo: i64,
}

/// The bench is also a load test: no key may hold more bookings than its one place.
fn count_overbooked(pool: &DbPool) -> anyhow::Result<Overbooked> {
    let mut conn = pool.get()?;
    let (real, twice) = super::history::check(&mut conn).context("counting overbooked nights")?;
    let demo: i64 = cached_sql::<diesel::sql_types::BigInt>(
        "SELECT COUNT(*) FROM (SELECT 1 FROM demo_bookings GROUP BY demo_resource_id, day \
         HAVING COUNT(*) > 1) x",
    )
    .get_result(&mut conn)?;
    Ok(Overbooked { real, twice, demo })
}

// ---- the table ---------------------------------------------------------------------------

fn report_header(database: &str, engine: Engine, pool_size: u32, window: Duration, driver: Driver) -> String {
    let load = match driver {
        Driver::Wrk => "wrk, a process of its own",
        Driver::Builtin => "HTTP clients in this process",
    };
    let (server, not_counted) = match engine {
        Engine::Mysql => ("MySQL/MariaDB", String::new()),
        Engine::Postgres => ("PostgreSQL", format!("{}\n", super::NOT_COUNTED_ON_POSTGRES)),
    };
    format!(
        "haita bench bookings: database {database} ({server}), pool {pool_size} connections for app and raw alike, {} s per cell\n\
         app: a separate `haita serve` process (srv µs: its CPU) driven by {load} (cli µs: its CPU); \
         raw: the service called in this process (cpu µs); db µs: the database server's CPU (when local)\n\
         {not_counted}\n\
         {:<16} {:<7} {:>7} | {:>9} {:>7} {:>7} {:>6} {:>6} {:>5} {:>4} {:>5} {:>4} {:>6} | {:>9} {:>7} {:>7} {:>6} {:>5} {:>5} {:>4} {:>6} | {:>7}\n",
        window.as_secs(),
        "strategy",
        "keys",
        "clients",
        "app ans/s",
        "p50 ms",
        "p99 ms",
        "srv µs",
        "cli µs",
        "db µs",
        "hops",
        "stmts",
        "prep",
        "commit",
        "raw ans/s",
        "p50 ms",
        "p99 ms",
        "cpu µs",
        "db µs",
        "stmts",
        "prep",
        "commit",
        "app/raw"
    )
}

/// One line per cell, and one more per path that had busy answers or errors.
fn report_row(row: &Row) -> String {
    use std::fmt::Write;
    let Row { cell, app, raw } = row;
    let mut out = format!(
        "{:<16} {:<7} {:>7} | {:>9.0} {:>7.2} {:>7.2} {:>6.0} {:>6.0} {:>5.0} {:>4.2} {} {} {} | {:>9.0} {:>7.2} {:>7.2} {:>6.0} {:>5.0} {} {} {} | {:>7.2}\n",
        cell.strategy.name(),
        if cell.keys == Keys::Hot { "hot" } else { "spread" },
        cell.clients,
        app.answered_per_sec,
        app.p50_ms,
        app.p99_ms,
        app.server_cpu_us,
        app.cpu_us,
        app.db_cpu_us,
        app.hops,
        counted(app.statements, 5, 1),
        counted(app.prepares, 4, 1),
        counted(app.commits, 6, 2),
        raw.answered_per_sec,
        raw.p50_ms,
        raw.p99_ms,
        raw.cpu_us,
        raw.db_cpu_us,
        counted(raw.statements, 5, 1),
        counted(raw.prepares, 4, 1),
        counted(raw.commits, 6, 2),
        app.answered_per_sec / raw.answered_per_sec.max(f64::MIN_POSITIVE)
    );
    for (path, m) in [("app", app), ("raw", raw)] {
        let t = &m.tally;
        if t.busy + t.errors > 0 {
            let _ = writeln!(
                out,
                "    {path}: {} busy, {} errors{}",
                t.busy,
                t.errors,
                t.first_error.as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default()
            );
        }
    }
    out
}

/// A count the server may not keep, right-aligned in `width`: `n/a` where it keeps none.
fn counted(value: Option<f64>, width: usize, decimals: usize) -> String {
    value.map_or_else(|| format!("{:>width$}", "n/a"), |v| format!("{v:>width$.decimals$}"))
}

fn report_footer(overbooked: &Overbooked) -> String {
    format!(
        "\nafter the bench: {} nights over capacity and {} users booked twice on a night (real), \
         {} overbooked demo keys (all must be 0)\n",
        overbooked.real, overbooked.twice, overbooked.demo
    )
}

/// What `named-lock` books on, under the header.
fn describe_data(data: Data, history: Option<&History>) -> String {
    match (data, history) {
        (Data::Realistic, Some(history)) => format!(
            "data: realistic (`named-lock`): {} users taking turns, each within the quotas, on {} resources \
             holding {} reservations (past, present and future; stays of 1-7 nights mixed in)\n",
            history.tickets.len(),
            history.resources.len(),
            history.reservations
        ),
        _ => "data: hot-user: one user per client on empty resources of one place, the quotas lifted \
              (each user books thousands)\n"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(answered_per_sec: f64, p50_ms: f64, p99_ms: f64, cpu_us: f64) -> Measured {
        Measured {
            answered_per_sec,
            p50_ms,
            p99_ms,
            cpu_us,
            server_cpu_us: cpu_us * 2.0,
            db_cpu_us: 410.4,
            hops: 1.25,
            statements: Some(6.0),
            prepares: Some(0.0),
            commits: Some(1.0),
            tally: Tally::default(),
        }
    }

    #[test]
    fn a_row_prints_both_paths_and_their_ratio_under_the_header() {
        let header =
            report_header("haita_bench_00ff", Engine::Mysql, 16, Duration::from_secs(2), Driver::Wrk);
        assert!(header.starts_with(
            "haita bench bookings: database haita_bench_00ff (MySQL/MariaDB), pool 16 connections for app and raw alike, 2 s per cell\n"
        ));
        assert!(header.ends_with(
            "strategy         keys    clients | app ans/s  p50 ms  p99 ms srv µs cli µs db µs hops stmts prep commit | raw ans/s  p50 ms  p99 ms cpu µs db µs stmts prep commit | app/raw\n"
        ));
        let row = Row {
            cell: Cell { strategy: Strategy::UniqueSlot, keys: Keys::Spread, clients: 16 },
            app: measured(1200.4, 9.125, 17.5, 180.2),
            raw: measured(1600.0, 7.0, 12.25, 40.0),
        };
        assert_eq!(
            report_row(&row),
            "unique-slot      spread       16 |      1200    9.12   17.50    360    180   410 1.25   6.0  0.0   1.00 |      1600    7.00   12.25     40   410   6.0  0.0   1.00 |    0.75\n"
        );
        // Header and rows line up on the same columns.
        let width = |text: &str| text.lines().last().map(|l| l.chars().count());
        assert_eq!(width(&header), width(&report_row(&row)));
    }

    #[test]
    fn counts_postgresql_does_not_keep_are_said_to_be_missing_not_made_up() {
        let header =
            report_header("haita_bench_00ff", Engine::Postgres, 16, Duration::from_secs(2), Driver::Wrk);
        assert!(header.contains("(PostgreSQL)") && header.contains(super::super::NOT_COUNTED_ON_POSTGRES));
        let uncounted = |m: Measured| Measured { statements: None, prepares: None, commits: None, ..m };
        let row = Row {
            cell: Cell { strategy: Strategy::NamedLock, keys: Keys::Hot, clients: 16 },
            app: uncounted(measured(1200.4, 9.125, 17.5, 180.2)),
            raw: uncounted(measured(1600.0, 7.0, 12.25, 40.0)),
        };
        let line = report_row(&row);
        assert_eq!(line.matches(" n/a").count(), 6, "{line}");
        let width = |text: &str| text.lines().last().map(|l| l.chars().count());
        assert_eq!(width(&header), width(&line), "the columns still line up");
    }

    #[test]
    fn busy_answers_and_errors_get_a_line_of_their_own() {
        let mut app = measured(10.0, 1.0, 2.0, 3.0);
        app.tally.busy = 2;
        app.tally.errors = 1;
        app.tally.first_error = Some("500 boom".into());
        let row = Row {
            cell: Cell { strategy: Strategy::NamedLock, keys: Keys::Hot, clients: 1 },
            app,
            raw: Measured::default(),
        };
        let text = report_row(&row);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("named-lock       hot           1 |"), "{text}");
        assert_eq!(lines[1], "    app: 2 busy, 1 errors (first: 500 boom)");
    }

    #[test]
    fn the_footer_counts_overbooked_keys() {
        assert_eq!(
            report_footer(&Overbooked { real: 0, twice: 0, demo: 0 }),
            "\nafter the bench: 0 nights over capacity and 0 users booked twice on a night (real), \
             0 overbooked demo keys (all must be 0)\n"
        );
    }

    #[test]
    fn options_are_checked_before_anything_is_prepared() {
        let options = |strategy: &str, keys: &str, clients: &[u32]| BookingsBench {
            clients: clients.to_vec(),
            strategy: vec![strategy.into()],
            keys: vec![keys.into()],
            seconds: 2,
            repeat: 3,
            only: None,
            driver: "builtin".into(),
            stays: false,
            data: Data::Realistic,
            users: 10_000,
            history: 1_000_000,
        };
        let plan = options("all", "hot", &[1, 16]).plan().expect("valid");
        assert_eq!(plan.data, Data::Realistic, "a history like a real site's unless asked otherwise");
        assert_eq!(plan.strategies.len(), 7, "all means the correct ones that book alone");
        assert_eq!(plan.cells().count(), 14);
        assert_eq!(plan.most_clients(), 16);
        let error = |o: BookingsBench| o.plan().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error(options("no-lock", "hot", &[1])).contains("only runs inside a race"));
        assert!(error(options("named-lock-coalesced", "hot", &[1])).contains("bench coalescing"));
        assert!(error(options("named-lock", "warm", &[1])).contains("unknown key pattern"));
        assert!(error(options("named-lock", "hot", &[0])).contains("between 1 and 256"));
        assert!(error(BookingsBench { users: 5, ..options("named-lock", "hot", &[1]) }).contains("--users"));
        let driver = |name: &str| BookingsBench { driver: name.into(), ..options("named-lock", "hot", &[1]) };
        assert!(error(driver("ab")).contains("use auto, wrk, builtin"));
        assert_eq!(driver("builtin").plan().expect("valid").driver, Driver::Builtin);
    }
}
