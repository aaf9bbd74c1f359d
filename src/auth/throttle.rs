//! Logging in without letting anyone block a login, or guess at leisure.
//!
//! Password guessing is slowed by counting *failures*, never successes, per account **and**
//! client address (an IPv6 client per /64, the address read through `TRUSTED_PROXIES`:
//! `crate::wire::client_address`):
//!
//! - a pair past `LOGIN_FAILURES_PER_ADDRESS` failures within `LOGIN_FAILURE_WINDOW_SECS` is
//!   answered 429 with `Retry-After`, before any hashing; that pair only: the same account from
//!   any other address logs in at once, so nobody can lock an account (or a whole proxy's worth of
//!   users) out by failing on purpose;
//! - an account failing from many addresses at once only answers its failures a little later
//!   ([`ACCOUNT_DELAY_STEP`] per failure past the allowance, at most [`ACCOUNT_DELAY_MAX`]): a
//!   speed bump for a serial script, never a refusal, and never a wait for a right password;
//! - a successful login deletes its pair's failures.
//!
//! The failures are rows of `login_failures`, so every instance counts the same ones: three
//! instances do not give an attacker three allowances. An attempt writes its row *before* its
//! password is checked and then counts the rows, its own included, so guesses sent all at once
//! are counted as they arrive: of any allowance + 1 of them, the one counted last sees them all.
//! A right password deletes the row again (with the pair's others); an attempt refused or not
//! checked deletes its own.
//!
//! The account is keyed by the typed name's one canonical spelling
//! ([`crate::auth::username::throttle_key`]), whether or not such a user exists: keyed by the
//! stored name, `bób` and `bob` would share a count only when `bob` exists, which would tell who
//! does; keyed by anything looser than the name the login looks up, an invisible character would
//! buy a fresh allowance.
//!
//! Besides each pair, a client address has one budget for failures across *all* accounts
//! (`LOGIN_FAILURES_PER_CLIENT`): a flood of made-up names from one address, each a pair of its
//! own, is answered 429 once the budget is spent, before any hashing.
//!
//! Checking a password is deliberately slow (argon2: tens of milliseconds of CPU). Done while
//! holding a pooled connection, a burst of logins would hold the pool hostage; done by as many
//! threads as there are requests, it would take every core from everyone else. So the hash is
//! fetched and the connection given back *before* verifying, and verifications run at most
//! [`LoginGate::new`]'s `hashing_slots` at a time (about one per core); a login that cannot get a
//! slot within [`HASHING_WAIT`] is answered 503 busy, and one that finds a queue longer than the
//! slots clear in [`QUEUE_BUDGET`] (measured: the recent verifications' average time) is
//! answered so at once, holding nothing: a flood from many addresses then costs a real user a
//! short queue, never seconds behind it only to be refused.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::RunQueryDsl;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::AuthError;
use super::username::throttle_key;
use crate::db::{DbConn, cached_sql, transaction_read_committed};
use crate::wire::client_address::ClientAddress;

/// How long a login waits for a hashing slot before answering 503 busy: a burst of people
/// logging in at once (a class starting) waits its turn; a storm is cut short by the throttle
/// long before it could queue this long.
pub const HASHING_WAIT: Duration = Duration::from_secs(5);

/// The extra wait before answering a failure, per failure of the account (from any address)
/// past one pair's allowance.
pub const ACCOUNT_DELAY_STEP: Duration = Duration::from_millis(100);

/// The most an account's failures ever add to a failed login's answer: a delay, never a lockout.
pub const ACCOUNT_DELAY_MAX: Duration = Duration::from_secs(2);

/// One in this many attempts deletes the rows older than the window, so the table stays about as
/// large as one window's failures without a statement on every login.
const EXPIRE_ONE_IN: i64 = 16;

pub struct LoginGate {
    hashing: Arc<Semaphore>,
    /// Logins waiting for a slot now.
    waiting: Arc<AtomicUsize>,
    /// How long a verification takes, averaged over the recent ones (microseconds).
    average_micros: Arc<AtomicU64>,
    slots: usize,
    policy: Policy,
}

/// The longest queue for the hashing slots a login joins: one the slots clear within this, at
/// the recent verifications' pace. A class logging in at once queues (a verification takes tens
/// of milliseconds in a release build); a login behind a longer queue is answered 503 at once,
/// rather than wait for seconds only to be refused.
pub const QUEUE_BUDGET: Duration = Duration::from_secs(2);

/// What a verification is taken to cost before any was measured.
const FIRST_GUESS: Duration = Duration::from_millis(50);

/// How many failures a pair gets, how many a client address gets across all accounts, and for
/// how long they are remembered.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub failures: NonZeroU32,
    pub per_client: NonZeroU32,
    pub window: Duration,
}

impl LoginGate {
    pub fn new(hashing_slots: usize, policy: Policy) -> Self {
        let slots = hashing_slots.max(1);
        Self {
            hashing: Arc::new(Semaphore::new(slots)),
            waiting: Arc::new(AtomicUsize::new(0)),
            average_micros: Arc::new(AtomicU64::new(micros(FIRST_GUESS))),
            slots,
            policy,
        }
    }

    /// What [`Policy::begin`] needs, to move into the blocking task that talks to the database.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// A slot to verify one password in, waited for (async, holding nothing) at most
    /// [`HASHING_WAIT`], or refused at once when the queue is longer than the slots clear in
    /// [`QUEUE_BUDGET`]. Move it into the blocking task that hashes: it must live as long as the
    /// hashing does, even if the client disconnects meanwhile; its time is what the queue's
    /// length is judged by.
    pub async fn hashing_slot(&self) -> Result<HashingSlot, AuthError> {
        let slot = |permit| HashingSlot {
            _permit: permit,
            since: std::time::Instant::now(),
            average_micros: Arc::clone(&self.average_micros),
        };
        if let Ok(free) = Arc::clone(&self.hashing).try_acquire_owned() {
            return Ok(slot(free));
        }
        let _in_queue = Queued::join(&self.waiting, self.queue_room()).ok_or(AuthError::HashingBusy)?;
        match actix_web::rt::time::timeout(HASHING_WAIT, Arc::clone(&self.hashing).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(slot(permit)),
            Ok(Err(_)) | Err(_) => Err(AuthError::HashingBusy),
        }
    }

    /// How many logins may wait: as many as the slots verify within [`QUEUE_BUDGET`] at the
    /// recent pace, and one at least.
    fn queue_room(&self) -> usize {
        let each = self.average_micros.load(Ordering::Relaxed).max(1);
        let per_slot = usize::try_from(micros(QUEUE_BUDGET) / each).unwrap_or(usize::MAX);
        per_slot.saturating_mul(self.slots).max(1)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A hashing slot, given back when dropped; how long it was held goes into the average
/// verification time (an exponential average, an eighth for the newest).
pub struct HashingSlot {
    _permit: OwnedSemaphorePermit,
    since: std::time::Instant,
    average_micros: Arc<AtomicU64>,
}

impl Drop for HashingSlot {
    fn drop(&mut self) {
        let took = micros(self.since.elapsed());
        let _ = self.average_micros.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
            Some(average - average / 8 + took / 8)
        });
    }
}

/// A place in the queue for a hashing slot, given up when dropped (a slot granted, the wait
/// over, or the client gone).
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    /// A place, if fewer than `most` wait.
    fn join(waiting: &'a AtomicUsize, most: usize) -> Option<Self> {
        waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < most).then_some(n + 1)).ok()?;
        Some(Self(waiting))
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whose failures an attempt counts as: the folded account (hashed, so the table has a fixed
/// width whatever was typed) and the client address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginKey {
    account: String,
    address: String,
}

impl LoginKey {
    /// `address` is `None` only for a request without a peer (never over TCP).
    pub fn new(typed_username: &str, address: Option<ClientAddress>) -> Self {
        let digest = Sha256::digest(throttle_key(typed_username).as_bytes());
        let account = digest.iter().map(|b| format!("{b:02x}")).collect();
        Self { account, address: address.map_or_else(|| "unknown".into(), |a| a.to_string()) }
    }
}

/// An admitted attempt: its row in `login_failures`, counted as a failure until
/// [`succeeded`](Attempt::succeeded) or [`not_checked`](Attempt::not_checked) says otherwise.
#[derive(Debug)]
pub struct Attempt {
    id: i64,
    key: LoginKey,
    /// How long to wait before answering, should the password be wrong.
    pub delay_if_wrong: Duration,
}

/// The pair's and the account's rows within the window, this attempt's own included.
const COUNT: &str = "SELECT COUNT(CASE WHEN address = ? THEN 1 END), \
       MIN(CASE WHEN address = ? THEN failed_at END), COUNT(*), {now} \
     FROM login_failures WHERE account = ? AND failed_at > {now} - {? microseconds}";

/// The client address's rows within the window, whatever account they tried, and the oldest.
const COUNT_CLIENT: &str = "SELECT COUNT(*), MIN(failed_at) \
     FROM login_failures WHERE address = ? AND failed_at > {now} - {? microseconds}";

impl Policy {
    /// Writes the attempt's row, then counts: past the pair's allowance, or past the client
    /// address's budget across all accounts, the row is taken back and the answer is 429 with the
    /// wait until the oldest failure counted leaves the window.
    pub fn begin(self, conn: &mut DbConn, key: LoginKey) -> Result<Attempt, AuthError> {
        let id = rand::random::<i64>();
        if id.rem_euclid(EXPIRE_ONE_IN) == 0 {
            self.expire(conn);
        }
        cached_sql::<()>(
            "INSERT INTO login_failures (id, account, address, failed_at) VALUES (?, ?, ?, {now})",
        )
        .bind::<BigInt, _>(id)
        .bind::<Text, _>(&key.account)
        .bind::<Text, _>(&key.address)
        .execute(conn)?;
        let window = i64::try_from(self.window.as_micros()).unwrap_or(i64::MAX);
        let (pair, oldest, account, now) =
            cached_sql::<(BigInt, Nullable<Timestamp>, BigInt, Timestamp)>(COUNT)
                .bind::<Text, _>(&key.address)
                .bind::<Text, _>(&key.address)
                .bind::<Text, _>(&key.account)
                .bind::<BigInt, _>(window)
                .get_result::<(i64, Option<NaiveDateTime>, i64, NaiveDateTime)>(conn)?;
        let allowance = i64::from(self.failures.get());
        if pair > allowance {
            Attempt { id, key, delay_if_wrong: Duration::ZERO }.not_checked(conn);
            return Err(AuthError::Throttled { retry_after_secs: self.retry_after(oldest, now) });
        }
        let (client, client_oldest) = cached_sql::<(BigInt, Nullable<Timestamp>)>(COUNT_CLIENT)
            .bind::<Text, _>(&key.address)
            .bind::<BigInt, _>(window)
            .get_result::<(i64, Option<NaiveDateTime>)>(conn)?;
        if client > i64::from(self.per_client.get()) {
            Attempt { id, key, delay_if_wrong: Duration::ZERO }.not_checked(conn);
            return Err(AuthError::Throttled { retry_after_secs: self.retry_after(client_oldest, now) });
        }
        Ok(Attempt { id, key, delay_if_wrong: account_delay(account - 1, allowance) })
    }

    /// Seconds until the pair's oldest failure leaves the window (at least 1).
    fn retry_after(self, oldest: Option<NaiveDateTime>, now: NaiveDateTime) -> u32 {
        let window = chrono::TimeDelta::from_std(self.window).unwrap_or(chrono::TimeDelta::MAX);
        let left = oldest.map_or(window, |oldest| (oldest + window) - now);
        u32::try_from(left.num_seconds().saturating_add(1).max(1)).unwrap_or(u32::MAX)
    }

    /// Deletes the failures older than the window. At READ COMMITTED: under REPEATABLE READ the
    /// range delete would lock the gap new failures are inserted into. Housekeeping only (the
    /// counts never read old rows), so a failure is logged, never answered.
    fn expire(self, conn: &mut DbConn) {
        let window = i64::try_from(self.window.as_micros()).unwrap_or(i64::MAX);
        let expired = transaction_read_committed(conn, |conn| {
            cached_sql::<()>("DELETE FROM login_failures WHERE failed_at < {now} - {? microseconds}")
                .bind::<BigInt, _>(window)
                .execute(conn)
        });
        if let Err(e) = expired {
            log::warn!("old login failures not deleted this time: {e}");
        }
    }
}

/// The extra wait of a failure when the account has `failures` others within the window, from
/// any address: nothing within one pair's allowance, then a step per failure, bounded.
pub fn account_delay(failures: i64, allowance: i64) -> Duration {
    let past = u32::try_from((failures - allowance).max(0)).unwrap_or(u32::MAX);
    ACCOUNT_DELAY_STEP.saturating_mul(past).min(ACCOUNT_DELAY_MAX)
}

impl Attempt {
    /// The password was right: the pair's failures (this attempt's row with them) are forgiven.
    /// The person is logged in whatever happens here, so a failure is logged, not answered.
    pub fn succeeded(self, conn: &mut DbConn) {
        let deleted = cached_sql::<()>("DELETE FROM login_failures WHERE account = ? AND address = ?")
            .bind::<Text, _>(&self.key.account)
            .bind::<Text, _>(&self.key.address)
            .execute(conn);
        if let Err(e) = deleted {
            log::warn!("a login's failures were not forgiven: {e}");
        }
    }

    /// The password was not checked (refused, no hashing slot, the database failed): the
    /// attempt is not a failure.
    pub fn not_checked(self, conn: &mut DbConn) {
        let deleted = cached_sql::<()>("DELETE FROM login_failures WHERE id = ?")
            .bind::<BigInt, _>(self.id)
            .execute(conn);
        if let Err(e) = deleted {
            log::warn!("a login attempt's row was not taken back: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_same_for_every_spelling_whether_or_not_anyone_has_the_name() {
        let here = ClientAddress::of([192, 0, 2, 1].into());
        assert_eq!(LoginKey::new("bób", Some(here)), LoginKey::new("bob", Some(here)));
        assert_eq!(LoginKey::new("Zéd", Some(here)), LoginKey::new("zed", Some(here)));
        assert_eq!(LoginKey::new("z\u{200B}ed", Some(here)), LoginKey::new("zed", Some(here)));
        assert_ne!(
            LoginKey::new("bob", Some(here)),
            LoginKey::new("bob", Some(ClientAddress::of([192, 0, 2, 2].into())))
        );
    }

    #[test]
    fn an_accounts_failures_only_ever_delay_a_little() {
        assert_eq!(account_delay(0, 10), Duration::ZERO);
        assert_eq!(account_delay(10, 10), Duration::ZERO);
        assert_eq!(account_delay(13, 10), 3 * ACCOUNT_DELAY_STEP);
        assert_eq!(account_delay(1_000_000, 10), ACCOUNT_DELAY_MAX, "bounded, never a lockout");
    }

    #[test]
    fn retry_after_is_when_the_oldest_failure_leaves_the_window() {
        let policy = Policy {
            failures: NonZeroU32::MIN,
            per_client: NonZeroU32::MIN,
            window: Duration::from_secs(60),
        };
        let now = chrono::DateTime::from_timestamp(1_000_000, 0).expect("time").naive_utc();
        assert_eq!(policy.retry_after(Some(now - chrono::TimeDelta::seconds(50)), now), 11);
        assert_eq!(policy.retry_after(Some(now - chrono::TimeDelta::seconds(90)), now), 1);
        assert_eq!(policy.retry_after(None, now), 61);
    }

    fn gate(slots: usize) -> LoginGate {
        LoginGate::new(
            slots,
            Policy {
                failures: NonZeroU32::MIN,
                per_client: NonZeroU32::MIN,
                window: Duration::from_secs(60),
            },
        )
    }

    #[test]
    fn the_queue_is_as_long_as_the_slots_clear_in_its_budget() {
        let gate = gate(2);
        gate.average_micros.store(50_000, Ordering::Relaxed);
        assert_eq!(gate.queue_room(), 80, "2 slots × 2 s / 50 ms");
        gate.average_micros.store(10_000_000, Ordering::Relaxed);
        assert_eq!(gate.queue_room(), 1, "one at least, however slow");
    }

    #[actix_web::test]
    async fn hashing_slots_are_bounded() {
        let gate = gate(1);
        let held = gate.hashing_slot().await.expect("free slot");
        assert_eq!(gate.hashing.available_permits(), 0);
        drop(held);
        assert!(gate.hashing_slot().await.is_ok());
    }

    /// With every slot taken and as many waiting as the slots clear in the queue's budget (two,
    /// at a second a verification), the next login is refused without waiting; the queued ones
    /// get their turn.
    #[actix_web::test]
    async fn a_login_finding_the_queue_full_is_refused_at_once() {
        let gate = Arc::new(gate(1));
        gate.average_micros.store(1_000_000, Ordering::Relaxed);
        let room = gate.queue_room();
        assert_eq!(room, 2, "2 s of queue at 1 s a verification, one slot");
        let held = gate.hashing_slot().await.expect("free slot");
        let mut queued = Vec::new();
        for _ in 0..room {
            let gate = Arc::clone(&gate);
            queued.push(actix_web::rt::spawn(async move { gate.hashing_slot().await.map(drop) }));
        }
        while gate.waiting.load(Ordering::Acquire) < room {
            actix_web::rt::task::yield_now().await;
        }
        // Not raced against a clock: the queue is full, so this returns before any wait begins.
        assert!(matches!(gate.hashing_slot().await, Err(AuthError::HashingBusy)));
        drop(held);
        for waiter in queued {
            assert!(waiter.await.expect("joined").is_ok(), "the queued logins get their turn");
        }
        assert_eq!(gate.waiting.load(Ordering::Acquire), 0);
        assert!(gate.hashing_slot().await.is_ok());
    }
}
