//! Environment → typed configuration, parsed once at start.
//!
//! Every variable is declared once, in the [`settings!`] list below: its name, its field and
//! type, its default, its bounds (its parser), what it does and whether it is a secret
//! ([`settings`] says how). `haita config` prints that list, and a test checks `.env.example`
//! and `docs/configuration.md` against it, so none of the three can name a variable the others
//! do not. The defaults serve a local demo. A value that is present but unparsable stops the
//! program with a message naming the variable, rather than silently falling back to a default
//! the operator did not choose. The lab's own variables are declared with the lab
//! (`lab::settings`): a build without it neither reads nor lists them.

mod settings;

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(all(test, feature = "lab"))]
pub(crate) use settings::listing;
pub(crate) use settings::settings;
pub use settings::{ConfigError, Mark, Shown, Variable, from_process, help, read, redact};
pub use settings::{cidrs, days, flag, minutes, number, one_of, optional, path, seconds, secret, text};

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

/// `BATCH_LOCK` as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchLockKind {
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

/// At least one.
fn at_least_one(text: Option<&str>) -> Result<NonZeroU32, String> {
    number(1..=u32::MAX)(text).map(|n| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

settings! {
    /// The app's settings, one field per environment variable.
    pub struct Config {
        /// 1 for a local demo only: demo data and accounts (with their published passwords on
        /// the login page), the race demo, a generated session key, COOKIE_SECURE off. Unset in
        /// production.
        demo_mode: bool = "DEMO_MODE" default "false" => flag,
        /// mysql://user:password@host:port/database (MySQL 8.0+, MariaDB 10.6+), or
        /// postgres://… to run on PostgreSQL 15+. The database is created if it does not exist.
        /// Required unless DEMO_MODE=1, where it defaults to mysql://root@127.0.0.1:3306/haita
        /// (the local server's root without a password: a demo's account, never a production
        /// default).
        database_url: String = "DATABASE_URL" [url]
            default_from if demo_mode { DEMO_DATABASE_URL.to_string() } else { String::new() } => text,
        /// Address the HTTP server listens on; port 0 picks a free port.
        bind: String = "BIND" default "127.0.0.1:8080" => text,
        /// What /admin/metrics calls this instance among the others on the same database
        /// (default: the host's name and the port it listens on, such as web-1:8080).
        instance_name: Option<String> = "INSTANCE_NAME" => optional(text),
        /// Pooled connections per instance. A request holding a named lock holds one for the
        /// whole locked section, so this also bounds how many locked sections run at once in an
        /// instance.
        pool_size: u32 = "POOL_SIZE" default "16" => number(2..=10_000),
        /// How long a request waits for a pooled connection before answering 503 busy (seconds).
        pool_timeout: Duration = "POOL_TIMEOUT_SECS" default "5" => seconds(0..=86_400),
        /// How long a request waits for a named lock held elsewhere, queued in memory and then
        /// at the server, before answering 503 busy (whole seconds).
        lock_wait: Duration = "LOCK_WAIT_SECS" default "5" => seconds(0..=86_400),
        /// How many sessions of one instance may wait at the server for a named lock at once
        /// (default: a quarter of POOL_SIZE). Past it, a request for a lock held elsewhere is
        /// answered 503 busy at once, so waiting for one hot or stuck key never takes the
        /// connections other requests need.
        lock_waiters_max: usize = "LOCK_WAITERS_MAX"
            default_from default_waiters_max(pool_size) => number(1..=1024),
        /// The bound on every row-lock wait of a pooled session (innodb_lock_wait_timeout on
        /// MySQL, lock_timeout on PostgreSQL): a stuck row lock fails fast instead of MySQL's
        /// default 50 s.
        row_lock_wait_secs: u32 = "ROW_LOCK_WAIT_SECS" default "5" => number(1..=3600),
        /// Book the requests queued for one day together: one lock, one transaction and one
        /// commit per batch, each request answered as if alone (`bookings::coalesce`).
        coalesce_bookings: bool = "BOOKING_COALESCING" default "true" => flag,
        /// Place the single-line orders queued for one product together: one stock row lock,
        /// one transaction and one commit per batch, each order answered as if alone
        /// (`orders::coalesce`). Off: every order runs on its own.
        coalesce_orders: bool = "ORDER_COALESCING" default "true" => flag,
        /// Record the lock metrics of /metrics and /admin/metrics; off only to measure what
        /// recording them costs.
        metrics: bool = "METRICS" default "true" => flag,
        /// At least 16 characters: /metrics answers only requests with `Authorization: Bearer`
        /// and this token. Unset, /metrics is served to anyone in DEMO_MODE and to nobody
        /// otherwise (404): pool saturation and lock waits help time an attack. Generate:
        /// openssl rand -hex 32
        metrics_token: Option<String> = "METRICS_TOKEN" [secret] => optional(secret(16, "openssl rand -hex 32")),
        /// Password checks (argon2) that may run at once (default: one per core). A login that
        /// finds no free slot within 5 s is answered 503 busy.
        hashing_slots: usize = "HASHING_SLOTS"
            default_from std::thread::available_parallelism().map_or(2, std::num::NonZero::get) => number(1..=256),
        /// Failed logins of one account from one client address (an IPv6 address counts as its
        /// /64) within LOGIN_FAILURE_WINDOW_SECS; past them that pair alone is answered 429 with
        /// Retry-After. Successful logins never count and clear the pair; other addresses are
        /// never refused for it. Counted in the database, so shared by every instance.
        login_failures: NonZeroU32 = "LOGIN_FAILURES_PER_ADDRESS" default "10" => at_least_one,
        /// Failed logins from one client address within LOGIN_FAILURE_WINDOW_SECS, whatever
        /// accounts they name (made-up ones included); past them every login from that address
        /// is answered 429 with Retry-After, before any password is hashed.
        login_failures_per_client: NonZeroU32 = "LOGIN_FAILURES_PER_CLIENT" default "100" => at_least_one,
        /// How long a failed login is remembered (seconds).
        login_failure_window: Duration = "LOGIN_FAILURE_WINDOW_SECS" default "900" => seconds(1..=86_400),
        /// Confirmed bookings of today or later one user may hold at once; past them a booking
        /// is answered 409 booking_quota until one is cancelled (or its day has passed). Counted
        /// under a lock of the user's row, so concurrent requests never overshoot it.
        max_future_bookings: u32 = "MAX_FUTURE_BOOKINGS_PER_USER" default "30" => number(1..=100_000),
        /// Orders one user may place within any 60 seconds; past them an order is answered 429
        /// order_rate with Retry-After. Counted under a lock of the user's row, so exactly.
        max_orders_per_minute: u32 = "MAX_ORDERS_PER_MINUTE_PER_USER" default "20" => number(1..=100_000),
        /// How long a checkout hold keeps units of a product aside for the customer who took it
        /// (minutes, 1 to 120); a client may ask for a shorter hold, never a longer one. Expiry
        /// is read from the database's clock, so every instance agrees on it.
        hold_length: Duration = "HOLD_MINUTES" default "10" => minutes(1..=120),
        /// Units of all products one customer may keep in live checkout holds at once; past
        /// them a hold is answered 409 hold_limit until one is ordered, released or expired.
        max_held_units: u32 = "MAX_HELD_UNITS_PER_USER" default "10" => number(1..=100_000),
        /// Products one customer may hold at once (one live hold each).
        max_held_products: u32 = "MAX_HELD_PRODUCTS_PER_USER" default "5" => number(1..=10_000),
        /// Holds one customer may take within any 60 seconds; past them 429 hold_rate with
        /// Retry-After.
        max_holds_per_minute: u32 = "MAX_HOLDS_PER_MINUTE_PER_USER" default "10" => number(1..=100_000),
        /// After a customer's hold of a product is released or runs out, how long before the
        /// same customer may hold that product again (seconds; 429 hold_cooldown with
        /// Retry-After meanwhile): the units get a turn with someone else. 0: no wait.
        hold_cooldown: Duration = "HOLD_COOLDOWN_SECS" default "60" => seconds(0..=86_400),
        /// How long an ended hold stays as the customer's history before it is deleted (days).
        hold_history: Duration = "HOLD_HISTORY_DAYS" default "30" => days(1..=3650),
        /// Comma-separated CIDRs of the proxies in front of the app (e.g. 10.0.0.0/8,::1/128).
        /// A request from one of them is counted against the right-most X-Forwarded-For address
        /// that is not a trusted proxy; any other request against its TCP peer, whatever it
        /// says. Empty: no proxy is trusted.
        trusted_proxies: Vec<ipnet::IpNet> = "TRUSTED_PROXIES" default "" => cidrs,
        /// Lifetime of a pessimistic edit lock without a heartbeat (seconds, at least 5: the
        /// edit page beats every third of it, and at least every 15 s, and a lock that expired
        /// between two beats of a healthy page would be lost to the first passer-by).
        edit_lock_ttl: Duration = "EDIT_LOCK_TTL_SECS" default "300" => seconds(5..=86_400),
        /// How a batch job makes sure only one instance runs it: db, a named lock held by the
        /// run's session; file, a lock file in BATCH_LOCK_DIR.
        batch_lock_kind: BatchLockKind = "BATCH_LOCK" default "db"
            => one_of(&[("db", BatchLockKind::Db), ("file", BatchLockKind::File)]),
        /// The directory every instance shares, for BATCH_LOCK=file (its lock files and
        /// reports).
        batch_lock_dir: Option<PathBuf> = "BATCH_LOCK_DIR" => optional(path),
        /// At least 64 characters; signs and encrypts the session cookie. Required unless
        /// DEMO_MODE=1, where a missing one is generated. Generate: openssl rand -base64 64
        session_key: Option<String> = "SESSION_KEY" [secret] => optional(secret(64, "openssl rand -base64 64")),
        /// Mark the session cookie Secure and send HSTS: the app is served over HTTPS (default
        /// on, off in DEMO_MODE); 0 only for plain HTTP on a trusted network.
        cookie_secure: bool = "COOKIE_SECURE" default_from !demo_mode => flag,
        /// How long a client may take to send a request's body, from the end of its headers
        /// (seconds); a slower one is answered 408 and its connection closed, so a body sent a
        /// byte at a time cannot keep a connection open for ever. (The headers have 5 s,
        /// actix-web's own limit.)
        request_body_timeout: Duration = "REQUEST_BODY_TIMEOUT_SECS" default "10" => seconds(1..=3600),
        /// Client connections one instance keeps open at once; past them new connections wait
        /// in the kernel's backlog. Keep it well under the open-file limit (`ulimit -n`), which
        /// the pool and the log need too.
        max_connections: usize = "MAX_CONNECTIONS" default "1024" => number(8..=1_000_000),
        /// HTTP worker threads (default: one per core).
        workers: Option<usize> = "WORKERS" => optional(number(1..=256)),
        /// Threads for blocking work (database, lock waits, password hashing) for the whole
        /// instance (default: POOL_SIZE + HASHING_SLOTS; a database thread beyond the pool's
        /// size could only wait for a connection).
        blocking_threads: usize = "BLOCKING_THREADS"
            default_from default_blocking_threads(pool_size, hashing_slots) => number(1..=1024),
        /// After SIGTERM or SIGINT, how long the instance goes on serving every request while
        /// /ready answers 503, so that the load balancer's health checks take it out of rotation
        /// before it stops accepting (seconds; at least the checks' interval times the failures
        /// they need). A second signal cuts it short. 0: stop accepting at once.
        drain: Duration = "DRAIN_SECS" default "5" => seconds(0..=3600),
        /// Once the instance stops accepting, how long it lets the requests in flight finish
        /// (seconds). Keep it above LOCK_WAIT_SECS + POOL_TIMEOUT_SECS, the longest a request
        /// waits for its lock and its connection, so that every request gets its own answer; a
        /// request still queued in memory for a lock shortly before it runs out is answered 503
        /// draining, and at the end the connections left are closed.
        shutdown_timeout: Duration = "SHUTDOWN_TIMEOUT_SECS" default "30" => seconds(1..=3600),
    }
}

impl Config {
    /// The process's environment, read once and checked.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read_with(from_process)?.checked()
    }

    /// The declared defaults, for a given database: what the demo and the tests start from.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        let url = database_url.into();
        let config = Self::read_with(|name| (name == "DATABASE_URL").then(|| url.clone()))
            .and_then(Self::checked)
            .unwrap_or_else(|e| panic!("the declared defaults must make a configuration: {e}"));
        // Tests and benchmarks serve plain HTTP on the loopback.
        Self { cookie_secure: false, ..config }
    }

    /// What one variable alone cannot say: a production start names its database, and a file
    /// lock names its directory.
    fn checked(self) -> Result<Self, ConfigError> {
        if self.batch_lock_kind == BatchLockKind::File
            && !self.batch_lock_dir.as_ref().is_some_and(|d| d.is_dir())
        {
            return Err(ConfigError::of(
                "BATCH_LOCK_DIR",
                self.batch_lock_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
                "BATCH_LOCK=file needs an existing directory every instance shares",
            ));
        }
        if self.database_url.is_empty() {
            return Err(ConfigError::Missing {
                name: "DATABASE_URL",
                reason: "outside DEMO_MODE the app has no default database; set it to \
                         mysql://user:password@host:port/database (or postgres://…) for the \
                         app's own account",
            });
        }
        Ok(self)
    }

    /// `BATCH_LOCK` and `BATCH_LOCK_DIR`, together.
    pub fn batch_lock(&self) -> BatchLock {
        match (&self.batch_lock_kind, &self.batch_lock_dir) {
            (BatchLockKind::File, Some(dir)) => BatchLock::File(dir.clone()),
            _ => BatchLock::Db,
        }
    }

    /// The hold limits, together (`crate::holds`).
    pub fn hold_limits(&self) -> HoldLimits {
        HoldLimits {
            units: self.max_held_units,
            products: self.max_held_products,
            per_minute: self.max_holds_per_minute,
            cooldown: self.hold_cooldown,
            history: self.hold_history,
        }
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
            session_key: Some("0123456789abcdef-very-secret-session-key".into()),
            ..Config::for_database("mysql://app:s3cr3t-pw@db:3306/haita")
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t-pw") && !shown.contains("very-secret"), "{shown}");
        assert!(
            shown.contains("mysql://app:***@db:3306/haita") && shown.contains("session_key: [not shown]"),
            "{shown}"
        );
    }

    /// The environment as a list of variables, read and checked as [`Config::from_env`] reads
    /// the real one.
    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        for (name, _) in vars {
            assert!(Config::VARIABLES.iter().any(|v| v.name == *name), "{name} is not declared");
        }
        let lookup = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_string());
        Config::read_with(lookup)?.checked()
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_variable() {
        for (name, value, why) in [
            ("POOL_SIZE", "1", "2..=10000"),
            ("POOL_SIZE", "many", "invalid digit"),
            ("TRUSTED_PROXIES", "10.0.0.0/8,nowhere", "\"nowhere\" is not a CIDR"),
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

    /// Read from the environment, but not haita's own: the log filter is `env_logger`'s.
    const NOT_OURS: &[&str] = &["RUST_LOG"];

    #[test]
    fn the_example_file_and_the_configuration_pages_list_exactly_the_declared_variables() {
        settings::listing::check(Config::VARIABLES, NOT_OURS, settings::listing::Part::App);
    }

    #[test]
    fn every_variable_says_what_it_does() {
        for variable in Config::VARIABLES {
            assert!(variable.help.len() > 20, "{} needs a sentence of help", variable.name);
        }
        assert!(help(Config::VARIABLES).contains("POOL_SIZE (default: 16)"));
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
        assert_eq!(production.batch_lock(), BatchLock::Db);
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
