//! Telemetry (features `metrics` and `tracing`): real requests through the retry layer, the
//! metrics read back from `metrics-util`'s `DebuggingRecorder` and the spans from a small
//! capturing `tracing` subscriber.
//!
//! Each test installs its recorder or subscriber for its own thread only (a current-thread
//! runtime inside `metrics::with_local_recorder` / `tracing::subscriber::with_default`), so the
//! tests of this binary run at once without seeing each other's counts.

use test_support as support;

mod breaker;
mod loopback;
mod pacer;
mod spans;

use ::metrics::{Key, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use std::collections::HashMap;
use std::future::Future;

/// A series: its kind, name and labels.
type Series = (MetricKind, String, Vec<(String, String)>);

/// One snapshot of the recorder: each metric by its name and labels. Counters and gauges read
/// as the change since the previous snapshot (the recorder resets them when it reads them).
#[derive(Debug)]
struct Readings {
    values: HashMap<Series, DebugValue>,
    units: HashMap<String, (Option<Unit>, bool)>,
}

impl Readings {
    fn take(snapshotter: &Snapshotter) -> Self {
        let mut values = HashMap::new();
        let mut units = HashMap::new();
        for (key, unit, description, value) in snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            units.insert(
                key.name().to_owned(),
                (unit, description.is_some_and(|d| !d.is_empty())),
            );
            values.insert((kind, key.name().to_owned(), labels(&key)), value);
        }
        Self { values, units }
    }

    fn get(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>();
        self.values.get(&(kind, name.to_owned(), labels))
    }

    /// A counter's value; 0 if it was never incremented.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(MetricKind::Counter, name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            None => 0,
            Some(other) => panic!("{name} is not a counter: {other:?}"),
        }
    }

    /// A gauge's change since the previous snapshot; 0 if it never moved.
    fn gauge(&self, name: &str) -> f64 {
        self.gauge_of(name, &[])
    }

    /// The same for the series of `name` with `labels`.
    fn gauge_of(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.get(MetricKind::Gauge, name, labels) {
            Some(DebugValue::Gauge(v)) => v.into_inner(),
            None => 0.0,
            Some(other) => panic!("{name} is not a gauge: {other:?}"),
        }
    }

    /// A histogram's recorded values, sorted; empty if it has none.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut values: Vec<f64> = match self.get(MetricKind::Histogram, name, labels) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|x| x.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("{name} is not a histogram: {other:?}"),
        };
        values.sort_by(f64::total_cmp);
        values
    }

    /// Every series of metric `name` with a non-zero value, as `labels => value` text (for
    /// assertion messages and "nothing else was recorded" checks).
    fn series(&self, name: &str) -> Vec<String> {
        let mut series: Vec<String> = self
            .values
            .iter()
            .filter(|((_, n, _), value)| n == name && !is_zero(value))
            .map(|((_, _, labels), value)| format!("{labels:?} => {value:?}"))
            .collect();
        series.sort();
        series
    }
}

fn is_zero(value: &DebugValue) -> bool {
    match value {
        DebugValue::Counter(n) => *n == 0,
        DebugValue::Gauge(v) => v.into_inner() == 0.0,
        DebugValue::Histogram(v) => v.is_empty(),
    }
}

fn labels(key: &Key) -> Vec<(String, String)> {
    key.labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect()
}

/// Runs `test` on a current-thread runtime (real time, for loopback sockets) with a fresh
/// `DebuggingRecorder` as this thread's recorder; `test` gets its snapshotter.
fn with_recorder<F, Fut>(paused: bool, test: F)
where
    F: FnOnce(Snapshotter) -> Fut,
    Fut: Future<Output = ()>,
{
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(paused)
        .build()
        .expect("a runtime");
    ::metrics::with_local_recorder(&recorder, || runtime.block_on(test(snapshotter)));
}
