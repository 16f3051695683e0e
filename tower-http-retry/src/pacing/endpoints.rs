//! The paced endpoints of a layer, bounded in number: the map from an authority to its
//! [`Endpoint`] (`handle.rs`, with the narrow handle the retry layer holds of one, [`Lane`]),
//! and the stats of each.
//!
//! The map is keyed by the authority's text in lower case, so a lookup borrows the request's
//! authority and hashes it in one piece. A count of the endpoints that are not settled (open,
//! no congestion counted, nobody queued) is kept under each endpoint's lock: while it is zero,
//! a first attempt is not gated and a success records nothing, with no lock, no map lookup and
//! no clock read.

use super::config::Pacing;
use super::endpoint::{EndpointState, Link};
use super::handle::{Endpoint, Lane};
use super::limit::Limit;
use super::mode::PacingMode;
use super::rules::PacingRules;
use super::shared::SharedState;
use crate::endpoints::{EndpointMap, Forget};
use crate::random::RandomSource;
use crate::telemetry::Labels;
use http::uri::Authority;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Every endpoint's state; shared by every clone of a layer.
pub(crate) struct Pacer {
    config: Pacing,
    random: RandomSource,
    map: EndpointMap<Endpoint>,
    /// How many endpoints are not [settled](EndpointState::is_settled); shared with each of
    /// them, which keeps it up to date whenever its state is unlocked.
    unsettled: Arc<AtomicUsize>,
    /// The keys of the layer's metrics, which its endpoints record under.
    labels: Labels,
    /// A hedging layer keeps its sketches in the endpoints.
    hedging: AtomicBool,
}

/// The map's key for `authority`: its text, ASCII-lowercased (authorities compare without
/// regard to case, as `Authority`'s own `Eq` and `Hash` do), and `""` for none (no authority is
/// empty). Borrowed unless the authority has an upper-case letter. It is also the endpoint's
/// name in a fleet's store. The hedging layer keys its latency sketches the same way.
pub(crate) fn key(authority: Option<&Authority>) -> Cow<'_, str> {
    match authority.map(Authority::as_str) {
        None => Cow::Borrowed(""),
        Some(text) if text.bytes().any(|byte| byte.is_ascii_uppercase()) => {
            Cow::Owned(text.to_ascii_lowercase())
        }
        Some(text) => Cow::Borrowed(text),
    }
}

/// The state and counters of one endpoint, as
/// [`RetryLayer::pacing_stats`](crate::RetryLayer::pacing_stats) reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PacingStats {
    /// What the endpoint is doing (with a [store](crate::pacing::store), as this process last
    /// heard from the fleet, moved on with time).
    pub mode: PacingMode,
    /// The release rate, per second (0 while open: requests are not paced); with a store, the
    /// fleet's.
    pub rate: f64,
    /// Requests waiting in its queue (this layer's).
    pub waiting: usize,
    /// Probes this layer let through since the endpoint was first seen.
    pub probes: u64,
    /// Requests turned away (queue full, or a wait beyond their deadline).
    pub deferred: u64,
    /// With [adaptive concurrency](crate::pacing::AdaptiveConcurrency): the limit on requests
    /// in flight now.
    pub limit: Option<u32>,
    /// With adaptive concurrency: the requests in flight now.
    pub in_flight: Option<u32>,
    /// With adaptive concurrency: the no-load latency the limit is learned against (the mean
    /// of a window's successes with the limit at its floor), once measured.
    pub no_load: Option<Duration>,
    /// With a [hedging layer](crate::hedge::HedgeLayer) below the retry layer that keeps its
    /// latencies here ([`retry_layer`](crate::hedge::HedgeLayerBuilder::retry_layer)): the
    /// delay after which it hedges a request to the endpoint, as its last request read it
    /// (`None`: too few latencies, or hedging paused in a brownout). The endpoint has a state
    /// once the hedging layer has sent to it, healthy or not.
    pub hedge_delay: Option<Duration>,
}

impl Pacer {
    pub(crate) fn new(config: Pacing, random: RandomSource, labels: Labels) -> Self {
        let max_endpoints = config.rules().max_endpoints;
        Self {
            config,
            random,
            map: EndpointMap::new(max_endpoints),
            unsettled: Arc::default(),
            labels,
            hedging: AtomicBool::new(false),
        }
    }

    pub(crate) fn rules(&self) -> &PacingRules {
        self.config.rules()
    }

    /// Whether every request goes through its endpoint's queue: adaptive concurrency counts
    /// what is in flight.
    pub(crate) fn limits(&self) -> bool {
        self.config.concurrency().is_some()
    }

    /// Whether every endpoint is [settled](EndpointState::is_settled) (or there is none): then
    /// a success has nothing to record. An atomic load, no lock.
    pub(crate) fn all_settled(&self) -> bool {
        self.unsettled.load(Ordering::Acquire) == 0
    }

    /// The endpoint of `authority`, made if needed; `None` when the map is full and no endpoint
    /// in it can be forgotten (the request is then not paced).
    pub(crate) fn lane(&self, authority: Option<&Authority>) -> Option<Lane> {
        let key = key(authority);
        let endpoint = self.map.get_or_insert_with(&key, Instant::now, || {
            let now = Instant::now();
            let key: Arc<str> = Arc::from(&*key);
            let link = self.config.store().map(|_| Link::default());
            let labels = self.labels.for_endpoint(&key);
            let mut state = EndpointState::new(now, self.random.stream(), link, labels);
            state.limit = self.config.concurrency().map(|c| Limit::new(c, now));
            if let Some(store) = self.config.store() {
                // What the fleet is known to be doing, without a call.
                if let Some(view) = store.cached(self.rules(), &key, now) {
                    state.shared = SharedState::from_view(&view, &state.clock, now);
                }
            }
            Endpoint::new(self.config.clone(), key, state, Arc::clone(&self.unsettled))
        })?;
        Some(Lane(endpoint))
    }

    /// The endpoint of `authority` if the map has it (a success needs no new one). Counts as a
    /// use of it.
    pub(crate) fn existing(&self, authority: Option<&Authority>) -> Option<Lane> {
        self.map.get(&key(authority)).map(Lane)
    }

    /// Whether requests to `authority` wait for the pacer now (its endpoint is known and
    /// paced; with a store, or the fleet is known to pace it). Makes no endpoint, unless the
    /// fleet paces one this process has not met; takes no lock while every endpoint is settled
    /// and no store is shared.
    pub(crate) fn is_paced(&self, authority: Option<&Authority>) -> bool {
        let store = self.config.store();
        if store.is_none() && self.all_settled() {
            return false;
        }
        let endpoint = self.map.peek(&key(authority));
        match (endpoint, store) {
            (Some(endpoint), _) => Lane(endpoint).is_paced(),
            (None, None) => false,
            (None, Some(store)) => {
                let now = Instant::now();
                let paced = store
                    .cached(self.rules(), &key(authority), now)
                    .is_some_and(|view| view.mode != PacingMode::Open);
                paced && self.lane(authority).is_some_and(|lane| lane.is_paced())
            }
        }
    }

    /// How long a request to `authority` that joined its queue at `now` would wait, if the
    /// endpoint is known and paced. Makes no endpoint.
    pub(crate) fn predicted_release(
        &self,
        authority: Option<&Authority>,
        now: Instant,
    ) -> Option<Duration> {
        let endpoint = self.map.peek(&key(authority))?;
        let mut state = endpoint.lock();
        state.advance(endpoint.pacing(), now);
        let waiting = state.queue.len();
        state
            .is_paced()
            .then(|| state.predicted_wait(endpoint.pacing(), waiting, now))
    }

    /// Whether a hedging layer may keep its sketches in this pacer's endpoints: `true` for the
    /// first to ask only, so that two layers with their own rules never share a sketch.
    pub(crate) fn claim_for_hedging(&self) -> bool {
        !self.hedging.swap(true, Ordering::AcqRel)
    }

    /// Endpoints with a hedging layer's sketch now.
    pub(crate) fn hedge_sketches(&self) -> usize {
        self.map.count(Endpoint::has_hedge_sketch)
    }

    /// The state of `authority`'s endpoint, if it has one.
    pub(crate) fn stats(&self, authority: Option<&Authority>) -> Option<PacingStats> {
        let endpoint = self.map.peek(&key(authority))?;
        Some(stats(&endpoint))
    }
}

impl Forget for Endpoint {
    /// An endpoint nobody holds (so nobody waits on it) and that is open once moved on with time
    /// (without a wake: nobody waits) may go: a settled one first, then one counting failures
    /// in a row, whose count toward an outage would be lost (a hedging layer's endpoints make
    /// room this way too).
    fn rank(&self, held: bool, now: Instant) -> Option<u8> {
        if held {
            return None;
        }
        let mut state = self.lock();
        state.advance(self.pacing(), now);
        (state.mode() == PacingMode::Open).then_some(u8::from(!state.is_settled()))
    }
}

/// The state and counters of `endpoint` now (its mode moved on with time).
fn stats(endpoint: &Endpoint) -> PacingStats {
    // Read before the state's lock: the sketch has a lock of its own, never held with it.
    let hedge_delay = endpoint.hedge_delay();
    let mut state = endpoint.lock();
    let before = state.mode();
    state.advance(endpoint.pacing(), Instant::now());
    if state.mode() != before {
        state.wake_head();
    }
    PacingStats {
        mode: state.mode(),
        rate: state.rate(endpoint.pacing()),
        waiting: state.queue.len(),
        probes: state.probes,
        deferred: state.deferred,
        limit: state.limit.as_ref().map(Limit::current),
        in_flight: state.limit.as_ref().map(Limit::in_flight),
        no_load: state.limit.as_ref().and_then(Limit::no_load),
        hedge_delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::queue::QueueWait;
    use crate::pacing::shared::Signal;

    fn authority(text: &str) -> Authority {
        text.parse().expect("a valid authority")
    }

    fn pacer(max_endpoints: usize) -> Pacer {
        let config = Pacing::builder()
            .outage_after(2)
            .max_endpoints(max_endpoints)
            .build()
            .expect("a valid configuration");
        Pacer::new(config, RandomSource::seeded(7), Labels::default())
    }

    #[test]
    fn the_pacer_counts_the_endpoints_a_success_would_change() {
        let pacer = pacer(8);
        let a = authority("a.test");
        assert!(pacer.all_settled());
        let lane = pacer.lane(Some(&a)).expect("room in the map");
        assert!(pacer.all_settled(), "a new endpoint is settled");
        let now = Instant::now();
        lane.record(Signal::Congestion, now);
        assert!(!pacer.all_settled(), "a congestion in a row is counted");
        assert!(!pacer.is_paced(Some(&a)), "still open");
        lane.record(Signal::Success, now);
        assert!(pacer.all_settled(), "a success resets the count");
        lane.record(Signal::Congestion, now);
        lane.record(Signal::Congestion, now);
        assert!(pacer.is_paced(Some(&a)), "down after outage_after(2)");
        let wait = QueueWait::join(&lane, Duration::MAX, now, false).expect("room");
        drop(wait);
        assert!(!pacer.all_settled(), "probing, its queue empty again");
        assert!(
            pacer.existing(Some(&authority("A.Test"))).is_some(),
            "authorities compare without regard to case"
        );
        assert!(pacer.existing(Some(&authority("b.test"))).is_none());
        assert!(
            pacer.existing(None).is_none(),
            "a success makes no endpoint"
        );
    }

    #[test]
    fn an_endpoint_forgotten_while_counted_is_no_longer_counted() {
        let pacer = pacer(1);
        let now = Instant::now();
        let a = pacer.lane(Some(&authority("a.test"))).expect("room");
        a.record(Signal::Congestion, now);
        drop(a);
        assert!(!pacer.all_settled());
        // The map is full: a.test, open and held by nobody, is forgotten for b.test.
        let b = pacer
            .lane(Some(&authority("b.test")))
            .expect("a.test forgotten");
        assert!(pacer.existing(Some(&authority("a.test"))).is_none());
        assert!(
            pacer.all_settled(),
            "b.test is new, a.test's count went with it"
        );
        drop(b);
    }

    #[test]
    fn an_endpoint_counting_failures_is_forgotten_after_the_settled_ones() {
        let pacer = pacer(2);
        let now = Instant::now();
        let (a, b, c) = (
            authority("a.test"),
            authority("b.test"),
            authority("c.test"),
        );
        // a.test, the least recently used, counts a failure toward an outage; b.test is settled.
        pacer
            .lane(Some(&a))
            .unwrap()
            .record(Signal::Congestion, now);
        drop(pacer.lane(Some(&b)).unwrap());
        drop(pacer.lane(Some(&c)).expect("b.test forgotten"));
        assert!(pacer.existing(Some(&a)).is_some(), "its count is kept");
        assert!(pacer.existing(Some(&b)).is_none());
    }
}
