//! One spelling of each username: the one the throttle counts, the login looks up and user
//! creation stores.
//!
//! The hazard: the `users.username` column compares names loosely (MariaDB's
//! `utf8mb4_unicode_ci`, PostgreSQL's ICU collation `haita_ci`): case, accents and compatibility
//! forms fold, `ß` reads as `ss`, and zero-width and control characters are *ignored*. A throttle
//! that keys failures by any other folding than the column's gives an attacker a fresh allowance
//! per spelling: `c\u{200C}ust2`, `c\u{2060}ust2`, … each found the account `cust2` in the
//! database and were counted apart, 200 guesses across 20 spellings without one 429.
//!
//! Matching the collation's folding exactly, in Rust, for every engine and version, is a losing
//! race. So the app decides the names itself: user creation allows only `a`–`z`, `0`–`9`, `.`,
//! `_` and `-` ([`ALLOWED`]), stored lower case; a typed name is folded as far as the column
//! folds letters (case, accents, full-width forms) and is a login name only if nothing else is
//! left ([`canonical`]). Any other typed name cannot be anyone's: the login answers it exactly as
//! a wrong password, after the same dummy hash, without asking the database. The throttle counts
//! every attempt under [`throttle_key`], the canonical name with everything outside [`ALLOWED`]
//! dropped, so `c\u{200C}ust2` and `cußt2` spend `cust2`'s and `cusst2`'s allowance.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// The longest username, in characters (all ASCII, so bytes too).
pub const MAX_LEN: usize = 64;

/// What a canonical username is made of, besides lower-case ASCII letters and digits.
pub const ALLOWED: &str = "a-z, 0-9, '.', '_' and '-'";

fn allowed(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
}

/// A typed name as the column folds letters: compatibility forms unified (`ｂｏｂ`), accents
/// dropped (`bób`), case folded (`BOB`, and `ß` to `ss` as the collations read it), spaces around
/// trimmed. Anything else is kept, for [`canonical`] to refuse.
fn folded(typed: &str) -> String {
    let lower = typed.trim().nfkd().filter(|c| !is_combining_mark(*c)).collect::<String>().to_lowercase();
    lower.replace('ß', "ss")
}

/// The username `typed` names, if it can name one: folded, then only [`ALLOWED`] characters, 1 to
/// [`MAX_LEN`] of them. `BOB`, ` Bób `, `ｂｏｂ` are `bob`; `b\u{200B}ob`, `bob\u{0}`, `böb\u{2060}`
/// and `アリス` are nobody.
pub fn canonical(typed: &str) -> Option<String> {
    let name = folded(typed);
    let fits = !name.is_empty() && name.len() <= MAX_LEN && name.chars().all(allowed);
    fits.then_some(name)
}

/// Whose failures an attempt counts as: the canonical name for a name that has one, and for any
/// other the same with what is not [`ALLOWED`] dropped, so that no invisible character, control
/// character or letter the collation might ignore makes a second account of one. Bounded to
/// [`MAX_LEN`] characters as the names are.
pub fn throttle_key(typed: &str) -> String {
    folded(typed).chars().filter(|c| allowed(*c)).take(MAX_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_name_are_that_name() {
        for spelling in ["bob", "BOB", " Bob ", "bób", "BÓB", "ｂｏｂ", "bo\u{301}b"] {
            assert_eq!(canonical(spelling).as_deref(), Some("bob"), "{spelling:?}");
        }
        assert_eq!(canonical("Straße").as_deref(), Some("strasse"));
        assert_eq!(canonical("flash-buyer-001").as_deref(), Some("flash-buyer-001"));
    }

    #[test]
    fn a_name_with_anything_the_collation_might_ignore_is_nobody_but_counts_as_its_letters() {
        for spelling in [
            "c\u{200C}ust2",
            "c\u{200D}\u{200D}ust2",
            "c\u{2060}\u{2060}\u{2060}ust2",
            "cu\u{0}st2",
            "cust2\u{7F}",
        ] {
            assert_eq!(canonical(spelling), None, "{spelling:?}");
            assert_eq!(throttle_key(spelling), "cust2", "{spelling:?}");
        }
        assert_eq!(canonical("アリス"), None);
        assert_eq!(canonical(""), None);
        assert_eq!(canonical(&"a".repeat(MAX_LEN + 1)), None);
        assert_eq!(throttle_key(&"a".repeat(1000)).len(), MAX_LEN);
    }

    #[test]
    fn the_key_of_a_canonical_name_is_the_name() {
        for typed in ["Bob", "cußt2", "x.y_z-1"] {
            assert_eq!(Some(throttle_key(typed)), canonical(typed));
        }
    }
}
