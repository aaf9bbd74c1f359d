//! `haita bench`: what the app's code costs on top of the locking itself, measured against the
//! same statements issued by hand from the same process, each in a scratch database of its own.
//!
//! - `history.rs`: a database shaped like a real site's (`--data realistic`, the default), on
//!   which `bookings` and `coalescing` book; `cookies.rs` seals its users' sessions;
//! - `bookings.rs`: the booking strategies, through HTTP (to a separate server process,
//!   `server.rs`) and as raw SQL; with `--stays`, `stays.rs`: stays of several nights under a
//!   named lock per night against PostgreSQL's exclusion constraint;
//! - `orders.rs`: a hot product, orders coalesced against one at a time and the raw
//!   `FOR UPDATE`, in process; hot against spread through HTTP;
//! - `coalescing.rs`: one hot day, bookings one at a time against coalesced batches;
//! - `stuck.rs`: one day's lock held by a stuck session, and what everything else waits;
//! - `metrics.rs`: what recording the lock metrics costs a booking, on against off;
//! - `batch.rs`: online product saves beside a price revision, per policy, against none;
//! - `closure.rs`: bookings and resource saves beside a maintenance closure, per policy.

pub mod batch;
pub mod bookings;
pub mod closure;
pub mod coalescing;
pub mod cookies;
pub mod history;
pub mod metrics;
pub mod orders;
pub mod server;
pub mod stays;
pub mod stuck;
pub mod wrk;

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{Text, Untyped};

use crate::db::{DbPool, Engine, cached_sql};

/// The statements and commits a server has run since it started (`SHOW GLOBAL STATUS`): every
/// client's, so a bench that reads them wants a quiet server. PostgreSQL keeps no such count
/// without an extension: there the three are `None`, and the tables say `n/a`
/// ([`NOT_COUNTED_ON_POSTGRES`]).
pub struct ServerCounters {
    /// `Questions`: every statement clients sent, prepared executions included (not the
    /// prepares and closes themselves).
    pub statements: Option<u64>,
    /// `Com_commit`: explicit commits.
    pub commits: Option<u64>,
    /// `Com_stmt_prepare`: statements prepared (zero in steady state when every one is cached).
    pub prepares: Option<u64>,
    /// CPU time of the database server's processes, when they run on this machine
    /// ([`LocalServer`]); `None` for a server elsewhere. On a machine shared by the database,
    /// the app and the load generator, this is the part of each answer's CPU that is the same
    /// on every path.
    pub cpu: Option<Duration>,
}

/// Why the server's statement, prepare and commit counts are `n/a` on PostgreSQL, for the
/// benches' headers. Statements are counted only by the `pg_stat_statements` extension, which
/// a server need not have; `pg_stat_database.xact_commit` counts commits, but a backend reports
/// its counts at most once a second, and one idle since then up to 10 s later, so the count read
/// right after a run of a few seconds would miss part of it.
pub const NOT_COUNTED_ON_POSTGRES: &str = "statements, prepares and commits (stmts, prep, commit) are n/a \
     on PostgreSQL: it counts statements only with the pg_stat_statements extension, and \
     pg_stat_database reports commits up to 10 s late";

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

impl ServerCounters {
    pub fn read(pool: &DbPool) -> anyhow::Result<Self> {
        let cpu = LocalServer::find(pool).map(|server| server.cpu());
        if pool.engine() == Engine::Postgres {
            return Ok(Self { statements: None, commits: None, prepares: None, cpu });
        }
        let rows: Vec<Status> = cached_sql::<Untyped>(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Com_stmt_prepare')",
        )
        .load(&mut *pool.get()?)?;
        let value =
            |name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.value.parse::<u64>().ok());
        Ok(Self {
            statements: Some(value("Questions").unwrap_or(0)),
            commits: Some(value("Com_commit").unwrap_or(0)),
            prepares: Some(value("Com_stmt_prepare").unwrap_or(0)),
            cpu,
        })
    }

    /// What was run between `earlier` and this reading.
    pub fn since(&self, earlier: &Self) -> Self {
        let delta =
            |now: Option<u64>, then: Option<u64>| now.zip(then).map(|(now, then)| now.saturating_sub(then));
        Self {
            statements: delta(self.statements, earlier.statements),
            commits: delta(self.commits, earlier.commits),
            prepares: delta(self.prepares, earlier.prepares),
            cpu: self.cpu.zip(earlier.cpu).map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

/// The database server's processes, when they run on this machine.
enum LocalServer {
    /// MariaDB or MySQL: one process, the one its pid file names.
    Mysqld(u32),
    /// PostgreSQL: the postmaster and its children, a backend process per session. The CPU of a
    /// backend that has exited is in the postmaster's time for its children, once it has
    /// waited for it.
    Postmaster(u32),
}

#[derive(QueryableByName)]
struct PidFile {
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    pid_file: Option<String>,
}

impl LocalServer {
    /// The server of `pool`, if it runs here. For MySQL, the process its pid file names,
    /// provided that is a MariaDB or MySQL server (a pid file of another machine's server could
    /// name any process here, or none). For PostgreSQL, the parent of this session's backend
    /// process, provided both are `postgres` processes of this machine (reading the server's
    /// data directory, where its pid file is, takes privileges the app need not have).
    fn find(pool: &DbPool) -> Option<Self> {
        let mut conn = pool.get().ok()?;
        match pool.engine() {
            Engine::Mysql => {
                let found: PidFile =
                    cached_sql::<Untyped>("SELECT @@pid_file AS pid_file").get_result(&mut *conn).ok()?;
                let pid: u32 = std::fs::read_to_string(found.pid_file?).ok()?.trim().parse().ok()?;
                matches!(command_of(pid)?.as_str(), "mariadbd" | "mysqld").then_some(Self::Mysqld(pid))
            }
            Engine::Postgres => {
                let backend = u32::try_from(conn.dialect().session_id(&mut conn).ok()?).ok()?;
                let postmaster = parent_of(backend)?;
                (command_of(backend)? == "postgres" && command_of(postmaster)? == "postgres")
                    .then_some(Self::Postmaster(postmaster))
            }
        }
    }

    /// CPU time (user + system) the server has used so far.
    fn cpu(&self) -> Duration {
        match *self {
            Self::Mysqld(pid) => process_cpu(&format!("/proc/{pid}/stat")),
            Self::Postmaster(pid) => {
                let stat = |pid: u32| format!("/proc/{pid}/stat");
                let children: Duration = std::fs::read_dir("/proc")
                    .into_iter()
                    .flatten()
                    .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|&child| parent_of(child) == Some(pid))
                    .map(|child| process_cpu(&stat(child)))
                    .sum();
                process_cpu(&stat(pid)) + stat_cpu(&stat(pid), 13) + children
            }
        }
    }
}

/// The command name of process `pid` on this machine.
fn command_of(pid: u32) -> Option<String> {
    Some(std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string())
}

/// The parent of process `pid` on this machine: the second field after the command name.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
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
