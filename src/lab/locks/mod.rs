//! Locks that live outside the database's own lock functions, for the demo and the benchmarks to
//! set beside `GET_LOCK` (PostgreSQL's advisory locks): each gives a weaker or a differently shaped guarantee, and the race
//! shows which.
//!
//! - [`redis::Lease`]: `SET key token NX PX ttl` in Redis. Exclusive **for at most the TTL**, then
//!   it is anybody's, whether or not its holder has finished. Released only by its holder (the
//!   token is checked in the server). A [`redis::Lease::fencing_token`] lets the database refuse
//!   the writes of a holder whose lease ran out.
//! - [`file::FileLock`]: `flock` on a file. Exclusive while the file is open, on one host; the
//!   kernel frees it when the holding process dies, so it needs no expiry.
//! - [`table::LockRow`]: a row whose primary key is the lock name, with an owner and an expiry
//!   judged by the database's clock. Works wherever the database does, no extra server.
//!
//! None of them waits inside a server: each asks, and while the lock is held elsewhere sleeps a
//! few random milliseconds holding nothing (no pooled connection), until its wait is spent.

pub mod file;
pub mod redis;
pub mod table;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;

/// Where the demo's outside locks are kept: a Redis server and a directory for lock files.
pub struct OutsideLocks {
    pub redis: redis::RedisLocks,
    pub dir: PathBuf,
}

impl OutsideLocks {
    /// From `REDIS_URL` and `DEMO_LOCK_DIR` (`lab::settings`). Nothing is contacted yet.
    pub fn from_settings(settings: &crate::lab::Settings) -> anyhow::Result<Self> {
        Self::in_dir(settings, settings.demo_lock_dir.clone())
    }

    /// From `REDIS_URL`, with the lock files in `dir`.
    pub fn in_dir(settings: &crate::lab::Settings, dir: PathBuf) -> anyhow::Result<Self> {
        Ok(Self { redis: redis::RedisLocks::new(&settings.redis_url)?, dir })
    }
}

/// Asks `try_once` until it says yes or `wait` is spent, sleeping 1–8 ms (random, so that the
/// waiters of one lock do not ask in step) between two asks, holding nothing meanwhile. `None`:
/// the wait ran out.
fn poll<T, E>(wait: Duration, mut try_once: impl FnMut() -> Result<Option<T>, E>) -> Result<Option<T>, E> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(held) = try_once()? {
            return Ok(Some(held));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        std::thread::sleep(left.min(Duration::from_micros(rand::rng().random_range(1_000..8_000))));
    }
}

/// A random token naming one holder (128 bits), so a release can tell its own lock from the
/// lock of whoever held it after.
fn token() -> String {
    crate::idempotency::IdempotencyKey::fresh()
}
