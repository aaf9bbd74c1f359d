//! Named-lock names that are valid on every supported server.
//!
//! Two server differences make a hand-built name dangerous (`docs/server-facts.md`):
//! MySQL 8 rejects names over 64 characters while MariaDB accepts them, so a too-long name
//! passes every MariaDB test and fails in production; and MySQL compares names
//! case-insensitively while MariaDB does not, so `Room` and `room` exclude each other on one
//! server and not on the other. A `LockName` is therefore built only from a scope and a key made
//! of ids and ISO dates; anything else, and anything too long, is replaced by a hash of itself.

use std::fmt;

use chrono::NaiveDate;
use sha2::{Digest, Sha256};

/// Every name this application takes starts with this, so the admin screen can list exactly
/// our locks and nothing else's.
pub const PREFIX: &str = "haita:";
/// MySQL's limit on a user-level lock name.
pub const MAX_LEN: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockName(String);

impl LockName {
    /// `haita:{scope}:{key}`. The key is kept readable when it is short and made only of
    /// lower-case ASCII letters, digits and `:-._`; otherwise it is replaced by `#` and the
    /// SHA-256 of the key, cut to fit 64 characters (still 200+ bits, no realistic collision).
    pub fn new(scope: &str, key: &str) -> Self {
        debug_assert!(
            !scope.is_empty() && scope.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "scope {scope:?} must be lower-case letters"
        );
        let readable = format!("{PREFIX}{scope}:{key}");
        let key_is_plain =
            key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b":-._".contains(&b));
        if key_is_plain && readable.len() <= MAX_LEN {
            return Self(readable);
        }
        let digest = format!("{:x}", Sha256::digest(key.as_bytes()));
        let head = format!("{PREFIX}{scope}:#");
        let room = MAX_LEN.saturating_sub(head.len()).min(digest.len());
        Self(format!("{head}{}", &digest[..room]))
    }

    /// The lock around check-then-insert of one resource on one day.
    pub fn booking(resource_id: i64, day: NaiveDate) -> Self {
        Self::new("book", &format!("{resource_id}:{}", day.format("%Y-%m-%d")))
    }

    /// The lock around increase-or-insert of one product's stock row.
    pub fn stock(product_id: i64) -> Self {
        Self::new("stock", &product_id.to_string())
    }

    /// The lock every instance takes before running migrations.
    pub fn migrations() -> Self {
        Self::new("migrate", "schema")
    }

    /// The lock around "insert the edit-lock row, or take it over" for one edit-lock key
    /// (`resource:42`): the row may not exist yet, so there is nothing to `SELECT … FOR UPDATE`.
    pub fn edit_lock(key: &str) -> Self {
        Self::new("edit", key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The scope part (`book`, `stock`, …), for metrics.
    pub fn scope(&self) -> &str {
        self.0[PREFIX.len()..].split(':').next().unwrap_or("")
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booking_names_read_like_their_key() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 24).expect("valid date");
        assert_eq!(LockName::booking(42, day).as_str(), "haita:book:42:2026-12-24");
    }

    #[test]
    fn the_scope_is_the_part_after_the_prefix() {
        assert_eq!(LockName::stock(7).scope(), "stock");
        assert_eq!(LockName::new("book", &"x".repeat(200)).scope(), "book");
    }

    #[test]
    fn long_keys_are_hashed_to_at_most_64_characters() {
        let long = "x".repeat(500);
        let name = LockName::new("book", &long);
        assert_eq!(name.as_str().len(), MAX_LEN);
        assert!(name.as_str().starts_with("haita:book:#"));
        // Deterministic: the same key always gives the same lock.
        assert_eq!(name, LockName::new("book", &long));
        assert_ne!(name, LockName::new("book", &"x".repeat(501)));
    }

    #[test]
    fn a_key_just_over_the_limit_is_hashed_and_one_at_the_limit_is_not() {
        let fits = "1".repeat(MAX_LEN - "haita:book:".len());
        assert_eq!(LockName::new("book", &fits).as_str().len(), MAX_LEN);
        assert!(!LockName::new("book", &fits).as_str().contains('#'));
        let over = format!("{fits}1");
        let hashed = LockName::new("book", &over);
        assert!(hashed.as_str().contains('#') && hashed.as_str().len() <= MAX_LEN);
    }

    #[test]
    fn keys_whose_case_varies_never_reach_the_server_as_such() {
        // MySQL would treat these as one lock and MariaDB as two; hashing makes them two everywhere
        // and, more importantly, means no name with upper-case letters is ever sent.
        let upper = LockName::new("book", "Room-A");
        let lower = LockName::new("book", "room-a");
        assert_ne!(upper, lower);
        assert!(upper.as_str().chars().all(|c| !c.is_ascii_uppercase()));
        assert_eq!(lower.as_str(), "haita:book:room-a");
    }

    #[test]
    fn non_ascii_keys_are_hashed_so_length_is_counted_in_ascii() {
        let name = LockName::new("book", "会議室:2026-12-24");
        assert!(name.as_str().is_ascii());
        assert!(name.as_str().len() <= MAX_LEN);
    }

    #[test]
    fn edit_lock_names_read_like_their_key() {
        assert_eq!(LockName::edit_lock("resource:42").as_str(), "haita:edit:resource:42");
    }
}
