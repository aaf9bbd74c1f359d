//! The connection pool, embedded migrations and the checks that tell whether this server can be
//! trusted with named locks.
//!
//! diesel is synchronous: nothing here may run on the async executor. Handlers reach the pool
//! through `web::block`, including `pool.get()`, whose wait is bounded by `POOL_TIMEOUT_SECS`.

pub mod cached;
pub mod conn;
pub mod transaction;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::event::AcquireEvent;
use diesel::r2d2::{CustomizeConnection, HandleError, HandleEvent, Pool, PooledConnection};
use diesel::sql_types::Text;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::config::Config;
use crate::locking::{NamedLockGuard, Namespace};

pub use cached::{CachedSql, Sql, cached_sql};
pub use conn::{DbConn, Engine, MultiBackend};
pub use transaction::{transaction, transaction_read_committed};

pub type PooledConn = PooledConnection<conn::Manager>;

/// The r2d2 pool, and what it has seen of the server's health.
///
/// While the server is unreachable, r2d2 would keep every request waiting the full
/// `POOL_TIMEOUT_SECS` for a connection that cannot be made, and requests pile up behind each
/// other. So the pool remembers a failed connect (r2d2 reports it to its error handler), and
/// until a connection works again (a new one opens, or an idle one answers its ping) a
/// checkout waits at most [`OUTAGE_WAIT`]: the answer is a quick 503 with `Retry-After`, and
/// the pool's own reconnect attempts bring it back.
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
    /// For the one statement read outside diesel (`crate::deadlocks`). Never shown or logged.
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

/// How long a checkout waits while the server is known to be unreachable.
pub const OUTAGE_WAIT: Duration = Duration::from_millis(500);

/// A connection idle longer than this is pinged before it is handed out: a server restart, its
/// `wait_timeout` or a firewall may have closed it meanwhile. A busy connection never is.
pub const IDLE_CHECK: Duration = Duration::from_secs(30);

impl DbPool {
    /// A connection, within `POOL_TIMEOUT_SECS` — or within [`OUTAGE_WAIT`] during an outage.
    ///
    /// The wait is taken in slices of at most `OUTAGE_WAIT`, so that a checkout that began just
    /// before the server went away stops waiting as soon as the pool has noticed, instead of
    /// sitting out the whole pool timeout.
    pub fn get(&self) -> Result<PooledConn, CheckoutError> {
        let began = Instant::now();
        let end = began + self.timeout;
        let checked_out = loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.pool.get_timeout(left.min(OUTAGE_WAIT)) {
                Ok(mut conn) => match self.fit(&mut conn) {
                    Ok(()) => break Ok(conn),
                    // Dropped broken: r2d2 closes it and opens another in its place.
                    Err(()) => continue,
                },
                Err(e) if self.health.is_down() => break Err(CheckoutError::Down(e)),
                Err(e) if left <= OUTAGE_WAIT => break Err(CheckoutError::Busy(e)),
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

    /// The engine the pool's server runs.
    pub fn engine(&self) -> Engine {
        self.engine
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
            match error {
                Some(e) if crate::infra::lost_connection(e) => {
                    self.lost = true;
                    self.health.connection_lost();
                }
                // An error the server sent is an answer too.
                _ => self.last_answer = Instant::now(),
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

/// A set of migrations, written once per engine with the same versions (`migrations/mysql/`,
/// `migrations/postgres/`): each engine's DDL in its own words, one history.
pub struct Migrations {
    pub mysql: EmbeddedMigrations,
    pub postgres: EmbeddedMigrations,
}

impl Migrations {
    pub fn on(self, engine: Engine) -> EmbeddedMigrations {
        match engine {
            Engine::Mysql => self.mysql,
            Engine::Postgres => self.postgres,
        }
    }
}

pub const MIGRATIONS: Migrations = Migrations {
    mysql: embed_migrations!("migrations/mysql"),
    postgres: embed_migrations!("migrations/postgres"),
};

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
        let settings = match conn.engine() {
            // Strict mode turns silent truncation into errors; UTC keeps DATETIME values
            // unambiguous.
            Engine::Mysql => format!(
                "SET SESSION innodb_lock_wait_timeout = {}, \
                 SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO', \
                 time_zone = '+00:00'",
                self.row_lock_wait_secs
            ),
            // `lock_timeout` bounds every lock wait (rows and advisory locks alike), as
            // `innodb_lock_wait_timeout` bounds row waits; a named lock's own wait overrides
            // it for its one transaction. READ COMMITTED is PostgreSQL's default, said here
            // because the locking reads rely on it: they see the latest committed row.
            Engine::Postgres => format!(
                "SET lock_timeout = '{}s'; SET TimeZone = 'UTC'; \
                 SET default_transaction_isolation = 'read committed'",
                self.row_lock_wait_secs
            ),
        };
        conn.batch_execute(&settings).map_err(diesel::r2d2::Error::QueryError)?;
        conn.set_instrumentation(Liveness {
            last_answer: Instant::now(),
            lost: false,
            health: Arc::clone(&self.health),
            statements: 0,
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

/// Splits `mysql://…/name?opts` into the server URL (no database) and the database name.
pub fn split_database_url(url: &str) -> anyhow::Result<(String, String)> {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let slash = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .ok_or_else(|| anyhow::anyhow!("DATABASE_URL has no database name: {}", redact(url)))?;
    let name = &base[slash + 1..];
    anyhow::ensure!(
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?} must be letters, digits and underscores"
    );
    let server = match query {
        Some(q) => format!("{}/?{q}", &base[..slash]),
        None => format!("{}/", &base[..slash]),
    };
    Ok((server, name.to_string()))
}

/// Creates the database named in `url` if it does not exist yet, so the run command needs no
/// manual `CREATE DATABASE`. The name is letters, digits and underscores ([`split_database_url`]),
/// so it is safe to write into the statement.
pub fn ensure_database_exists(url: &str) -> anyhow::Result<()> {
    let (server, name) = split_database_url(url)?;
    // A PostgreSQL session always belongs to a database, and without one named it is the
    // database named like the user, which an app's role seldom has: so first the database
    // itself, and only when that fails the server's `postgres` database to create it from.
    let server = if Engine::of_url(url) == Ok(Engine::Postgres) {
        if DbConn::open(url).is_ok() {
            return Ok(());
        }
        maintenance_url(&server)
    } else {
        server
    };
    let mut conn =
        DbConn::open(&server).map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", redact(&server)))?;
    match conn.engine() {
        Engine::Mysql => conn.batch_execute(&format!(
            "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        ))?,
        // PostgreSQL has no CREATE DATABASE IF NOT EXISTS. Another instance may create it between
        // the look and the creation: its database is as good as ours.
        Engine::Postgres => {
            let found =
                cached_sql::<diesel::sql_types::BigInt>("SELECT COUNT(*) FROM pg_database WHERE datname = ?")
                    .bind::<Text, _>(&name)
                    .get_result::<i64>(&mut conn)?;
            if found == 0 {
                match conn
                    .batch_execute(&format!("CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0"))
                {
                    Err(e) if e.to_string().contains("already exists") => {}
                    created => created?,
                }
            }
        }
    }
    Ok(())
}

/// `server_url` (a URL with no database) naming PostgreSQL's `postgres` database, which every
/// cluster has and every role may connect to unless an administrator revoked it.
fn maintenance_url(server_url: &str) -> String {
    match server_url.split_once("/?") {
        Some((head, query)) => format!("{head}/postgres?{query}"),
        None => format!("{}/postgres", server_url.trim_end_matches('/')),
    }
}

/// A database of its own on the server of another URL, created with a random name and dropped
/// when the value is dropped: what a test or a benchmark works in, so that it never touches the
/// database it was pointed at. Created empty; the caller migrates it.
pub struct ScratchDatabase {
    /// The scratch database's URL (the base URL's server, user and options).
    pub url: String,
    pub name: String,
    server_url: String,
}

impl ScratchDatabase {
    /// `CREATE DATABASE <prefix><16 hex digits>` next to the one in `base_url`.
    pub fn create(base_url: &str, prefix: &str) -> anyhow::Result<Self> {
        use rand::Rng;
        let (server_url, _) = split_database_url(base_url)?;
        let name = format!("{prefix}{:016x}", rand::rng().random::<u64>());
        let url = match server_url.split_once("/?") {
            Some((head, query)) => format!("{head}/{name}?{query}"),
            None => format!("{server_url}{name}"),
        };
        ensure_database_exists(&url)?;
        Ok(Self { url, name, server_url })
    }
}

impl Drop for ScratchDatabase {
    /// Best effort: a server that is gone by now cannot be told anything.
    fn drop(&mut self) {
        if let Ok(mut conn) = DbConn::open(&self.server_url) {
            let _ = match conn.engine() {
                Engine::Mysql => conn.batch_execute(&format!("DROP DATABASE IF EXISTS `{}`", self.name)),
                // Sessions left behind (a pool still closing) would otherwise block the drop.
                Engine::Postgres => {
                    conn.batch_execute(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name))
                }
            };
        }
    }
}

/// Runs pending migrations under a named lock, so several instances starting together do not
/// race each other through the same DDL (MySQL DDL is not transactional).
pub fn run_migrations(pool: &DbPool) -> anyhow::Result<Vec<String>> {
    run_embedded_migrations(pool, MIGRATIONS)
}

/// Runs the pending migrations of one embedded set under the migration lock. Several sets may
/// share a database (the lab has its own): diesel skips the versions a set does not contain.
pub fn run_embedded_migrations(pool: &DbPool, migrations: Migrations) -> anyhow::Result<Vec<String>> {
    let mut lock = NamedLockGuard::acquire(pool.get()?, pool.names().migrations(), Duration::from_secs(120))?;
    let applied = lock
        .conn()
        .run_pending_migrations(migrations.on(pool.engine()))
        .map_err(|e| anyhow::anyhow!("migration failed: {e}"))?;
    Ok(applied.iter().map(ToString::to_string).collect())
}

/// The generated id of the row this session inserted last: MySQL has no `RETURNING`, and the
/// value is per session, so it must be read on the connection that inserted. PostgreSQL's
/// `lastval()` is the same thing for identity columns (no trigger of ours draws on a sequence).
pub fn last_insert_id(conn: &mut DbConn) -> QueryResult<i64> {
    const LAST_ID: Sql = Sql::per_engine("SELECT LAST_INSERT_ID()", "SELECT lastval()");
    cached_sql::<diesel::sql_types::BigInt>(LAST_ID).get_result(conn)
}

/// Now, to the microsecond: what a `DATETIME(6)` keeps. Rows that are returned without being
/// read back set their times here rather than by a column default, so the answer and the row agree.
pub fn now_micros() -> chrono::NaiveDateTime {
    chrono::SubsecRound::trunc_subsecs(chrono::Utc::now().naive_utc(), 6)
}

/// What the server says about itself, read once at start: its version and the few global
/// variables that decide whether named locks can be trusted there.
#[derive(Debug, Clone, Default)]
pub struct ServerFacts {
    pub version: String,
    /// Lower-cased variable name → value, for the names in [`FACT_VARIABLES`] the server has.
    pub variables: std::collections::BTreeMap<String, String>,
}

/// Read with `SHOW GLOBAL VARIABLES`, which every supported server answers without privileges:
/// `information_schema.GLOBAL_VARIABLES` is gone from MySQL 8, and reading it there used to fail
/// quietly and leave a Galera node's `wsrep_on` unknown, hence accepted.
const FACT_VARIABLES: [&str; 5] =
    ["wsrep_on", "group_replication_single_primary_mode", "binlog_format", "read_only", "tidb_version"];

#[derive(QueryableByName)]
struct Variable {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

impl ServerFacts {
    /// Asks the server; any error is an error (the check fails closed).
    pub fn read(conn: &mut DbConn) -> QueryResult<Self> {
        let version = diesel::select(diesel::dsl::sql::<Text>("VERSION()")).get_result(conn)?;
        let names = FACT_VARIABLES.map(|n| format!("'{n}'")).join(", ");
        let rows: Vec<Variable> =
            diesel::sql_query(format!("SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"))
                .load(conn)?;
        let variables = rows.into_iter().map(|v| (v.name.to_ascii_lowercase(), v.value)).collect();
        Ok(Self { version, variables })
    }

    fn variable(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }

    fn is_on(&self, name: &str) -> bool {
        self.variable(name).is_some_and(is_on)
    }

    pub fn is_mariadb(&self) -> bool {
        self.version.to_ascii_lowercase().contains("mariadb")
    }

    pub fn is_tidb(&self) -> bool {
        self.version.to_ascii_lowercase().contains("tidb") || self.variable("tidb_version").is_some()
    }

    pub fn binlog_format(&self) -> Option<&str> {
        self.variable("binlog_format")
    }

    /// MySQL 8.0+ or MariaDB 10.6+: the releases that have everything the locking relies on
    /// (several named locks per session, `RELEASE_ALL_LOCKS`, `FOR UPDATE SKIP LOCKED`).
    pub fn is_supported_version(&self) -> bool {
        if self.is_mariadb() { self.version_at_least(10, 6) } else { self.version_at_least(8, 0) }
    }

    fn version_at_least(&self, major: u32, minor: u32) -> bool {
        let mut parts =
            self.version.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        found >= (major, minor)
    }

    /// Why named locks cannot be trusted on this server, if they cannot. Decided from the facts
    /// alone, so it is tested over servers this machine does not run.
    pub fn refusal(&self) -> Option<String> {
        if self.is_tidb() {
            return Some(format!(
                "server {} is TiDB: its GET_LOCK waits at least 1 s (the app asks with 0 first), \
                 detects no deadlock between named locks, and IS_USED_LOCK names no holder (the admin \
                 screen needs it). haita does not run on TiDB.",
                self.version
            ));
        }
        if self.is_on("wsrep_on") {
            return Some(
                "this server is a Galera / Percona XtraDB Cluster node (wsrep_on=ON): GET_LOCK is not \
                 replicated across the cluster, so named locks would not exclude anything. Point \
                 DATABASE_URL at a single primary."
                    .into(),
            );
        }
        if self.variable("group_replication_single_primary_mode").is_some_and(|v| !is_on(v)) {
            return Some(
                "group replication is set up multi-primary (group_replication_single_primary_mode=OFF): \
                 GET_LOCK holds on one member only, so two members could both book the same place. \
                 Use single-primary mode and point DATABASE_URL at the primary."
                    .into(),
            );
        }
        if self.is_on("read_only") {
            return Some(
                "this server is read-only (a replica?). Named locks and row locks must run on the primary."
                    .into(),
            );
        }
        if self.binlog_format().is_some_and(|f| f.eq_ignore_ascii_case("STATEMENT")) {
            return Some(
                "binlog_format=STATEMENT: statements that use GET_LOCK are unsafe to replicate, and \
                 InnoDB refuses writes at READ COMMITTED (which first edit-lock acquires and stock \
                 receipts run at) with a statement-based binary log. Use ROW (MySQL's default) or MIXED."
                    .into(),
            );
        }
        if !self.is_supported_version() {
            return Some(format!(
                "server {} is too old: haita needs MySQL 8.0+ or MariaDB 10.6+ (several named locks per \
                 session, RELEASE_ALL_LOCKS, SKIP LOCKED)",
                self.version
            ));
        }
        None
    }
}

/// What haita needs of a PostgreSQL server, read once at start.
#[derive(QueryableByName)]
struct PostgresFacts {
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    version_num: i32,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    in_recovery: bool,
    #[diesel(sql_type = Text)]
    lc_messages: String,
}

impl PostgresFacts {
    /// Why haita cannot run on this server, if it cannot.
    fn refusal(&self) -> Option<String> {
        if self.version_num < 150_000 {
            return Some(format!("server {} is too old: haita needs PostgreSQL 15+", self.version));
        }
        if self.in_recovery {
            return Some(
                "this server is a standby (pg_is_in_recovery): advisory locks and row locks must run on \
                 the primary"
                    .into(),
            );
        }
        // diesel reports a lock timeout (55P03) and a deadlock (40P01) with the server's message
        // only, not its SQLSTATE, so the messages must be the untranslated ones.
        let english = ["", "C", "POSIX"].contains(&self.lc_messages.as_str())
            || self.lc_messages.starts_with("C.")
            || self.lc_messages.starts_with("en");
        if !english {
            return Some(format!(
                "lc_messages is {:?}: haita tells lock timeouts and deadlocks apart by the server's \
                 English messages. Run ALTER ROLE <haita's role> SET lc_messages = 'C' (as a superuser).",
                self.lc_messages
            ));
        }
        None
    }
}

fn check_postgres(conn: &mut DbConn) -> anyhow::Result<ServerFacts> {
    let facts: PostgresFacts = cached_sql::<diesel::sql_types::Untyped>(
        "SELECT version() AS version, CAST(current_setting('server_version_num') AS INTEGER) AS version_num, \
         pg_is_in_recovery() AS in_recovery, current_setting('lc_messages') AS lc_messages",
    )
    .get_result(conn)
    .map_err(|e| anyhow::anyhow!("cannot read the server's version and settings ({e}); refusing to start"))?;
    if let Some(reason) = facts.refusal() {
        anyhow::bail!(reason);
    }
    log::info!("database server {} (named locks: advisory locks, 64-bit keys)", facts.version);
    Ok(ServerFacts { version: facts.version, variables: std::collections::BTreeMap::new() })
}

fn is_on(value: &str) -> bool {
    value.eq_ignore_ascii_case("ON") || value == "1"
}

/// Refuses servers on which named locks cannot be trusted, and warns about risky settings
/// (`docs/server-facts.md`). Fails closed: a server that cannot be asked is refused too.
pub fn check_server(conn: &mut DbConn) -> anyhow::Result<ServerFacts> {
    if conn.engine() == Engine::Postgres {
        return check_postgres(conn);
    }
    let facts = ServerFacts::read(conn).map_err(|e| {
        anyhow::anyhow!("cannot read the server's version and settings ({e}); refusing to start")
    })?;
    if let Some(reason) = facts.refusal() {
        anyhow::bail!(reason);
    }
    log::info!(
        "database server {} (named locks per session: several; binlog_format={})",
        facts.version,
        facts.binlog_format().unwrap_or("off")
    );
    Ok(facts)
}

/// The URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// Text columns that hold a closed set of values (role, status) map to Rust enums through this.
macro_rules! text_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, diesel::AsExpression, diesel::FromSqlRow,
                 serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
        #[diesel(sql_type = diesel::sql_types::Text)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "unknown {} {other:?} (expected one of: {})",
                        stringify!($name).to_lowercase(),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        // For every backend that has text, diesel's and the one both engines share: inserting
        // through the query builder binds the value with the engine's own backend.
        impl<DB> diesel::serialize::ToSql<diesel::sql_types::Text, DB> for $name
        where
            DB: diesel::backend::Backend,
            str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        {
            fn to_sql<'b>(&'b self, out: &mut diesel::serialize::Output<'b, '_, DB>) -> diesel::serialize::Result {
                <str as diesel::serialize::ToSql<diesel::sql_types::Text, DB>>::to_sql(self.as_str(), out)
            }
        }

        impl<DB> diesel::deserialize::FromSql<diesel::sql_types::Text, DB> for $name
        where
            DB: diesel::backend::Backend,
            String: diesel::deserialize::FromSql<diesel::sql_types::Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
                let text = <String as diesel::deserialize::FromSql<diesel::sql_types::Text, DB>>::from_sql(bytes)?;
                text.parse().map_err(Into::into)
            }
        }
    };
}
pub(crate) use text_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_splits_into_server_and_name() {
        let (server, name) =
            split_database_url("mysql://u:p@127.0.0.1:3307/haita?ssl_mode=DISABLED").expect("valid");
        assert_eq!(server, "mysql://u:p@127.0.0.1:3307/?ssl_mode=DISABLED");
        assert_eq!(name, "haita");
        assert!(split_database_url("mysql://u@host:1").is_err());
        assert!(split_database_url("mysql://u@host:1/bad-name").is_err());
    }

    /// Facts as a server would report them: its version and `SHOW GLOBAL VARIABLES` rows.
    fn facts(version: &str, variables: &[(&str, &str)]) -> ServerFacts {
        ServerFacts {
            version: version.into(),
            variables: variables.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }

    #[test]
    fn only_mysql_8_and_mariadb_10_6_or_later_are_supported() {
        for ok in
            ["8.0.36", "8.4.3", "9.1.0", "10.6.21-MariaDB", "10.11.19-MariaDB-0+deb12u1", "11.4.2-MariaDB"]
        {
            assert!(facts(ok, &[]).is_supported_version(), "{ok}");
        }
        for old in ["5.7.44", "10.5.27-MariaDB", "10.0.38-MariaDB"] {
            assert!(!facts(old, &[]).is_supported_version(), "{old}");
            assert!(facts(old, &[]).refusal().is_some_and(|r| r.contains("too old")), "{old}");
        }
    }

    #[test]
    fn single_servers_and_single_primary_groups_are_accepted() {
        let accepted = [
            facts(
                "10.11.19-MariaDB-0+deb12u1",
                &[("wsrep_on", "OFF"), ("binlog_format", "MIXED"), ("read_only", "OFF")],
            ),
            facts("8.0.36", &[("binlog_format", "ROW"), ("read_only", "OFF")]),
            facts("8.4.3", &[("group_replication_single_primary_mode", "ON"), ("read_only", "OFF")]),
        ];
        for server in accepted {
            assert_eq!(server.refusal(), None, "{server:?}");
        }
    }

    #[test]
    fn clusters_without_cluster_wide_named_locks_replicas_and_tidb_are_refused() {
        for (server, why) in [
            // Percona XtraDB Cluster 8: MySQL 8 (no information_schema.GLOBAL_VARIABLES), wsrep on.
            (facts("8.0.36-28.1", &[("wsrep_on", "ON"), ("read_only", "OFF")]), "wsrep_on=ON"),
            (facts("10.11.6-MariaDB", &[("wsrep_on", "ON")]), "wsrep_on=ON"),
            (facts("8.0.36", &[("group_replication_single_primary_mode", "OFF")]), "multi-primary"),
            (facts("8.0.36", &[("read_only", "ON")]), "read-only"),
            (facts("8.0.11-TiDB-v7.5.1", &[("tidb_version", "Release Version: v7.5.1")]), "TiDB"),
            (facts("5.7.25-TiDB-v8.1.0", &[]), "TiDB"),
            (facts("10.11.6-MariaDB", &[("binlog_format", "STATEMENT")]), "binlog_format=STATEMENT"),
        ] {
            let refusal = server.refusal();
            assert!(refusal.as_deref().is_some_and(|r| r.contains(why)), "{server:?}: {refusal:?}");
        }
    }

    #[test]
    fn passwords_are_redacted_in_messages() {
        assert_eq!(redact("mysql://haita:secret@h:1/db"), "mysql://haita:***@h:1/db");
        assert_eq!(redact("mysql://root@h:1/db"), "mysql://root@h:1/db");
    }
}
