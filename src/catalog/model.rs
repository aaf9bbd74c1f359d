use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

use crate::schema::products;

#[derive(Clone, Debug, Queryable, Selectable, Identifiable, Serialize, utoipa::ToSchema)]
#[diesel(table_name = products, check_for_backend(crate::db::MultiBackend))]
pub struct Product {
    pub id: i64,
    pub sku: String,
    pub name: String,
    pub description: String,
    pub price_cents: i64,
    pub version: i32,
    #[serde(with = "crate::wire::utc")]
    pub updated_at: NaiveDateTime,
    pub updated_by: Option<i64>,
}

impl Product {
    pub fn by_id(id: i64) -> products::BoxedQuery<'static, crate::db::MultiBackend> {
        products::table.filter(products::id.eq(id)).into_boxed()
    }

    pub fn price(&self) -> String {
        format_cents(self.price_cents)
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = products, check_for_backend(crate::db::MultiBackend))]
pub struct NewProduct<'a> {
    pub sku: &'a str,
    pub name: &'a str,
    pub description: &'a str,
    pub price_cents: i64,
}

/// `1234` → `"12.34"`.
pub fn format_cents(cents: i64) -> String {
    format!("{}{}.{:02}", if cents < 0 { "-" } else { "" }, cents.abs() / 100, cents.abs() % 100)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cents_are_shown_with_two_decimals() {
        assert_eq!(super::format_cents(1234), "12.34");
        assert_eq!(super::format_cents(5), "0.05");
        assert_eq!(super::format_cents(-250), "-2.50");
    }
}
