//! `/admin/metrics`: the lock metrics of `/metrics`, drawn for a person. Server-rendered SVG (no
//! script, no chart library): one row per lock family and scope, a bar per histogram bucket,
//! and the counts an operator acts on next to them.
//!
//! It reads this instance's registry, so it shows this instance only; `/metrics` is what a
//! Prometheus server scrapes from every instance.

use prometheus::proto::{Metric, MetricFamily};

use crate::i18n::Lang;

/// One histogram series (a family and scope of waits or holds, or the pool checkouts), ready
/// to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub count: u64,
    /// Mean, and the upper bounds of the buckets holding the 50th and 99th percentiles.
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    /// (upper bound, observations in this bucket alone); the last bound is +∞.
    pub buckets: Vec<(f64, u64)>,
}

/// A bar of a series' SVG row, geometry computed here so the template stays declarative.
pub struct Bar {
    pub x: u32,
    pub y: u32,
    pub height: u32,
    pub title: String,
}

/// A labelled count.
pub struct Count {
    pub label: String,
    pub value: f64,
}

/// Everything the page shows.
pub struct Charts {
    pub waits: Vec<Series>,
    pub holds: Vec<Series>,
    pub checkouts: Vec<Series>,
    pub counts: Vec<Count>,
    /// Whether this instance records at all (`METRICS`).
    pub recording: bool,
}

/// Height of a series' bars at their tallest, and the width of one bar.
pub const BAR_MAX: u32 = 40;
pub const BAR_WIDTH: u32 = 22;

impl Series {
    /// The bars of this series, the tallest bucket `BAR_MAX` high, their titles in `lang`.
    pub fn bars(&self, lang: Lang) -> Vec<Bar> {
        let tallest = self.buckets.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, (bound, n))| {
                // Scaled, but never invisible: a bucket with one observation still shows.
                let height = u32::try_from(n * u64::from(BAR_MAX) / tallest).unwrap_or(BAR_MAX);
                let height = if *n > 0 { height.max(2) } else { 0 };
                Bar {
                    x: u32::try_from(i).unwrap_or(0) * (BAR_WIDTH + 2),
                    y: BAR_MAX - height,
                    height,
                    title: lang
                        .t_with("admin.metrics.bar", [("count", n.to_string()), ("bound", seconds(*bound))]),
                }
            })
            .collect()
    }
}

/// The bucket bounds, as the axis under the bars shows them: the centre of each bar, and its
/// bound as a number and a unit, drawn on two lines so that a bar's width holds them.
pub fn axis(series: &Series) -> Vec<(u32, String, &'static str)> {
    series
        .buckets
        .iter()
        .enumerate()
        .map(|(i, (bound, _))| {
            let (number, unit) = short(*bound);
            (u32::try_from(i).unwrap_or(0) * (BAR_WIDTH + 2) + BAR_WIDTH / 2, number, unit)
        })
        .collect()
}

/// Reads the registry's families into charts, their words in `lang`.
pub fn charts(families: &[MetricFamily], lang: Lang) -> Charts {
    let family = |name: &str| families.iter().find(|f| f.name() == format!("haita_{name}"));
    let histograms = |name: &str, labels: &[&str]| -> Vec<Series> {
        let mut all: Vec<Series> = family(name)
            .map(|f| f.get_metric().iter().map(|m| series(m, labels, lang)).filter(|s| s.count > 0).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.label.cmp(&b.label));
        all
    };
    let mut counts = Vec::new();
    // Each count's words are `admin.metrics.count.{name}` in the texts; its labels (the
    // answer, the cause) are the series' own values, as `/metrics` writes them.
    for name in [
        "named_lock_acquisitions_total",
        "unavailable_answers_total",
        "transaction_retries_total",
        "transaction_gave_up_total",
        "lock_waiters_refused_total",
        "pool_checkout_failures_total",
        "idempotent_replays_total",
        "pool_connections",
        "pool_idle_connections",
        "pool_max_connections",
        "lock_waiters",
        "lock_waiters_budget",
    ] {
        let Some(f) = family(name) else { continue };
        let what = lang.t(&format!("admin.metrics.count.{name}")).into_owned();
        for m in f.get_metric() {
            let labels: Vec<String> = m.get_label().iter().map(|l| l.value().to_string()).collect();
            let label =
                if labels.is_empty() { what.to_string() } else { format!("{what}: {}", labels.join(", ")) };
            let value = if name.ends_with("_total") {
                m.get_counter().get_value()
            } else {
                m.get_gauge().get_value()
            };
            counts.push(Count { label, value });
        }
    }
    Charts {
        waits: histograms("lock_wait_seconds", &["family", "scope"]),
        holds: histograms("lock_hold_seconds", &["family", "scope"]),
        checkouts: histograms("pool_checkout_seconds", &[]),
        counts,
        recording: crate::metrics::enabled(),
    }
}

fn series(metric: &Metric, labels: &[&str], lang: Lang) -> Series {
    let h = metric.get_histogram();
    let label = labels
        .iter()
        .filter_map(|name| metric.get_label().iter().find(|l| l.name() == *name).map(|l| l.value()))
        .collect::<Vec<_>>()
        .join(" · ");
    let count = h.get_sample_count();
    let mut buckets = Vec::new();
    let mut below = 0;
    for b in h.get_bucket() {
        buckets.push((b.upper_bound(), b.cumulative_count().saturating_sub(below)));
        below = b.cumulative_count();
    }
    buckets.push((f64::INFINITY, count.saturating_sub(below)));
    let percentile = |q: f64| {
        // The smallest bound with at least q of the observations at or below it.
        let wanted = (q * count as f64).ceil() as u64;
        let mut seen = 0;
        buckets
            .iter()
            .find(|(_, n)| {
                seen += n;
                seen >= wanted.max(1)
            })
            .map_or(f64::NAN, |(bound, _)| *bound)
    };
    Series {
        label: if label.is_empty() { lang.t("admin.metrics.pool_checkout").into_owned() } else { label },
        count,
        mean: if count == 0 { f64::NAN } else { h.get_sample_sum() / count as f64 },
        p50: percentile(0.50),
        p99: percentile(0.99),
        buckets,
    }
}

/// A duration in seconds as a person reads it: µs, ms or s (unit symbols, the same in every
/// language); beyond every bound, ∞.
pub fn seconds(value: f64) -> String {
    if value.is_nan() {
        "–".into()
    } else if value.is_infinite() {
        "∞".into()
    } else if value < 0.001 {
        format!("{:.0} µs", value * 1e6)
    } else if value < 1.0 {
        format!("{:.1} ms", value * 1e3)
    } else {
        format!("{value:.1} s")
    }
}

/// A bucket bound for the axis: the number, as short as it can be, and its unit written out
/// ("10" and "ms": a bare "10m" reads as minutes). The last bound, +∞, has no unit.
fn short(bound: f64) -> (String, &'static str) {
    if bound.is_infinite() {
        ("∞".into(), "")
    } else if bound < 0.001 {
        (format!("{}", (bound * 1e6).round()), "µs")
    } else if bound < 1.0 {
        (format!("{}", (bound * 1e4).round() / 10.0), "ms")
    } else {
        (format!("{bound}"), "s")
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{HistogramOpts, HistogramVec, Registry};

    use super::*;

    fn registry_with(observations: &[f64]) -> Vec<MetricFamily> {
        let registry = Registry::new_custom(Some("haita".into()), None).expect("registry");
        let waits = HistogramVec::new(
            HistogramOpts::new("lock_wait_seconds", "test").buckets(vec![0.001, 0.01, 0.1]),
            &["family", "scope"],
        )
        .expect("histogram");
        registry.register(Box::new(waits.clone())).expect("register");
        for &seconds in observations {
            waits.with_label_values(&["named", "book"]).observe(seconds);
        }
        registry.gather()
    }

    #[test]
    fn buckets_are_counted_apart_and_percentiles_are_bucket_bounds() {
        // 60 fast, 39 medium, 1 slow beyond every bound.
        let mut observed = vec![0.0005; 60];
        observed.extend([0.005; 39]);
        observed.push(5.0);
        let charts = charts(&registry_with(&observed), Lang::En);
        let waits = &charts.waits[0];
        assert_eq!(waits.label, "named · book");
        assert_eq!(waits.count, 100);
        assert_eq!(waits.buckets, vec![(0.001, 60), (0.01, 39), (0.1, 0), (f64::INFINITY, 1)]);
        assert_eq!((waits.p50, waits.p99), (0.001, 0.01));
        let heights: Vec<u32> = waits.bars(Lang::En).iter().map(|b| b.height).collect();
        assert_eq!(heights, vec![BAR_MAX, 26, 0, 2], "scaled to the tallest, a single one still shows");
    }

    #[test]
    fn series_nobody_observed_are_left_out() {
        assert!(charts(&registry_with(&[]), Lang::En).waits.is_empty());
    }

    #[test]
    fn durations_read_as_a_person_reads_them() {
        assert_eq!(seconds(0.000_25), "250 µs");
        assert_eq!(seconds(0.0123), "12.3 ms");
        assert_eq!(seconds(2.5), "2.5 s");
        assert_eq!(short(0.0005), ("500".into(), "µs"));
        assert_eq!(short(0.0025), ("2.5".into(), "ms"));
        assert_eq!(short(0.01), ("10".into(), "ms"));
        assert_eq!(short(60.0), ("60".into(), "s"));
        assert_eq!(short(f64::INFINITY), ("∞".into(), ""));
    }
}
