//! Environment → typed configuration, parsed once at start.
//!
//! Every variable is declared once, in [`Env`]: its name, its default and what it does, as clap
//! reads them. `haita config` prints that list, and a test checks `.env.example` and
//! `docs/configuration.md` against it, so none of the three can name a variable the others do
//! not. The defaults serve a local demo. A value that is present but unparsable stops the program
//! with a message naming the variable, rather than silently falling back to a default the operator
//! did not choose.
//!
//! Over 500 lines with its tests, which take a third of it: the declarations are one list on
//! purpose, the list an operator reads.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {name}={value:?} is invalid: {reason}")]
    Invalid { name: String, value: String, reason: String },
    #[error("configuration: {name} is not set: {reason}")]
    Missing { name: &'static str, reason: &'static str },
}

/// The database of a local demo when `DATABASE_URL` is not set: the local server's `root`
/// without a password. Only in `DEMO_MODE`: a production start must name its database.
pub const DEMO_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/haita";

/// Which guard makes sure only one instance runs a batch job at a time (`BATCH_LOCK`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchLock {
    /// A named lock held by the run's session.
    Db,
    /// A lock file in this directory (`BATCH_LOCK_DIR`), which every instance shares.
    File(PathBuf),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BatchLockKind {
    Db,
    File,
}

/// What one customer may keep in checkout holds, and how often they may take one
/// (`crate::holds`): so that nobody can keep the stock from everyone else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldLimits {
    /// Units in live holds, all products together.
    pub units: u32,
    /// Products with a live hold.
    pub products: u32,
    /// Holds taken within any 60 seconds.
    pub per_minute: u32,
    /// After a hold of a product ends unused, before the same customer holds it again.
    pub cooldown: Duration,
    /// How long ended holds are kept.
    pub history: Duration,
}

/// The environment variables haita reads, one field each, named as the variable is.
#[derive(Parser, Debug)]
#[command(
    name = "haita",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true,
    about = "haita reads its configuration from these environment variables (flags are not read)."
)]
pub struct Env {
    /// mysql://user:password@host:port/database (MySQL 8.0+, MariaDB 10.6+), or postgres://… to
    /// run on PostgreSQL 15+. The database is created if it does not exist. Required unless
    /// DEMO_MODE=1, where it defaults to mysql://root@127.0.0.1:3306/haita (the local server's
    /// root without a password: a demo's account, never a production default).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Address the HTTP server listens on; port 0 picks a free port.
    #[arg(long, env = "BIND", default_value = "127.0.0.1:8080")]
    bind: String,
    /// What /admin/metrics calls this instance among the others on the same database (default:
    /// the host's name and the port it listens on, such as web-1:8080).
    #[arg(long, env = "INSTANCE_NAME")]
    instance_name: Option<String>,
    /// Pooled connections per instance. A request holding a named lock holds one for the whole
    /// locked section, so this also bounds how many locked sections run at once in an instance.
    #[arg(long, env = "POOL_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pool_size: u32,
    /// How long a request waits for a pooled connection before answering 503 busy (seconds).
    #[arg(long, env = "POOL_TIMEOUT_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pool_timeout_secs: u64,
    /// How long a request waits for a named lock held elsewhere, queued in memory and then at the
    /// server, before answering 503 busy (whole seconds).
    #[arg(long, env = "LOCK_WAIT_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    lock_wait_secs: u64,
    /// How many sessions of one instance may wait at the server for a named lock at once
    /// (default: a quarter of POOL_SIZE). Past it, a request for a lock held elsewhere is answered
    /// 503 busy at once, so waiting for one hot or stuck key never takes the connections other
    /// requests need.
    #[arg(long, env = "LOCK_WAITERS_MAX", value_parser = clap::value_parser!(u64).range(1..=1024))]
    lock_waiters_max: Option<u64>,
    /// The bound on every row-lock wait of a pooled session (innodb_lock_wait_timeout on MySQL,
    /// lock_timeout on PostgreSQL): a stuck row lock fails fast instead of MySQL's default 50 s.
    #[arg(long, env = "ROW_LOCK_WAIT_SECS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    row_lock_wait_secs: u32,
    /// Book the requests queued for one day together: one lock, one transaction and one commit
    /// per batch, each request answered as if alone.
    #[arg(long, env = "BOOKING_COALESCING", default_value_t = true, action = clap::ArgAction::Set, value_parser = flag)]
    booking_coalescing: bool,
    /// Place the single-line orders queued for one product together: one stock row lock, one
    /// transaction and one commit per batch, each order answered as if alone. Off: every order
    /// runs on its own.
    #[arg(long, env = "ORDER_COALESCING", default_value_t = true, action = clap::ArgAction::Set, value_parser = flag)]
    order_coalescing: bool,
    /// Record the lock metrics of /metrics and /admin/metrics; off only to measure what
    /// recording them costs.
    #[arg(long, env = "METRICS", default_value_t = true, action = clap::ArgAction::Set, value_parser = flag)]
    metrics: bool,
    /// At least 16 characters: /metrics answers only requests with `Authorization: Bearer` and
    /// this token. Unset, /metrics is served to anyone in DEMO_MODE and to nobody otherwise
    /// (404): pool saturation and lock waits help time an attack. Generate: openssl rand -hex 32
    #[arg(long, env = "METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Password checks (argon2) that may run at once (default: one per core). A login that finds
    /// no free slot within 5 s is answered 503 busy.
    #[arg(long, env = "HASHING_SLOTS", value_parser = clap::value_parser!(u64).range(1..=256))]
    hashing_slots: Option<u64>,
    /// Failed logins of one account from one client address (an IPv6 address counts as its /64)
    /// within LOGIN_FAILURE_WINDOW_SECS; past them that pair alone is answered 429 with
    /// Retry-After. Successful logins never count and clear the pair; other addresses are never
    /// refused for it. Counted in the database, so shared by every instance.
    #[arg(long, env = "LOGIN_FAILURES_PER_ADDRESS", default_value_t = NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN))]
    login_failures_per_address: NonZeroU32,
    /// Failed logins from one client address within LOGIN_FAILURE_WINDOW_SECS, whatever accounts
    /// they name (made-up ones included); past them every login from that address is answered 429
    /// with Retry-After, before any password is hashed.
    #[arg(long, env = "LOGIN_FAILURES_PER_CLIENT", default_value_t = NonZeroU32::new(100).unwrap_or(NonZeroU32::MIN))]
    login_failures_per_client: NonZeroU32,
    /// How long a failed login is remembered (seconds).
    #[arg(long, env = "LOGIN_FAILURE_WINDOW_SECS", default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    login_failure_window_secs: u64,
    /// Confirmed bookings of today or later one user may hold at once; past them a booking is
    /// answered 409 booking_quota until one is cancelled (or its day has passed). Counted under a
    /// lock of the user's row, so concurrent requests never overshoot it.
    #[arg(long, env = "MAX_FUTURE_BOOKINGS_PER_USER", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_future_bookings_per_user: u32,
    /// Orders one user may place within any 60 seconds; past them an order is answered 429
    /// order_rate with Retry-After. Counted under a lock of the user's row, so exactly.
    #[arg(long, env = "MAX_ORDERS_PER_MINUTE_PER_USER", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_orders_per_minute_per_user: u32,
    /// How long a checkout hold keeps units of a product aside for the customer who took it
    /// (minutes, 1 to 120); a client may ask for a shorter hold, never a longer one. Expiry is
    /// read from the database's clock, so every instance agrees on it.
    #[arg(long, env = "HOLD_MINUTES", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=120))]
    hold_minutes: u32,
    /// Units of all products one customer may keep in live checkout holds at once; past them a
    /// hold is answered 409 hold_limit until one is ordered, released or expired.
    #[arg(long, env = "MAX_HELD_UNITS_PER_USER", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_held_units_per_user: u32,
    /// Products one customer may hold at once (one live hold each).
    #[arg(long, env = "MAX_HELD_PRODUCTS_PER_USER", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_held_products_per_user: u32,
    /// Holds one customer may take within any 60 seconds; past them 429 hold_rate with
    /// Retry-After.
    #[arg(long, env = "MAX_HOLDS_PER_MINUTE_PER_USER", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_holds_per_minute_per_user: u32,
    /// After a customer's hold of a product is released or runs out, how long before the same
    /// customer may hold that product again (seconds; 429 hold_cooldown with Retry-After
    /// meanwhile): the units get a turn with someone else. 0: no wait.
    #[arg(long, env = "HOLD_COOLDOWN_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    hold_cooldown_secs: u64,
    /// How long an ended hold stays as the customer's history before it is deleted (days).
    #[arg(long, env = "HOLD_HISTORY_DAYS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3650))]
    hold_history_days: u32,
    /// Comma-separated CIDRs of the proxies in front of the app (e.g. 10.0.0.0/8,::1/128). A
    /// request from one of them is counted against the right-most X-Forwarded-For address that
    /// is not a trusted proxy; any other request against its TCP peer, whatever it says. Empty:
    /// no proxy is trusted.
    #[arg(long, env = "TRUSTED_PROXIES", value_delimiter = ',', value_parser = cidr)]
    trusted_proxies: Vec<ipnet::IpNet>,
    /// Lifetime of a pessimistic edit lock without a heartbeat (seconds, at least 5: the edit
    /// page beats every third of it, and at least every 15 s, and a lock that expired between two
    /// beats of a healthy page would be lost to the first passer-by).
    #[arg(long, env = "EDIT_LOCK_TTL_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(5..=86_400))]
    edit_lock_ttl_secs: u64,
    /// How a batch job makes sure only one instance runs it: db, a named lock held by the run's
    /// session; file, a lock file in BATCH_LOCK_DIR.
    #[arg(long, env = "BATCH_LOCK", value_enum, default_value_t = BatchLockKind::Db, ignore_case = true)]
    batch_lock: BatchLockKind,
    /// The directory every instance shares, for BATCH_LOCK=file (its lock files and reports).
    #[arg(long, env = "BATCH_LOCK_DIR")]
    batch_lock_dir: Option<PathBuf>,
    /// At least 64 characters; signs and encrypts the session cookie. Required unless
    /// DEMO_MODE=1, where a missing one is generated. Generate: openssl rand -base64 64
    #[arg(long, env = "SESSION_KEY", hide_env_values = true)]
    session_key: Option<String>,
    /// Mark the session cookie Secure and send HSTS: the app is served over HTTPS (default on,
    /// off in DEMO_MODE); 0 only for plain HTTP on a trusted network.
    #[arg(long, env = "COOKIE_SECURE", value_parser = flag)]
    cookie_secure: Option<bool>,
    /// How long a client may take to send a request's body, from the end of its headers
    /// (seconds); a slower one is answered 408 and its connection closed, so a body sent a byte
    /// at a time cannot keep a connection open for ever. (The headers have 5 s, actix-web's own
    /// limit.)
    #[arg(long, env = "REQUEST_BODY_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    request_body_timeout_secs: u64,
    /// Client connections one instance keeps open at once; past them new connections wait in the
    /// kernel's backlog. Keep it well under the open-file limit (`ulimit -n`), which the pool and
    /// the log need too.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..=1_000_000))]
    max_connections: u64,
    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "WORKERS", value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: Option<u64>,
    /// Threads for blocking work (database, lock waits, password hashing) for the whole instance
    /// (default: POOL_SIZE + HASHING_SLOTS; a database thread beyond the pool's size could only
    /// wait for a connection).
    #[arg(long, env = "BLOCKING_THREADS", value_parser = clap::value_parser!(u64).range(1..=1024))]
    blocking_threads: Option<u64>,
    /// After SIGTERM or SIGINT, how long the instance goes on serving every request while /ready
    /// answers 503, so that the load balancer's health checks take it out of rotation before it
    /// stops accepting (seconds; at least the checks' interval times the failures they need). A
    /// second signal cuts it short. 0: stop accepting at once.
    #[arg(long, env = "DRAIN_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=3600))]
    drain_secs: u64,
    /// Once the instance stops accepting, how long it lets the requests in flight finish
    /// (seconds). Keep it above LOCK_WAIT_SECS + POOL_TIMEOUT_SECS, the longest a request waits
    /// for its lock and its connection, so that every request gets its own answer; a request
    /// still queued in memory for a lock shortly before it runs out is answered 503 draining,
    /// and at the end the connections left are closed.
    #[arg(long, env = "SHUTDOWN_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    shutdown_timeout_secs: u64,
    /// The lab only (the race demo, `haita bench`): the Redis server of the redis-lock
    /// strategies.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379", hide_env_values = true)]
    redis_url: String,
    /// The lab only: the directory of the file-lock strategy's lock files (default: haita-locks
    /// in the system's temporary directory).
    #[arg(long, env = "DEMO_LOCK_DIR")]
    demo_lock_dir: Option<PathBuf>,
    /// 1 for a local demo only: demo data and accounts (with their published passwords on the
    /// login page), the race demo, a generated session key, COOKIE_SECURE off. Unset in
    /// production.
    #[arg(long, env = "DEMO_MODE", default_value_t = false, action = clap::ArgAction::Set, value_parser = flag)]
    demo_mode: bool,
}

/// A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case). Set but
/// empty is no: `DEMO_MODE=` in a compose file switches the demo off, it does not stop the app.
fn flag(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err("use 1 or 0".into()),
    }
}

/// One CIDR of `TRUSTED_PROXIES`; a bare address is its own /32 or /128.
fn cidr(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| "not a CIDR such as 10.0.0.0/8 or an address".into())
}

impl Env {
    /// The process's environment, read once.
    fn read() -> Result<Self, ConfigError> {
        Self::try_parse_from(std::iter::empty::<String>()).map_err(|e| ConfigError::from_clap(&e))
    }

    /// The declared defaults alone, whatever the environment says: what tests and benchmarks
    /// start from.
    fn defaults() -> Self {
        let command = Self::command().mut_args(|arg| arg.env(None));
        let matches = command.get_matches_from(std::iter::empty::<String>());
        // Every default is declared above and parses: a failure here is a bug in this file.
        Self::from_arg_matches(&matches).unwrap_or_else(|e| panic!("the declared defaults must parse: {e}"))
    }

    /// Each variable as declared: its name, its default (empty: none, or computed) and what it
    /// does.
    pub fn variables() -> Vec<(String, String, String)> {
        Self::command()
            .get_arguments()
            .filter_map(|arg| {
                let name = arg.get_env()?.to_string_lossy().into_owned();
                let default = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(", ");
                let help = arg.get_long_help().or_else(|| arg.get_help()).map(ToString::to_string);
                Some((name, default, help.unwrap_or_default()))
            })
            .collect()
    }

    /// The list of variables as `haita config` prints it: name, default, what it does.
    pub fn help() -> String {
        let mut out = String::from("haita reads its configuration from these environment variables:\n");
        for (name, default, help) in Self::variables() {
            out.push('\n');
            out.push_str(&name);
            if !default.is_empty() {
                out.push_str(&format!(" (default: {default})"));
            }
            let mut line = String::from("   ");
            for word in help.split_whitespace() {
                if line.len() + word.len() > 96 {
                    out.push_str(&format!("\n{line}"));
                    line = String::from("   ");
                }
                line.push(' ');
                line.push_str(word);
            }
            out.push_str(&format!("\n{line}\n"));
        }
        out
    }
}

impl ConfigError {
    /// clap's complaint, said about the variable rather than the flag clap would name.
    fn from_clap(error: &clap::Error) -> Self {
        use clap::error::{ContextKind, ContextValue};
        let text = |kind| match error.get(kind) {
            Some(ContextValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        let flag = text(ContextKind::InvalidArg);
        let name = Env::command()
            .get_arguments()
            .find(|arg| arg.get_long().is_some_and(|long| flag.starts_with(&format!("--{long} "))))
            .and_then(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
            .unwrap_or(flag);
        let reason = std::error::Error::source(error)
            .map_or_else(|| error.kind().as_str().unwrap_or("not accepted").to_string(), ToString::to_string);
        Self::Invalid { name, value: text(ContextKind::InvalidValue), reason }
    }

    fn of(name: &str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { name: name.into(), value: value.into(), reason: reason.into() }
    }
}

#[derive(Clone)]
pub struct Config {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `BIND`.
    pub bind: String,
    /// `INSTANCE_NAME`; `None`: the host's name and the port (`crate::admin::instances`).
    pub instance_name: Option<String>,
    /// `POOL_SIZE`.
    pub pool_size: u32,
    /// `POOL_TIMEOUT_SECS`.
    pub pool_timeout: Duration,
    /// `LOCK_WAIT_SECS`.
    pub lock_wait: Duration,
    /// `LOCK_WAITERS_MAX`, default a quarter of the pool.
    pub lock_waiters_max: usize,
    /// `ROW_LOCK_WAIT_SECS`.
    pub row_lock_wait_secs: u32,
    /// `BOOKING_COALESCING` (see `bookings::coalesce`).
    pub coalesce_bookings: bool,
    /// `ORDER_COALESCING` (see `orders::coalesce`).
    pub coalesce_orders: bool,
    /// `METRICS`.
    pub metrics: bool,
    /// `METRICS_TOKEN`: the bearer token `/metrics` asks for; without one, `/metrics` is served
    /// only in `DEMO_MODE`.
    pub metrics_token: Option<String>,
    /// `HASHING_SLOTS`, default one per core.
    pub hashing_slots: usize,
    /// `LOGIN_FAILURES_PER_ADDRESS`: failed logins of one account from one address per window.
    pub login_failures: NonZeroU32,
    /// `LOGIN_FAILURES_PER_CLIENT`: failed logins from one address per window, any account.
    pub login_failures_per_client: NonZeroU32,
    /// `LOGIN_FAILURE_WINDOW_SECS`.
    pub login_failure_window: Duration,
    /// `MAX_FUTURE_BOOKINGS_PER_USER`: confirmed bookings of today or later per user.
    pub max_future_bookings: u32,
    /// `MAX_ORDERS_PER_MINUTE_PER_USER`: orders per user within any 60 seconds.
    pub max_orders_per_minute: u32,
    /// `HOLD_MINUTES`: the longest a checkout hold lasts (`crate::holds`).
    pub hold_length: Duration,
    /// `MAX_HELD_UNITS_PER_USER`, `MAX_HELD_PRODUCTS_PER_USER`, `MAX_HOLDS_PER_MINUTE_PER_USER`,
    /// `HOLD_COOLDOWN_SECS`, `HOLD_HISTORY_DAYS`.
    pub hold_limits: HoldLimits,
    /// `TRUSTED_PROXIES`: whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// `EDIT_LOCK_TTL_SECS`.
    pub edit_lock_ttl: Duration,
    /// `BATCH_LOCK` and `BATCH_LOCK_DIR`.
    pub batch_lock: BatchLock,
    /// `SESSION_KEY`: required to serve, except in `DEMO_MODE`.
    pub session_key: Option<Vec<u8>>,
    /// `COOKIE_SECURE`, default on outside `DEMO_MODE`.
    pub cookie_secure: bool,
    /// `REQUEST_BODY_TIMEOUT_SECS`.
    pub request_body_timeout: Duration,
    /// `MAX_CONNECTIONS`, per instance.
    pub max_connections: usize,
    /// `WORKERS`; `None` = one per core.
    pub workers: Option<usize>,
    /// `BLOCKING_THREADS`, default `POOL_SIZE + HASHING_SLOTS`: a database task needs a pooled
    /// connection, so a thread beyond the pool's size could only wait for one; a password check
    /// needs no connection but holds a thread for its hashing slot.
    pub blocking_threads: usize,
    /// `DRAIN_SECS`: serving on after a stop signal, not ready (`crate::shutdown`).
    pub drain: Duration,
    /// `SHUTDOWN_TIMEOUT_SECS`: the requests in flight finish within it once accepting stopped.
    pub shutdown_timeout: Duration,
    /// `DEMO_MODE`: demo data, the demo accounts on the login page and the race demo exist, and
    /// a missing `SESSION_KEY` is generated. Off by default: a production deployment gets none of
    /// it, and must set `SESSION_KEY`.
    pub demo_mode: bool,
    /// `REDIS_URL` (the lab's redis-lock strategies).
    pub redis_url: String,
    /// `DEMO_LOCK_DIR` (the lab's file-lock strategy).
    pub demo_lock_dir: PathBuf,
}

/// Everything but the secrets, so a logged or printed `Config` leaks neither the database
/// password nor the session key. The destructuring lists every field: a new one does not
/// compile until someone decides whether it may be shown.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            database_url,
            bind,
            instance_name,
            pool_size,
            pool_timeout,
            lock_wait,
            lock_waiters_max,
            row_lock_wait_secs,
            coalesce_bookings,
            coalesce_orders,
            metrics,
            metrics_token,
            hashing_slots,
            login_failures,
            login_failures_per_client,
            login_failure_window,
            max_future_bookings,
            max_orders_per_minute,
            hold_length,
            hold_limits,
            trusted_proxies,
            edit_lock_ttl,
            batch_lock,
            session_key,
            cookie_secure,
            request_body_timeout,
            max_connections,
            workers,
            blocking_threads,
            drain,
            shutdown_timeout,
            demo_mode,
            redis_url,
            demo_lock_dir,
        } = self;
        f.debug_struct("Config")
            .field("database_url", &redact(database_url))
            .field("bind", bind)
            .field("instance_name", instance_name)
            .field("pool_size", pool_size)
            .field("pool_timeout", pool_timeout)
            .field("lock_wait", lock_wait)
            .field("lock_waiters_max", lock_waiters_max)
            .field("row_lock_wait_secs", row_lock_wait_secs)
            .field("coalesce_bookings", coalesce_bookings)
            .field("coalesce_orders", coalesce_orders)
            .field("metrics", metrics)
            .field("metrics_token", &metrics_token.as_ref().map(|_| "[set, not shown]"))
            .field("hashing_slots", hashing_slots)
            .field("login_failures", login_failures)
            .field("login_failures_per_client", login_failures_per_client)
            .field("login_failure_window", login_failure_window)
            .field("max_future_bookings", max_future_bookings)
            .field("max_orders_per_minute", max_orders_per_minute)
            .field("hold_length", hold_length)
            .field("hold_limits", hold_limits)
            .field("trusted_proxies", trusted_proxies)
            .field("edit_lock_ttl", edit_lock_ttl)
            .field("batch_lock", batch_lock)
            .field("session_key", &session_key.as_ref().map(|_| "[set, not shown]"))
            .field("cookie_secure", cookie_secure)
            .field("request_body_timeout", request_body_timeout)
            .field("max_connections", max_connections)
            .field("workers", workers)
            .field("blocking_threads", blocking_threads)
            .field("drain", drain)
            .field("shutdown_timeout", shutdown_timeout)
            .field("demo_mode", demo_mode)
            .field("redis_url", &redact(redis_url))
            .field("demo_lock_dir", demo_lock_dir)
            .finish()
    }
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::try_from(Env::read()?)
    }

    /// The declared defaults, for a given database: what the demo and the tests start from.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        let env = Env { database_url: Some(database_url.into()), ..Env::defaults() };
        let config = Self::try_from(env)
            .unwrap_or_else(|e| panic!("the declared defaults must make a configuration: {e}"));
        // Tests and benchmarks serve plain HTTP on the loopback.
        Self { cookie_secure: false, ..config }
    }
}

impl TryFrom<Env> for Config {
    type Error = ConfigError;

    fn try_from(env: Env) -> Result<Self, ConfigError> {
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let hashing_slots = env
            .hashing_slots
            .map_or_else(|| std::thread::available_parallelism().map_or(2, std::num::NonZero::get), size);
        let batch_lock = match (env.batch_lock, env.batch_lock_dir) {
            (BatchLockKind::Db, _) => BatchLock::Db,
            (BatchLockKind::File, Some(dir)) if dir.is_dir() => BatchLock::File(dir),
            (BatchLockKind::File, dir) => {
                return Err(ConfigError::of(
                    "BATCH_LOCK_DIR",
                    dir.map(|d| d.display().to_string()).unwrap_or_default(),
                    "BATCH_LOCK=file needs an existing directory every instance shares",
                ));
            }
        };
        let session_key = match env.session_key {
            Some(key) if key.len() < 64 => {
                return Err(ConfigError::of(
                    "SESSION_KEY",
                    "<hidden>",
                    format!(
                        "needs at least 64 characters, got {} (try `openssl rand -base64 64`)",
                        key.len()
                    ),
                ));
            }
            key => key.map(String::into_bytes),
        };
        let metrics_token = match env.metrics_token.filter(|token| !token.is_empty()) {
            Some(token) if token.len() < 16 => {
                return Err(ConfigError::of(
                    "METRICS_TOKEN",
                    "<hidden>",
                    format!("needs at least 16 characters, got {} (try `openssl rand -hex 32`)", token.len()),
                ));
            }
            token => token,
        };
        let database_url = match env.database_url.filter(|url| !url.is_empty()) {
            Some(url) => url,
            None if env.demo_mode => DEMO_DATABASE_URL.into(),
            None => {
                return Err(ConfigError::Missing {
                    name: "DATABASE_URL",
                    reason: "outside DEMO_MODE the app has no default database; set it to \
                             mysql://user:password@host:port/database (or postgres://…) for the \
                             app's own account",
                });
            }
        };
        Ok(Self {
            database_url,
            bind: env.bind,
            instance_name: env.instance_name.filter(|name| !name.trim().is_empty()),
            pool_size: env.pool_size,
            pool_timeout: Duration::from_secs(env.pool_timeout_secs),
            lock_wait: Duration::from_secs(env.lock_wait_secs),
            lock_waiters_max: env.lock_waiters_max.map_or_else(|| default_waiters_max(env.pool_size), size),
            row_lock_wait_secs: env.row_lock_wait_secs,
            coalesce_bookings: env.booking_coalescing,
            coalesce_orders: env.order_coalescing,
            metrics: env.metrics,
            metrics_token,
            hashing_slots,
            login_failures: env.login_failures_per_address,
            login_failures_per_client: env.login_failures_per_client,
            login_failure_window: Duration::from_secs(env.login_failure_window_secs),
            max_future_bookings: env.max_future_bookings_per_user,
            max_orders_per_minute: env.max_orders_per_minute_per_user,
            hold_length: Duration::from_secs(u64::from(env.hold_minutes) * 60),
            hold_limits: HoldLimits {
                units: env.max_held_units_per_user,
                products: env.max_held_products_per_user,
                per_minute: env.max_holds_per_minute_per_user,
                cooldown: Duration::from_secs(env.hold_cooldown_secs),
                history: Duration::from_secs(u64::from(env.hold_history_days) * 86_400),
            },
            trusted_proxies: env.trusted_proxies,
            edit_lock_ttl: Duration::from_secs(env.edit_lock_ttl_secs),
            batch_lock,
            session_key,
            // Outside a demo the app is served over HTTPS (behind a proxy that terminates TLS).
            cookie_secure: env.cookie_secure.unwrap_or(!env.demo_mode),
            request_body_timeout: Duration::from_secs(env.request_body_timeout_secs),
            max_connections: size(env.max_connections),
            workers: env.workers.map(size),
            blocking_threads: env
                .blocking_threads
                .map_or_else(|| default_blocking_threads(env.pool_size, hashing_slots), size),
            drain: Duration::from_secs(env.drain_secs),
            shutdown_timeout: Duration::from_secs(env.shutdown_timeout_secs),
            demo_mode: env.demo_mode,
            redis_url: env.redis_url,
            demo_lock_dir: env.demo_lock_dir.unwrap_or_else(|| std::env::temp_dir().join("haita-locks")),
        })
    }
}

/// The URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            // Only a URL that cannot have a password refuses one.
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        // Not a URL: nothing in it can be told apart as a password, so nothing of it is shown.
        Err(_) => "(not a URL)".into(),
    }
}

/// One thread per pooled connection and one per hashing slot.
pub fn default_blocking_threads(pool_size: u32, hashing_slots: usize) -> usize {
    usize::try_from(pool_size).unwrap_or(usize::MAX).saturating_add(hashing_slots)
}

/// A quarter of the pool, at least one.
pub fn default_waiters_max(pool_size: u32) -> usize {
    usize::try_from(pool_size / 4).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_password_and_the_session_key() {
        let config = Config {
            session_key: Some(b"0123456789abcdef-very-secret-session-key".to_vec()),
            ..Config::for_database("mysql://app:s3cr3t-pw@db:3306/haita")
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t-pw") && !shown.contains("very-secret"), "{shown}");
        assert!(
            shown.contains("mysql://app:***@db:3306/haita") && shown.contains("[set, not shown]"),
            "{shown}"
        );
    }

    /// The environment as a list of variables, parsed the way [`Env::read`] parses the real one.
    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let (declared, command) = (Env::command(), Env::command().mut_args(|arg| arg.env(None)));
        let mut args = Vec::new();
        for (name, value) in vars {
            let arg = declared
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == *name))
                .unwrap_or_else(|| panic!("{name} is not declared"));
            args.push(format!("--{}={value}", arg.get_long().unwrap_or_default()));
        }
        let env = command
            .try_get_matches_from(args)
            .and_then(|m| Env::from_arg_matches(&m))
            .map_err(|e| ConfigError::from_clap(&e))?;
        Config::try_from(env)
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_variable() {
        for (name, value, why) in [
            ("POOL_SIZE", "1", "2..=10000"),
            ("POOL_SIZE", "many", "invalid digit"),
            ("EDIT_LOCK_TTL_SECS", "4", "5..=86400"),
            ("HOLD_MINUTES", "0", "1..=120"),
            ("HOLD_MINUTES", "121", "1..=120"),
            ("METRICS", "maybe", "use 1 or 0"),
            ("BATCH_LOCK", "redis", "redis"),
        ] {
            let refused = parse(&[(name, value)]).expect_err(value).to_string();
            assert!(
                refused.starts_with(&format!("configuration: {name}=\"{value}\" is invalid")),
                "{refused}"
            );
            assert!(refused.contains(why), "{refused}");
        }
        let short = parse(&[("SESSION_KEY", "short")]).expect_err("short key").to_string();
        assert!(short.contains("SESSION_KEY") && short.contains("at least 64") && !short.contains("short\""));
        let short = parse(&[("METRICS_TOKEN", "short")]).expect_err("short token").to_string();
        assert!(short.contains("METRICS_TOKEN") && short.contains("at least 16"), "{short}");
        let no_dir = parse(&[("BATCH_LOCK", "file")]).expect_err("no dir").to_string();
        assert!(no_dir.contains("BATCH_LOCK_DIR"), "{no_dir}");
    }

    /// `NAME` of every line `NAME=…` or `#NAME=…` of `.env.example`.
    fn example_names() -> Vec<String> {
        include_str!("../.env.example")
            .lines()
            .filter_map(|line| line.trim_start_matches('#').split_once('='))
            .map(|(name, _)| name.to_string())
            .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
            .collect()
    }

    /// The first two cells of each row of the variables' table of a configuration page.
    fn documented(page: &str) -> Vec<(String, String)> {
        page.lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix("| `")?.split(" | ");
                let name = cells.next()?.trim_end_matches('`').to_string();
                Some((name, cells.next()?.to_string()))
            })
            .collect()
    }

    /// Read from the environment, but not haita's own: the log filter is `env_logger`'s.
    const NOT_OURS: &[&str] = &["RUST_LOG"];

    #[test]
    fn the_example_file_and_the_configuration_pages_list_exactly_the_declared_variables() {
        let declared = Env::variables();
        let mut names: Vec<String> = declared.iter().map(|(name, ..)| name.clone()).collect();
        names.extend(NOT_OURS.iter().map(ToString::to_string));
        names.sort();
        let mut example = example_names();
        example.sort();
        example.dedup();
        assert_eq!(example, names, ".env.example must list every variable of config::Env, and only those");
        for (page, text) in [
            ("docs/configuration.md", include_str!("../docs/configuration.md")),
            ("docs/ja/configuration.md", include_str!("../docs/ja/configuration.md")),
        ] {
            let rows = documented(text);
            let mut listed: Vec<String> = rows.iter().map(|(name, _)| name.clone()).collect();
            listed.sort();
            assert_eq!(listed, names, "{page} must have a row for every variable, and only those");
            for (name, default, _) in &declared {
                let cell = rows.iter().find(|(n, _)| n == name).map(|(_, d)| d.as_str()).unwrap_or_default();
                assert!(
                    default.is_empty() || cell.contains(&format!("`{default}`")),
                    "{page}: the default of {name} is `{default}`, the page says {cell}"
                );
            }
        }
    }

    #[test]
    fn every_variable_says_what_it_does() {
        for (name, _, help) in Env::variables() {
            assert!(help.len() > 20, "{name} needs a sentence of help");
        }
        assert!(Env::help().contains("POOL_SIZE (default: 16)"));
    }

    #[test]
    fn defaults_follow_from_what_was_set() {
        let config =
            parse(&[("POOL_SIZE", "40"), ("HASHING_SLOTS", "3"), ("DEMO_MODE", "1")]).expect("valid");
        assert_eq!((config.lock_waiters_max, config.blocking_threads), (10, 43));
        assert!(config.demo_mode && !config.cookie_secure, "a demo is served over plain HTTP");
        assert!(config.coalesce_bookings && config.coalesce_orders, "coalescing is on by default");
        let db = ("DATABASE_URL", "mysql://app:pw@db/haita");
        let production =
            parse(&[db, ("BOOKING_COALESCING", "false"), ("ORDER_COALESCING", "off"), ("BATCH_LOCK", "DB")])
                .expect("valid");
        let emptied =
            parse(&[db, ("DEMO_MODE", ""), ("METRICS", ""), ("COOKIE_SECURE", "Off")]).expect("valid");
        assert!(!emptied.demo_mode && !emptied.metrics && !emptied.cookie_secure, "set but empty is no");
        assert!(production.cookie_secure && !production.coalesce_bookings && !production.demo_mode);
        assert!(!production.coalesce_orders);
        assert_eq!(production.batch_lock, BatchLock::Db);
    }

    /// Outside a demo there is no default database: `root` without a password is a local
    /// demo's account, and a production start must say which database it means.
    #[test]
    fn outside_demo_mode_database_url_must_be_set() {
        let refused = parse(&[("SESSION_KEY", &"k".repeat(64))]).expect_err("no DATABASE_URL").to_string();
        assert!(refused.contains("DATABASE_URL") && refused.contains("DEMO_MODE"), "{refused}");
        let demo = parse(&[("DEMO_MODE", "1")]).expect("a demo has its default");
        assert_eq!(demo.database_url, "mysql://root@127.0.0.1:3306/haita");
        let given = parse(&[("DATABASE_URL", "mysql://app:pw@db/haita")]).expect("set");
        assert_eq!(given.database_url, "mysql://app:pw@db/haita");
    }

    #[test]
    fn passwords_are_redacted_in_messages() {
        assert_eq!(redact("mysql://haita:secret@h:1/db"), "mysql://haita:***@h:1/db");
        assert_eq!(redact("mysql://haita:s%2Fcr%40t@h:1/db?x=1"), "mysql://haita:***@h:1/db?x=1");
        assert_eq!(redact("mysql://root@h:1/db"), "mysql://root@h:1/db");
        assert_eq!(redact("not a url with secret"), "(not a URL)");
    }
}
