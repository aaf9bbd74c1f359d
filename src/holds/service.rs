//! Holding, releasing, ordering from a hold and listing: each one transaction, decided by the
//! database's clock.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamp, Untyped};

use super::HoldError;
use super::model::{HoldRequest, HoldState, HoldView, ListedHold, StockHold};
use crate::catalog::stock;
use crate::config::HoldLimits;
use crate::db::{DbConn, DbPool, Sql, cached_sql};
use crate::idempotency::{self, Once};
use crate::locking::retry::{LockConflict, MayConflict, RetryPolicy, retry_on_lock_conflict};
use crate::orders::model::Cart;
use crate::orders::service::OrderView;

/// Runs `attempt` (one whole transaction) again after a deadlock, as orders do, keeping the
/// server's account of each deadlock for the admin (`crate::deadlocks`). A hold's transaction
/// can meet one: on MySQL, counting a product's holds locks the gap after them in the index,
/// and an order holding that lock may wait for the stock row of a product whose first hold
/// goes into that gap.
fn retried<T>(
    pool: &DbPool,
    path: &str,
    mut attempt: impl FnMut(&mut DbConn) -> Result<T, HoldError>,
) -> Result<T, HoldError> {
    let mut conn = pool.get()?;
    let mut evidence = Vec::new();
    let attempted = retry_on_lock_conflict(&RetryPolicy::default(), || {
        let result = attempt(&mut conn);
        if let Err(e) = &result
            && e.lock_conflict() == Some(LockConflict::Deadlock)
            && let Some(error) = e.database_error()
        {
            evidence.extend(crate::deadlocks::capture(&mut conn, pool.url(), path, error));
        }
        result
    });
    for report in evidence {
        let outcome = match &attempted.result {
            Ok(_) => format!("retried: {path} done on attempt {}", attempted.attempts),
            Err(e) => format!("retried: gave up after attempt {} ({e})", attempted.attempts),
        };
        crate::deadlocks::settle(&mut conn, report, &outcome);
    }
    attempted.result
}

/// Holds `request.quantity` of a product for `user_id` for `request.length`, if that many are
/// available — on hand, less every live hold — under the product's stock row lock, and if the
/// customer is within `limits`, counted under the lock of their user row. With an idempotency
/// key (`once`), a resend gets the first answer back and holds nothing more.
pub fn hold(
    pool: &DbPool,
    user_id: i64,
    request: &HoldRequest,
    limits: &HoldLimits,
    once: Option<&Once>,
) -> Result<HoldView, HoldError> {
    retried(pool, "hold", |conn| {
        crate::db::transaction(conn, |conn| {
            // First, before any read, as every order does (`crate::auth::quota`): the customer's
            // holds are counted, and taken, one after another.
            crate::auth::quota::lock_users(conn, &[user_id])?;
            idempotency::once(conn, once, |conn| take_hold(conn, user_id, request, limits))
        })
        .and_then(std::convert::identity)
    })
}

/// At most this many old holds deleted at a time: housekeeping never holds locks for long.
const FORGET_AT_MOST: i64 = 5_000;

/// Deletes ended holds (released, used or expired) that ended more than `history` ago, at most
/// [`FORGET_AT_MOST`] of them, in a short transaction of its own at READ COMMITTED (no gap locks
/// in front of the holds being taken). Returns how many.
pub fn forget_old(pool: &DbPool, history: std::time::Duration) -> Result<usize, HoldError> {
    let history = i64::try_from(history.as_micros()).unwrap_or(i64::MAX);
    let mut conn = pool.get()?;
    Ok(crate::db::transaction_read_committed(&mut conn, |conn| {
        cached_sql::<()>(FORGET).bind::<BigInt, _>(history).bind::<BigInt, _>(FORGET_AT_MOST).execute(conn)
    })?)
}

/// An ended hold is one released or used (`ended_at`) or run out (`expires_at`); a hold created
/// before the cut-off and not live is one of them, or is older still.
const FORGET: Sql = Sql::per_engine(
    "DELETE FROM stock_holds WHERE expires_at < {now} - {? microseconds} ORDER BY expires_at LIMIT ?",
    "DELETE FROM stock_holds WHERE id IN (SELECT id FROM stock_holds \
       WHERE expires_at < {now} - {? microseconds} ORDER BY expires_at LIMIT ?)",
);

/// The customer's own live hold of the product, if any, read after the stock row's lock was
/// granted: a locking read on MySQL, whose plain reads would see the transaction's older
/// snapshot (see `crate::catalog::stock`).
const MINE_LIVE: Sql = Sql::per_engine(
    "SELECT id, quantity, expires_at FROM stock_holds \
     WHERE product_id = ? AND user_id = ? AND ended IS NULL AND expires_at > {now} LOCK IN SHARE MODE",
    "SELECT id, quantity, expires_at FROM stock_holds \
     WHERE product_id = ? AND user_id = ? AND ended IS NULL AND expires_at > {now}",
);

const INSERT_HOLD: &str =
    "INSERT INTO stock_holds (product_id, user_id, quantity, created_at, expires_at) VALUES (?, ?, ?, ?, ?)";

/// What the customer holds and has held lately, read under the lock of their user row: their
/// live holds (products and units), the holds they took in the last minute and the oldest of
/// those, when their last hold of this product ended unused (released, or run out), and the
/// database's clock. Only holds created within [`RECENT`] can be any of these (a hold lasts at
/// most `HOLD_MINUTES`, 120 at most), so `stock_holds_recent` bounds the read.
const MINE_LATELY: &str = "SELECT \
       COUNT(CASE WHEN ended IS NULL AND expires_at > {now} THEN 1 END), \
       CAST(COALESCE(SUM(CASE WHEN ended IS NULL AND expires_at > {now} THEN quantity END), 0) AS {signed}), \
       COUNT(CASE WHEN created_at > {now} - {? microseconds} THEN 1 END), \
       MIN(CASE WHEN created_at > {now} - {? microseconds} THEN created_at END), \
       MAX(CASE WHEN product_id = ? AND ended = 'released' THEN ended_at \
                WHEN product_id = ? AND ended IS NULL AND expires_at <= {now} THEN expires_at END), \
       {now} \
     FROM stock_holds WHERE user_id = ? AND created_at > {now} - {? microseconds}";

/// How far back [`MINE_LATELY`] looks, besides the cooldown: the longest hold there can be, and
/// the rate's minute.
const RECENT: chrono::TimeDelta = chrono::TimeDelta::minutes(120 + 1);

/// The rate's window.
const MINUTE: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// Refuses a hold past the customer's `limits`; run under the lock of their user row, so exact.
fn within_limits(
    conn: &mut DbConn,
    user_id: i64,
    request: &HoldRequest,
    limits: &HoldLimits,
) -> Result<(), HoldError> {
    // `HOLD_COOLDOWN_SECS` is at most a day, so none of these sums can overflow; checked anyway.
    let cooldown = chrono::TimeDelta::from_std(limits.cooldown).unwrap_or(chrono::TimeDelta::MAX);
    let horizon = RECENT.checked_add(&cooldown).unwrap_or(chrono::TimeDelta::MAX);
    let (products, units, lately, oldest, ended, now) =
        cached_sql::<(BigInt, BigInt, BigInt, Nullable<Timestamp>, Nullable<Timestamp>, Timestamp)>(
            MINE_LATELY,
        )
        .bind::<BigInt, _>(MINUTE.num_microseconds().unwrap_or(i64::MAX))
        .bind::<BigInt, _>(MINUTE.num_microseconds().unwrap_or(i64::MAX))
        .bind::<BigInt, _>(request.product_id)
        .bind::<BigInt, _>(request.product_id)
        .bind::<BigInt, _>(user_id)
        .bind::<BigInt, _>(horizon.num_microseconds().unwrap_or(i64::MAX))
        .get_result::<(i64, i64, i64, Option<NaiveDateTime>, Option<NaiveDateTime>, NaiveDateTime)>(conn)?;
    let seconds_until = |at: NaiveDateTime| {
        u32::try_from((at - now).num_seconds().saturating_add(1).max(1)).unwrap_or(u32::MAX)
    };
    if lately >= i64::from(limits.per_minute) {
        let retry_after = oldest.map_or(60, |oldest| seconds_until(oldest + MINUTE));
        return Err(HoldError::TooFast { max: limits.per_minute, retry_after });
    }
    if let Some(again) = ended.map(|ended| ended.checked_add_signed(cooldown).unwrap_or(NaiveDateTime::MAX))
        && again > now
    {
        return Err(HoldError::Cooldown {
            product_id: request.product_id,
            retry_after: seconds_until(again),
        });
    }
    let wanted = i64::from(request.quantity.get());
    if products >= i64::from(limits.products) || units + wanted > i64::from(limits.units) {
        return Err(HoldError::OverLimit {
            product_id: request.product_id,
            held_units: u32::try_from(units).unwrap_or(u32::MAX),
            held_products: u32::try_from(products).unwrap_or(u32::MAX),
            max_units: limits.units,
            max_products: limits.products,
        });
    }
    Ok(())
}

/// One attempt; the caller owns the transaction, and has locked the customer's user row.
fn take_hold(
    conn: &mut DbConn,
    user_id: i64,
    request: &HoldRequest,
    limits: &HoldLimits,
) -> Result<HoldView, HoldError> {
    let product_id = request.product_id;
    let name: String = cached_sql::<Text>("SELECT name FROM products WHERE id = ?")
        .bind::<BigInt, _>(product_id)
        .get_result(conn)
        .optional()?
        .ok_or(HoldError::UnknownProduct(product_id))?;
    // The stock row first: from here to COMMIT no other sale or hold of this product runs.
    let Some(stock) = stock::lock(conn, product_id)? else {
        // Never received: nothing to hold.
        return Err(HoldError::InsufficientStock {
            product_id,
            name,
            requested: request.quantity.get(),
            available: 0,
            held: 0,
        });
    };
    let mine: Option<(i64, i32, NaiveDateTime)> = cached_sql::<(BigInt, Integer, Timestamp)>(MINE_LIVE)
        .bind::<BigInt, _>(product_id)
        .bind::<BigInt, _>(user_id)
        .load(conn)?
        .into_iter()
        .next();
    if let Some((id, quantity, expires_at)) = mine {
        return Err(HoldError::AlreadyHeld { id, product_id, name, quantity, expires_at });
    }
    within_limits(conn, user_id, request, limits)?;
    if stock.available() < request.quantity.get() {
        return Err(HoldError::InsufficientStock {
            product_id,
            name,
            requested: request.quantity.get(),
            available: stock.available(),
            // Only others' holds: this customer has none of the product (just checked).
            held: stock.held,
        });
    }
    // The database's clock, as read with the holds: the same clock that will say it expired.
    let created_at = stock.now;
    let expires_at = created_at + chrono::TimeDelta::microseconds(request.length.micros());
    cached_sql::<()>(INSERT_HOLD)
        .bind::<BigInt, _>(product_id)
        .bind::<BigInt, _>(user_id)
        .bind::<Integer, _>(request.quantity.signed())
        .bind::<Timestamp, _>(created_at)
        .bind::<Timestamp, _>(expires_at)
        .execute(conn)?;
    let id = crate::db::last_insert_id(conn)?;
    let hold = StockHold {
        id,
        product_id,
        user_id,
        quantity: request.quantity.signed(),
        created_at,
        expires_at,
        ended: None,
        order_id: None,
    };
    Ok(hold.view(created_at))
}

/// A hold with the database's clock, read in the same statement.
#[derive(QueryableByName)]
struct Found {
    #[diesel(embed)]
    hold: StockHold,
    #[diesel(sql_type = Timestamp)]
    now: NaiveDateTime,
}

/// One of the user's holds, its row locked for the rest of the transaction.
const FIND_LOCKED: &str = "SELECT id, product_id, user_id, quantity, created_at, expires_at, ended, order_id, \
       {now} AS now FROM stock_holds WHERE id = ? AND user_id = ? FOR UPDATE";

fn find_locked(conn: &mut DbConn, user_id: i64, hold_id: i64) -> Result<Found, HoldError> {
    cached_sql::<Untyped>(FIND_LOCKED)
        .bind::<BigInt, _>(hold_id)
        .bind::<BigInt, _>(user_id)
        .get_result::<Found>(conn)
        .optional()?
        .ok_or(HoldError::NotFound(hold_id))
}

/// Ends a live hold, giving its units back at once. Only gives back, so no stock lock: the
/// UPDATE decides, by the database's clock, under the hold row's own lock; a hold that is not
/// live is left as it is and the answer says why.
pub fn release(conn: &mut DbConn, user_id: i64, hold_id: i64) -> Result<HoldView, HoldError> {
    crate::db::transaction(conn, |conn| {
        let released = cached_sql::<()>(
            "UPDATE stock_holds SET ended = 'released', ended_at = {now} \
             WHERE id = ? AND user_id = ? AND ended IS NULL AND expires_at > {now}",
        )
        .bind::<BigInt, _>(hold_id)
        .bind::<BigInt, _>(user_id)
        .execute(conn)?;
        let Found { hold, now } = find_locked(conn, user_id, hold_id)?;
        match (released, hold.not_live_at(now)) {
            (1, _) => Ok(hold.view(now)),
            (_, Some(refused)) => Err(refused),
            // Live a moment after the UPDATE found it expired: only a clock that ran backwards.
            (_, None) => Err(HoldError::Expired { id: hold.id, expired_at: hold.expires_at }),
        }
    })
}

/// Places the order a live hold was for: the hold's quantity is taken from stock, the hold marked
/// used with the order's id, the ledger written — one transaction, under the stock row's lock,
/// retried as a whole after a deadlock. An expired, released or used hold is refused, each with
/// its sentence. An order from a hold is an order: the per-minute limit counts it
/// (`MAX_ORDERS_PER_MINUTE_PER_USER`). With an idempotency key, a resend gets the first answer.
pub fn order_from_hold(
    pool: &DbPool,
    user_id: i64,
    hold_id: i64,
    once: Option<&Once>,
    max_per_minute: u32,
) -> Result<OrderView, HoldError> {
    retried(pool, "order from hold", |conn| {
        crate::db::transaction(conn, |conn| {
            // First, before any read, as every order does (`crate::auth::quota`).
            crate::auth::quota::lock_users(conn, &[user_id])?;
            idempotency::once(conn, once, |conn| {
                crate::orders::service::within_rate(conn, user_id, max_per_minute)?;
                use_hold(conn, user_id, hold_id)
            })
        })
        .and_then(std::convert::identity)
    })
}

/// One attempt; the caller owns the transaction.
fn use_hold(conn: &mut DbConn, user_id: i64, hold_id: i64) -> Result<OrderView, HoldError> {
    // Which stock row to lock. A hold's product never changes: a plain read is enough for that.
    let product_id: i64 =
        cached_sql::<BigInt>("SELECT product_id FROM stock_holds WHERE id = ? AND user_id = ?")
            .bind::<BigInt, _>(hold_id)
            .bind::<BigInt, _>(user_id)
            .get_result(conn)
            .optional()?
            .ok_or(HoldError::NotFound(hold_id))?;
    // The stock row, then the hold's row: the order every sale and hold locks them in. (The
    // hold's row first would deadlock with an order that has the stock row and counts the
    // holds.)
    stock::lock(conn, product_id)?;
    let Found { hold, now } = find_locked(conn, user_id, hold_id)?;
    if let Some(refused) = hold.not_live_at(now) {
        return Err(refused);
    }
    // Ended first, so that the order's own count of live holds no longer includes it: the order
    // then takes the held units, which no one else could.
    cached_sql::<()>("UPDATE stock_holds SET ended = 'used', ended_at = {now} WHERE id = ?")
        .bind::<BigInt, _>(hold_id)
        .execute(conn)?;
    let cart = Cart::parse(&[(product_id, i64::from(hold.quantity))])?;
    let order = match crate::orders::service::take_from_stock(conn, user_id, &cart) {
        Ok(order) => order,
        Err(refused) => {
            // The units were not there after all (only a hand edit of the stock can do that:
            // every sale respects live holds). The refusal may be committed as the answer to an
            // idempotency key, so the hold must be left as it was found, live, not "used" with
            // no order behind it.
            cached_sql::<()>("UPDATE stock_holds SET ended = NULL, ended_at = NULL WHERE id = ?")
                .bind::<BigInt, _>(hold_id)
                .execute(conn)?;
            return Err(refused.into());
        }
    };
    cached_sql::<()>("UPDATE stock_holds SET order_id = ? WHERE id = ?")
        .bind::<BigInt, _>(order.id)
        .bind::<BigInt, _>(hold_id)
        .execute(conn)?;
    Ok(order)
}

/// How many of the user's holds the page and the API list, newest first after the live ones.
pub const LISTED: i64 = 50;

/// The user's latest holds: the live ones first, soonest to expire first, then the ended and
/// expired ones, newest first. A plain read.
pub fn mine(conn: &mut DbConn, user_id: i64) -> Result<Vec<ListedHold>, HoldError> {
    let mut holds: Vec<ListedHold> = cached_sql::<Untyped>(
        "SELECT h.id, h.product_id, h.user_id, h.quantity, h.created_at, h.expires_at, h.ended, \
           h.order_id, p.sku, p.name, p.price_cents, {now} AS now \
         FROM stock_holds h JOIN products p ON p.id = h.product_id \
         WHERE h.user_id = ? ORDER BY h.id DESC LIMIT ?",
    )
    .bind::<BigInt, _>(user_id)
    .bind::<BigInt, _>(LISTED)
    .load(conn)?;
    holds.sort_by_key(|h| match h.state() {
        HoldState::Live => (0, h.hold.expires_at.and_utc().timestamp_micros()),
        _ => (1, -h.hold.id),
    });
    Ok(holds)
}

/// [`mine`] as the API gives it.
pub fn my_views(conn: &mut DbConn, user_id: i64) -> Result<Vec<HoldView>, HoldError> {
    Ok(mine(conn, user_id)?.iter().map(ListedHold::view).collect())
}
