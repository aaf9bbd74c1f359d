//! Placing an order: lock, check, decrement, record — in one transaction, retried as a whole.
//!
//! Two ways in, the same steps. [`place_order`], the lesson: one order, of any cart, per
//! transaction. [`order_batch`], the coalesced path (`super::coalesce` gathers it): many
//! single-line orders of one product in one transaction, each decided as if alone. Both ask
//! [`available_under_lock`] what can be sold, under the stock row's lock, and write an order and
//! its ledger rows with [`record_order`]; so whatever changes what "available" means changes it
//! for both.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamp};
use serde::{Deserialize, Serialize};

use super::OrderError;
use super::model::{Cart, CartLine, Order};
use crate::db::cached::ListStatements;
use crate::db::conn::on_engine;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::idempotency::{self, Once};
use crate::inventory::model::{MovementReason, NewStockMovement, Quantity, on_hand_from_sql};
use crate::locking::retry::{LockConflict, MayConflict, RetryPolicy, retry_on_lock_conflict};
use crate::metrics::{self, Family};
use crate::schema::{order_lines, orders, products, stock_levels};

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderView {
    pub id: i64,
    #[serde(with = "crate::http::utc")]
    pub created_at: chrono::NaiveDateTime,
    pub total_cents: i64,
    pub lines: Vec<OrderLineView>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderLineView {
    pub product_id: i64,
    pub sku: String,
    pub name: String,
    pub quantity: i32,
    pub unit_price_cents: i64,
}

/// A placed order and how many attempts its transaction took.
pub struct Placed {
    pub order: OrderView,
    pub attempts: u32,
}

/// Places `cart` for `user_id`: either every line is taken from stock and recorded, or nothing
/// is (a shortfall answers 409 and leaves no trace). Runs the whole transaction again after a
/// deadlock, as `policy` allows; a lock wait timeout ends it at once
/// ([`crate::locking::retry`]). With an idempotency key (`once`), the
/// order is placed at most once per key: a resend gets the first answer back
/// ([`crate::idempotency`]).
///
/// One user places at most `max_per_minute` orders within any 60 seconds
/// (`MAX_ORDERS_PER_MINUTE_PER_USER`); past them the order is refused with
/// [`OrderError::TooFast`] and a `Retry-After`. Exact under concurrency: the transaction first
/// locks the user's row ([`crate::auth::quota`]), so the user's orders are counted and placed one
/// after another. A resend with an idempotency key gets its stored answer before the count.
pub fn place_order(
    pool: &DbPool,
    policy: &RetryPolicy,
    user_id: i64,
    cart: &Cart,
    once: Option<&Once>,
    max_per_minute: u32,
) -> Result<Placed, OrderError> {
    let placed = retried(pool, policy, "order", |conn| {
        crate::db::transaction(conn, |conn| {
            // First, before any read: see `crate::auth::quota`.
            crate::auth::quota::lock_users(conn, &[user_id])?;
            idempotency::once(conn, once, |conn| {
                Rates::read(conn, &[user_id])?.check(user_id, max_per_minute)?;
                take_from_stock(conn, user_id, cart)
            })
        })
        .and_then(std::convert::identity)
    })?;
    let (order, attempts) = placed.settled(|order, attempts| {
        format!("retried: order {} placed on attempt {attempts}", order.id)
    })?;
    Ok(Placed { order, attempts })
}

/// What a transaction run by [`retried`] came to, and the deadlocks it met on the way.
struct Retried<T> {
    conn: crate::db::PooledConn,
    result: Result<T, OrderError>,
    attempts: u32,
    /// The deadlock reports stored before each retry (`crate::deadlocks::capture`).
    evidence: Vec<i64>,
}

/// Runs `attempt` (one whole transaction) on one pooled connection, again after a deadlock as
/// `policy` allows. Each deadlock is kept as evidence for the admin (`crate::deadlocks`), as
/// seen by `seen_by`, read before the retry: the next deadlock on the server would overwrite it.
fn retried<T>(
    pool: &DbPool,
    policy: &RetryPolicy,
    seen_by: &str,
    mut attempt: impl FnMut(&mut DbConn) -> Result<T, OrderError>,
) -> Result<Retried<T>, OrderError> {
    let mut conn = pool.get()?;
    let mut evidence = Vec::new();
    let attempted = retry_on_lock_conflict(policy, || {
        let began = Instant::now();
        let result = attempt(&mut conn);
        // Row locks last until the transaction ends: from BEGIN to COMMIT is the longest they
        // can have been held.
        metrics::held(Family::Row, "stock", began.elapsed());
        if let Err(e) = &result
            && e.lock_conflict() == Some(LockConflict::Deadlock)
            && let Some(error) = e.database_error()
        {
            evidence.extend(crate::deadlocks::capture(&mut conn, pool.url(), seen_by, error));
        }
        result
    });
    Ok(Retried { conn, result: attempted.result, attempts: attempted.attempts, evidence })
}

impl<T> Retried<T> {
    /// The result and the attempts it took, once each deadlock's report says what became of
    /// the request (`placed` words a success).
    fn settled(mut self, placed: impl Fn(&T, u32) -> String) -> Result<(T, u32), OrderError> {
        for report in std::mem::take(&mut self.evidence) {
            let outcome = match &self.result {
                Ok(done) => placed(done, self.attempts),
                Err(e) => format!("retried: gave up after attempt {} ({e})", self.attempts),
            };
            crate::deadlocks::settle(&mut self.conn, report, &outcome);
        }
        Ok((self.result?, self.attempts))
    }
}

/// Names, SKUs and prices of the cart's products. Texts for 1, 4, 16 and [`Cart::MAX_LINES`]
/// products, so a connection caches four statements for every cart.
static CATALOG: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT id, sku, name, price_cents FROM products WHERE id IN ({list})",
        &[1, 4, 16, Cart::MAX_LINES],
    )
});

/// The products of an order (or a batch's one product) as this transaction read them: a
/// plain read, so the price is the one seen when the order was decided.
struct Catalog(Vec<(i64, String, String, i64)>);

impl Catalog {
    fn read(conn: &mut DbConn, product_ids: &[i64]) -> Result<Self, OrderError> {
        let (sql, ids) = CATALOG.padded(product_ids).ok_or(OrderError::Empty)?;
        Ok(Self(cached_sql::<(BigInt, Text, Text, BigInt)>(sql).bind_each::<BigInt, _>(ids).load(conn)?))
    }

    /// The product's name; a product that does not exist cannot be ordered.
    fn name(&self, product_id: i64) -> Result<&str, OrderError> {
        self.0
            .iter()
            .find(|(id, ..)| *id == product_id)
            .map(|(_, _, name, _)| name.as_str())
            .ok_or(OrderError::UnknownProduct(product_id))
    }

    /// The order line for `quantity` of `product_id`, at the price read.
    fn line(&self, product_id: i64, quantity: Quantity) -> Result<OrderLineView, OrderError> {
        let (_, sku, name, unit_price_cents) = self
            .0
            .iter()
            .find(|(id, ..)| *id == product_id)
            .ok_or(OrderError::UnknownProduct(product_id))?
            .clone();
        Ok(OrderLineView { product_id, sku, name, quantity: quantity.signed(), unit_price_cents })
    }
}

/// The users' orders of the last minute: how many, and when the oldest of them was placed.
/// `created_at` is written by the app's clock ([`record_order`]), so the window is measured by
/// it too. Sizes up to a coalesced batch's users (`coalesce::MAX_BATCH`); one user is the
/// one-at-a-time path.
static RECENT: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT user_id, COUNT(*), MIN(created_at) FROM orders \
         WHERE created_at > ? AND user_id IN ({list}) GROUP BY user_id",
        &[1, 4, 16, super::coalesce::MAX_BATCH],
    )
});

/// The window `MAX_ORDERS_PER_MINUTE_PER_USER` counts in.
const RATE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Each user's orders within the last minute, read once their rows are locked and kept up to date
/// as a batch places more ([`Rates::placed`]): each order is counted as if it ran alone, after
/// the ones before it.
struct Rates {
    now: NaiveDateTime,
    /// Per user: orders in the window, and the oldest of them. A user without any is missing.
    recent: HashMap<i64, (i64, NaiveDateTime)>,
}

impl Rates {
    /// Only ever run after the users' rows were locked ([`crate::auth::quota`]).
    fn read(conn: &mut DbConn, users: &[i64]) -> Result<Self, OrderError> {
        let now = crate::db::now_micros();
        let (sql, padded) = RECENT.padded(users).ok_or_else(bad_batch)?;
        let rows: Vec<(i64, i64, Option<NaiveDateTime>)> =
            cached_sql::<(BigInt, BigInt, Nullable<Timestamp>)>(sql)
                .bind::<Timestamp, _>(now - RATE_WINDOW)
                .bind_each::<BigInt, _>(padded)
                .load(conn)?;
        let recent =
            rows.into_iter().filter_map(|(user, count, oldest)| Some((user, (count, oldest?)))).collect();
        Ok(Self { now, recent })
    }

    /// Refuses the user's next order when they placed `max` within the last minute already,
    /// saying when the oldest of them leaves it.
    fn check(&self, user_id: i64, max: u32) -> Result<(), OrderError> {
        match self.recent.get(&user_id) {
            Some(&(recent, oldest)) if recent >= i64::from(max) => {
                let left = (oldest + RATE_WINDOW - self.now).num_milliseconds();
                // Whole seconds, rounded up, and at least one: a client waiting that long is let in.
                let retry_after = u32::try_from((left + 999) / 1000).unwrap_or(1).max(1);
                Err(OrderError::TooFast { max, retry_after })
            }
            _ => Ok(()),
        }
    }

    /// Counts an order the user has just placed, at `at`.
    fn placed(&mut self, user_id: i64, at: NaiveDateTime) {
        let (recent, oldest) = self.recent.entry(user_id).or_insert((0, at));
        *recent += 1;
        *oldest = (*oldest).min(at);
    }
}

/// What can be sold of `product_id` now, read under the lock of its stock row
/// (`SELECT … FOR UPDATE`), which the caller's transaction keeps until it ends: nobody else can
/// sell from the row meanwhile, so what this says stays true until COMMIT. A product never
/// received has no row: it has nothing to sell.
///
/// Both paths decide with this one answer: [`take_from_stock`] for each line of an order,
/// [`order_batch`] once for its whole batch, whose orders then take from it in arrival order.
pub fn available_under_lock(conn: &mut DbConn, product_id: i64) -> QueryResult<u32> {
    let row = stock_levels::table.find(product_id).select(stock_levels::on_hand);
    Ok(on_engine!(conn, |c| row.for_update().first::<i32>(c)).optional()?.map_or(0, on_hand_from_sql))
}

const TAKE: &str = "UPDATE stock_levels SET on_hand = on_hand - ? WHERE product_id = ?";
const INSERT_ORDER: &str = "INSERT INTO orders (user_id, total_cents, created_at) VALUES (?, ?, ?)";
const INSERT_LINE: &str =
    "INSERT INTO order_lines (order_id, product_id, quantity, unit_price_cents) VALUES (?, ?, ?, ?)";

/// Takes `quantity` units of `product_id` off its stock row, which the caller has locked and
/// checked ([`available_under_lock`]).
fn take(conn: &mut DbConn, product_id: i64, quantity: u32) -> Result<(), OrderError> {
    let quantity = i32::try_from(quantity).map_err(|_| bad_batch())?;
    cached_sql::<()>(TAKE).bind::<Integer, _>(quantity).bind::<BigInt, _>(product_id).execute(conn)?;
    Ok(())
}

/// A batch holds one order at least and never more than `coalesce::MAX_BATCH` (whose units fit
/// a stock row): anything else is a bug here, not something a request did.
fn bad_batch() -> OrderError {
    diesel::result::Error::QueryBuilderError("batch empty or too long".into()).into()
}

/// One attempt; the caller owns the transaction. Returns the order as written, without reading
/// it back: only its id comes from the server (`created_at` is set here for that reason).
fn take_from_stock(conn: &mut DbConn, user_id: i64, cart: &Cart) -> Result<OrderView, OrderError> {
    // Names and prices: a plain read. The price is the one seen by this transaction.
    let catalog = Catalog::read(conn, &cart.product_ids())?;

    // Lock every stock row of the cart, one statement per row, in ascending product id: the
    // order is then fixed by this loop, not by whichever scan the optimiser picks for an IN
    // list, and two carts sharing products always queue in the same order instead of
    // deadlocking.
    let locking = Instant::now();
    let locked = cart.lines().iter().try_for_each(|line| {
        let name = catalog.name(line.product_id)?;
        let available = available_under_lock(conn, line.product_id)?;
        if available < line.quantity.get() {
            return Err(OrderError::InsufficientStock {
                product_id: line.product_id,
                name: name.to_owned(),
                requested: line.quantity.get(),
                available,
            });
        }
        Ok(())
    });
    // Waited for the row locks (reading the rows is little next to a wait), timed out or not.
    metrics::waited(Family::Row, "stock", locking.elapsed());
    locked?;

    // Every row is locked and checked: decrement and record.
    let mut lines = Vec::with_capacity(cart.lines().len());
    for line in cart.lines() {
        take(conn, line.product_id, line.quantity.get())?;
        lines.push(catalog.line(line.product_id, line.quantity)?);
    }
    Ok(record_order(conn, user_id, lines)?)
}

/// Writes an order whose stock the caller has taken: the order, its lines, and for each line the
/// ledger's movement (`stock_movements`), so that on hand stays the sum of the ledger. Both
/// paths write through here. Returns the order as written, without reading it back: only its
/// id comes from the server (`created_at` is set here for that reason).
fn record_order(conn: &mut DbConn, user_id: i64, lines: Vec<OrderLineView>) -> QueryResult<OrderView> {
    let total_cents = lines.iter().map(|l| l.unit_price_cents * i64::from(l.quantity)).sum();
    let created_at = crate::db::now_micros();
    cached_sql::<()>(INSERT_ORDER)
        .bind::<BigInt, _>(user_id)
        .bind::<BigInt, _>(total_cents)
        .bind::<Timestamp, _>(created_at)
        .execute(conn)?;
    let order_id: i64 = crate::db::last_insert_id(conn)?;
    for line in &lines {
        cached_sql::<()>(INSERT_LINE)
            .bind::<BigInt, _>(order_id)
            .bind::<BigInt, _>(line.product_id)
            .bind::<Integer, _>(line.quantity)
            .bind::<BigInt, _>(line.unit_price_cents)
            .execute(conn)?;
        NewStockMovement {
            product_id: line.product_id,
            delta: -line.quantity,
            reason: MovementReason::Order,
            order_id: Some(order_id),
            actor_user_id: Some(user_id),
        }
        .insert(conn)?;
    }
    Ok(OrderView { id: order_id, created_at, total_cents, lines })
}

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
/// one lock of the stock row, one decrement, one commit, instead of one each. Every order still
/// gets the answer it would have got alone in that order: sold, or refused with the
/// `available` it would have seen then.
///
/// 1. Lock all the users' rows, in ascending id ([`crate::auth::quota::lock_users`]): a user
///    placing orders elsewhere waits, and each user's rate is counted as if alone.
/// 2. Read the product and the users' orders of the last minute (plain reads).
/// 3. Lock the stock row once: [`available_under_lock`].
/// 4. Decide each order in arrival order, each seeing the ones before it: its idempotency key's
///    stored answer if it has one ([`idempotency::once_among_others`]), else its rate, the
///    product, then the stock left; a sold order is written at once ([`record_order`]) and
///    its answer stored with it if it is keyed.
/// 5. Take the units sold from the stock row, in one `UPDATE`, and 6. COMMIT.
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
    let users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    let decided = retried(pool, policy, "order batch", |conn| {
        crate::db::transaction(conn, |conn| {
            // 1. The users' rows, first.
            crate::auth::quota::lock_users(conn, &users)?;
            // 2. The product and the users' rates.
            let catalog = Catalog::read(conn, &[product_id])?;
            let mut rates = Rates::read(conn, &users)?;
            // 3. The stock row, once for the batch (a product that does not exist has none).
            let locking = Instant::now();
            let mut available = match catalog.name(product_id) {
                Ok(_) => available_under_lock(conn, product_id)?,
                Err(_) => 0,
            };
            metrics::waited(Family::Row, "stock", locking.elapsed());
            // 4. Each order in arrival order, as if alone.
            let mut sold = 0;
            let answers = orders
                .iter()
                .map(|order| {
                    idempotency::once_among_others(conn, order.once.as_ref(), |conn| {
                        if let Err(too_fast) = rates.check(order.user_id, max_per_minute) {
                            return Ok(Err(too_fast));
                        }
                        let line = match catalog.line(product_id, order.quantity) {
                            Ok(line) => line,
                            Err(unknown) => return Ok(Err(unknown)),
                        };
                        let requested = order.quantity.get();
                        if available < requested {
                            let name = line.name;
                            return Ok(Err(OrderError::InsufficientStock { product_id, name, requested, available }));
                        }
                        available -= requested;
                        sold += requested;
                        let placed = record_order(conn, order.user_id, vec![line])?;
                        rates.placed(order.user_id, placed.created_at);
                        Ok(Ok(placed))
                    })
                })
                .collect::<Result<Vec<_>, OrderError>>()?;
            // 5. One decrement for every unit sold.
            if sold > 0 {
                take(conn, product_id, sold)?;
            }
            Ok(answers)
        }) // 6. COMMIT
    })?;
    let (answers, attempts) = decided.settled(|answers: &Vec<Result<OrderView, OrderError>>, attempts| {
        let placed = answers.iter().filter(|a| a.is_ok()).count();
        format!("retried: {placed} of {} orders placed on attempt {attempts}", answers.len())
    })?;
    Ok(Batched { answers, attempts })
}

/// One of the user's orders.
pub fn find_order(conn: &mut DbConn, user_id: i64, order_id: i64) -> Result<OrderView, OrderError> {
    let order = orders::table
        .filter(orders::id.eq(order_id))
        .filter(orders::user_id.eq(user_id))
        .select(Order::as_select())
        .first(conn)
        .optional()?
        .ok_or(OrderError::NotFound(order_id))?;
    Ok(with_lines(conn, vec![order])?.remove(0))
}

/// The user's newest orders.
pub fn my_orders(conn: &mut DbConn, user_id: i64) -> Result<Vec<OrderView>, OrderError> {
    let mine = orders::table
        .filter(orders::user_id.eq(user_id))
        .order(orders::id.desc())
        .limit(100)
        .select(Order::as_select())
        .load(conn)?;
    Ok(with_lines(conn, mine)?)
}

fn with_lines(conn: &mut DbConn, orders: Vec<Order>) -> QueryResult<Vec<OrderView>> {
    let ids: Vec<i64> = orders.iter().map(|o| o.id).collect();
    let lines: Vec<(i64, i64, String, String, i32, i64)> = order_lines::table
        .inner_join(products::table)
        .filter(order_lines::order_id.eq_any(&ids))
        .order((order_lines::order_id, order_lines::product_id))
        .select((
            order_lines::order_id,
            order_lines::product_id,
            products::sku,
            products::name,
            order_lines::quantity,
            order_lines::unit_price_cents,
        ))
        .load(conn)?;
    Ok(orders
        .into_iter()
        .map(|o| OrderView {
            id: o.id,
            created_at: o.created_at,
            total_cents: o.total_cents,
            lines: lines
                .iter()
                .filter(|l| l.0 == o.id)
                .map(|(_, product_id, sku, name, quantity, unit_price_cents)| OrderLineView {
                    product_id: *product_id,
                    sku: sku.clone(),
                    name: name.clone(),
                    quantity: *quantity,
                    unit_price_cents: *unit_price_cents,
                })
                .collect(),
        })
        .collect())
}
