//! Logging in without taking the app down: a bounded hashing pool and per-key throttles.
//!
//! Checking a password is deliberately slow (argon2: tens of milliseconds of CPU). Done while
//! holding a pooled connection, a burst of logins would hold the pool hostage; done by as many
//! threads as there are requests, it would take every core from everyone else. So:
//!
//! - the password hash is fetched and the connection given back *before* verifying;
//! - verifications run at most [`LoginGate::new`]'s `hashing_slots` at a time (about one per
//!   core); a login that cannot get a slot within [`HASHING_WAIT`] is answered 503 busy;
//! - login attempts are throttled per account and per client address (the TCP peer; behind a
//!   proxy, that is the proxy) with `governor`'s GCRA limiters: past the quota the answer is 429
//!   with `Retry-After`, before any hashing or database work. Every attempt counts, successful or
//!   not: a person logs in a few times a minute, a password-guessing script thousands of times.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::AuthError;

/// How long a login waits for a hashing slot before answering 503 busy: a burst of people
/// logging in at once (a class starting) waits its turn; a storm is cut short by the throttles
/// long before it could queue this long.
pub const HASHING_WAIT: Duration = Duration::from_secs(5);

/// Keys kept by a limiter before the idle ones are dropped (bounded memory under a spray of
/// made-up usernames or addresses).
const MAX_TRACKED_KEYS: usize = 100_000;

pub struct LoginGate {
    hashing: Arc<Semaphore>,
    by_username: DefaultKeyedRateLimiter<String>,
    by_address: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
}

impl LoginGate {
    /// `per_username` and `per_address`: login attempts per minute (bursts of that size allowed).
    pub fn new(hashing_slots: usize, per_username: NonZeroU32, per_address: NonZeroU32) -> Self {
        Self {
            hashing: Arc::new(Semaphore::new(hashing_slots.max(1))),
            by_username: RateLimiter::keyed(Quota::per_minute(per_username)),
            by_address: RateLimiter::keyed(Quota::per_minute(per_address)),
            clock: DefaultClock::default(),
        }
    }

    /// Counts one attempt from `address`; refuses it (429) past the address's quota. Checked
    /// first, so an address already over its quota cannot use up an account's allowance too
    /// (which would let one address lock anybody out).
    pub fn admit_address(&self, address: Option<IpAddr>) -> Result<(), AuthError> {
        let over = address.and_then(|a| self.by_address.check_key(&a).err());
        if self.by_address.len() > MAX_TRACKED_KEYS {
            self.by_address.retain_recent();
        }
        self.refuse_for(over)
    }

    /// Counts one attempt at the account `account`; refuses it (429) past the account's quota.
    /// Pass the username *as stored* when the user exists: the column's collation makes
    /// `ALICE`, `álice` and `ａｌｉｃｅ` all log in as `alice`, and each spelling must not get
    /// an allowance of its own.
    pub fn admit_account(&self, account: &str) -> Result<(), AuthError> {
        let over = self.by_username.check_key(&account.trim().to_lowercase()).err();
        if self.by_username.len() > MAX_TRACKED_KEYS {
            self.by_username.retain_recent();
        }
        self.refuse_for(over)
    }

    fn refuse_for(
        &self,
        over: Option<governor::NotUntil<<DefaultClock as Clock>::Instant>>,
    ) -> Result<(), AuthError> {
        match over {
            None => Ok(()),
            Some(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(AuthError::Throttled {
                    retry_after_secs: u32::try_from(wait.as_secs().saturating_add(1)).unwrap_or(u32::MAX),
                })
            }
        }
    }

    /// A slot to verify one password in, waited for (async, holding nothing) at most
    /// [`HASHING_WAIT`]. Move it into the blocking task that hashes: it must live as long as
    /// the hashing does, even if the client disconnects meanwhile.
    pub async fn hashing_slot(&self) -> Result<OwnedSemaphorePermit, AuthError> {
        match actix_web::rt::time::timeout(HASHING_WAIT, Arc::clone(&self.hashing).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(AuthError::HashingBusy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(per_username: u32, per_address: u32) -> LoginGate {
        let n = |v| NonZeroU32::new(v).expect("non-zero");
        LoginGate::new(1, n(per_username), n(per_address))
    }

    #[test]
    fn attempts_past_the_username_quota_are_refused_with_a_wait() {
        let gate = gate(3, 100);
        for _ in 0..3 {
            assert!(gate.admit_account("alice").is_ok());
        }
        match gate.admit_account(" Alice ") {
            Err(AuthError::Throttled { retry_after_secs }) => assert!((1..=61).contains(&retry_after_secs)),
            other => panic!("expected 429, got {other:?}"),
        }
        assert!(gate.admit_account("bob").is_ok(), "other usernames are not affected");
    }

    #[test]
    fn attempts_past_the_address_quota_are_refused_whatever_the_username() {
        let gate = gate(100, 2);
        let here: IpAddr = [192, 0, 2, 1].into();
        assert!(gate.admit_address(Some(here)).is_ok());
        assert!(gate.admit_address(Some(here)).is_ok());
        assert!(matches!(gate.admit_address(Some(here)), Err(AuthError::Throttled { .. })));
        assert!(gate.admit_address(Some([192, 0, 2, 2].into())).is_ok(), "another address is not");
    }

    #[actix_web::test]
    async fn hashing_slots_are_bounded() {
        let gate = gate(10, 10);
        let held = gate.hashing_slot().await.expect("free slot");
        assert_eq!(gate.hashing.available_permits(), 0);
        drop(held);
        assert!(gate.hashing_slot().await.is_ok());
    }
}
