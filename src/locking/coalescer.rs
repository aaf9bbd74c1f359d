//! A layer in front of a lesson function: a request alone at its key runs that function itself;
//! requests that queue for one key are decided together, one lock, one transaction, one commit.
//!
//! The hazard it answers: on a hot key (a popular day, a flash-sale product) every request takes
//! its own lock, transaction and commit, one after another, and the key is capped at one commit
//! (one disk flush) per request however many people wait. Databases built for flash sales solve
//! this inside the server (one lock, many pending updates, one commit); this does it in the
//! application, on a stock server.
//!
//! What a feature brings is [`Serve`]: its lesson function for one request
//! ([`Serve::one`], `bookings::service::book`, `orders::service::place_order`) and its batch
//! function for several ([`Serve::batch`]), which decides each request in arrival order as if it
//! ran alone. The rest is the same for every feature and lives here:
//! - Requests wait in memory per key ([`Batches`]), holding no connection and no thread. The
//!   first to arrive at an idle key starts the key's drainer, a task of its own (a client that
//!   disconnects cannot strand the requests behind it), which takes the waiting requests in
//!   arrival order, at most `max_batch` at a time, until the key's queue is empty.
//! - A drainer that takes **one** request runs the lesson function for it: a request that
//!   found nobody waiting sends exactly the statements the lesson shows. Only requests that
//!   queued behind one another form a batch.
//! - A request whose deadline passes while it is still queued leaves with 503 `busy`, one still
//!   queued when a stopping instance reaches its [`Cutoff`] with 503 `draining`; once a drainer
//!   has taken it, its answer is on the way.
//! - A batch that could not run as a whole (the lock stayed held past its deadline, the pool had
//!   no connection) hands each request back, to run the lesson function on its own with what is
//!   left of its wait. A batch whose connection was lost is the exception: lost at its COMMIT it
//!   may have committed, and its requests tried again could book or sell twice, so each is
//!   answered [`Serve::lost_in_batch`] (a keyed resend then finds its stored answer, if the
//!   batch did commit).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Batches, Cutoff, LockError, LockName};

/// What a feature does with the requests of one key.
pub trait Serve: 'static {
    /// What the feature needs of one request (kept by the request too, should it run alone).
    type Request: Clone + 'static;
    /// A granted request's answer.
    type Answer: 'static;
    /// A refusal, or what kept a request or a batch from being decided.
    type Error: From<LockError> + std::fmt::Display + 'static;

    /// The lesson function: `request` on its own, within `wait`.
    fn one(
        &self,
        name: LockName,
        request: Self::Request,
        wait: Duration,
    ) -> impl Future<Output = Result<Self::Answer, Self::Error>>;

    /// Two or more requests of the key `name`, decided in arrival order in one transaction,
    /// each as if it ran alone, by `deadline` (the earliest of theirs). The outer error is the
    /// batch's: nothing of it was decided.
    fn batch(
        &self,
        name: LockName,
        requests: Vec<Self::Request>,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Answer<Self>>, Self::Error>>;

    /// Whether a batch's failure may hide its commit (a connection lost at COMMIT).
    fn may_have_committed(error: &Self::Error) -> bool;

    /// The answer to a request whose batch may have committed without it being told.
    fn lost_in_batch() -> Self::Error;

    /// Records how many requests a drainer took at once (one is a request run alone).
    fn observe_batch(size: usize);

    /// Records a request that left the queue because its wait ran out.
    fn observe_timed_out_queued(_name: &LockName) {}
}

/// One request's answer.
pub type Answer<S> = Result<<S as Serve>::Answer, <S as Serve>::Error>;

/// The requests of one feature, queued per key, in one app instance.
pub struct Coalescer<S: Serve> {
    queues: Batches<Waiter<S>>,
    serve: S,
}

struct Waiter<S: Serve> {
    request: S::Request,
    deadline: Instant,
    reply: oneshot::Sender<Reply<S>>,
}

/// What the drainer tells a queued request.
enum Reply<S: Serve> {
    /// Its own answer, alone or from its batch.
    Decided(Answer<S>),
    /// Its batch as a whole could not run: run alone, with what is left of its own wait.
    Alone,
    /// Its batch's connection was lost: it may have committed, so it is not tried again.
    Lost,
}

impl<S: Serve> Coalescer<S> {
    /// `max_batch`: the most requests one transaction decides; `cutoff`: the instance's
    /// (`LockQueue::cutoff`), when the requests still queued here are turned away.
    pub fn new(serve: S, max_batch: usize, cutoff: Cutoff) -> Self {
        Self { queues: Batches::new(max_batch, cutoff), serve }
    }

    /// What the feature serves with.
    pub fn serving(&self) -> &S {
        &self.serve
    }

    /// Decides `request` for the key `name`: alone if nobody is queued for it, or in the
    /// key's next batch. `wait` bounds the time queued here.
    pub async fn serve(self: &Arc<Self>, name: LockName, request: S::Request, wait: Duration) -> Answer<S> {
        if self.queues.is_cut() {
            return Err(self.queues.turn_away(&name).into());
        }
        let deadline = Instant::now() + wait;
        let (reply, mut answer) = oneshot::channel();
        let joined = self.queues.join(&name, Waiter { request: request.clone(), deadline, reply });
        if joined.drain {
            actix_web::rt::spawn(Arc::clone(self).drain(name.clone()));
        }
        let reply = match self.queues.wait(&name, &joined, &mut answer, wait).await {
            Ok(reply) => reply,
            Err(left) => {
                if matches!(left, LockError::TimedOut { .. }) {
                    S::observe_timed_out_queued(&name);
                }
                return Err(left.into());
            }
        };
        match reply {
            Ok(Reply::Decided(answer)) => answer,
            Ok(Reply::Lost) => Err(S::lost_in_batch()),
            // The drainer always replies; a dropped sender means its task died (a panic).
            Ok(Reply::Alone) | Err(_) => {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err(LockError::TimedOut { name, waited: wait }.into());
                }
                self.serve.one(name, request, remaining).await
            }
        }
    }

    /// The drainer of one key: takes its queued requests until nobody waits.
    async fn drain(self: Arc<Self>, name: LockName) {
        // Should this task die (a panic, or its runtime stopping), dropping the drainer forgets
        // the key: the waiters' reply senders are dropped, and they go on alone.
        let mut drainer = self.queues.drainer(&name);
        while let Some(taken) = drainer.next_batch() {
            if self.queues.is_cut() {
                // The instance is stopping: this batch might outlast its budget; nothing of it
                // has started.
                for waiter in taken {
                    let _ = waiter.reply.send(Reply::Decided(Err(self.queues.turn_away(&name).into())));
                }
                continue;
            }
            let now = Instant::now();
            let (late, mut waiting): (Vec<_>, Vec<_>) = taken.into_iter().partition(|w| w.deadline <= now);
            for waiter in late {
                let busy = LockError::TimedOut { name: name.clone(), waited: Duration::ZERO };
                let _ = waiter.reply.send(Reply::Decided(Err(busy.into())));
            }
            match waiting.len() {
                0 => {}
                1 => {
                    S::observe_batch(1);
                    let Waiter { request, deadline, reply } = waiting.remove(0);
                    let wait = deadline.saturating_duration_since(Instant::now());
                    let _ = reply.send(Reply::Decided(self.serve.one(name.clone(), request, wait).await));
                }
                size => {
                    S::observe_batch(size);
                    self.decide_together(&name, waiting).await;
                }
            }
        }
    }

    /// One batch of two or more waiters.
    async fn decide_together(&self, name: &LockName, waiting: Vec<Waiter<S>>) {
        // The earliest deadline: the batch waits no longer than its most patient member could.
        let deadline = waiting.iter().map(|w| w.deadline).min().unwrap_or_else(Instant::now);
        let (requests, replies): (Vec<_>, Vec<_>) = waiting.into_iter().map(|w| (w.request, w.reply)).unzip();
        match self.serve.batch(name.clone(), requests, deadline).await {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Reply::Decided(answer));
                }
            }
            Err(e) => {
                let lost = S::may_have_committed(&e);
                let then = if lost { "each is answered 503" } else { "each tries alone" };
                log::info!("a batch for {name} could not run ({e}); {then}");
                for reply in replies {
                    let _ = reply.send(if lost { Reply::Lost } else { Reply::Alone });
                }
            }
        }
    }
}
