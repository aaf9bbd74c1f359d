use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use super::HoldError;
use crate::catalog::quantity::Quantity;
use crate::db::text_enum;
use crate::schema::stock_holds;

text_enum! {
    /// How a hold ended (`stock_holds.ended`). A hold that has not ended is live until it expires.
    pub enum HoldEnd {
        Released => "released",
        Used => "used",
    }
}

/// A hold as its customer is told of it: live (and counting down), or why it is not any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HoldState {
    Live,
    Expired,
    Released,
    Used,
}

impl HoldState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Expired => "expired",
            Self::Released => "released",
            Self::Used => "used",
        }
    }
}

/// One row of `stock_holds`.
#[derive(Clone, Debug, QueryableByName)]
#[diesel(table_name = stock_holds, check_for_backend(crate::db::MultiBackend))]
pub struct StockHold {
    pub id: i64,
    pub product_id: i64,
    pub user_id: i64,
    pub quantity: i32,
    pub created_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
    pub ended: Option<HoldEnd>,
    pub order_id: Option<i64>,
}

impl StockHold {
    /// What the hold is at `now`, read from the database's clock: an ended hold stays as it
    /// ended; one that has not ended is live until `expires_at`, and expired from then on,
    /// without anything having to write that down.
    pub fn state_at(&self, now: NaiveDateTime) -> HoldState {
        match self.ended {
            Some(HoldEnd::Used) => HoldState::Used,
            Some(HoldEnd::Released) => HoldState::Released,
            None if self.expires_at > now => HoldState::Live,
            None => HoldState::Expired,
        }
    }

    /// Why this hold cannot be released or ordered from at `now`, if it cannot.
    pub fn not_live_at(&self, now: NaiveDateTime) -> Option<HoldError> {
        match self.state_at(now) {
            HoldState::Live => None,
            HoldState::Expired => Some(HoldError::Expired { id: self.id, expired_at: self.expires_at }),
            HoldState::Released => Some(HoldError::Released(self.id)),
            HoldState::Used => Some(HoldError::Used { id: self.id, order_id: self.order_id }),
        }
    }

    pub fn view(&self, now: NaiveDateTime) -> HoldView {
        let state = self.state_at(now);
        let seconds_left = match state {
            // Rounded up: a page counting down from it must not say "expired" (and offer to hold
            // again) while the database still holds the units for a fraction of a second.
            HoldState::Live => ((self.expires_at - now).num_milliseconds().max(0) + 999) / 1000,
            _ => 0,
        };
        HoldView {
            id: self.id,
            product_id: self.product_id,
            quantity: self.quantity,
            expires_at: self.expires_at,
            seconds_left,
            state,
            order_id: self.order_id,
        }
    }
}

/// A hold on the wire (`POST /api/v1/holds`, `GET /api/v1/holds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HoldView {
    pub id: i64,
    pub product_id: i64,
    pub quantity: i32,
    /// When the hold lapses unless used or released, by the database's clock (UTC).
    #[serde(with = "crate::wire::utc")]
    pub expires_at: NaiveDateTime,
    /// Whole seconds until `expires_at`, counted from the database's clock when this answer was
    /// made: a client counts down from it rather than comparing its own clock with
    /// `expires_at`. 0 unless live.
    pub seconds_left: i64,
    pub state: HoldState,
    /// The order placed from the hold, once used.
    pub order_id: Option<i64>,
}

/// A hold of the customer's list, with what the page shows of its product.
#[derive(Clone, Debug, QueryableByName)]
pub struct ListedHold {
    #[diesel(embed)]
    pub hold: StockHold,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub sku: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub name: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub price_cents: i64,
    /// The database's clock as the list was read.
    #[diesel(sql_type = diesel::sql_types::Timestamp)]
    pub now: NaiveDateTime,
}

impl ListedHold {
    pub fn state(&self) -> HoldState {
        self.hold.state_at(self.now)
    }

    pub fn view(&self) -> HoldView {
        self.hold.view(self.now)
    }
}

/// How long a new hold lasts: what the client asked for (in seconds), at least 1 s and at most
/// `HOLD_MINUTES`; the whole `HOLD_MINUTES` when it did not ask. Shorter holds let a test or a
/// flash-sale race see holds expire without waiting minutes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldLength(Duration);

impl HoldLength {
    /// `asked`: the request's `seconds`, as sent. Anything but a positive whole number is
    /// refused (not rounded, not clamped up): a client that sent `0` or `"30"` has a bug to see.
    pub fn parse(asked: Option<&serde_json::Value>, longest: Duration) -> Result<Self, HoldError> {
        let Some(value) = asked.filter(|v| !v.is_null()) else { return Ok(Self(longest)) };
        let seconds = match value {
            serde_json::Value::Number(n) if n.is_u64() => n.as_u64().unwrap_or(u64::MAX),
            // A float with nothing after the point (`30.0`) is still not what the API takes.
            other => return Err(HoldError::Seconds(other.to_string().chars().take(40).collect())),
        };
        if seconds == 0 {
            return Err(HoldError::Seconds("0".into()));
        }
        Ok(Self(Duration::from_secs(seconds).min(longest)))
    }

    pub fn full(longest: Duration) -> Self {
        Self(longest)
    }

    pub fn get(self) -> Duration {
        self.0
    }

    pub fn micros(self) -> i64 {
        i64::try_from(self.0.as_micros()).unwrap_or(i64::MAX)
    }
}

/// What a customer asked to hold, parsed.
#[derive(Clone, Copy, Debug)]
pub struct HoldRequest {
    pub product_id: i64,
    pub quantity: Quantity,
    pub length: HoldLength,
}

impl HoldRequest {
    pub fn parse(product_id: i64, quantity: i64, length: HoldLength) -> Result<Self, HoldError> {
        if product_id < 1 {
            return Err(HoldError::InvalidProductId(product_id));
        }
        let quantity = Quantity::parse(quantity, Quantity::MAX_PER_LINE)
            .map_err(|error| HoldError::Quantity { product_id, error })?;
        Ok(Self { product_id, quantity, length })
    }

    /// The request in one canonical line: what an idempotency key is bound to.
    pub fn describe(&self) -> String {
        format!(
            "hold {} x product {} for {} s",
            self.quantity.get(),
            self.product_id,
            self.length.get().as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TEN_MINUTES: Duration = Duration::from_secs(600);

    fn length(value: serde_json::Value) -> Result<Duration, HoldError> {
        HoldLength::parse(Some(&value), TEN_MINUTES).map(HoldLength::get)
    }

    #[test]
    fn a_hold_lasts_hold_minutes_unless_the_client_asks_for_less() {
        assert_eq!(HoldLength::parse(None, TEN_MINUTES).map(HoldLength::get).ok(), Some(TEN_MINUTES));
        assert_eq!(length(json!(null)).ok(), Some(TEN_MINUTES));
        assert_eq!(length(json!(30)).ok(), Some(Duration::from_secs(30)));
        assert_eq!(length(json!(1)).ok(), Some(Duration::from_secs(1)));
        assert_eq!(length(json!(86_400)).ok(), Some(TEN_MINUTES));
        assert_eq!(length(json!(u64::MAX)).ok(), Some(TEN_MINUTES));
    }

    #[test]
    fn seconds_must_be_a_positive_whole_number() {
        for bad in [json!(0), json!(-5), json!(1.5), json!(30.0), json!("30"), json!(true), json!([1])] {
            assert!(matches!(length(bad.clone()), Err(HoldError::Seconds(_))), "{bad}");
        }
    }

    #[test]
    fn a_hold_is_live_until_it_expires_by_the_clock_it_is_read_with() {
        let at = |s: i64| chrono::DateTime::from_timestamp(1_800_000_000 + s, 0).map(|t| t.naive_utc());
        let at = |s: i64| at(s).unwrap_or_default();
        let hold = StockHold {
            id: 7,
            product_id: 1,
            user_id: 2,
            quantity: 3,
            created_at: at(0),
            expires_at: at(600),
            ended: None,
            order_id: None,
        };
        assert_eq!(hold.state_at(at(599)), HoldState::Live);
        assert_eq!(hold.view(at(1)).seconds_left, 599);
        // A fraction of a second left is a second left: the page's countdown never runs out
        // before the database's clock does.
        let half_a_second_before = at(600) - chrono::TimeDelta::milliseconds(500);
        assert_eq!(hold.view(half_a_second_before).seconds_left, 1);
        assert_eq!(hold.state_at(at(600)), HoldState::Expired);
        assert_eq!(hold.view(at(601)).seconds_left, 0);
        assert!(matches!(hold.not_live_at(at(600)), Some(HoldError::Expired { id: 7, .. })));
        let used = StockHold { ended: Some(HoldEnd::Used), order_id: Some(9), ..hold.clone() };
        assert_eq!(used.state_at(at(1)), HoldState::Used);
        assert!(matches!(used.not_live_at(at(1)), Some(HoldError::Used { order_id: Some(9), .. })));
        let released = StockHold { ended: Some(HoldEnd::Released), ..hold };
        assert!(matches!(released.not_live_at(at(1)), Some(HoldError::Released(7))));
    }

    #[test]
    fn bad_ids_and_quantities_are_refused() {
        let full = HoldLength::full(TEN_MINUTES);
        assert!(matches!(HoldRequest::parse(0, 1, full), Err(HoldError::InvalidProductId(0))));
        assert!(matches!(HoldRequest::parse(1, 0, full), Err(HoldError::Quantity { product_id: 1, .. })));
        assert!(matches!(HoldRequest::parse(1, 1001, full), Err(HoldError::Quantity { .. })));
        let ok = HoldRequest::parse(3, 2, full).map(|r| r.describe()).ok();
        assert_eq!(ok.as_deref(), Some("hold 2 x product 3 for 600 s"));
    }
}
