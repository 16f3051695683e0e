//! Adaptive concurrency: how many requests one endpoint may have in flight, learned from the
//! latency of its answers ([`AdaptiveConcurrency`] configures it, [`Limit`] is one endpoint's
//! state). Pure: every method takes the sample or `now`, so it is unit-tested without a runtime.
//!
//! The rule is a gradient: over each window of answers, the median latency is set against the
//! no-load latency the endpoint showed (the fastest answer since the last probe of it). While
//! the median stays within `tolerance` of it the limit grows by its square root (only if the
//! window used the limit: an endpoint nobody loads learns nothing); beyond, the limit is scaled
//! by their ratio (never below half). A closed queue at a limit `L` over the endpoint's own
//! concurrency `C` answers in `L / C` times the no-load latency, so the limit settles at
//! `tolerance × C`. A timed-out attempt is a sample at its timeout, not nothing. Every
//! `probe_every` the limit drops to its floor for one window, so the no-load latency is measured
//! again while little is in flight (an endpoint that got slower for good is not throttled by an
//! old minimum forever).

use crate::error::{at_least_one, in_range, positive_duration, InvalidConfig};
use std::time::Duration;
use tokio::time::Instant;

/// Most samples a window holds: it closes when full, whatever its time.
const WINDOW_SAMPLES: usize = 128;
/// Fewest samples a window needs to close on time: fewer say nothing of a median.
const MIN_SAMPLES: usize = 8;

/// The configuration of an adaptive limit on the requests in flight to each endpoint
/// ([`PacingBuilder::adaptive_concurrency`](crate::pacing::PacingBuilder::adaptive_concurrency)).
/// A request over the limit waits in the endpoint's queue, with its deadline, like a request
/// the pacer holds after an outage.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::pacing::{AdaptiveConcurrency, Pacing};
///
/// let pacing = Pacing::builder()
///     .adaptive_concurrency(AdaptiveConcurrency::new().initial(20).max(500))
///     .build()
///     .unwrap();
/// # let _ = pacing;
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use]
pub struct AdaptiveConcurrency {
    initial: u32,
    min: u32,
    max: u32,
    window: Duration,
    tolerance: f64,
    probe_every: Duration,
}

impl Default for AdaptiveConcurrency {
    fn default() -> Self {
        Self {
            initial: 10,
            min: 2,
            max: 1000,
            window: Duration::from_millis(100),
            tolerance: 1.25,
            probe_every: Duration::from_secs(60),
        }
    }
}

impl AdaptiveConcurrency {
    /// The defaults: a limit of 10 to start, between 2 and 1,000; windows of at least 100 ms;
    /// a median within 1.25 times the no-load latency counts as no queue; the no-load latency
    /// measured again every 60 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// The limit of an endpoint first met.
    pub fn initial(mut self, limit: u32) -> Self {
        self.initial = limit;
        self
    }

    /// The lowest limit (and the limit while the no-load latency is measured again).
    pub fn min(mut self, limit: u32) -> Self {
        self.min = limit;
        self
    }

    /// The highest limit.
    pub fn max(mut self, limit: u32) -> Self {
        self.max = limit;
        self
    }

    /// The shortest window of answers the limit is changed on (a window also closes at 128
    /// answers).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How far above the no-load latency a window's median may be and still count as no
    /// queue: the limit settles near this many times the endpoint's own concurrency.
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// How often the no-load latency is measured again.
    pub fn probe_every(mut self, every: Duration) -> Self {
        self.probe_every = every;
        self
    }

    /// Checks the values; [`PacingBuilder::build`](crate::pacing::PacingBuilder::build) calls it.
    pub(crate) fn check(&self) -> Result<(), InvalidConfig> {
        at_least_one("pacing.adaptive_concurrency.min", self.min.into())?;
        let (min, max) = (f64::from(self.min), f64::from(self.max));
        in_range(
            "pacing.adaptive_concurrency.max",
            max,
            min,
            f64::from(u32::MAX),
        )?;
        in_range(
            "pacing.adaptive_concurrency.initial",
            f64::from(self.initial),
            min,
            max,
        )?;
        in_range(
            "pacing.adaptive_concurrency.tolerance",
            self.tolerance,
            1.0,
            10.0,
        )?;
        positive_duration("pacing.adaptive_concurrency.window", self.window)?;
        positive_duration("pacing.adaptive_concurrency.probe_every", self.probe_every)
    }
}

/// One endpoint's limit, its requests in flight and what it believes of the endpoint.
#[derive(Debug)]
pub(crate) struct Limit {
    config: AdaptiveConcurrency,
    limit: f64,
    in_flight: u32,
    /// The no-load latency: the fastest answer since the last probe of it.
    no_load: Option<Duration>,
    window: Window,
    /// When the no-load latency is next measured again; `None` while it is (first at the start).
    next_probe: Option<Instant>,
}

#[derive(Debug)]
struct Window {
    opened: Instant,
    samples: Vec<Duration>,
    /// Whether the requests in flight reached the limit in it.
    used: bool,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            opened: now,
            samples: Vec::new(),
            used: false,
        }
    }
}

impl Limit {
    pub(crate) fn new(config: AdaptiveConcurrency, now: Instant) -> Self {
        Self {
            config,
            limit: f64::from(config.initial),
            in_flight: 0,
            no_load: None,
            window: Window::new(now),
            // The first window measures the no-load latency: a limit learned against a latency
            // already queued would settle that much higher.
            next_probe: None,
        }
    }

    /// The limit now (its floor while the no-load latency is measured again).
    pub(crate) fn current(&self) -> u32 {
        match self.next_probe {
            Some(_) => self.limit as u32,
            None => self.config.min,
        }
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The no-load latency it believes, once it has seen an answer.
    pub(crate) fn no_load(&self) -> Option<Duration> {
        self.no_load
    }

    /// How long the request at `position` in the queue is predicted to wait for a place in
    /// flight: the places free go at once, then one limit's worth per no-load latency.
    pub(crate) fn predicted_wait(&self, position: usize) -> Duration {
        let free = self.current().saturating_sub(self.in_flight) as usize;
        let Some(ahead) = (position + 1).checked_sub(free).filter(|ahead| *ahead > 0) else {
            return Duration::ZERO;
        };
        let rounds = ahead as f64 / f64::from(self.current().max(1));
        self.no_load.unwrap_or_default().mul_f64(rounds.ceil())
    }

    /// Whether one more request may go now.
    pub(crate) fn admits(&self) -> bool {
        self.in_flight < self.current()
    }

    /// A request went.
    pub(crate) fn sent(&mut self) {
        self.in_flight += 1;
        self.window.used |= self.in_flight >= self.current();
    }

    /// A request that went came back after `latency` (`None`: it was cancelled, which says
    /// nothing of the endpoint). Returns whether the limit changed.
    pub(crate) fn finished(&mut self, latency: Option<Duration>, now: Instant) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(latency) = latency else {
            return false;
        };
        self.no_load = Some(self.no_load.map_or(latency, |fastest| fastest.min(latency)));
        self.window.samples.push(latency);
        let samples = self.window.samples.len();
        let closes = samples >= WINDOW_SAMPLES
            || (samples >= MIN_SAMPLES && now >= self.window.opened + self.config.window);
        if closes {
            self.close_window(now);
        }
        closes
    }

    fn close_window(&mut self, now: Instant) {
        let window = std::mem::replace(&mut self.window, Window::new(now));
        let mut samples = window.samples;
        let middle = samples.len() / 2;
        let median = *samples.select_nth_unstable(middle).1;
        match self.next_probe {
            // Measured again: the fastest answer of a window with little in flight.
            None => {
                self.no_load = samples.iter().min().copied();
                self.next_probe = Some(now + self.config.probe_every);
            }
            Some(at) if now >= at => {
                self.next_probe = None;
                return;
            }
            Some(_) => {}
        }
        let no_load = self.no_load.unwrap_or(median).as_secs_f64();
        let median = median.as_secs_f64().max(f64::MIN_POSITIVE);
        let gradient = (self.config.tolerance * no_load / median).clamp(0.5, 1.0);
        let limit = if gradient >= 1.0 {
            if window.used {
                self.limit + self.limit.sqrt()
            } else {
                self.limit
            }
        } else {
            self.limit * gradient
        };
        let (min, max) = (f64::from(self.config.min), f64::from(self.config.max));
        self.limit = limit.clamp(min, max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs `limit` against a closed queue of `workers` that each answer in `service`, for
    /// `windows` windows of answers: each window, the limit's requests are answered at the
    /// latency such a queue gives them (`service × max(1, limit / workers)`).
    fn closed_queue(limit: &mut Limit, workers: u32, service: Duration, windows: u32) -> Instant {
        let mut now = Instant::now();
        for _ in 0..windows {
            let current = limit.current().max(1);
            let latency = service.mul_f64((f64::from(current) / f64::from(workers)).max(1.0));
            for _ in 0..WINDOW_SAMPLES {
                while limit.admits() {
                    limit.sent();
                }
                now += latency / current;
                limit.finished(Some(latency), now);
            }
        }
        now
    }

    #[tokio::test(start_paused = true)]
    async fn settles_near_the_tolerance_times_the_endpoints_concurrency() {
        let config = AdaptiveConcurrency::new();
        let mut limit = Limit::new(config, Instant::now());
        closed_queue(&mut limit, 8, 5 * MS, 60);
        let settled = limit.current();
        assert!((8..=13).contains(&settled), "settled at {settled}");
        assert_eq!(limit.no_load(), Some(5 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn grows_to_a_large_endpoints_concurrency() {
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        closed_queue(&mut limit, 200, 5 * MS, 200);
        let settled = limit.current();
        assert!((200..=300).contains(&settled), "settled at {settled}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_halves_the_limit() {
        let start = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new().initial(40), start);
        let window = |limit: &mut Limit, latency: Duration, at: Duration| {
            for _ in 0..MIN_SAMPLES {
                limit.sent();
                limit.finished(Some(latency), start + at);
            }
        };
        // The no-load latency measured, then a window with no queue, then one of timeouts.
        window(&mut limit, 5 * MS, 100 * MS);
        window(&mut limit, 5 * MS, 200 * MS);
        assert_eq!(limit.current(), 40);
        window(&mut limit, 20 * MS, 300 * MS);
        assert_eq!(limit.current(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_limit_does_not_grow_and_a_cancel_is_no_sample() {
        let now = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new(), now);
        limit.sent();
        assert!(!limit.finished(None, now));
        for i in 0..2 * MIN_SAMPLES as u32 {
            limit.sent();
            limit.finished(Some(5 * MS), now + 20 * MS * i);
        }
        assert_eq!(limit.current(), 10);
        assert_eq!(limit.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_no_load_latency_is_measured_again_at_the_floor() {
        // Windows that close at their count only.
        let config = AdaptiveConcurrency::new()
            .probe_every(Duration::from_secs(1))
            .window(Duration::from_secs(3600));
        let mut limit = Limit::new(config, Instant::now());
        let mut now = Instant::now();
        let answer = |limit: &mut Limit, latency: Duration, now: &mut Instant| {
            for _ in 0..WINDOW_SAMPLES {
                limit.sent();
                *now += MS;
                limit.finished(Some(latency), *now);
            }
        };
        answer(&mut limit, 5 * MS, &mut now);
        now += Duration::from_secs(1);
        // The endpoint got slower for good: the window past the probe time starts the probe.
        answer(&mut limit, 9 * MS, &mut now);
        assert_eq!(limit.current(), 2, "at the floor while measuring");
        answer(&mut limit, 9 * MS, &mut now);
        assert_eq!(limit.no_load(), Some(9 * MS));
        assert!(limit.current() >= 2);
    }

    #[test]
    fn invalid_values_fail_the_check() {
        assert!(AdaptiveConcurrency::new().check().is_ok());
        assert!(AdaptiveConcurrency::new().min(0).check().is_err());
        assert!(AdaptiveConcurrency::new().initial(1).check().is_err());
        assert!(AdaptiveConcurrency::new().max(1).check().is_err());
        assert!(AdaptiveConcurrency::new().tolerance(0.9).check().is_err());
        assert!(AdaptiveConcurrency::new()
            .window(Duration::ZERO)
            .check()
            .is_err());
    }
}
