//! Placing an order: lock, check, decrement, record — in one transaction, retried as a whole.
//!
//! Two ways in, the same steps. [`place_order`], the lesson: one order, of any cart, per
//! transaction. [`super::batch::order_batch`], the coalesced path (`super::coalesce` gathers it):
//! many single-line orders of one product in one transaction, each decided as if alone. Both ask
//! [`available_under_lock`] what can be sold, under the stock row's lock, and write an order and
//! its ledger rows with [`record_orders`]; so whatever changes what "available" means changes it
//! for both.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamp};
use serde::{Deserialize, Serialize};

use super::OrderError;
use super::model::{Cart, Order};
use crate::db::cached::ListStatements;
use crate::db::{DbConn, DbPool, Sql, cached_sql};
use crate::idempotency::{self, Once};
use crate::inventory::model::{MovementReason, NewStockMovement, Quantity};
use crate::locking::retry::{LockConflict, MayConflict, RetryPolicy, retry_on_lock_conflict};
use crate::metrics::{self, Family};
use crate::schema::{order_lines, orders, products};

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderView {
    pub id: i64,
    #[serde(with = "crate::wire::utc")]
    pub created_at: chrono::NaiveDateTime,
    pub total_cents: i64,
    pub lines: Vec<OrderLineView>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderLineView {
    pub product_id: i64,
    pub sku: String,
    pub name: String,
    pub quantity: i32,
    pub unit_price_cents: i64,
}

/// A placed order and how many attempts its transaction took.
pub struct Placed {
    pub order: OrderView,
    pub attempts: u32,
}

/// Places `cart` for `user_id`: either every line is taken from stock and recorded, or nothing
/// is (a shortfall answers 409 and leaves no trace). Runs the whole transaction again after a
/// deadlock, as `policy` allows; a lock wait timeout ends it at once
/// ([`crate::locking::retry`]). With an idempotency key (`once`), the
/// order is placed at most once per key: a resend gets the first answer back
/// ([`crate::idempotency`]).
///
/// One user places at most `max_per_minute` orders within any 60 seconds
/// (`MAX_ORDERS_PER_MINUTE_PER_USER`); past them the order is refused with
/// [`OrderError::TooFast`] and a `Retry-After`. Exact under concurrency: the transaction first
/// locks the user's row ([`crate::auth::quota`]), so the user's orders are counted and placed one
/// after another. A resend with an idempotency key gets its stored answer before the count.
pub fn place_order(
    pool: &DbPool,
    policy: &RetryPolicy,
    user_id: i64,
    cart: &Cart,
    once: Option<&Once>,
    max_per_minute: u32,
) -> Result<Placed, OrderError> {
    let attempt = |conn: &mut DbConn| {
        crate::db::transaction(conn, |conn| {
            // First, before any read: see `crate::auth::quota`.
            crate::auth::quota::lock_users(conn, &[user_id])?;
            idempotency::once(conn, once, |conn| {
                within_rate(conn, user_id, max_per_minute)?;
                take_from_stock(conn, user_id, cart)
            })
        })
        .and_then(std::convert::identity)
    };
    let placed =
        |order: &OrderView, attempts| format!("retried: order {} placed on attempt {attempts}", order.id);
    let (order, attempts) = retried(pool, policy, "order", attempt, placed)?;
    Ok(Placed { order, attempts })
}

/// Runs `attempt` (one whole transaction) on one pooled connection, again after a deadlock as
/// `policy` allows, and returns its result with the attempts it took. Each deadlock is kept as
/// evidence for the admin (`crate::deadlocks`), as seen by `seen_by`, with what became of the
/// request in the end (`placed` words a success).
pub(super) fn retried<T>(
    pool: &DbPool,
    policy: &RetryPolicy,
    seen_by: &str,
    mut attempt: impl FnMut(&mut DbConn) -> Result<T, OrderError>,
    placed: impl Fn(&T, u32) -> String,
) -> Result<(T, u32), OrderError> {
    let mut conn = pool.get()?;
    let mut evidence = Vec::new();
    let attempted = retry_on_lock_conflict(policy, || {
        let began = Instant::now();
        let result = attempt(&mut conn);
        // Row locks last until the transaction ends: from BEGIN to COMMIT is the longest they
        // can have been held.
        metrics::held(Family::Row, "stock", began.elapsed());
        if let Err(e) = &result
            && e.lock_conflict() == Some(LockConflict::Deadlock)
            && let Some(error) = e.database_error()
        {
            // Read before the retry: the next deadlock on the server would overwrite it.
            evidence.extend(crate::deadlocks::capture(&mut conn, pool.url(), seen_by, error));
        }
        result
    });
    for report in evidence {
        let outcome = match &attempted.result {
            Ok(done) => placed(done, attempted.attempts),
            Err(e) => format!("retried: gave up after attempt {} ({e})", attempted.attempts),
        };
        crate::deadlocks::settle(&mut conn, report, &outcome);
    }
    Ok((attempted.result?, attempted.attempts))
}

/// Names, SKUs and prices of the cart's products. Texts for 1, 4, 16 and [`Cart::MAX_LINES`]
/// products, so a connection caches four statements for every cart.
static CATALOG: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT id, sku, name, price_cents FROM products WHERE id IN ({list})",
        &[1, 4, 16, Cart::MAX_LINES],
    )
});

/// The products of an order (or a batch's one product) as this transaction read them: a
/// plain read, so the price is the one seen when the order was decided.
pub(super) struct Catalog(Vec<(i64, String, String, i64)>);

impl Catalog {
    pub(super) fn read(conn: &mut DbConn, product_ids: &[i64]) -> Result<Self, OrderError> {
        let (sql, ids) = CATALOG.padded(product_ids).ok_or(OrderError::Empty)?;
        Ok(Self(cached_sql::<(BigInt, Text, Text, BigInt)>(sql).bind_each::<BigInt, _>(ids).load(conn)?))
    }

    /// The product's name; a product that does not exist cannot be ordered.
    pub(super) fn name(&self, product_id: i64) -> Result<&str, OrderError> {
        self.0
            .iter()
            .find(|(id, ..)| *id == product_id)
            .map(|(_, _, name, _)| name.as_str())
            .ok_or(OrderError::UnknownProduct(product_id))
    }

    /// The order line for `quantity` of `product_id`, at the price read.
    pub(super) fn line(&self, product_id: i64, quantity: Quantity) -> Result<OrderLineView, OrderError> {
        let (_, sku, name, unit_price_cents) = self
            .0
            .iter()
            .find(|(id, ..)| *id == product_id)
            .ok_or(OrderError::UnknownProduct(product_id))?
            .clone();
        Ok(OrderLineView { product_id, sku, name, quantity: quantity.signed(), unit_price_cents })
    }
}

/// The users' orders of the last minute: how many, and when the oldest of them was placed.
/// `created_at` is written by the app's clock ([`record_order`]), so the window is measured by
/// it too. Sizes up to a coalesced batch's users (`coalesce::MAX_BATCH`); one user is the
/// one-at-a-time path.
static RECENT: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::new(
        "SELECT user_id, COUNT(*), MIN(created_at) FROM orders \
         WHERE created_at > ? AND user_id IN ({list}) GROUP BY user_id",
        &[1, 4, 16, super::coalesce::MAX_BATCH],
    )
});

/// The window `MAX_ORDERS_PER_MINUTE_PER_USER` counts in.
const RATE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Each user's orders within the last minute, read once their rows are locked and kept up to date
/// as a batch places more ([`Rates::placed`]): each order is counted as if it ran alone, after
/// the ones before it.
pub(super) struct Rates {
    now: NaiveDateTime,
    /// Per user: orders in the window, and the oldest of them. A user without any is missing.
    recent: HashMap<i64, (i64, NaiveDateTime)>,
}

impl Rates {
    /// Only ever run after the users' rows were locked ([`crate::auth::quota`]).
    pub(super) fn read(conn: &mut DbConn, users: &[i64]) -> Result<Self, OrderError> {
        let now = crate::db::now_micros();
        let (sql, padded) = RECENT.padded(users).ok_or_else(bad_batch)?;
        let rows: Vec<(i64, i64, Option<NaiveDateTime>)> =
            cached_sql::<(BigInt, BigInt, Nullable<Timestamp>)>(sql)
                .bind::<Timestamp, _>(now - RATE_WINDOW)
                .bind_each::<BigInt, _>(padded)
                .load(conn)?;
        let recent =
            rows.into_iter().filter_map(|(user, count, oldest)| Some((user, (count, oldest?)))).collect();
        Ok(Self { now, recent })
    }

    /// Refuses the user's next order when they placed `max` within the last minute already,
    /// saying when the oldest of them leaves it.
    pub(super) fn check(&self, user_id: i64, max: u32) -> Result<(), OrderError> {
        match self.recent.get(&user_id) {
            Some(&(recent, oldest)) if recent >= i64::from(max) => {
                let left = (oldest + RATE_WINDOW - self.now).num_milliseconds();
                // Whole seconds, rounded up, and at least one: a client waiting that long is let in.
                let retry_after = u32::try_from((left + 999) / 1000).unwrap_or(1).max(1);
                Err(OrderError::TooFast { max, retry_after })
            }
            _ => Ok(()),
        }
    }

    /// Counts an order the user has just placed, at `at`.
    pub(super) fn placed(&mut self, user_id: i64, at: NaiveDateTime) {
        let (recent, oldest) = self.recent.entry(user_id).or_insert((0, at));
        *recent += 1;
        *oldest = (*oldest).min(at);
    }
}

/// Refuses the order when the user placed `max` orders within the last minute already, saying
/// when the oldest of them leaves it: the rate of one order alone (an order from a checkout hold,
/// `crate::holds`, counts as any order). Only ever run after the user's row was locked.
pub fn within_rate(conn: &mut DbConn, user_id: i64, max: u32) -> Result<(), OrderError> {
    Rates::read(conn, &[user_id])?.check(user_id, max)
}

/// What can be sold of a product, and what live checkout holds keep aside of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sellable {
    /// On hand, less the units in live holds.
    pub available: u32,
    /// Units in other customers' live checkout holds (`crate::holds`): said in a refusal, so a
    /// buyer learns the units may come back.
    pub held: u32,
}

/// What can be sold of `product_id` now, read under the lock of its stock row
/// (`SELECT … FOR UPDATE`, [`crate::catalog::stock::lock`]), which the caller's transaction keeps
/// until it ends: nobody else can sell from the row meanwhile, so what this says stays true until
/// COMMIT. Units in live checkout holds are not for sale. A product never received has no row:
/// it has nothing to sell.
///
/// Both paths decide with this one answer: [`take_from_stock`] for each line of an order,
/// [`order_batch`] once for its whole batch, whose orders then take from it in arrival order.
pub fn available_under_lock(conn: &mut DbConn, product_id: i64) -> QueryResult<Sellable> {
    Ok(crate::catalog::stock::lock(conn, product_id)?
        .map_or(Sellable { available: 0, held: 0 }, |s| Sellable { available: s.available(), held: s.held }))
}

const TAKE: &str = "UPDATE stock_levels SET on_hand = on_hand - ? WHERE product_id = ?";

/// Takes `quantity` units of `product_id` off its stock row, which the caller has locked and
/// checked ([`available_under_lock`]).
pub(super) fn take(conn: &mut DbConn, product_id: i64, quantity: u32) -> Result<(), OrderError> {
    let quantity = i32::try_from(quantity).map_err(|_| bad_batch())?;
    cached_sql::<()>(TAKE).bind::<Integer, _>(quantity).bind::<BigInt, _>(product_id).execute(conn)?;
    Ok(())
}

/// A batch holds one order at least and never more than `coalesce::MAX_BATCH` (whose units fit
/// a stock row), and every order written has its row: anything else is a bug here, not
/// something a request did.
pub(super) fn bad_batch() -> OrderError {
    diesel::result::Error::QueryBuilderError("batch empty or too long, or an order row not found".into())
        .into()
}

/// One attempt; the caller owns the transaction. Returns the order as written, without reading
/// it back: only its id comes from the server (`created_at` is set here for that reason).
pub fn take_from_stock(conn: &mut DbConn, user_id: i64, cart: &Cart) -> Result<OrderView, OrderError> {
    // Names and prices: a plain read. The price is the one seen by this transaction.
    let catalog = Catalog::read(conn, &cart.product_ids())?;

    // Lock every stock row of the cart, one statement per row, in ascending product id: the
    // order is then fixed by this loop, not by whichever scan the optimiser picks for an IN
    // list, and two carts sharing products always queue in the same order instead of
    // deadlocking.
    let locking = Instant::now();
    let locked = cart.lines().iter().try_for_each(|line| {
        let name = catalog.name(line.product_id)?;
        let Sellable { available, held } = available_under_lock(conn, line.product_id)?;
        if available < line.quantity.get() {
            return Err(OrderError::InsufficientStock {
                product_id: line.product_id,
                name: name.to_owned(),
                requested: line.quantity.get(),
                available,
                held,
            });
        }
        Ok(())
    });
    // Waited for the row locks (reading the rows is little next to a wait), timed out or not.
    metrics::waited(Family::Row, "stock", locking.elapsed());
    locked?;

    // Every row is locked and checked: decrement and record.
    let mut lines = Vec::with_capacity(cart.lines().len());
    for line in cart.lines() {
        take(conn, line.product_id, line.quantity.get())?;
        lines.push(catalog.line(line.product_id, line.quantity)?);
    }
    let order = NewOrder { user_id, created_at: crate::db::now_micros(), lines };
    record_orders(conn, vec![order])?.pop().ok_or_else(bad_batch)
}

/// An order decided and about to be written: whose, when, and its lines at the prices read.
pub(super) struct NewOrder {
    pub(super) user_id: i64,
    pub(super) created_at: NaiveDateTime,
    pub(super) lines: Vec<OrderLineView>,
}

/// The orders' rows, travelling as one JSON array the server expands into rows (`JSON_TABLE` on
/// MySQL, `json_to_recordset` on PostgreSQL): one statement, one text to cache, for one order or
/// a batch's. Inserted in `n` order, so their ids are handed out in that order.
const INSERT_ORDERS: Sql = Sql::per_engine(
    "INSERT INTO orders (user_id, total_cents, created_at) \
     SELECT user_id, total_cents, created_at FROM JSON_TABLE(?, '$[*]' COLUMNS (\
       n INT PATH '$.n', user_id BIGINT PATH '$.user_id', total_cents BIGINT PATH '$.total_cents', \
       created_at DATETIME(6) PATH '$.created_at')) AS o ORDER BY n",
    "INSERT INTO orders (user_id, total_cents, created_at) \
     SELECT user_id, total_cents, created_at FROM json_to_recordset(CAST(? AS json)) \
       AS o(n INTEGER, user_id BIGINT, total_cents BIGINT, created_at TIMESTAMP) ORDER BY n",
);

/// The ids of the orders [`INSERT_ORDERS`] has just written, ascending, so in the order they
/// were written. Ours are the rows of our users at or after the first id the insert handed out
/// (MySQL's `LAST_INSERT_ID()` of a multi-row insert), or the last `n` up to the last id
/// (PostgreSQL's `lastval()`, read once by its subquery, so that the primary key's index finds
/// the rows): those users' rows are locked by this transaction
/// ([`crate::auth::quota`]), so no other order of theirs can be written meanwhile, and every
/// earlier one has a smaller id.
static INSERTED_IDS: LazyLock<ListStatements> = LazyLock::new(|| {
    ListStatements::per_engine(
        "SELECT id FROM orders WHERE id >= LAST_INSERT_ID() AND user_id IN ({list}) ORDER BY id LIMIT ?",
        "SELECT id FROM (SELECT id FROM orders WHERE id <= (SELECT lastval()) AND user_id IN ({list}) \
           ORDER BY id DESC LIMIT ?) AS ours ORDER BY id",
        &[1, 4, 16, super::coalesce::MAX_BATCH],
    )
});

/// The lines of the orders, one JSON array as for [`INSERT_ORDERS`].
const INSERT_LINES: Sql = Sql::per_engine(
    "INSERT INTO order_lines (order_id, product_id, quantity, unit_price_cents) \
     SELECT order_id, product_id, quantity, unit_price_cents FROM JSON_TABLE(?, '$[*]' COLUMNS (\
       order_id BIGINT PATH '$.order_id', product_id BIGINT PATH '$.product_id', \
       quantity INT PATH '$.quantity', unit_price_cents BIGINT PATH '$.unit_price_cents')) AS l",
    "INSERT INTO order_lines (order_id, product_id, quantity, unit_price_cents) \
     SELECT order_id, product_id, quantity, unit_price_cents FROM json_to_recordset(CAST(? AS json)) \
       AS l(order_id BIGINT, product_id BIGINT, quantity INTEGER, unit_price_cents BIGINT)",
);

/// Writes orders whose stock the caller has taken: the orders, their lines, and for each line
/// the ledger's movement (`stock_movements`), so that on hand stays the sum of the ledger. Four
/// statements, whether for the one order of [`take_from_stock`] or for every order a batch sold
/// ([`order_batch`]). Returns the orders as written, in the order given, without reading them
/// back: only their ids come from the server (`created_at` is set by the caller for that reason).
pub(super) fn record_orders(conn: &mut DbConn, orders: Vec<NewOrder>) -> Result<Vec<OrderView>, OrderError> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    let total =
        |o: &NewOrder| o.lines.iter().map(|l| l.unit_price_cents * i64::from(l.quantity)).sum::<i64>();
    let rows: Vec<serde_json::Value> = orders
        .iter()
        .enumerate()
        .map(|(n, o)| {
            serde_json::json!({
                "n": n,
                "user_id": o.user_id,
                "total_cents": total(o),
                "created_at": o.created_at.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
            })
        })
        .collect();
    cached_sql::<()>(INSERT_ORDERS)
        .bind::<Text, _>(serde_json::Value::Array(rows).to_string())
        .execute(conn)?;
    let mut users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    users.sort_unstable();
    users.dedup();
    let (sql, padded) = INSERTED_IDS.padded(&users).ok_or_else(bad_batch)?;
    let written = i64::try_from(orders.len()).map_err(|_| bad_batch())?;
    let ids: Vec<i64> =
        cached_sql::<BigInt>(sql).bind_each::<BigInt, _>(padded).bind::<BigInt, _>(written).load(conn)?;
    if ids.len() != orders.len() {
        return Err(bad_batch());
    }
    let placed: Vec<(i64, OrderView)> = orders
        .into_iter()
        .zip(ids)
        .map(|(o, id)| {
            let total_cents = total(&o);
            (o.user_id, OrderView { id, created_at: o.created_at, total_cents, lines: o.lines })
        })
        .collect();

    let (mut rows, mut movements) = (Vec::new(), Vec::new());
    for (user_id, order) in &placed {
        for line in &order.lines {
            rows.push(serde_json::json!({
                "order_id": order.id,
                "product_id": line.product_id,
                "quantity": line.quantity,
                "unit_price_cents": line.unit_price_cents,
            }));
            movements.push(NewStockMovement {
                product_id: line.product_id,
                delta: -line.quantity,
                reason: MovementReason::Order,
                order_id: Some(order.id),
                actor_user_id: Some(*user_id),
            });
        }
    }
    cached_sql::<()>(INSERT_LINES)
        .bind::<Text, _>(serde_json::Value::Array(rows).to_string())
        .execute(conn)?;
    NewStockMovement::insert_all(conn, &movements)?;
    Ok(placed.into_iter().map(|(_, order)| order).collect())
}

/// One of the user's orders.
pub fn find_order(conn: &mut DbConn, user_id: i64, order_id: i64) -> Result<OrderView, OrderError> {
    let order = orders::table
        .filter(orders::id.eq(order_id))
        .filter(orders::user_id.eq(user_id))
        .select(Order::as_select())
        .first(conn)
        .optional()?
        .ok_or(OrderError::NotFound(order_id))?;
    Ok(with_lines(conn, vec![order])?.remove(0))
}

/// The user's newest orders.
pub fn my_orders(conn: &mut DbConn, user_id: i64) -> Result<Vec<OrderView>, OrderError> {
    let mine = orders::table
        .filter(orders::user_id.eq(user_id))
        .order(orders::id.desc())
        .limit(100)
        .select(Order::as_select())
        .load(conn)?;
    Ok(with_lines(conn, mine)?)
}

fn with_lines(conn: &mut DbConn, orders: Vec<Order>) -> QueryResult<Vec<OrderView>> {
    let ids: Vec<i64> = orders.iter().map(|o| o.id).collect();
    let lines: Vec<(i64, i64, String, String, i32, i64)> = order_lines::table
        .inner_join(products::table)
        .filter(order_lines::order_id.eq_any(&ids))
        .order((order_lines::order_id, order_lines::product_id))
        .select((
            order_lines::order_id,
            order_lines::product_id,
            products::sku,
            products::name,
            order_lines::quantity,
            order_lines::unit_price_cents,
        ))
        .load(conn)?;
    Ok(orders
        .into_iter()
        .map(|o| OrderView {
            id: o.id,
            created_at: o.created_at,
            total_cents: o.total_cents,
            lines: lines
                .iter()
                .filter(|l| l.0 == o.id)
                .map(|(_, product_id, sku, name, quantity, unit_price_cents)| OrderLineView {
                    product_id: *product_id,
                    sku: sku.clone(),
                    name: name.clone(),
                    quantity: *quantity,
                    unit_price_cents: *unit_price_cents,
                })
                .collect(),
        })
        .collect())
}
