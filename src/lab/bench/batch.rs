//! `haita bench batch`: what a batch job costs the online users beside it.
//!
//! On a scratch database with `products` products, online editors save products (read the
//! version, save through the versioned update, as the edit form does) from `editors` threads,
//! first with no batch, then while a price revision runs with each policy. It prints the online
//! saves' p50/p99, how many met the conflict screen (they read a version the batch then
//! changed), and how long each run took.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;

use crate::batch::Policy;
use crate::batch::guard::BatchLock;
use crate::batch::price_revision::Revision;
use crate::catalog::CatalogError;
use crate::catalog::edit::{self, ProductChanges};
use crate::config::Config;
use crate::db::{self, DbPool, ScratchDatabase};
use crate::lab::stats::percentile_ms;

/// One scenario's numbers.
pub struct Measured {
    pub scenario: &'static str,
    pub run: Option<Duration>,
    /// Products the run left for a later run (skip: locked by an online save at that instant).
    pub skipped: usize,
    pub saves: usize,
    pub conflicts: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// How long the editors are measured with no batch running.
const BASELINE: Duration = Duration::from_secs(2);

pub fn run(database_url: &str, products: usize, editors: usize) -> anyhow::Result<Vec<Measured>> {
    let (_, name) = db::split_database_url(database_url)?;
    let scratch = ScratchDatabase::create(database_url, &format!("{name}_bench_"))?;
    let config = Config { pool_size: u32::try_from(editors + 4)?, ..Config::for_database(&scratch.url) };
    let pool = db::build_pool(&config)?;
    crate::run_migrations(&pool)?;
    let editor = prepare(&pool, products)?;
    let ids: Vec<i64> = (1..=i64::try_from(products)?).collect();

    let mut results = Vec::new();
    for (scenario, policy) in [("no batch", None), ("wait", Some(Policy::Wait)), ("skip", Some(Policy::Skip))]
    {
        let stop = Arc::new(AtomicBool::new(false));
        let online: Vec<_> = (0..editors)
            .map(|i| {
                let (pool, stop, ids) = (pool.clone(), stop.clone(), ids.clone());
                std::thread::spawn(move || edit_until(&pool, editor, &ids, i, &stop))
            })
            .collect();
        let (run, skipped) = match policy {
            None => {
                std::thread::sleep(BASELINE);
                (None, 0)
            }
            Some(policy) => {
                let revision = Revision {
                    name: format!("bench-{scenario}"),
                    percent: 1,
                    policy,
                    throttle: Duration::ZERO,
                    report_dir: None,
                };
                let began = Instant::now();
                let summary = crate::batch::run(&pool, &BatchLock::Db, &revision)?;
                (Some(began.elapsed()), summary.skipped)
            }
        };
        stop.store(true, Ordering::Relaxed);
        let mut latencies = Vec::new();
        let mut conflicts = 0;
        for thread in online {
            let (mine, stale) = thread.join().map_err(|_| anyhow::anyhow!("an editor thread panicked"))??;
            latencies.extend(mine);
            conflicts += stale;
        }
        latencies.sort_unstable();
        results.push(Measured {
            scenario,
            run,
            skipped,
            saves: latencies.len(),
            conflicts,
            p50_ms: percentile_ms(&latencies, 50.0),
            p99_ms: percentile_ms(&latencies, 99.0),
        });
    }
    drop(pool);
    drop(scratch);
    Ok(results)
}

/// `products` products and the staff member who edits them online.
fn prepare(pool: &DbPool, products: usize) -> anyhow::Result<i64> {
    let mut conn = pool.get()?;
    conn.batch_execute(
        "INSERT INTO users (username, display_name, password_hash, role) VALUES ('editor', 'editor', '-', 'staff')",
    )?;
    let editor = db::last_insert_id(&mut conn)?;
    for chunk in (0..products).collect::<Vec<_>>().chunks(500) {
        let rows: Vec<String> =
            chunk.iter().map(|i| format!("('BATCH-{i}', 'Product {i}', '', 1000)")).collect();
        conn.batch_execute(&format!(
            "INSERT INTO products (sku, name, description, price_cents) VALUES {}",
            rows.join(",")
        ))?;
    }
    Ok(editor)
}

/// An online editor: open a product (its version), save a new description, again and again.
/// Returns each save's latency and how many were stale (the conflict screen).
fn edit_until(
    pool: &DbPool,
    editor: i64,
    ids: &[i64],
    seed: usize,
    stop: &AtomicBool,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let mut conn = pool.get()?;
    let (mut latencies, mut stale) = (Vec::new(), 0);
    let mut next = seed * 7919;
    while !stop.load(Ordering::Relaxed) {
        next = (next + 104_729) % ids.len();
        let id = ids[next];
        let opened = edit::find(&mut conn, id)?.product;
        let changes = ProductChanges::parse(&opened.name, &format!("edited {next}"), opened.price_cents)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let began = Instant::now();
        match edit::save(&mut conn, id, opened.version, &changes, editor) {
            Ok(_) => {}
            Err(CatalogError::Stale(_)) => stale += 1,
            Err(e) => return Err(e.into()),
        }
        latencies.push(began.elapsed());
    }
    Ok((latencies, stale))
}

pub fn report(results: &[Measured], products: usize, editors: usize) -> String {
    let mut out = format!(
        "{editors} online editors saving products while a price revision runs over {products} products\n\
         scenario  | batch run | left by it | online saves | conflicts | p50 ms | p99 ms\n"
    );
    for m in results {
        let run = m.run.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
        out.push_str(&format!(
            "{:<9} | {:>9} | {:>10} | {:>12} | {:>9} | {:>6.2} | {:>6.2}\n",
            m.scenario, run, m.skipped, m.saves, m.conflicts, m.p50_ms, m.p99_ms
        ));
    }
    out
}
