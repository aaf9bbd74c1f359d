//! Optimistic editing of products: validated changes, the one versioned UPDATE every writer
//! uses, and the three-way merge behind the conflict screen.
//!
//! The hazard (`docs/optimistic-version.md`): two people open the same product, both save, and the
//! second save silently overwrites the first — a lost update. Locking the row while a person
//! types is out of the question (minutes, not milliseconds), so the row carries a version: a
//! save names the version it was read at and applies only if that is still the current one.
//! A version number beats a timestamp: two saves within one clock tick have equal timestamps.

use chrono::Utc;
use diesel::prelude::*;

use super::CatalogError;
use super::model::{Product, format_cents};
use crate::db::DbConn;
use crate::schema::{products, users};
use crate::wire::error::FieldError;
use crate::wire::input::{code_point, stray_character};

pub const NAME_MAX_CHARS: usize = 200;
pub const DESCRIPTION_MAX_CHARS: usize = 10_000;
pub const PRICE_MAX_CENTS: i64 = 100_000_000;

/// A validated set of new values for a product. Construct with [`ProductChanges::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductChanges {
    pub name: String,
    pub description: String,
    pub price_cents: i64,
}

/// What is wrong with each invalid field, every one at once.
pub type FieldErrors = Vec<FieldError>;

impl ProductChanges {
    pub fn parse(name: &str, description: &str, price_cents: i64) -> Result<Self, FieldErrors> {
        let mut errors = FieldErrors::new();
        let name = name.trim();
        if name.is_empty() {
            errors.push(FieldError::said("name", "product.err.name_empty", &[]));
        } else if name.chars().count() > NAME_MAX_CHARS {
            errors.push(FieldError::said(
                "name",
                "product.err.name_long",
                &[("max", NAME_MAX_CHARS.to_string())],
            ));
        }
        // Line endings are normalised so a browser's \r\n and an API client's \n compare equal.
        let description = description.replace("\r\n", "\n");
        for (field, text, lines) in [("name", name, false), ("description", description.as_str(), true)] {
            if let Some(stray) = stray_character(text, lines) {
                errors.push(FieldError::said(field, "field.stray_character", &[("code", code_point(stray))]));
            }
        }
        if description.chars().count() > DESCRIPTION_MAX_CHARS {
            errors.push(FieldError::said(
                "description",
                "product.err.description_long",
                &[("max", DESCRIPTION_MAX_CHARS.to_string())],
            ));
        }
        if price_cents < 0 {
            errors.push(FieldError::said("price_cents", "product.err.price_negative", &[]));
        } else if price_cents > PRICE_MAX_CENTS {
            errors.push(FieldError::said(
                "price_cents",
                "product.err.price_high",
                &[("max", PRICE_MAX_CENTS.to_string())],
            ));
        }
        if errors.is_empty() {
            Ok(Self { name: name.to_string(), description, price_cents })
        } else {
            Err(errors)
        }
    }
}

/// `"12.34"`, `"12"`, `"12.5"` → cents. Anything else (negatives, three decimals, words) is an
/// error of the price field.
pub fn parse_price(text: &str) -> Result<i64, FieldError> {
    let text = text.trim();
    let (units, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(units) || (!fraction.is_empty() && !digits(fraction)) || fraction.len() > 2 || units.len() > 12
    {
        let given = format!("{:?}", text.chars().take(20).collect::<String>());
        return Err(FieldError::said("price", "product.err.price_shape", &[("given", given)]));
    }
    let too_large = |_| FieldError::said("price", "product.err.price_large", &[]);
    let units: i64 = units.parse().map_err(too_large)?;
    let cents: i64 = format!("{fraction:0<2}").parse().map_err(too_large)?;
    Ok(units * 100 + cents)
}

/// The versioned save. Applies `changes` only if the product is still at `read_version`, bumping
/// the version by exactly one; otherwise nothing is written and the caller gets the current row.
///
/// This (through [`apply`]) is the only UPDATE of a product's editable fields: forms, the API and
/// the batch price revision (`crate::batch::price_revision`) all come through it, so none can skip
/// the version check or forget the bump.
pub fn save(
    conn: &mut DbConn,
    id: i64,
    read_version: i32,
    changes: &ProductChanges,
    actor_user_id: i64,
) -> Result<Product, CatalogError> {
    crate::db::transaction(conn, |conn| apply(conn, id, read_version, changes, Some(actor_user_id)))
}

/// The fields a partial save (the JSON PATCH) sends; absent ones keep their values.
#[derive(Debug, Default)]
pub struct Patch {
    pub name: Option<String>,
    pub description: Option<String>,
    pub price_cents: Option<i64>,
}

/// [`save`] of a partial change: absent fields keep their values. If those were read from a newer
/// version than the client's, the versioned UPDATE refuses the save anyway.
pub fn save_patch(
    conn: &mut DbConn,
    id: i64,
    read_version: i32,
    patch: &Patch,
    actor_user_id: i64,
) -> Result<Product, CatalogError> {
    let now = find(conn, id)?.product;
    let changes = ProductChanges::parse(
        patch.name.as_deref().unwrap_or(&now.name),
        patch.description.as_deref().unwrap_or(&now.description),
        patch.price_cents.unwrap_or(now.price_cents),
    )
    .map_err(CatalogError::InvalidFields)?;
    save(conn, id, read_version, &changes, actor_user_id)
}

/// The versioned update itself, inside the caller's transaction: every writer of a product goes
/// through here (an online save, a batch job), so none can overwrite a version it did not read.
/// `actor_user_id` is `None` for a batch job.
pub fn apply(
    conn: &mut DbConn,
    id: i64,
    read_version: i32,
    changes: &ProductChanges,
    actor_user_id: Option<i64>,
) -> Result<Product, CatalogError> {
    // `version = version + 1` always changes the row, so "1 row affected" means "matched"
    // even under MySQL's default of counting changed rather than matched rows.
    let applied = diesel::update(
        products::table.filter(products::id.eq(id)).filter(products::version.eq(read_version)),
    )
    .set((
        products::name.eq(&changes.name),
        products::description.eq(&changes.description),
        products::price_cents.eq(changes.price_cents),
        products::version.eq(products::version + 1),
        products::updated_at.eq(Utc::now().naive_utc()),
        products::updated_by.eq(actor_user_id),
    ))
    .execute(conn)?;
    let current = find(conn, id)?;
    if applied == 1 { Ok(current.product) } else { Err(CatalogError::Stale(Box::new(current))) }
}

/// A product as it is now, with the name of whoever saved it last.
#[derive(Clone, Debug)]
pub struct Current {
    pub product: Product,
    pub saved_by: Option<String>,
}

pub fn find(conn: &mut DbConn, id: i64) -> Result<Current, CatalogError> {
    let (product, saved_by) = products::table
        .left_join(users::table.on(products::updated_by.eq(users::id.nullable())))
        .filter(products::id.eq(id))
        .select((Product::as_select(), users::display_name.nullable()))
        .first(conn)
        .optional()?
        .ok_or(CatalogError::NotFound(id))?;
    Ok(Current { product, saved_by })
}

/// One field as three people see it: the value the user started from, what they typed, and
/// what is in the database now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldMerge {
    pub field: &'static str,
    pub label: &'static str,
    pub base: String,
    pub mine: String,
    pub theirs: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nobody changed it, or both changed it the same way.
    Unchanged,
    /// Only the user changed it: their value merges without asking.
    Mine,
    /// Only the other saver changed it: their value merges without asking.
    Theirs,
    /// Both changed it differently: the user chooses.
    Collision,
}

impl FieldMerge {
    pub fn outcome(&self) -> Outcome {
        match (self.mine == self.base, self.theirs == self.base, self.mine == self.theirs) {
            (_, _, true) | (true, true, _) => Outcome::Unchanged,
            (false, true, _) => Outcome::Mine,
            (true, false, _) => Outcome::Theirs,
            (false, false, false) => Outcome::Collision,
        }
    }

    pub fn collides(&self) -> bool {
        self.outcome() == Outcome::Collision
    }

    /// The value to save when the user has not chosen (or needs not choose).
    pub fn merged(&self) -> &str {
        match self.outcome() {
            Outcome::Theirs => &self.theirs,
            _ => &self.mine,
        }
    }
}

/// The three-way merge of a stale save: `base` is what the form was read at, `mine` what the user
/// submitted, `current` what is saved now.
pub fn three_way(base: &[String; 3], mine: &ProductChanges, current: &Product) -> Vec<FieldMerge> {
    let field = |field, label, base: &String, mine: String, theirs: String| FieldMerge {
        field,
        label,
        base: base.replace("\r\n", "\n"),
        mine,
        theirs,
    };
    vec![
        field("name", "product.name", &base[0], mine.name.clone(), current.name.clone()),
        field(
            "description",
            "product.description",
            &base[1],
            mine.description.clone(),
            current.description.clone(),
        ),
        field(
            "price",
            "product.price",
            &base[2],
            format_cents(mine.price_cents),
            format_cents(current.price_cents),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(base: &str, mine: &str, theirs: &str) -> Outcome {
        FieldMerge { field: "f", label: "F", base: base.into(), mine: mine.into(), theirs: theirs.into() }
            .outcome()
    }

    #[test]
    fn only_fields_both_sides_changed_differently_collide() {
        assert_eq!(merge("a", "a", "a"), Outcome::Unchanged);
        assert_eq!(merge("a", "b", "a"), Outcome::Mine);
        assert_eq!(merge("a", "a", "c"), Outcome::Theirs);
        assert_eq!(merge("a", "b", "b"), Outcome::Unchanged);
        assert_eq!(merge("a", "b", "c"), Outcome::Collision);
    }

    #[test]
    fn prices_parse_from_what_people_type() {
        assert_eq!(parse_price("12.34"), Ok(1234));
        assert_eq!(parse_price(" 12 "), Ok(1200));
        assert_eq!(parse_price("0.5"), Ok(50));
        for bad in ["-1", "1.234", "abc", "", "1,50", ".5", "1e3", "99999999999999"] {
            assert!(parse_price(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_invalid_field_is_named() {
        let errors =
            ProductChanges::parse("  ", &"x".repeat(DESCRIPTION_MAX_CHARS + 1), -1).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, vec!["name", "description", "price_cents"]);
        assert!(
            ProductChanges::parse(&"名".repeat(NAME_MAX_CHARS), "", 0).is_ok(),
            "limits count characters, not bytes"
        );
        assert!(ProductChanges::parse(&"名".repeat(NAME_MAX_CHARS + 1), "", 0).is_err());
    }
}
