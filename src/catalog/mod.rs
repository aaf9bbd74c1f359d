//! The product catalog: what can be ordered, at what price, and how many are in stock.
//!
//! Stock itself is changed only by `inventory` (receipts) and `orders` (sales), and kept aside
//! by `holds` (checkout holds); this module reads it. What can still be sold — on hand, less the
//! live holds — is read in one place, `stock.rs`: under the stock row's lock for every sale and
//! hold, as a snapshot for the page.

pub mod edit;
pub mod model;
pub mod quantity;
pub mod routes;
pub mod service;
pub mod stock;

use crate::infra::{Infra, infra_error};
use crate::wire::answers::{Declared, answers};
use crate::wire::error::{AsProblem, Problem};

/// The strong ETag of a product representation: its version.
pub fn etag(version: i32) -> String {
    format!("\"v{version}\"")
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("product {0} not found")]
    NotFound(i64),
    /// Somebody saved since the client read the product; nothing was written.
    #[error("stale version: the product is now at version {}", .0.product.version)]
    Stale(Box<edit::Current>),
    #[error("invalid fields: {0:?}")]
    InvalidFields(edit::FieldErrors),
    #[error("If-Match missing")]
    PreconditionRequired,
    #[error("If-Match unusable: {0}")]
    BadIfMatch(&'static str),
    #[error(transparent)]
    Infra(#[from] Infra),
}

answers! { CatalogError {
    NotFound => NOT_FOUND "not_found",
    Stale => PRECONDITION_FAILED "stale_version",
    InvalidFields => UNPROCESSABLE_ENTITY "invalid_fields",
    PreconditionRequired => PRECONDITION_REQUIRED "precondition_required",
    BadIfMatch => BAD_REQUEST "bad_if_match",
} carries { Infra } }

impl AsProblem for CatalogError {
    fn problem(&self) -> Problem {
        let answer = self.answer();
        match self {
            Self::NotFound(id) => answer.said("order.no_product", &[("id", id.to_string())]),
            Self::Stale(current) => {
                let version = ("version", current.product.version.to_string());
                match &current.saved_by {
                    Some(who) => answer.said("catalog.stale", &[("who", who.clone()), version]),
                    None => answer.said("catalog.stale.someone", &[version]),
                }
                .with("etag", etag(current.product.version))
                .with("current", serde_json::to_value(&current.product).unwrap_or_default())
            }
            Self::InvalidFields(errors) => {
                let detail = errors.iter().map(|e| e.message.as_str()).collect::<Vec<_>>().join(" ");
                answer.said("catalog.invalid_fields", &[("detail", detail)]).with(
                    "fields",
                    errors
                        .iter()
                        .map(|e| (e.field.to_string(), serde_json::Value::from(e.message.clone())))
                        .collect::<serde_json::Map<_, _>>(),
                )
            }
            Self::PreconditionRequired => answer.said("catalog.precondition_required", &[]),
            Self::BadIfMatch(why) => answer.said("catalog.bad_if_match", &[("why", why.to_string())]),
            Self::Infra(e) => e.problem(),
        }
    }
}
infra_error!(CatalogError);
