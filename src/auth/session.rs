//! Who is logged in: a ticket in the encrypted session cookie, checked against the database on
//! every request.
//!
//! The cookie alone cannot be taken back: a copied cookie would stay valid until `SESSION_KEY`
//! changed, and a demoted admin would keep the role written into it. So the cookie holds only
//! a ticket (user id and session id), and each session is a row of `user_sessions`. Every
//! authenticated request reads that row joined with the user's (one primary-key lookup), so
//! logging out, logging out everywhere, a role change or a deleted user take effect on the next
//! request, on every instance, with no state in the app itself.

use std::future::Future;
use std::pin::Pin;

use actix_session::{Session, SessionExt};
use actix_web::{FromRequest, HttpMessage, HttpRequest, dev::Payload};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use super::{AuthError, Role, User};
use crate::schema::{user_sessions, users};
use crate::web::AppState;

const TICKET_KEY: &str = "ticket";

/// How long a session lasts; the cookie's own lifetime is the same.
pub const SESSION_TTL: chrono::TimeDelta = chrono::TimeDelta::hours(12);

/// What the cookie carries: which session row to look up.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Ticket {
    user_id: i64,
    session_id: String,
}

/// The logged-in user, as the database has them now. Extracting it from a request whose
/// session is gone answers 401 (or, for a browser page, redirects to the login page).
#[derive(Clone, Debug, Serialize, Deserialize, Queryable, utoipa::ToSchema)]
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
    type Future = Pin<Box<dyn Future<Output = Result<Self, AuthError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            // Looked up once per request, however many extractors ask.
            if let Some(found) = req.extensions().get::<SessionUser>() {
                return Ok(found.clone());
            }
            let session = req.get_session();
            let ticket = session.get::<Ticket>(TICKET_KEY).ok().flatten().ok_or(AuthError::NotLoggedIn)?;
            let pool = req
                .app_data::<actix_web::web::Data<AppState>>()
                .map(|state| state.pool.clone())
                .ok_or(AuthError::NotLoggedIn)?;
            let found =
                crate::web::blocking(move || Ok::<_, AuthError>(current(&mut *pool.get()?, &ticket)?))
                    .await?;
            match found {
                Some(user) => {
                    req.extensions_mut().insert(user.clone());
                    Ok(user)
                }
                None => {
                    session.purge(); // ended elsewhere: drop the stale cookie too
                    Err(AuthError::NotLoggedIn)
                }
            }
        })
    }
}

/// The user of a live session, or `None` when the session has ended.
fn current(conn: &mut MysqlConnection, ticket: &Ticket) -> QueryResult<Option<SessionUser>> {
    user_sessions::table
        .inner_join(users::table)
        .filter(user_sessions::id.eq(&ticket.session_id))
        .filter(user_sessions::user_id.eq(ticket.user_id))
        .filter(user_sessions::expires_at.gt(now()))
        .select((users::id, users::username, users::display_name, users::role, user_sessions::id))
        .first(conn)
        .optional()
}

fn now() -> NaiveDateTime {
    chrono::Utc::now().naive_utc()
}

/// Opens a session row for `user` (blocking: call it off the executor) and returns its id.
/// Expired rows of the same user are cleared on the way.
pub fn open(conn: &mut MysqlConnection, user: &User) -> QueryResult<String> {
    let session_id = super::csrf::random_token();
    let at = now();
    conn.transaction(|conn| {
        diesel::delete(user_sessions::table)
            .filter(user_sessions::user_id.eq(user.id))
            .filter(user_sessions::expires_at.le(at))
            .execute(conn)?;
        diesel::insert_into(user_sessions::table)
            .values((
                user_sessions::id.eq(&session_id),
                user_sessions::user_id.eq(user.id),
                user_sessions::created_at.eq(at),
                user_sessions::expires_at.eq(at + SESSION_TTL),
            ))
            .execute(conn)
    })?;
    Ok(session_id)
}

/// Ends one session (logging out), or every session of its user (`everywhere`).
pub fn close(conn: &mut MysqlConnection, user: &SessionUser, everywhere: bool) -> QueryResult<usize> {
    let mine = user_sessions::table.filter(user_sessions::user_id.eq(user.id));
    if everywhere {
        diesel::delete(mine).execute(conn)
    } else {
        diesel::delete(mine.filter(user_sessions::id.eq(&user.session_id))).execute(conn)
    }
}

/// Starts a fresh cookie for the session `session_id` of `user`: renewed, cleared, with a new
/// CSRF token, so nothing set before login (by an attacker who planted a cookie, say) survives.
pub fn log_in(session: &Session, user: &User, session_id: String) -> Result<SessionUser, AuthError> {
    session.renew();
    session.clear();
    let ticket = Ticket { user_id: user.id, session_id };
    session.insert(TICKET_KEY, &ticket).map_err(|e| AuthError::Session(e.to_string()))?;
    super::csrf::token(session)?;
    Ok(SessionUser {
        id: user.id,
        username: user.username.clone(),
        display_name: user.display_name.clone(),
        role: user.role,
        session_id: ticket.session_id,
    })
}

/// Forgets the cookie (the row is closed by [`close`]).
pub fn log_out(session: &Session) {
    session.purge();
}
