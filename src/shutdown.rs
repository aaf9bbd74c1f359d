//! How an instance tells a load balancer it may be sent requests, and how it leaves.
//!
//! - `GET /health`, liveness: 200 `{"status":"ok"}` while the process serves. It touches
//!   nothing, neither the database nor the pool: what restarts a process on a failed liveness
//!   check (an orchestrator) should restart it for what a restart mends, a hung process, never
//!   because the database is down.
//! - `GET /ready`, readiness: 200 `{"status":"ready","database":"ok"}` when the database answers
//!   a ping and the instance is not draining; else 503 with `Retry-After` and
//!   `{"status":"draining"}` or `{"status":"unavailable","database":"unreachable"}`. A load
//!   balancer sends requests only to a ready instance. While the database is down the pool
//!   answers at once (`db::pool`'s outage wait), so the check does not hang either.
//! - A stop signal (SIGTERM, SIGINT or Ctrl-C) on `haita serve` drains the instance
//!   ([`on_signals`]): `/ready` answers 503 `draining` at once, and every other request is served
//!   as usual for `DRAIN_SECS`, long enough for the load balancer's checks to take the instance
//!   out; the requests it still sends meanwhile get their normal answers, each on a connection
//!   closed after it (`Connection: close`), so that no client keeps one for later. Then the
//!   instance stops accepting connections and lets the requests in flight finish, within
//!   `SHUTDOWN_TIMEOUT_SECS`: their transactions commit and their named locks are released as
//!   usual; idle keep-alive connections are closed (actix does that once it stops). A second
//!   signal skips what is left of `DRAIN_SECS`.
//! - Nothing waiting in memory is dropped: a request still queued for its turn at a lock shortly
//!   before the budget runs out ([`cut_at`]) is answered 503 `draining` with `Retry-After`
//!   (`locking::Cutoff`), rather than have its connection closed unanswered when actix closes
//!   what is left. With the defaults that cannot happen: a request waits at most
//!   `LOCK_WAIT_SECS` for its lock and `POOL_TIMEOUT_SECS` for its connection, well within
//!   `SHUTDOWN_TIMEOUT_SECS`.
//!
//! Then housekeeping stops, the pool is dropped and `haita serve` exits 0. Each step is logged,
//! and `haita_draining` is 1 from the signal on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServerHandle, ServiceRequest, ServiceResponse};
use actix_web::http::{ConnectionType, header};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use crate::app::AppState;
use crate::locking::Cutoff;
use crate::metrics::Metrics;

/// One per instance (app data): whether it is draining, what it has in flight, and its cutoff.
pub struct Shutdown {
    draining: AtomicBool,
    /// Requests between arrival and answer ([`track`]).
    in_flight: AtomicUsize,
    /// Set when the instance stops accepting; what was in flight then, and what of it was
    /// answered since.
    stopped_accepting: AtomicBool,
    stopping: Mutex<Option<Stopping>>,
    answered_since_stop: AtomicUsize,
    cutoff: Cutoff,
    metrics: Arc<Metrics>,
    drain: Duration,
    budget: Duration,
    /// `LOCK_WAIT_SECS + POOL_TIMEOUT_SECS`: the longest a request waits before its work starts.
    longest_wait: Duration,
}

#[derive(Clone, Copy)]
struct Stopping {
    at: Instant,
    in_flight: usize,
}

impl Shutdown {
    /// For the instance of `state`: its queues' cutoff, its metrics, `DRAIN_SECS` and
    /// `SHUTDOWN_TIMEOUT_SECS`.
    pub fn new(state: &AppState) -> Self {
        Self {
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            stopped_accepting: AtomicBool::new(false),
            stopping: Mutex::new(None),
            answered_since_stop: AtomicUsize::new(0),
            cutoff: state.locks.cutoff().clone(),
            metrics: Arc::clone(&state.metrics),
            drain: state.config.drain,
            budget: state.config.shutdown_timeout,
            longest_wait: state.config.lock_wait + state.config.pool_timeout,
        }
    }

    /// From a stop signal on: `/ready` answers 503 `draining`.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.metrics.draining.set(1);
    }

    /// Requests being served now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Notes that accepting stops now; the requests in flight at this moment.
    fn stop_accepting(&self) -> usize {
        self.stopped_accepting.store(true, Ordering::Relaxed);
        let in_flight = self.in_flight();
        *self.stopping.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Stopping { at: Instant::now(), in_flight });
        in_flight
    }

    /// The log line of a stopped instance: how the requests in flight at the stop ended.
    pub fn log_stopped(&self) {
        let stopping = *self.stopping.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(Stopping { at, in_flight }) = stopping else { return };
        let answered = self.answered_since_stop.load(Ordering::Relaxed);
        log::info!(
            "stopped {:.1} s after accepting stopped: {answered} of the {in_flight} request(s) in flight \
             then were answered, {} unanswered (their clients left, or SHUTDOWN_TIMEOUT_SECS ran out); \
             {} turned away 503 draining while queued for a lock",
            at.elapsed().as_secs_f64(),
            in_flight.saturating_sub(answered),
            self.cutoff.turned_away(),
        );
    }

    /// Counts one request in flight until it is answered or dropped.
    fn serving(&self) -> Serving<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Serving { shutdown: self, answered: false }
    }
}

/// One request in flight ([`Shutdown::serving`]).
struct Serving<'a> {
    shutdown: &'a Shutdown,
    answered: bool,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.shutdown.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.answered && self.shutdown.stopped_accepting.load(Ordering::Relaxed) {
            self.shutdown.answered_since_stop.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Middleware around every request: counts it in flight, and while the instance drains closes
/// its connection after the answer (`Connection: close`), so that a client or a proxy opens a
/// new one, which the load balancer sends elsewhere, rather than keep this one for later.
pub async fn track<B: MessageBody>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let Some(shutdown) = req.app_data::<web::Data<Shutdown>>().cloned() else {
        return next.call(req).await;
    };
    let mut serving = shutdown.serving();
    let mut answer = next.call(req).await;
    serving.answered = true;
    if let Ok(response) = &mut answer
        && shutdown.is_draining()
    {
        response.response_mut().head_mut().set_connection_type(ConnectionType::Close);
    }
    answer
}

/// `/health` and `/ready`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health)).route("/ready", web::get().to(ready));
}

/// Liveness: the process serves. Nothing else is looked at.
async fn health() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// Readiness: not draining, and the database answers a ping.
async fn ready(state: web::Data<AppState>, shutdown: web::Data<Shutdown>) -> HttpResponse {
    if shutdown.is_draining() {
        return not_ready(1, serde_json::json!({"status": "draining"}));
    }
    let database_ok = state
        .off_executor
        .with_pool(|pool| {
            use diesel::r2d2::R2D2Connection;
            // A cached `SELECT 1`, one round trip; `None` when no connection was had at all.
            let ask = || pool.get().ok().map(|mut c| c.ping().is_ok());
            Ok::<_, actix_web::error::BlockingError>(match ask() {
                // That connection was dead (and is discarded now): ask once more on another.
                Some(false) => ask() == Some(true),
                answer => answer == Some(true),
            })
        })
        .await
        .unwrap_or(false);
    match (database_ok, shutdown.is_draining()) {
        // A signal came during the ping: draining wins.
        (_, true) => not_ready(1, serde_json::json!({"status": "draining"})),
        (true, false) => HttpResponse::Ok().json(serde_json::json!({"status": "ready", "database": "ok"})),
        (false, false) => {
            not_ready(2, serde_json::json!({"status": "unavailable", "database": "unreachable"}))
        }
    }
}

fn not_ready(retry_after: u32, body: serde_json::Value) -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .insert_header((header::RETRY_AFTER, retry_after.to_string()))
        .json(body)
}

/// When, after accepting stopped, the requests still queued in memory are turned away: a second
/// before `budget` runs out, or half-way through a budget of under two seconds. actix looks at
/// its connections once a second and closes what is left at the first look past the budget;
/// answering a queued request takes only the writing of a short 503, so a second is plenty.
pub fn cut_at(budget: Duration) -> Duration {
    budget.saturating_sub(Duration::from_secs(1).min(budget / 2))
}

/// Waits for stop signals and drains the instance `server` serves (see the module's
/// documentation); returns once the server has stopped.
pub async fn on_signals(shutdown: Arc<Shutdown>, server: ServerHandle) {
    if shutdown.budget <= shutdown.longest_wait {
        log::warn!(
            "SHUTDOWN_TIMEOUT_SECS is not above LOCK_WAIT_SECS + POOL_TIMEOUT_SECS: on a stop, a request \
             still waiting for its lock or its connection when the time runs out is answered 503 \
             draining, or cut off"
        );
    }
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => {
            log::error!("cannot listen for stop signals ({e}): a SIGTERM will end this process undrained");
            return;
        }
    };
    let first = signals.next().await;
    shutdown.start_draining();
    let drain = shutdown.drain;
    log::info!(
        "{first} received: draining; /ready answers 503 from now on, and requests are served as usual \
         for {} s (DRAIN_SECS) while the load balancer takes this instance out. A second signal stops \
         accepting at once.",
        drain.as_secs()
    );
    if !drain.is_zero() {
        let mut over = std::pin::pin!(actix_web::rt::time::sleep(drain));
        let second = std::future::poll_fn(|cx| match over.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => signals.poll_next(cx).map(Some),
        })
        .await;
        if let Some(second) = second {
            log::info!("{second} received again: skipping the rest of DRAIN_SECS");
        }
    }
    let in_flight = shutdown.stop_accepting();
    let budget = shutdown.budget;
    log::info!(
        "not accepting connections any more; {in_flight} request(s) in flight, to be finished within \
         {} s (SHUTDOWN_TIMEOUT_SECS); idle connections are closed",
        budget.as_secs()
    );
    let stopped = server.stop(true);
    let cut = {
        let shutdown = Arc::clone(&shutdown);
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(cut_at(budget)).await;
            let (in_flight, queued) = (shutdown.in_flight(), shutdown.cutoff.turned_away());
            shutdown.cutoff.cut();
            log::warn!(
                "SHUTDOWN_TIMEOUT_SECS nearly spent with {in_flight} request(s) still in flight: those \
                 queued in memory for a lock are answered 503 draining now ({queued} so far); those at \
                 the database finish or are cut off when it runs out"
            );
        })
    };
    let more = actix_web::rt::spawn(async move {
        loop {
            let again = signals.next().await;
            log::info!("{again} received: already stopping, the requests in flight are being finished");
        }
    });
    stopped.await;
    cut.abort();
    more.abort();
}

/// SIGTERM and SIGINT (Ctrl-C). The app is built for Unix only (`batch::lockfile`).
struct Signals {
    term: actix_web::rt::signal::unix::Signal,
    int: actix_web::rt::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use actix_web::rt::signal::unix::{SignalKind, signal};
        Ok(Self { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> Poll<&'static str> {
        if self.term.poll_recv(cx).is_ready() {
            return Poll::Ready("SIGTERM");
        }
        self.int.poll_recv(cx).map(|_| "SIGINT")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_are_turned_away_a_second_before_the_budget_or_half_way_through_a_short_one() {
        assert_eq!(cut_at(Duration::from_secs(30)), Duration::from_secs(29));
        assert_eq!(cut_at(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(cut_at(Duration::from_secs(1)), Duration::from_millis(500));
    }
}
