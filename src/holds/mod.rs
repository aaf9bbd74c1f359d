//! Checkout holds: a customer keeps a quantity of a product aside for a few minutes
//! (`HOLD_MINUTES`), so that reaching checkout is not followed by "sold out" at payment.
//!
//! A hold is a lock with an expiry on a quantity — the edit lock's lesson, on stock. The hazards,
//! and how each is met:
//!
//! - Holding more than there is. Two customers who both read "3 left" and both hold 3 have held
//!   6. So a hold is decided under the product's stock row lock (`SELECT … FOR UPDATE`, the row
//!   every sale locks): available = on hand − the live holds, counted after the lock is granted
//!   (`crate::catalog::stock::lock`, the one function every sale and hold asks), then the hold is
//!   written in the same transaction. Orders without a hold ask the same function, so they can
//!   never take units someone holds.
//! - A hold that outlives its customer. Every hold expires, and expiry is read from the
//!   *database's* clock (`{now}`), the one clock every instance shares: a hold stops counting the
//!   moment it expires, for every reader, with no sweeper to run late or twice. An app server
//!   whose clock runs fast or slow changes nothing.
//! - Using a hold twice, or after it ended. Ordering from a hold locks the stock row, then the
//!   hold's row, and decides by what the hold is *now* (`StockHold::state_at`): expired,
//!   released and used holds are each refused with their own sentence. The hold is marked used,
//!   its units taken from stock with the ledger row, and the order written, in one transaction
//!   (`orders::service::take_from_stock`, the path every order takes).
//!
//! Releasing needs no stock lock: it can only give units back, so whatever counts holds next
//! sees it released or still live, and either is safe. One conditional UPDATE, under the
//! hold row's own lock, decides it.
//!
//! One live hold per customer and product: a second is refused (`already_held`), saying until
//! when the first one lasts. A customer changes the quantity by releasing and holding again.
//!
//! - Hoarding. A hold costs nothing, so one customer could hold every unit, and hold again the
//!   moment a hold ends, for ever. So each customer has limits (`crate::config::HoldLimits`):
//!   units and products in live holds at once (`hold_limit`), holds per minute (`hold_rate`),
//!   and a wait after a hold of a product ends unused before the same customer holds that
//!   product again (`hold_cooldown`), which gives the units a turn with someone else. They are
//!   counted under the lock of the customer's user row, taken first in the transaction as an
//!   order takes it (`crate::auth::quota`), so that two holds of different products at once
//!   cannot both slip under a cap.
//!
//! Ended holds stay as the customer's history for `HOLD_HISTORY_DAYS`, then the housekeeping of
//! every instance deletes them, a few thousand every five minutes (`crate::Application`); `stock_holds_live` keeps counting the live ones cheap
//! however long the history grows.

pub mod model;
pub mod routes;
pub mod service;

use chrono::NaiveDateTime;

use crate::catalog::quantity::{QuantityError, QuantityOf};
use crate::catalog::stock::shortfall;
use crate::idempotency::IdempotencyError;
use crate::infra::{Infra, infra_error};
use crate::orders::OrderError;
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

/// Serializable so that a refusal can be stored as the answer to an `Idempotency-Key`
/// (`crate::idempotency`); only refusals declared `[kept]` ever are.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum HoldError {
    #[error("invalid product id {0}")]
    InvalidProductId(i64),
    #[error("invalid quantity for product {product_id}: {error}")]
    #[serde(skip)]
    Quantity { product_id: i64, error: QuantityError },
    /// The request's `seconds`, as sent: not a whole number of seconds, 1 or more.
    #[error("seconds {0} is not a positive whole number")]
    Seconds(String),
    #[error("product {0} does not exist")]
    UnknownProduct(i64),
    /// `held`: units in other live holds, which `available` leaves out.
    #[error("only {available} of product {product_id} can be held, {requested} requested")]
    InsufficientStock { product_id: i64, name: String, requested: u32, available: u32, held: u32 },
    #[error("hold {id} of product {product_id} is live already")]
    AlreadyHeld {
        id: i64,
        product_id: i64,
        name: String,
        quantity: i32,
        #[serde(with = "crate::wire::utc")]
        expires_at: NaiveDateTime,
    },
    #[error("hold {id} expired")]
    Expired {
        id: i64,
        #[serde(with = "crate::wire::utc")]
        expired_at: NaiveDateTime,
    },
    #[error("hold {0} was released")]
    Released(i64),
    #[error("hold {id} was used already")]
    Used { id: i64, order_id: Option<i64> },
    #[error("hold {0} not found")]
    NotFound(i64),
    /// Past `MAX_HELD_UNITS_PER_USER` or `MAX_HELD_PRODUCTS_PER_USER` with this hold.
    #[error("holds {held_units} units of {held_products} products already")]
    OverLimit { product_id: i64, held_units: u32, held_products: u32, max_units: u32, max_products: u32 },
    /// `MAX_HOLDS_PER_MINUTE_PER_USER` holds within the last minute; the oldest leaves it in
    /// `retry_after` seconds.
    #[error("{max} holds within a minute already; try again in {retry_after} s")]
    TooFast { max: u32, retry_after: u32 },
    /// The customer's last hold of the product ended unused less than `HOLD_COOLDOWN_SECS` ago.
    #[error("product {product_id} was held by this customer a moment ago; again in {retry_after} s")]
    Cooldown { product_id: i64, retry_after: u32 },
    /// What the order placed from a hold answered (the per-minute limit, say).
    #[error(transparent)]
    Order(OrderError),
    #[error(transparent)]
    #[serde(skip)]
    Idempotency(#[from] IdempotencyError),
    #[error(transparent)]
    #[serde(skip)]
    Infra(#[from] Infra),
}

/// An order's infrastructure failures stay infrastructure failures (so a deadlock is retried
/// and answered as one); its answers are the hold's.
impl From<OrderError> for HoldError {
    fn from(error: OrderError) -> Self {
        match error {
            OrderError::Infra(e) => Self::Infra(e),
            OrderError::Idempotency(e) => Self::Idempotency(e),
            other => Self::Order(other),
        }
    }
}

impl HoldError {
    /// The product the answer is about, for the page to mark.
    pub fn product_id(&self) -> Option<i64> {
        match self {
            Self::Quantity { product_id, .. }
            | Self::InsufficientStock { product_id, .. }
            | Self::AlreadyHeld { product_id, .. }
            | Self::OverLimit { product_id, .. }
            | Self::Cooldown { product_id, .. } => Some(*product_id),
            Self::UnknownProduct(id) => Some(*id),
            _ => None,
        }
    }
}

// `[kept]`: what the stock and the hold were when the request ran. Not the customer's limits:
// those change with the customer's own holds and the clock, and a resend is decided again. Nor
// a hold that was not found: its id may yet be given to one of the customer's holds, and a
// refusal that changes nothing leaves no stored answer behind either. `[in_place]`: what the
// pages answer next to the product or the hold: the shop's own answers and what the form
// should not have sent. An order placed from a hold answers as the order declares.
answers! { HoldError {
    InvalidProductId => UNPROCESSABLE_ENTITY "invalid_id" [in_place],
    Quantity => UNPROCESSABLE_ENTITY "invalid_quantity" [in_place],
    Seconds => UNPROCESSABLE_ENTITY "invalid_seconds" [in_place],
    UnknownProduct => UNPROCESSABLE_ENTITY "unknown_product" [kept, in_place],
    InsufficientStock => CONFLICT "insufficient_stock" [kept, in_place],
    AlreadyHeld => CONFLICT "already_held" [kept, in_place],
    Expired => CONFLICT "hold_expired" [kept, in_place],
    Released => CONFLICT "hold_released" [kept, in_place],
    Used => CONFLICT "hold_used" [kept, in_place],
    NotFound => NOT_FOUND "not_found" [in_place],
    OverLimit => CONFLICT "hold_limit" [in_place],
    TooFast => TOO_MANY_REQUESTS "hold_rate" [in_place],
    Cooldown => TOO_MANY_REQUESTS "hold_cooldown" [in_place],
} carries { Order, Idempotency, Infra } }

impl AsProblem for HoldError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::InvalidProductId(id) => {
                answer.said("request.invalid_product_id", &[("id", id.to_string())])
            }
            Self::Quantity { product_id, error } => {
                let (key, mut args) = error.words(QuantityOf::OrderLine);
                args.push(("product", product_id.to_string()));
                answer.said(key, &args).with("product_id", *product_id)
            }
            Self::Seconds(given) => answer.said("hold.seconds", &[("given", given.clone())]),
            Self::UnknownProduct(id) => {
                answer.said("order.no_product", &[("id", id.to_string())]).with("product_id", *id)
            }
            Self::InsufficientStock { product_id, name, requested, available, held } => {
                let key = match (available, held) {
                    (0, 0) => "hold.out_of_stock",
                    (0, _) => "hold.all_held",
                    (_, 0) => "order.only_left",
                    _ => "hold.only_left",
                };
                shortfall(answer, key, *product_id, name, (*requested, *available, *held))
            }
            Self::AlreadyHeld { id, product_id, name, quantity, expires_at } => answer
                .said(
                    "hold.already",
                    &[
                        ("name", name.clone()),
                        ("quantity", quantity.to_string()),
                        ("until", crate::wire::utc::text(expires_at)),
                    ],
                )
                .with("hold_id", *id)
                .with("product_id", *product_id),
            Self::Expired { id, expired_at } => answer
                .said("hold.expired", &[("at", crate::wire::utc::text(expired_at))])
                .with("hold_id", *id),
            Self::Released(id) => answer.said("hold.released", &[]).with("hold_id", *id),
            Self::Used { id, order_id } => match order_id {
                Some(order) => answer
                    .said("hold.used", &[("order", order.to_string())])
                    .with("hold_id", *id)
                    .with("order_id", *order),
                None => answer.said("hold.used_already", &[]).with("hold_id", *id),
            },
            Self::NotFound(_) => answer.said("hold.not_found", &[]),
            Self::OverLimit { product_id, held_units, held_products, max_units, max_products } => answer
                .said(
                    "hold.limit",
                    &[
                        ("units", held_units.to_string()),
                        ("products", held_products.to_string()),
                        ("max_units", max_units.to_string()),
                        ("max_products", max_products.to_string()),
                    ],
                )
                .with("product_id", *product_id)
                .with("max_units", *max_units)
                .with("max_products", *max_products),
            Self::TooFast { max, retry_after } => Problem {
                retry_after: Some(*retry_after),
                ..answer
                    .said("hold.too_fast", &[("max", max.to_string()), ("seconds", retry_after.to_string())])
                    .with("max", *max)
            },
            Self::Cooldown { product_id, retry_after } => Problem {
                retry_after: Some(*retry_after),
                ..answer
                    .said("hold.cooldown", &[("seconds", retry_after.to_string())])
                    .with("product_id", *product_id)
            },
            Self::Order(e) => e.problem(),
            Self::Idempotency(e) => e.problem(),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(HoldError);
