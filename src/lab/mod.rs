//! The lab: the double-booking demo (`/demo`, `haita demo race`), the benchmarks (`haita bench`)
//! and the demo data (`haita seed`, `serve --seed`).
//!
//! It is apart from the product, compiled only with the cargo feature `lab`, because none of it
//! is needed to take bookings or sell stock: two demo strategies are wrong on purpose, the benches
//! open pools and HTTP clients of their own, and the seed writes well-known passwords. A product
//! build has no demo route, no lab subcommand and no demo table: the lab's tables come from its
//! own migrations (`src/lab/migrations/`, schema in `schema.rs`), run by [`prepare`] only where
//! the demo runs.
//!
//! Built in is not switched on: the demo data (with its published passwords), the demo accounts
//! on the login page and the race demo exist only with `DEMO_MODE=1`, which `scripts/dev run`
//! sets. The benches work in scratch databases of their own and need no demo mode.

pub mod bench;
pub mod cli;
pub mod demo;
pub mod flash;
pub mod locks;
pub mod schema;
pub mod seed;
pub mod settings;
pub mod stats;

pub use settings::Settings;

use diesel_migrations::embed_migrations;

use crate::config::Config;
use crate::db::{self, DbPool};

/// Refuses `what` (a command that writes demo data) unless `DEMO_MODE=1`.
pub fn require_demo_mode(config: &Config, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.demo_mode,
        "`{what}` writes demo users with published passwords, and runs only with DEMO_MODE=1 \
         (`scripts/dev run` sets it); never on a production database"
    );
    Ok(())
}

/// The demo's tables. Their versions (`2026-11-23-0003xx`) are the ones they had when they were
/// product migrations, so a database that applied them then finds nothing pending now; the
/// product's migrations ignore these versions and these ignore the product's.
pub const MIGRATIONS: db::Migrations = db::Migrations {
    mysql: embed_migrations!("src/lab/migrations/mysql"),
    postgres: embed_migrations!("src/lab/migrations/postgres"),
};

/// Applies the lab's pending migrations, under the same named lock as the product's (see
/// [`crate::run_migrations`]). Call it after the product's migrations, on the database the demo or
/// a bench will use.
pub fn prepare(pool: &DbPool) -> anyhow::Result<Vec<String>> {
    let applied = crate::migrate(pool, MIGRATIONS)?;
    for migration in &applied {
        log::info!("applied lab migration {migration}");
    }
    Ok(applied)
}
