//! Waiting for what a test means, not for a guess at how long it takes.
//!
//! A fixed sleep before an assertion ("300 ms is enough for the clients to queue") is both slow
//! and flaky: too short on a loaded machine, where the assertion then runs before the thing it
//! is about has happened (or the scenario it sets up is not in place yet), and pure waste on an
//! idle one. These ask again and again for the condition itself — a row in the database, an
//! answer over HTTP, a lock seen waiting — until it holds, and give up only at a deadline chosen
//! far beyond any reasonable wait. Running out of it is a failure that names what was awaited,
//! never a silent fall-through into the next assertion.
//!
//! The deadline bounds a wait; it is never an assertion about how long anything took.

use std::time::{Duration, Instant};

/// How long to wait between two checks: short beside what the tests wait for, long enough not
/// to load the database or the app with the checks themselves. A check whose source must not be
/// read that often says so with the `_every` variants (see `invariants::INNODB_TRX_EVERY`).
pub const INTERVAL: Duration = Duration::from_millis(20);

/// Whether `check` comes true within `deadline`, asked at once and then every [`INTERVAL`]. For
/// a test that has to tidy up, or say more, before failing; else [`until`].
pub fn within(deadline: Duration, check: impl FnMut() -> bool) -> bool {
    within_every(deadline, INTERVAL, check)
}

/// [`within`], asking every `interval`.
pub fn within_every(deadline: Duration, interval: Duration, mut check: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + deadline;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(interval);
    }
}

/// Waits until `check` is true; panics naming `what` (what the test waited for) if it is not
/// within `deadline`. Blocks the thread: in an async test, use [`until_async`].
pub fn until(what: &str, deadline: Duration, check: impl FnMut() -> bool) {
    assert!(within(deadline, check), "waited {deadline:?} for {what}, in vain");
}

/// [`until`], asking every `interval`.
pub fn until_every(what: &str, deadline: Duration, interval: Duration, check: impl FnMut() -> bool) {
    assert!(within_every(deadline, interval, check), "waited {deadline:?} for {what}, in vain");
}

/// [`until`] for async tests: `check` may await (an HTTP request), and the wait between checks
/// yields to the test's other tasks (the clients it waits for) instead of blocking them.
pub async fn until_async(what: &str, deadline: Duration, check: impl AsyncFnMut() -> bool) {
    until_async_every(what, deadline, INTERVAL, check).await;
}

/// [`until_async`], asking every `interval`.
pub async fn until_async_every(
    what: &str,
    deadline: Duration,
    interval: Duration,
    mut check: impl AsyncFnMut() -> bool,
) {
    let give_up = Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < give_up, "waited {deadline:?} for {what}, in vain");
        actix_web::rt::time::sleep(interval).await;
    }
}
