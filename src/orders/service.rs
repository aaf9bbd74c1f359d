//! Placing an order: lock, check, decrement, record — in one transaction, retried as a whole.

use std::sync::LazyLock;
use std::time::Instant;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text, Timestamp};
use serde::{Deserialize, Serialize};

use super::OrderError;
use super::model::{Cart, Order};
use crate::db::cached::ListStatements;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::idempotency::{self, Once};
use crate::inventory::model::{MovementReason, NewStockMovement};
use crate::locking::retry::{LockConflict, MayConflict, RetryPolicy, retry_on_lock_conflict};
use crate::metrics::{self, Family};
use crate::schema::{order_lines, orders, products};

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
    let mut conn = pool.get()?;
    let mut evidence = Vec::new();
    let attempted = retry_on_lock_conflict(policy, || {
        let began = Instant::now();
        let attempt = crate::db::transaction(&mut conn, |conn| {
            // First, before any read: see `crate::auth::quota`.
            crate::auth::quota::lock_users(conn, &[user_id])?;
            idempotency::once(conn, once, |conn| {
                within_rate(conn, user_id, max_per_minute)?;
                take_from_stock(conn, user_id, cart)
            })
        })
        .and_then(std::convert::identity);
        // Row locks last until the transaction ends: from BEGIN to COMMIT is the longest they
        // can have been held.
        metrics::held(Family::Row, "stock", began.elapsed());
        if let Err(e) = &attempt
            && e.lock_conflict() == Some(LockConflict::Deadlock)
            && let Some(error) = e.database_error()
        {
            // Read before the retry: the next deadlock on the server would overwrite it.
            evidence.extend(crate::deadlocks::capture(&mut conn, pool.url(), "order", error));
        }
        attempt
    });
    for report in evidence {
        let outcome = match &attempted.result {
            Ok(order) => format!("retried: order {} placed on attempt {}", order.id, attempted.attempts),
            Err(e) => format!("retried: gave up after attempt {} ({e})", attempted.attempts),
        };
        crate::deadlocks::settle(&mut conn, report, &outcome);
    }
    Ok(Placed { order: attempted.result?, attempts: attempted.attempts })
}

/// Names, SKUs and prices of the cart's products. Texts for 1, 4, 16 and [`Cart::MAX_LINES`]
/// products, so a connection caches four statements for every cart.
static CATALOG: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT id, sku, name, price_cents FROM products WHERE id IN ({list})",
        &[1, 4, 16, Cart::MAX_LINES],
    )
});

/// The user's orders of the last minute, and when the oldest of them was placed. `created_at`
/// is written by the app's clock ([`take_from_stock`]), so the window is measured by it too.
const RECENT: &str = "SELECT COUNT(*), MIN(created_at) FROM orders WHERE user_id = ? AND created_at > ?";

/// The window `MAX_ORDERS_PER_MINUTE_PER_USER` counts in.
const RATE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Refuses the order when the user placed `max` orders within the last minute already, saying
/// when the oldest of them leaves it. Only ever run after the user's row was locked.
pub fn within_rate(conn: &mut DbConn, user_id: i64, max: u32) -> Result<(), OrderError> {
    let now = crate::db::now_micros();
    let (recent, oldest): (i64, Option<chrono::NaiveDateTime>) =
        cached_sql::<(BigInt, diesel::sql_types::Nullable<Timestamp>)>(RECENT)
            .bind::<BigInt, _>(user_id)
            .bind::<Timestamp, _>(now - RATE_WINDOW)
            .get_result(conn)?;
    match oldest {
        Some(oldest) if recent >= i64::from(max) => {
            let left = (oldest + RATE_WINDOW - now).num_milliseconds();
            // Whole seconds, rounded up, and at least one: a client waiting that long is let in.
            let retry_after = u32::try_from((left + 999) / 1000).unwrap_or(1).max(1);
            Err(OrderError::TooFast { max, retry_after })
        }
        _ => Ok(()),
    }
}

const TAKE: &str = "UPDATE stock_levels SET on_hand = on_hand - ? WHERE product_id = ?";
const INSERT_ORDER: &str = "INSERT INTO orders (user_id, total_cents, created_at) VALUES (?, ?, ?)";
const INSERT_LINE: &str =
    "INSERT INTO order_lines (order_id, product_id, quantity, unit_price_cents) VALUES (?, ?, ?, ?)";

/// One attempt; the caller owns the transaction. Returns the order as written, without reading
/// it back: only its id comes from the server (`created_at` is set here for that reason).
pub fn take_from_stock(conn: &mut DbConn, user_id: i64, cart: &Cart) -> Result<OrderView, OrderError> {
    // Names and prices: a plain read. The price is the one seen by this transaction.
    let (sql, ids) = CATALOG.padded(&cart.product_ids()).ok_or(OrderError::Empty)?;
    let catalog: Vec<(i64, String, String, i64)> =
        cached_sql::<(BigInt, Text, Text, BigInt)>(sql).bind_each::<BigInt, _>(ids).load(conn)?;
    let product = |id: i64| catalog.iter().find(|(pid, ..)| *pid == id).ok_or(OrderError::UnknownProduct(id));

    // Lock every stock row of the cart, one statement per row, in ascending product id: the
    // order is then fixed by this loop, not by whichever scan the optimiser picks for an IN
    // list, and two carts sharing products always queue in the same order instead of
    // deadlocking. A product never received has no row: it has nothing to sell.
    let locking = Instant::now();
    // What is available is what checkout holds leave (`crate::catalog::stock`): units someone
    // holds are never sold to anyone else.
    let locked = cart.lines().iter().try_for_each(|line| {
        let (_, _, name, _) = product(line.product_id)?;
        let stock = crate::catalog::stock::lock(conn, line.product_id)?;
        let (available, held) = stock.map_or((0, 0), |s| (s.available(), s.held));
        if available < line.quantity.get() {
            return Err(OrderError::InsufficientStock {
                product_id: line.product_id,
                name: name.clone(),
                requested: line.quantity.get(),
                available,
                held,
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
        cached_sql::<()>(TAKE)
            .bind::<Integer, _>(line.quantity.signed())
            .bind::<BigInt, _>(line.product_id)
            .execute(conn)?;
        let (product_id, sku, name, unit_price_cents) = product(line.product_id)?.clone();
        lines.push(OrderLineView {
            product_id,
            sku,
            name,
            quantity: line.quantity.signed(),
            unit_price_cents,
        });
    }
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
