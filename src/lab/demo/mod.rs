//! The double-booking demo: the race made visible, and the fixes measured side by side.
//!
//! Every strategy books one throwaway resource of capacity 1 (`demo_resources`, a fresh row per
//! run) into `demo_bookings`, never the real `reservations`: two of them are wrong on purpose.
//!
//! - `no-lock` is the bug of docs/named-lock-check-then-insert.md: "check there is no booking,
//!   then insert", milliseconds apart, and both requests insert. A transaction alone does not help.
//! - `named-lock-pool-pitfall` is the bug of docs/named-lock-guard.md: GET_LOCK and RELEASE_LOCK
//!   (on PostgreSQL `pg_advisory_lock` and `pg_advisory_unlock`) on whatever pooled connection
//!   comes next. Locks leak, and a request that happens to get the holder's session walks
//!   straight through the lock.
//! - `named-lock` is the app's booking path (`src/bookings/service.rs`): the per-key queue, then
//!   the lock. `named-lock-coalesced` adds the app's hot-day batches (`src/bookings/coalesce.rs`),
//!   and `named-lock-unqueued` shows what the queue prevents: a hot day's waiters fill the pool
//!   and starve requests that need no lock (the race's bystander measures it).
//! - `parent-row-lock`, `unique-slot` and `serializable` are the other correct answers, each with
//!   its cost. `exclusion-constraint` needs no lock at all: its clients book stays of several
//!   nights, and PostgreSQL's exclusion constraint refuses one that overlaps another — on
//!   PostgreSQL only, for one place only.
//! - `redis-lock`, `file-lock` and `lock-table` lock outside the database's lock functions
//!   (`crate::lab::locks`); `redis-lock-expiring` shows a lease running out under a paused holder,
//!   and `redis-lock-fenced` the fencing token that makes the database refuse its late write.
//!
//! `strategies.rs` holds the fourteen, one function each; `lanes.rs` the queue and batches for
//! clients that are threads; `race.rs` runs many clients at once and
//! counts the damage *in the database*; `live.rs` shows a running race to everyone watching, on
//! any instance, and runs one race at a time across them;
//! `routes.rs` serves `/demo` and `/api/v1/demo/…`; `docs.rs` the docs the demo names, at
//! `/demo/docs/{name}`.

mod docs;
mod lanes;
mod live;
mod model;
mod race;
pub mod routes;
mod strategies;

// What the rest of the lab (the CLI, `bench bookings`) and the tests may use; the rest is the
// demo's own.
pub use lanes::Lanes;
pub use live::RaceBoard;
pub use race::{
    Bounds, KEEP_RACES, MAX_ATTEMPTS, MAX_CLIENTS, MAX_PAUSE_MS, MAX_RACE_CONNECTIONS, Progress, RaceReport,
    RaceSpec, StrategyResult, Tally, VISITOR_COOLDOWN, create_resource, run as run_race,
};
pub use strategies::{Answer, Attempt, Queue, Seen, Strategy, lock_name};

use crate::i18n::Lang;
use crate::infra::{Infra, infra_error};
use crate::lab::locks::redis::LeaseError;
use crate::lab::locks::table::LockRowError;
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("invalid {field}: {message}")]
    Invalid { field: &'static str, message: String },
    #[error("{0} runs only inside a race")]
    RaceOnly(Strategy),
    /// The strategy needs what this server does not have; `why` is the sentence's key.
    #[error("{}", Lang::En.t(.why))]
    Unavailable { strategy: Strategy, why: &'static str },
    #[error("a race is already running")]
    RaceRunning,
    #[error("another race only in {0} s")]
    CoolingDown(u64),
    #[error("race {0} not found")]
    RaceNotFound(i64),
    #[error("fully booked")]
    FullyBooked,
    #[error("demo resource {0} does not exist")]
    UnknownDemoResource(i64),
    #[error("demo resource {0} holds its maximum of bookings")]
    DemoResourceFull(i64),
    /// A lock was not granted in time: GET_LOCK answered 0, the pool had no free connection, or
    /// the deadlock retries ran out. The client would be told "busy, try again".
    #[error("busy: {0}")]
    Busy(String),
    /// The database refused a write: its fencing token was older than one already shown.
    #[error("the database refused the write of fencing token {0}: a newer lease holder exists")]
    FencedOff(i64),
    #[error(transparent)]
    Lease(#[from] crate::lab::locks::redis::LeaseError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
    #[error(transparent)]
    Infra(#[from] Infra),
}

impl DemoError {
    /// Whether a client would have been told to retry later (a bounded wait ran out), as
    /// opposed to a bug.
    pub fn is_busy(&self) -> bool {
        match self {
            Self::Busy(_) => true,
            Self::Lease(e) => matches!(e, LeaseError::TimedOut { .. }),
            Self::Infra(e) => e.is_busy(),
            _ => false,
        }
    }
}

answers! { DemoError {
    Invalid => UNPROCESSABLE_ENTITY "invalid_input",
    RaceOnly(s) if s.is_correct() => UNPROCESSABLE_ENTITY "race_only",
    RaceOnly => UNPROCESSABLE_ENTITY "unsafe_strategy",
    Unavailable => UNPROCESSABLE_ENTITY "strategy_unavailable",
    RaceRunning => CONFLICT "busy",
    CoolingDown => TOO_MANY_REQUESTS "too_many_races",
    RaceNotFound => NOT_FOUND "not_found",
    FullyBooked => CONFLICT "fully_booked",
    DemoResourceFull => CONFLICT "demo_resource_full",
    UnknownDemoResource => UNPROCESSABLE_ENTITY "unknown_resource",
    Busy => SERVICE_UNAVAILABLE "busy",
    FencedOff => CONFLICT "lease_lost",
    Lease(LeaseError::TimedOut { .. }) => SERVICE_UNAVAILABLE "busy",
    Lease => SERVICE_UNAVAILABLE "unavailable",
    Internal => INTERNAL_SERVER_ERROR "internal",
} carries { Infra } }

impl AsProblem for DemoError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Invalid { field, message } => answer
                .said("demo.err.invalid", &[("field", (*field).to_string()), ("message", message.clone())]),
            Self::RaceOnly(s) => answer.said(
                "demo.err.race_only",
                &[("strategy", s.to_string()), ("why", s.race_only().unwrap_or("").to_string())],
            ),
            Self::Unavailable { why, .. } => answer.said(why, &[]),
            Self::RaceRunning => Problem { retry_after: Some(5), ..answer.said("demo.err.running", &[]) },
            Self::CoolingDown(secs) => Problem {
                retry_after: Some(u32::try_from(*secs).unwrap_or(u32::MAX)),
                ..answer.said("demo.err.cooling", &[("secs", secs.to_string())])
            },
            Self::RaceNotFound(id) => answer.said("demo.err.no_race", &[("id", id.to_string())]),
            Self::FullyBooked => answer.said("demo.err.fully_booked", &[]),
            Self::DemoResourceFull(id) => answer.said(
                "demo.err.resource_full",
                &[("id", id.to_string()), ("max", routes::MAX_BOOKINGS_PER_DEMO_RESOURCE.to_string())],
            ),
            Self::UnknownDemoResource(id) => answer.said("demo.err.no_resource", &[("id", id.to_string())]),
            Self::Busy(_) | Self::Lease(LeaseError::TimedOut { .. }) => Problem::busy("demo.err.busy"),
            Self::FencedOff(_) => answer.said("demo.err.fenced_off", &[]),
            Self::Lease(LeaseError::Redis(_)) => {
                Problem { retry_after: Some(5), ..answer.said("demo.err.redis", &[]) }
            }
            Self::Infra(e) => e.problem(),
            Self::Internal(_) => Problem::internal(),
        }
    }
}
infra_error!(DemoError);

impl From<LockRowError> for DemoError {
    fn from(e: LockRowError) -> Self {
        match e {
            LockRowError::TimedOut { .. } => Self::Busy(e.to_string()),
            LockRowError::Infra(e) => Self::Infra(e),
        }
    }
}
