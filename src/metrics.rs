//! Prometheus metrics about the locks, served at `/metrics`.
//!
//! What an operator needs to see before users complain: how often named locks time out (a hot
//! key, or a leaked lock), how long acquiring them takes, how many connections were closed
//! because a release was in doubt, how many transactions deadlocked or timed out and were
//! retried, and how full the pool is.

use std::sync::LazyLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// `GET_LOCK` outcomes by lock scope (`book`, `stock`, …): acquired, timed_out, failed.
    pub named_lock_acquisitions: IntCounterVec,
    /// Seconds spent in `GET_LOCK` by lock scope, whatever the outcome.
    pub named_lock_wait_seconds: HistogramVec,
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
    /// Sessions checked per query (`auth::session::SessionChecks`): with the batches above, how
    /// many blocking hops a booking request costs (one per batch of each).
    pub session_check_batch_size: Histogram,
    /// Requests answered from a stored answer: retries with an `Idempotency-Key` already used.
    pub idempotent_replays: IntCounter,
    pool_connections: IntGauge,
    pool_idle: IntGauge,
}

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new_custom(Some("haita".into()), None)?;
    let m = Metrics {
        named_lock_acquisitions: IntCounterVec::new(
            Opts::new("named_lock_acquisitions_total", "GET_LOCK calls by scope and outcome"),
            &["scope", "outcome"],
        )?,
        named_lock_wait_seconds: HistogramVec::new(
            HistogramOpts::new("named_lock_wait_seconds", "Time spent in GET_LOCK")
                .buckets(vec![0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0]),
            &["scope"],
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
        registry,
    };
    m.registry.register(Box::new(m.named_lock_acquisitions.clone()))?;
    m.registry.register(Box::new(m.named_lock_wait_seconds.clone()))?;
    m.registry.register(Box::new(m.named_lock_sessions_closed.clone()))?;
    m.registry.register(Box::new(m.transaction_retries.clone()))?;
    m.registry.register(Box::new(m.transaction_gave_up.clone()))?;
    m.registry.register(Box::new(m.lock_queue_depth.clone()))?;
    m.registry.register(Box::new(m.lock_waiters.clone()))?;
    m.registry.register(Box::new(m.lock_waiters_budget.clone()))?;
    m.registry.register(Box::new(m.lock_waiters_refused.clone()))?;
    m.registry.register(Box::new(m.booking_batch_size.clone()))?;
    m.registry.register(Box::new(m.session_check_batch_size.clone()))?;
    m.registry.register(Box::new(m.idempotent_replays.clone()))?;
    m.registry.register(Box::new(m.pool_connections.clone()))?;
    m.registry.register(Box::new(m.pool_idle.clone()))?;
    Ok(m)
}

/// The process-wide metrics. Building them cannot fail with the fixed names above; if it ever
/// did, that is a programming error worth stopping for at start.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| build().expect("metric definitions are valid"));

/// The Prometheus text exposition, with the pool gauges read now.
pub fn render(pool: &crate::db::DbPool) -> String {
    let state = pool.state();
    METRICS.pool_connections.set(i64::from(state.connections));
    METRICS.pool_idle.set(i64::from(state.idle_connections));
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&METRICS.registry.gather(), &mut out) {
        log::error!("encoding metrics failed: {e}");
    }
    String::from_utf8(out).unwrap_or_default()
}
