//! Placing an order: lock, check, decrement, record — in one transaction, retried as a whole.

use diesel::prelude::*;
use serde::Serialize;

use super::OrderError;
use super::model::{Cart, NewOrder, NewOrderLine, Order};
use crate::db::DbPool;
use crate::inventory::model::{MovementReason, NewStockMovement};
use crate::locking::retry::{RetryPolicy, retry_on_lock_conflict};
use crate::schema::{order_lines, orders, products, stock_levels, stock_movements};

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct OrderView {
    pub id: i64,
    #[serde(with = "crate::web::utc")]
    pub created_at: chrono::NaiveDateTime,
    pub total_cents: i64,
    pub lines: Vec<OrderLineView>,
}

impl OrderView {
    pub fn total(&self) -> String {
        crate::catalog::model::format_cents(self.total_cents)
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct OrderLineView {
    pub product_id: i64,
    pub sku: String,
    pub name: String,
    pub quantity: i32,
    pub unit_price_cents: i64,
}

impl OrderLineView {
    pub fn unit_price(&self) -> String {
        crate::catalog::model::format_cents(self.unit_price_cents)
    }
}

/// A placed order and how many attempts its transaction took.
pub struct Placed {
    pub order: OrderView,
    pub attempts: u32,
}

/// Places `cart` for `user_id`: either every line is taken from stock and recorded, or nothing
/// is (a shortfall answers 409 and leaves no trace). Runs the whole transaction again after a
/// deadlock or lock wait timeout, as `policy` allows.
pub fn place_order(
    pool: &DbPool,
    policy: &RetryPolicy,
    user_id: i64,
    cart: &Cart,
) -> Result<Placed, OrderError> {
    let mut conn = pool.get()?;
    let attempted =
        retry_on_lock_conflict(policy, || conn.transaction(|conn| take_from_stock(conn, user_id, cart)));
    let order_id = attempted.result?;
    Ok(Placed { order: find_order(&mut conn, user_id, order_id)?, attempts: attempted.attempts })
}

/// One attempt; the caller owns the transaction.
fn take_from_stock(conn: &mut MysqlConnection, user_id: i64, cart: &Cart) -> Result<i64, OrderError> {
    // Names and prices: a plain read. The price is the one seen by this transaction.
    let catalog: Vec<(i64, String, i64)> = products::table
        .filter(products::id.eq_any(cart.product_ids()))
        .select((products::id, products::name, products::price_cents))
        .load(conn)?;
    let product =
        |id: i64| catalog.iter().find(|(pid, _, _)| *pid == id).ok_or(OrderError::UnknownProduct(id));

    // Lock every stock row of the cart, one statement per row, in ascending product id: the
    // order is then fixed by this loop, not by whichever scan the optimiser picks for an IN
    // list, and two carts sharing products always queue in the same order instead of
    // deadlocking. A product never received has no row: it has nothing to sell.
    for line in cart.lines() {
        let (_, name, _) = product(line.product_id)?;
        let available = stock_levels::table
            .find(line.product_id)
            .select(stock_levels::on_hand)
            .for_update()
            .first::<u32>(conn)
            .optional()?
            .unwrap_or(0);
        if available < line.quantity.get() {
            return Err(OrderError::InsufficientStock {
                product_id: line.product_id,
                name: name.clone(),
                requested: line.quantity.get(),
                available,
            });
        }
    }

    // Every row is locked and checked: decrement and record.
    let mut total_cents = 0i64;
    for line in cart.lines() {
        diesel::update(stock_levels::table.find(line.product_id))
            .set(stock_levels::on_hand.eq(stock_levels::on_hand - line.quantity.get()))
            .execute(conn)?;
        total_cents += product(line.product_id)?.2 * i64::from(line.quantity.get());
    }
    diesel::insert_into(orders::table).values(NewOrder { user_id, total_cents }).execute(conn)?;
    let order_id: i64 = crate::db::last_insert_id(conn)?;
    let mut lines = Vec::with_capacity(cart.lines().len());
    let mut movements = Vec::with_capacity(cart.lines().len());
    for line in cart.lines() {
        lines.push(NewOrderLine {
            order_id,
            product_id: line.product_id,
            quantity: line.quantity.signed(),
            unit_price_cents: product(line.product_id)?.2,
        });
        movements.push(NewStockMovement {
            product_id: line.product_id,
            delta: -line.quantity.signed(),
            reason: MovementReason::Order,
            order_id: Some(order_id),
            actor_user_id: Some(user_id),
        });
    }
    diesel::insert_into(order_lines::table).values(&lines).execute(conn)?;
    diesel::insert_into(stock_movements::table).values(&movements).execute(conn)?;
    Ok(order_id)
}

/// One of the user's orders.
pub fn find_order(conn: &mut MysqlConnection, user_id: i64, order_id: i64) -> Result<OrderView, OrderError> {
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
pub fn my_orders(conn: &mut MysqlConnection, user_id: i64) -> Result<Vec<OrderView>, OrderError> {
    let mine = orders::table
        .filter(orders::user_id.eq(user_id))
        .order(orders::id.desc())
        .limit(100)
        .select(Order::as_select())
        .load(conn)?;
    Ok(with_lines(conn, mine)?)
}

fn with_lines(conn: &mut MysqlConnection, orders: Vec<Order>) -> QueryResult<Vec<OrderView>> {
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
