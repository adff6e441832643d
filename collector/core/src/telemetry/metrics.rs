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

enum Series {
    Counter(Counter),
    Gauge(Gauge),
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
                Series::Gauge(_) => None,
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
                Series::Counter(_) => None,
            },
        )
        .unwrap_or_default()
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
                Some(Series::Gauge(_)) => "gauge",
                _ => "counter",
            };
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, series) in &family.series {
                let value = match series {
                    Series::Counter(c) => c.get().to_string(),
                    Series::Gauge(g) => g.get().to_string(),
                };
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let rendered: Vec<String> = labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                        .collect();
                    let _ = writeln!(out, "{name}{{{}}} {value}", rendered.join(","));
                }
            }
        }
        out
    }

    /// The current value of a counter or gauge, for tests and status pages.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<i64> {
        let families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let family = families.get(name)?;
        family.series.iter().find_map(|(ls, s)| {
            let all = labels
                .iter()
                .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v));
            all.then(|| match s {
                Series::Counter(c) => i64::try_from(c.get()).unwrap_or(i64::MAX),
                Series::Gauge(g) => g.get(),
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
}
