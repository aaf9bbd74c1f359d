//! `haita bench orders`: what a hot product costs an order, one at a time and coalesced, next to
//! the bare `FOR UPDATE` it is built on.
//!
//! Everything happens in a scratch database next to `DATABASE_URL`'s (`<its name>_bench_<random>`),
//! dropped at the end; every order is for one unit of a product with stock for all.
//!
//! **In process**, without HTTP, `--clients` clients order as fast as they can for `--seconds`,
//! on a pool of `POOL_SIZE` connections, by three paths (alternating, `--repeat` times each; the
//! median run is printed):
//! - *raw*: the baseline, the order's statements written by hand the plain way (`sql_query`,
//!   diesel's own transaction: each statement prepared and closed again), `SELECT … FOR UPDATE`
//!   on the stock row, check, decrement, insert, commit, read back;
//! - *one at a time*: `service::place_order`, what every order ran before coalescing, and what
//!   `ORDER_COALESCING=false` runs: a transaction per order, each queueing on the row's lock;
//! - *coalesced*: `orders::coalesce::Coalescer`, what an order request runs by default: the
//!   product's queued orders placed in batches, one transaction each.
//!
//! Keys (`--keys`): *hot*, every order for one product (a flash sale), and *spread*, each order
//! for one of 64 products at random. The server's own counters (`SHOW GLOBAL STATUS`, so run on
//! a quiet server) give statements and commits per order; PostgreSQL keeps no such count
//! without an extension (`super::NOT_COUNTED_ON_POSTGRES`).
//!
//! **Through HTTP**, the app as a process of its own (`server.rs`, coalescing on, its default),
//! `--clients` logged-in HTTP clients in this process post `/api/v1/orders`, hot and spread
//! (both, whatever `--keys` says: the one is the other's reference), with the blocking-pool hops
//! per order read from the server's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text};
use rand::Rng;

use super::ServerCounters;
use super::server::ServerProcess;
use crate::config::Config;
use crate::db::{self, DbConn, DbPool, Engine, ScratchDatabase, cached_sql};
use crate::lab::stats::percentile_ms;
use crate::locking::retry::RetryPolicy;
use crate::orders::coalesce;
use crate::orders::model::Cart;
use crate::orders::{OrderError, service};

#[derive(clap::Args)]
pub struct OrdersBench {
    /// Clients ordering at once, in process and through HTTP.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Key patterns measured in process, comma-separated: hot, spread (HTTP measures both).
    #[arg(long, value_delimiter = ',', default_value = "hot,spread")]
    keys: Vec<String>,
    /// Runs per path, alternating; the median is printed (the machine is shared, and one noisy
    /// second should not decide a ratio).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Measure only one part: `in-process` or `http`.
    #[arg(long)]
    only: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    Hot,
    Spread,
}

impl Keys {
    fn label(self) -> &'static str {
        match self {
            Keys::Hot => "hot",
            Keys::Spread => "spread",
        }
    }
}

/// How an order is placed, in process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Raw,
    OneAtATime,
    Coalesced,
}

impl Path {
    const ALL: [Path; 3] = [Path::Raw, Path::OneAtATime, Path::Coalesced];

    fn label(self) -> &'static str {
        match self {
            Path::Raw => "raw FOR UPDATE",
            Path::OneAtATime => "one at a time",
            Path::Coalesced => "coalesced",
        }
    }
}

/// The options, checked before anything is prepared.
struct Plan {
    clients: usize,
    window: Duration,
    repeat: u32,
    keys: Vec<Keys>,
    in_process: bool,
    http: bool,
}

impl OrdersBench {
    fn plan(&self) -> anyhow::Result<Plan> {
        anyhow::ensure!((1..=256).contains(&self.clients), "--clients must be between 1 and 256");
        let keys = self
            .keys
            .iter()
            .map(|k| match k.as_str() {
                "hot" => Ok(Keys::Hot),
                "spread" => Ok(Keys::Spread),
                other => Err(anyhow::anyhow!("unknown key pattern {other:?}: use hot, spread")),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(!keys.is_empty(), "--keys: name hot, spread or both");
        let (in_process, http) = match self.only.as_deref() {
            None => (true, true),
            Some("in-process") => (true, false),
            Some("http") => (false, true),
            Some(other) => anyhow::bail!("--only {other:?}: use in-process or http"),
        };
        Ok(Plan {
            clients: self.clients,
            window: Duration::from_secs(self.seconds.clamp(1, 60)),
            repeat: self.repeat.clamp(1, 9),
            keys,
            in_process,
            http,
        })
    }
}

/// One run of one path.
#[derive(Clone, Debug, Default)]
struct Measured {
    placed: u64,
    /// Answers other than an order placed (a busy answer, an error), and the first of them.
    failed: u64,
    first_failure: Option<String>,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Per order placed; `None` where the server keeps no count (PostgreSQL).
    statements: Option<f64>,
    commits: Option<f64>,
    prepares: Option<f64>,
    /// Blocking-pool hops per order (HTTP only): order batches and session-check batches.
    hops: Option<f64>,
    /// Orders per coalesced batch, where batches ran (`haita_order_batch_size`).
    per_batch: Option<f64>,
}

impl Measured {
    fn new(
        mut latencies: Vec<Duration>,
        failed: u64,
        first_failure: Option<String>,
        elapsed: Duration,
    ) -> Self {
        latencies.sort_unstable();
        let placed = latencies.len() as u64;
        Self {
            placed,
            failed,
            first_failure,
            per_second: placed as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_ms: percentile_ms(&latencies, 50.0),
            p99_ms: percentile_ms(&latencies, 99.0),
            ..Self::default()
        }
    }

    /// What the server counted between `before` and now, per order placed.
    fn counted(mut self, pool: &DbPool, before: &ServerCounters) -> anyhow::Result<Self> {
        let done = ServerCounters::read(pool)?.since(before);
        let per_order = |n: Option<u64>| n.map(|n| n as f64 / self.placed.max(1) as f64);
        (self.statements, self.commits, self.prepares) =
            (per_order(done.statements), per_order(done.commits), per_order(done.prepares));
        Ok(self)
    }

    /// The run with the median throughput.
    fn median(mut runs: Vec<Measured>) -> Measured {
        runs.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
        let middle = runs.len() / 2;
        runs.into_iter().nth(middle).unwrap_or_default()
    }
}

const SPREAD_PRODUCTS: i64 = 64;
const STOCK: u32 = 900_000_000;
const PASSWORD: &str = "bench-password-not-secret";

/// Each client orders in process as this many buyers in turn. One person's orders queue on their
/// user row (`crate::auth::quota`), so the clients need a buyer each; and each order counts its
/// buyer's orders of the last minute (`MAX_ORDERS_PER_MINUTE_PER_USER`, lifted here), so a buyer
/// placing thousands a minute would measure that count, which a person at the rate's cap never
/// makes long.
const BUYERS_PER_CLIENT: usize = 50;

/// Through HTTP each client takes turns between this many logged-in buyers (a login costs a
/// password check on the server: fewer than in process).
const SESSIONS_PER_CLIENT: usize = 8;

/// The scratch database and what every run shares.
struct Prepared {
    config: Config,
    pool: DbPool,
    /// [`BUYERS_PER_CLIENT`] buyers per client, client `c`'s being `c`, `c + clients`, ….
    users: Vec<i64>,
    clients: usize,
    hot: i64,
    spread: Vec<i64>,
    /// Last, so it is dropped after the pool, however the bench ends.
    scratch: ScratchDatabase,
}

/// `haita bench orders`: the in-process table, then the HTTP one, each printed as measured.
pub fn run(config: &Config, options: &OrdersBench) -> anyhow::Result<()> {
    if std::env::var_os("RUST_LOG").is_none() {
        // One access-log line per request would be part of what is measured.
        log::set_max_level(log::LevelFilter::Warn);
    }
    let plan = options.plan()?;
    let (_, name) = db::split_database_url(&config.database_url)?;
    let scratch = ScratchDatabase::create(&config.database_url, &format!("{name}_bench_"))?;
    let bench_config = Config { database_url: scratch.url.clone(), ..config.clone() };
    let pool = crate::prepare_database(&bench_config)?;
    crate::lab::prepare(&pool)?;
    let Shop { buyers, hot, spread } = prepare(&mut *pool.get()?, plan.clients)?;
    let users = buyers.iter().map(|(id, _)| *id).collect();
    let bench = Prepared { config: bench_config, pool, users, clients: plan.clients, hot, spread, scratch };
    print!("{}", header(&bench, &plan));

    if plan.in_process {
        let mut rows = Vec::new();
        for &keys in &plan.keys {
            let mut runs: Vec<(Path, Measured)> = Vec::new();
            for _ in 0..plan.repeat {
                for path in Path::ALL {
                    runs.push((path, measure_in_process(&bench, keys, path, plan.clients, plan.window)?));
                }
            }
            for path in Path::ALL {
                let median = Measured::median(
                    runs.iter().filter(|(p, _)| *p == path).map(|(_, m)| m.clone()).collect(),
                );
                let row = (keys, path, median);
                print!("{}", in_process_row(&row));
                rows.push(row);
            }
        }
        print!("{}", in_process_ratios(&rows));
    }
    if plan.http {
        let server = ServerProcess::start(&bench.config, true)?;
        let base = server.base_url();
        let measured = actix_web::rt::System::new().block_on(async {
            let clients = log_in(&base, &buyers[..plan.clients * SESSIONS_PER_CLIENT]).await?;
            print!("{}", http_header(plan.clients));
            let mut rows = Vec::new();
            for keys in [Keys::Hot, Keys::Spread] {
                let mut runs = Vec::new();
                for _ in 0..plan.repeat {
                    runs.push(measure_http(&bench, &server, &clients, keys, plan.window).await?);
                }
                let median = Measured::median(runs);
                print!("{}", http_row(keys, &median));
                rows.push((keys, median));
            }
            anyhow::Ok(rows)
        })?;
        drop(server);
        print!("{}", http_ratio(&measured));
    }
    let Prepared { pool, scratch, .. } = bench;
    drop(pool);
    drop(scratch);
    Ok(())
}

/// What the bench orders: its buyers (id and username), its hot product and its spread ones.
struct Shop {
    buyers: Vec<(i64, String)>,
    hot: i64,
    spread: Vec<i64>,
}

/// [`BUYERS_PER_CLIENT`] buyers per client (the first `clients` with a password, for the HTTP
/// clients to log in with), one hot product and 64 spread products, all with plenty of stock (and
/// the ledger rows that stock implies).
fn prepare(conn: &mut DbConn, clients: usize) -> anyhow::Result<Shop> {
    // One hash for every buyer's password: each is still a valid argon2 hash of it, and hashing
    // thousands one by one would take minutes.
    let hash =
        crate::auth::password::hash(PASSWORD).map_err(|e| anyhow::anyhow!("hashing the password: {e}"))?;
    let users = crate::db::transaction(conn, |conn| -> anyhow::Result<Vec<(i64, String)>> {
        (0..clients.max(1) * BUYERS_PER_CLIENT)
            .map(|i| {
                let username = format!("bench{i:05}");
                cached_sql::<()>(
                    "INSERT INTO users (username, display_name, password_hash, role) VALUES (?, ?, ?, 'customer')",
                )
                .bind::<Text, _>(&username)
                .bind::<Text, _>(&username)
                .bind::<Text, _>(&hash)
                .execute(conn)?;
                Ok((crate::db::last_insert_id(conn)?, username))
            })
            .collect()
    })?;
    let mut ids = Vec::new();
    for i in 0..=SPREAD_PRODUCTS {
        cached_sql::<()>("INSERT INTO products (sku, name, description, price_cents) VALUES (?, ?, '', 100)")
            .bind::<Text, _>(format!("BENCH-{i}"))
            .bind::<Text, _>(format!("Bench product {i}"))
            .execute(conn)?;
        let id: i64 = crate::db::last_insert_id(conn)?;
        cached_sql::<()>("INSERT INTO stock_levels (product_id, on_hand) VALUES (?, ?)")
            .bind::<BigInt, _>(id)
            .bind::<Integer, _>(i32::try_from(STOCK)?)
            .execute(conn)?;
        cached_sql::<()>(
            "INSERT INTO stock_movements (product_id, delta, reason) VALUES (?, ?, 'adjustment')",
        )
        .bind::<BigInt, _>(id)
        .bind::<Integer, _>(i32::try_from(STOCK)?)
        .execute(conn)?;
        ids.push(id);
    }
    let hot = ids.remove(0);
    Ok(Shop { buyers: users, hot, spread: ids })
}

impl Prepared {
    /// The buyer of order `n` of client `client`: the client's buyers in turn.
    fn buyer(&self, client: usize, n: usize) -> i64 {
        let at = client + self.clients * (n % BUYERS_PER_CLIENT);
        self.users[at % self.users.len()]
    }

    /// The product of the next order.
    fn product(&self, keys: Keys) -> i64 {
        match keys {
            Keys::Hot => self.hot,
            Keys::Spread => self.spread[rand::rng().random_range(0..self.spread.len())],
        }
    }
}

// ---- in process ----------------------------------------------------------------------------

fn measure_in_process(
    bench: &Prepared,
    keys: Keys,
    path: Path,
    clients: usize,
    window: Duration,
) -> anyhow::Result<Measured> {
    let before = ServerCounters::read(&bench.pool)?;
    // The batches this process ran: the in-process coalescer records into the process's metrics.
    let batches = &crate::metrics::METRICS.order_batch_size;
    let batched_before = (batches.get_sample_count(), batches.get_sample_sum());
    let mut measured = match path {
        Path::Raw | Path::OneAtATime => on_threads(bench, keys, path, clients, window),
        Path::Coalesced => on_tasks(bench, keys, clients, window),
    };
    let (count, sum) =
        (batches.get_sample_count() - batched_before.0, batches.get_sample_sum() - batched_before.1);
    measured.per_batch = (count > 0).then(|| sum / count as f64);
    measured.counted(&bench.pool, &before)
}

/// `clients` threads, each ordering in a loop on the pool: the raw path and the service.
fn on_threads(bench: &Prepared, keys: Keys, path: Path, clients: usize, window: Duration) -> Measured {
    let start = Barrier::new(clients);
    let started = Instant::now();
    let tallies: Vec<(Vec<Duration>, u64, Option<String>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|client| {
                let start = &start;
                scope.spawn(move || {
                    let (mut latencies, mut failed, mut first) = (Vec::new(), 0, None);
                    start.wait();
                    let deadline = Instant::now() + window;
                    let mut n = 0;
                    while Instant::now() < deadline {
                        let (product, user_id) = (bench.product(keys), bench.buyer(client, n));
                        n += 1;
                        let t = Instant::now();
                        let placed = match path {
                            Path::Raw => {
                                place_by_hand(&bench.pool, user_id, product).map_err(|e| e.to_string())
                            }
                            _ => place_through_service(&bench.pool, user_id, product)
                                .map_err(|e| e.to_string()),
                        };
                        match placed {
                            Ok(()) => latencies.push(t.elapsed()),
                            Err(e) => {
                                failed += 1;
                                first.get_or_insert(e);
                            }
                        }
                    }
                    (latencies, failed, first)
                })
            })
            .collect();
        threads.into_iter().filter_map(|t| t.join().ok()).collect()
    });
    let elapsed = started.elapsed();
    let (mut latencies, mut failed, mut first) = (Vec::new(), 0, None);
    for (mine, f, e) in tallies {
        latencies.extend(mine);
        failed += f;
        first = first.or(e);
    }
    Measured::new(latencies, failed, first, elapsed)
}

/// `clients` async tasks, each ordering in a loop through the coalescer, as the app's handlers
/// do (the batches run on the blocking pool).
fn on_tasks(bench: &Prepared, keys: Keys, clients: usize, window: Duration) -> Measured {
    let wait = bench.config.lock_wait;
    // The door an instance would have, with metrics of the benchmark's own.
    let door = crate::db::OffExecutor::new(bench.pool.clone(), crate::metrics::Metrics::new());
    let coalescer = Arc::new(coalesce::coalescer(door, u32::MAX, crate::locking::Cutoff::default()));
    let started = Instant::now();
    let tallies = actix_web::rt::System::new().block_on(async {
        let tasks = (0..clients).map(|client| {
            let coalescer = coalescer.clone();
            let products: Vec<i64> = (0..4096).map(|_| bench.product(keys)).collect();
            let buyers: Vec<i64> = (0..BUYERS_PER_CLIENT).map(|n| bench.buyer(client, n)).collect();
            actix_web::rt::spawn(async move {
                let (mut latencies, mut failed, mut first) = (Vec::new(), 0u64, None);
                let deadline = Instant::now() + window;
                let mut n = 0;
                while Instant::now() < deadline {
                    let (product, user_id) = (products[n % products.len()], buyers[n % buyers.len()]);
                    n += 1;
                    let Ok(cart) = Cart::parse(&[(product, 1)]) else { continue };
                    let t = Instant::now();
                    match coalesce::order(&coalescer, wait, user_id, cart, None).await {
                        Ok(_) => latencies.push(t.elapsed()),
                        Err(e) => {
                            failed += 1;
                            first.get_or_insert(e.to_string());
                        }
                    }
                }
                (latencies, failed, first)
            })
        });
        futures_util::future::join_all(tasks).await
    });
    let elapsed = started.elapsed();
    let (mut latencies, mut failed, mut first) = (Vec::new(), 0, None);
    for (mine, f, e) in tallies.into_iter().flatten() {
        latencies.extend(mine);
        failed += f;
        first = first.or(e);
    }
    Measured::new(latencies, failed, first, elapsed)
}

fn place_through_service(pool: &DbPool, user_id: i64, product: i64) -> Result<(), OrderError> {
    let cart = Cart::parse(&[(product, 1)])?;
    // The benchmark's customers order far faster than a person may: no rate limit.
    service::place_order(pool, &RetryPolicy::default(), user_id, &cart, None, u32::MAX).map(drop)
}

#[derive(QueryableByName)]
struct Priced {
    #[diesel(sql_type = BigInt)]
    price_cents: i64,
}

#[derive(QueryableByName)]
struct OnHand {
    #[diesel(sql_type = Integer)]
    on_hand: i32,
}

/// The statements `place_order` sends for a one-line cart, written by hand: read the price, lock
/// and check the stock row, decrement, insert order, line and ledger row, commit, read the order
/// back with its lines.
fn place_by_hand(pool: &DbPool, user_id: i64, product: i64) -> anyhow::Result<()> {
    let mut conn = pool.get()?;
    let order_id = conn.transaction(|conn| -> QueryResult<i64> {
        let price = plain(conn, "SELECT id, name, price_cents FROM products WHERE id IN (?)")
            .bind::<BigInt, _>(product)
            .get_result::<Priced>(conn)?
            .price_cents;
        let on_hand = plain(conn, "SELECT on_hand FROM stock_levels WHERE product_id = ? FOR UPDATE")
            .bind::<BigInt, _>(product)
            .get_result::<OnHand>(conn)?
            .on_hand;
        if on_hand < 1 {
            return Err(diesel::result::Error::RollbackTransaction);
        }
        plain(conn, "UPDATE stock_levels SET on_hand = on_hand - 1 WHERE product_id = ?")
            .bind::<BigInt, _>(product)
            .execute(conn)?;
        plain(conn, "INSERT INTO orders (user_id, total_cents) VALUES (?, ?)")
            .bind::<BigInt, _>(user_id)
            .bind::<BigInt, _>(price)
            .execute(conn)?;
        let order_id: i64 = crate::db::last_insert_id(conn)?;
        plain(conn, "INSERT INTO order_lines (order_id, product_id, quantity, unit_price_cents) VALUES (?, ?, 1, ?)")
            .bind::<BigInt, _>(order_id)
            .bind::<BigInt, _>(product)
            .bind::<BigInt, _>(price)
            .execute(conn)?;
        plain(
            conn,
            "INSERT INTO stock_movements (product_id, delta, reason, order_id, actor_user_id) VALUES (?, -1, 'order', ?, ?)",
        )
        .bind::<BigInt, _>(product)
        .bind::<BigInt, _>(order_id)
        .bind::<BigInt, _>(user_id)
        .execute(conn)?;
        Ok(order_id)
    })?;
    plain(&conn, "SELECT id, user_id, created_at, total_cents FROM orders WHERE id = ? AND user_id = ?")
        .bind::<BigInt, _>(order_id)
        .bind::<BigInt, _>(user_id)
        .execute(&mut conn)?;
    plain(
        &conn,
        "SELECT l.order_id, l.product_id, p.sku, p.name, l.quantity, l.unit_price_cents \
         FROM order_lines l JOIN products p ON p.id = l.product_id WHERE l.order_id IN (?) ORDER BY l.order_id, l.product_id",
    )
    .bind::<BigInt, _>(order_id)
    .execute(&mut conn)?;
    Ok(())
}

/// `diesel::sql_query` with the engine's placeholders (`$1`, `$2`, … on PostgreSQL for the `?`
/// of the text): the plain way this path measures, each statement prepared and closed again on
/// every call. `cached_sql` would keep it prepared, as the service does.
fn plain(conn: &DbConn, sql: &str) -> diesel::query_builder::SqlQuery {
    match conn.engine() {
        Engine::Mysql => diesel::sql_query(sql),
        Engine::Postgres => {
            let mut numbered = String::with_capacity(sql.len() + 8);
            for (i, part) in sql.split('?').enumerate() {
                if i > 0 {
                    numbered.push_str(&format!("${i}"));
                }
                numbered.push_str(part);
            }
            diesel::sql_query(numbered)
        }
    }
}

// ---- through HTTP --------------------------------------------------------------------------

/// A logged-in bench user's HTTP client.
struct Client {
    http: reqwest::Client,
}

/// A logged-in HTTP client for each of `users`, in their order (so client `c`'s turns are `c`,
/// `c + clients`, … as in process), logged in a few at a time (the server checks as many
/// passwords at once as it has cores).
async fn log_in(base: &str, users: &[(i64, String)]) -> anyhow::Result<Vec<Client>> {
    let log_in_one = |username: String| async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .cookie_store(true)
            .pool_max_idle_per_host(1)
            // actix closes a connection idle for 5 s (its keep-alive); a client reusing one just
            // then gets "error sending request". Between runs a client idles longer, so it lets go
            // of its connection first.
            .pool_idle_timeout(Duration::from_secs(2))
            .build()?;
        let body = serde_json::json!({"username": username, "password": PASSWORD});
        for _ in 0..5 {
            let response = http.post(format!("{base}/api/v1/session")).json(&body).send().await?;
            match response.status().as_u16() {
                200..=299 => return Ok(Client { http }),
                // Every password-check slot was taken for its whole wait: try again, as its
                // `Retry-After` says.
                503 => actix_web::rt::time::sleep(Duration::from_secs(1)).await,
                status => anyhow::bail!("bench user {username} could not log in: {status}"),
            }
        }
        anyhow::bail!("bench user {username} could not log in: the server stayed busy")
    };
    let mut clients = Vec::with_capacity(users.len());
    for chunk in users.chunks(4) {
        let logged_in =
            futures_util::future::join_all(chunk.iter().map(|(_, name)| log_in_one(name.clone())));
        clients.extend(logged_in.await.into_iter().collect::<anyhow::Result<Vec<_>>>()?);
    }
    Ok(clients)
}

async fn measure_http(
    bench: &Prepared,
    server: &ServerProcess,
    clients: &[Client],
    keys: Keys,
    window: Duration,
) -> anyhow::Result<Measured> {
    let before = ServerCounters::read(&bench.pool)?;
    let hops_before = blocking_hops(server).await?;
    let url = format!("{}/api/v1/orders", server.base_url());
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = started + window;
    let tasks = (0..bench.clients).map(|c| {
        let (url, next) = (&url, &next);
        let products: Vec<i64> = (0..4096).map(|_| bench.product(keys)).collect();
        // This client's buyers, in turn.
        let sessions: Vec<&Client> = clients.iter().skip(c).step_by(bench.clients).collect();
        async move {
            let (mut latencies, mut failed, mut first) = (Vec::new(), 0u64, None);
            let mut turn = 0;
            while Instant::now() < deadline {
                let n = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
                let body = serde_json::json!({"lines": [{"product_id": products[n % products.len()], "quantity": 1}]});
                let client = sessions[turn % sessions.len()];
                turn += 1;
                let t = Instant::now();
                match client.http.post(url).json(&body).send().await {
                    Ok(r) if r.status() == 201 => latencies.push(t.elapsed()),
                    Ok(r) => {
                        failed += 1;
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        first.get_or_insert_with(|| format!("{status} {text}"));
                    }
                    Err(e) => {
                        failed += 1;
                        first.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (latencies, failed, first)
        }
    });
    let tallies = futures_util::future::join_all(tasks).await;
    let elapsed = started.elapsed();
    let (mut latencies, mut failed, mut first) = (Vec::new(), 0, None);
    for (mine, f, e) in tallies {
        latencies.extend(mine);
        failed += f;
        first = first.or(e);
    }
    let mut measured = Measured::new(latencies, failed, first, elapsed).counted(&bench.pool, &before)?;
    let after = blocking_hops(server).await?;
    measured.hops = Some((after.hops - hops_before.hops) / measured.placed.max(1) as f64);
    let batches = after.batches - hops_before.batches;
    measured.per_batch = (batches > 0.0).then(|| (after.batched - hops_before.batched) / batches);
    Ok(measured)
}

/// What the server's `/metrics` says so far: its blocking hops for orders (one per order batch
/// and one per session-check batch, the two drainers' histograms counting their batches), and
/// its order batches and the orders in them.
struct Hops {
    hops: f64,
    batches: f64,
    batched: f64,
}

async fn blocking_hops(server: &ServerProcess) -> anyhow::Result<Hops> {
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
    let batches = count("haita_order_batch_size_count");
    Ok(Hops {
        hops: batches + count("haita_session_check_batch_size_count"),
        batches,
        batched: count("haita_order_batch_size_sum"),
    })
}

// ---- the tables ----------------------------------------------------------------------------

fn header(bench: &Prepared, plan: &Plan) -> String {
    let server = match bench.pool.engine() {
        Engine::Mysql => "MySQL/MariaDB",
        Engine::Postgres => "PostgreSQL",
    };
    let mut out = format!(
        "haita bench orders: database {} ({server}), pool {} connections, {} clients, one-unit orders, \
         {} s per run, median of {}\n",
        bench.scratch.name,
        bench.config.pool_size,
        plan.clients,
        plan.window.as_secs(),
        plan.repeat
    );
    if bench.pool.engine() == Engine::Postgres {
        out.push_str(super::NOT_COUNTED_ON_POSTGRES);
        out.push('\n');
    }
    if plan.in_process {
        out.push_str(&format!(
            "\nin process (no HTTP); stmts, commit, prep: what the server counted, per order placed; \
             batch: orders per coalesced batch\n\
             {:<7} {:<15} {:>9} {:>8} {:>8} {:>7} {:>6} {:>7} {:>5} {:>6}\n",
            "keys", "path", "orders/s", "p50 ms", "p99 ms", "failed", "stmts", "commit", "prep", "batch"
        ));
    }
    out
}

/// A count the server may not keep, right-aligned in `width`: `n/a` where it keeps none.
fn counted(value: Option<f64>, width: usize, decimals: usize) -> String {
    value.map_or_else(|| format!("{:>width$}", "n/a"), |v| format!("{v:>width$.decimals$}"))
}

/// Orders per batch, right-aligned in `width`; blank for a path that runs no batches.
fn batch(per_batch: Option<f64>, width: usize) -> String {
    per_batch.map_or_else(|| format!("{:>width$}", ""), |b| format!("{b:>width$.1}"))
}

fn failures(m: &Measured) -> String {
    match &m.first_failure {
        Some(first) if m.failed > 0 => format!("    {} failed (first: {first})\n", m.failed),
        _ => String::new(),
    }
}

fn in_process_row((keys, path, m): &(Keys, Path, Measured)) -> String {
    format!(
        "{:<7} {:<15} {:>9.0} {:>8.2} {:>8.2} {:>7} {} {} {} {}\n{}",
        keys.label(),
        path.label(),
        m.per_second,
        m.p50_ms,
        m.p99_ms,
        m.failed,
        counted(m.statements, 6, 1),
        counted(m.commits, 7, 2),
        counted(m.prepares, 5, 1),
        batch(m.per_batch, 6),
        failures(m)
    )
}

/// Per key pattern: coalesced against one at a time (the target on a hot product: 4×),
/// and each against the raw baseline.
fn in_process_ratios(rows: &[(Keys, Path, Measured)]) -> String {
    let mut out = String::new();
    for keys in [Keys::Hot, Keys::Spread] {
        let rate =
            |path: Path| rows.iter().find(|(k, p, _)| *k == keys && *p == path).map(|(_, _, m)| m.per_second);
        if let (Some(raw), Some(alone), Some(batched)) =
            (rate(Path::Raw), rate(Path::OneAtATime), rate(Path::Coalesced))
        {
            let ratio = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
            out.push_str(&format!(
                "{}: coalesced / one at a time {:.2}; one at a time / raw {:.2}; coalesced / raw {:.2}\n",
                keys.label(),
                ratio(batched, alone),
                ratio(alone, raw),
                ratio(batched, raw)
            ));
        }
    }
    out
}

fn http_header(clients: usize) -> String {
    format!(
        "\nthrough HTTP: a separate `haita serve` (ORDER_COALESCING on), {clients} HTTP clients in this process, \
         POST /api/v1/orders; hops: blocking-pool hops per order; batch: orders per batch\n\
         {:<7} {:>9} {:>8} {:>8} {:>7} {:>6} {:>7} {:>5} {:>6}\n",
        "keys", "orders/s", "p50 ms", "p99 ms", "failed", "stmts", "commit", "hops", "batch"
    )
}

fn http_row(keys: Keys, m: &Measured) -> String {
    format!(
        "{:<7} {:>9.0} {:>8.2} {:>8.2} {:>7} {} {} {} {}\n{}",
        keys.label(),
        m.per_second,
        m.p50_ms,
        m.p99_ms,
        m.failed,
        counted(m.statements, 6, 1),
        counted(m.commits, 7, 2),
        counted(m.hops, 5, 2),
        batch(m.per_batch, 6),
        failures(m)
    )
}

/// Hot against spread through HTTP (the target: at least 1.0).
fn http_ratio(rows: &[(Keys, Measured)]) -> String {
    let rate = |keys: Keys| rows.iter().find(|(k, _)| *k == keys).map(|(_, m)| m.per_second);
    match (rate(Keys::Hot), rate(Keys::Spread)) {
        (Some(hot), Some(spread)) => {
            format!("through HTTP: hot / spread {:.2}\n", hot / spread.max(f64::MIN_POSITIVE))
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(keys: &str, only: Option<&str>, clients: usize) -> OrdersBench {
        OrdersBench {
            clients,
            seconds: 1,
            keys: keys.split(',').map(str::to_owned).collect(),
            repeat: 1,
            only: only.map(str::to_owned),
        }
    }

    fn measured(per_second: f64) -> Measured {
        Measured {
            placed: 10,
            per_second,
            p50_ms: 1.5,
            p99_ms: 9.25,
            statements: Some(2.25),
            ..Measured::default()
        }
    }

    #[test]
    fn options_are_checked_before_anything_is_prepared() {
        let plan = options("hot", None, 64).plan().expect("valid");
        assert_eq!((plan.keys, plan.in_process, plan.http), (vec![Keys::Hot], true, true));
        let plan = options("hot,spread", Some("http"), 8).plan().expect("valid");
        assert!(!plan.in_process && plan.http);
        let error = |o: OrdersBench| o.plan().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error(options("warm", None, 64)).contains("use hot, spread"));
        assert!(error(options("hot", Some("both"), 64)).contains("in-process or http"));
        assert!(error(options("hot", None, 0)).contains("between 1 and 256"));
    }

    #[test]
    fn the_ratios_compare_paths_of_one_key_pattern_and_say_what_is_missing() {
        let rows = vec![
            (Keys::Hot, Path::Raw, measured(500.0)),
            (Keys::Hot, Path::OneAtATime, measured(1000.0)),
            (Keys::Hot, Path::Coalesced, measured(5000.0)),
        ];
        assert_eq!(
            in_process_ratios(&rows),
            "hot: coalesced / one at a time 5.00; one at a time / raw 2.00; coalesced / raw 10.00\n"
        );
        let row = in_process_row(&rows[2]);
        assert!(
            row.starts_with(
                "hot     coalesced            5000     1.50     9.25       0    2.2     n/a   n/a       \n"
            ),
            "{row:?}"
        );
        let batched = Measured { per_batch: Some(12.5), ..measured(5000.0) };
        assert!(in_process_row(&(Keys::Hot, Path::Coalesced, batched)).ends_with("  n/a   12.5\n"));
        assert_eq!(
            http_ratio(&[(Keys::Hot, measured(900.0)), (Keys::Spread, measured(600.0))]),
            "through HTTP: hot / spread 1.50\n"
        );
        assert_eq!(http_ratio(&[(Keys::Hot, measured(900.0))]), "");
    }

    #[test]
    fn failures_get_a_line_of_their_own() {
        let failing = Measured { failed: 3, first_failure: Some("503 busy".into()), ..measured(10.0) };
        assert_eq!(failures(&failing), "    3 failed (first: 503 busy)\n");
        assert_eq!(failures(&measured(10.0)), "");
    }
}
