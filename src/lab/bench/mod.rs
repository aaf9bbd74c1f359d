//! `haita bench`: what the app's code costs on top of the locking itself, measured against the
//! same statements issued by hand from the same process, each in a scratch database of its own.
//!
//! - `bookings.rs`: the booking strategies, through HTTP and as raw SQL;
//! - `orders.rs`: the order path, through the service and as hand-written SQL;
//! - `coalescing.rs`: one hot day, bookings one at a time against coalesced batches;
//! - `stuck.rs`: one day's lock held by a stuck session, and what everything else waits.

pub mod bookings;
pub mod coalescing;
pub mod orders;
pub mod stuck;

use diesel::prelude::*;
use diesel::sql_types::Text;

use crate::db::DbPool;

/// The statements and commits a server has run since it started (`SHOW GLOBAL STATUS`): every
/// client's, so a bench that reads them wants a quiet server.
pub struct ServerCounters {
    /// `Questions`: every statement clients sent, prepared executions included (not the
    /// prepares and closes themselves).
    pub statements: u64,
    /// `Com_commit`: explicit commits.
    pub commits: u64,
}

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

impl ServerCounters {
    pub fn read(pool: &DbPool) -> anyhow::Result<Self> {
        let rows: Vec<Status> =
            diesel::sql_query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit')")
                .load(&mut *pool.get()?)?;
        let value =
            |name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.value.parse::<u64>().ok());
        Ok(Self { statements: value("Questions").unwrap_or(0), commits: value("Com_commit").unwrap_or(0) })
    }

    /// What was run between `earlier` and this reading.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            statements: self.statements.saturating_sub(earlier.statements),
            commits: self.commits.saturating_sub(earlier.commits),
        }
    }
}
