//! The r2d2 pool, and what it has seen of the server's health.
//!
//! diesel is synchronous: nothing here may run on the async executor. Handlers reach the pool
//! through a blocking thread, including `pool.get()`, whose wait is bounded by
//! `POOL_TIMEOUT_SECS`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::event::AcquireEvent;
use diesel::r2d2::{CustomizeConnection, HandleError, HandleEvent, Pool, PooledConnection};

use super::conn::{self, DbConn, Engine};
use super::dialect::Dialect;
use super::errors::lost_connection;
use super::lock_names::Namespace;
use super::transaction;
use crate::config::Config;

pub type PooledConn = PooledConnection<conn::Manager>;

/// The r2d2 pool, and what it has seen of the server's health.
///
/// While the server is unreachable, r2d2 would keep every request waiting the full
/// `POOL_TIMEOUT_SECS` for a connection that cannot be made, and requests pile up behind each
/// other. So the pool remembers a failed connect (r2d2 reports it to its error handler), and
/// until a connection works again (a new one opens, an idle one answers its ping, or any
/// connection's statement is answered) a checkout does not wait at all: it takes an idle
/// connection that works, or answers at once — a quick 503 with `Retry-After` — and the pool's
/// own reconnect attempts (at most a second apart) bring it back. A checkout that was already
/// waiting when the server went looks at the pool's health every [`OUTAGE_NOTICE`].
///
/// Not waiting at all is what bounds a whole request, not just one checkout: a request may
/// check out several times (a session check, a retry after a lost connection, a coalesced batch
/// and then the order alone, a second connection under a batch's guard), and the coalescing
/// drainers take their batches one after another, so waits per checkout add up. Measured
/// (`tests/it/outage.rs`) with a 500 ms wait per checkout during an outage: orders, holds, edit
/// locks and pages took about 2 s to answer their 503. Now only a checkout already waiting when
/// the server goes pays one more [`OUTAGE_NOTICE`] at most, and every later one, in that request
/// or another, answers at once: at most about a quarter of a second, on every path.
///
/// A checkout is not tested with a query: that would be one more round trip on every request.
/// Each connection's own statements tell the pool how it is ([`Liveness`]): one that lost its
/// server is discarded at its next checkout, and only one that may be stale is pinged first —
/// idle for [`IDLE_CHECK`], or silent since another connection was lost (a server restart
/// kills them all at once). So after a restart the first lost statement costs one request its
/// answer (503 `unavailable`, or one retry where that is safe), and the checkouts after it
/// weed out the other dead connections before anyone uses them.
#[derive(Clone)]
pub struct DbPool {
    pool: Pool<conn::Manager>,
    engine: Engine,
    health: Arc<Health>,
    names: Namespace,
    timeout: Duration,
    /// For the one statement read outside diesel (InnoDB's deadlock report). Never shown or logged.
    url: Arc<str>,
    _openings: Arc<SettleOpenings>,
}

/// How long the last handle of a pool waits, as it is dropped, for connections still opening.
const SETTLE_WAIT: Duration = Duration::from_secs(2);

/// Dropped with the last handle of its pool: waits (at most [`SETTLE_WAIT`]) until no
/// connection is being opened in the background any more. r2d2 opens replacements from threads
/// of its own (to keep `min_idle` ready after a connection was discarded), and a process that
/// exits while one of them is in libpq's TLS handshake crashes: OpenSSL's exit-time cleanup
/// frees what the handshake is still using. `haita batch` on PostgreSQL died of SIGSEGV that
/// way, about once in fifty runs, instead of exiting 75.
struct SettleOpenings(Arc<AtomicUsize>);

impl Drop for SettleOpenings {
    fn drop(&mut self) {
        let deadline = Instant::now() + SETTLE_WAIT;
        while self.0.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// How often a checkout waiting for a connection looks at the pool's health: it gives up within
/// this long of the pool finding the server unreachable (r2d2 cannot wake it when that happens).
/// Short, because that is the whole of what an outage adds to a request; each look is one
/// lock of r2d2's mutex, nothing sent to the server.
pub const OUTAGE_NOTICE: Duration = Duration::from_millis(100);

/// A connection idle longer than this is pinged before it is handed out: a server restart, its
/// `wait_timeout` or a firewall may have closed it meanwhile. A busy connection never is.
pub const IDLE_CHECK: Duration = Duration::from_secs(30);

impl DbPool {
    /// A connection, within `POOL_TIMEOUT_SECS` — or at once (an idle one, or none) while the
    /// server is known to be unreachable.
    ///
    /// The wait is taken in slices of at most [`OUTAGE_NOTICE`], so that a checkout that began
    /// just before the server went away stops waiting as soon as the pool has noticed, instead
    /// of sitting out the whole pool timeout.
    pub fn get(&self) -> Result<PooledConn, CheckoutError> {
        let began = Instant::now();
        let end = began + self.timeout;
        let checked_out = loop {
            let down = self.health.is_down();
            let left = end.saturating_duration_since(Instant::now());
            // While down: an idle connection if there is one (r2d2 may have just reconnected,
            // or a request given one back), never a wait.
            let slice = if down { Duration::ZERO } else { left.min(OUTAGE_NOTICE) };
            match self.pool.get_timeout(slice) {
                Ok(mut conn) => match self.fit(&mut conn) {
                    Ok(()) => break Ok(conn),
                    // Dropped broken: r2d2 closes it and opens another in its place.
                    Err(()) => continue,
                },
                Err(e) if down => break Err(CheckoutError::Down(e)),
                // Noticed during this slice: one more turn, without waiting.
                Err(_) if self.health.is_down() => continue,
                Err(e) if left <= OUTAGE_NOTICE => break Err(CheckoutError::Busy(e)),
                Err(_) => continue,
            }
        };
        crate::metrics::record(|m| {
            m.pool_checkout_seconds.observe(began.elapsed().as_secs_f64());
            match &checked_out {
                Ok(_) => {}
                Err(CheckoutError::Busy(_)) => m.pool_checkout_failures.with_label_values(&["busy"]).inc(),
                Err(CheckoutError::Down(_)) => m.pool_checkout_failures.with_label_values(&["down"]).inc(),
            }
        });
        checked_out
    }

    /// Whether a connection just checked out can be used: not lost, and answering if it sat
    /// idle. An unfit one is marked broken.
    fn fit(&self, conn: &mut PooledConn) -> Result<(), ()> {
        let (lost, last_answer) = match conn.instrumentation().downcast_ref::<Liveness>() {
            Some(liveness) => (liveness.lost, Some(liveness.last_answer)),
            // Every connection gets one when it is opened; without it, check every time.
            None => (false, None),
        };
        if lost {
            transaction::mark_broken(conn);
            return Err(());
        }
        renew_statements_after_an_error(conn);
        let stale =
            last_answer.is_none_or(|at| at.elapsed() > IDLE_CHECK || self.health.silent_since_a_loss(at));
        if stale {
            use diesel::r2d2::R2D2Connection;
            if conn.ping().is_err() {
                // Not "the server is down": a server closes idle connections by itself
                // (`wait_timeout`). Opening its replacement tells whether it is reachable.
                transaction::mark_broken(conn);
                return Err(());
            }
            self.health.mark_up();
        }
        Ok(())
    }

    /// The database URL the pool connects with (credentials included: never show it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The engine the pool's server runs, for what is told to a person; code that must do
    /// something differently per engine asks [`dialect`](Self::dialect).
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The answers to every question whose answer differs between the engines.
    pub fn dialect(&self) -> &'static dyn Dialect {
        self.engine.dialect()
    }

    /// The lock names of this database's deployment (named locks are server-wide).
    pub fn names(&self) -> &Namespace {
        &self.names
    }

    pub fn state(&self) -> diesel::r2d2::State {
        self.pool.state()
    }

    pub fn max_size(&self) -> u32 {
        self.pool.max_size()
    }
}

/// What a connection's own statements say about it, kept on the connection (diesel hands every
/// statement's outcome to the connection's instrumentation): when the server last answered,
/// and whether the connection to it was lost — which the pool's health hears of too.
struct Liveness {
    last_answer: Instant,
    lost: bool,
    health: Arc<Health>,
    /// Statements run on the connection since the pool opened it ([`statements_run`]).
    statements: u64,
    /// A statement failed, other than on a broken constraint, since the connection's prepared
    /// statements were last renewed ([`renew_statements_after_an_error`]).
    failed: bool,
}

/// Closes every prepared statement `conn` keeps if one of its statements failed since the last
/// time, on an engine where such a statement must not run again
/// (`Dialect::statement_unsafe_after_an_error`): the next run of each prepares it anew. Called
/// where a failed statement may be followed by another on the same connection: after a
/// transaction's ROLLBACK (a retry runs the same statements again) and when the pool hands the
/// connection out.
pub fn renew_statements_after_an_error(conn: &mut DbConn) {
    let Some(liveness) = conn.instrumentation().downcast_mut::<Liveness>() else { return };
    if !std::mem::take(&mut liveness.failed) || !conn.dialect().statement_unsafe_after_an_error() {
        return;
    }
    use diesel::connection::{CacheSize, Connection};
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    conn.set_prepared_statement_cache_size(CacheSize::Unbounded);
}

/// Whether a failed statement may have ended mid-result, after rows were sent (a locking read
/// that lost a deadlock or timed out waiting, a statement killed): every error but a broken
/// constraint, which the server reports before any row. A duplicate key is how an idempotency
/// key's resend is recognised, so renewing after it would re-prepare statements on a common path.
fn may_leave_a_result_unread(error: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    !matches!(
        error,
        Error::DatabaseError(
            Kind::UniqueViolation | Kind::ForeignKeyViolation | Kind::NotNullViolation | Kind::CheckViolation,
            _
        )
    )
}

/// How many statements `conn` has run since the pool opened it (`BEGIN` and `COMMIT`
/// included), as diesel reports them; `None` for a connection not opened by a pool. MySQL counts
/// a session's statements itself (`SHOW SESSION STATUS`); PostgreSQL does not without an
/// extension, so this is how a test counts the cost of a request there.
pub fn statements_run(conn: &mut DbConn) -> Option<u64> {
    conn.instrumentation().downcast_ref::<Liveness>().map(|liveness| liveness.statements)
}

impl diesel::connection::Instrumentation for Liveness {
    fn on_connection_event(&mut self, event: diesel::connection::InstrumentationEvent<'_>) {
        if let diesel::connection::InstrumentationEvent::FinishQuery { error, .. } = event {
            self.statements += 1;
            self.failed |= error.is_some_and(may_leave_a_result_unread);
            match error {
                Some(e) if lost_connection(e) => {
                    self.lost = true;
                    self.health.connection_lost();
                }
                // An error the server sent is an answer too; and an answer ends what the pool
                // took for an outage (a connect refused for another reason: too many clients).
                _ => {
                    self.last_answer = Instant::now();
                    self.health.answered();
                }
            }
        }
    }
}

/// Why [`DbPool::get`] gave no connection: the two call for different answers (503 `busy`, try
/// again in a moment; 503 `unavailable`, the database is down).
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// Every connection stayed in use for the whole `POOL_TIMEOUT_SECS`.
    #[error("no database connection was free in time: {0}")]
    Busy(diesel::r2d2::PoolError),
    /// The server is unreachable: the pool's last attempt to open a connection failed.
    #[error("the database server is unreachable: {0}")]
    Down(diesel::r2d2::PoolError),
}

#[derive(Debug)]
struct Health {
    down: AtomicBool,
    /// When a connection was last found lost, in microseconds since `origin` (0: never).
    last_loss: AtomicU64,
    origin: Instant,
}

impl Health {
    fn new() -> Self {
        Self { down: AtomicBool::new(false), last_loss: AtomicU64::new(0), origin: Instant::now() }
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    fn micros_since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX).max(1)
    }

    fn connection_lost(&self) {
        self.last_loss.fetch_max(self.micros_since_origin(Instant::now()), Ordering::Relaxed);
    }

    /// Whether a connection whose server last answered `at` has been silent since another
    /// connection was found lost: it may have died in the same restart.
    fn silent_since_a_loss(&self, at: Instant) -> bool {
        self.micros_since_origin(at) < self.last_loss.load(Ordering::Relaxed)
    }

    fn mark_down(&self, why: &dyn std::fmt::Display) {
        if !self.down.swap(true, Ordering::Relaxed) {
            log::warn!("database unreachable ({why}); answering 503 until a connection works again");
        }
    }

    /// A connection's statement was answered: the server is reachable. Only a load while it
    /// was not thought down, which is every statement but those of an outage's end.
    fn answered(&self) {
        if self.is_down() {
            self.mark_up();
        }
    }

    fn mark_up(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            log::info!("database reachable again");
        }
    }
}

/// r2d2 calls this when opening a connection fails.
#[derive(Debug)]
struct MarkDown(Arc<Health>);

impl HandleError<diesel::r2d2::Error> for MarkDown {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        self.0.mark_down(&error);
    }
}

/// A connection opened: the server answers again.
#[derive(Debug)]
struct MarkUp(Arc<Health>);

impl HandleEvent for MarkUp {
    fn handle_acquire(&self, _: AcquireEvent) {
        self.0.mark_up();
    }
}

/// Session settings applied to every pooled connection when it is opened. r2d2 has no hook for
/// a connection going *back* to the pool, which is why named locks must be released by a guard
/// inside one checkout (see `locking::named`).
#[derive(Debug)]
struct SessionSettings {
    row_lock_wait_secs: u32,
    health: Arc<Health>,
    /// The manager's count of connections opening: this is the last step of opening one.
    opening: Arc<AtomicUsize>,
}

/// Marks a connection opened when dropped, however the session preparation ends.
struct Opened<'a>(&'a AtomicUsize);

impl Drop for Opened<'_> {
    fn drop(&mut self) {
        conn::Manager::opened(self.0);
    }
}

impl CustomizeConnection<DbConn, diesel::r2d2::Error> for SessionSettings {
    fn on_acquire(&self, conn: &mut DbConn) -> Result<(), diesel::r2d2::Error> {
        let _opened = Opened(&self.opening);
        let settings = conn.dialect().session_settings(self.row_lock_wait_secs);
        conn.batch_execute(&settings).map_err(diesel::r2d2::Error::QueryError)?;
        conn.set_instrumentation(Liveness {
            last_answer: Instant::now(),
            lost: false,
            health: Arc::clone(&self.health),
            statements: 0,
            failed: false,
        });
        Ok(())
    }
}

pub fn build_pool(config: &Config) -> anyhow::Result<DbPool> {
    let engine = Engine::of_url(&config.database_url).map_err(anyhow::Error::msg)?;
    let health = Arc::new(Health::new());
    let manager = conn::Manager::new(&config.database_url);
    let opening = manager.opening();
    let pool = Pool::builder()
        .max_size(config.pool_size)
        .min_idle(Some(2.min(config.pool_size)))
        // `DbPool::get` checks what needs checking; a test query per checkout would double
        // the round trips of a simple request.
        .test_on_check_out(false)
        // r2d2 retries a failed connect with a backoff capped at half of this; `DbPool::get`
        // bounds checkouts itself. Two seconds keeps the retries at most a second apart, so
        // the pool is back within about a second of the server.
        .connection_timeout(config.pool_timeout.clamp(Duration::from_millis(100), Duration::from_secs(2)))
        .connection_customizer(Box::new(SessionSettings {
            row_lock_wait_secs: config.row_lock_wait_secs,
            health: Arc::clone(&health),
            opening: Arc::clone(&opening),
        }))
        .error_handler(Box::new(MarkDown(Arc::clone(&health))))
        .event_handler(Box::new(MarkUp(Arc::clone(&health))))
        .build(manager)?;
    Ok(DbPool {
        engine,
        health,
        names: Namespace::for_url(&config.database_url),
        timeout: config.pool_timeout,
        url: config.database_url.as_str().into(),
        _openings: Arc::new(SettleOpenings(opening)),
        pool,
    })
}
