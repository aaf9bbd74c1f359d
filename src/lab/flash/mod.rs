//! A flash sale: hundreds of buyers for a few dozen units of one product, through the real HTTP
//! API of one or more instances, sold two ways side by side.
//!
//! - **At the click** (without holds): every buyer posts `POST /api/v1/orders` for one unit at
//!   the same moment. The product's stock row (`SELECT … FOR UPDATE`) decides, one order at a
//!   time: the first fifty are sold, everyone else is told `409 insufficient_stock` at once.
//! - **With holds**: every buyer first holds one unit for a few seconds (`POST /api/v1/holds`,
//!   decided under the same row lock); a fixed, seeded share of them walks away, and their holds
//!   run out by the database's clock; the others order from their hold
//!   (`POST /api/v1/holds/{id}/order`). Buyers told there is nothing left to hold try again
//!   until the sale is over, so a unit whose hold expired is held again by someone else.
//!
//! The buyers are real customer accounts that log in through `POST /api/v1/session` and keep
//! their session cookie, each on one instance (buyer `i` on instance `i % n`). Nothing is taken
//! from their answers alone: after each variant the product's orders, holds, stock row and
//! ledger are counted in the database, and a sale that sold more than its stock, or whose stock
//! row disagrees with its ledger, says so in the report.
//!
//! - `buyers.rs`: the buyer accounts and their password for one sale;
//! - `shop.rs`: the buyers' requests, and what each answer means to a buyer;
//! - `sale.rs`: what to sell, the two variants one after the other, what is counted;
//! - `crowd.rs`: the buyers' logins and what each buyer does with the shop's answers;
//! - `report.rs`: what a sale found, per variant;
//! - `store.rs`: one sale at a time across every instance, and the stored reports;
//! - `routes.rs`: starting a sale from `/demo`.
//!
//! Like the race, it exists only in the lab and runs only with `DEMO_MODE=1`: it writes a
//! throwaway product per variant, orders, and the buyer accounts.

mod buyers;
mod crowd;
mod report;
pub mod routes;
mod sale;
mod shop;
mod store;

pub use buyers::{MAX_BUYERS, all_names as buyer_names};
pub use report::{FlashReport, Variant, VariantResult};
pub use sale::{Asked, SaleSpec, Starter, run, take_slot};
pub use store::{KEEP_SALES, Shown, Slot, latest};

use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("invalid {field}: {message}")]
    Invalid { field: &'static str, message: String },
    /// Another sale holds the one slot (see `store.rs`): started by this user.
    #[error("a flash sale started by {0} is running")]
    Running(String),
    #[error("another flash sale only in {0} s")]
    CoolingDown(u64),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { FlashError {
    Invalid => UNPROCESSABLE_ENTITY "invalid_input",
    Running => CONFLICT "busy",
    CoolingDown => TOO_MANY_REQUESTS "too_many_races",
    Internal => INTERNAL_SERVER_ERROR "internal",
} carries { Infra } }

impl AsProblem for FlashError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::Invalid { field, message } => answer
                .said("demo.err.invalid", &[("field", (*field).to_string()), ("message", message.clone())]),
            Self::Running(who) => {
                Problem { retry_after: Some(10), ..answer.said("flash.err.running", &[("who", who.clone())]) }
            }
            Self::CoolingDown(secs) => Problem {
                retry_after: Some(u32::try_from(*secs).unwrap_or(u32::MAX)),
                ..answer.said("flash.err.cooling", &[("secs", secs.to_string())])
            },
            Self::Infra(e) => e.problem(),
            Self::Internal(_) => Problem::internal(),
        }
    }
}
infra_error!(FlashError);
