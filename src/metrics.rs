//! Prometheus metrics about the locks, served at `/metrics` and drawn on `/admin/metrics`.
//!
//! What an operator needs to see before users complain, per lock family (`named`: `GET_LOCK`;
//! `queue`: this instance's in-memory turn per lock name; `row`: `SELECT … FOR UPDATE`; `edit`:
//! the pessimistic edit locks): how long locks are waited for and held, how often the waits run
//! out, how many requests were answered 503 and why, how many transactions deadlocked and were
//! retried, how long a request waits for a pooled connection and how full the pool is.
//!
//! Recording goes through [`record`], which does nothing when metrics are switched off
//! (`METRICS=off`): that is how their cost per request is measured, by running the same
//! benchmark both ways.
//!
//! Each app instance has a registry of its own ([`Metrics::new`]): two instances in one process
//! (the tests start several) must not add up each other's counts. Code deep in the database and
//! locking layers does not carry the instance around; it records into *this thread's* registry.
//! An instance makes its registry its worker threads' own as they start ([`use_on_this_thread`]),
//! and a task it sends to a blocking thread carries it along ([`carried`]). A thread that has
//! none (the command line, the benches) records into the process-wide [`METRICS`].

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// `GET_LOCK` outcomes by lock scope (`book`, `stock`, …): acquired, timed_out, failed.
    pub named_lock_acquisitions: IntCounterVec,
    /// Seconds spent waiting for a lock, by family and scope, whatever the outcome.
    pub lock_wait_seconds: HistogramVec,
    /// Seconds a lock was held, from granted to released, by family and scope.
    pub lock_hold_seconds: HistogramVec,
    /// Answers 503, by answer (`busy`, `unavailable`) and cause (`named_lock`, `row_lock`, …).
    pub unavailable_answers: IntCounterVec,
    /// Seconds a request waited for a pooled connection, and the checkouts that gave up.
    pub pool_checkout_seconds: Histogram,
    pub pool_checkout_failures: IntCounterVec,
    /// Connections closed instead of pooled because their release could not be trusted.
    pub named_lock_sessions_closed: IntCounter,
    /// Whole transactions run again, by conflict: deadlock, lock_wait_timeout.
    pub transaction_retries: IntCounterVec,
    /// Transactions that still conflicted after the last attempt.
    pub transaction_gave_up: IntCounter,
    /// Requests waiting in memory for their turn at a lock name, by scope.
    pub lock_queue_depth: IntGaugeVec,
    /// Sessions of this instance waiting in `GET_LOCK` now, and how many may.
    pub lock_waiters: IntGauge,
    pub lock_waiters_budget: IntGauge,
    /// Requests refused at once because the waiting budget was spent, by scope.
    pub lock_waiters_refused: IntCounterVec,
    /// Bookings decided per coalesced batch (one lock, one transaction, one commit each).
    pub booking_batch_size: Histogram,
    /// Orders decided per coalesced batch (one stock row lock, one transaction, one commit each).
    pub order_batch_size: Histogram,
    /// Sessions checked per query (`auth::session::SessionChecks`): with the batches above, how
    /// many blocking hops a booking request costs (one per batch of each).
    pub session_check_batch_size: Histogram,
    /// Requests answered from a stored answer: retries with an `Idempotency-Key` already used.
    pub idempotent_replays: IntCounter,
    pool_connections: IntGauge,
    pool_idle: IntGauge,
    /// The pool's size (`POOL_SIZE`): with the two above, how saturated it is.
    pub pool_max: IntGauge,
    /// 1 from a stop signal on (`crate::shutdown`): `/ready` answers 503 and the instance is on
    /// its way out.
    pub draining: IntGauge,
}

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new_custom(Some("haita".into()), None)?;
    let m = Metrics {
        named_lock_acquisitions: IntCounterVec::new(
            Opts::new("named_lock_acquisitions_total", "GET_LOCK calls by scope and outcome"),
            &["scope", "outcome"],
        )?,
        lock_wait_seconds: HistogramVec::new(
            HistogramOpts::new("lock_wait_seconds", "Time spent waiting for a lock, by family and scope")
                .buckets(LOCK_BUCKETS.to_vec()),
            &["family", "scope"],
        )?,
        lock_hold_seconds: HistogramVec::new(
            HistogramOpts::new("lock_hold_seconds", "Time a lock was held, by family and scope")
                .buckets(LOCK_BUCKETS.to_vec()),
            &["family", "scope"],
        )?,
        unavailable_answers: IntCounterVec::new(
            Opts::new("unavailable_answers_total", "Requests answered 503, by answer and cause"),
            &["answer", "cause"],
        )?,
        pool_checkout_seconds: Histogram::with_opts(
            HistogramOpts::new("pool_checkout_seconds", "Time a request waited for a pooled connection")
                .buckets(LOCK_BUCKETS.to_vec()),
        )?,
        pool_checkout_failures: IntCounterVec::new(
            Opts::new("pool_checkout_failures_total", "Checkouts that gave up, by reason (busy, down)"),
            &["reason"],
        )?,
        named_lock_sessions_closed: IntCounter::new(
            "named_lock_sessions_closed_total",
            "Connections closed instead of pooled because a named-lock release was in doubt",
        )?,
        transaction_retries: IntCounterVec::new(
            Opts::new("transaction_retries_total", "Whole transactions rerun after a lock conflict"),
            &["conflict"],
        )?,
        transaction_gave_up: IntCounter::new(
            "transaction_gave_up_total",
            "Transactions still in a lock conflict after their last attempt",
        )?,
        lock_queue_depth: IntGaugeVec::new(
            Opts::new("lock_queue_depth", "Requests queued in memory for their turn at a named lock"),
            &["scope"],
        )?,
        lock_waiters: IntGauge::new("lock_waiters", "Sessions of this instance waiting in GET_LOCK")?,
        lock_waiters_budget: IntGauge::new(
            "lock_waiters_budget",
            "How many sessions of this instance may wait in GET_LOCK (LOCK_WAITERS_MAX)",
        )?,
        lock_waiters_refused: IntCounterVec::new(
            Opts::new("lock_waiters_refused_total", "Requests refused because the waiting budget was spent"),
            &["scope"],
        )?,
        booking_batch_size: Histogram::with_opts(
            HistogramOpts::new("booking_batch_size", "Bookings decided per coalesced batch")
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
        )?,
        order_batch_size: Histogram::with_opts(
            HistogramOpts::new("order_batch_size", "Orders decided per coalesced batch")
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
        )?,
        session_check_batch_size: Histogram::with_opts(
            HistogramOpts::new("session_check_batch_size", "Sessions checked per query")
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
        )?,
        idempotent_replays: IntCounter::new(
            "idempotent_replays_total",
            "Requests answered with the stored answer of their Idempotency-Key",
        )?,
        pool_connections: IntGauge::new("pool_connections", "Open connections in this instance's pool")?,
        pool_idle: IntGauge::new("pool_idle_connections", "Idle connections in this instance's pool")?,
        pool_max: IntGauge::new(
            "pool_max_connections",
            "Connections this instance's pool may open (POOL_SIZE)",
        )?,
        draining: IntGauge::new(
            "draining",
            "1 once a stop signal was received: /ready answers 503 and the instance is leaving",
        )?,
        registry,
    };
    m.registry.register(Box::new(m.named_lock_acquisitions.clone()))?;
    m.registry.register(Box::new(m.lock_wait_seconds.clone()))?;
    m.registry.register(Box::new(m.lock_hold_seconds.clone()))?;
    m.registry.register(Box::new(m.unavailable_answers.clone()))?;
    m.registry.register(Box::new(m.pool_checkout_seconds.clone()))?;
    m.registry.register(Box::new(m.pool_checkout_failures.clone()))?;
    m.registry.register(Box::new(m.named_lock_sessions_closed.clone()))?;
    m.registry.register(Box::new(m.transaction_retries.clone()))?;
    m.registry.register(Box::new(m.transaction_gave_up.clone()))?;
    m.registry.register(Box::new(m.lock_queue_depth.clone()))?;
    m.registry.register(Box::new(m.lock_waiters.clone()))?;
    m.registry.register(Box::new(m.lock_waiters_budget.clone()))?;
    m.registry.register(Box::new(m.lock_waiters_refused.clone()))?;
    m.registry.register(Box::new(m.booking_batch_size.clone()))?;
    m.registry.register(Box::new(m.order_batch_size.clone()))?;
    m.registry.register(Box::new(m.session_check_batch_size.clone()))?;
    m.registry.register(Box::new(m.idempotent_replays.clone()))?;
    m.registry.register(Box::new(m.pool_connections.clone()))?;
    m.registry.register(Box::new(m.pool_idle.clone()))?;
    m.registry.register(Box::new(m.pool_max.clone()))?;
    m.registry.register(Box::new(m.draining.clone()))?;
    Ok(m)
}

/// Bucket bounds (seconds) for waits and holds: a held lock is normally a few milliseconds, a
/// wait up to the lock wait (seconds); an edit lock is held for minutes.
const LOCK_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 60.0, 600.0];

impl Metrics {
    /// A registry of its own, for one app instance. Building it cannot fail with the fixed names
    /// above; if it ever did, that is a programming error worth stopping for at start.
    pub fn new() -> Arc<Self> {
        Arc::new(build().expect("metric definitions are valid"))
    }

    /// The Prometheus text exposition, with the pool gauges as `pool` (the pool's state now).
    pub fn render(&self, pool: diesel::r2d2::State) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.gather(pool), &mut out) {
            log::error!("encoding metrics failed: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Every metric, with the pool gauges as `state` (the pool's state read now).
    pub fn gather(&self, state: diesel::r2d2::State) -> Vec<prometheus::proto::MetricFamily> {
        self.pool_connections.set(i64::from(state.connections));
        self.pool_idle.set(i64::from(state.idle_connections));
        self.registry.gather()
    }
}

/// The process-wide metrics, for threads no app instance runs (the command line, the benches).
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| build().expect("metric definitions are valid"));

thread_local! {
    /// The registry of the app instance this thread works for, if any.
    static THIS_THREAD: RefCell<Option<Arc<Metrics>>> = const { RefCell::new(None) };
}

/// Makes `metrics` this thread's registry from now on: for an app instance's worker threads.
pub fn use_on_this_thread(metrics: Arc<Metrics>) {
    THIS_THREAD.with(|current| *current.borrow_mut() = Some(metrics));
}

/// Runs `work` recording into `metrics`, then puts this thread's registry back as it was (panic
/// or not): for blocking threads, which serve every instance of the process in turn. Only
/// `db::OffExecutor` calls it, with its own instance's metrics.
pub fn recording_into<T>(metrics: Arc<Metrics>, work: impl FnOnce() -> T) -> T {
    struct Restore(Option<Arc<Metrics>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THIS_THREAD.with(|current| *current.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(THIS_THREAD.with(|current| current.borrow_mut().replace(metrics)));
    work()
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Switches recording on or off for the whole process (`METRICS=off`), at start.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Records something into this thread's registry, unless metrics are off.
pub fn record(update: impl FnOnce(&Metrics)) {
    if enabled() {
        THIS_THREAD.with(|current| match &*current.borrow() {
            Some(metrics) => update(metrics),
            None => update(&METRICS),
        });
    }
}

/// A lock family, as the `family` label names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `GET_LOCK` on the database server.
    Named,
    /// This instance's in-memory turn per lock name, before `GET_LOCK`.
    Queue,
    /// Row locks: `SELECT … FOR UPDATE` inside a transaction.
    Row,
}

impl Family {
    pub fn label(self) -> &'static str {
        match self {
            Self::Named => "named",
            Self::Queue => "queue",
            Self::Row => "row",
        }
    }
}

/// How long a lock of `family` and `scope` was waited for.
pub fn waited(family: Family, scope: &str, took: Duration) {
    record(|m| m.lock_wait_seconds.with_label_values(&[family.label(), scope]).observe(took.as_secs_f64()));
}

/// How long a lock of `family` and `scope` was held.
pub fn held(family: Family, scope: &str, took: Duration) {
    record(|m| m.lock_hold_seconds.with_label_values(&[family.label(), scope]).observe(took.as_secs_f64()));
}
