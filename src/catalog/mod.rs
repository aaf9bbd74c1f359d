//! The product catalog: what can be ordered, at what price, and how many are in stock.
//!
//! Stock itself is changed only by `inventory` (receipts) and `orders` (sales); this module only
//! reads it, so the locking rules of stock live in those two places.

pub mod model;
pub mod routes;
pub mod service;

use actix_web::http::StatusCode;

use crate::web::error::{AsProblem, Problem, http_error};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("product {0} not found")]
    NotFound(i64),
    #[error(transparent)]
    Pool(#[from] diesel::r2d2::PoolError),
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
    #[error(transparent)]
    Blocking(#[from] actix_web::error::BlockingError),
}

impl AsProblem for CatalogError {
    fn problem(&self) -> Problem {
        match self {
            Self::NotFound(id) => {
                Problem::new(StatusCode::NOT_FOUND, "not_found", format!("There is no product with id {id}."))
            }
            Self::Pool(_) => Problem::busy("The server is busy; please try again in a moment."),
            Self::Database(_) | Self::Blocking(_) => Problem::internal(),
        }
    }
}
http_error!(CatalogError);
