//! A lease in Redis: `SET key token NX PX ttl`, released only by its holder.
//!
//! What it guarantees, and what it does not:
//!
//! - **Exclusive for at most the TTL.** Redis deletes the key when the TTL runs out, whether or
//!   not the holder has finished. A holder that pauses longer (a GC pause, a swapped-out VM, a
//!   slow disk) goes on believing it holds the lock while a second holder is already inside.
//!   Nothing in the lease can stop that; only the place written to can, see below.
//! - **Released only by its holder.** The release is a script run inside Redis: delete the key
//!   *if it still holds our token*. A plain `DEL` from a holder whose lease expired would delete
//!   the lease of whoever holds it now.
//! - **A fencing token** ([`RedisLocks::acquire_fenced`]): with the grant, in the same script,
//!   the holder gets the next number of a counter. Later grants get higher numbers, and a
//!   database that remembers the highest number it was shown can refuse a write carrying a
//!   lower one: the write of a holder whose lease expired and went to someone else. Taking the
//!   number in a second command instead would let a holder that paused between the two commands
//!   take a *higher* number than the holder after it.
//!
//! One Redis server; no Redlock. Every command is bounded: a connection is checked out within
//! [`CHECKOUT`], and a command that gets no answer within [`ANSWER`] fails.

use std::time::Duration;

use diesel::r2d2::{self, CustomizeConnection, Pool};

use super::{poll, token};

/// How long a command waits for a free connection, and for Redis to accept a new one.
pub const CHECKOUT: Duration = Duration::from_secs(1);
/// How long a command waits for its answer.
pub const ANSWER: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The key was held by someone else for the whole wait.
    #[error("lease {key} is held elsewhere; gave up after {waited:?}")]
    TimedOut { key: String, waited: Duration },
    /// Redis could not be reached, or did not answer in time.
    #[error("Redis did not answer: {0}")]
    Redis(String),
}

impl From<redis::RedisError> for LeaseError {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(e.to_string())
    }
}

impl From<r2d2::PoolError> for LeaseError {
    fn from(e: r2d2::PoolError) -> Self {
        Self::Redis(e.to_string())
    }
}

/// A pool of connections to one Redis server, and the leases taken through it.
pub struct RedisLocks {
    pool: Pool<redis::Client>,
}

/// Sets the answer timeouts on every new connection.
#[derive(Debug)]
struct Timeouts;

impl CustomizeConnection<redis::Connection, redis::RedisError> for Timeouts {
    fn on_acquire(&self, conn: &mut redis::Connection) -> Result<(), redis::RedisError> {
        conn.set_read_timeout(Some(ANSWER))?;
        conn.set_write_timeout(Some(ANSWER))
    }
}

/// Deletes the lease only if it still carries our token (`KEYS[1]` the lease, `ARGV[1]` the
/// token): 1 released, 0 it was no longer ours.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0";

/// Grants the lease and hands out the next fencing token in one step (`KEYS[1]` the lease,
/// `KEYS[2]` the counter, `ARGV[1]` the token, `ARGV[2]` the TTL in ms): the token, or 0 when
/// the lease is held elsewhere.
const GRANT_FENCED: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return redis.call('INCR', KEYS[2])
end
return 0";

impl RedisLocks {
    /// Leases on the Redis server at `url` (`redis://host:port/db`). Connects on first use.
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| anyhow::anyhow!("REDIS_URL is not a Redis URL: {e}"))?;
        let pool = Pool::builder()
            .max_size(16)
            .min_idle(Some(0))
            .connection_timeout(CHECKOUT)
            .connection_customizer(Box::new(Timeouts))
            .build_unchecked(client);
        Ok(Self { pool })
    }

    /// Takes the lease `key` for `ttl`, asking again while someone else holds it, for at most
    /// `wait`.
    pub fn acquire(&self, key: &str, ttl: Duration, wait: Duration) -> Result<Lease<'_>, LeaseError> {
        let token = token();
        let granted = poll(wait, || {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .query(&mut *self.pool.get()?)?;
            Ok::<_, LeaseError>(set.map(|_| ()))
        })?;
        match granted {
            Some(()) => Ok(Lease { locks: self, key: key.to_string(), token, fence: None, released: false }),
            None => Err(LeaseError::TimedOut { key: key.to_string(), waited: wait }),
        }
    }

    /// [`acquire`](Self::acquire), and with the grant the next number of the counter `fence`:
    /// see [`Lease::fencing_token`].
    pub fn acquire_fenced(
        &self,
        key: &str,
        fence: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease<'_>, LeaseError> {
        let token = token();
        let script = redis::Script::new(GRANT_FENCED);
        let granted = poll(wait, || {
            let number: i64 =
                script.key(key).key(fence).arg(&token).arg(millis(ttl)).invoke(&mut *self.pool.get()?)?;
            Ok::<_, LeaseError>((number > 0).then_some(number))
        })?;
        match granted {
            Some(number) => {
                Ok(Lease { locks: self, key: key.to_string(), token, fence: Some(number), released: false })
            }
            None => Err(LeaseError::TimedOut { key: key.to_string(), waited: wait }),
        }
    }

    /// Whether this call is the first to claim `key` within `ttl` (`SET key 1 NX PX ttl`). The
    /// demo uses it to pick one holder per day to pause.
    pub fn first_to_claim(&self, key: &str, ttl: Duration) -> Result<bool, LeaseError> {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .query(&mut *self.pool.get()?)?;
        Ok(set.is_some())
    }

    /// Whether Redis answers, within [`CHECKOUT`] + [`ANSWER`].
    pub fn ping(&self) -> Result<(), LeaseError> {
        let _: String = redis::cmd("PING").query(&mut *self.pool.get()?)?;
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A granted lease. Dropping it releases it (if still ours); [`Lease::release`] also says
/// whether it still was.
pub struct Lease<'a> {
    locks: &'a RedisLocks,
    key: String,
    token: String,
    fence: Option<i64>,
    released: bool,
}

impl Lease<'_> {
    /// The number handed out with this grant by [`RedisLocks::acquire_fenced`]: higher than that
    /// of every earlier grant on the same counter. `None` for a lease taken without one.
    pub fn fencing_token(&self) -> Option<i64> {
        self.fence
    }

    /// Releases the lease. `Ok(false)`: it had expired before, and the key is gone or someone
    /// else's — whatever was done "under the lock" may have overlapped with another holder.
    pub fn release(mut self) -> Result<bool, LeaseError> {
        self.released = true;
        self.delete_if_ours()
    }

    fn delete_if_ours(&self) -> Result<bool, LeaseError> {
        let deleted: i64 = redis::Script::new(RELEASE)
            .key(&self.key)
            .arg(&self.token)
            .invoke(&mut *self.locks.pool.get()?)?;
        Ok(deleted == 1)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if !self.released
            && let Err(e) = self.delete_if_ours()
        {
            // The TTL frees it anyway.
            log::warn!("lease {}: release failed ({e}); it expires by itself", self.key);
        }
    }
}
