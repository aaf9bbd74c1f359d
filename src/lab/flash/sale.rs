//! The sale: the buyers log in, then each variant sells a throwaway product of its own, and the
//! database is counted after each.
//!
//! All buyers start at the click: their first requests leave together, spread over the
//! instances (buyer `i` on instance `i % n`), and the stock row of the product is the one thing
//! they all contend for. The sale is over when the last unit is sold (the runner counts the
//! `201`s, as a shop shows "sold out") or at [`TIME_CAP`]. Who abandons a hold and whose first
//! checkout outlasts the hold is drawn once from the sale's seed (exact shares, not odds), so a
//! seed replays the same crowd; only the arrival order is the machine's.
//!
//! Blocking: call [`run`] from a thread of its own (the CLI's, or one `/demo` starts). It drives
//! the buyers on an async runtime of its own, never on the app's workers.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use rand::Rng;

use super::FlashError;
use super::buyers::{self, Buyers, MAX_BUYERS};
use super::crowd::{self, Sale};
use super::report::{FlashReport, Variant, VariantResult};
use super::shop::Shop;
use super::store::{self, Slot};
use crate::catalog::model::NewProduct;
use crate::db::{self, DbPool, cached_sql};
use crate::inventory::model::Quantity;
use crate::locking::Turn;
use crate::schema::{order_lines, products, stock_levels, stock_movements};

pub const DEFAULT_BUYERS: u32 = 500;
pub const DEFAULT_STOCK: u32 = 50;
/// Short, so that a sale shows holds running out within seconds (a shop's are minutes long),
/// yet longer than a buyer's way back to the counter through the crowd at the stock row.
pub const DEFAULT_HOLD_SECONDS: u32 = 3;
pub const MAX_HOLD_SECONDS: u32 = 60;
pub const DEFAULT_ABANDON_PERCENT: u32 = 20;
pub const DEFAULT_SLOW_PERCENT: u32 = 10;
pub const MAX_INSTANCES: usize = 8;
/// No variant sells longer than this; a sale not sold out by then says so.
pub const TIME_CAP: Duration = Duration::from_secs(60);
/// The buyers' logins give up after this.
pub const LOGIN_CAP: Duration = Duration::from_secs(60);
/// What to sell, parsed and bounded once.
#[derive(Clone, Debug)]
pub struct SaleSpec {
    /// The instances, e.g. `http://127.0.0.1:8080`; buyer `i` uses `base_urls[i % n]`.
    pub base_urls: Vec<String>,
    pub buyers: u32,
    pub stock: u32,
    pub hold_seconds: u32,
    pub abandon_percent: u32,
    pub slow_percent: u32,
    pub seed: u64,
    pub variants: Vec<Variant>,
}

/// The numbers of a sale as asked for; `None` takes the default.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    pub buyers: Option<u32>,
    pub stock: Option<u32>,
    pub hold_seconds: Option<u32>,
    pub abandon_percent: Option<u32>,
    pub slow_percent: Option<u32>,
    pub seed: Option<u64>,
    /// `without-holds`, `with-holds`; none: both.
    pub variants: Vec<String>,
}

impl SaleSpec {
    /// Bounded, each refusal naming its field and the bound.
    pub fn parse(base_urls: &[String], asked: &Asked) -> Result<Self, FlashError> {
        let invalid = |field, message: String| FlashError::Invalid { field, message };
        if base_urls.is_empty() || base_urls.len() > MAX_INSTANCES {
            return Err(invalid("base_url", format!("give 1 to {MAX_INSTANCES} instances")));
        }
        let mut bases = Vec::new();
        for url in base_urls {
            let parsed = url::Url::parse(url)
                .ok()
                .filter(|u| u.scheme() == "http" && u.host().is_some() && u.query().is_none());
            if parsed.is_none() {
                return Err(invalid("base_url", format!("{url:?} is not an http:// address of an instance")));
            }
            bases.push(url.trim_end_matches('/').to_string());
        }
        let bounded = |field, value: Option<u32>, default: u32, range: std::ops::RangeInclusive<u32>| {
            let value = value.unwrap_or(default);
            if range.contains(&value) {
                Ok(value)
            } else {
                Err(invalid(
                    field,
                    format!("must be between {} and {}, got {value}", range.start(), range.end()),
                ))
            }
        };
        let buyers = bounded("buyers", asked.buyers, DEFAULT_BUYERS, 1..=MAX_BUYERS)?;
        let stock = bounded("stock", asked.stock, DEFAULT_STOCK.min(buyers), 1..=buyers)?;
        let hold_seconds =
            bounded("hold_seconds", asked.hold_seconds, DEFAULT_HOLD_SECONDS, 1..=MAX_HOLD_SECONDS)?;
        let abandon_percent =
            bounded("abandon_percent", asked.abandon_percent, DEFAULT_ABANDON_PERCENT, 0..=100)?;
        let slow_percent =
            bounded("slow_percent", asked.slow_percent, DEFAULT_SLOW_PERCENT, 0..=100 - abandon_percent)?;
        let mut variants = Vec::new();
        for name in &asked.variants {
            let variant = match name.trim() {
                "without-holds" => Variant::WithoutHolds,
                "with-holds" => Variant::WithHolds,
                other => {
                    return Err(invalid(
                        "variant",
                        format!("{other:?} is neither without-holds nor with-holds"),
                    ));
                }
            };
            if !variants.contains(&variant) {
                variants.push(variant);
            }
        }
        if variants.is_empty() {
            variants = Variant::BOTH.to_vec();
        }
        Ok(Self {
            base_urls: bases,
            buyers,
            stock,
            hold_seconds,
            abandon_percent,
            slow_percent,
            seed: asked.seed.unwrap_or_else(|| rand::rng().random()),
            variants,
        })
    }
}

/// Who starts a sale.
#[derive(Clone, Copy, Debug)]
pub enum Starter<'a> {
    /// A user on `/demo`, by name: one sale a minute at most ([`store::COOLDOWN`]).
    User(&'a str),
    /// The operator, from a terminal (`haita demo flash-sale`): not rationed.
    Operator,
}

impl Starter<'_> {
    /// Who the sale is recorded as started by.
    pub fn name(&self) -> &str {
        match self {
            Self::User(name) => name,
            Self::Operator => "cli",
        }
    }
}

/// Takes the one slot for a sale (see `store.rs`): refused while another sale runs on any
/// instance, or within a user's cooldown.
pub fn take_slot(conn: &mut db::DbConn, starter: Starter<'_>) -> Result<Slot, FlashError> {
    if let Starter::User(name) = starter
        && let Some(left) = store::cooldown_left(conn, name)?
    {
        return Err(FlashError::CoolingDown(left.as_secs().max(1)));
    }
    store::take(conn, starter.name())
}

/// Runs the sale of `spec` in `slot` and stores its report (or why it failed), freeing the
/// slot either way. Blocks for up to [`LOGIN_CAP`] and [`TIME_CAP`] per variant.
pub fn run(pool: &DbPool, spec: &SaleSpec, slot: Slot, started_by: &str) -> Result<FlashReport, FlashError> {
    let started_at = db::now_micros();
    let sold = buyers::open(pool, spec.buyers).and_then(|buyers| {
        let sold = sell(pool, spec, slot.id, &buyers);
        // Whatever happened, nobody may log in as a buyer after the sale.
        buyers::close(pool)?;
        sold
    });
    let report = sold.map(|(login_ms, variants)| FlashReport {
        id: slot.id,
        started_by: started_by.to_string(),
        started_at,
        buyers: spec.buyers,
        stock: spec.stock,
        hold_seconds: spec.hold_seconds,
        abandon_percent: spec.abandon_percent,
        slow_percent: spec.slow_percent,
        seed: spec.seed,
        instances: u32::try_from(spec.base_urls.len()).unwrap_or(u32::MAX),
        login_ms,
        on_postgres: pool.engine() == db::Engine::Postgres,
        variants,
    });
    let mut conn = pool.get()?;
    store::finish(&mut conn, slot, report.as_ref().map_err(ToString::to_string))?;
    report
}

/// Logs the buyers in, then sells each variant: the logins' time and each variant's result.
fn sell(
    pool: &DbPool,
    spec: &SaleSpec,
    sale_id: i64,
    buyers: &Buyers,
) -> Result<(u64, Vec<VariantResult>), FlashError> {
    let shop = Shop::new(&spec.base_urls)?;
    let system = actix_web::rt::System::new();
    let began = Instant::now();
    let sessions = system.block_on(crowd::log_in(&shop, buyers))?;
    let login_ms = millis(began.elapsed());
    let plans = crowd::plans(spec);
    let mut results = Vec::new();
    for &variant in &spec.variants {
        let product = create_product(pool, sale_id, variant, spec.stock, buyers.keeper)?;
        shop.take_count();
        let sale = Sale::new(&shop, &sessions, &plans, spec, sale_id, variant, product, TIME_CAP);
        let crowd = system.block_on(sale.run());
        if variant == Variant::WithHolds {
            wait_for_holds_to_end(pool, product, spec.hold_seconds)?;
        }
        let mut result = count(pool, variant, product, spec.stock)?;
        result.requests = shop.take_count();
        result.sold_out_ms = crowd.sold_out().map(millis);
        result.elapsed_ms = millis(crowd.elapsed());
        result.capped = result.sold_out_ms.is_none() && crowd.elapsed() >= TIME_CAP;
        crowd.tally(&mut result);
        results.push(result);
    }
    Ok((login_ms, results))
}

/// A throwaway product for one variant, unlisted (the real catalog never shows it), its stock
/// received through the app's receipt path (stock row and ledger).
fn create_product(
    pool: &DbPool,
    sale_id: i64,
    variant: Variant,
    stock: u32,
    keeper: i64,
) -> Result<i64, FlashError> {
    let tag = match variant {
        Variant::WithoutHolds => "A",
        Variant::WithHolds => "B",
    };
    let (sku, name) = (format!("FLASH-{sale_id}-{tag}"), format!("Flash sale {sale_id}, {}", variant.name()));
    let description = "A throwaway product of a flash sale on /demo.";
    let mut conn = pool.get()?;
    let id = db::transaction(&mut conn, |conn| {
        diesel::insert_into(products::table)
            .values(NewProduct { sku: &sku, name: &name, description, price_cents: 1_000 })
            .execute(conn)?;
        let id = db::last_insert_id(conn)?;
        // Sold by its id through the API, never shown in the real catalog or stock pages.
        diesel::update(products::table.find(id)).set(products::listed.eq(false)).execute(conn)?;
        Ok::<_, FlashError>(id)
    })?;
    drop(conn);
    let quantity =
        Quantity::parse(i64::from(stock), Quantity::MAX_PER_RECEIPT).map_err(anyhow::Error::from)?;
    crate::inventory::service::receive(
        pool,
        Turn::unqueued(pool.names().stock(id), Duration::from_secs(5)),
        keeper,
        id,
        quantity,
    )
    .map_err(anyhow::Error::from)?;
    Ok(id)
}

/// Waits until no hold of `product` is live any more, by the database's clock: the abandoned
/// ones run out within `hold_seconds` of the last hold, and only then are the counts final.
fn wait_for_holds_to_end(pool: &DbPool, product: i64, hold_seconds: u32) -> Result<(), FlashError> {
    let give_up = Instant::now() + Duration::from_secs(u64::from(hold_seconds) + 10);
    loop {
        // A connection per look, given back before the pause.
        let live: i64 = cached_sql::<BigInt>(
            "SELECT COUNT(*) FROM stock_holds WHERE product_id = ? AND ended IS NULL AND expires_at > {now}",
        )
        .bind::<BigInt, _>(product)
        .get_result(&mut *pool.get()?)?;
        if live == 0 || Instant::now() >= give_up {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[derive(QueryableByName)]
struct HoldCounts {
    #[diesel(sql_type = BigInt)]
    taken: i64,
    #[diesel(sql_type = BigInt)]
    used: i64,
    #[diesel(sql_type = BigInt)]
    released: i64,
    #[diesel(sql_type = BigInt)]
    expired: i64,
    #[diesel(sql_type = BigInt)]
    live: i64,
    #[diesel(sql_type = BigInt)]
    used_without_order: i64,
}

/// What the database holds of `product` after its sale: units in orders, the stock row, the sum
/// of the ledger, and how the holds ended.
fn count(pool: &DbPool, variant: Variant, product: i64, stock: u32) -> Result<VariantResult, FlashError> {
    let mut conn = pool.get()?;
    let sold: i64 = order_lines::table
        .filter(order_lines::product_id.eq(product))
        .select(order_lines::quantity)
        .load::<i32>(&mut conn)?
        .into_iter()
        .map(i64::from)
        .sum();
    let on_hand: i64 = stock_levels::table
        .find(product)
        .select(stock_levels::on_hand)
        .first::<i32>(&mut conn)
        .optional()?
        .map_or(0, i64::from);
    let ledger: i64 = stock_movements::table
        .filter(stock_movements::product_id.eq(product))
        .select(stock_movements::delta)
        .load::<i32>(&mut conn)?
        .into_iter()
        .map(i64::from)
        .sum();
    let holds = if variant == Variant::WithHolds {
        cached_sql::<diesel::sql_types::Untyped>(
            "SELECT COUNT(*) AS taken, \
                    COUNT(CASE WHEN ended = 'used' THEN 1 END) AS used, \
                    COUNT(CASE WHEN ended = 'released' THEN 1 END) AS released, \
                    COUNT(CASE WHEN ended IS NULL AND expires_at <= {now} THEN 1 END) AS expired, \
                    COUNT(CASE WHEN ended IS NULL AND expires_at > {now} THEN 1 END) AS live, \
                    COUNT(CASE WHEN ended = 'used' AND order_id IS NULL THEN 1 END) AS used_without_order \
             FROM stock_holds WHERE product_id = ?",
        )
        .bind::<BigInt, _>(product)
        .get_result::<HoldCounts>(&mut conn)?
    } else {
        HoldCounts { taken: 0, used: 0, released: 0, expired: 0, live: 0, used_without_order: 0 }
    };
    Ok(VariantResult {
        variant,
        product_id: product,
        stock,
        sold,
        oversold: (sold - i64::from(stock)).max(0),
        on_hand,
        ledger,
        holds_taken: holds.taken,
        holds_used: holds.used,
        holds_released: holds.released,
        holds_expired: holds.expired,
        holds_live: holds.live,
        used_without_order: holds.used_without_order,
        reheld: (holds.taken - i64::from(stock)).max(0),
        ..VariantResult::default()
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Asked {
        Asked::default()
    }

    #[test]
    fn a_sale_is_bounded_with_a_message_naming_the_field() {
        let one = ["http://127.0.0.1:8080/".to_string()];
        let spec = SaleSpec::parse(&one, &asked()).expect("defaults");
        assert_eq!((spec.buyers, spec.stock, spec.hold_seconds), (500, 50, 3));
        assert_eq!(spec.base_urls, ["http://127.0.0.1:8080"]);
        assert_eq!(spec.variants, Variant::BOTH);
        for (asked, field) in [
            (Asked { buyers: Some(501), ..asked() }, "buyers"),
            (Asked { buyers: Some(10), stock: Some(11), ..asked() }, "stock"),
            (Asked { hold_seconds: Some(0), ..asked() }, "hold_seconds"),
            (Asked { abandon_percent: Some(80), slow_percent: Some(30), ..asked() }, "slow_percent"),
            (Asked { variants: vec!["later".into()], ..asked() }, "variant"),
        ] {
            let err = SaleSpec::parse(&one, &asked).expect_err(field);
            assert!(err.to_string().contains(field), "{err}");
        }
        for bad in [vec![], vec!["ftp://x".to_string()], vec!["not a url".to_string()]] {
            assert!(SaleSpec::parse(&bad, &asked()).is_err(), "{bad:?}");
        }
    }
}
