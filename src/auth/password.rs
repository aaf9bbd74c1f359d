//! Argon2id password hashes (PHC strings, salt included), with the crate's recommended
//! parameters. Hashing is deliberately slow: send it through `db::OffExecutor`, never run it on
//! the executor.

use std::sync::OnceLock;

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

pub fn hash(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default().hash_password(password.as_bytes(), &salt)?.to_string())
}

pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// Spends the same time as a real check when the username does not exist, so response times
/// do not tell an attacker which usernames are real.
pub fn verify_against_nothing(password: &str) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let phc = DUMMY.get_or_init(|| hash("not a real password").unwrap_or_default());
    let _ = verify(password, phc);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hash_verifies_only_its_own_password() {
        let phc = super::hash("correct horse").expect("hash");
        assert!(phc.starts_with("$argon2id$"));
        assert!(super::verify("correct horse", &phc));
        assert!(!super::verify("correct hors", &phc));
        assert!(!super::verify("correct horse", "not a phc string"));
    }
}
