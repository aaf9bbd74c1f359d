//! How many of a product can still be sold: what is on hand, less what live checkout holds keep
//! aside for the customers who took them (`crate::holds`).
//!
//! A hold is live while it has not ended (released, or used by its order) and its `expires_at` is
//! still ahead by the database's clock (`{now}`). Nobody sweeps expired holds away: every reading
//! here compares with that clock, so a hold stops counting the moment it expires, on every
//! instance alike, whatever their own clocks say.
//!
//! Two readings. [`lock`] is the one every sale and every hold is decided on: the stock row
//! `SELECT … FOR UPDATE`, then the live holds as they are once that lock is granted, so that no
//! other sale or hold of the product can come between the count and the write that follows it.
//! [`reserved`] is the catalog page's snapshot: no lock, a guide for the reader.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamp};

use super::quantity::on_hand_from_sql;
use crate::db::conn::on_engine;
use crate::db::{DbConn, Sql, cached_sql};
use crate::schema::stock_levels;

/// A product's stock as one transaction, holding its row lock, sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stock {
    pub on_hand: u32,
    /// Units in live holds.
    pub held: u32,
    /// The database's clock when the holds were counted: what "live" was measured against.
    pub now: NaiveDateTime,
}

impl Stock {
    /// What a sale or a new hold may take.
    pub fn available(&self) -> u32 {
        self.on_hand.saturating_sub(self.held)
    }
}

/// The units of a product's live holds, and the database's clock they were judged by.
///
/// After the wait for the stock row, the holds must be read as they are *now*, committed by
/// whoever had the row before us. On MySQL at REPEATABLE READ a plain SELECT reads the
/// transaction's snapshot, taken at its first plain read — for an order, before it queued for
/// the row — and would miss a hold committed meanwhile: the order would take held units. A
/// locking read (`LOCK IN SHARE MODE`) reads the latest committed rows instead. PostgreSQL at
/// READ COMMITTED takes each statement's snapshot as the statement starts, after the lock was
/// granted, and refuses a locking clause beside an aggregate anyway: a plain read there.
const LIVE_HELD: Sql = Sql::per_engine(
    "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED), {now} FROM stock_holds \
     WHERE product_id = ? AND ended IS NULL AND expires_at > {now} LOCK IN SHARE MODE",
    "SELECT COALESCE(SUM(quantity), 0), {now} FROM stock_holds \
     WHERE product_id = ? AND ended IS NULL AND expires_at > {now}",
);

/// Locks `product_id`'s stock row (`SELECT … FOR UPDATE`) for the rest of the caller's
/// transaction and says what it holds: on hand, and held by live holds. `None` for a product
/// never received, which has no row (and so nothing to sell or hold). Every sale and every hold
/// asks this one function, inside the transaction that then writes.
pub fn lock(conn: &mut DbConn, product_id: i64) -> QueryResult<Option<Stock>> {
    let row = stock_levels::table.find(product_id).select(stock_levels::on_hand);
    let Some(on_hand) = on_engine!(conn, |c| row.for_update().first::<i32>(c)).optional()? else {
        return Ok(None);
    };
    let (held, now): (i64, NaiveDateTime) =
        cached_sql::<(BigInt, Timestamp)>(LIVE_HELD).bind::<BigInt, _>(product_id).get_result(conn)?;
    Ok(Some(Stock { on_hand: on_hand_from_sql(on_hand), held: u32::try_from(held).unwrap_or(u32::MAX), now }))
}

/// What live holds keep aside, per product, as a page shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub units: u32,
    /// When the first of those holds expires, unless bought first: the earliest any of the units
    /// may come back.
    pub first_expiry: NaiveDateTime,
}

/// Every product with live holds, and what they keep aside: a plain snapshot, no locks.
pub fn reserved(conn: &mut DbConn) -> QueryResult<Vec<(i64, Reserved)>> {
    let rows: Vec<(i64, i64, NaiveDateTime)> = cached_sql::<(BigInt, BigInt, Timestamp)>(Sql::per_engine(
        "SELECT product_id, CAST(SUM(quantity) AS SIGNED), MIN(expires_at) FROM stock_holds \
         WHERE ended IS NULL AND expires_at > {now} GROUP BY product_id",
        "SELECT product_id, SUM(quantity), MIN(expires_at) FROM stock_holds \
         WHERE ended IS NULL AND expires_at > {now} GROUP BY product_id",
    ))
    .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(id, units, first_expiry)| {
            (id, Reserved { units: u32::try_from(units).unwrap_or(u32::MAX), first_expiry })
        })
        .collect())
}

/// What a sale or a hold that asked for more than can be sold answers: the sentence of `key`
/// (the feature's, since an order and a hold say it differently) with the product's name and
/// the three numbers, and the same numbers as fields a client can act on. One place for both
/// features, so an order and a hold of one product report the same figures.
pub fn shortfall(
    answer: crate::wire::answers::Answer,
    key: &'static str,
    product_id: i64,
    name: &str,
    (requested, available, held): (u32, u32, u32),
) -> crate::wire::error::Problem {
    answer
        .said(
            key,
            &[
                ("name", name.to_string()),
                ("requested", requested.to_string()),
                ("available", available.to_string()),
                ("held", held.to_string()),
            ],
        )
        .with("product_id", product_id)
        .with("available", available)
        .with("requested", requested)
        .with("held", held)
}
