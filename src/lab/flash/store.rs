//! One flash sale at a time across every instance, and the stored reports (`demo_flash_sales`).
//!
//! Every instance sells to the same buyer accounts (`buyers.rs`): two sales at once would give
//! them two passwords and end each other's sessions. So a sale first takes the one slot, a row
//! whose `running` is 1: the column's unique key lets one row hold it, whichever instance
//! inserts it, and the others are told who is selling. The slot is a lease, read by the
//! database's clock like every expiry in haita: a runner that dies mid-sale leaves its row
//! behind, and once `lease_until` has passed the next start frees it. A sale never runs longer
//! than [`LEASE`], so a lapsed lease is never a live sale's.

use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};
use diesel::sql_types::{BigInt, Text};

use super::FlashError;
use super::report::FlashReport;
use crate::db::{DbConn, cached_sql};
use crate::lab::schema::demo_flash_sales;

/// The longest a sale may hold the slot: its logins, both variants at their time cap, and the
/// counting between them, with room to spare (see `sale::TIME_CAP`, `sale::LOGIN_CAP`).
pub const LEASE: Duration = Duration::from_secs(300);
/// How long after their previous sale one user may start another: a sale keeps 500 buyers busy
/// on the instances for seconds.
pub const COOLDOWN: Duration = Duration::from_secs(60);
/// Sales kept, with their throwaway products; older ones are deleted after each sale, so the
/// catalog does not fill up with sold-out flash products.
pub const KEEP_SALES: i64 = 5;

/// Frees the slot of a sale whose lease has passed: its runner stopped before it could end it.
const FREE_LAPSED: &str = "UPDATE demo_flash_sales SET running = NULL, ended_at = {now}, \
     failure = 'Its runner stopped before the end (the lease ran out).' \
     WHERE running = 1 AND lease_until < {now}";
/// Takes the slot: the unique key on `running` refuses a second row with 1.
const TAKE: &str = "INSERT INTO demo_flash_sales (started_by, running, lease_until) \
     VALUES (?, 1, {now} + {? microseconds})";

/// Proof that this runner holds the slot: a sale runs only with one (see `sale::run`).
pub struct Slot {
    pub id: i64,
}

/// Takes the slot for `started_by`, or says who holds it. Each statement commits on its own:
/// on PostgreSQL a duplicate key would abort a transaction around them.
pub fn take(conn: &mut DbConn, started_by: &str) -> Result<Slot, FlashError> {
    cached_sql::<()>(FREE_LAPSED).execute(conn)?;
    let micros = i64::try_from(LEASE.as_micros()).unwrap_or(i64::MAX);
    match cached_sql::<()>(TAKE).bind::<Text, _>(started_by).bind::<BigInt, _>(micros).execute(conn) {
        Ok(_) => Ok(Slot { id: crate::db::last_insert_id(conn)? }),
        Err(DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
            let holder: Option<String> = demo_flash_sales::table
                .filter(demo_flash_sales::running.eq(1))
                .select(demo_flash_sales::started_by)
                .first(conn)
                .optional()?;
            // Ended between the insert and this read: the next press will find the slot free.
            Err(FlashError::Running(holder.unwrap_or_else(|| "someone".into())))
        }
        Err(e) => Err(e.into()),
    }
}

/// Ends the sale of `slot`: its report, or why it failed, and the slot freed for the next one.
/// Then forgets the sales older than the newest [`KEEP_SALES`].
pub fn finish(
    conn: &mut DbConn,
    slot: Slot,
    outcome: Result<&FlashReport, String>,
) -> Result<(), FlashError> {
    let (report, failure) = match outcome {
        Ok(report) => (Some(serde_json::to_string(report).map_err(anyhow::Error::from)?), None),
        Err(message) => (None, Some(message.chars().take(500).collect::<String>())),
    };
    cached_sql::<()>(
        "UPDATE demo_flash_sales SET running = NULL, report = ?, failure = ?, ended_at = {now} WHERE id = ?",
    )
    .bind::<diesel::sql_types::Nullable<Text>, _>(report)
    .bind::<diesel::sql_types::Nullable<Text>, _>(failure)
    .bind::<BigInt, _>(slot.id)
    .execute(conn)?;
    if let Err(e) = forget_old_sales(conn) {
        // The sale is stored; its old rows are only clutter, tried again after the next sale.
        log::warn!("could not delete the flash sales older than the newest {KEEP_SALES}: {e}");
    }
    Ok(())
}

/// Deletes the sales older than the newest [`KEEP_SALES`] that have ended, with everything
/// their throwaway products made: holds, ledger rows, order lines and the orders, stock rows,
/// products. Both sides of every invariant go together (an order with its ledger rows, a stock
/// row with its ledger), so the ones left still hold.
fn forget_old_sales(conn: &mut DbConn) -> Result<(), FlashError> {
    use crate::schema::{order_lines, orders, products, stock_holds, stock_levels, stock_movements};
    let Some(oldest_kept) = demo_flash_sales::table
        .order(demo_flash_sales::id.desc())
        .offset(KEEP_SALES - 1)
        .select(demo_flash_sales::id)
        .first::<i64>(conn)
        .optional()?
    else {
        return Ok(());
    };
    let old = || demo_flash_sales::table.filter(demo_flash_sales::id.lt(oldest_kept));
    let reports: Vec<Option<String>> =
        old().filter(demo_flash_sales::running.is_null()).select(demo_flash_sales::report).load(conn)?;
    let products: Vec<i64> = reports
        .iter()
        .flatten()
        .filter_map(|json| serde_json::from_str::<FlashReport>(json).ok())
        .flat_map(|report| report.variants.into_iter().map(|v| v.product_id))
        .collect();
    crate::db::transaction(conn, |conn| {
        if !products.is_empty() {
            let sold: Vec<i64> = order_lines::table
                .filter(order_lines::product_id.eq_any(&products))
                .select(order_lines::order_id)
                .load(conn)?;
            diesel::delete(stock_holds::table.filter(stock_holds::product_id.eq_any(&products)))
                .execute(conn)?;
            diesel::delete(stock_movements::table.filter(stock_movements::product_id.eq_any(&products)))
                .execute(conn)?;
            diesel::delete(order_lines::table.filter(order_lines::product_id.eq_any(&products)))
                .execute(conn)?;
            diesel::delete(orders::table.filter(orders::id.eq_any(&sold))).execute(conn)?;
            diesel::delete(stock_levels::table.filter(stock_levels::product_id.eq_any(&products)))
                .execute(conn)?;
            diesel::delete(products::table.filter(products::id.eq_any(&products))).execute(conn)?;
        }
        diesel::delete(old().filter(demo_flash_sales::running.is_null())).execute(conn)?;
        Ok(())
    })
}

/// How long `started_by` must still wait before another sale, if at all; by the database's
/// clock, which wrote `created_at`.
pub fn cooldown_left(conn: &mut DbConn, started_by: &str) -> Result<Option<Duration>, FlashError> {
    #[derive(QueryableByName)]
    struct Since {
        #[diesel(sql_type = diesel::sql_types::Timestamp)]
        created_at: NaiveDateTime,
        #[diesel(sql_type = diesel::sql_types::Timestamp)]
        now: NaiveDateTime,
    }
    let last: Option<Since> = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT created_at, {now} AS now FROM demo_flash_sales WHERE started_by = ? ORDER BY id DESC LIMIT 1",
    )
    .bind::<Text, _>(started_by)
    .get_result(conn)
    .optional()?;
    Ok(last
        .map(|s| (s.now - s.created_at).to_std().unwrap_or_default())
        .and_then(|since| COOLDOWN.checked_sub(since))
        .filter(|left| !left.is_zero()))
}

/// What `/demo` shows of the flash sales: the one running now (on any instance), and the
/// latest that ended.
#[derive(Clone, Debug, Default)]
pub struct Shown {
    /// The sale running now.
    pub running: Option<Running>,
    /// The latest sale that ended with a report.
    pub report: Option<FlashReport>,
    /// Why the latest sale failed, when it ended after the latest report.
    pub failure: Option<String>,
}

/// Who started the sale running now, and when.
#[derive(Clone, Debug)]
pub struct Running {
    pub started_by: String,
    pub started_at: NaiveDateTime,
}

/// The flash sales `/demo` shows: three short reads, the report only of the one shown.
pub fn latest(conn: &mut DbConn) -> Result<Shown, FlashError> {
    #[derive(QueryableByName)]
    struct Live {
        #[diesel(sql_type = Text)]
        started_by: String,
        #[diesel(sql_type = diesel::sql_types::Timestamp)]
        created_at: NaiveDateTime,
    }
    // A slot whose lease has passed is a runner that died, not a sale running.
    let running = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT started_by, created_at FROM demo_flash_sales WHERE running = 1 AND lease_until > {now}",
    )
    .get_result::<Live>(conn)
    .optional()?
    .map(|live| Running { started_by: live.started_by, started_at: live.created_at });
    let report: Option<(i64, Option<String>)> = demo_flash_sales::table
        .filter(demo_flash_sales::report.is_not_null())
        .order(demo_flash_sales::id.desc())
        .select((demo_flash_sales::id, demo_flash_sales::report))
        .first(conn)
        .optional()?;
    let failure: Option<Option<String>> = demo_flash_sales::table
        .filter(demo_flash_sales::failure.is_not_null())
        .filter(demo_flash_sales::id.gt(report.as_ref().map_or(0, |(id, _)| *id)))
        .order(demo_flash_sales::id.desc())
        .select(demo_flash_sales::failure)
        .first(conn)
        .optional()?;
    let report = match report {
        Some((id, Some(json))) => {
            let mut report: FlashReport = serde_json::from_str(&json).map_err(anyhow::Error::from)?;
            report.id = id;
            Some(report)
        }
        _ => None,
    };
    Ok(Shown { running, report, failure: failure.flatten() })
}
