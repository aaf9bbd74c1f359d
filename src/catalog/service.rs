use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

use super::model::Product;
use super::quantity::on_hand_from_sql;
use super::stock;
use crate::db::DbConn;
use crate::schema::{products, stock_levels};

/// A product with its stock; `on_hand` is 0 for a product that has never been received.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ProductWithStock {
    #[serde(flatten)]
    pub product: Product,
    pub on_hand: u32,
    /// Units of `on_hand` kept aside by live checkout holds: what can be ordered or held is
    /// `on_hand - reserved`.
    pub reserved: u32,
    /// When the first of those holds expires (the page says when units may come back).
    #[serde(skip)]
    pub first_expiry: Option<NaiveDateTime>,
}

impl ProductWithStock {
    /// What an order or a new hold could take, as of this snapshot.
    pub fn available(&self) -> u32 {
        self.on_hand.saturating_sub(self.reserved)
    }
}

/// Every listed product with its stock level and what live holds keep aside: a plain snapshot
/// read, no locks. (An unlisted product, such as the lab's flash-sale stock, is sold by its id
/// only.)
pub fn list_with_stock(conn: &mut DbConn) -> QueryResult<Vec<ProductWithStock>> {
    let rows: Vec<(Product, Option<i32>)> = products::table
        .filter(products::listed.eq(true))
        .left_join(stock_levels::table)
        .order(products::id)
        .select((Product::as_select(), stock_levels::on_hand.nullable()))
        .load(conn)?;
    let reserved = stock::reserved(conn)?;
    Ok(rows
        .into_iter()
        .map(|(product, on_hand)| {
            let held = reserved.iter().find(|(id, _)| *id == product.id).map(|(_, r)| *r);
            ProductWithStock {
                product,
                on_hand: on_hand.map_or(0, on_hand_from_sql),
                reserved: held.map_or(0, |r| r.units),
                first_expiry: held.map(|r| r.first_expiry),
            }
        })
        .collect())
}
