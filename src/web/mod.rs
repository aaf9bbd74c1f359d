//! What every feature's routes share: the app state, error mapping, page context.

pub mod error;
pub mod input;

use std::future::{Ready, ready};
use std::sync::Arc;

use actix_session::SessionExt;
use actix_web::{FromRequest, HttpRequest, HttpResponse, dev::Payload};
use askama::Template;

use crate::auth::throttle::LoginGate;
use crate::auth::{AuthError, SessionUser, csrf};
use crate::bookings::coalesce::Coalescer;
use crate::config::Config;
use crate::db::DbPool;
use crate::locking::{LockError, LockName, LockQueue, Turn};
use error::RequestError;

/// Shared by every handler (as `web::Data<AppState>`).
#[derive(Clone)]
pub struct AppState {
    pub pool: DbPool,
    pub config: Arc<Config>,
    /// This instance's per-key queues in front of every named lock, and its waiting budget.
    pub locks: Arc<LockQueue>,
    /// This instance's login throttles and password-hashing slots.
    pub logins: Arc<LoginGate>,
    /// This instance's queues of bookings per day, served in batches.
    pub bookings: Arc<Coalescer>,
}

impl AppState {
    pub fn new(pool: DbPool, config: Config) -> Self {
        let locks = Arc::new(LockQueue::new(config.lock_waiters_max));
        // Set here, not by the queue: the lab's races make queues of their own.
        crate::metrics::METRICS
            .lock_waiters_budget
            .set(i64::try_from(config.lock_waiters_max).unwrap_or(i64::MAX));
        let logins = Arc::new(LoginGate::new(
            config.hashing_slots,
            config.login_attempts_per_username,
            config.login_attempts_per_address,
        ));
        Self { pool, config: Arc::new(config), locks, logins, bookings: Arc::default() }
    }

    /// Waits in memory for this request's turn at `name` (see [`LockQueue`]), within
    /// `LOCK_WAIT_SECS`; the rest of that wait is left for `GET_LOCK`.
    pub async fn turn(&self, name: LockName) -> Result<Turn, LockError> {
        self.locks.turn(name, self.config.lock_wait).await
    }
}

/// What the layout of every HTML page needs: who is logged in and the CSRF token for its forms.
pub struct PageContext {
    pub user: Option<SessionUser>,
    pub csrf_token: String,
}

impl PageContext {
    pub fn is_staff(&self) -> bool {
        self.user.as_ref().is_some_and(|u| u.role.includes(crate::auth::Role::Staff))
    }

    pub fn is_admin(&self) -> bool {
        self.user.as_ref().is_some_and(|u| u.role.includes(crate::auth::Role::Admin))
    }

    /// Whether pages may link to the lab's `/demo` (see [`crate::LAB`]).
    pub fn lab(&self) -> bool {
        crate::LAB
    }
}

impl FromRequest for PageContext {
    type Error = AuthError;
    type Future = Ready<Result<Self, AuthError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let session = req.get_session();
        let user = SessionUser::from_request(req, payload).into_inner().ok();
        ready(csrf::token(&session).map(|csrf_token| Self { user, csrf_token }))
    }
}

/// Runs blocking work — diesel calls, `pool.get()`, lock waits, password hashing — on actix's
/// blocking thread pool, never on the async executor.
pub async fn blocking<T, E>(work: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static + From<actix_web::error::BlockingError>,
{
    actix_web::web::block(work).await?
}

/// Renders a page; a template error is an internal error (a bug), never shown to the user.
pub fn html(page: &impl Template) -> Result<HttpResponse, RequestError> {
    let body = page.render().map_err(|e| RequestError::Internal(e.into()))?;
    Ok(HttpResponse::Ok().content_type("text/html; charset=utf-8").body(body))
}

/// `303 See Other` to `location`: the answer to a successful form post.
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((actix_web::http::header::LOCATION, location.to_string())).finish()
}

/// Only same-site paths are followed after login (no open redirect to `//evil.example`).
pub fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.starts_with("/\\") => p,
        _ => "/",
    }
}
