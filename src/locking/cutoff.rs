//! The moment a stopping instance stops letting requests wait in memory for a lock.
//!
//! An instance that stops (`crate::shutdown`, on SIGTERM) lets the requests in flight finish
//! within `SHUTDOWN_TIMEOUT_SECS`; what is still running then has its connection closed. A
//! request waiting in this instance's memory for its turn at a lock ([`LockQueue`], [`Batches`])
//! holds no connection and has done nothing yet: shortly before the budget runs out it had better
//! be told so, 503 `draining` with `Retry-After`, than have its connection dropped without an
//! answer. [`Cutoff::cut`] is that moment: every request waiting in memory leaves at once with
//! [`LockError::ShuttingDown`], and none starts waiting after it. A request already at the
//! database (waiting in `GET_LOCK`, inside its transaction) is not touched: it finishes as it
//! would have, its commit before its release.
//!
//! [`LockQueue`]: super::LockQueue
//! [`Batches`]: super::Batches

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use tokio::sync::watch;

use super::{LockError, LockName};

/// Shared by an instance's queues; cloning it shares it.
#[derive(Clone)]
pub struct Cutoff(Arc<Inner>);

struct Inner {
    cut: watch::Sender<bool>,
    /// Requests answered [`LockError::ShuttingDown`], for the log line at exit.
    turned_away: AtomicUsize,
}

impl Default for Cutoff {
    fn default() -> Self {
        Self(Arc::new(Inner { cut: watch::channel(false).0, turned_away: AtomicUsize::new(0) }))
    }
}

impl Cutoff {
    /// From now on, every request waiting in memory for a lock leaves with
    /// [`LockError::ShuttingDown`], and none starts waiting. Cannot be undone: the instance is
    /// on its way out.
    pub fn cut(&self) {
        self.0.cut.send_replace(true);
    }

    pub fn is_cut(&self) -> bool {
        *self.0.cut.borrow()
    }

    /// Requests turned away so far.
    pub fn turned_away(&self) -> usize {
        self.0.turned_away.load(Ordering::Relaxed)
    }

    /// The error a request waiting for `name` leaves with, counted.
    pub fn turn_away(&self, name: LockName) -> LockError {
        self.0.turned_away.fetch_add(1, Ordering::Relaxed);
        LockError::ShuttingDown { name }
    }

    /// Resolves once [`cut`](Self::cut) (at once if it already was).
    pub async fn reached(&self) {
        let mut cut = self.0.cut.subscribe();
        // The sender lives as long as `self`: waiting cannot fail.
        let _ = cut.wait_for(|cut| *cut).await;
    }

    /// `wait`'s outcome, or `None` when the cutoff comes first (`wait` is then dropped, which
    /// takes the request out of whatever it waited in). The cutoff is looked at first: a request
    /// whose turn comes in the same instant leaves all the same, since what it would start now
    /// might outlast the shutdown budget.
    pub async fn or_cut<T>(&self, wait: impl Future<Output = T>) -> Option<T> {
        let (mut wait, mut cut) = (pin!(wait), pin!(self.reached()));
        std::future::poll_fn(|cx| {
            if cut.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            wait.as_mut().poll(cx).map(Some)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[actix_web::test]
    async fn a_wait_ends_at_the_cutoff_and_none_starts_after_it() {
        let cutoff = Cutoff::default();
        let never = std::future::pending::<()>();
        let cutter = cutoff.clone();
        actix_web::rt::spawn(async move { cutter.cut() });
        assert_eq!(cutoff.or_cut(never).await, None, "the pending wait ends at the cutoff");
        assert!(cutoff.is_cut());
        let ready = cutoff.or_cut(async { 7 }).await;
        assert_eq!(ready, None, "after the cutoff even a ready wait is not started");
        let fresh = Cutoff::default();
        let slept = fresh.or_cut(actix_web::rt::time::sleep(Duration::from_millis(1))).await;
        assert_eq!(slept, Some(()), "without a cutoff the wait runs to its end");
    }
}
