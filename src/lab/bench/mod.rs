//! `haita bench`: what the app's code costs on top of the locking itself, measured against the
//! same statements issued by hand from the same process, each in a scratch database of its own.
//!
//! - `bookings.rs`: the booking strategies, through HTTP (to a separate server process,
//!   `server.rs`) and as raw SQL;
//! - `orders.rs`: the order path, through the service and as hand-written SQL;
//! - `coalescing.rs`: one hot day, bookings one at a time against coalesced batches;
//! - `stuck.rs`: one day's lock held by a stuck session, and what everything else waits;
//! - `metrics.rs`: what recording the lock metrics costs a booking, on against off;
//! - `batch.rs`: online product saves beside a price revision, per policy, against none;
//! - `closure.rs`: bookings and resource saves beside a maintenance closure, per policy.

pub mod batch;
pub mod bookings;
pub mod closure;
pub mod coalescing;
pub mod metrics;
pub mod orders;
pub mod server;
pub mod stuck;
pub mod wrk;

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
    /// `Com_stmt_prepare`: statements prepared (zero in steady state when every one is cached).
    pub prepares: u64,
    /// CPU time of the database server's process, when it runs on this machine (its pid file
    /// names a live `mariadbd` or `mysqld` here); `None` for a server elsewhere. On a machine
    /// shared by the database, the app and the load generator, this is the part of each
    /// answer's CPU that is the same on every path.
    pub cpu: Option<std::time::Duration>,
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
        let rows: Vec<Status> = diesel::sql_query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Com_stmt_prepare')",
        )
        .load(&mut *pool.get()?)?;
        let value =
            |name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.value.parse::<u64>().ok());
        Ok(Self {
            statements: value("Questions").unwrap_or(0),
            commits: value("Com_commit").unwrap_or(0),
            prepares: value("Com_stmt_prepare").unwrap_or(0),
            cpu: local_server_stat(pool).map(|stat| process_cpu(&stat)),
        })
    }

    /// What was run between `earlier` and this reading.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            statements: self.statements.saturating_sub(earlier.statements),
            commits: self.commits.saturating_sub(earlier.commits),
            prepares: self.prepares.saturating_sub(earlier.prepares),
            cpu: self.cpu.zip(earlier.cpu).map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

#[derive(QueryableByName)]
struct PidFile {
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    pid_file: Option<String>,
}

/// The `/proc` stat file of the database server, if it runs on this machine: the process its
/// pid file names, provided that is a MariaDB or MySQL server (a pid file of another machine's
/// server could name any process here, or none).
fn local_server_stat(pool: &DbPool) -> Option<String> {
    let mut conn = pool.get().ok()?;
    let found: PidFile = diesel::sql_query("SELECT @@pid_file AS pid_file").get_result(&mut *conn).ok()?;
    let pid: u32 = std::fs::read_to_string(found.pid_file?).ok()?.trim().parse().ok()?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    matches!(command.trim(), "mariadbd" | "mysqld").then(|| format!("/proc/{pid}/stat"))
}

/// CPU time (user + system) of the process whose `stat` file is `path` (`utime` and `stime`,
/// its 14th and 15th fields); zero where there is none.
pub fn process_cpu(path: &str) -> std::time::Duration {
    stat_cpu(path, 11)
}

/// CPU time (user + system) of the children this process has waited for (`cutime` and `cstime`,
/// the 16th and 17th fields of `/proc/self/stat`): a child's CPU, once it has exited.
pub fn children_cpu() -> std::time::Duration {
    stat_cpu("/proc/self/stat", 13)
}

/// Two clock-tick fields of a `/proc/<pid>/stat` file, summed: `skip` fields after the
/// parenthesised command name (which may itself hold spaces).
fn stat_cpu(path: &str, skip: usize) -> std::time::Duration {
    let Ok(stat) = std::fs::read_to_string(path) else { return std::time::Duration::ZERO };
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 =
        after_name.split_whitespace().skip(skip).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    std::time::Duration::from_millis(ticks * 10) // USER_HZ is 100 on every Linux this runs on
}
