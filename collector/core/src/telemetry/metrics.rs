//! A small metrics registry: families of label sets, each an atomic, rendered on demand.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn add(&self, v: i64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A gauge read when metrics are rendered, from whatever its owner set as its source (a
/// queue's oldest entry, say); 0 until then. Seconds and other fractions fit, unlike
/// [`Gauge`].
#[derive(Clone, Default)]
pub struct ComputedGauge(Arc<Mutex<Option<GaugeSource>>>);

type GaugeSource = Arc<dyn Fn() -> f64 + Send + Sync>;

impl ComputedGauge {
    /// Reads `source` from now on, in place of the one before.
    pub fn set_source(&self, source: impl Fn() -> f64 + Send + Sync + 'static) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(source));
    }

    pub fn get(&self) -> f64 {
        // The source runs outside the lock, so it may take locks of its own.
        let source = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        source.map_or(0.0, |f| f())
    }
}

impl std::fmt::Debug for ComputedGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ComputedGauge({})", self.get())
    }
}

/// Upper bounds, in seconds, of the latency histograms' buckets: from a millisecond to
/// an hour, for both an export call and how late data arrives.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
];

/// A Prometheus histogram: counts per bucket (not cumulative; rendered cumulative), the
/// sum of what was observed, and how many observations.
#[derive(Clone, Debug)]
pub struct Histogram(Arc<HistogramInner>);

#[derive(Debug)]
struct HistogramInner {
    bounds: &'static [f64],
    /// One per bound, and one past the last (`+Inf`).
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum, in microseconds.
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new(LATENCY_BUCKETS)
    }
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram(Arc::new(HistogramInner {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }))
    }

    /// The bucket an observation of `seconds` falls in.
    pub fn bucket_of(&self, seconds: f64) -> usize {
        self.0
            .bounds
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(self.0.bounds.len())
    }

    pub fn observe(&self, seconds: f64) {
        self.observe_many(seconds, 1);
    }

    /// `n` observations of `seconds` each.
    pub fn observe_many(&self, seconds: f64, n: u64) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        let i = self.bucket_of(seconds);
        self.0.buckets[i].fetch_add(n, Ordering::Relaxed);
        self.0.count.fetch_add(n, Ordering::Relaxed);
        let micros = (seconds * 1e6).min(u64::MAX as f64) as u64;
        add_saturating(&self.0.sum_micros, micros.saturating_mul(n));
    }

    /// Adds counts gathered per bucket (as [`Histogram::bucket_of`] numbers them) with
    /// their summed seconds: one update for many observations.
    pub fn add_counts(&self, counts: &[u64], sum_seconds: f64) {
        let mut total = 0;
        for (bucket, &n) in self.0.buckets.iter().zip(counts) {
            if n > 0 {
                bucket.fetch_add(n, Ordering::Relaxed);
                total += n;
            }
        }
        self.0.count.fetch_add(total, Ordering::Relaxed);
        let micros = (sum_seconds.max(0.0) * 1e6).min(u64::MAX as f64) as u64;
        add_saturating(&self.0.sum_micros, micros);
    }

    /// How many buckets there are (bounds plus `+Inf`).
    pub fn buckets(&self) -> usize {
        self.0.buckets.len()
    }

    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }

    pub fn sum_seconds(&self) -> f64 {
        self.0.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Observations at or below `seconds` (at a bucket bound), as Prometheus counts them.
    pub fn count_at_or_below(&self, seconds: f64) -> u64 {
        let last = self.bucket_of(seconds);
        self.0.buckets[..=last]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}

/// Adds without wrapping: a sender whose times are in the wrong unit makes ages of
/// decades, and a sum that wrapped would read as a reset.
fn add_saturating(a: &AtomicU64, v: u64) {
    let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(old.saturating_add(v))
    });
}

enum Series {
    Counter(Counter),
    Gauge(Gauge),
    Computed(ComputedGauge),
    Histogram(Histogram),
}

struct Family {
    help: &'static str,
    series: BTreeMap<Vec<(&'static str, String)>, Series>,
}

/// The collector's own metrics; cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry {
    families: Arc<Mutex<BTreeMap<&'static str, Family>>>,
}

impl Telemetry {
    pub fn new() -> Self {
        Self::default()
    }

    fn series<T>(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        make: impl FnOnce() -> Series,
        pick: impl Fn(&Series) -> Option<T>,
    ) -> Option<T> {
        let mut labels: Vec<(&'static str, String)> =
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        labels.sort();
        let mut families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let family = families.entry(name).or_insert_with(|| Family {
            help,
            series: BTreeMap::new(),
        });
        pick(family.series.entry(labels).or_insert_with(make))
    }

    /// The counter `name` with these labels, made on first use. Counter names end in
    /// `_total`, as Prometheus exporters write them.
    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Counter {
        self.series(
            name,
            help,
            labels,
            || Series::Counter(Counter::default()),
            |s| match s {
                Series::Counter(c) => Some(c.clone()),
                _ => None,
            },
        )
        .unwrap_or_default()
    }

    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Gauge {
        self.series(
            name,
            help,
            labels,
            || Series::Gauge(Gauge::default()),
            |s| match s {
                Series::Gauge(g) => Some(g.clone()),
                _ => None,
            },
        )
        .unwrap_or_default()
    }

    /// The gauge `name` with these labels, read from its source when rendered.
    pub fn computed_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> ComputedGauge {
        self.series(
            name,
            help,
            labels,
            || Series::Computed(ComputedGauge::default()),
            |s| match s {
                Series::Computed(g) => Some(g.clone()),
                _ => None,
            },
        )
        .unwrap_or_default()
    }

    /// The histogram `name` (in seconds, buckets [`LATENCY_BUCKETS`]) with these labels,
    /// made on first use. Names end in `_seconds`.
    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Histogram {
        self.series(
            name,
            help,
            labels,
            || Series::Histogram(Histogram::new(LATENCY_BUCKETS)),
            |s| match s {
                Series::Histogram(h) => Some(h.clone()),
                _ => None,
            },
        )
        .unwrap_or_default()
    }

    /// The histogram `name` whose labels include `labels`, for tests and status pages.
    pub fn histogram_of(&self, name: &str, labels: &[(&str, &str)]) -> Option<Histogram> {
        self.find(name, labels, |s| match s {
            Series::Histogram(h) => Some(h.clone()),
            _ => None,
        })
    }

    /// What `pick` takes from the first series of `name` whose labels include `labels`.
    fn find<T>(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        pick: impl Fn(&Series) -> Option<T>,
    ) -> Option<T> {
        let families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let family = families.get(name)?;
        family.series.iter().find_map(|(ls, s)| {
            let all = labels
                .iter()
                .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v));
            if all { pick(s) } else { None }
        })
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        for (name, family) in families.iter() {
            let kind = match family.series.values().next() {
                Some(Series::Gauge(_) | Series::Computed(_)) => "gauge",
                Some(Series::Histogram(_)) => "histogram",
                _ => "counter",
            };
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, series) in &family.series {
                let rendered: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let braces = |extra: Option<String>| -> String {
                    let all: Vec<&str> = rendered
                        .iter()
                        .map(String::as_str)
                        .chain(extra.as_deref())
                        .collect();
                    if all.is_empty() {
                        String::new()
                    } else {
                        format!("{{{}}}", all.join(","))
                    }
                };
                let value = match series {
                    Series::Counter(c) => c.get().to_string(),
                    Series::Gauge(g) => g.get().to_string(),
                    Series::Computed(g) => g.get().to_string(),
                    Series::Histogram(h) => {
                        let mut cumulative = 0;
                        for (i, bucket) in h.0.buckets.iter().enumerate() {
                            cumulative += bucket.load(Ordering::Relaxed);
                            let le =
                                h.0.bounds
                                    .get(i)
                                    .map_or_else(|| "+Inf".to_owned(), f64::to_string);
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {cumulative}",
                                braces(Some(format!("le=\"{le}\"")))
                            );
                        }
                        let _ = writeln!(out, "{name}_sum{} {}", braces(None), h.sum_seconds());
                        // The `+Inf` bucket's count, read once, so the two always agree.
                        let _ = writeln!(out, "{name}_count{} {cumulative}", braces(None));
                        continue;
                    }
                };
                let _ = writeln!(out, "{name}{} {value}", braces(None));
            }
        }
        out
    }

    /// The current value of a counter or gauge, for tests and status pages.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<i64> {
        self.find(name, labels, |s| {
            Some(match s {
                Series::Counter(c) => i64::try_from(c.get()).unwrap_or(i64::MAX),
                Series::Gauge(g) => g.get(),
                // Whole units: tests and status pages read seconds.
                Series::Computed(g) => g.get() as i64,
                Series::Histogram(h) => i64::try_from(h.count()).unwrap_or(i64::MAX),
            })
        })
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let t = Telemetry::new();
        t.counter("otelcol_x_total", "Things.", &[("receiver", "otlp")])
            .add(3);
        t.counter("otelcol_x_total", "Things.", &[("receiver", "otlp")])
            .add(2);
        t.counter("otelcol_x_total", "Things.", &[("receiver", "pprof\"q")])
            .add(1);
        t.gauge("otelcol_q", "Queue.", &[]).set(7);
        assert_eq!(
            t.render(),
            "# HELP otelcol_q Queue.\n# TYPE otelcol_q gauge\notelcol_q 7\n\
             # HELP otelcol_x_total Things.\n# TYPE otelcol_x_total counter\n\
             otelcol_x_total{receiver=\"otlp\"} 5\notelcol_x_total{receiver=\"pprof\\\"q\"} 1\n"
        );
        assert_eq!(t.value("otelcol_x_total", &[("receiver", "otlp")]), Some(5));
    }

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let t = Telemetry::new();
        let h = t.histogram("otelcol_d_seconds", "Durations.", &[("exporter", "otlp")]);
        h.observe(0.003);
        h.observe(0.003);
        h.observe(7.0);
        h.observe_many(5000.0, 2);
        let text = t.render();
        assert!(
            text.contains("# TYPE otelcol_d_seconds histogram\n"),
            "{text}"
        );
        for line in [
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"0.001\"} 0",
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"0.005\"} 2",
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"5\"} 2",
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"10\"} 3",
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"3600\"} 3",
            "otelcol_d_seconds_bucket{exporter=\"otlp\",le=\"+Inf\"} 5",
            "otelcol_d_seconds_sum{exporter=\"otlp\"} 10007.006",
            "otelcol_d_seconds_count{exporter=\"otlp\"} 5",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        let again = t
            .histogram_of("otelcol_d_seconds", &[("exporter", "otlp")])
            .expect("there");
        assert_eq!(again.count(), 5);
        assert_eq!(again.count_at_or_below(5.0), 2);
        // Counts gathered per bucket join in one update.
        let mut counts = vec![0; again.buckets()];
        counts[again.bucket_of(0.05)] += 4;
        again.add_counts(&counts, 0.2);
        assert_eq!(again.count_at_or_below(0.05), 6);
    }
}
