//! Orders: a customer buys several products at once without ever overselling.
//!
//! Two hazards (`docs/row-locks-in-order.md`). Read-modify-write of stock oversells when two orders
//! read the same count; so each stock row is read with `SELECT … FOR UPDATE` inside the order's
//! transaction, checked, then decremented. And two carts that lock the same rows in opposite
//! orders deadlock; so every order locks its rows in ascending product id, whatever order its
//! lines came in. A deadlock that still happens (with a row locked by something else, say)
//! reruns the whole transaction, at most three times; a row lock wait timeout answers 503 busy
//! at once (`crate::locking::retry`).
//!
//! On a hot product (a flash sale) the single-line orders waiting for its stock row are served
//! in batches, one lock and one commit for many, each order answered as if alone
//! (`coalesce`, `ORDER_COALESCING`).

pub mod batch;
pub mod coalesce;
pub mod model;
pub mod routes;
pub mod service;

use crate::catalog::stock::shortfall;
use crate::idempotency::IdempotencyError;
use crate::infra::{Infra, infra_error};
use crate::inventory::model::QuantityError;
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

/// Serializable so that a refusal can be stored as the answer to an `Idempotency-Key`
/// (`crate::idempotency`); only refusals declared `[kept]` ever are.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum OrderError {
    #[error("the order has no lines")]
    Empty,
    #[error("the order has more than {0} products")]
    TooManyLines(usize),
    #[error("invalid product id {0}")]
    InvalidProductId(i64),
    #[error("invalid quantity for product {product_id}: {error}")]
    #[serde(skip)]
    Quantity { product_id: i64, error: QuantityError },
    #[error("product {0} does not exist")]
    UnknownProduct(i64),
    /// `held`: units of the product in other customers' checkout holds, which `available`
    /// leaves out.
    #[error("only {available} of product {product_id} left, {requested} requested")]
    InsufficientStock {
        product_id: i64,
        name: String,
        requested: u32,
        available: u32,
        #[serde(default)]
        held: u32,
    },
    /// The user placed `max` orders within the last minute (`MAX_ORDERS_PER_MINUTE_PER_USER`);
    /// the oldest of them leaves it in `retry_after` seconds.
    #[error("{max} orders within a minute already; try again in {retry_after} s")]
    TooFast { max: u32, retry_after: u32 },
    #[error("order {0} not found")]
    NotFound(i64),
    #[error(transparent)]
    #[serde(skip)]
    Idempotency(#[from] IdempotencyError),
    #[error(transparent)]
    #[serde(skip)]
    Infra(#[from] Infra),
}

// `[kept]`: what the stock and catalog decided when the order ran. `[in_place]`: what the
// order form answers on the catalog page itself, next to the product: the shop's own answer,
// or quantities the form should not have sent.
answers! { OrderError {
    Empty => UNPROCESSABLE_ENTITY "empty_order" [kept, in_place],
    TooManyLines => UNPROCESSABLE_ENTITY "too_many_lines" [in_place],
    InvalidProductId => UNPROCESSABLE_ENTITY "invalid_id" [in_place],
    Quantity => UNPROCESSABLE_ENTITY "invalid_quantity" [in_place],
    UnknownProduct => UNPROCESSABLE_ENTITY "unknown_product" [kept, in_place],
    InsufficientStock => CONFLICT "insufficient_stock" [kept, in_place],
    NotFound => NOT_FOUND "not_found",
    TooFast => TOO_MANY_REQUESTS "order_rate" [in_place],
} carries { Idempotency, Infra } }

impl AsProblem for OrderError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Empty => answer.said("order.empty", &[]),
            Self::TooManyLines(max) => answer.said("order.too_many_lines", &[("max", max.to_string())]),
            Self::InvalidProductId(id) => {
                answer.said("request.invalid_product_id", &[("id", id.to_string())])
            }
            Self::Quantity { product_id, error } => {
                let (key, mut args) = error.words(crate::inventory::model::QuantityOf::OrderLine);
                args.push(("product", product_id.to_string()));
                answer.said(key, &args).with("product_id", *product_id)
            }
            Self::UnknownProduct(id) => {
                answer.said("order.no_product", &[("id", id.to_string())]).with("product_id", *id)
            }
            Self::InsufficientStock { product_id, name, requested, available, held } => {
                let key = match (available, held) {
                    // Not "out of stock": they may come back when the holds expire.
                    (0, 1..) => "order.all_held",
                    (0, _) => "order.out_of_stock",
                    _ => "order.only_left",
                };
                shortfall(answer, key, *product_id, name, (*requested, *available, *held))
            }
            Self::NotFound(_) => answer.said("order.not_found", &[]),
            Self::TooFast { max, retry_after } => Problem {
                retry_after: Some(*retry_after),
                ..answer
                    .said("order.too_fast", &[("max", max.to_string()), ("seconds", retry_after.to_string())])
                    .with("max", *max)
            },
            Self::Idempotency(e) => e.problem(),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(OrderError);
