//! Coalesced bookings: the request at a hot day's lock serves the ones queued behind it.
//!
//! Under the per-key queue, bookings of one popular day run strictly one after another, each
//! with its own `GET_LOCK`, transaction, commit and release: the day is capped at one commit
//! (one disk flush) per booking however many people are waiting. Databases built for flash
//! sales solve this inside the server (one lock, many pending updates, one commit); this does
//! it in the application, on a stock server.
//!
//! Requests for a day queue in memory ([`Batches`]), holding no connection. The first to arrive
//! starts a drainer for that day, which takes the waiting requests in arrival order, at most
//! [`MAX_BATCH`] at a time, and books them with one lock and one transaction
//! (`service::book_batch`); each request gets the answer it would have got on its own in that
//! order. Requests that arrive meanwhile form the next batch. With N instances, at most N
//! batches per day are at the server, and the named lock still serialises them.
//!
//! A request whose deadline (`LOCK_WAIT_SECS`) passes while it is still queued leaves the
//! queue with 503 `busy`, and one still queued when a stopping instance reaches its cutoff
//! (`locking::Cutoff`) with 503 `draining`; once a batch has taken it, its answer is on the way. The drainer runs
//! as a task of its own, so a client that disconnects cannot strand the requests behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::BookingError;
use super::model::{BookingDate, Reservation};
use super::service;
use crate::auth::session::Ticket;
use crate::db::OffExecutor;
use crate::infra::Infra;
use crate::locking::{Batches, Cutoff, LockError, LockName, LockQueue};

/// Most bookings decided in one transaction: large enough to absorb a burst, small enough that
/// one transaction's row locks and duration stay short.
pub const MAX_BATCH: usize = 32;

type Answer = Result<Reservation, BookingError>;

/// What the drainer tells a queued request.
enum Reply {
    /// The batch decided this request: its own answer.
    Decided(Answer),
    /// The batch as a whole could not run (the lock stayed held past the batch's deadline, the
    /// pool had no connection, …): try alone, with what is left of this request's own wait.
    Alone,
    /// The batch's connection was lost: it may have committed, so no request of it tries again
    /// (as in `orders::coalesce`; here a second try would answer `already_booked` to a booking
    /// that was made).
    Lost,
}

struct Waiter {
    /// Whose booking (checked in the batch's read).
    ticket: Ticket,
    deadline: Instant,
    reply: oneshot::Sender<Reply>,
}

/// One per app instance.
pub struct Coalescer {
    /// The requests waiting per day (`LockName` of the day's lock).
    days: Batches<Waiter>,
    /// `MAX_FUTURE_BOOKINGS_PER_USER`, checked for each request of a batch as if it ran alone.
    max_future: u32,
}

impl Coalescer {
    /// `cutoff`: the instance's (`LockQueue::cutoff`): a stopping instance turns away the
    /// bookings still queued here.
    pub fn new(max_future: u32, cutoff: Cutoff) -> Self {
        Self { days: Batches::new(MAX_BATCH, cutoff), max_future }
    }

    /// Books `resource_id` on `date` for the user of `ticket`, in the day's next batch.
    pub async fn book(
        self: &Arc<Self>,
        db: &OffExecutor,
        locks: &Arc<LockQueue>,
        wait: Duration,
        ticket: Ticket,
        resource_id: i64,
        date: BookingDate,
    ) -> Answer {
        let name = db.pool().names().booking(resource_id, date.day());
        if self.days.is_cut() {
            return Err(self.days.turn_away(&name).into());
        }
        let deadline = Instant::now() + wait;
        let (reply, mut answer) = oneshot::channel();
        let joined = self.days.join(&name, Waiter { ticket: ticket.clone(), deadline, reply });
        if joined.drain {
            let drain = Drain {
                coalescer: Arc::clone(self),
                db: db.clone(),
                locks: Arc::clone(locks),
                name: name.clone(),
                resource_id,
                date,
                max_future: self.max_future,
            };
            actix_web::rt::spawn(drain.run());
        }
        // Still queued when the wait runs out: "busy"; at the cutoff: "draining". Already in a
        // batch: its answer.
        let reply = match self.days.wait(&name, &joined, &mut answer, wait).await {
            Ok(reply) => reply,
            Err(left) => {
                if matches!(left, LockError::TimedOut { .. }) {
                    crate::metrics::record(|m| {
                        m.named_lock_acquisitions.with_label_values(&["book", "timed_out_queued"]).inc()
                    });
                }
                return Err(left.into());
            }
        };
        match reply {
            Ok(Reply::Decided(answer)) => answer,
            Ok(Reply::Lost) => Err(Infra::LostInBatch.into()),
            // The drainer always replies; a dropped sender means its task died (a panic).
            Ok(Reply::Alone) | Err(_) => {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err(LockError::TimedOut { name, waited: wait }.into());
                }
                let turn = locks.turn(name, remaining).await?;
                let max_future = self.max_future;
                db.with_pool(move |pool| {
                    service::book(pool, turn, &ticket, resource_id, date, None, max_future)
                })
                .await
            }
        }
    }
}

/// The drainer of one day: batches until the day's queue is empty.
struct Drain {
    coalescer: Arc<Coalescer>,
    db: OffExecutor,
    locks: Arc<LockQueue>,
    name: LockName,
    resource_id: i64,
    date: BookingDate,
    max_future: u32,
}

impl Drain {
    async fn run(self) {
        // Should this task die (a panic, or its runtime stopping), dropping the drainer forgets
        // the day: the waiters' reply senders are dropped, and they go on alone.
        let mut drainer = self.coalescer.days.drainer(&self.name);
        while let Some(batch) = drainer.next_batch() {
            let days = &self.coalescer.days;
            if days.is_cut() {
                // The instance is stopping: this batch might outlast its budget; nothing of it
                // has started.
                for waiter in batch {
                    let _ = waiter.reply.send(Reply::Decided(Err(days.turn_away(&self.name).into())));
                }
                continue;
            }
            let (late, batch): (Vec<Waiter>, Vec<Waiter>) =
                batch.into_iter().partition(|w| w.deadline <= Instant::now());
            for waiter in late {
                let busy = LockError::TimedOut { name: self.name.clone(), waited: Duration::ZERO };
                let _ = waiter.reply.send(Reply::Decided(Err(busy.into())));
            }
            if batch.is_empty() {
                continue;
            }
            crate::metrics::record(|m| m.booking_batch_size.observe(batch.len() as f64));
            // Arrival order: the earliest deadline first, so the batch waits no longer than
            // its most patient member could.
            let deadline = batch.iter().map(|w| w.deadline).min().unwrap_or_else(Instant::now);
            let turn = self.locks.turn_queued_elsewhere(self.name.clone(), deadline);
            let tickets: Vec<Ticket> = batch.iter().map(|w| w.ticket.clone()).collect();
            let (resource_id, date, max_future) = (self.resource_id, self.date, self.max_future);
            let decided = self
                .db
                .with_pool(move |pool| {
                    service::book_batch(pool, turn, resource_id, date, &tickets, max_future)
                })
                .await;
            match decided {
                Ok(answers) => {
                    for (waiter, answer) in batch.into_iter().zip(answers) {
                        let _ = waiter.reply.send(Reply::Decided(answer));
                    }
                }
                Err(e) => {
                    let lost = matches!(&e, BookingError::Infra(e) if e.may_have_committed());
                    let then = if lost { "each is answered 503" } else { "each tries alone" };
                    log::info!("a booking batch for {} could not run ({e}); {then}", self.name);
                    for waiter in batch {
                        let _ = waiter.reply.send(if lost { Reply::Lost } else { Reply::Alone });
                    }
                }
            }
        }
    }
}
