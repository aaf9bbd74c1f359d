use diesel::prelude::*;
use serde::Serialize;

use super::model::Product;
use super::quantity::on_hand_from_sql;
use crate::db::DbConn;
use crate::schema::{products, stock_levels};

/// A product with its stock; `on_hand` is 0 for a product that has never been received.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ProductWithStock {
    #[serde(flatten)]
    pub product: Product,
    pub on_hand: u32,
}

/// Every product with its stock level: a plain snapshot read, no locks.
pub fn list_with_stock(conn: &mut DbConn) -> QueryResult<Vec<ProductWithStock>> {
    let rows: Vec<(Product, Option<i32>)> = products::table
        .left_join(stock_levels::table)
        .order(products::id)
        .select((Product::as_select(), stock_levels::on_hand.nullable()))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(product, on_hand)| ProductWithStock { product, on_hand: on_hand.map_or(0, on_hand_from_sql) })
        .collect())
}
