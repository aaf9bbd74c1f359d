//! Named-lock names that are valid on every supported server.
//!
//! Two server differences make a hand-built name dangerous (`docs/server-facts.md`):
//! MySQL 8 rejects names over 64 characters while MariaDB accepts them, so a too-long name
//! passes every MariaDB test and fails in production; and MySQL compares names
//! case-insensitively while MariaDB does not, so `Room` and `room` exclude each other on one
//! server and not on the other. A `LockName` is therefore built only from a scope and a key made
//! of ids and ISO dates; anything else, and anything too long, is replaced by a hash of itself.
//! And since named locks are server-wide, every name carries its deployment's [`Namespace`].

use std::fmt;

use chrono::NaiveDate;
use sha2::{Digest, Sha256};

/// Every name this application takes starts with this, so the admin screen can list exactly
/// our locks and nothing else's.
pub const PREFIX: &str = "haita:";
/// MySQL's limit on a user-level lock name.
pub const MAX_LEN: usize = 64;
/// Hex digits of the deployment tag: 24 bits, so two databases on one server share a tag with a
/// chance of one in sixteen million (and then they only contend, they never break each other).
const TAG_LEN: usize = 6;

/// This deployment's part of the server's lock names: `haita:{tag}:`, the tag a short hash of
/// the database name.
///
/// Named locks are server-wide, not per database: without a tag, staging and production on one
/// server, or two test databases, would wait on each other's `haita:book:1:2026-12-24`, and an
/// admin of one could list and kill the other's lock holders. Every instance of one deployment
/// uses the same database, so they all derive the same tag and still exclude each other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Namespace {
    prefix: String,
}

impl Namespace {
    pub fn for_database(name: &str) -> Self {
        let digest = format!("{:x}", Sha256::digest(name.as_bytes()));
        Self { prefix: format!("{PREFIX}{}:", &digest[..TAG_LEN]) }
    }

    /// From `mysql://…/name?…`: the database name is what the instances of a deployment share.
    pub fn for_url(database_url: &str) -> Self {
        let name = url::Url::parse(database_url).map(|url| url.path().trim_start_matches('/').to_string());
        Self::for_database(&name.unwrap_or_default())
    }

    /// `haita:{tag}:` — what every lock name of this deployment starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The short tag alone, for the admin screen.
    pub fn tag(&self) -> &str {
        &self.prefix[PREFIX.len()..self.prefix.len() - 1]
    }

    /// Whether `name` is a lock of this deployment.
    pub fn owns(&self, name: &str) -> bool {
        name.starts_with(&self.prefix)
    }

    /// `haita:{tag}:{scope}:{key}`. The key is kept readable when it is short and made only of
    /// lower-case ASCII letters, digits and `:-._`; otherwise it is replaced by `#` and the
    /// SHA-256 of the key, cut to fit 64 characters (still 180+ bits, no realistic collision).
    pub fn name(&self, scope: &str, key: &str) -> LockName {
        debug_assert!(
            !scope.is_empty() && scope.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "scope {scope:?} must be lower-case letters"
        );
        let readable = format!("{}{scope}:{key}", self.prefix);
        let key_is_plain =
            key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b":-._".contains(&b));
        if key_is_plain && readable.len() <= MAX_LEN {
            return LockName(readable);
        }
        let digest = format!("{:x}", Sha256::digest(key.as_bytes()));
        let head = format!("{}{scope}:#", self.prefix);
        let room = MAX_LEN.saturating_sub(head.len()).min(digest.len());
        LockName(format!("{head}{}", &digest[..room]))
    }

    /// The lock around check-then-insert of one resource on one day.
    pub fn booking(&self, resource_id: i64, day: NaiveDate) -> LockName {
        self.name("book", &format!("{resource_id}:{}", day.format("%Y-%m-%d")))
    }

    /// The lock around increase-or-insert of one product's stock row.
    pub fn stock(&self, product_id: i64) -> LockName {
        self.name("stock", &product_id.to_string())
    }

    /// The lock every instance takes before running migrations.
    pub fn migrations(&self) -> LockName {
        self.name("migrate", "schema")
    }

    /// The lock a run of batch job `job` holds for its whole run (`BATCH_LOCK=db`): one instance
    /// at a time runs a job.
    pub fn batch(&self, job: &str) -> LockName {
        self.name("batch", job)
    }

    /// The lock around "insert the edit-lock row, or take it over" for one edit-lock key
    /// (`resource:42`): the row may not exist yet, so there is nothing to `SELECT … FOR UPDATE`.
    pub fn edit_lock(&self, key: &str) -> LockName {
        self.name("edit", key)
    }
}

/// A named-lock name, built only by a [`Namespace`]: namespaced, case-stable, at most 64
/// characters. Names are ordered as text, the one order in which every taker of several locks
/// takes them (`locking::TurnsInOrder`); one resource's day locks sort by date, ISO dates being
/// ordered as text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(String);

impl LockName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The scope part (`book`, `stock`, …), for metrics.
    pub fn scope(&self) -> &str {
        self.0.split(':').nth(2).unwrap_or("")
    }

    /// The key of this name's PostgreSQL advisory lock: the first 64 bits of the SHA-256 of the
    /// whole name. PostgreSQL locks numbers, not names; `hashtext()` would give 32 bits, and
    /// with a few ten thousand live names (one per resource and day) two of them would share a
    /// key, so one booking would wait for another it has nothing to do with. At 64 bits that
    /// takes billions.
    pub fn advisory_key(&self) -> i64 {
        super::dialect::postgres::advisory_key(&self.0)
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

    fn ns() -> Namespace {
        Namespace::for_database("haita")
    }

    #[test]
    fn advisory_keys_are_the_first_64_bits_of_the_names_sha_256() {
        let name = ns().migrations();
        let digest = Sha256::digest(name.as_str().as_bytes());
        let expected = i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        assert_eq!(name.advisory_key(), expected);
        let day = NaiveDate::from_ymd_opt(2026, 12, 24).expect("valid date");
        let neighbours =
            [ns().booking(42, day), ns().booking(43, day), ns().booking(42, day.succ_opt().expect("day"))];
        for (i, a) in neighbours.iter().enumerate() {
            for b in &neighbours[i + 1..] {
                assert_ne!(a.advisory_key(), b.advisory_key(), "{a} and {b}");
            }
        }
    }

    #[test]
    fn booking_names_read_like_their_key() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 24).expect("valid date");
        let name = ns().booking(42, day);
        assert_eq!(name.as_str(), format!("{}book:42:2026-12-24", ns().prefix()));
        assert!(name.as_str().starts_with("haita:") && name.as_str().len() <= MAX_LEN);
    }

    #[test]
    fn each_database_gets_its_own_names_and_every_instance_of_one_the_same() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 24).expect("valid date");
        let production = Namespace::for_url("mysql://app:secret@db.internal:3306/haita?ssl_mode=REQUIRED");
        let again = Namespace::for_url("mysql://other-user@10.0.0.5/haita");
        let staging = Namespace::for_url("mysql://app@db.internal/haita_staging");
        assert_eq!(production, again, "the database name decides, not the host or the user");
        assert_ne!(production.booking(1, day), staging.booking(1, day));
        assert_eq!(production.tag().len(), TAG_LEN);
        assert!(production.owns(production.stock(7).as_str()));
        assert!(!staging.owns(production.stock(7).as_str()));
    }

    #[test]
    fn the_scope_is_the_part_after_the_tag() {
        assert_eq!(ns().stock(7).scope(), "stock");
        assert_eq!(ns().name("book", &"x".repeat(200)).scope(), "book");
    }

    #[test]
    fn long_keys_are_hashed_to_at_most_64_characters() {
        let long = "x".repeat(500);
        let name = ns().name("book", &long);
        assert_eq!(name.as_str().len(), MAX_LEN);
        assert!(name.as_str().starts_with(&format!("{}book:#", ns().prefix())));
        // Deterministic: the same key always gives the same lock.
        assert_eq!(name, ns().name("book", &long));
        assert_ne!(name, ns().name("book", &"x".repeat(501)));
    }

    #[test]
    fn a_key_just_over_the_limit_is_hashed_and_one_at_the_limit_is_not() {
        let head = format!("{}book:", ns().prefix());
        let fits = "1".repeat(MAX_LEN - head.len());
        assert_eq!(ns().name("book", &fits).as_str().len(), MAX_LEN);
        assert!(!ns().name("book", &fits).as_str().contains('#'));
        let over = format!("{fits}1");
        let hashed = ns().name("book", &over);
        assert!(hashed.as_str().contains('#') && hashed.as_str().len() <= MAX_LEN);
    }

    #[test]
    fn keys_whose_case_varies_never_reach_the_server_as_such() {
        // MySQL would treat these as one lock and MariaDB as two; hashing makes them two everywhere
        // and, more importantly, means no name with upper-case letters is ever sent.
        let upper = ns().name("book", "Room-A");
        let lower = ns().name("book", "room-a");
        assert_ne!(upper, lower);
        assert!(upper.as_str().chars().all(|c| !c.is_ascii_uppercase()));
        assert_eq!(lower.as_str(), format!("{}book:room-a", ns().prefix()));
    }

    #[test]
    fn non_ascii_keys_are_hashed_so_length_is_counted_in_ascii() {
        let name = ns().name("book", "会議室:2026-12-24");
        assert!(name.as_str().is_ascii());
        assert!(name.as_str().len() <= MAX_LEN);
    }

    #[test]
    fn edit_lock_names_read_like_their_key() {
        assert_eq!(ns().edit_lock("resource:42").as_str(), format!("{}edit:resource:42", ns().prefix()));
    }
}
