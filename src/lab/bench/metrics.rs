//! `haita bench metrics`: what recording the lock metrics costs a booking, in process.
//!
//! End to end (`METRICS=false haita bench bookings` against the default) the difference drowns
//! in run-to-run noise on a shared machine, so this measures the recordings themselves: the ones
//! a booking request makes (its pool checkout, its turn in the queue, `GET_LOCK`'s wait and
//! outcome, the lock's hold), each with the clock reads the app makes for it, timed with
//! recording on and off. The difference is the cost; the server's CPU per booking
//! (`srv µs` in `haita bench bookings`) is what to divide it by.

use std::hint::black_box;
use std::time::Instant;

use crate::metrics::{self, Family};

/// Nanoseconds per booking's worth of recordings, with recording on and off.
pub struct Cost {
    pub on_ns: f64,
    pub off_ns: f64,
}

/// What one booking records, as `locking::queue`, `locking::named` and `db::DbPool::get` do.
fn one_booking() {
    let checkout = Instant::now();
    metrics::record(|m| m.pool_checkout_seconds.observe(checkout.elapsed().as_secs_f64()));
    let turn = Instant::now();
    metrics::waited(Family::Queue, black_box("book"), turn.elapsed());
    let asked = Instant::now();
    metrics::waited(Family::Named, black_box("book"), asked.elapsed());
    metrics::record(|m| m.named_lock_acquisitions.with_label_values(&["book", "acquired"]).inc());
    let granted = Instant::now();
    metrics::held(Family::Named, black_box("book"), granted.elapsed());
}

fn per_booking(rounds: u32) -> f64 {
    let began = Instant::now();
    for _ in 0..rounds {
        one_booking();
    }
    began.elapsed().as_nanos() as f64 / f64::from(rounds)
}

/// Times `rounds` bookings' recordings on and off, alternating, the best of five each (the
/// least disturbed by whatever else the machine runs).
pub fn run(rounds: u32) -> Cost {
    let was = metrics::enabled();
    let (mut on, mut off) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        metrics::set_enabled(true);
        on = on.min(per_booking(rounds));
        metrics::set_enabled(false);
        off = off.min(per_booking(rounds));
    }
    metrics::set_enabled(was);
    Cost { on_ns: on, off_ns: off }
}

pub fn report(cost: &Cost) -> String {
    let extra = cost.on_ns - cost.off_ns;
    let share = |server_us: f64| 100.0 * extra / (server_us * 1000.0);
    format!(
        "recordings per booking: {:.0} ns with metrics on, {:.0} ns off (clock reads only): {:.0} ns each booking\n\
         as a share of the server's CPU per booking: {:.3} % of 400 µs (spread days), {:.2} % of 50 µs (a hot, coalesced day)\n",
        cost.on_ns,
        cost.off_ns,
        extra,
        share(400.0),
        share(50.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_costs_something_and_off_records_nothing() {
        let before = metrics::METRICS.named_lock_acquisitions.with_label_values(&["book", "acquired"]).get();
        let cost = run(2_000);
        let after = metrics::METRICS.named_lock_acquisitions.with_label_values(&["book", "acquired"]).get();
        assert!(cost.on_ns > 0.0 && cost.off_ns > 0.0, "timed");
        // Five rounds on: at least that many (other tests may add more).
        assert!(after - before >= 5 * 2_000, "on records");
        assert!(report(&cost).contains("ns each booking"));
    }
}
