//! Environment → typed configuration, parsed once at start.
//!
//! Every variable is documented in `.env.example`; the defaults serve a local demo. A value that
//! is present but unparsable stops the program with a message naming the variable, rather than
//! silently falling back to a default the operator did not choose.

use std::num::NonZeroU32;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("configuration: {name}={value:?} is invalid: {reason}")]
pub struct ConfigError {
    name: &'static str,
    value: String,
    reason: String,
}

#[derive(Clone)]
pub struct Config {
    /// `mysql://user:password@host:port/database`.
    pub database_url: String,
    /// Address the HTTP server listens on; port 0 picks a free port (tests).
    pub bind: String,
    /// Upper bound of pooled connections. Every request that holds a named lock holds one of them
    /// for the whole locked section, so this also bounds how many locked sections run at once.
    pub pool_size: u32,
    /// How long a request waits for a pooled connection before answering 503 busy.
    pub pool_timeout: Duration,
    /// How long a request waits for a held named lock, queued in memory and then in `GET_LOCK`
    /// (`LOCK_WAIT_SECS`, whole seconds).
    pub lock_wait: Duration,
    /// How many sessions of this instance may wait in `GET_LOCK` at once (`LOCK_WAITERS_MAX`,
    /// default a quarter of the pool): past it a request for a held lock is refused at once, so
    /// waiting can never take the connections that other requests need.
    pub lock_waiters_max: usize,
    /// `innodb_lock_wait_timeout` set on every pooled connection: a stuck row lock becomes a
    /// fast, clean error instead of MySQL's default 50 s hang.
    pub row_lock_wait_secs: u32,
    /// Book a busy day's queued requests together, one lock and one commit per batch
    /// (`BOOKING_COALESCING`, default true; see `bookings::coalesce`).
    pub coalesce_bookings: bool,
    /// Record the lock metrics of `/metrics` and `/admin/metrics` (`METRICS`, default true).
    /// Off only to measure what recording them costs.
    pub metrics: bool,
    /// Password checks that may run at once (`HASHING_SLOTS`, default one per core).
    pub hashing_slots: usize,
    /// Login attempts per minute per username (`LOGIN_ATTEMPTS_PER_MINUTE`) and per client
    /// address (`LOGIN_ATTEMPTS_PER_MINUTE_PER_ADDRESS`); past them, 429 with Retry-After.
    pub login_attempts_per_username: NonZeroU32,
    pub login_attempts_per_address: NonZeroU32,
    /// Lifetime of a pessimistic edit lock without heartbeat.
    pub edit_lock_ttl: Duration,
    /// How a batch job makes sure only one instance runs it (`BATCH_LOCK=db|file`, default db;
    /// `file` needs `BATCH_LOCK_DIR`, a directory every instance shares).
    pub batch_lock: crate::batch::guard::BatchLock,
    /// Key that signs and encrypts session cookies. Required to serve, except in `DEMO_MODE`,
    /// where a missing one is generated (with a warning).
    pub session_key: Option<Vec<u8>>,
    /// Mark the session cookie `Secure` (serve over HTTPS).
    pub cookie_secure: bool,
    /// HTTP worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// Threads that run blocking work (diesel, lock waits, password hashing) for the whole
    /// instance (`BLOCKING_THREADS`, default `POOL_SIZE + HASHING_SLOTS`): a database task needs
    /// a pooled connection, so a thread beyond the pool's size could only wait for one; a
    /// password check needs no connection but holds a thread for its hashing slot.
    pub blocking_threads: usize,
    /// `DEMO_MODE=1` (which `scripts/dev run` sets): demo data, the demo accounts on the login
    /// page and the race demo exist, and a missing `SESSION_KEY` is generated. Off by default:
    /// a production deployment gets none of it, and must set `SESSION_KEY`.
    pub demo_mode: bool,
}

/// Everything but the secrets, so a logged or printed `Config` leaks neither the database
/// password nor the session key. The destructuring lists every field: a new one does not
/// compile until someone decides whether it may be shown.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            database_url,
            bind,
            pool_size,
            pool_timeout,
            lock_wait,
            lock_waiters_max,
            row_lock_wait_secs,
            coalesce_bookings,
            metrics,
            hashing_slots,
            login_attempts_per_username,
            login_attempts_per_address,
            edit_lock_ttl,
            batch_lock,
            session_key,
            cookie_secure,
            workers,
            blocking_threads,
            demo_mode,
        } = self;
        f.debug_struct("Config")
            .field("database_url", &crate::db::redact(database_url))
            .field("bind", bind)
            .field("pool_size", pool_size)
            .field("pool_timeout", pool_timeout)
            .field("lock_wait", lock_wait)
            .field("lock_waiters_max", lock_waiters_max)
            .field("row_lock_wait_secs", row_lock_wait_secs)
            .field("coalesce_bookings", coalesce_bookings)
            .field("metrics", metrics)
            .field("hashing_slots", hashing_slots)
            .field("login_attempts_per_username", login_attempts_per_username)
            .field("login_attempts_per_address", login_attempts_per_address)
            .field("edit_lock_ttl", edit_lock_ttl)
            .field("batch_lock", batch_lock)
            .field("session_key", &session_key.as_ref().map(|_| "[set, not shown]"))
            .field("cookie_secure", cookie_secure)
            .field("workers", workers)
            .field("blocking_threads", blocking_threads)
            .field("demo_mode", demo_mode)
            .finish()
    }
}

/// A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case).
/// `BATCH_LOCK` and, for `file`, `BATCH_LOCK_DIR` (which must be a directory now).
fn batch_lock() -> Result<crate::batch::guard::BatchLock, ConfigError> {
    use crate::batch::guard::BatchLock;
    match std::env::var("BATCH_LOCK").unwrap_or_default().trim().to_ascii_lowercase().as_str() {
        "" | "db" => Ok(BatchLock::Db),
        "file" => {
            let dir = std::env::var("BATCH_LOCK_DIR").unwrap_or_default();
            if dir.is_empty() || !std::path::Path::new(&dir).is_dir() {
                return Err(ConfigError {
                    name: "BATCH_LOCK_DIR",
                    value: dir,
                    reason: "BATCH_LOCK=file needs an existing directory every instance shares".into(),
                });
            }
            Ok(BatchLock::File(dir.into()))
        }
        other => {
            Err(ConfigError { name: "BATCH_LOCK", value: other.into(), reason: "use db or file".into() })
        }
    }
}

fn flag(name: &'static str, default: bool) -> Result<bool, ConfigError> {
    let Ok(value) = std::env::var(name) else { return Ok(default) };
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(ConfigError { name, value, reason: "use 1 or 0".into() }),
    }
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        let defaults = Self::for_database(
            std::env::var("DATABASE_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/haita".into()),
        );
        let demo_mode = flag("DEMO_MODE", false)?;
        let pool_size = pool_size_from_env(defaults.pool_size)?;
        let hashing_slots = parse("HASHING_SLOTS", defaults.hashing_slots, |v| (1..=256).contains(&v))?;
        Ok(Self {
            bind: std::env::var("BIND").unwrap_or(defaults.bind),
            pool_size,
            pool_timeout: secs("POOL_TIMEOUT_SECS", defaults.pool_timeout)?,
            lock_wait: secs("LOCK_WAIT_SECS", defaults.lock_wait)?,
            lock_waiters_max: match std::env::var("LOCK_WAITERS_MAX") {
                Ok(_) => parse("LOCK_WAITERS_MAX", 1usize, |v| (1..=1024).contains(&v))?,
                Err(_) => default_waiters_max(pool_size),
            },
            row_lock_wait_secs: parse("ROW_LOCK_WAIT_SECS", defaults.row_lock_wait_secs, |v| {
                (1..=3600).contains(&v)
            })?,
            // At least 5 s: the edit page beats every third of it, and a lock that expires
            // between two beats of a healthy page would be lost to the first passer-by.
            batch_lock: batch_lock()?,
            edit_lock_ttl: parse("EDIT_LOCK_TTL_SECS", defaults.edit_lock_ttl.as_secs(), |v| {
                (5..=86_400).contains(&v)
            })
            .map(Duration::from_secs)?,
            session_key: match std::env::var("SESSION_KEY") {
                Ok(key) if key.len() >= 64 => Some(key.into_bytes()),
                Ok(key) => {
                    return Err(ConfigError {
                        name: "SESSION_KEY",
                        value: "<hidden>".into(),
                        reason: format!(
                            "needs at least 64 characters, got {} (try `openssl rand -base64 64`)",
                            key.len()
                        ),
                    });
                }
                Err(_) => None,
            },
            // Outside a demo the app is served over HTTPS (behind a proxy that terminates TLS).
            cookie_secure: flag("COOKIE_SECURE", !demo_mode)?,
            demo_mode,
            coalesce_bookings: parse("BOOKING_COALESCING", defaults.coalesce_bookings, |_| true)?,
            metrics: flag("METRICS", defaults.metrics)?,
            hashing_slots,
            login_attempts_per_username: parse(
                "LOGIN_ATTEMPTS_PER_MINUTE",
                defaults.login_attempts_per_username,
                |_| true,
            )?,
            login_attempts_per_address: parse(
                "LOGIN_ATTEMPTS_PER_MINUTE_PER_ADDRESS",
                defaults.login_attempts_per_address,
                |_| true,
            )?,
            workers: match std::env::var("WORKERS") {
                Ok(_) => Some(parse("WORKERS", 1usize, |v| (1..=256).contains(&v))?),
                Err(_) => None,
            },
            blocking_threads: match std::env::var("BLOCKING_THREADS") {
                Ok(_) => parse("BLOCKING_THREADS", 1usize, |v| (1..=1024).contains(&v))?,
                Err(_) => default_blocking_threads(pool_size, hashing_slots),
            },
            database_url: defaults.database_url,
        })
    }

    /// Defaults for a given database: what the demo and the tests start from.
    pub fn for_database(database_url: impl Into<String>) -> Self {
        let hashing_slots = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Self {
            database_url: database_url.into(),
            bind: "127.0.0.1:8080".into(),
            pool_size: 16,
            pool_timeout: Duration::from_secs(5),
            lock_wait: Duration::from_secs(5),
            lock_waiters_max: default_waiters_max(16),
            row_lock_wait_secs: 5,
            edit_lock_ttl: Duration::from_secs(300),
            batch_lock: crate::batch::guard::BatchLock::Db,
            session_key: None,
            cookie_secure: false,
            coalesce_bookings: true,
            metrics: true,
            hashing_slots,
            login_attempts_per_username: NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN),
            login_attempts_per_address: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
            workers: None,
            blocking_threads: default_blocking_threads(16, hashing_slots),
            demo_mode: false,
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

fn pool_size_from_env(default: u32) -> Result<u32, ConfigError> {
    parse("POOL_SIZE", default, |v: u32| v >= 2)
}

fn parse<T>(name: &'static str, default: T, valid: impl Fn(T) -> bool) -> Result<T, ConfigError>
where
    T: std::str::FromStr + Copy + std::fmt::Display,
{
    let Ok(value) = std::env::var(name) else {
        return Ok(default);
    };
    match value.trim().parse::<T>() {
        Ok(parsed) if valid(parsed) => Ok(parsed),
        Ok(_) => Err(ConfigError { name, value, reason: "out of range".into() }),
        Err(_) => Err(ConfigError { name, value, reason: format!("expected a value like {default}") }),
    }
}

fn secs(name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
    parse(name, default.as_secs(), |v| (0..=86_400).contains(&v)).map(Duration::from_secs)
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
}
