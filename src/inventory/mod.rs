//! Stock receipts: staff receive a quantity of a product whose stock row may not exist yet.
//!
//! The hazard (`docs/named-lock-upsert.md`): "increase, or insert if missing" written as
//! `SELECT … FOR UPDATE` followed by INSERT deadlocks when two first receipts race. On a missing
//! row, FOR UPDATE takes a gap lock; gap locks do not conflict with each other, so both
//! transactions get one, and then each INSERT waits for the other's gap lock — InnoDB kills one
//! with error 1213. The same statements run here under the named lock `haita:{tag}:stock:{product}`,
//! so at most one receipt per product is between its read and its write.
//! `tests/it/inventory.rs` runs both versions side by side.

pub mod model;
pub mod routes;
pub mod service;

use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};
use model::QuantityError;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("invalid quantity: {0}")]
    Quantity(#[from] QuantityError),
    #[error("invalid product id")]
    InvalidProductId,
    #[error("product {0} does not exist")]
    UnknownProduct(i64),
    #[error("receiving {quantity} would put product {product_id} above the stock limit")]
    StockLimit { product_id: i64, quantity: u32 },
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { InventoryError {
    Quantity => UNPROCESSABLE_ENTITY "invalid_quantity",
    InvalidProductId => UNPROCESSABLE_ENTITY "invalid_id",
    UnknownProduct => UNPROCESSABLE_ENTITY "unknown_product",
    StockLimit => UNPROCESSABLE_ENTITY "stock_limit",
} carries { Infra } }

impl AsProblem for InventoryError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Quantity(e) => {
                let (key, args) = e.words(model::QuantityOf::Receipt);
                answer.said(key, &args)
            }
            Self::InvalidProductId => answer.said("request.positive_id", &[("field", "product_id".into())]),
            Self::UnknownProduct(id) => answer.said("order.no_product", &[("id", id.to_string())]),
            Self::StockLimit { product_id, .. } => answer.said(
                "receipts.limit",
                &[("id", product_id.to_string()), ("max", model::MAX_ON_HAND.to_string())],
            ),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(InventoryError);
