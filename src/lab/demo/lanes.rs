//! What the app puts in front of a named lock, for demo clients that are plain threads.
//!
//! A race's clients (and a bench's) are threads, each standing for one browser. The app's
//! requests wait for their turn at a lock in the per-key queue (`src/locking/queue.rs`) and
//! book a hot day in batches (`src/bookings/coalesce.rs`), both asynchronously. [`Lanes`] gives
//! threads the same two things:
//!
//! - the app's own [`LockQueue`], awaited on a small runtime of the lanes' own — a client thread
//!   blocks on it as a browser would wait for its answer, and holds no pooled connection;
//! - [`DayBatches`], the coalescer's shape with threads instead of tasks: the clients of one
//!   day queue; whichever finds no batch running takes the ones queued so far (at most
//!   [`MAX_BATCH`], in arrival order) and books them under one lock and one transaction, then
//!   goes on until its own answer is in. The others sleep until theirs arrives, or until their
//!   deadline passes while still queued (503 busy).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::NaiveDate;

pub use crate::bookings::coalesce::MAX_BATCH;
use crate::locking::{LockError, LockName, LockQueue, Turn};

use super::DemoError;
use super::strategies::Answer;

/// One race's (or one bench measurement's) queue and day batches.
pub struct Lanes {
    pub queue: LockQueue,
    pub batches: DayBatches,
    runtime: tokio::runtime::Handle,
    /// Dropping it ends the thread that drives the runtime's timers.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    driver: Option<std::thread::JoinHandle<()>>,
}

impl Lanes {
    /// `waiters_max`: the queue's budget of sessions waiting at the server, as `LOCK_WAITERS_MAX`.
    pub fn new(waiters_max: usize) -> Result<Self, DemoError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start the demo's queue runtime: {e}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // A current-thread runtime only fires timers while some thread runs `block_on` on it
        // (the clients' `Handle::block_on` does not): this thread does, until the lanes go.
        let driver = std::thread::Builder::new()
            .name("demo-lanes".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|e| anyhow::anyhow!("cannot start the demo's queue thread: {e}"))?;
        Ok(Self {
            queue: LockQueue::new(waiters_max),
            batches: DayBatches::default(),
            runtime: handle,
            stop: Some(stop),
            driver: Some(driver),
        })
    }

    /// Blocks this client thread until its turn at `name` comes (see [`LockQueue::turn`]).
    /// Call it from a plain thread, never from inside an async runtime.
    pub fn turn(&self, name: LockName, wait: Duration) -> Result<Turn, LockError> {
        self.runtime.block_on(self.queue.turn(name, wait))
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(driver) = self.driver.take() {
            let _ = driver.join();
        }
    }
}

/// What a client of a day's batches is told.
pub enum Decided {
    /// A batch decided this client: its own answer.
    Answer(Result<Answer, DemoError>),
    /// Its batch could not run as a whole: book alone, within what is left of the wait.
    Alone,
}

struct Waiter {
    ticket: u64,
    client: i32,
    deadline: Instant,
}

#[derive(Default)]
struct Day {
    waiting: VecDeque<Waiter>,
    /// A client is booking a batch of this day right now.
    draining: bool,
    decided: HashMap<u64, Decided>,
}

/// The clients of each (resource, day) waiting for its next batch.
#[derive(Default)]
pub struct DayBatches {
    days: Mutex<HashMap<(i64, NaiveDate), Day>>,
    changed: Condvar,
    tickets: AtomicU64,
}

impl DayBatches {
    /// Queues `client` for `key` and returns its answer. `book_batch` books the clients of one
    /// batch, in order, and answers each; this thread may run it for several batches (its own
    /// and the ones before it) before its own answer is in.
    pub fn book(
        &self,
        key: (i64, NaiveDate),
        client: i32,
        deadline: Instant,
        mut book_batch: impl FnMut(&[i32], Instant) -> Result<Vec<Answer>, DemoError>,
    ) -> Decided {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let mut days = self.days.lock().unwrap_or_else(PoisonError::into_inner);
        days.entry(key).or_default().waiting.push_back(Waiter { ticket, client, deadline });
        loop {
            let day = days.entry(key).or_default();
            if let Some(decided) = day.decided.remove(&ticket) {
                forget_if_idle(&mut days, key);
                return decided;
            }
            if !day.draining && !day.waiting.is_empty() {
                let take = day.waiting.len().min(MAX_BATCH);
                let batch: Vec<Waiter> = day.waiting.drain(..take).collect();
                day.draining = true;
                drop(days);
                let decided = run_batch(batch, &mut book_batch);
                days = self.days.lock().unwrap_or_else(PoisonError::into_inner);
                let day = days.entry(key).or_default();
                day.draining = false;
                day.decided.extend(decided);
                self.changed.notify_all();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                // Still queued: leave with busy. Already in a batch: its answer is coming.
                if let Some(at) = day.waiting.iter().position(|w| w.ticket == ticket) {
                    day.waiting.remove(at);
                    forget_if_idle(&mut days, key);
                    return Decided::Answer(Err(DemoError::Busy("still queued for the day's batch".into())));
                }
            }
            let nap = deadline.saturating_duration_since(now).max(Duration::from_millis(5));
            days = self.changed.wait_timeout(days, nap).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

/// Books one batch and pairs each ticket with its answer; a failed or panicking batch sends
/// every client on alone.
fn run_batch(
    batch: Vec<Waiter>,
    book_batch: &mut impl FnMut(&[i32], Instant) -> Result<Vec<Answer>, DemoError>,
) -> Vec<(u64, Decided)> {
    let now = Instant::now();
    let (late, batch): (Vec<Waiter>, Vec<Waiter>) = batch.into_iter().partition(|w| w.deadline <= now);
    let mut decided: Vec<(u64, Decided)> = late
        .iter()
        .map(|w| (w.ticket, Decided::Answer(Err(DemoError::Busy("waited past its deadline".into())))))
        .collect();
    if batch.is_empty() {
        return decided;
    }
    let clients: Vec<i32> = batch.iter().map(|w| w.client).collect();
    // The batch waits no longer than its most impatient member could.
    let deadline = batch.iter().map(|w| w.deadline).min().unwrap_or(now);
    let answers = std::panic::catch_unwind(AssertUnwindSafe(|| book_batch(&clients, deadline)));
    match answers {
        Ok(Ok(answers)) if answers.len() == batch.len() => {
            decided.extend(batch.iter().zip(answers).map(|(w, a)| (w.ticket, Decided::Answer(Ok(a)))));
        }
        _ => decided.extend(batch.iter().map(|w| (w.ticket, Decided::Alone))),
    }
    decided
}

fn forget_if_idle(days: &mut HashMap<(i64, NaiveDate), Day>, key: (i64, NaiveDate)) {
    if days.get(&key).is_some_and(|d| !d.draining && d.waiting.is_empty() && d.decided.is_empty()) {
        days.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn key() -> (i64, NaiveDate) {
        (1, NaiveDate::from_ymd_opt(2300, 1, 1).expect("date"))
    }

    #[test]
    fn queued_clients_are_served_in_batches_each_with_its_own_answer() {
        let batches = DayBatches::default();
        let (places, runs, most) = (AtomicUsize::new(3), AtomicUsize::new(0), AtomicUsize::new(0));
        let deadline = Instant::now() + Duration::from_secs(5);
        let answers: Vec<Answer> = std::thread::scope(|scope| {
            let clients: Vec<_> = (0..24)
                .map(|client| {
                    let (batches, places, runs, most) = (&batches, &places, &runs, &most);
                    scope.spawn(move || {
                        let decided = batches.book(key(), client, deadline, |clients, _| {
                            runs.fetch_add(1, Ordering::SeqCst);
                            most.fetch_max(clients.len(), Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                            Ok(clients
                                .iter()
                                .map(|_| {
                                    let free = places.load(Ordering::SeqCst);
                                    if free > 0 {
                                        places.store(free - 1, Ordering::SeqCst);
                                        Answer::Confirmed
                                    } else {
                                        Answer::Full
                                    }
                                })
                                .collect())
                        });
                        match decided {
                            Decided::Answer(Ok(answer)) => answer,
                            _ => panic!("every client is decided by a batch"),
                        }
                    })
                })
                .collect();
            clients.into_iter().map(|c| c.join().expect("client")).collect()
        });
        assert_eq!(answers.iter().filter(|a| **a == Answer::Confirmed).count(), 3);
        assert!(runs.load(Ordering::SeqCst) < 24, "some clients shared a batch");
        assert!(most.load(Ordering::SeqCst) <= MAX_BATCH);
        assert!(batches.days.lock().expect("days").is_empty(), "an idle day leaves nothing behind");
    }

    #[test]
    fn a_failed_batch_sends_its_clients_on_alone_and_a_late_one_is_busy() {
        let batches = DayBatches::default();
        let soon = Instant::now() + Duration::from_secs(5);
        let failed = batches.book(key(), 1, soon, |_, _| Err(DemoError::Busy("held".into())));
        assert!(matches!(failed, Decided::Alone));
        let late = batches.book(key(), 2, Instant::now(), |_, _| panic!("a late client is not booked"));
        assert!(matches!(late, Decided::Answer(Err(DemoError::Busy(_)))));
    }
}
