//! How many of a product: a quantity ordered or received ([`Quantity`], positive and bounded,
//! parsed once from what a person typed), and a stock level as the database keeps it.

use serde::Serialize;

/// The most a stock level may hold; far below `INT UNSIGNED`'s limit, so an addition can be
/// refused with a message instead of failing in the database.
pub const MAX_ON_HAND: u32 = 1_000_000_000;

/// A stock level as read from `stock_levels.on_hand`. The schema declares the column a signed
/// `INTEGER`, the one type both engines share (PostgreSQL has no unsigned integers); the column
/// itself refuses negatives (`UNSIGNED` on MySQL, a `CHECK` on PostgreSQL), so none arrives.
pub fn on_hand_from_sql(on_hand: i32) -> u32 {
    u32::try_from(on_hand).unwrap_or(0)
}

/// A stock level to write: never above [`MAX_ON_HAND`], which fits an `INTEGER`.
pub fn on_hand_to_sql(on_hand: u32) -> i32 {
    i32::try_from(on_hand.min(MAX_ON_HAND)).unwrap_or(i32::MAX)
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("must be at least 1")]
    NotPositive,
    #[error("must be at most {0}")]
    TooLarge(u32),
    #[error("{0:?} is not a whole number")]
    NotANumber(String),
}

/// Whose quantity is wrong: the sentence differs.
#[derive(Clone, Copy, Debug)]
pub enum QuantityOf {
    OrderLine,
    Receipt,
}

impl QuantityError {
    /// What is wrong with the quantity of `of`, as a text of `src/i18n/texts.yml` and its values.
    pub fn words(&self, of: QuantityOf) -> (&'static str, Vec<(&'static str, String)>) {
        use QuantityOf::{OrderLine, Receipt};
        match (of, self) {
            (OrderLine, Self::NotPositive) => ("order.qty.not_positive", vec![]),
            (OrderLine, Self::TooLarge(max)) => ("order.qty.too_large", vec![("max", max.to_string())]),
            (OrderLine, Self::NotANumber(given)) => {
                ("order.qty.not_a_number", vec![("given", format!("{given:?}"))])
            }
            (Receipt, Self::NotPositive) => ("receipts.qty.not_positive", vec![]),
            (Receipt, Self::TooLarge(max)) => ("receipts.qty.too_large", vec![("max", max.to_string())]),
            (Receipt, Self::NotANumber(given)) => {
                ("receipts.qty.not_a_number", vec![("given", format!("{given:?}"))])
            }
        }
    }
}

/// A positive number of units, bounded by what one order line or one receipt may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Quantity(u32);

impl Quantity {
    pub const MAX_PER_LINE: u32 = 1_000;
    pub const MAX_PER_RECEIPT: u32 = 100_000;

    pub fn parse(value: i64, max: u32) -> Result<Self, QuantityError> {
        if value < 1 {
            return Err(QuantityError::NotPositive);
        }
        match u32::try_from(value) {
            Ok(v) if v <= max => Ok(Self(v)),
            _ => Err(QuantityError::TooLarge(max)),
        }
    }

    /// From a form field: whitespace is trimmed, anything but an integer is refused.
    pub fn parse_text(text: &str, max: u32) -> Result<Self, QuantityError> {
        let value = text
            .trim()
            .parse::<i64>()
            .map_err(|_| QuantityError::NotANumber(text.chars().take(20).collect()))?;
        Self::parse(value, max)
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn signed(self) -> i32 {
        // MAX_PER_RECEIPT fits comfortably.
        i32::try_from(self.0).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_positive_and_bounded() {
        assert_eq!(Quantity::parse(1, 10).map(Quantity::get), Ok(1));
        assert_eq!(Quantity::parse(10, 10).map(Quantity::get), Ok(10));
        assert_eq!(Quantity::parse(0, 10), Err(QuantityError::NotPositive));
        assert_eq!(Quantity::parse(-3, 10), Err(QuantityError::NotPositive));
        assert_eq!(Quantity::parse(11, 10), Err(QuantityError::TooLarge(10)));
        assert_eq!(Quantity::parse(i64::MAX, 10), Err(QuantityError::TooLarge(10)));
        assert_eq!(Quantity::parse_text(" 7 ", 10).map(Quantity::get), Ok(7));
        assert!(matches!(Quantity::parse_text("7.5", 10), Err(QuantityError::NotANumber(_))));
    }
}
