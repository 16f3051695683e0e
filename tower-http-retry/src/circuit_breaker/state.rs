//! The breaker's state machine, shared by every clone of a layer.
//!
//! ```text
//!          N failures in a row, or ratio >= r over the window with >= m calls
//!   Closed ────────────────────────────────────────────────────────────────> Open
//!     ^                                                                    │  ^
//!     │ enough probes succeeded                 open duration (jittered)   │  │ a probe failed
//!     │                                               has passed           v  │ (longer next time)
//!     └──────────────────────────────────────────────────────────────── HalfOpen
//! ```
//!
//! The open duration grows with every trip that follows another closely: a failed probe, or a
//! trip less than one window after the circuit last closed (an endpoint that flaps). It falls
//! back to the base once the circuit has stayed closed for a whole window.
//!
//! Transitions, failures and half-open probe slots take one mutex, whose critical sections are a
//! few field updates. The path of a healthy endpoint takes no lock: a closed circuit admits a
//! call on one atomic load, and counts its success with a few more atomic operations (the run of
//! failures and the window's buckets are atomics; see `window.rs`). An outcome is recorded only
//! against the phase it was admitted in (each transition starts a new *generation*), so a slow
//! failure that arrives after the circuit opened cannot re-open it, nor a late success close it.

use super::config::Config;
use super::window::Window;
use crate::abort::AbortSignal;
use crate::classify::{NotSent, Outcome};
use crate::error::CircuitOpen;
use crate::random::{uniform, RandomSource};
use crate::telemetry;
use http::uri::Authority;
use rand::rngs::SmallRng;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const PHASE_BITS: u32 = 2;

/// The state of a breaker, as [`CircuitBreakerLayer::state`](crate::CircuitBreakerLayer::state)
/// reports it. Instants are tokio's ([`tokio::time::Instant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls fail fast with [`CircuitOpen`] until `half_open_at`.
    Open {
        /// When the next call will be let through as a probe.
        half_open_at: Instant,
    },
    /// A bounded number of probe calls go through; the others fail fast.
    HalfOpen,
}

impl CircuitState {
    /// How long from now until a probe may go through: `Some` while open, zero once
    /// `half_open_at` has passed; `None` when closed or half-open. A duration, for those who
    /// store it or send it on (a `Retry-After`), where tokio's `Instant` would not do.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            CircuitState::Open { half_open_at } => {
                Some(half_open_at.saturating_duration_since(Instant::now()))
            }
            CircuitState::Closed | CircuitState::HalfOpen => None,
        }
    }
}

/// Counters of a breaker since it was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitStats {
    /// The state now.
    pub state: CircuitState,
    /// Times the circuit opened (from closed or from half-open).
    pub trips: u64,
    /// Calls refused with [`CircuitOpen`].
    pub rejected: u64,
    /// Calls let through as half-open probes.
    pub probes: u64,
}

/// What a call was admitted as; its outcome is recorded against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    Closed { generation: u64 },
    Probe { generation: u64 },
}

/// Whose sleeps an opening ends, by holding the [`AbortSignal`] until the circuit half-opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Every request's: the breaker guards the only endpoint behind it.
    Everyone,
    /// Only the requests to this authority (`None`: those without one): a breaker per authority
    /// must not stop the retries of the healthy authorities that share its signal.
    Authority(Option<Authority>),
}

pub(crate) enum Admission {
    Admitted(Pass),
    Rejected(CircuitOpen),
}

pub(crate) struct Breaker {
    config: Config,
    origin: Instant,
    /// `generation << PHASE_BITS | phase`: written under the lock, read without it.
    word: AtomicU64,
    /// While open: nanoseconds after `origin` at which the circuit half-opens.
    half_open_at: AtomicU64,
    /// Failures in a row while closed; a success resets it without the lock.
    consecutive_failures: AtomicU32,
    window: Window,
    inner: Mutex<Inner>,
    abort: Option<(AbortSignal, Hold)>,
    trips: AtomicU64,
    rejected: AtomicU64,
    probes: AtomicU64,
    /// Calls a keyed layer handed this breaker to and that have not ended (see `Lease`): while
    /// any has, the breaker is not evicted, so that their outcomes reach the breaker the layer
    /// keeps for their authority. A breaker that is never evicted does not count.
    leases: AtomicUsize,
}

struct Inner {
    phase: Phase,
    generation: u64,
    /// Trips in a row, each less than a window after the circuit last closed (or a failed
    /// probe): the open duration grows with it.
    reopenings: u32,
    /// When the circuit last closed, while it is closed after having been open: a trip within
    /// a window of it keeps the grown open duration.
    closed_at: Option<Instant>,
    /// The breaker's own random stream, for the open-duration jitter.
    rng: SmallRng,
}

#[derive(Clone, Copy)]
enum Phase {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        since: Instant,
        in_flight: u32,
        successes: u32,
    },
}

impl Breaker {
    pub(crate) fn new(
        config: Config,
        abort: Option<(AbortSignal, Hold)>,
        random: &RandomSource,
    ) -> Self {
        let breaker = Self {
            origin: Instant::now(),
            word: AtomicU64::new(CLOSED),
            half_open_at: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            window: Window::new(config.window),
            inner: Mutex::new(Inner {
                phase: Phase::Closed,
                generation: 0,
                reopenings: 0,
                closed_at: None,
                rng: random.stream(),
            }),
            config,
            abort,
            trips: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            leases: AtomicUsize::new(0),
        };
        telemetry::circuit(&breaker.config.labels, None, phase_name(CLOSED));
        breaker
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn abort_signal(&self) -> Option<&AbortSignal> {
        self.abort.as_ref().map(|(signal, _)| signal)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections cannot leave `Inner` half-updated, so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a call made now would certainly be refused (open, not yet due to half-open).
    /// Lock-free; used by `poll_ready` to avoid waiting on an inner service it will not call.
    /// `now` is read only when the circuit is open: a closed circuit costs one atomic load.
    pub(crate) fn refuses(&self, now: impl FnOnce() -> Instant) -> bool {
        self.word.load(Ordering::Acquire) & 3 == OPEN
            && self.nanos(now()) < self.half_open_at.load(Ordering::Acquire)
    }

    /// How readily a keyed layer may forget this breaker to make room for another: `Some(0)`
    /// when closed, `Some(1)` when open with its open period over (a new breaker would let the
    /// next call through as well), `None` while it refuses calls or probes, or has calls in
    /// flight (their outcomes would trip a breaker nobody sees, holding the abort signal for
    /// its authority). Lock-free.
    pub(crate) fn eviction_rank(&self, now: Instant) -> Option<u8> {
        if self.leases.load(Ordering::Acquire) != 0 {
            return None;
        }
        match self.word.load(Ordering::Acquire) & 3 {
            CLOSED => Some(0),
            OPEN if !self.refuses(|| now) => Some(1),
            _ => None,
        }
    }

    /// Decides whether a call made now goes through. A closed circuit admits on one atomic
    /// load, without the lock or the clock.
    pub(crate) fn admit(&self, now: impl FnOnce() -> Instant) -> Admission {
        let word = self.word.load(Ordering::Acquire);
        if word & 3 == CLOSED {
            return Admission::Admitted(Pass::Closed {
                generation: word >> PHASE_BITS,
            });
        }
        let now = now();
        let mut inner = self.lock();
        let admission = match inner.phase {
            Phase::Closed => Admission::Admitted(Pass::Closed {
                generation: inner.generation,
            }),
            Phase::Open { until } if now < until => Admission::Rejected(CircuitOpen::new(until)),
            Phase::Open { .. } => {
                inner.phase = Phase::HalfOpen {
                    since: now,
                    in_flight: 0,
                    successes: 0,
                };
                self.advance(&mut inner, HALF_OPEN);
                self.probe(&mut inner)
            }
            Phase::HalfOpen { .. } => self.probe(&mut inner),
        };
        drop(inner);
        if let Admission::Rejected(_) = admission {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            telemetry::circuit_rejected(&self.config.labels);
        }
        admission
    }

    fn probe(&self, inner: &mut Inner) -> Admission {
        let generation = inner.generation;
        match &mut inner.phase {
            Phase::HalfOpen {
                in_flight, since, ..
            } => {
                if *in_flight < self.config.half_open_probes {
                    *in_flight += 1;
                    self.probes.fetch_add(1, Ordering::Relaxed);
                    Admission::Admitted(Pass::Probe { generation })
                } else {
                    Admission::Rejected(CircuitOpen::probes_taken(*since))
                }
            }
            _ => unreachable!("probes are only taken while half-open"),
        }
    }

    /// Records the outcome of a call admitted with `pass`. `now` is read only when the outcome
    /// is counted in the window or may open the circuit.
    pub(crate) fn record(&self, pass: Pass, outcome: Outcome, now: impl FnOnce() -> Instant) {
        if let Pass::Closed { generation } = pass {
            match outcome {
                // The caller's own fault (a 404, a bad request), or a request the endpoint was
                // up to refuse: it says nothing of the endpoint's health.
                Outcome::Permanent | Outcome::NotSent(NotSent::Refused | NotSent::TooEarly) => {
                    return
                }
                Outcome::Success => return self.record_success(generation, now),
                // A connection that could not be made is what an outage looks like.
                Outcome::Transient | Outcome::NotSent(NotSent::Unconnected) => {}
            }
        }
        let mut inner = self.lock();
        let opened = match pass {
            Pass::Closed { generation } => {
                if generation != inner.generation {
                    // Admitted before the last transition.
                    return;
                }
                let now = now();
                let epoch = self.window.epoch(self.nanos(now));
                self.window.add(epoch, true);
                self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
                self.should_trip(epoch) && self.open(&mut inner, now)
            }
            Pass::Probe { generation } => {
                if generation != inner.generation {
                    return;
                }
                let Phase::HalfOpen {
                    in_flight,
                    successes,
                    ..
                } = &mut inner.phase
                else {
                    unreachable!("a probe's generation is a half-open one");
                };
                *in_flight = in_flight.saturating_sub(1);
                match outcome {
                    Outcome::Success => {
                        *successes += 1;
                        if *successes >= self.config.successes_to_close {
                            self.close(&mut inner, now());
                        }
                        false
                    }
                    Outcome::Transient | Outcome::NotSent(NotSent::Unconnected) => {
                        self.open(&mut inner, now())
                    }
                    // Neither verdict: the probe slot is free again.
                    Outcome::Permanent | Outcome::NotSent(NotSent::Refused | NotSent::TooEarly) => {
                        false
                    }
                }
            }
        };
        drop(inner);
        if opened {
            // Outside the lock: the woken requests may call straight back into the breaker.
            if let Some((abort, hold)) = &self.abort {
                let half_open_at = self.half_open_at.load(Ordering::Acquire);
                let until = self.origin + Duration::from_nanos(half_open_at);
                match hold {
                    Hold::Everyone => abort.hold_until(until),
                    Hold::Authority(authority) => {
                        abort.hold_authority_until(authority.as_ref(), until)
                    }
                }
            }
        }
    }

    /// A call admitted with `pass` ended without an outcome (its future was dropped): its probe
    /// slot, if it had one, is freed.
    pub(crate) fn release(&self, pass: Pass) {
        if let Pass::Probe { generation } = pass {
            let mut inner = self.lock();
            if generation == inner.generation {
                if let Phase::HalfOpen { in_flight, .. } = &mut inner.phase {
                    *in_flight = in_flight.saturating_sub(1);
                }
            }
        }
    }

    /// Refuses a call whose inner service was not made ready: `poll_ready` saw the circuit open
    /// and did not poll it. Neither a probe nor a transition: when the circuit would let a call
    /// through now, it is left for the next one, and the refusal says so.
    pub(crate) fn refuse_unready(&self, now: Instant) -> CircuitOpen {
        let open = match self.lock().phase {
            Phase::Open { until } if now < until => CircuitOpen::new(until),
            Phase::HalfOpen {
                since, in_flight, ..
            } if in_flight >= self.config.half_open_probes => CircuitOpen::probes_taken(since),
            Phase::Open { .. } | Phase::HalfOpen { .. } | Phase::Closed => {
                CircuitOpen::not_readied(now)
            }
        };
        self.rejected.fetch_add(1, Ordering::Relaxed);
        telemetry::circuit_rejected(&self.config.labels);
        open
    }

    /// Counts a call handed this breaker by a keyed layer; `give_back` ends it.
    pub(crate) fn lend(&self) {
        self.leases.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn give_back(&self) {
        self.leases.fetch_sub(1, Ordering::Release);
    }

    /// A success while closed: the common path, without the lock unless a bucket must be reset.
    fn record_success(&self, generation: u64, now: impl FnOnce() -> Instant) {
        if self.word.load(Ordering::Acquire) != generation << PHASE_BITS | CLOSED {
            return; // admitted before the last transition
        }
        // Read first: a run of successes does not write the shared cache line.
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
        if self.config.failure_ratio.is_none() {
            return; // nothing else to count: skip the clock
        }
        let epoch = self.window.epoch(self.nanos(now()));
        if self.window.try_add_success(epoch) {
            return;
        }
        let inner = self.lock();
        if inner.generation == generation {
            self.window.add(epoch, false);
        }
    }

    /// Under the lock, after a failure was counted.
    fn should_trip(&self, epoch: u64) -> bool {
        if self
            .config
            .consecutive_failures
            .is_some_and(|n| self.consecutive_failures.load(Ordering::Relaxed) >= n)
        {
            return true;
        }
        let Some(ratio) = self.config.failure_ratio else {
            return false;
        };
        let (calls, failures) = self.window.totals(epoch);
        calls >= u64::from(self.config.minimum_calls) && failures as f64 >= ratio * calls as f64
    }

    /// Opens the circuit for the (grown, jittered) open duration. Returns `true`.
    fn open(&self, inner: &mut Inner, now: Instant) -> bool {
        if let Some(closed_at) = inner.closed_at.take() {
            if now.saturating_duration_since(closed_at) >= self.config.window {
                // Closed for a whole window: this trip starts a new outage.
                inner.reopenings = 0;
            }
        }
        let base = self.config.open.ceiling(inner.reopenings);
        let extra = uniform(
            Duration::ZERO,
            base.mul_f64(self.config.open_jitter),
            &mut inner.rng,
        );
        let until = now + base + extra;
        inner.reopenings = inner.reopenings.saturating_add(1);
        inner.phase = Phase::Open { until };
        self.half_open_at
            .store(self.nanos(until).max(1), Ordering::Release);
        self.advance(inner, OPEN);
        self.trips.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Closes the circuit at `now`. The open duration keeps its growth for one window: a trip
    /// within it (the endpoint flaps) opens for longer than the last time.
    fn close(&self, inner: &mut Inner, now: Instant) {
        inner.phase = Phase::Closed;
        self.consecutive_failures.store(0, Ordering::Relaxed);
        inner.closed_at = Some(now);
        self.window.clear();
        self.advance(inner, CLOSED);
    }

    /// Starts a new generation in `phase`, publishing it for the lock-free readers, and
    /// tells the telemetry.
    fn advance(&self, inner: &mut Inner, phase: u64) {
        let from = self.word.load(Ordering::Relaxed) & 3;
        inner.generation += 1;
        self.word
            .store(inner.generation << PHASE_BITS | phase, Ordering::Release);
        trace(phase_name(phase));
        telemetry::circuit(
            &self.config.labels,
            Some(phase_name(from)),
            phase_name(phase),
        );
    }

    /// The state at `now`; an open circuit whose time is up reports half-open (it becomes so at
    /// the next call).
    pub(crate) fn state(&self, now: Instant) -> CircuitState {
        match self.lock().phase {
            Phase::Closed => CircuitState::Closed,
            Phase::Open { until } if now < until => CircuitState::Open {
                half_open_at: until,
            },
            Phase::Open { .. } | Phase::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    pub(crate) fn stats(&self, now: Instant) -> CircuitStats {
        CircuitStats {
            state: self.state(now),
            trips: self.trips.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            probes: self.probes.load(Ordering::Relaxed),
        }
    }
}

/// The name of `phase` (`CLOSED`, `OPEN`, `HALF_OPEN`) in the telemetry.
fn phase_name(phase: u64) -> &'static str {
    match phase {
        CLOSED => "closed",
        OPEN => "open",
        _ => "half_open",
    }
}

impl Drop for Breaker {
    fn drop(&mut self) {
        let state = phase_name(self.word.load(Ordering::Relaxed) & 3);
        telemetry::circuit_dropped(&self.config.labels, state);
    }
}

fn trace(_transition: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "tower_http_retry::circuit_breaker", transition = _transition, "circuit breaker");
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("config", &self.config)
            .field("stats", &self.stats(Instant::now()))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Backoff, Jitter};

    const SEC: Duration = Duration::from_secs(1);

    fn config() -> Config {
        Config {
            consecutive_failures: Some(3),
            failure_ratio: Some(0.5),
            minimum_calls: 4,
            window: 10 * SEC,
            open: Backoff::new(Jitter::None, SEC, 8 * SEC).multiplier(2.0),
            open_jitter: 0.0,
            half_open_probes: 1,
            successes_to_close: 1,
            labels: Default::default(),
        }
    }

    fn breaker(config: Config) -> Breaker {
        Breaker::new(config, None, &RandomSource::seeded(1))
    }

    fn call(b: &Breaker, outcome: Outcome, now: Instant) {
        match b.admit(|| now) {
            Admission::Admitted(pass) => b.record(pass, outcome, || now),
            Admission::Rejected(_) => panic!("refused at {now:?}"),
        }
    }

    #[test]
    fn a_late_outcome_from_an_earlier_generation_is_ignored() {
        let b = breaker(config());
        let now = Instant::now();
        let Admission::Admitted(stale) = b.admit(|| now) else {
            panic!()
        };
        for _ in 0..3 {
            call(&b, Outcome::Transient, now);
        }
        assert!(matches!(b.state(now), CircuitState::Open { .. }));
        let later = now + 2 * SEC;
        let Admission::Admitted(probe) = b.admit(|| later) else {
            panic!()
        };
        b.record(probe, Outcome::Success, || later);
        assert_eq!(b.state(later), CircuitState::Closed);
        // The call admitted before the trip finishes now: it must not count in the new phase.
        for _ in 0..2 {
            call(&b, Outcome::Transient, later);
        }
        b.record(stale, Outcome::Transient, || later);
        assert_eq!(b.state(later), CircuitState::Closed);
    }

    #[test]
    fn open_duration_grows_and_is_capped() {
        let b = breaker(config());
        let mut now = Instant::now();
        for _ in 0..3 {
            call(&b, Outcome::Transient, now);
        }
        let mut opened_for = Vec::new();
        for _ in 0..5 {
            let CircuitState::Open { half_open_at } = b.state(now) else {
                panic!()
            };
            opened_for.push(half_open_at - now);
            now = half_open_at;
            call(&b, Outcome::Transient, now); // the probe fails
        }
        assert_eq!(opened_for, [1, 2, 4, 8, 8].map(|s| s * SEC));
    }

    const REFUSED: Outcome = Outcome::NotSent(NotSent::Refused);
    const UNCONNECTED: Outcome = Outcome::NotSent(NotSent::Unconnected);

    #[test]
    fn refused_requests_are_no_failures() {
        let b = breaker(config());
        let now = Instant::now();
        for _ in 0..10 {
            call(&b, REFUSED, now);
        }
        assert_eq!(b.state(now), CircuitState::Closed);
    }

    #[test]
    fn failed_connects_are_failures() {
        let b = breaker(config());
        let now = Instant::now();
        for _ in 0..3 {
            call(&b, UNCONNECTED, now);
        }
        assert!(matches!(b.state(now), CircuitState::Open { .. }));
    }

    #[test]
    fn a_refused_probe_frees_its_slot_without_a_verdict() {
        let b = breaker(config());
        let now = Instant::now();
        for _ in 0..3 {
            call(&b, Outcome::Transient, now);
        }
        let later = now + 2 * SEC;
        call(&b, REFUSED, later); // the only probe slot, taken and given back
        assert_eq!(b.state(later), CircuitState::HalfOpen);
        call(&b, Outcome::Success, later);
        assert_eq!(b.state(later), CircuitState::Closed);
    }

    /// Trips the closed breaker at `now` (3 failures in a row); returns how long it is open.
    fn trip(b: &Breaker, now: Instant) -> Duration {
        for _ in 0..3 {
            call(b, Outcome::Transient, now);
        }
        match b.state(now) {
            CircuitState::Open { half_open_at } => half_open_at - now,
            state => panic!("not open: {state:?}"),
        }
    }

    /// Lets the probe through at the end of the open period and closes the circuit with it.
    fn recover(b: &Breaker, now: Instant) {
        call(b, Outcome::Success, now);
        assert_eq!(b.state(now), CircuitState::Closed);
    }

    #[test]
    fn a_trip_soon_after_closing_opens_for_longer() {
        let b = breaker(config());
        let mut now = Instant::now();
        let mut opened_for = Vec::new();
        for _ in 0..4 {
            let open = trip(&b, now);
            opened_for.push(open);
            now += open;
            recover(&b, now);
            now += SEC; // closed for a second, well within the 10 s window
        }
        assert_eq!(opened_for, [1, 2, 4, 8].map(|s| s * SEC));
    }

    #[test]
    fn a_window_closed_forgets_the_growth() {
        let b = breaker(config());
        let mut now = Instant::now();
        now += trip(&b, now);
        recover(&b, now);
        now += SEC;
        assert_eq!(trip(&b, now), 2 * SEC, "a repeat: longer");
        now += 2 * SEC;
        recover(&b, now);
        now += 10 * SEC; // a whole window closed
        assert_eq!(trip(&b, now), SEC, "a new outage: the base again");
    }
}
