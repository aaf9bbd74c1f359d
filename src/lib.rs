//! haita (排他, "exclusive control"): a reservation and inventory app that shows, end to end on
//! MySQL/MariaDB, how to stop double bookings, overselling and lost updates.
//!
//! Start reading at `bookings/` (named locks) and `locking/` (the primitives). The app is built
//! here, in the library, so the tests start exactly the server the binary runs. The demo, the
//! benchmarks and the demo data are the lab (`lab/`), compiled only with the `lab` feature.

pub mod account;
pub mod admin;
pub mod app;
pub mod audit;
pub mod auth;
pub mod batch;
pub mod bookings;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod db;
pub mod deadlocks;
pub mod edit_locks;
pub mod holds;
pub mod i18n;
pub mod idempotency;
pub mod infra;
pub mod inventory;
#[cfg(feature = "lab")]
pub mod lab;
pub mod locking;
pub mod metrics;
pub mod openapi;
pub mod orders;
pub mod resources;
pub mod schema;
pub mod shutdown;
pub mod wire;

use std::net::TcpListener;

use actix_session::SessionMiddleware;
use actix_session::config::{CookieContentSecurity, PersistentSession};
use actix_session::storage::CookieSessionStore;
use actix_web::cookie::{Key, SameSite, time};
use actix_web::middleware::{DefaultHeaders, ErrorHandlers, Logger};
use actix_web::{App, HttpResponse, HttpServer, dev::Server, web};
use askama::Template;

use crate::app::{AppState, PageContext, error};
use crate::config::Config;
use crate::db::DbPool;

// The pages' texts in English and Japanese (`i18n`), compiled in.
rust_i18n::i18n!("src/i18n", fallback = "en");

/// Whether this build has the lab (demo, benchmarks, demo data): pages link to `/demo` only then.
pub const LAB: bool = cfg!(feature = "lab");

/// Creates the database if needed, connects, checks the server can be trusted with named
/// locks, and applies pending migrations.
pub fn prepare_database(config: &Config) -> anyhow::Result<DbPool> {
    db::ensure_database_exists(&config.database_url)?;
    let pool = db::build_pool(config)
        .map_err(|e| anyhow::anyhow!("cannot open a pool on {}: {e}", db::redact(&config.database_url)))?;
    db::check_server(&mut *pool.get()?)?;
    for applied in run_migrations(&pool)? {
        log::info!("applied migration {applied}");
    }
    Ok(pool)
}

/// Applies the product's pending migrations ([`migrate`]).
pub fn run_migrations(pool: &DbPool) -> anyhow::Result<Vec<String>> {
    migrate(pool, db::MIGRATIONS)
}

/// Applies the pending migrations of `set` under the migration lock, so several instances
/// starting together do not race each other through the same DDL (MySQL DDL is not
/// transactional), and names them.
pub fn migrate(pool: &DbPool, set: db::Migrations) -> anyhow::Result<Vec<String>> {
    let mut lock = locking::NamedLockGuard::acquire(
        pool.get()?,
        pool.names().migrations(),
        std::time::Duration::from_secs(120),
    )?;
    set.apply(lock.conn())
}

/// A bound, not yet running, HTTP server.
pub struct Application {
    port: u16,
    server: Server,
    /// The instance's door to its database, for the housekeeping beside the requests.
    off_executor: db::OffExecutor,
    shutdown: web::Data<shutdown::Shutdown>,
    /// Writes this instance's row of `app_instances` (`admin::instances`).
    heartbeat: admin::instances::Heartbeat,
    /// `HOLD_HISTORY_DAYS`: how long ended checkout holds are kept.
    hold_history: std::time::Duration,
}

impl Application {
    pub fn build(config: Config, pool: DbPool) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(&config.bind)
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.bind))?;
        let port = listener.local_addr()?.port();
        let key = session_key(&config)?;
        let (workers, blocking_threads) = (config.workers, config.blocking_threads);
        let hold_history = config.hold_limits().history;
        metrics::set_enabled(config.metrics);
        let instance =
            std::sync::Arc::new(admin::instances::Instance::new(config.instance_name.as_deref(), port));
        let state = web::Data::new(AppState::new(pool.clone(), config));
        let off_executor = state.off_executor.clone();
        let heartbeat =
            admin::instances::Heartbeat::new(instance.clone(), state.metrics.clone(), pool.clone());
        // Which instance `/admin/metrics` shows, among the others.
        let instance = web::Data::from(instance);
        // This instance's queues of bookings per day, served in batches.
        // Their waiters are turned away at the same cutoff as the lock queue's (`shutdown`).
        let cutoff = state.locks.cutoff().clone();
        let coalescer = web::Data::new(bookings::coalesce::coalescer(
            state.off_executor.clone(),
            state.locks.clone(),
            state.config.max_future_bookings,
            cutoff.clone(),
        ));
        // And of single-line orders per product.
        let order_coalescer = web::Data::new(orders::coalesce::coalescer(
            state.off_executor.clone(),
            state.config.max_orders_per_minute,
            cutoff,
        ));
        // Readiness, the requests in flight, and the drain on a stop signal.
        let shutdown = web::Data::new(shutdown::Shutdown::new(&state));
        // One per instance, shared by its workers: this instance's watchers of the cluster's
        // demo race (one reader of the database for all of them).
        #[cfg(feature = "lab")]
        let race_board = web::Data::new(lab::demo::RaceBoard::default());
        // The Redis server and lock directory of the demo's outside locks (contacted on use).
        #[cfg(feature = "lab")]
        let outside = web::Data::new(lab::locks::OutsideLocks::from_settings(&lab::Settings::from_env()?)?);
        let (cookie_secure, demo_mode) = (state.config.cookie_secure, state.config.demo_mode);
        let body_timeout =
            web::Data::new(crate::wire::slow_body::BodyTimeout(state.config.request_body_timeout));
        let max_connections = state.config.max_connections;
        let shutdown_timeout = state.config.shutdown_timeout.as_secs();
        let app_shutdown = shutdown.clone();
        let server = HttpServer::new(move || {
            // Runs on each worker thread as it starts: that thread records into this instance's
            // registry from now on.
            metrics::use_on_this_thread(state.metrics.clone());
            let app = App::new()
                .app_data(state.clone())
                .app_data(instance.clone())
                .app_data(coalescer.clone())
                .app_data(order_coalescer.clone())
                .app_data(app_shutdown.clone());
            #[cfg(feature = "lab")]
            let app = app.app_data(race_board.clone()).app_data(outside.clone());
            app.app_data(error::json_config(error::BODY_LIMIT))
                .app_data(error::path_config())
                .app_data(error::query_config())
                .app_data(web::PayloadConfig::new(error::BODY_LIMIT))
                .app_data(body_timeout.clone())
                .configure(|cfg| routes(cfg, demo_mode))
                .default_service(web::to(error::not_found))
                .wrap(actix_web::middleware::from_fn(crate::wire::slow_body::deadline))
                .wrap(actix_web::middleware::from_fn(crate::auth::csrf::json_only_api_writes))
                .wrap(actix_web::middleware::from_fn(crate::openapi::methods_allowed))
                .wrap(ErrorHandlers::new().default_handler(error::render_html_errors))
                .wrap(session_cookies(key.clone(), cookie_secure))
                .wrap(security_headers(cookie_secure))
                .wrap(Logger::new("%r %s %Dms"))
                .wrap(actix_web::middleware::from_fn(shutdown::track))
        });
        // actix gives each worker a blocking pool of its own: the instance's threads are shared
        // out among the workers.
        let worker_count =
            workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
        let server = server.worker_max_blocking_threads(blocking_threads.div_ceil(worker_count).max(1));
        // actix counts connections per worker: the instance's cap shared out among them.
        let server = server.max_connections(max_connections.div_ceil(worker_count).max(1));
        let server = match workers {
            Some(n) => server.workers(n),
            None => server,
        };
        // Stop signals are `haita serve`'s to handle (`shutdown::on_signals`), not every server's:
        // the tests start several in one process.
        let server = server.disable_signals().shutdown_timeout(shutdown_timeout).keep_alive(KEEP_ALIVE);
        let server = server.listen(listener)?.run();
        Ok(Self { port, server, off_executor, shutdown, heartbeat, hold_history })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A handle that stops the server (tests use it to stop an instance mid-run).
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped, with the housekeeping that keeps tables from growing: expired
    /// idempotency keys and long-ended checkout holds are deleted every few minutes (any instance
    /// may do it; deleting twice is harmless); and this instance's row of `app_instances` is
    /// written every few seconds, and marked stopped on the way out.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let housekeeping = actix_web::rt::spawn(housekeeping(
            self.off_executor.clone(),
            self.heartbeat.clone(),
            self.hold_history,
        ));
        let served = self.server.await;
        housekeeping.abort();
        leave(&self.off_executor, self.heartbeat).await;
        served
    }

    /// [`run_until_stopped`](Self::run_until_stopped), drained and stopped by SIGTERM or SIGINT
    /// (`shutdown`): what `haita serve` runs.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let shutdown = self.shutdown.clone();
        let signals =
            actix_web::rt::spawn(shutdown::on_signals(shutdown.clone().into_inner(), self.handle()));
        let served = self.run_until_stopped().await;
        signals.abort();
        shutdown.log_stopped();
        served
    }
}

/// How long an idle connection is kept open for the client's next request. Longer than a
/// balancer keeps a connection to an instance idle (HAProxy: `pool-purge-delay 1s` halves its
/// idle connections every second, `docker/haproxy.cfg`), so that the balancer, which is the one
/// to send on it, is always the one to close it. With actix's default of 5 s both could: a POST
/// sent on a connection the instance was closing at that moment got no answer, and HAProxy may
/// not send a POST without an `Idempotency-Key` twice (a customer of the cluster test saw
/// "connection closed before message completed" about once in four runs).
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// One of [`housekeeping`]'s deletions: how many rows it deleted.
type Purge = Box<dyn FnOnce(&DbPool) -> anyhow::Result<usize> + Send>;

/// How often [`housekeeping`] runs.
const HOUSEKEEPING_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Every [`admin::instances::BEAT_EVERY`], this instance's row (its failures said once, until a
/// beat works again); every [`HOUSEKEEPING_EVERY`], the expired idempotency keys and the checkout
/// holds that ended more than `hold_history` ago. On a blocking thread each, on a pooled
/// connection given back at once; never fatal.
async fn housekeeping(
    db: db::OffExecutor,
    heartbeat: admin::instances::Heartbeat,
    hold_history: std::time::Duration,
) {
    let mut every = actix_web::rt::time::interval(admin::instances::BEAT_EVERY);
    let (mut beating, mut purged) = (true, None::<std::time::Instant>);
    loop {
        every.tick().await;
        let beat = heartbeat.clone();
        match db.run(move || beat.beat()).await {
            Ok(()) => beating = true,
            Err(e) if beating => {
                beating = false;
                log::warn!(
                    "writing this instance's row of app_instances failed (tried again every few seconds): {e}"
                );
            }
            Err(_) => {}
        }
        if purged.is_some_and(|at| at.elapsed() < HOUSEKEEPING_EVERY) {
            continue;
        }
        purged = Some(std::time::Instant::now());
        let purges: [(&str, Purge); 2] = [
            ("expired idempotency keys", Box::new(|pool| Ok(idempotency::purge_expired(&mut *pool.get()?)?))),
            (
                "checkout holds that ended more than HOLD_HISTORY_DAYS ago",
                Box::new(move |pool| Ok(holds::service::forget_old(pool, hold_history)?)),
            ),
        ];
        for (what, purge) in purges {
            match db.with_pool(purge).await {
                Ok(0) => {}
                Ok(purged) => log::info!("deleted {purged} {what}"),
                // The database may be down for a while; the next round tries again.
                Err(e) => log::warn!("deleting {what} failed: {e}"),
            }
        }
    }
}

/// Marks this instance stopped, so that the others list it so at once rather than after a
/// minute without a beat. Best effort: a failure is only logged.
async fn leave(db: &db::OffExecutor, heartbeat: admin::instances::Heartbeat) {
    match db.run(move || heartbeat.leave()).await {
        Ok(()) => {}
        Err(e) => log::warn!("marking this instance stopped in app_instances failed: {e}"),
    }
}

/// The key that signs and encrypts session cookies: `SESSION_KEY`, or, only in `DEMO_MODE`, a
/// random one. The CLI asks before it touches the database, so a misconfigured deployment stops
/// at once.
/// The session cookie: sealed (encrypted and authenticated) with `key`, so only this app can
/// write the ticket it carries (`auth::session`); 12 hours, `SameSite=Lax`.
pub fn session_cookies(key: Key, secure: bool) -> SessionMiddleware<CookieSessionStore> {
    SessionMiddleware::builder(CookieSessionStore::default(), key)
        .cookie_name("haita_session".into())
        .cookie_secure(secure)
        .cookie_same_site(SameSite::Lax)
        .cookie_content_security(CookieContentSecurity::Private)
        .session_lifecycle(PersistentSession::default().session_ttl(time::Duration::hours(12)))
        .build()
}

pub fn session_key(config: &Config) -> anyhow::Result<Key> {
    Ok(match &config.session_key {
        Some(bytes) => Key::try_from(bytes.as_bytes()).map_err(|e| anyhow::anyhow!("SESSION_KEY: {e}"))?,
        None if !config.demo_mode => anyhow::bail!(
            "SESSION_KEY is required unless DEMO_MODE=1: without it every restart would log \
             everybody out and instances could not share sessions. Generate one with \
             `openssl rand -base64 64`"
        ),
        None => {
            log::warn!(
                "SESSION_KEY is not set: using a random key. Sessions end when the app restarts \
                 and are not shared between instances."
            );
            Key::generate()
        }
    })
}

/// Every route; the race demo only where the lab is built in and `DEMO_MODE=1`.
fn routes(cfg: &mut web::ServiceConfig, demo_mode: bool) {
    cfg.route("/", web::get().to(home))
        .configure(shutdown::routes)
        .route("/metrics", web::get().to(metrics_text))
        .route("/api/v1/openapi.json", web::get().to(openapi_json))
        .route("/static/style.css", web::get().to(stylesheet))
        .route("/static/local_time.js", web::get().to(local_time_script))
        // Browsers ask for it on every site: answered, so it is neither a 404 page nor a session
        // lookup for one.
        .route("/favicon.ico", web::get().to(|| async { HttpResponse::NoContent().finish() }))
        .configure(account::routes::configure)
        .configure(account::language::configure)
        .configure(bookings::routes::configure)
        .configure(resources::routes::configure)
        .configure(admin::routes::configure)
        .configure(catalog::routes::configure)
        .configure(orders::routes::configure)
        .configure(holds::routes::configure)
        .configure(inventory::routes::configure);
    #[cfg(feature = "lab")]
    if demo_mode {
        cfg.configure(lab::demo::routes::configure);
    }
    #[cfg(not(feature = "lab"))]
    let _ = demo_mode;
}

#[derive(Template)]
#[template(path = "home.html")]
struct HomePage {
    ctx: PageContext,
}

async fn home(ctx: PageContext) -> actix_web::Result<HttpResponse> {
    Ok(app::html(&HomePage { ctx })?)
}

/// Prometheus text format. Pool gauges are read at scrape time; nothing here touches the database.
///
/// Not for anyone: pool saturation and lock waits help an attacker time a flood. With
/// `METRICS_TOKEN` only a request carrying it (`Authorization: Bearer …`, compared in constant
/// time) is answered; without one, only a demo serves them.
async fn metrics_text(req: actix_web::HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let refused = match (&state.config.metrics_token, state.config.demo_mode) {
        (Some(token), _) if bearer_is(&req, token) => None,
        (Some(_), _) => Some(MetricsRefused::WrongToken),
        (None, true) => None,
        (None, false) => Some(MetricsRefused::Off),
    };
    match refused {
        None => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(state.metrics.render(state.pool().state())),
        Some(refused @ MetricsRefused::WrongToken) => {
            let mut response = wire::error::respond(&refused);
            response.headers_mut().insert(
                actix_web::http::header::WWW_AUTHENTICATE,
                actix_web::http::header::HeaderValue::from_static("Bearer realm=\"metrics\""),
            );
            response
        }
        Some(refused) => wire::error::respond(&refused),
    }
}

/// Whether the request's `Authorization` is `Bearer {token}`.
fn bearer_is(req: &actix_web::HttpRequest, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    req.headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| given.trim().as_bytes().ct_eq(token.as_bytes()).into())
}

/// Why `/metrics` was not served.
#[derive(Debug, thiserror::Error)]
enum MetricsRefused {
    #[error("METRICS_TOKEN not set outside DEMO_MODE")]
    Off,
    #[error("missing or wrong metrics token")]
    WrongToken,
}

wire::answers::answers! { MetricsRefused {
    Off => NOT_FOUND "not_found",
    WrongToken => UNAUTHORIZED "metrics_token",
} }

impl wire::error::AsProblem for MetricsRefused {
    fn problem(&self) -> wire::error::Problem {
        use wire::answers::Declared;
        let answer = self.answer();
        match self {
            Self::Off => answer.said("metrics.off", &[]),
            Self::WrongToken => answer.said("metrics.token_needed", &[]),
        }
    }
}

async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    let document = openapi::served(state.config.demo_mode);
    HttpResponse::Ok().content_type("application/json").body(document)
}

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../static/style.css"))
}

/// Shows the pages' times in the viewer's time zone (`wire::utc::Shown`).
async fn local_time_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../static/local_time.js"))
}

/// Headers on every answer that has not set them itself. The pages load scripts, styles and images from this origin only
/// (no inline script anywhere), so the policy can be strict: an injected `<script>` or a page
/// framed by another site does nothing. HSTS only when the app is served over HTTPS
/// (`COOKIE_SECURE`), else it would lock a plain-HTTP deployment out of browsers for a year.
///
/// `Cache-Control: no-store` on everything but the static assets (which set their own): a page
/// or an answer may show a logged-in person's data, and even an anonymous page carries the
/// session's CSRF token, so no browser or proxy cache may keep one for the next person at the
/// machine. Deciding per answer whether it depended on the session would be one more thing a
/// new handler could forget.
fn security_headers(https: bool) -> DefaultHeaders {
    let headers = DefaultHeaders::new()
        .add(("Cache-Control", "no-store"))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("X-Frame-Options", "DENY"))
        .add(("Referrer-Policy", "same-origin"))
        .add((
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
             form-action 'self'; frame-ancestors 'none'",
        ));
    if https {
        headers.add(("Strict-Transport-Security", "max-age=31536000; includeSubDomains"))
    } else {
        headers
    }
}
