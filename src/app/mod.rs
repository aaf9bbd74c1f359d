//! What every feature's routes share: the app state and its one way to the database, the page
//! context, the extractors of the logged-in user, the HTML error page. It knows no feature: a
//! feature's own state is app data of its own (`web::Data<Coalescer>`), not a field here.

pub mod error;

use std::sync::Arc;

use actix_session::SessionExt;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, dev::Payload};
use askama::Template;

use crate::auth::session::SessionChecks;
use crate::auth::throttle::{LoginGate, Policy};
use crate::auth::{AuthError, SessionUser, csrf};
use crate::config::Config;
use crate::db::{DbPool, OffExecutor};
use crate::i18n::Lang;
use crate::locking::{LockError, LockName, LockQueue, Turn};
use crate::metrics::Metrics;
use error::RequestError;

/// Shared by every handler (as `web::Data<AppState>`).
#[derive(Clone)]
pub struct AppState {
    /// This instance's one door to its database and its blocking threads: work sent through it
    /// never runs on the executor and counts in this instance's metrics.
    pub off_executor: OffExecutor,
    /// This instance's metrics (`crate::metrics`): its worker threads record into them, and so
    /// does the blocking work sent through [`off_executor`](Self::off_executor).
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
    /// This instance's per-key queues in front of every named lock, and its waiting budget.
    pub locks: Arc<LockQueue>,
    /// The login throttle's policy (its counts are in the database) and this instance's
    /// password-hashing slots.
    pub logins: Arc<LoginGate>,
    /// This instance's session checks, answered together.
    pub sessions: Arc<SessionChecks>,
}

impl AppState {
    pub fn new(pool: DbPool, config: Config) -> Self {
        let locks = Arc::new(LockQueue::new(config.lock_waiters_max));
        let metrics = Metrics::new();
        // Set here, not by the queue: the lab's races make queues of their own.
        metrics.lock_waiters_budget.set(i64::try_from(config.lock_waiters_max).unwrap_or(i64::MAX));
        metrics.pool_max.set(i64::from(config.pool_size));
        let logins = Arc::new(LoginGate::new(
            config.hashing_slots,
            Policy {
                failures: config.login_failures,
                per_client: config.login_failures_per_client,
                window: config.login_failure_window,
            },
        ));
        let off_executor = OffExecutor::new(pool, Arc::clone(&metrics));
        Self { off_executor, metrics, config: Arc::new(config), locks, logins, sessions: Arc::default() }
    }

    pub fn pool(&self) -> &DbPool {
        self.off_executor.pool()
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
    /// The lab is built in and `DEMO_MODE=1`: pages may link to `/demo`.
    pub demo: bool,
    /// The path asked for, so that the menu can mark the page it is on.
    pub path: String,
    /// The path and query asked for: where the language switch returns to.
    pub here: String,
    /// The reader's language (`crate::i18n`).
    pub lang: Lang,
}

impl PageContext {
    pub fn is_staff(&self) -> bool {
        self.user.as_ref().is_some_and(|u| u.role.includes(crate::auth::Role::Staff))
    }

    pub fn is_admin(&self) -> bool {
        self.user.as_ref().is_some_and(|u| u.role.includes(crate::auth::Role::Admin))
    }

    /// Whether pages may link to the lab's `/demo` (built in, see [`crate::LAB`], and served:
    /// `DEMO_MODE=1`).
    pub fn lab(&self) -> bool {
        self.demo
    }

    /// A fresh `Idempotency-Key` for a form that books or orders (`crate::idempotency`): one per
    /// rendered form, so a double submit or a resend of that form takes effect once.
    pub fn idempotency_key(&self) -> String {
        crate::idempotency::IdempotencyKey::fresh()
    }

    /// A page context for a request that has a session but no logged-in user yet.
    pub fn anonymous(req: &HttpRequest, csrf_token: String) -> Self {
        Self {
            user: None,
            csrf_token,
            demo: demo_served(req),
            path: req.path().to_string(),
            here: req.uri().path_and_query().map_or("/", |pq| pq.as_str()).to_string(),
            lang: Lang::of(req, &req.get_session()),
        }
    }

    /// The context of the page at `path`, shown in answer to a form posted elsewhere (a refused
    /// order shows the catalog): the menu marks that page, and the language switch returns to it.
    pub fn shown_as(self, path: String) -> Self {
        Self { here: path.clone(), path: path.split('?').next().unwrap_or("/").to_string(), ..self }
    }

    /// The languages the header's switch offers: all but the page's own.
    pub fn other_languages(&self) -> Vec<Lang> {
        Lang::ALL.into_iter().filter(|l| *l != self.lang).collect()
    }

    /// The logged-in user's role, in the page's language.
    pub fn role_name(&self) -> std::borrow::Cow<'static, str> {
        self.role_label(self.user.as_ref().map_or(crate::auth::Role::Customer, |u| u.role))
    }

    /// A role, in the page's language (the login page's demo accounts, the header's user).
    pub fn role_label(&self, role: crate::auth::Role) -> std::borrow::Cow<'static, str> {
        use crate::auth::Role;
        match role {
            Role::Admin => self.lang.t("role.admin"),
            Role::Staff => self.lang.t("role.staff"),
            Role::Customer => self.lang.t("role.customer"),
        }
    }

    /// ` aria-current="page"` for the menu's link to `href` when it is the page shown, so that a
    /// screen reader says "current page" and the style can mark it. Markup, for `|safe`: only
    /// the fixed attribute or nothing, never request text.
    pub fn current(&self, href: &str) -> &'static str {
        if self.path == href { r#" aria-current="page""# } else { "" }
    }
}

impl FromRequest for PageContext {
    type Error = AuthError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, AuthError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let user = SessionUser::from_request(&req, payload);
        Box::pin(async move {
            let user = match user.await {
                Ok(user) => Some(user),
                Err(AuthError::NotLoggedIn) => None,
                // The session could not be checked (the database is down): say so, rather
                // than show the page as if the user had been logged out.
                Err(other) => return Err(other),
            };
            let csrf_token = csrf::token(&req.get_session())?;
            Ok(Self { user, ..Self::anonymous(&req, csrf_token) })
        })
    }
}

/// The logged-in user, as the database has them now ([`SessionChecks`]). Extracting it from a
/// request whose session is gone answers 401 (or, for a browser page, redirects to the login
/// page), and drops the stale cookie.
impl FromRequest for SessionUser {
    type Error = AuthError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, AuthError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            // Looked up once per request, however many extractors ask.
            if let Some(found) = req.extensions().get::<SessionUser>() {
                return Ok(found.clone());
            }
            let session = req.get_session();
            let ticket = crate::auth::session::ticket_of(&session).ok_or(AuthError::NotLoggedIn)?;
            let state = req.app_data::<actix_web::web::Data<AppState>>().ok_or(AuthError::NotLoggedIn)?;
            match state.sessions.check(&state.off_executor, ticket).await? {
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

/// Whether this app serves the race demo: the lab is built in and `DEMO_MODE=1`.
fn demo_served(req: &HttpRequest) -> bool {
    crate::LAB && req.app_data::<actix_web::web::Data<AppState>>().is_some_and(|s| s.config.demo_mode)
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

/// The pages a login may send the browser back to (the first segment of the path; "" is `/`).
const RETURN_PAGES: &[&str] = &["", "resources", "bookings", "products", "orders", "stock", "admin", "demo"];

/// Where to go after login: `next` if it is one of this app's pages, else `/`.
///
/// Browsers drop tabs and newlines inside a URL and read `\` as `/`, so `/\t/evil.example`
/// arrives as `//evil.example`, another site. Rather than spot each trick, only a plain path
/// passes: a page of [`RETURN_PAGES`], segments of letters, digits and `-_.~` (no empty or `..`
/// segment), and an optional query of the same characters plus `=` and `&`. `next` has already
/// been percent-decoded once, so an encoded trick (`%2F%2F`, `%5C`, `%0D%0A`) shows up as the
/// character itself, and a doubly encoded one as a `%`: both are refused.
pub fn local_path(next: Option<&str>) -> &str {
    next.filter(|target| is_return_page(target)).unwrap_or("/")
}

/// The login page's address, sending the browser on to `next` once logged in (`/login` alone
/// when that is the home page).
pub fn login_address(next: &str) -> String {
    if next == "/" { "/login".to_string() } else { format!("/login?next={}", error::urlencode(next)) }
}

/// Where the header's language switch goes back to: the page it was on when a login may return
/// there ([`local_path`]), or the login page itself with the `next` it carried, checked the same
/// way; else `/`.
pub fn switch_back(page: Option<&str>) -> String {
    let page = page.unwrap_or("/");
    let login_query = page.strip_prefix("/login").filter(|rest| rest.is_empty() || rest.starts_with('?'));
    let Some(query) = login_query else { return local_path(Some(page)).to_string() };
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.trim_start_matches('?')).unwrap_or_default();
    let next = pairs.into_iter().find(|(name, _)| name == "next").map(|(_, value)| value);
    login_address(local_path(next.as_deref()))
}

pub(crate) fn is_return_page(target: &str) -> bool {
    let plain = |c: char, extra: &str| c.is_ascii_alphanumeric() || "-_.~".contains(c) || extra.contains(c);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(rest) = path.strip_prefix('/') else { return false };
    let segments: Vec<&str> = if rest.is_empty() { vec![""] } else { rest.split('/').collect() };
    target.len() <= 512
        && RETURN_PAGES.contains(&segments[0])
        && (rest.is_empty()
            || segments.iter().all(|s| !s.is_empty() && *s != ".." && s.chars().all(|c| plain(c, ""))))
        && query.chars().all(|c| plain(c, "=&"))
}

#[cfg(test)]
mod tests {
    use super::{local_path, switch_back};

    #[test]
    fn only_the_apps_own_pages_are_returned_to_after_login() {
        for fine in [
            "/",
            "/resources/3",
            "/resources/3?from=2026-12-01",
            "/bookings",
            "/admin/locks",
            "/products/7/edit",
        ] {
            assert_eq!(local_path(Some(fine)), fine);
        }
        for trick in [
            "//evil.example/",
            "/\\evil.example",
            "/\t/evil.example",
            "/%09/evil.example",
            "/%2F%2Fevil.example",
            "/%5Cevil.example",
            "/resources\r\nLocation: https://evil.example",
            "/resources/%0d%0a",
            "https://evil.example/",
            "evil.example",
            "/resources//evil.example",
            "/resources/../../evil",
            "/api/v1/session",
            "/logout",
            "/resources?next=//evil.example",
            "",
        ] {
            assert_eq!(local_path(Some(trick)), "/", "{trick:?}");
        }
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn the_language_switch_goes_back_to_the_login_page_with_its_next_checked() {
        assert_eq!(switch_back(Some("/products")), "/products");
        assert_eq!(switch_back(Some("/login")), "/login");
        assert_eq!(switch_back(Some("/login?next=%2Fbookings")), "/login?next=%2Fbookings");
        assert_eq!(switch_back(Some("/login?next=/resources/3")), "/login?next=%2Fresources%2F3");
        assert_eq!(switch_back(Some("/login?next=%2F%2Fevil.example")), "/login");
        assert_eq!(switch_back(Some("/login?next=https://evil.example")), "/login");
        assert_eq!(switch_back(Some("/loginx")), "/");
        assert_eq!(switch_back(Some("//evil.example")), "/");
        assert_eq!(switch_back(None), "/");
    }
}
