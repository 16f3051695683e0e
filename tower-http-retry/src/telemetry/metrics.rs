//! With the `metrics` feature: counters, a histogram and a gauge through the `metrics` facade.
//!
//! Every key is a `static` (one per label value), so recording one costs the recorder's lookup
//! and nothing else: no allocation, and no work at all while no recorder is installed.

use crate::report::{DelaySource, StopReason};
use metrics::{Key, KeyName, Label, Level, Metadata, SharedString, Unit};
use std::sync::Arc;
use std::time::Duration;

const ATTEMPTS: &str = "http_client_retry_attempts_total";
const RETRIES: &str = "http_client_retry_retries_total";
const REQUESTS: &str = "http_client_retry_requests_total";
const DELAY: &str = "http_client_retry_delay_seconds";
const BUDGET: &str = "http_client_retry_budget_withdrawals_total";
const REFUNDS: &str = "http_client_retry_budget_refunds_total";
const MODE_CHANGES: &str = "http_client_retry_pacer_mode_changes_total";
const QUEUE_DEPTH: &str = "http_client_retry_pacer_queue_depth";
const PACED: &str = "http_client_retry_pacer_endpoints";
const CIRCUITS: &str = "http_client_retry_circuits";
const CIRCUIT_TRANSITIONS: &str = "http_client_retry_circuit_transitions_total";
const CIRCUIT_REJECTIONS: &str = "http_client_retry_circuit_rejections_total";
const HEDGES: &str = "http_client_retry_hedge_events_total";
const LIMIT: &str = "http_client_retry_concurrency_limit";
const IN_FLIGHT: &str = "http_client_retry_concurrency_in_flight";
const NO_LOAD: &str = "http_client_retry_concurrency_no_load_seconds";

static METADATA: Metadata<'static> =
    Metadata::new("tower_http_retry", Level::INFO, Some(module_path!()));

/// Describes this crate's metrics (unit and help text) to the recorder installed now; call it
/// once after installing one (a Prometheus exporter prints them as `# HELP` lines). Recording
/// does not need it.
///
/// | name | type | unit | labels | what |
/// |---|---|---|---|---|
/// | `http_client_retry_attempts_total` | counter | attempts | | attempts sent, first attempts included |
/// | `http_client_retry_retries_total` | counter | retries | `source` | attempts after the first, by what the wait before them came from: `backoff`, `retry_after`, `retry_after_clamped`, `paced`, `refused` |
/// | `http_client_retry_requests_total` | counter | requests | `reason` | finished requests, by [`StopReason`] (`success`, `attempts_exhausted`, ...) |
/// | `http_client_retry_delay_seconds` | histogram | seconds | `source` | realised waits before retries (an aborted one with the time it lasted) |
/// | `http_client_retry_budget_withdrawals_total` | counter | tokens | `result`: `granted`, `denied` | retries the budget was asked for |
/// | `http_client_retry_budget_refunds_total` | counter | tokens | | granted tokens given back (the retry was not sent) |
/// | `http_client_retry_pacer_mode_changes_total` | counter | changes | `mode`: `open`, `probing`, `ramping`, `paused` | an endpoint entered this [`PacingMode`](crate::pacing::PacingMode) |
/// | `http_client_retry_pacer_queue_depth` | gauge | requests | | requests waiting in pacing queues now, all endpoints |
/// | `http_client_retry_pacer_endpoints` | gauge | endpoints | `mode`: `probing`, `ramping`, `paused` | endpoints paced now, by mode (open ones are not counted; one that recovered and went idle opens by itself within `idle_to_open` of its ramp ending) |
/// | `http_client_retry_circuits` | gauge | circuits | `state`: `closed`, `open`, `half_open` | circuit breakers by state now (a keyed layer's one per authority it keeps; an open one whose time is up counts as open until its next call) |
/// | `http_client_retry_circuit_transitions_total` | counter | transitions | `state`: `open` (a trip), `half_open`, `closed` | a circuit entered this state |
/// | `http_client_retry_circuit_rejections_total` | counter | requests | | requests a circuit turned away (open, its probes taken, or not readied while open) |
/// | `http_client_retry_concurrency_limit` | gauge | requests | `authority` | with [adaptive concurrency](crate::pacing::AdaptiveConcurrency), a listed endpoint's limit on requests in flight now |
/// | `http_client_retry_concurrency_in_flight` | gauge | requests | `authority` | its requests in flight now (those over the limit wait in the queue the queue depth counts) |
/// | `http_client_retry_concurrency_no_load_seconds` | gauge | seconds | `authority` | the no-load latency the limit is learned against |
///
/// Every label has a bounded set of values: no path or status is a label, and an authority only
/// where it is allowlisted, so a client talking to many hosts still makes a bounded number of
/// series. A layer built with
/// [`metrics_label`](crate::retry::RetryLayerBuilder::metrics_label) adds `layer` (its own,
/// constant) to its own and its pacer's; a breaker's get it from
/// [`CircuitBreakerLayerBuilder::metrics_label`](crate::circuit_breaker::CircuitBreakerLayerBuilder::metrics_label).
/// `authority` labels the pacer's metrics of the endpoints listed in
/// [`RetryLayerBuilder::metrics_authorities`](crate::retry::RetryLayerBuilder::metrics_authorities),
/// and the circuits of a breaker per authority listed in
/// [`CircuitBreakerLayerBuilder::metrics_authorities`](crate::circuit_breaker::CircuitBreakerLayerBuilder::metrics_authorities).
///
/// ```
/// // After installing a recorder (e.g. metrics-exporter-prometheus's):
/// tower_http_retry::telemetry::describe_metrics();
/// ```
pub fn describe_metrics() {
    enum Kind {
        Counter,
        Gauge,
        Histogram,
    }
    let described = [
        (Kind::Counter, ATTEMPTS, Unit::Count, "Attempts sent, first attempts included."),
        (Kind::Counter, RETRIES, Unit::Count, "Attempts after the first, by the source of the wait before them."),
        (Kind::Counter, REQUESTS, Unit::Count, "Finished requests, by the reason the retry layer stopped."),
        (Kind::Histogram, DELAY, Unit::Seconds, "Realised waits before retries, by their source."),
        (Kind::Counter, BUDGET, Unit::Count, "Retry budget withdrawals, granted or denied."),
        (Kind::Counter, REFUNDS, Unit::Count, "Granted budget tokens given back because the retry was not sent."),
        (Kind::Counter, MODE_CHANGES, Unit::Count, "Pacing mode changes of an endpoint, by the mode entered."),
        (Kind::Gauge, QUEUE_DEPTH, Unit::Count, "Requests waiting in pacing queues."),
        (Kind::Gauge, PACED, Unit::Count, "Endpoints paced now, by pacing mode."),
        (Kind::Gauge, CIRCUITS, Unit::Count, "Circuit breakers by state."),
        (Kind::Counter, CIRCUIT_TRANSITIONS, Unit::Count, "Circuit breaker transitions, by the state entered (open: a trip)."),
        (Kind::Counter, CIRCUIT_REJECTIONS, Unit::Count, "Requests turned away by an open or probing circuit."),
        (Kind::Gauge, LIMIT, Unit::Count, "An endpoint's adaptive limit on requests in flight."),
        (Kind::Gauge, IN_FLIGHT, Unit::Count, "An endpoint's requests in flight under its adaptive limit."),
        (Kind::Gauge, NO_LOAD, Unit::Seconds, "The no-load latency an endpoint's adaptive limit is learned against."),
        (Kind::Counter, HEDGES, Unit::Count, "Hedging, by event: armed, sent, won, refused_cap, refused_budget, refused_gate, paused."),
    ];
    metrics::with_recorder(|r| {
        for (kind, name, unit, text) in described {
            let (name, text) = (KeyName::from_const_str(name), SharedString::const_str(text));
            match kind {
                Kind::Counter => r.describe_counter(name, Some(unit), text),
                Kind::Gauge => r.describe_gauge(name, Some(unit), text),
                Kind::Histogram => r.describe_histogram(name, Some(unit), text),
            }
        }
    });
}

/// A `&'static Key`, with at most one label.
macro_rules! key {
    ($name:expr) => {{
        static KEY: Key = Key::from_static_name($name);
        &KEY
    }};
    ($name:expr, $label:literal => $value:expr) => {{
        static LABELS: [Label; 1] = [Label::from_static_parts($label, $value)];
        static KEY: Key = Key::from_static_parts($name, &LABELS);
        &KEY
    }};
}

/// The key of `name` labelled `source` with `source`'s name.
macro_rules! by_source {
    ($name:expr, $source:expr) => {{
        use DelaySource::*;
        match $source {
            Backoff => key!($name, "source" => Backoff.as_str()),
            RetryAfter => key!($name, "source" => RetryAfter.as_str()),
            RetryAfterClamped => key!($name, "source" => RetryAfterClamped.as_str()),
            FirstAttempt => key!($name, "source" => FirstAttempt.as_str()),
            Paced => key!($name, "source" => Paced.as_str()),
            Refused => key!($name, "source" => Refused.as_str()),
        }
    }};
}

/// The label every metric of a layer built with
/// [`metrics_label`](crate::retry::RetryLayerBuilder::metrics_label) carries.
const LAYER: &str = "layer";

/// The label the pacer's metrics of an endpoint the layer lists in
/// [`metrics_authorities`](crate::retry::RetryLayerBuilder::metrics_authorities) carry.
const AUTHORITY: &str = "authority";

/// The keys a layer's metrics are recorded under: the unlabelled statics, or, for a layer with
/// a [`metrics_label`](crate::retry::RetryLayerBuilder::metrics_label) or
/// [`metrics_authorities`](crate::retry::RetryLayerBuilder::metrics_authorities), keys of its
/// own made once when it is built (recording one allocates nothing).
#[derive(Clone, Debug, Default)]
pub(crate) struct Labels(Option<Arc<LayerKeys>>);

#[derive(Debug)]
struct LayerKeys {
    attempts: Key,
    /// By [`DelaySource`], in [`DelaySource::ALL`]'s order.
    retries: Vec<Key>,
    delays: Vec<Key>,
    /// By [`StopReason::index`].
    requests: Vec<Key>,
    granted: Key,
    denied: Key,
    refunds: Key,
    /// The pacer's: mode changes by [`mode_index`], paced endpoints by the same index (open
    /// unused), the queue depth.
    modes: Vec<Key>,
    paced: Vec<Key>,
    queue_depth: Key,
    /// The breakers': circuits and transitions by [`circuit_index`], rejections.
    circuits: Vec<Key>,
    transitions: Vec<Key>,
    rejections: Key,
    /// An endpoint's adaptive concurrency (limit, in flight, no-load latency): recorded for
    /// listed authorities only, since a gauge of one endpoint's limit means nothing summed.
    concurrency: Option<[Key; 3]>,
    /// The keys of each listed authority's endpoint, with its `authority` label.
    by_authority: Vec<(Box<str>, Labels)>,
}

/// The circuit states' names, in the order of the labelled keys.
const STATES: [&str; 3] = ["closed", "open", "half_open"];

fn circuit_index(state: &str) -> usize {
    STATES.iter().position(|s| *s == state).unwrap_or(2)
}

/// The pacing modes' names, in the order of the labelled keys.
const MODES: [&str; 4] = ["open", "probing", "ramping", "paused"];

fn mode_index(mode: &str) -> usize {
    MODES.iter().position(|m| *m == mode).unwrap_or(3)
}

impl Labels {
    /// The keys of a layer labelled `layer` whose endpoints `authorities` are labelled too, or
    /// the unlabelled ones when it has neither.
    pub(crate) fn new(layer: Option<&str>, authorities: &[Box<str>]) -> Self {
        if layer.is_none() && authorities.is_empty() {
            return Self(None);
        }
        let mut keys = LayerKeys::new(layer, None);
        keys.by_authority = authorities
            .iter()
            .map(|authority| {
                let keys = LayerKeys::new(layer, Some(authority));
                (authority.clone(), Self(Some(Arc::new(keys))))
            })
            .collect();
        Self(Some(Arc::new(keys)))
    }

    /// The keys the pacer of the endpoint `authority` (as the pacer keys it: lower case, the
    /// port when the URI has one) records under: with its `authority` label when the layer
    /// lists it.
    pub(crate) fn for_endpoint(&self, authority: &str) -> Self {
        let listed = self.0.as_deref().and_then(|keys| {
            keys.by_authority
                .iter()
                .find(|(listed, _)| **listed == *authority)
        });
        listed.map_or_else(|| self.clone(), |(_, labels)| labels.clone())
    }
}

impl LayerKeys {
    /// Every key, labelled with `layer` and `authority` where given.
    fn new(layer: Option<&str>, authority: Option<&str>) -> Self {
        let fixed: Vec<Label> = [(LAYER, layer), (AUTHORITY, authority)]
            .into_iter()
            .filter_map(|(key, value)| Some(Label::new(key, value?.to_owned())))
            .collect();
        let key = |name: &'static str, label: Option<(&'static str, &'static str)>| {
            let mut labels = fixed.clone();
            if let Some((key, value)) = label {
                labels.push(Label::from_static_parts(key, value));
            }
            Key::from_parts(name, labels)
        };
        // One key of `name` per value of the label `label`, in the order of `values`.
        let each = |name, label, values: &mut dyn Iterator<Item = &'static str>| {
            values
                .map(|value| key(name, Some((label, value))))
                .collect()
        };
        let by_source = |name| {
            each(
                name,
                "source",
                &mut DelaySource::ALL.iter().map(|s| s.as_str()),
            )
        };
        LayerKeys {
            attempts: key(ATTEMPTS, None),
            retries: by_source(RETRIES),
            delays: by_source(DELAY),
            requests: each(
                REQUESTS,
                "reason",
                &mut StopReason::ALL.iter().map(|r| r.as_str()),
            ),
            granted: key(BUDGET, Some(("result", "granted"))),
            denied: key(BUDGET, Some(("result", "denied"))),
            refunds: key(REFUNDS, None),
            modes: each(MODE_CHANGES, "mode", &mut MODES.into_iter()),
            paced: each(PACED, "mode", &mut MODES.into_iter()),
            queue_depth: key(QUEUE_DEPTH, None),
            circuits: each(CIRCUITS, "state", &mut STATES.into_iter()),
            transitions: each(CIRCUIT_TRANSITIONS, "state", &mut STATES.into_iter()),
            rejections: key(CIRCUIT_REJECTIONS, None),
            concurrency: authority
                .map(|_| [key(LIMIT, None), key(IN_FLIGHT, None), key(NO_LOAD, None)]),
            by_authority: Vec::new(),
        }
    }
}

fn stop_key(reason: StopReason) -> &'static Key {
    macro_rules! arms {
        ($($reason:ident),* $(,)?) => {
            match reason {
                $(StopReason::$reason => {
                    key!(REQUESTS, "reason" => StopReason::$reason.as_str())
                })*
            }
        };
    }
    arms!(
        Success,
        Permanent,
        AttemptsExhausted,
        BudgetEmpty,
        Deadline,
        NotIdempotent,
        NotReplayable,
        RetryAfterTooLong,
        Aborted,
        NotReady,
        Cancelled,
        Deferred,
        CircuitOpen,
        Held,
        RefusedTooOften,
        StandDown,
        Delegated,
    )
}

/// The key of a mode's changes; the mode's name is [`PacingMode::as_str`]'s.
///
/// [`PacingMode::as_str`]: crate::pacing::PacingMode::as_str
fn mode_key(mode: &'static str) -> &'static Key {
    match mode {
        "open" => key!(MODE_CHANGES, "mode" => "open"),
        "probing" => key!(MODE_CHANGES, "mode" => "probing"),
        "ramping" => key!(MODE_CHANGES, "mode" => "ramping"),
        _ => key!(MODE_CHANGES, "mode" => "paused"),
    }
}

fn count(key: &Key) {
    metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
}

/// Attempt `number` (from 1) is sent; `after` is the source of the wait before it.
pub(crate) fn attempt(labels: &Labels, number: u32, after: Option<DelaySource>) {
    let layer = labels.0.as_deref();
    count(layer.map_or(key!(ATTEMPTS), |keys| &keys.attempts));
    if number > 1 {
        // A retry with no wait recorded before it does not happen; `backoff` if it did.
        let source = after.unwrap_or(DelaySource::Backoff);
        count(match layer {
            None => by_source!(RETRIES, source),
            Some(keys) => &keys.retries[source as usize],
        });
    }
}

/// A request finished.
pub(crate) fn stop(labels: &Labels, reason: StopReason) {
    count(match labels.0.as_deref() {
        None => stop_key(reason),
        Some(keys) => &keys.requests[reason.index()],
    });
}

/// A wait before a retry ended after `delay`.
pub(crate) fn delay(labels: &Labels, delay: Duration, source: DelaySource) {
    let key = match labels.0.as_deref() {
        None => by_source!(DELAY, source),
        Some(keys) => &keys.delays[source as usize],
    };
    metrics::with_recorder(|r| {
        r.register_histogram(key, &METADATA)
            .record(delay.as_secs_f64())
    });
}

pub(crate) fn budget_granted(labels: &Labels) {
    count(
        labels
            .0
            .as_deref()
            .map_or(key!(BUDGET, "result" => "granted"), |k| &k.granted),
    );
}

pub(crate) fn budget_denied(labels: &Labels) {
    count(
        labels
            .0
            .as_deref()
            .map_or(key!(BUDGET, "result" => "denied"), |k| &k.denied),
    );
}

pub(crate) fn budget_refunded(labels: &Labels) {
    count(labels.0.as_deref().map_or(key!(REFUNDS), |k| &k.refunds));
}

/// An endpoint entered the mode named `mode` (`open`, `probing`, `ramping`, `paused`).
pub(crate) fn pacer_mode(labels: &Labels, mode: &'static str) {
    count(match labels.0.as_deref() {
        None => mode_key(mode),
        Some(keys) => &keys.modes[mode_index(mode)],
    });
}

/// The paced endpoints' gauge of the mode named `mode`; `None` for `open`, not counted.
fn paced_key(mode: &'static str) -> Option<&'static Key> {
    match mode {
        "probing" => Some(key!(PACED, "mode" => "probing")),
        "ramping" => Some(key!(PACED, "mode" => "ramping")),
        "paused" => Some(key!(PACED, "mode" => "paused")),
        _ => None,
    }
}

fn gauge(key: Option<&Key>, delta: f64) {
    if let Some(key) = key {
        metrics::with_recorder(|r| r.register_gauge(key, &METADATA).increment(delta));
    }
}

/// An endpoint's last call left it in the mode named `to`, where it was in `from`.
pub(crate) fn paced_endpoint(labels: &Labels, from: &'static str, to: &'static str) {
    let key = |mode| match labels.0.as_deref() {
        None => paced_key(mode),
        Some(keys) => (mode != "open").then(|| &keys.paced[mode_index(mode)]),
    };
    gauge(key(from), -1.0);
    gauge(key(to), 1.0);
}

/// The circuits' gauge and transitions' counter of the state named `state` (`closed`, `open`,
/// `half_open`), under `labels`.
fn circuit_keys<'a>(labels: &'a Labels, state: &'static str) -> (&'a Key, &'a Key) {
    if let Some(keys) = labels.0.as_deref() {
        let i = circuit_index(state);
        return (&keys.circuits[i], &keys.transitions[i]);
    }
    match state {
        "closed" => (
            key!(CIRCUITS, "state" => "closed"),
            key!(CIRCUIT_TRANSITIONS, "state" => "closed"),
        ),
        "open" => (
            key!(CIRCUITS, "state" => "open"),
            key!(CIRCUIT_TRANSITIONS, "state" => "open"),
        ),
        _ => (
            key!(CIRCUITS, "state" => "half_open"),
            key!(CIRCUIT_TRANSITIONS, "state" => "half_open"),
        ),
    }
}

/// A circuit was made (`from: None`, closed) or moved from state `from` to `to`.
pub(crate) fn circuit(labels: &Labels, from: Option<&'static str>, to: &'static str) {
    let (circuits, transitions) = circuit_keys(labels, to);
    if let Some(from) = from {
        gauge(Some(circuit_keys(labels, from).0), -1.0);
        count(transitions);
    }
    gauge(Some(circuits), 1.0);
}

/// A circuit in state `state` was dropped (a keyed layer forgot it, or the layer went).
pub(crate) fn circuit_dropped(labels: &Labels, state: &'static str) {
    gauge(Some(circuit_keys(labels, state).0), -1.0);
}

/// A circuit turned a request away.
pub(crate) fn circuit_rejected(labels: &Labels) {
    count(
        labels
            .0
            .as_deref()
            .map_or(key!(CIRCUIT_REJECTIONS), |keys| &keys.rejections),
    );
}

/// A hedging event, named by `event` (`sent`, `won`, `refused_budget`, ...).
pub(crate) fn hedge(event: &'static str) {
    let key = match event {
        "armed" => key!(HEDGES, "event" => "armed"),
        "sent" => key!(HEDGES, "event" => "sent"),
        "won" => key!(HEDGES, "event" => "won"),
        "refused_cap" => key!(HEDGES, "event" => "refused_cap"),
        "refused_budget" => key!(HEDGES, "event" => "refused_budget"),
        "refused_gate" => key!(HEDGES, "event" => "refused_gate"),
        _ => key!(HEDGES, "event" => "paused"),
    };
    count(key);
}

/// The queue depth's key of a layer.
fn queue_key(labels: &Labels) -> &Key {
    labels
        .0
        .as_deref()
        .map_or(key!(QUEUE_DEPTH), |keys| &keys.queue_depth)
}

/// A request joined an endpoint's queue.
pub(crate) fn queue_joined(labels: &Labels) {
    gauge(Some(queue_key(labels)), 1.0);
}

/// `waiters` requests left an endpoint's queue.
pub(crate) fn queue_left(labels: &Labels, waiters: usize) {
    if waiters > 0 {
        gauge(Some(queue_key(labels)), -(waiters as f64));
    }
}

/// A listed endpoint's adaptive concurrency now: its limit, requests in flight and no-load
/// latency.
pub(crate) fn concurrency(labels: &Labels, limit: u32, in_flight: u32, no_load: Option<Duration>) {
    let Some([limit_key, in_flight_key, no_load_key]) = labels
        .0
        .as_deref()
        .and_then(|keys| keys.concurrency.as_ref())
    else {
        return;
    };
    metrics::with_recorder(|r| {
        r.register_gauge(limit_key, &METADATA).set(f64::from(limit));
        r.register_gauge(in_flight_key, &METADATA)
            .set(f64::from(in_flight));
        if let Some(no_load) = no_load {
            r.register_gauge(no_load_key, &METADATA)
                .set(no_load.as_secs_f64());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(key: &Key) -> (&str, &str) {
        let label = key.labels().next().expect("one label");
        (label.key(), label.value())
    }

    #[test]
    fn every_stop_reason_has_its_own_key_labelled_with_its_name() {
        for reason in StopReason::ALL {
            let key = stop_key(reason);
            assert_eq!(key.name(), REQUESTS);
            assert_eq!(label(key), ("reason", reason.as_str()));
        }
    }

    #[test]
    fn a_labelled_layer_has_a_key_for_every_source_and_reason_with_its_label() {
        let Labels(Some(keys)) = Labels::new(Some("webhooks"), &[]) else {
            panic!("labelled")
        };
        let pairs = |key: &Key| {
            key.labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect::<Vec<_>>()
        };
        let layer = ("layer".to_owned(), "webhooks".to_owned());
        for source in DelaySource::ALL {
            let expected = vec![layer.clone(), ("source".into(), source.as_str().into())];
            assert_eq!(pairs(&keys.retries[source as usize]), expected);
            assert_eq!(pairs(&keys.delays[source as usize]), expected);
        }
        for reason in StopReason::ALL {
            let key = &keys.requests[reason.index()];
            assert_eq!(key.name(), REQUESTS);
            let expected = vec![layer.clone(), ("reason".into(), reason.as_str().into())];
            assert_eq!(pairs(key), expected);
        }
        assert_eq!(pairs(&keys.attempts), vec![layer]);
        assert!(
            Labels::new(None, &[]).0.is_none(),
            "unlabelled: the statics"
        );
    }

    #[test]
    fn sources_and_modes_are_labelled_with_their_names() {
        let key = by_source!(DELAY, DelaySource::RetryAfterClamped);
        assert_eq!(key.name(), DELAY);
        assert_eq!(label(key), ("source", "retry_after_clamped"));
        let key = by_source!(RETRIES, DelaySource::Refused);
        assert_eq!(label(key), ("source", "refused"));
        for mode in ["open", "probing", "ramping", "paused"] {
            assert_eq!(label(mode_key(mode)), ("mode", mode));
        }
    }
}
