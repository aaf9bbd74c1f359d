//! The one door from async code to the database, and to any other blocking work.
//!
//! diesel, `pool.get()`, a named lock's wait and password hashing all block their thread. On
//! the async executor that would stall every request the worker serves, so they run on actix's
//! blocking threads, and only through an [`OffExecutor`]: the single place that sends work
//! there (`tests/layers.rs` fails on any other `web::block` or `spawn_blocking`).
//!
//! A blocking thread serves every instance of the process in turn (the tests start several in
//! one), so it cannot know whose metrics a piece of work should count in. An `OffExecutor` is
//! made with its instance's metrics and records the work into them, whichever thread runs it:
//! there is no call that forgets to, and no way to count one instance's waits in another's.

use std::sync::Arc;

use actix_web::error::BlockingError;

use super::{CheckoutError, DbConn, DbPool};
use crate::metrics::Metrics;

/// An instance's way to its database and its blocking threads: the work never runs on the
/// async executor, and records into the instance's metrics.
#[derive(Clone)]
pub struct OffExecutor {
    pool: DbPool,
    metrics: Arc<Metrics>,
}

impl OffExecutor {
    /// The door of the instance whose pool and metrics these are.
    pub fn new(pool: DbPool, metrics: Arc<Metrics>) -> Self {
        Self { pool, metrics }
    }

    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    /// `work` on a blocking thread, recording into this instance's metrics. A hop that fails
    /// (the blocking pool shut down, or `work` panicked) arrives as the caller's own error.
    pub async fn run<T, E>(&self, work: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static + From<BlockingError>,
    {
        let metrics = Arc::clone(&self.metrics);
        // The one call that sends work to the blocking threads.
        actix_web::web::block(move || crate::metrics::recording_into(metrics, work)).await?
    }

    /// `work` with the pool, on a blocking thread: for a service that checks its connections
    /// out itself (one held under a named lock for the whole work, or a fresh one for each
    /// attempt of a retried transaction).
    pub async fn with_pool<T, E>(
        &self,
        work: impl FnOnce(&DbPool) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static + From<BlockingError>,
    {
        let pool = self.pool.clone();
        self.run(move || work(&pool)).await
    }

    /// `work` with a connection checked out on the blocking thread (within
    /// `POOL_TIMEOUT_SECS`, or at once while the server is down) and given back after it. A
    /// failed checkout arrives as the caller's own error, which answers it (503 `busy` or
    /// `unavailable`).
    pub async fn with_conn<T, E>(
        &self,
        work: impl FnOnce(&mut DbConn) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static + From<CheckoutError> + From<BlockingError>,
    {
        self.with_pool(move |pool| work(&mut *pool.get()?)).await
    }
}
