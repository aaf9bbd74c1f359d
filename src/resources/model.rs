//! A resource as stored, and the changes staff may make to it.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;

use super::ResourceError;
use crate::db::DbConn;
use crate::schema::resources;
use crate::wire::input::{code_point, stray_character};

#[derive(Clone, Debug, Queryable, Selectable, Identifiable, Serialize, utoipa::ToSchema)]
#[diesel(table_name = resources, check_for_backend(crate::db::MultiBackend))]
pub struct Resource {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub capacity: i32,
    /// What one night costs, in hundredths of `i18n::CURRENCY`; 0 is free of charge.
    pub price_cents: i64,
    pub version: i32,
    #[serde(with = "crate::wire::utc")]
    pub updated_at: NaiveDateTime,
}

impl Resource {
    pub fn by_id(id: i64) -> resources::BoxedQuery<'static, crate::db::MultiBackend> {
        resources::table.filter(resources::id.eq(id)).into_boxed()
    }

    /// The resource, or `None`; each caller says what a missing one means to it (404, 422).
    pub fn find(conn: &mut DbConn, id: i64) -> QueryResult<Option<Self>> {
        Self::by_id(id).select(Self::as_select()).first(conn).optional()
    }

    pub fn list(conn: &mut DbConn) -> QueryResult<Vec<Self>> {
        resources::table.order(resources::id).select(Self::as_select()).load(conn)
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = resources, check_for_backend(crate::db::MultiBackend))]
pub struct NewResource<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub capacity: i32,
    pub price_cents: i64,
}

pub use crate::wire::error::FieldError;

pub const NAME_MAX: usize = 100;
pub const DESCRIPTION_MAX: usize = 2000;
pub const CAPACITY_MAX: i32 = 10_000;

/// Validated changes to a resource; `None` leaves a field as it is (JSON `PATCH`). Built only by
/// [`ResourceChanges::parse`], so the service never sees an empty name or a capacity of 0.
#[derive(Clone, Debug, Default, AsChangeset)]
#[diesel(table_name = resources, check_for_backend(crate::db::MultiBackend))]
pub struct ResourceChanges {
    name: Option<String>,
    description: Option<String>,
    pub(super) capacity: Option<i32>,
}

/// Input as it arrives, before validation: the HTML form sends text for every field.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
pub struct ResourceInput {
    pub name: Option<String>,
    pub description: Option<String>,
    pub capacity: Option<String>,
}

impl ResourceChanges {
    /// Every problem at once, so the form can mark each field.
    pub fn parse(input: &ResourceInput) -> Result<Self, ResourceError> {
        let mut errors = Vec::new();
        let mut fail =
            |field, key, args: &[(&'static str, String)]| errors.push(FieldError::said(field, key, args));
        let name = input.name.as_deref().map(str::trim).map(str::to_string);
        if let Some(name) = &name {
            let chars = name.chars().count();
            if chars == 0 || chars > NAME_MAX {
                fail("name", "field.name_length", &[("max", NAME_MAX.to_string())]);
            }
        }
        let description = input.description.as_deref().map(|d| d.trim().replace("\r\n", "\n"));
        if description.as_ref().is_some_and(|d| d.chars().count() > DESCRIPTION_MAX) {
            fail("description", "field.too_long", &[("max", DESCRIPTION_MAX.to_string())]);
        }
        for (field, text, lines) in [("name", &name, false), ("description", &description, true)] {
            if let Some(stray) = text.as_deref().and_then(|t| stray_character(t, lines)) {
                fail(field, "field.stray_character", &[("code", code_point(stray))]);
            }
        }
        let capacity = match input.capacity.as_deref().map(str::trim) {
            None => None,
            Some(text) => match text.parse::<i32>() {
                Ok(n) if (1..=CAPACITY_MAX).contains(&n) => Some(n),
                _ => {
                    fail(
                        "capacity",
                        "field.capacity",
                        &[("max", CAPACITY_MAX.to_string()), ("given", format!("{:?}", cut(text)))],
                    );
                    None
                }
            },
        };
        if input.name.is_none() && input.description.is_none() && input.capacity.is_none() {
            fail("body", "field.nothing_to_change", &[]);
        }
        if errors.is_empty() {
            Ok(Self { name, description, capacity })
        } else {
            Err(ResourceError::Invalid(errors))
        }
    }
}

fn cut(text: &str) -> String {
    text.chars().take(20).collect()
}

/// The most nights one reservation may cover (a booking of one day covers one). The schema
/// says the same (`reservations_stay_nights`), and the reads rely on it: see
/// [`first_check_in_covering`].
pub const MAX_NIGHTS: u32 = 14;

/// The earliest check-in day of a reservation that can cover the night of `night`: none is
/// longer than [`MAX_NIGHTS`], so the reservations covering a night are those with
/// `day BETWEEN first_check_in_covering(night) AND night AND check_out > night` — a bounded
/// range of the index on `(resource_id, day, status, check_out)`, never a scan of the past.
pub fn first_check_in_covering(night: chrono::NaiveDate) -> chrono::NaiveDate {
    night - chrono::Days::new(u64::from(MAX_NIGHTS) - 1)
}

/// "Today" for bookings and closures: the calendar day in the server's local time zone (`TZ`).
pub fn today() -> chrono::NaiveDate {
    chrono::Local::now().date_naive()
}
