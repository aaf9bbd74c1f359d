//! Requests for one key, waiting in memory for the one task that serves them in batches.
//!
//! The hazard it answers: on a hot key (a popular day, a flash-sale product) every request takes
//! its own lock, transaction and commit, one after another, and the key is capped at one commit
//! (one disk flush) per request however many people wait. Served in batches, many requests share
//! one lock, one transaction and one commit, and each still gets the answer it would have got on
//! its own, because a batch decides its requests in the order they arrived.
//!
//! [`Batches`] is the queue part, the same for every feature that coalesces (`bookings::coalesce`,
//! `orders::coalesce`): requests wait here holding no connection and no thread; the first to
//! arrive at an idle key is told to start the key's drainer ([`Joined::drain`]), which takes the
//! waiting requests in arrival order, at most `max_batch` at a time, until the key's queue is
//! empty ([`Drainer::next_batch`]). A request may leave the queue while it is still waiting
//! ([`Batches::withdraw`], its deadline passed); once a batch has taken it, its answer is on the
//! way. What a batch does, and what its requests are told, is the feature's.
//!
//! Every request waiting here is counted in `haita_lock_queue_depth` under its key's scope. A
//! stopping instance's [`Cutoff`] turns away the requests still waiting ([`Batches::wait`]), and
//! a drainer that meets it answers the batch it took instead of starting it
//! ([`Batches::is_cut`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Cutoff, LockError, LockName};

/// The waiting requests of every key of one feature, in one app instance.
pub struct Batches<W> {
    keys: Mutex<HashMap<LockName, VecDeque<(u64, W)>>>,
    places: AtomicU64,
    max_batch: usize,
    cutoff: Cutoff,
}

/// A request's place in its key's queue.
#[must_use = "a request that starts a key must start its drainer"]
pub struct Joined {
    /// To leave the queue by ([`Batches::withdraw`]).
    pub place: u64,
    /// This request found the key idle: the caller starts the key's drainer, which serves it too.
    pub drain: bool,
}

impl<W> Batches<W> {
    /// `max_batch`: the most requests one batch takes (at least one); `cutoff`: the instance's
    /// (`LockQueue::cutoff`), when its waiting requests are turned away.
    pub fn new(max_batch: usize, cutoff: Cutoff) -> Self {
        Self {
            keys: Mutex::new(HashMap::new()),
            places: AtomicU64::new(1),
            max_batch: max_batch.max(1),
            cutoff,
        }
    }

    /// Whether the instance's cutoff has come: a drainer answers what it took with
    /// [`turn_away`](Self::turn_away) instead of starting another batch.
    pub fn is_cut(&self) -> bool {
        self.cutoff.is_cut()
    }

    /// The answer to a request the cutoff turned away ([`LockError::ShuttingDown`]), counted.
    pub fn turn_away(&self, name: &LockName) -> LockError {
        self.cutoff.turn_away(name.clone())
    }

    /// Waits for the answer of the request `joined` to `name`'s queue, for at most `wait`.
    /// Still queued when the wait runs out, or when the cutoff comes: it leaves the queue with
    /// [`LockError::TimedOut`] (503 `busy`) or [`LockError::ShuttingDown`] (503 `draining`).
    /// Already taken by a batch: its answer is on the way, and is awaited (`Err` only if the
    /// drainer died without replying).
    pub async fn wait<T>(
        &self,
        name: &LockName,
        joined: &Joined,
        answer: &mut oneshot::Receiver<T>,
        wait: Duration,
    ) -> Result<Result<T, oneshot::error::RecvError>, LockError> {
        let waited = self.cutoff.or_cut(actix_web::rt::time::timeout(wait, &mut *answer)).await;
        match waited {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(_)) if self.withdraw(name, joined.place) => {
                Err(LockError::TimedOut { name: name.clone(), waited: wait })
            }
            None if self.withdraw(name, joined.place) => Err(self.turn_away(name)),
            _ => Ok(answer.await),
        }
    }

    /// Queues `waiter` behind the requests already waiting for `name`.
    pub fn join(&self, name: &LockName, waiter: W) -> Joined {
        let place = self.places.fetch_add(1, Ordering::Relaxed);
        let drain = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            let drain = !keys.contains_key(name);
            keys.entry(name.clone()).or_default().push_back((place, waiter));
            drain
        };
        crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[name.scope()]).inc());
        Joined { place, drain }
    }

    /// Takes the request at `place` out of `name`'s queue; `false` when a batch has taken it
    /// already (its answer is on the way).
    pub fn withdraw(&self, name: &LockName, place: u64) -> bool {
        let withdrawn = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            keys.get_mut(name).is_some_and(|queue| {
                let before = queue.len();
                queue.retain(|(p, _)| *p != place);
                before != queue.len()
            })
        };
        if withdrawn {
            crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[name.scope()]).dec());
        }
        withdrawn
    }

    /// The drainer of `name`: the one task that takes its batches, started by the request that
    /// found the key idle.
    pub fn drainer<'a>(&'a self, name: &'a LockName) -> Drainer<'a, W> {
        Drainer { batches: self, name, finished: false }
    }

    /// The next batch of `name`, or `None` (and the key forgotten) when nobody waits.
    fn next_batch(&self, name: &LockName) -> Option<Vec<W>> {
        let batch = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = keys.get_mut(name)?;
            if queue.is_empty() {
                keys.remove(name);
                return None;
            }
            let take = queue.len().min(self.max_batch);
            queue.drain(..take).map(|(_, waiter)| waiter).collect::<Vec<W>>()
        };
        let taken = i64::try_from(batch.len()).unwrap_or(0);
        crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[name.scope()]).sub(taken));
        Some(batch)
    }
}

/// The one task serving a key's batches. Should it die before the queue ran empty (a panic, or
/// its runtime stopping), dropping it forgets the key: the requests still waiting lose their
/// reply channels (they see their sender dropped and go on alone), and the next request to
/// arrive starts a new drainer instead of queueing behind a dead one.
pub struct Drainer<'a, W> {
    batches: &'a Batches<W>,
    name: &'a LockName,
    /// Set when the queue ran empty: `next_batch` has already forgotten the key.
    finished: bool,
}

impl<W> Drainer<'_, W> {
    /// The next batch, in arrival order; `None` once nobody waits (the key is then idle again).
    pub fn next_batch(&mut self) -> Option<Vec<W>> {
        let batch = self.batches.next_batch(self.name);
        self.finished = batch.is_none();
        batch
    }
}

impl<W> Drop for Drainer<'_, W> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let forgotten = {
            let mut keys = self.batches.keys.lock().unwrap_or_else(PoisonError::into_inner);
            keys.remove(self.name).map_or(0, |queue| queue.len())
        };
        let forgotten = i64::try_from(forgotten).unwrap_or(0);
        crate::metrics::record(|m| m.lock_queue_depth.with_label_values(&[self.name.scope()]).sub(forgotten));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locking::Namespace;

    fn name(key: &str) -> LockName {
        Namespace::for_database("batches").name("order", key)
    }

    #[test]
    fn the_first_request_of_an_idle_key_starts_its_drainer_and_batches_keep_arrival_order() {
        let batches = Batches::new(2, Cutoff::default());
        let (hot, other) = (name("1"), name("2"));
        let joined: Vec<Joined> = (1..=5).map(|i| batches.join(&hot, i)).collect();
        assert_eq!(joined.iter().map(|j| j.drain).collect::<Vec<_>>(), [true, false, false, false, false]);
        assert!(batches.join(&other, 9).drain, "another key has a drainer of its own");

        let mut drainer = batches.drainer(&hot);
        assert_eq!(drainer.next_batch(), Some(vec![1, 2]));
        assert!(!batches.join(&hot, 6).drain, "the key is being drained: a late arrival joins it");
        assert_eq!(drainer.next_batch(), Some(vec![3, 4]));
        assert_eq!(drainer.next_batch(), Some(vec![5, 6]));
        assert_eq!(drainer.next_batch(), None);
        drop(drainer);
        assert!(batches.join(&hot, 7).drain, "an emptied key is idle again");
    }

    #[test]
    fn a_request_leaves_while_queued_but_not_once_a_batch_took_it() {
        let batches = Batches::new(1, Cutoff::default());
        let hot = name("1");
        let first = batches.join(&hot, "first");
        let second = batches.join(&hot, "second");
        let mut drainer = batches.drainer(&hot);
        assert_eq!(drainer.next_batch(), Some(vec!["first"]));
        assert!(!batches.withdraw(&hot, first.place), "already in a batch");
        assert!(batches.withdraw(&hot, second.place));
        assert_eq!(drainer.next_batch(), None);
    }

    #[actix_web::test]
    async fn at_the_cutoff_a_queued_request_leaves_and_one_in_a_batch_gets_its_answer() {
        let cutoff = Cutoff::default();
        let batches = Batches::new(1, cutoff.clone());
        let hot = name("1");
        let (in_batch, mut in_batch_answer) = oneshot::channel::<&str>();
        let (queued, mut queued_answer) = oneshot::channel::<&str>();
        let first = batches.join(&hot, in_batch);
        let second = batches.join(&hot, queued);
        let mut drainer = batches.drainer(&hot);
        let taken = drainer.next_batch().expect("the first request's batch");
        cutoff.cut();
        let wait = Duration::from_secs(60);
        let left = batches.wait(&hot, &second, &mut queued_answer, wait).await;
        assert!(matches!(left, Err(LockError::ShuttingDown { .. })), "{left:?}");
        for reply in taken {
            reply.send("booked").expect("the waiter listens");
        }
        let answered = batches.wait(&hot, &first, &mut in_batch_answer, wait).await;
        assert_eq!(answered.expect("not turned away").expect("answered"), "booked");
        assert_eq!(drainer.next_batch().map(|b| b.len()), None, "nobody is left queued");
        assert_eq!(cutoff.turned_away(), 1);
    }

    #[test]
    fn a_drainer_that_dies_forgets_its_key_so_the_next_request_starts_another() {
        let batches = Batches::new(4, Cutoff::default());
        let hot = name("1");
        let _ = batches.join(&hot, 1);
        let _ = batches.join(&hot, 2);
        drop(batches.drainer(&hot));
        assert!(batches.join(&hot, 3).drain);
        assert_eq!(batches.drainer(&hot).next_batch(), Some(vec![3]), "the dead drainer's waiters are gone");
    }
}
