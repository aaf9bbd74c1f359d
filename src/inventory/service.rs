//! Receiving stock under the product's named lock.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer};
use serde::Serialize;

use super::InventoryError;
use super::model::{
    MAX_ON_HAND, MovementReason, NewStockMovement, Quantity, on_hand_from_sql, on_hand_to_sql,
};
use crate::catalog::model::Product;
use crate::db::conn::on_engine;
use crate::db::{DbConn, DbPool, cached_sql};
use crate::locking::{Isolation, Turn};
use crate::schema::{products, stock_levels, stock_movements, users};

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Received {
    pub product_id: i64,
    pub quantity: u32,
    pub on_hand: u32,
    pub movement_id: i64,
    /// Whether this receipt created the product's stock row.
    pub created_stock_row: bool,
}

/// Adds `quantity` to the product's stock, creating its stock row on the first receipt, and
/// writes the ledger row — under `haita:{tag}:stock:{product}`, on the lock's connection, committed
/// before the lock is released.
pub fn receive(
    pool: &DbPool,
    turn: Turn,
    actor_user_id: i64,
    product_id: i64,
    quantity: Quantity,
) -> Result<Received, InventoryError> {
    if product_id < 1 {
        return Err(InventoryError::InvalidProductId);
    }
    let known =
        Product::by_id(product_id).select(products::id).first::<i64>(&mut *pool.get()?).optional()?.is_some();
    if !known {
        return Err(InventoryError::UnknownProduct(product_id));
    }
    debug_assert_eq!(turn.name(), &pool.names().stock(product_id));
    // The named lock serialises this product; REPEATABLE READ's gap lock on a missing row would
    // only make first receipts of neighbouring products deadlock (`db::transaction_read_committed`).
    // On PostgreSQL the lock is transaction-scoped: the transaction's COMMIT lets it go.
    crate::locking::transaction_under_lock(pool, turn, Isolation::ReadCommitted, |conn| {
        increase_or_insert(conn, actor_user_id, product_id, quantity)
    })
}

/// The classic read-then-insert-or-update. The statements are exactly those that deadlock
/// without the lock (see the module docs); the product's lock, held by the transaction this runs
/// in ([`receive`]), is what makes them safe: no second receipt for this product can be between
/// its SELECT and its INSERT. Orders never insert stock rows, so the only other writers of this
/// row (order decrements) meet a row lock here, never a gap cycle.
fn increase_or_insert(
    conn: &mut DbConn,
    actor_user_id: i64,
    product_id: i64,
    quantity: Quantity,
) -> Result<Received, InventoryError> {
    let row = stock_levels::table.find(product_id).select(stock_levels::on_hand);
    let current: Option<u32> =
        on_engine!(conn, |c| row.for_update().first(c)).optional()?.map(on_hand_from_sql);
    let on_hand = match current {
        Some(now) => {
            let after = now
                .checked_add(quantity.get())
                .filter(|after| *after <= MAX_ON_HAND)
                .ok_or(InventoryError::StockLimit { product_id, quantity: quantity.get() })?;
            cached_sql::<()>("UPDATE stock_levels SET on_hand = ? WHERE product_id = ?")
                .bind::<Integer, _>(on_hand_to_sql(after))
                .bind::<BigInt, _>(product_id)
                .execute(conn)?;
            after
        }
        None => {
            cached_sql::<()>("INSERT INTO stock_levels (product_id, on_hand) VALUES (?, ?)")
                .bind::<BigInt, _>(product_id)
                .bind::<Integer, _>(quantity.signed())
                .execute(conn)?;
            quantity.get()
        }
    };
    NewStockMovement {
        product_id,
        delta: quantity.signed(),
        reason: MovementReason::Receipt,
        order_id: None,
        actor_user_id: Some(actor_user_id),
    }
    .insert(conn)?;
    let movement_id = crate::db::last_insert_id(conn)?;
    Ok(Received {
        product_id,
        quantity: quantity.get(),
        on_hand,
        movement_id,
        created_stock_row: current.is_none(),
    })
}

/// A ledger line for the receipts page (fields in the order of the query's columns).
#[derive(Clone, Debug, Serialize, Queryable)]
pub struct MovementLine {
    #[serde(with = "crate::wire::utc")]
    pub at: chrono::NaiveDateTime,
    pub product: String,
    pub delta: i32,
    pub reason: MovementReason,
    pub order_id: Option<i64>,
    pub actor: Option<String>,
}

/// The newest ledger rows of the listed products.
pub fn recent_movements(conn: &mut DbConn, limit: i64) -> Result<Vec<MovementLine>, InventoryError> {
    Ok(stock_movements::table
        .inner_join(products::table)
        .filter(products::listed.eq(true))
        .left_join(users::table.on(users::id.nullable().eq(stock_movements::actor_user_id)))
        .order(stock_movements::id.desc())
        .limit(limit)
        .select((
            stock_movements::at,
            products::name,
            stock_movements::delta,
            stock_movements::reason,
            stock_movements::order_id,
            users::username.nullable(),
        ))
        .load(conn)?)
}
