//! Coalesced bookings: a booking alone at its day runs the lesson ([`service::book`]); bookings
//! that queue for one hot day are decided together ([`batch::book_batch`]).
//!
//! Under the per-key queue, bookings of one popular day run strictly one after another, each
//! with its own `GET_LOCK`, transaction, commit and release: the day is capped at one commit
//! (one disk flush) per booking however many people are waiting. Here the requests for a day
//! queue in memory, holding no connection ([`crate::locking::Coalescer`]); the day's drainer
//! books a request it finds alone with [`service::book`], and the ones that queued behind each
//! other, at most [`MAX_BATCH`] at a time, with one lock and one transaction, each getting the
//! answer it would have got on its own in that order. With N instances, at most N batches per
//! day are at the server, and the named lock still serialises them.
//!
//! Only bookings without an idempotency key come here: a keyed one runs [`service::book`] on
//! its own (its stored answer belongs to one transaction of one request).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BookingError;
use super::model::{BookingDate, Reservation};
use super::{batch, service};
use crate::auth::session::Ticket;
use crate::db::OffExecutor;
use crate::infra::Infra;
use crate::locking::{self, Cutoff, LockName, LockQueue, Serve};

/// Most bookings decided in one transaction: large enough to absorb a burst, small enough that
/// one transaction's row locks and duration stay short.
pub const MAX_BATCH: usize = 32;

/// This instance's bookings, queued per day.
pub type Coalescer = locking::Coalescer<Days>;

/// Builds the instance's coalescer of bookings. `max_future`: `MAX_FUTURE_BOOKINGS_PER_USER`,
/// checked for each request of a batch as if it ran alone; `cutoff`: the instance's
/// (`LockQueue::cutoff`).
pub fn coalescer(db: OffExecutor, locks: Arc<LockQueue>, max_future: u32, cutoff: Cutoff) -> Coalescer {
    locking::Coalescer::new(Days { db, locks, max_future }, MAX_BATCH, cutoff)
}

/// Books `resource_id` on `date` for the user of `ticket`: alone, or in the day's next batch.
/// `wait` bounds the time queued.
pub async fn book(
    coalescer: &Arc<Coalescer>,
    wait: Duration,
    ticket: Ticket,
    resource_id: i64,
    date: BookingDate,
) -> Result<Reservation, BookingError> {
    let name = coalescer.serving().db.pool().names().booking(resource_id, date.day());
    coalescer.serve(name, Request { ticket, resource_id, date }, wait).await
}

/// How bookings are served, per day.
pub struct Days {
    db: OffExecutor,
    locks: Arc<LockQueue>,
    max_future: u32,
}

/// One queued booking.
#[derive(Clone)]
pub struct Request {
    ticket: Ticket,
    resource_id: i64,
    date: BookingDate,
}

impl Serve for Days {
    type Request = Request;
    type Answer = Reservation;
    type Error = BookingError;

    /// The lesson, after this instance's turn at the day's lock.
    async fn one(
        &self,
        name: LockName,
        request: Request,
        wait: Duration,
    ) -> Result<Reservation, BookingError> {
        let turn = self.locks.turn(name, wait).await?;
        let max_future = self.max_future;
        let Request { ticket, resource_id, date } = request;
        self.db
            .with_pool(move |pool| service::book(pool, turn, &ticket, resource_id, date, None, max_future))
            .await
    }

    /// The drainer is this instance's one user of the day's lock for these requests, so it
    /// takes no turn in the per-key queue, only a place in the waiting budget.
    async fn batch(
        &self,
        name: LockName,
        requests: Vec<Request>,
        deadline: Instant,
    ) -> Result<Vec<Result<Reservation, BookingError>>, BookingError> {
        let Some(&Request { resource_id, date, .. }) = requests.first() else {
            return Ok(Vec::new());
        };
        let turn = self.locks.turn_queued_elsewhere(name, deadline);
        let tickets: Vec<Ticket> = requests.into_iter().map(|r| r.ticket).collect();
        let max_future = self.max_future;
        self.db
            .with_pool(move |pool| batch::book_batch(pool, turn, resource_id, date, &tickets, max_future))
            .await
    }

    fn may_have_committed(error: &BookingError) -> bool {
        matches!(error, BookingError::Infra(e) if e.may_have_committed())
    }

    fn lost_in_batch() -> BookingError {
        Infra::LostInBatch.into()
    }

    fn observe_batch(size: usize) {
        crate::metrics::record(|m| m.booking_batch_size.observe(size as f64));
    }

    fn observe_timed_out_queued(name: &LockName) {
        crate::metrics::record(|m| {
            m.named_lock_acquisitions.with_label_values(&[name.scope(), "timed_out_queued"]).inc()
        });
    }
}
