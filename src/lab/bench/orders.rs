//! `haita bench orders`: how much the order path costs over the bare SQL it issues.
//!
//! Two workloads, each run twice on a scratch database: through [`service::place_order`] (diesel
//! DSL, the retry wrapper, the read-back of the order) and as the same statements written by hand
//! and sent through the same pool. Each client is a thread placing one-unit orders in a loop:
//! *hot* — every order takes the same product, so all clients queue on one row lock; *spread* —
//! each order takes one of 64 products at random. The ratio app/raw says what the code around
//! the SQL costs; the hot workload says what a single hot row costs anyone.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text, Untyped};
use rand::Rng;

use crate::config::Config;
use crate::db::{self, DbConn, DbPool, Engine, ScratchDatabase, cached_sql};
use crate::lab::stats::percentile_ms;
use crate::locking::retry::RetryPolicy;
use crate::orders::model::Cart;
use crate::orders::service;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    App,
    Raw,
}

#[derive(Clone, Debug)]
pub struct Measured {
    pub workload: &'static str,
    pub path: Path,
    pub orders: usize,
    pub failed: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Statements the server prepared per order (server-wide counter: run on a quiet server);
    /// `None` on PostgreSQL, which counts no prepares without an extension.
    pub prepares_per_order: Option<f64>,
}

const SPREAD_PRODUCTS: i64 = 64;
const STOCK: u32 = 900_000_000;

/// Runs the four measurements on a scratch database next to the one in `database_url`
/// (`<its name>_bench_<random>`), which is dropped afterwards.
pub fn run(database_url: &str, clients: usize, seconds: u64) -> anyhow::Result<Vec<Measured>> {
    let (_, name) = db::split_database_url(database_url)?;
    let scratch = ScratchDatabase::create(database_url, &format!("{name}_bench_"))?;
    let config = Config { pool_size: u32::try_from(clients + 2)?, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&config)?;
    crate::run_migrations(&pool)?;
    let (users, hot, spread) = prepare(&mut *pool.get()?, clients)?;

    let duration = Duration::from_secs(seconds);
    let mut results = Vec::new();
    for (workload, products) in [("hot", vec![hot]), ("spread", spread)] {
        for path in [Path::App, Path::Raw] {
            let prepared_before = statements_prepared(&mut *pool.get()?)?;
            let mut measured = measure(&pool, workload, path, &users, &products, clients, duration);
            let prepared = statements_prepared(&mut *pool.get()?)?;
            measured.prepares_per_order = prepared
                .zip(prepared_before)
                .map(|(now, then)| now.saturating_sub(then) as f64 / measured.orders.max(1) as f64);
            results.push(measured);
        }
    }
    drop(pool);
    drop(scratch);
    Ok(results)
}

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

/// The server's count of prepared statements since start (MySQL and MariaDB alike); `None` on
/// PostgreSQL, which counts them only with the `pg_stat_statements` extension.
fn statements_prepared(conn: &mut DbConn) -> anyhow::Result<Option<u64>> {
    if conn.engine() == Engine::Postgres {
        return Ok(None);
    }
    let status: Status =
        cached_sql::<Untyped>("SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'").get_result(conn)?;
    Ok(Some(status.value.parse()?))
}

/// A buyer per client (one person's orders queue on their user row, `crate::auth::quota`: a
/// single buyer would measure that queue, not the stock rows), one hot product and 64 spread
/// products, all with plenty of stock (and the ledger rows that stock implies).
fn prepare(conn: &mut DbConn, clients: usize) -> anyhow::Result<(Vec<i64>, i64, Vec<i64>)> {
    let mut users = Vec::new();
    for i in 0..clients.max(1) {
        cached_sql::<()>(
            "INSERT INTO users (username, display_name, password_hash, role) VALUES (?, 'bench', '-', 'customer')",
        )
        .bind::<Text, _>(format!("bench-{i}"))
        .execute(conn)?;
        users.push(crate::db::last_insert_id(conn)?);
    }
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
    Ok((users, hot, ids))
}

fn measure(
    pool: &DbPool,
    workload: &'static str,
    path: Path,
    users: &[i64],
    products: &[i64],
    clients: usize,
    duration: Duration,
) -> Measured {
    let start = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            let (pool, start, products) = (pool.clone(), start.clone(), products.to_vec());
            let user_id = users[client % users.len()];
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut failed = 0;
                start.wait();
                let began = Instant::now();
                while began.elapsed() < duration {
                    let product = products[rand::rng().random_range(0..products.len())];
                    let t = Instant::now();
                    let ok = match path {
                        Path::App => place_through_service(&pool, user_id, product),
                        Path::Raw => place_by_hand(&pool, user_id, product),
                    };
                    if ok {
                        latencies.push(t.elapsed());
                    } else {
                        failed += 1;
                    }
                }
                (latencies, failed)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut failed = 0;
    for thread in threads {
        if let Ok((mine, f)) = thread.join() {
            latencies.extend(mine);
            failed += f;
        }
    }
    latencies.sort_unstable();
    Measured {
        workload,
        path,
        orders: latencies.len(),
        failed,
        per_second: latencies.len() as f64 / duration.as_secs_f64(),
        p50_ms: percentile_ms(&latencies, 50.0),
        p99_ms: percentile_ms(&latencies, 99.0),
        prepares_per_order: None,
    }
}

fn place_through_service(pool: &DbPool, user_id: i64, product: i64) -> bool {
    let Ok(cart) = Cart::parse(&[(product, 1)]) else { return false };
    // The benchmark's customers order far faster than a person may: no rate limit.
    service::place_order(pool, &RetryPolicy::default(), user_id, &cart, None, u32::MAX).is_ok()
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
fn place_by_hand(pool: &DbPool, user_id: i64, product: i64) -> bool {
    let Ok(mut conn) = pool.get() else { return false };
    let placed = conn.transaction(|conn| -> QueryResult<i64> {
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
    });
    let Ok(order_id) = placed else { return false };
    let read_back = plain(&conn, "SELECT id, user_id, created_at, total_cents FROM orders WHERE id = ? AND user_id = ?")
        .bind::<BigInt, _>(order_id)
        .bind::<BigInt, _>(user_id)
        .execute(&mut conn)
        .and_then(|_| {
            plain(
                &conn,
                "SELECT l.order_id, l.product_id, p.sku, p.name, l.quantity, l.unit_price_cents \
                 FROM order_lines l JOIN products p ON p.id = l.product_id WHERE l.order_id IN (?) ORDER BY l.order_id, l.product_id",
            )
            .bind::<BigInt, _>(order_id)
            .execute(&mut conn)
        });
    read_back.is_ok()
}

/// `diesel::sql_query` with the engine's placeholders (`$1`, `$2`, … on PostgreSQL for the `?`
/// of the text): the plain way this path measures, each statement prepared and closed again on
/// every call. `cached_sql` would keep it prepared, as the service does; that is the difference
/// the ratio shows.
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

/// The table `haita bench orders` prints.
pub fn report(results: &[Measured], clients: usize) -> String {
    let mut out = format!(
        "orders benchmark: {clients} clients, one-unit orders\n{:<8} {:<4} {:>9} {:>9} {:>9} {:>7} {:>9} {:>8}\n",
        "workload", "path", "orders/s", "p50 ms", "p99 ms", "failed", "prep/ord", "app/raw"
    );
    for m in results {
        let raw = results.iter().find(|r| r.workload == m.workload && r.path == Path::Raw);
        let ratio = match (m.path, raw) {
            (Path::App, Some(raw)) if raw.per_second > 0.0 => format!("{:.2}", m.per_second / raw.per_second),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:<8} {:<4} {:>9.1} {:>9.2} {:>9.2} {:>7} {:>9} {:>8}\n",
            m.workload,
            if m.path == Path::App { "app" } else { "raw" },
            m.per_second,
            m.p50_ms,
            m.p99_ms,
            m.failed,
            m.prepares_per_order.map_or_else(|| "n/a".to_string(), |p| format!("{p:.1}")),
            ratio
        ));
    }
    if results.iter().any(|m| m.prepares_per_order.is_none()) {
        out.push_str("prep/ord is n/a on PostgreSQL: it counts prepared statements only with the pg_stat_statements extension\n");
    }
    out
}
