//! Waiting for a named lock without starving everyone else.
//!
//! A request that waits at the server for a named lock (`GET_LOCK` on MySQL, an advisory lock
//! under `lock_timeout` on PostgreSQL) holds a pooled connection (and a blocking thread) the whole
//! time. With one hot or stuck key, enough waiters fill the pool, and requests that need no lock
//! at all (a product list, a booking of another day) time out waiting for a connection: one key
//! takes the whole app down. Two rules keep contention in its lane:
//!
//! 1. **One waiter per key per instance.** [`LockQueue::turn`] lets at most one request per lock
//!    name through to the database at a time; the others wait here, in memory, on an async mutex
//!    that holds no connection and no thread, with the same deadline they would have had at the
//!    server. With N instances, at most N sessions per key wait at the server.
//! 2. **A budget for waiting at the database.** A request whose turn has come first asks the
//!    server without waiting (`GET_LOCK(name, 0)`, `pg_try_advisory_lock`); only if the lock is held elsewhere does it
//!    wait there, and only while fewer than `LOCK_WAITERS_MAX` sessions of this instance already
//!    do. Past the budget it is refused at once (503 busy). Holding a lock costs a connection;
//!    *waiting* for one is what the budget bounds, so requests for other keys always find one.
//!
//! A [`Turn`] is the proof that the queue let this request through. [`NamedLockGuard::acquire_in_turn`]
//! takes it and keeps it until the lock is released, so the next request for the key only
//! reaches the server after this one has committed and let go.
//!
//! [`NamedLockGuard::acquire_in_turn`]: super::NamedLockGuard::acquire_in_turn

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use super::{Cutoff, LockError, LockName};
use crate::metrics::Family;

type KeyQueues = Mutex<HashMap<LockName, Arc<tokio::sync::Mutex<()>>>>;

/// Past this many key queues, idle ones are swept out when a new key arrives.
const SWEEP_ABOVE: usize = 1024;

/// The per-instance queues and the waiting budget; one per app instance, shared by its workers.
pub struct LockQueue {
    keys: Arc<KeyQueues>,
    waiters: Arc<Semaphore>,
    waiters_max: usize,
    /// When a stopping instance turns away the requests still queued here.
    cutoff: Cutoff,
}

impl LockQueue {
    /// `waiters_max`: how many sessions of this instance may wait at the server for a named lock
    /// at once.
    pub fn new(waiters_max: usize) -> Self {
        Self {
            keys: Arc::default(),
            waiters: Arc::new(Semaphore::new(waiters_max)),
            waiters_max,
            cutoff: Cutoff::default(),
        }
    }

    /// The cutoff of this queue's waits, shared with whatever else of the instance waits in
    /// memory for a lock (the coalescers' [`Batches`](super::Batches)).
    pub fn cutoff(&self) -> &Cutoff {
        &self.cutoff
    }

    /// Waits (async, holding nothing) until no other request of this instance is at the
    /// database for `name`, for at most `wait`. The deadline carries over into the wait at the
    /// server. Once the instance's [`Cutoff`] is reached, waiting requests leave with
    /// [`LockError::ShuttingDown`] and new ones are turned away at once.
    pub async fn turn(&self, name: LockName, wait: Duration) -> Result<Turn, LockError> {
        if self.cutoff.is_cut() {
            return Err(self.cutoff.turn_away(name));
        }
        let deadline = Instant::now() + wait;
        let key = {
            let mut keys = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if keys.len() > SWEEP_ABOVE {
                // Queues nobody holds or waits in (only the map's reference left), in case a
                // cancelled request left one behind.
                keys.retain(|_, queue| Arc::strong_count(queue) > 1);
            }
            Arc::clone(keys.entry(name.clone()).or_default())
        };
        // Undone on every way out, including the request being dropped while it waits (the
        // client went away): the gauge comes down and an idle key's queue is forgotten.
        let (waiting, began) = (Waiting::new(&self.keys, &name), Instant::now());
        let got = self.cutoff.or_cut(actix_web::rt::time::timeout(wait, key.lock_owned())).await;
        drop(waiting);
        crate::metrics::waited(Family::Queue, name.scope(), began.elapsed());
        match got {
            None => Err(self.cutoff.turn_away(name)),
            Some(Ok(guard)) => Ok(Turn {
                name,
                deadline,
                waiters: Arc::clone(&self.waiters),
                key: Some(guard),
                keys: Arc::clone(&self.keys),
            }),
            Some(Err(_)) => {
                crate::metrics::record(|m| {
                    m.named_lock_acquisitions.with_label_values(&[name.scope(), "timed_out_queued"]).inc()
                });
                Err(LockError::TimedOut { name, waited: wait })
            }
        }
    }

    /// Turns for several lock names at once, for work that needs all of them (a stay holds
    /// every night's day lock): one [`turn`](Self::turn) per name, **in the names' order**
    /// ([`TurnsInOrder`]), all within one wait of `wait`. The per-key queues are a lock of
    /// their own, in memory: taken in any other order, two such requests of one instance could
    /// each hold a turn the other waits for, until both time out.
    pub async fn turns_in_order(
        &self,
        names: Vec<LockName>,
        wait: Duration,
    ) -> Result<TurnsInOrder, LockError> {
        let deadline = Instant::now() + wait;
        let names = TurnsInOrder::order(names);
        let mut turns = Vec::with_capacity(names.len());
        for name in names {
            // A turn not had in time gives back the ones before it (dropped with `turns`).
            turns.push(self.turn(name, deadline.saturating_duration_since(Instant::now())).await?);
        }
        Ok(TurnsInOrder(turns))
    }

    /// A turn for a caller that queues per key itself (the booking coalescer keeps one batch
    /// per key at the server): it shares this instance's waiting budget and ends at `deadline`.
    pub fn turn_queued_elsewhere(&self, name: LockName, deadline: Instant) -> Turn {
        Turn { name, deadline, waiters: Arc::clone(&self.waiters), key: None, keys: Arc::clone(&self.keys) }
    }

    /// Sessions of this instance waiting in `GET_LOCK` right now.
    pub fn waiting_at_server(&self) -> usize {
        self.waiters_max - self.waiters.available_permits()
    }

    /// Lock names with a request at the server or queued behind one (for tests and metrics).
    pub fn active_keys(&self) -> usize {
        self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// This request's turn at the database for one lock name, until the deadline of its wait.
pub struct Turn {
    name: LockName,
    deadline: Instant,
    waiters: Arc<Semaphore>,
    key: Option<OwnedMutexGuard<()>>,
    keys: Arc<KeyQueues>,
}

impl Turn {
    /// A turn outside any queue, for a caller that is the only one using its lock names: the
    /// migrations at start, a command-line tool. It still has a deadline and a budget of one.
    pub fn unqueued(name: LockName, wait: Duration) -> Self {
        Self {
            name,
            deadline: Instant::now() + wait,
            waiters: Arc::new(Semaphore::new(1)),
            key: None,
            keys: Arc::default(),
        }
    }

    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// What is left of the wait; zero once the deadline has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// A place in the budget of sessions waiting at the server, or `None` when it is spent.
    pub(super) fn try_wait_slot(&self) -> Option<WaitSlot> {
        let permit = Arc::clone(&self.waiters).try_acquire_owned().ok();
        if permit.is_none() {
            crate::metrics::record(|m| m.lock_waiters_refused.with_label_values(&[self.name.scope()]).inc());
        }
        permit.map(|permit| {
            crate::metrics::record(|m| m.lock_waiters.inc());
            WaitSlot { _permit: permit }
        })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Let the next request for this key go first, then drop the key's queue if nobody is in it.
        drop(self.key.take());
        forget_if_unused(&self.keys, &self.name);
    }
}

/// Turns for several lock names, in ascending order of the names — the one order every taker
/// of several locks follows, in memory ([`LockQueue::turns_in_order`]) and at the server
/// ([`transaction_under_locks`](super::transaction_under_locks)), so that no two of them ever
/// wait for each other in a circle. For one resource's nights, that is the order of the dates
/// (`LockName`s sort as text, ISO dates too). Built only in that order: holding a
/// `TurnsInOrder` is the proof that its locks will be asked for in it.
pub struct TurnsInOrder(Vec<Turn>);

impl TurnsInOrder {
    /// Turns outside any queue ([`Turn::unqueued`]), for callers alone with their names: tests, tools.
    pub fn unqueued(names: Vec<LockName>, wait: Duration) -> Self {
        Self(Self::order(names).into_iter().map(|name| Turn::unqueued(name, wait)).collect())
    }

    /// Sorted, each name once.
    fn order(mut names: Vec<LockName>) -> Vec<LockName> {
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The turns, in the order their locks are to be taken.
    pub fn turns(&self) -> &[Turn] {
        &self.0
    }

    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        self.0.iter().map(Turn::name)
    }

    pub(super) fn into_turns(self) -> Vec<Turn> {
        self.0
    }
}

/// One request waiting in memory for its turn: counted in the queue gauge while it lasts.
struct Waiting<'a> {
    keys: &'a KeyQueues,
    name: &'a LockName,
}

impl<'a> Waiting<'a> {
    fn new(keys: &'a KeyQueues, name: &'a LockName) -> Self {
        crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[name.scope()]).inc());
        Self { keys, name }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[self.name.scope()]).dec());
        // By now this request's clone of the key's mutex is gone (the wait future that held it
        // has ended); if nobody else is queued or holding, drop the key's queue.
        forget_if_unused(self.keys, self.name);
    }
}

fn forget_if_unused(keys: &KeyQueues, name: &LockName) {
    let mut keys = keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Only the map's own reference left: no holder, no one queued (they clone under this lock).
    if keys.get(name).is_some_and(|queue| Arc::strong_count(queue) == 1) {
        keys.remove(name);
    }
}

/// One session's place in the waiting budget, for the length of one `GET_LOCK` wait.
pub(super) struct WaitSlot {
    _permit: OwnedSemaphorePermit,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        crate::metrics::record(|m| m.lock_waiters.dec());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn name(key: &str) -> LockName {
        super::super::Namespace::for_database("haita").name("book", key)
    }

    #[actix_web::test]
    async fn one_request_per_key_at_a_time_and_other_keys_pass() {
        let queue = LockQueue::new(4);
        let first = queue.turn(name("a"), Duration::from_secs(5)).await.expect("free key");
        // Another key is not held up by "a".
        let other = queue.turn(name("b"), Duration::from_millis(50)).await;
        assert!(other.is_ok(), "a different key must get its turn at once");
        // The same key waits until the first turn ends…
        let second = queue.turn(name("a"), Duration::from_millis(50)).await;
        assert!(matches!(second, Err(LockError::TimedOut { .. })), "same key must wait");
        drop(first);
        // …and then gets it.
        assert!(queue.turn(name("a"), Duration::from_millis(50)).await.is_ok());
    }

    #[actix_web::test]
    async fn queued_turns_come_one_after_another() {
        let queue = Arc::new(LockQueue::new(4));
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (queue, inside, most) = (Arc::clone(&queue), Arc::clone(&inside), Arc::clone(&most));
            tasks.push(actix_web::rt::spawn(async move {
                let _turn = queue.turn(name("hot"), Duration::from_secs(5)).await.expect("turn");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                actix_web::rt::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "never two turns of one key at once");
        assert_eq!(queue.active_keys(), 0, "an idle key leaves no queue behind");
    }

    #[actix_web::test]
    async fn the_waiting_budget_refuses_past_its_size() {
        let queue = LockQueue::new(2);
        let a = queue.turn(name("x1"), Duration::from_secs(1)).await.expect("turn");
        let b = queue.turn(name("x2"), Duration::from_secs(1)).await.expect("turn");
        let c = queue.turn(name("x3"), Duration::from_secs(1)).await.expect("turn");
        let slot_a = a.try_wait_slot().expect("within budget");
        let slot_b = b.try_wait_slot().expect("within budget");
        assert_eq!(queue.waiting_at_server(), 2);
        assert!(c.try_wait_slot().is_none(), "a third waiter is over budget");
        drop(slot_a);
        assert!(c.try_wait_slot().is_some(), "a freed slot is reusable");
        drop(slot_b);
    }

    #[actix_web::test]
    async fn at_the_cutoff_the_queued_request_is_turned_away_and_no_other_queues() {
        let queue = Arc::new(LockQueue::new(4));
        let first = queue.turn(name("cut"), Duration::from_secs(5)).await.expect("free key");
        let queued = {
            let queue = Arc::clone(&queue);
            actix_web::rt::spawn(async move { queue.turn(name("cut"), Duration::from_secs(60)).await })
        };
        while queue.keys.lock().expect("keys").get(&name("cut")).is_none_or(|q| Arc::strong_count(q) < 3) {
            actix_web::rt::task::yield_now().await; // the second request is in the key's queue
        }
        queue.cutoff().cut();
        let left = queued.await.expect("task");
        assert!(matches!(left, Err(LockError::ShuttingDown { .. })), "queued: {:?}", left.err());
        let late = queue.turn(name("other"), Duration::from_secs(5)).await;
        assert!(matches!(late, Err(LockError::ShuttingDown { .. })), "after the cutoff nobody queues");
        assert_eq!(queue.cutoff().turned_away(), 2);
        drop(first);
        assert_eq!(queue.active_keys(), 0, "the turned-away request left no queue behind");
    }

    #[test]
    fn a_turn_counts_down_its_deadline() {
        let turn = Turn::unqueued(name("y"), Duration::from_millis(20));
        assert!(turn.remaining() <= Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(turn.remaining(), Duration::ZERO);
    }
}
