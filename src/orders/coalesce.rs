//! Coalesced orders: on a hot product, one transaction sells to the orders queued behind it.
//!
//! In a flash sale every order is for the same product, and every order's transaction queues on
//! that product's stock row (`SELECT … FOR UPDATE`): one lock, one decrement, one commit (one
//! disk flush) per order, strictly one after another, however many people are waiting. Servers
//! built for flash sales queue the pending updates of a hot row inside the server and apply many
//! under one lock and one commit; this does the same in the application, on a stock server.
//!
//! Single-line orders queue here per product, in memory, holding no connection
//! ([`Batches`](crate::locking::Batches)). The first to arrive at an idle product starts its
//! drainer, which takes the waiting orders in arrival order, at most [`MAX_BATCH`] at a time, and
//! places them in one transaction (`service::order_batch`): one lock of the stock row, each order
//! decided as if alone (sold, or refused with the `available` it would have seen), one decrement
//! for all, one commit. Orders that arrive meanwhile form the next batch. With N instances, at
//! most N batches per product are at the server, and the stock row's lock serialises them.
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
//!
//! An order whose deadline (`LOCK_WAIT_SECS`) passes while it is still queued leaves the queue
//! with 503 `busy`, and one still queued when a stopping instance reaches its cutoff
//! (`locking::Cutoff`) with 503 `draining`; once a batch has taken it, its answer is on the way. The drainer runs as a
//! task of its own, so a client that disconnects cannot strand the orders behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::OrderError;
use super::model::Cart;
use super::service::{self, BatchedOrder, Placed};
use crate::db::OffExecutor;
use crate::idempotency::Once;
use crate::infra::Infra;
use crate::locking::retry::RetryPolicy;
use crate::locking::{Batches, Cutoff, LockError, LockName};

/// Most orders decided in one transaction: large enough to absorb a burst, small enough that one
/// transaction stays short (and the users' row locks it takes, one statement's list).
pub const MAX_BATCH: usize = 32;

type Answer = Result<Placed, OrderError>;

/// What the drainer tells a queued order.
enum Reply {
    /// The batch decided this order: its own answer.
    Decided(Answer),
    /// The batch as a whole could not run: try alone, with what is left of this order's wait.
    Alone,
    /// The batch's connection was lost: it may have committed, so no order of it tries again.
    Lost,
}

struct Waiter {
    order: BatchedOrder,
    deadline: Instant,
    reply: oneshot::Sender<Reply>,
}

/// One per app instance.
pub struct Coalescer {
    /// The orders waiting per product (the product's `order` name, `LockNames::order`).
    products: Batches<Waiter>,
    /// `MAX_ORDERS_PER_MINUTE_PER_USER`, checked for each order of a batch as if it ran alone.
    max_per_minute: u32,
}

impl Coalescer {
    /// `cutoff`: the instance's (`LockQueue::cutoff`): a stopping instance turns away the orders
    /// still queued here.
    pub fn new(max_per_minute: u32, cutoff: Cutoff) -> Self {
        Self { products: Batches::new(MAX_BATCH, cutoff), max_per_minute }
    }

    /// Places `cart` for `user_id`: a cart of one line in its product's next batch, any other
    /// cart on its own (`service::place_order`). `wait` bounds the time queued here.
    pub async fn order(
        self: &Arc<Self>,
        db: &OffExecutor,
        wait: Duration,
        user_id: i64,
        cart: Cart,
        once: Option<Once>,
    ) -> Answer {
        let max_per_minute = self.max_per_minute;
        let &[line] = cart.lines() else {
            return alone(db, user_id, cart, once, max_per_minute).await;
        };
        let name = db.pool().names().order(line.product_id);
        if self.products.is_cut() {
            return Err(self.products.turn_away(&name).into());
        }
        let deadline = Instant::now() + wait;
        let (reply, mut answer) = oneshot::channel();
        let order = BatchedOrder::new(user_id, line, once.clone());
        let joined = self.products.join(&name, Waiter { order, deadline, reply });
        if joined.drain {
            let drain = Drain {
                coalescer: Arc::clone(self),
                db: db.clone(),
                name: name.clone(),
                product_id: line.product_id,
            };
            actix_web::rt::spawn(drain.run());
        }
        // Still queued when the wait runs out: "busy"; at the cutoff: "draining". Already in a
        // batch: its answer.
        let reply = self.products.wait(&name, &joined, &mut answer, wait).await?;
        match reply {
            Ok(Reply::Decided(answer)) => answer,
            Ok(Reply::Lost) => Err(Infra::LostInBatch.into()),
            // The drainer always replies; a dropped sender means its task died (a panic).
            Ok(Reply::Alone) | Err(_) => {
                if Instant::now() >= deadline {
                    return Err(LockError::TimedOut { name, waited: wait }.into());
                }
                alone(db, user_id, cart, once, max_per_minute).await
            }
        }
    }
}

/// The order on its own, the one-at-a-time path, off the async executor.
async fn alone(
    db: &OffExecutor,
    user_id: i64,
    cart: Cart,
    once: Option<Once>,
    max_per_minute: u32,
) -> Answer {
    db.with_pool(move |pool| {
        service::place_order(pool, &RetryPolicy::default(), user_id, &cart, once.as_ref(), max_per_minute)
    })
    .await
}

/// The drainer of one product: batches until the product's queue is empty.
struct Drain {
    coalescer: Arc<Coalescer>,
    db: OffExecutor,
    name: LockName,
    product_id: i64,
}

impl Drain {
    async fn run(self) {
        // Should this task die (a panic, or its runtime stopping), dropping the drainer forgets
        // the product: the waiters' reply senders are dropped, and they go on alone.
        let mut drainer = self.coalescer.products.drainer(&self.name);
        while let Some(batch) = drainer.next_batch() {
            let products = &self.coalescer.products;
            if products.is_cut() {
                // The instance is stopping: this batch might outlast its budget; nothing of it
                // has started.
                for waiter in batch {
                    let _ = waiter.reply.send(Reply::Decided(Err(products.turn_away(&self.name).into())));
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
            crate::metrics::record(|m| m.order_batch_size.observe(batch.len() as f64));
            let (orders, replies): (Vec<BatchedOrder>, Vec<oneshot::Sender<Reply>>) =
                batch.into_iter().map(|w| (w.order, w.reply)).unzip();
            let (product_id, max_per_minute) = (self.product_id, self.coalescer.max_per_minute);
            let decided = self
                .db
                .with_pool(move |pool| {
                    service::order_batch(pool, &RetryPolicy::default(), product_id, &orders, max_per_minute)
                })
                .await;
            match decided {
                Ok(batched) => {
                    let attempts = batched.attempts;
                    for (reply, answer) in replies.into_iter().zip(batched.answers) {
                        let answer = answer.map(|order| Placed { order, attempts });
                        let _ = reply.send(Reply::Decided(answer));
                    }
                }
                Err(e) => {
                    // Lost at its COMMIT, the batch may have been placed: trying its orders alone
                    // would place them twice. Lost earlier it was not, but the two look alike.
                    let lost = matches!(&e, OrderError::Infra(e) if e.may_have_committed());
                    let then = if lost { "each is answered 503" } else { "each tries alone" };
                    log::info!("an order batch for {} could not run ({e}); {then}", self.name);
                    for reply in replies {
                        let _ = reply.send(if lost { Reply::Lost } else { Reply::Alone });
                    }
                }
            }
        }
    }
}
