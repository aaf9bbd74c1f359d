//! Coalesced orders: on a hot product, one transaction sells to the orders queued behind it.
//!
//! In a flash sale every order is for the same product, and every order's transaction queues on
//! that product's stock row (`SELECT … FOR UPDATE`): one lock, one decrement, one commit (one
//! disk flush) per order, strictly one after another, however many people are waiting. Servers
//! built for flash sales queue the pending updates of a hot row inside the server and apply many
//! under one lock and one commit; this does the same in the application, on a stock server.
//!
//! Single-line orders queue here per product, in memory, holding no connection
//! ([`crate::locking::Coalescer`]). The product's drainer places an order it finds alone with
//! the lesson, [`service::place_order`], and the ones that queued behind each other, at most
//! [`MAX_BATCH`] at a time, in one transaction (`batch::order_batch`): one lock of the stock
//! row, each order decided as if alone (sold, or refused with the `available` it would have
//! seen), one decrement for all, one commit. With N instances, at most N batches per product are
//! at the server, and the stock row's lock serialises them.
//!
//! What keeps the one-at-a-time path, and why:
//! - **Carts of several lines** (and all orders with `ORDER_COALESCING=false`). A batch is keyed
//!   by one stock row. An order of several products would need every row of its cart locked in
//!   ascending id inside the batch's transaction, and then batches of different products would
//!   have to merge into one transaction over the union of their rows, or lock rows another
//!   batch is deciding — and a cart's shortfall on any line refuses all its lines. The single
//!   order path does exactly that, correctly and simply; a flash sale's orders are single-line.
//! - **A batch that could not run** (no pooled connection in time, a row lock held past its
//!   timeout): each of its orders tries alone, with what is left of its own wait; with nothing
//!   left it is answered 503 `busy`. A batch whose connection was lost is the exception: lost
//!   at its COMMIT, it may have been placed, and its orders tried again would be placed twice,
//!   so each is answered 503 `unavailable`, as an order alone is (a keyed resend then finds the
//!   answer stored, if the batch did commit).
//!
//! Idempotency keys ride along. Real flash-sale clients send one (every catalog form does):
//! sending keyed orders around the batch would leave exactly the hot orders uncoalesced. Each
//! keyed order claims its key and stores its answer inside the batch's transaction, in arrival
//! order (`idempotency::once_among_others`): the answer commits with the order, a resend gets
//! it back, and a resend in the same batch finds the first one's answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::OrderError;
use super::batch::{self, BatchedOrder};
use super::model::Cart;
use super::service::{self, Placed};
use crate::db::OffExecutor;
use crate::idempotency::Once;
use crate::infra::Infra;
use crate::locking::retry::RetryPolicy;
use crate::locking::{self, Cutoff, LockName, Serve};

/// Most orders decided in one transaction: large enough to absorb a burst, small enough that one
/// transaction stays short (and the users' row locks it takes, one statement's list).
pub const MAX_BATCH: usize = 32;

/// This instance's single-line orders, queued per product.
pub type Coalescer = locking::Coalescer<Products>;

/// Builds the instance's coalescer of orders. `max_per_minute`: `MAX_ORDERS_PER_MINUTE_PER_USER`,
/// checked for each order of a batch as if it ran alone; `cutoff`: the instance's
/// (`LockQueue::cutoff`).
pub fn coalescer(db: OffExecutor, max_per_minute: u32, cutoff: Cutoff) -> Coalescer {
    locking::Coalescer::new(Products { db, max_per_minute }, MAX_BATCH, cutoff)
}

/// Places `cart` for `user_id`: a cart of one line alone or in its product's next batch, any
/// other cart on its own (`service::place_order`). `wait` bounds the time queued here.
pub async fn order(
    coalescer: &Arc<Coalescer>,
    wait: Duration,
    user_id: i64,
    cart: Cart,
    once: Option<Once>,
) -> Result<Placed, OrderError> {
    let &[line] = cart.lines() else {
        return coalescer.serving().place_order(Request { user_id, cart, once }).await;
    };
    let name = coalescer.serving().db.pool().names().order(line.product_id);
    coalescer.serve(name, Request { user_id, cart, once }, wait).await
}

/// How orders are served, per product.
pub struct Products {
    db: OffExecutor,
    max_per_minute: u32,
}

/// One order.
#[derive(Clone)]
pub struct Request {
    user_id: i64,
    cart: Cart,
    once: Option<Once>,
}

impl Products {
    /// The lesson, off the async executor.
    async fn place_order(&self, request: Request) -> Result<Placed, OrderError> {
        let Request { user_id, cart, once } = request;
        let max_per_minute = self.max_per_minute;
        self.db
            .with_pool(move |pool| {
                service::place_order(
                    pool,
                    &RetryPolicy::default(),
                    user_id,
                    &cart,
                    once.as_ref(),
                    max_per_minute,
                )
            })
            .await
    }
}

impl Serve for Products {
    type Request = Request;
    type Answer = Placed;
    type Error = OrderError;

    /// The order's own transaction bounds its waits (row lock timeouts, the pool's checkout).
    async fn one(&self, _name: LockName, request: Request, _wait: Duration) -> Result<Placed, OrderError> {
        self.place_order(request).await
    }

    async fn batch(
        &self,
        _name: LockName,
        requests: Vec<Request>,
        _deadline: Instant,
    ) -> Result<Vec<Result<Placed, OrderError>>, OrderError> {
        let Some(&[line]) = requests.first().map(|r| r.cart.lines()) else {
            return Ok(Vec::new());
        };
        let orders: Vec<BatchedOrder> =
            requests.into_iter().map(|r| BatchedOrder::new(r.user_id, line, r.once)).collect();
        let max_per_minute = self.max_per_minute;
        let batched = self
            .db
            .with_pool(move |pool| {
                batch::order_batch(pool, &RetryPolicy::default(), line.product_id, &orders, max_per_minute)
            })
            .await?;
        let attempts = batched.attempts;
        Ok(batched.answers.into_iter().map(|answer| answer.map(|order| Placed { order, attempts })).collect())
    }

    fn may_have_committed(error: &OrderError) -> bool {
        matches!(error, OrderError::Infra(e) if e.may_have_committed())
    }

    fn lost_in_batch() -> OrderError {
        Infra::LostInBatch.into()
    }

    fn observe_batch(size: usize) {
        crate::metrics::record(|m| m.order_batch_size.observe(size as f64));
    }
}
