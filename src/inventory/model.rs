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
    #[serde(with = "crate::wire::utc")]
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

    /// Writes `movements` to the ledger in one statement, however many there are (the lines of
    /// one order, or of a coalesced batch of orders): the rows travel as one JSON array, which
    /// the server expands into rows (`JSON_TABLE` on MySQL, `json_to_recordset` on PostgreSQL).
    /// One statement text for any number of rows, so a connection caches one.
    pub fn insert_all(conn: &mut DbConn, movements: &[Self]) -> QueryResult<()> {
        if movements.is_empty() {
            return Ok(());
        }
        let rows: Vec<serde_json::Value> = movements
            .iter()
            .map(|m| {
                serde_json::json!({
                    "product_id": m.product_id,
                    "delta": m.delta,
                    "reason": m.reason.as_str(),
                    "order_id": m.order_id,
                    "actor_user_id": m.actor_user_id,
                })
            })
            .collect();
        crate::db::cached_sql::<()>(crate::db::Sql::per_engine(
            "INSERT INTO stock_movements (product_id, delta, reason, order_id, actor_user_id) \
             SELECT product_id, delta, reason, order_id, actor_user_id FROM JSON_TABLE(?, '$[*]' COLUMNS (\
               product_id BIGINT PATH '$.product_id', delta INT PATH '$.delta', \
               reason VARCHAR(16) PATH '$.reason', order_id BIGINT PATH '$.order_id', \
               actor_user_id BIGINT PATH '$.actor_user_id')) AS m",
            "INSERT INTO stock_movements (product_id, delta, reason, order_id, actor_user_id) \
             SELECT product_id, delta, reason, order_id, actor_user_id FROM json_to_recordset(CAST(? AS json)) \
               AS m(product_id BIGINT, delta INTEGER, reason VARCHAR(16), order_id BIGINT, actor_user_id BIGINT)",
        ))
        .bind::<diesel::sql_types::Text, _>(serde_json::Value::Array(rows).to_string())
        .execute(conn)
        .map(drop)
    }
}
