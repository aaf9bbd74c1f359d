//! Creating users and checking passwords. Functions take a connection: the caller decides the
//! transaction and runs them off the async executor.

use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DbError};

use super::model::NewUser;
use super::{AuthError, Role, User, password, username};
use crate::db::DbConn;
use crate::schema::users;

pub const MIN_PASSWORD_LEN: usize = 8;

/// The user who would log in as `typed`, with their password hash: one short read, so the
/// connection goes back to the pool before the slow part, [`verify`]. A name with no canonical
/// spelling ([`username::canonical`]) is nobody's, and the database is not asked: its collation
/// would ignore the invisible characters the name was made unique by.
pub fn find_for_login(conn: &mut DbConn, typed: &str) -> Result<Option<User>, AuthError> {
    let Some(name) = username::canonical(typed) else { return Ok(None) };
    Ok(User::by_username(&name).select(User::as_select()).first(conn).optional()?)
}

/// The slow part of a login: no database, only CPU. A missing user costs the same time as a
/// wrong password, so response times do not tell which usernames exist.
///
/// A demo account (`is_demo`, made by the lab's seed with a published password) logs in only
/// while `demo_accounts` is on (`DEMO_MODE`): a database seeded once for a demo keeps them, and
/// their passwords are in the README. Refused, it gets a wrong password's answer after the same
/// hash check, so neither the answer nor its time tells that the account exists.
pub fn verify(user: Option<User>, given: &str, demo_accounts: bool) -> Result<User, AuthError> {
    match user {
        Some(user) if password::verify(given, &user.password_hash) && (demo_accounts || !user.is_demo) => {
            Ok(user)
        }
        Some(_) => Err(AuthError::BadCredentials),
        None => {
            password::verify_against_nothing(given);
            Err(AuthError::BadCredentials)
        }
    }
}

/// What an operator or the seed supplies to make a user.
pub struct UserSpec<'a> {
    pub username: &'a str,
    pub display_name: &'a str,
    pub password: &'a str,
    pub role: Role,
    pub is_demo: bool,
}

pub fn create_user(conn: &mut DbConn, spec: &UserSpec<'_>) -> Result<User, AuthError> {
    // Stored in its canonical spelling, the one a login looks up; typed in ASCII, so that no
    // accent or full-width form is silently dropped from the name a person chose.
    let Some(username) = username::canonical(spec.username).filter(|_| spec.username.is_ascii()) else {
        return Err(AuthError::Invalid {
            field: "username",
            message: format!("use 1 to {} of {}", username::MAX_LEN, username::ALLOWED),
        });
    };
    let username = username.as_str();
    let display_name = spec.display_name.trim();
    if let Some(stray) = crate::wire::input::stray_character(display_name, false) {
        return Err(AuthError::Invalid {
            field: "display_name",
            message: format!("remove the control character {}", crate::wire::input::code_point(stray)),
        });
    }
    if display_name.chars().count() > 100 {
        return Err(AuthError::Invalid { field: "display_name", message: "at most 100 characters".into() });
    }
    if spec.password.chars().count() < MIN_PASSWORD_LEN {
        return Err(AuthError::Invalid {
            field: "password",
            message: format!("at least {MIN_PASSWORD_LEN} characters"),
        });
    }
    let hash = password::hash(spec.password).map_err(|e| AuthError::Hashing(e.to_string()))?;
    let new = NewUser {
        username,
        display_name: if display_name.is_empty() { username } else { display_name },
        password_hash: &hash,
        role: spec.role,
        is_demo: spec.is_demo,
    };
    crate::db::transaction(conn, |conn| {
        diesel::insert_into(users::table).values(&new).execute(conn).map_err(|e| match e {
            DbError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => {
                AuthError::UsernameTaken(username.to_string())
            }
            other => other.into(),
        })?;
        Ok(User::by_username(username).select(User::as_select()).first(conn)?)
    })
}

/// Outside `DEMO_MODE`, at start: ends every session of a demo account (one opened while the
/// demo ran would otherwise outlive it by up to a session's lifetime) and says how many demo
/// accounts the database holds, for `serve` to warn of them.
pub fn retire_demo_users(conn: &mut DbConn) -> Result<(i64, usize), AuthError> {
    use crate::schema::user_sessions;
    let demo = users::table.filter(users::is_demo.eq(true));
    let ended =
        diesel::delete(user_sessions::table.filter(user_sessions::user_id.eq_any(demo.select(users::id))))
            .execute(conn)?;
    Ok((demo.count().get_result(conn)?, ended))
}

/// The demo accounts, for the login page's hint. Empty unless `seed` created them.
pub fn demo_users(conn: &mut DbConn) -> Result<Vec<(String, Role)>, AuthError> {
    Ok(users::table
        .filter(users::is_demo.eq(true))
        .order(users::id)
        .select((users::username, users::role))
        .load(conn)?)
}
