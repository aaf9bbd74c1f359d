use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

use super::OrderError;
use crate::inventory::model::{Quantity, QuantityError};
use crate::schema::orders;

#[derive(Clone, Debug, Queryable, Selectable, Identifiable, Serialize)]
#[diesel(table_name = orders, check_for_backend(crate::db::MultiBackend))]
pub struct Order {
    pub id: i64,
    pub user_id: i64,
    #[serde(with = "crate::wire::utc")]
    pub created_at: NaiveDateTime,
    pub total_cents: i64,
}

/// A line of a validated cart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CartLine {
    pub product_id: i64,
    pub quantity: Quantity,
}

/// What a customer asked for, validated: at least one line, one line per product (duplicates
/// are merged by adding their quantities), sorted by product id — the order in which the
/// order's stock rows will be locked.
#[derive(Clone, Debug)]
pub struct Cart(Vec<CartLine>);

impl Cart {
    pub const MAX_LINES: usize = 100;

    pub fn parse(requested: &[(i64, i64)]) -> Result<Self, OrderError> {
        if requested.is_empty() {
            return Err(OrderError::Empty);
        }
        // Lines as sent, before merging: the work a request may ask for is bounded either way.
        if requested.len() > Self::MAX_LINES {
            return Err(OrderError::TooManyLines(Self::MAX_LINES));
        }
        let mut merged: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
        for &(product_id, quantity) in requested {
            if product_id < 1 {
                return Err(OrderError::InvalidProductId(product_id));
            }
            let total = merged.entry(product_id).or_insert(0);
            *total = total.saturating_add(quantity);
        }
        if merged.len() > Self::MAX_LINES {
            return Err(OrderError::TooManyLines(Self::MAX_LINES));
        }
        // Each requested quantity must be positive on its own: "-1" next to "+2" is not a "1".
        if let Some(&(product_id, _)) = requested.iter().find(|(_, q)| *q < 1) {
            return Err(OrderError::Quantity { product_id, error: QuantityError::NotPositive });
        }
        merged
            .into_iter()
            .map(|(product_id, quantity)| {
                Quantity::parse(quantity, Quantity::MAX_PER_LINE)
                    .map(|quantity| CartLine { product_id, quantity })
                    .map_err(|error| OrderError::Quantity { product_id, error })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Lines in ascending product id.
    pub fn lines(&self) -> &[CartLine] {
        &self.0
    }

    pub fn product_ids(&self) -> Vec<i64> {
        self.0.iter().map(|l| l.product_id).collect()
    }

    /// The cart in one canonical line (merged, sorted): what an idempotency key is bound to, so
    /// the same order sent with its lines in another order is still the same request.
    pub fn describe(&self) -> String {
        let lines: Vec<String> =
            self.0.iter().map(|l| format!("{} x product {}", l.quantity.get(), l.product_id)).collect();
        format!("order {}", lines.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(cart: &Cart) -> Vec<(i64, u32)> {
        cart.lines().iter().map(|l| (l.product_id, l.quantity.get())).collect()
    }

    #[test]
    fn lines_are_merged_per_product_and_sorted_by_id() {
        let cart = Cart::parse(&[(9, 1), (2, 3), (9, 2)]).expect("valid");
        assert_eq!(lines(&cart), vec![(2, 3), (9, 3)]);
    }

    #[test]
    fn empty_carts_bad_ids_and_bad_quantities_are_refused() {
        assert!(matches!(Cart::parse(&[]), Err(OrderError::Empty)));
        assert!(matches!(Cart::parse(&[(0, 1)]), Err(OrderError::InvalidProductId(0))));
        assert!(matches!(Cart::parse(&[(1, 0)]), Err(OrderError::Quantity { product_id: 1, .. })));
        assert!(matches!(Cart::parse(&[(1, 2), (1, -1)]), Err(OrderError::Quantity { product_id: 1, .. })));
        assert!(matches!(
            Cart::parse(&[(1, 600), (1, 600)]),
            Err(OrderError::Quantity { product_id: 1, .. })
        ));
        let many: Vec<(i64, i64)> = (1..=101).map(|id| (id, 1)).collect();
        assert!(matches!(Cart::parse(&many), Err(OrderError::TooManyLines(100))));
    }

    #[test]
    fn the_same_order_sent_in_another_shape_describes_itself_the_same_way() {
        let described = |lines: &[(i64, i64)]| Cart::parse(lines).expect("valid").describe();
        assert_eq!(described(&[(9, 1), (2, 3), (9, 2)]), described(&[(2, 3), (9, 3)]));
        assert_eq!(described(&[(2, 3)]), "order 3 x product 2");
        assert_ne!(described(&[(2, 3)]), described(&[(2, 4)]));
    }
}
