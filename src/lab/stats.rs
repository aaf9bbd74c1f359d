//! The one latency statistic the race and both benches print.

use std::time::Duration;

/// Nearest-rank percentile of sorted latencies, in milliseconds: the smallest latency with at
/// least `p` % of the samples at or below it (0 when there are none).
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&ms, 50.0), 50.0);
        assert_eq!(percentile_ms(&ms, 99.0), 99.0);
        assert_eq!(percentile_ms(&ms[..1], 99.0), 1.0);
        assert_eq!(percentile_ms(&ms[..10], 99.0), 10.0);
        assert_eq!(percentile_ms(&[], 50.0), 0.0);
    }
}
