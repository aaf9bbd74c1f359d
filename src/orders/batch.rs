//! The coalesced path of orders: many single-line orders of one product in one transaction,
//! each decided as if alone ([`order_batch`]). `super::coalesce` gathers the orders that queued
//! behind one another; an order alone runs the lesson, [`super::service::place_order`]. Both
//! decide with [`available_under_lock`] and write with `record_orders`, so whatever changes
//! what "available" means changes it for both.

use std::time::Instant;

use super::OrderError;
use super::model::CartLine;
use super::service::{
    Catalog, NewOrder, OrderView, Rates, Sellable, available_under_lock, bad_batch, record_orders, retried,
    take,
};
use crate::db::{DbConn, DbPool};
use crate::idempotency::{Claim, Once};
use crate::inventory::model::Quantity;
use crate::locking::retry::RetryPolicy;
use crate::metrics::{self, Family};
use crate::wire::answers::Declared;

/// One single-line order of a coalesced batch: who, how many of the batch's product, and the
/// request's idempotency key if it sent one.
#[derive(Clone, Debug)]
pub struct BatchedOrder {
    pub user_id: i64,
    pub quantity: Quantity,
    pub once: Option<Once>,
}

impl BatchedOrder {
    /// The order of `user_id` for the one line of `line`.
    pub fn new(user_id: i64, line: CartLine, once: Option<Once>) -> Self {
        Self { user_id, quantity: line.quantity, once }
    }
}

/// A coalesced batch's answers, in arrival order, and the attempts its one transaction took.
pub struct Batched {
    pub answers: Vec<Result<OrderView, OrderError>>,
    pub attempts: u32,
}

/// Coalescing, the layer that sells to many orders at once (`orders::coalesce` gathers them):
/// the single-line orders of `orders`, in arrival order, for one product, in ONE transaction —
/// one lock of the stock row, one decrement, one commit, and the orders written with four
/// statements for all of them, instead of all of it once per order. Every order still gets the
/// answer it would have got alone in that order: sold, or refused with the `available` it would
/// have seen then.
///
/// 1. Lock all the users' rows, in ascending id ([`crate::auth::quota::lock_users`]): a user
///    ordering elsewhere waits, and each user's rate is counted as if alone.
/// 2. Read the product and the users' orders of the last minute (plain reads).
/// 3. Lock the stock row once: [`available_under_lock`].
/// 4. Decide each order in arrival order, each seeing the ones before it ([`Decide::order`]): the
///    answer stored under its idempotency key if it has one, else its rate, the product, then
///    the stock left.
/// 5. Write the orders sold ([`record_orders`]), take their units from the stock row in one
///    `UPDATE`, store the keyed orders' answers; 6. COMMIT.
///
/// After a deadlock the whole batch runs again, as [`place_order`] does, and the deadlock is kept
/// as evidence ("order batch"). The outer error is what every order of the batch would have
/// met anyway (a row lock held past its timeout, a lost connection); the coalescer then lets
/// each order try alone, within its own deadline.
pub fn order_batch(
    pool: &DbPool,
    policy: &RetryPolicy,
    product_id: i64,
    orders: &[BatchedOrder],
    max_per_minute: u32,
) -> Result<Batched, OrderError> {
    if orders.is_empty() || orders.len() > super::coalesce::MAX_BATCH {
        return Err(bad_batch());
    }
    let attempt = |conn: &mut DbConn| {
        crate::db::transaction(conn, |conn| sell_batch(conn, product_id, orders, max_per_minute)) // 6. COMMIT
    };
    let placed = |answers: &Vec<Result<OrderView, OrderError>>, attempts| {
        let placed = answers.iter().filter(|a| a.is_ok()).count();
        format!("retried: {placed} of {} orders placed on attempt {attempts}", answers.len())
    };
    let (answers, attempts) = retried(pool, policy, "order batch", attempt, placed)?;
    Ok(Batched { answers, attempts })
}

/// Steps 1 to 5 of [`order_batch`], in its transaction: every order's answer, in arrival order.
/// The error is the transaction's (a statement failed), which every order would have met.
fn sell_batch(
    conn: &mut DbConn,
    product_id: i64,
    orders: &[BatchedOrder],
    max_per_minute: u32,
) -> Result<Vec<Result<OrderView, OrderError>>, OrderError> {
    // 1. The users' rows, first.
    let users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    crate::auth::quota::lock_users(conn, &users)?;
    // 2. The product and the users' rates.
    let catalog = Catalog::read(conn, &[product_id])?;
    let rates = Rates::read(conn, &users)?;
    // 3. The stock row, once for the batch (a product that does not exist has none).
    let locking = Instant::now();
    let Sellable { available, held } = match catalog.name(product_id) {
        Ok(_) => available_under_lock(conn, product_id)?,
        Err(_) => Sellable { available: 0, held: 0 },
    };
    metrics::waited(Family::Row, "stock", locking.elapsed());
    // 4. Each order in arrival order, as if alone.
    let mut decide = Decide { product_id, catalog, rates, available, held, max_per_minute, sold: Vec::new() };
    let mut decisions: Vec<Decision> = Vec::with_capacity(orders.len());
    for order in orders {
        let decision = match resent_in(orders, &decisions, order) {
            true => Decision::Resent,
            false => decide.order(conn, order)?,
        };
        decisions.push(decision);
    }
    // 5. Write what was sold, take it from the stock row, store the keyed answers.
    let units = decide.sold.iter().flat_map(|o| &o.lines).map(|l| l.quantity.unsigned_abs()).sum();
    let mut placed = record_orders(conn, decide.sold)?.into_iter();
    if units > 0 {
        take(conn, product_id, units)?;
    }
    let mut answers = Vec::with_capacity(orders.len());
    for (order, decision) in orders.iter().zip(decisions) {
        let answer = match decision {
            Decision::Answered(answer) => answer,
            Decision::Decided(outcome) => {
                let answer = match outcome {
                    // Sold orders were written in arrival order: the next one written is this one.
                    Outcome::Sold => Ok(placed.next().ok_or_else(bad_batch)?),
                    Outcome::Refused(refused) => Err(refused),
                };
                if let Some(once) = &order.once {
                    once.answer(conn, &answer)?;
                }
                answer
            }
            Decision::Resent => match order.once.as_ref().map(|once| once.claim(conn)).transpose()? {
                Some(Claim::Stored(answer)) => answer,
                Some(Claim::Refused(refused)) => Err(refused.into()),
                Some(Claim::Fresh) | None => return Err(bad_batch()),
            },
        };
        answers.push(answer);
    }
    Ok(answers)
}

/// Whether `order` resends the key of an earlier order of the batch whose answer is yet to be
/// stored (decided under its key, `decisions` so far): it is then answered from that answer,
/// once stored, as any resend is.
fn resent_in(orders: &[BatchedOrder], decisions: &[Decision], order: &BatchedOrder) -> bool {
    let Some(once) = &order.once else { return false };
    orders.iter().zip(decisions).any(|(earlier, decided)| {
        matches!(decided, Decision::Decided(_)) && earlier.once.as_ref().is_some_and(|e| e.same_key(once))
    })
}

/// What a batch decided for one of its orders, before anything of it is written.
enum Decision {
    /// Answered with nothing to store: a refusal without a key, a stored answer, a key bound to
    /// another request.
    Answered(Result<OrderView, OrderError>),
    /// Decided (under the order's key, if it has one, claimed by this transaction): its answer
    /// is known, and stored under the key, once the batch's sold orders are written.
    Decided(Outcome),
    /// The key of an earlier order of this batch, sent again: that order's answer, once stored.
    Resent,
}

/// An order's outcome: sold (written with the batch's other sold orders), or refused.
enum Outcome {
    Sold,
    Refused(OrderError),
}

/// Step 4 of [`order_batch`]: what its orders are decided against, each seeing the ones before
/// it.
struct Decide {
    product_id: i64,
    catalog: Catalog,
    rates: Rates,
    /// What the stock row had ([`available_under_lock`]), less what the batch has sold so far.
    available: u32,
    /// Units in live checkout holds, which no order of the batch may take.
    held: u32,
    max_per_minute: u32,
    /// The orders sold so far, in arrival order: written together ([`record_orders`]).
    sold: Vec<NewOrder>,
}

impl Decide {
    /// Decides the next order in arrival order as [`place_order`] would alone: the answer stored
    /// under its key (claimed here, in this transaction), else its rate, the product and the
    /// stock left. The error is the transaction's (a statement failed).
    fn order(&mut self, conn: &mut DbConn, order: &BatchedOrder) -> Result<Decision, OrderError> {
        if let Some(once) = &order.once {
            match once.claim(conn)? {
                Claim::Fresh => {}
                Claim::Stored(answer) => return Ok(Decision::Answered(answer)),
                Claim::Refused(refused) => return Ok(Decision::Answered(Err(refused.into()))),
            }
        }
        Ok(match (self.sell(order), &order.once) {
            (Outcome::Refused(refused), None) => Decision::Answered(Err(refused)),
            // A refusal that is no answer (too many orders a minute) is not stored: alone, its
            // transaction would have rolled the key's claim back.
            (Outcome::Refused(passing), Some(once)) if !passing.is_kept() => {
                once.unclaim(conn)?;
                Decision::Answered(Err(passing))
            }
            (outcome, _) => Decision::Decided(outcome),
        })
    }

    /// The rules, with nothing written yet: the user's rate, the product, the stock left.
    fn sell(&mut self, order: &BatchedOrder) -> Outcome {
        if let Err(too_fast) = self.rates.check(order.user_id, self.max_per_minute) {
            return Outcome::Refused(too_fast);
        }
        let line = match self.catalog.line(self.product_id, order.quantity) {
            Ok(line) => line,
            Err(unknown) => return Outcome::Refused(unknown),
        };
        let requested = order.quantity.get();
        if self.available < requested {
            let (product_id, name, available, held) = (self.product_id, line.name, self.available, self.held);
            return Outcome::Refused(OrderError::InsufficientStock {
                product_id,
                name,
                requested,
                available,
                held,
            });
        }
        self.available -= requested;
        let created_at = crate::db::now_micros();
        self.rates.placed(order.user_id, created_at);
        self.sold.push(NewOrder { user_id: order.user_id, created_at, lines: vec![line] });
        Outcome::Sold
    }
}
