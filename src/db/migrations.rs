//! The schema's history, written once per engine.

use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use super::conn::DbConn;

/// A set of migrations, written once per engine with the same versions (`migrations/mysql/`,
/// `migrations/postgres/`): each engine's DDL in its own words, one history.
pub struct Migrations {
    pub mysql: EmbeddedMigrations,
    pub postgres: EmbeddedMigrations,
}

impl Migrations {
    /// Runs the migrations of this set that `conn`'s database has not seen yet, and names them.
    /// Several sets may share a database (the lab has its own): diesel skips the versions a set
    /// does not contain. The caller holds the migration lock (`haita::migrate`): MySQL DDL is
    /// not transactional, so two instances must not run the same change at once.
    pub fn apply(self, conn: &mut DbConn) -> anyhow::Result<Vec<String>> {
        let set = conn.engine().pick(self.mysql, self.postgres);
        let applied =
            conn.run_pending_migrations(set).map_err(|e| anyhow::anyhow!("migration failed: {e}"))?;
        Ok(applied.iter().map(ToString::to_string).collect())
    }
}

pub const MIGRATIONS: Migrations = Migrations {
    mysql: embed_migrations!("migrations/mysql"),
    postgres: embed_migrations!("migrations/postgres"),
};
