use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

pub use crate::catalog::quantity::{
    MAX_ON_HAND, Quantity, QuantityError, QuantityOf, on_hand_from_sql, on_hand_to_sql,
};
use crate::db::{DbConn, text_enum};
use crate::schema::stock_movements;

text_enum! {
    /// Why `on_hand` changed.
    pub enum MovementReason {
        Receipt => "receipt",
        Order => "order",
        Adjustment => "adjustment",
    }
}

#[derive(Clone, Debug, Queryable, Selectable, Serialize)]
#[diesel(table_name = stock_movements, check_for_backend(crate::db::MultiBackend))]
pub struct StockMovement {
    pub id: i64,
    pub product_id: i64,
    pub delta: i32,
    pub reason: MovementReason,
    pub order_id: Option<i64>,
    pub actor_user_id: Option<i64>,
    #[serde(with = "crate::http::utc")]
    pub at: NaiveDateTime,
}

/// A movement about to be written (see [`NewStockMovement::insert`]).
#[derive(Debug)]
pub struct NewStockMovement {
    pub product_id: i64,
    pub delta: i32,
    pub reason: MovementReason,
    pub order_id: Option<i64>,
    pub actor_user_id: Option<i64>,
}

impl NewStockMovement {
    /// Writes the movement to the ledger (a cached statement: it is on every order and receipt).
    pub fn insert(&self, conn: &mut DbConn) -> QueryResult<()> {
        use diesel::sql_types::{BigInt, Integer, Nullable, Text};
        crate::db::cached_sql::<()>(
            "INSERT INTO stock_movements (product_id, delta, reason, order_id, actor_user_id) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind::<BigInt, _>(self.product_id)
        .bind::<Integer, _>(self.delta)
        .bind::<Text, _>(self.reason.as_str())
        .bind::<Nullable<BigInt>, _>(self.order_id)
        .bind::<Nullable<BigInt>, _>(self.actor_user_id)
        .execute(conn)
        .map(drop)
    }
}
