//! What a flash sale found, per variant: as stored in `demo_flash_sales`, shown on `/demo` and
//! printed by `haita demo flash-sale`.

use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

use crate::i18n::Lang;

/// How the stock is sold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Every buyer orders at the click; the stock row decides at payment.
    #[default]
    WithoutHolds,
    /// Every buyer holds a unit first, then orders from the hold (or walks away).
    WithHolds,
}

impl Variant {
    pub const BOTH: [Self; 2] = [Self::WithoutHolds, Self::WithHolds];

    pub fn name(self) -> &'static str {
        match self {
            Self::WithoutHolds => "without holds",
            Self::WithHolds => "with holds",
        }
    }

    /// The variant's name on a page (`src/i18n/texts.yml`).
    pub fn key(self) -> &'static str {
        match self {
            Self::WithoutHolds => "flash.variant.without_holds",
            Self::WithHolds => "flash.variant.with_holds",
        }
    }
}

/// One variant of one sale: what the buyers were answered, and what the database holds after.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VariantResult {
    pub variant: Variant,
    /// The throwaway product sold, and the units it had.
    pub product_id: i64,
    pub stock: u32,
    /// Units in orders of the product, counted in the database.
    pub sold: i64,
    /// Buyers who wanted a unit and went home without one.
    pub refused: u32,
    /// `409 insufficient_stock` answers, retries included.
    pub refusals: u32,
    /// Buyers who held a unit and walked away from it.
    pub abandoned: u32,
    /// Holds of the product, counted in the database, and how each ended.
    pub holds_taken: i64,
    pub holds_used: i64,
    pub holds_released: i64,
    /// Not used nor released, and past `expires_at` by the database's clock.
    pub holds_expired: i64,
    /// Still live when counted: 0 after a sale, since the runner waits for them to end.
    pub holds_live: i64,
    /// Holds marked used that name no order: a unit its buyer was promised and not sold. Must
    /// be 0.
    #[serde(default)]
    pub used_without_order: i64,
    /// Holds of a unit an earlier hold had reserved: holds taken beyond the stock, each on a unit
    /// given back by an expired or released hold (a hold only takes what no live hold reserves).
    pub reheld: i64,
    /// Orders from a hold refused with `409 hold_expired`: the buyer came back too late.
    pub expired_orders: u32,
    /// Units sold beyond the stock: must be 0.
    pub oversold: i64,
    /// The product's stock row and the sum of its ledger after the sale: must be equal.
    pub on_hand: i64,
    pub ledger: i64,
    /// `503 busy` answers and failed connections, each resent (with the same idempotency key).
    pub busy: u32,
    /// Answers no buyer expects (a 500 above all): a bug when not 0.
    pub errors: u32,
    pub first_error: Option<String>,
    /// Requests the buyers sent, logins not included.
    pub requests: u32,
    /// From the click to each buyer's first answer that was not "busy" (an order's, or a
    /// hold's): when a buyer learns whether a unit is theirs. p50 and p99 over the buyers.
    #[serde(default)]
    pub first_answer_p50_ms: f64,
    #[serde(default)]
    pub first_answer_p99_ms: f64,
    /// Each order's answer (at the click, or from a hold), from its request: the wait at the
    /// stock row above all. p50 and p99 over the orders.
    #[serde(default)]
    pub order_p50_ms: f64,
    #[serde(default)]
    pub order_p99_ms: f64,
    /// From the click to the answer that sold the last unit; `None` when it was not sold out.
    pub sold_out_ms: Option<u64>,
    /// From the click to the last buyer's last answer.
    pub elapsed_ms: u64,
    /// The time cap ended the variant before the stock was sold.
    pub capped: bool,
}

impl VariantResult {
    /// Whether the database holds what a correct sale leaves: nothing sold beyond the stock,
    /// and the stock row equal to its ledger.
    /// What the database says of the variant, in a sentence: sound, or what is wrong.
    pub fn verdict_in(&self, lang: impl std::borrow::Borrow<Lang>) -> String {
        let lang = *lang.borrow();
        if self.sound() {
            lang.t("flash.verdict.sound").into_owned()
        } else if self.oversold == 0 && self.on_hand == self.ledger {
            lang.t_with("flash.verdict.used_without_order", [("holds", self.used_without_order.to_string())])
        } else {
            lang.t_with(
                "flash.verdict.oversold",
                [
                    ("oversold", self.oversold.to_string()),
                    ("on_hand", self.on_hand.to_string()),
                    ("ledger", self.ledger.to_string()),
                    ("stock", self.stock.to_string()),
                    ("sold", self.sold.to_string()),
                ],
            )
        }
    }

    /// Every hold marked used names its order, too.
    pub fn sound(&self) -> bool {
        self.oversold == 0
            && self.on_hand == self.ledger
            && self.on_hand == i64::from(self.stock) - self.sold
            && self.used_without_order == 0
    }
}

/// One figure of a variant, as the text table prints it.
type Cell = fn(&VariantResult) -> String;

/// A finished sale, as stored in `demo_flash_sales`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlashReport {
    #[serde(default)]
    pub id: i64,
    pub started_by: String,
    #[serde(with = "crate::wire::utc")]
    pub started_at: NaiveDateTime,
    pub buyers: u32,
    pub stock: u32,
    /// How long a hold lasts (`seconds` of `POST /api/v1/holds`).
    pub hold_seconds: u32,
    /// The buyers who walk away from their hold, and those whose first checkout takes longer
    /// than the hold, in percent; drawn with `seed`.
    pub abandon_percent: u32,
    pub slow_percent: u32,
    pub seed: u64,
    /// The instances the buyers were spread over.
    pub instances: u32,
    /// How long the buyers' logins took, before the sales.
    pub login_ms: u64,
    pub on_postgres: bool,
    pub variants: Vec<VariantResult>,
}

impl FlashReport {
    /// The report as text, for `haita demo flash-sale`.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "flash sale #{}: {} buyers over {} instance(s), {} units each way; holds of {} s, {}% of \
             buyers abandon theirs, {}% are slow at their first checkout (seed {}); {} logins in {} ms\n\n",
            self.id,
            self.buyers,
            self.instances,
            self.stock,
            self.hold_seconds,
            self.abandon_percent,
            self.slow_percent,
            self.seed,
            self.buyers,
            self.login_ms,
        );
        let rows: [(&str, Cell); 19] = [
            ("sold", |v| v.sold.to_string()),
            ("refused (buyers)", |v| v.refused.to_string()),
            ("409 insufficient_stock", |v| v.refusals.to_string()),
            ("abandoned", |v| v.abandoned.to_string()),
            ("holds taken", |v| v.holds_taken.to_string()),
            ("holds used", |v| v.holds_used.to_string()),
            ("  of them without an order", |v| v.used_without_order.to_string()),
            ("holds released", |v| v.holds_released.to_string()),
            ("holds expired", |v| v.holds_expired.to_string()),
            ("re-held units", |v| v.reheld.to_string()),
            ("orders from an expired hold", |v| v.expired_orders.to_string()),
            ("oversold", |v| v.oversold.to_string()),
            ("on hand / ledger", |v| format!("{} / {}", v.on_hand, v.ledger)),
            ("busy (resent)", |v| v.busy.to_string()),
            ("errors", |v| v.errors.to_string()),
            ("requests", |v| v.requests.to_string()),
            ("first answer p50 / p99", |v| {
                format!("{:.0} / {:.0} ms", v.first_answer_p50_ms, v.first_answer_p99_ms)
            }),
            ("an order's answer p50 / p99", |v| format!("{:.0} / {:.0} ms", v.order_p50_ms, v.order_p99_ms)),
            ("time to sell out", |v| match v.sold_out_ms {
                Some(ms) => format!("{ms} ms"),
                None if v.capped => "not sold out (time cap)".into(),
                None => "not sold out".into(),
            }),
        ];
        let _ = write!(out, "{:<30}", "");
        for v in &self.variants {
            let _ = write!(out, " {:>24}", v.variant.name());
        }
        out.push('\n');
        for (label, value) in &rows {
            let _ = write!(out, "{label:<30}");
            for v in &self.variants {
                let _ = write!(out, " {:>24}", value(v));
            }
            out.push('\n');
        }
        out.push('\n');
        for v in &self.variants {
            let name = v.variant.name();
            let verdict = v.verdict_in(Lang::En);
            let _ = writeln!(out, "{name}: {verdict}");
            if let Some(e) = &v.first_error {
                let _ = writeln!(out, "    first error: {e}");
            }
        }
        out
    }
}
