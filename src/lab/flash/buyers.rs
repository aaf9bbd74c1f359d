//! The buyers: customer accounts `flash-buyer-001` to `flash-buyer-500`, made once, and the
//! password they log in with during one sale.
//!
//! They log in as any customer does, through `POST /api/v1/session`: the throttle, the hashing
//! slot, the password check and the session row are the app's own. What is made cheap is only the
//! hash. Argon2's cost is there to slow down guessing of passwords people choose; a buyer's
//! password is 32 random characters, made for one sale and never shown or stored, which no
//! guessing reaches, so its hash uses Argon2id's smallest parameters (the PHC string carries
//! them, and `auth::password::verify` checks with them). 500 logins then cost milliseconds of
//! CPU instead of the half a minute 500 checks at the default cost take on a small machine.
//!
//! Between sales nobody can log in as a buyer: their hash is [`LOCKED`], which matches no
//! password, and their sessions are ended ([`close`]). They are not demo accounts (`is_demo`):
//! those are the seed's, whose published passwords the login page lists.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHasher, SaltString};
use diesel::prelude::*;
use rand::distr::{Alphanumeric, SampleString};

use super::FlashError;
use crate::auth::Role;
use crate::auth::model::NewUser;
use crate::db::conn::on_engine;
use crate::db::{DbConn, DbPool};
use crate::schema::{user_sessions, users};

/// The most buyers a sale may have: the accounts made once.
pub const MAX_BUYERS: u32 = 500;
/// Every buyer's username starts with it: `flash-buyer-001`. (Found by name, not by `LIKE`:
/// PostgreSQL's case-insensitive collation of `username` does not do `LIKE`.)
const BUYER: &str = "flash-buyer-";
/// The staff account the flash products' stock is received by (the ledger names an actor).
const KEEPER: &str = "flash-stock-keeper";
/// Not a PHC string: `auth::password::verify` cannot parse it, so no password matches it.
const LOCKED: &str = "!locked";

/// The buyers of one sale, and the password they log in with.
pub struct Buyers {
    /// Usernames, buyer `i` at index `i`.
    pub names: Vec<String>,
    pub password: String,
    /// The user id of the stock keeper.
    pub keeper: i64,
}

/// Makes the accounts on first use, then gives every buyer a fresh password for this sale.
/// Call it only while holding the sale's slot (`store::take`): two sales would each set their own.
pub fn open(pool: &DbPool, buyers: u32) -> Result<Buyers, FlashError> {
    let mut conn = pool.get()?;
    let keeper = make_accounts(&mut conn)?;
    let password = Alphanumeric.sample_string(&mut rand::rng(), 32);
    let hash = light_hash(&password)?;
    diesel::update(users::table.filter(users::username.eq_any(all_names())))
        .set(users::password_hash.eq(&hash))
        .execute(&mut conn)?;
    Ok(Buyers { names: (1..=buyers).map(name).collect(), password, keeper })
}

/// Ends every buyer's sessions and locks their accounts again.
pub fn close(pool: &DbPool) -> Result<(), FlashError> {
    let mut conn = pool.get()?;
    let buyers = || users::table.filter(users::username.eq_any(all_names()));
    crate::db::transaction(&mut conn, |conn| {
        diesel::delete(
            user_sessions::table.filter(user_sessions::user_id.eq_any(buyers().select(users::id))),
        )
        .execute(conn)?;
        diesel::update(buyers()).set(users::password_hash.eq(LOCKED)).execute(conn)?;
        Ok::<_, FlashError>(())
    })
}

fn name(i: u32) -> String {
    format!("{BUYER}{i:03}")
}

/// Every buyer's username, made or not.
pub fn all_names() -> Vec<String> {
    (1..=MAX_BUYERS).map(name).collect()
}

/// Creates the buyers and the stock keeper that do not exist yet, locked; returns the keeper.
fn make_accounts(conn: &mut DbConn) -> Result<i64, FlashError> {
    crate::db::transaction(conn, |conn| {
        let existing: Vec<String> = users::table
            .filter(users::username.eq_any(all_names()).or(users::username.eq(KEEPER)))
            .select(users::username)
            .load(conn)?;
        let wanted: Vec<(String, String, Role)> = (1..=MAX_BUYERS)
            .map(|i| (name(i), format!("Flash-sale buyer {i:03}"), Role::Customer))
            .chain([(KEEPER.to_string(), "Flash-sale stock keeper".to_string(), Role::Staff)])
            .filter(|(username, ..)| !existing.contains(username))
            .collect();
        let rows: Vec<NewUser<'_>> = wanted
            .iter()
            .map(|(username, display_name, role)| NewUser {
                username,
                display_name,
                password_hash: LOCKED,
                role: *role,
                is_demo: false,
            })
            .collect();
        if !rows.is_empty() {
            on_engine!(conn, |c| diesel::insert_into(users::table).values(&rows).execute(c))?;
        }
        Ok(users::table.filter(users::username.eq(KEEPER)).select(users::id).first(conn)?)
    })
}

/// An Argon2id hash with the smallest parameters: for a random password of one sale only (see
/// the module's comment), never for one a person chose.
fn light_hash(password: &str) -> Result<String, FlashError> {
    let params = argon2::Params::new(argon2::Params::MIN_M_COST, argon2::Params::MIN_T_COST, 1, None)
        .map_err(|e| anyhow::anyhow!("argon2 parameters: {e}"))?;
    let argon2 = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let salt = SaltString::generate(&mut OsRng);
    Ok(argon2
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing the buyers' password: {e}"))?
        .to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_light_hash_is_checked_by_the_apps_own_login_and_the_lock_matches_nothing() {
        let hash = super::light_hash("a-random-password-of-one-sale").expect("hash");
        assert!(hash.starts_with("$argon2id$v=19$m=8,t=1,p=1$"), "{hash}");
        assert!(crate::auth::password::verify("a-random-password-of-one-sale", &hash));
        assert!(!crate::auth::password::verify("another", &hash));
        assert!(!crate::auth::password::verify("", super::LOCKED));
        assert!(!crate::auth::password::verify("!locked", super::LOCKED));
    }
}
