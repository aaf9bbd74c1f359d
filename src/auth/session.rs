//! Who is logged in, kept in the encrypted session cookie.

use std::future::{Ready, ready};

use actix_session::{Session, SessionExt};
use actix_web::{FromRequest, HttpRequest, dev::Payload};
use serde::{Deserialize, Serialize};

use super::{AuthError, Role, User};

const USER_KEY: &str = "user";

/// The logged-in user, as stored in the session at login. Extracting it from a request that has
/// no session answers 401 (or, for a browser page, redirects to the login page).
///
/// The role is the one the user had at login; a role change takes effect at their next login.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionUser {
    pub id: i64,
    pub username: String,
    pub display_name: String,
    pub role: Role,
    /// Random per login: the same user in two browsers is two sessions (edit-lock owners).
    pub session_id: String,
}

impl SessionUser {
    /// Succeeds only if this user's role includes `needed`.
    pub fn require(&self, needed: Role) -> Result<(), AuthError> {
        if self.role.includes(needed) {
            Ok(())
        } else {
            Err(AuthError::Forbidden { have: self.role, need: needed })
        }
    }
}

impl FromRequest for SessionUser {
    type Error = AuthError;
    type Future = Ready<Result<Self, AuthError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(req.get_session().get::<SessionUser>(USER_KEY).ok().flatten().ok_or(AuthError::NotLoggedIn))
    }
}

/// Starts a fresh session for `user`: a new session id and a new CSRF token, so nothing set
/// before login (by an attacker who planted a cookie, say) survives it.
pub fn log_in(session: &Session, user: &User) -> Result<SessionUser, AuthError> {
    session.renew();
    session.clear();
    let logged_in = SessionUser {
        id: user.id,
        username: user.username.clone(),
        display_name: user.display_name.clone(),
        role: user.role,
        session_id: super::csrf::random_token(),
    };
    session.insert(USER_KEY, &logged_in).map_err(|e| AuthError::Session(e.to_string()))?;
    super::csrf::token(session)?;
    Ok(logged_in)
}

pub fn log_out(session: &Session) {
    session.purge();
}
