//! The latency sketch of one endpoint, from which the hedge delay is read: a histogram of the
//! latencies of the current window and one of the window before, rotated every `window`, and the
//! count of requests that outlived their delay, which pauses hedging in a brownout. Pure: the
//! caller passes `now` in, so the unit tests below drive it without a runtime.

use crate::endpoints::Forget;
use hdrhistogram::Histogram;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// The longest latency told apart from longer ones, in microseconds (a minute); longer ones are
/// counted as a minute.
const HIGHEST_MICROS: u64 = 60_000_000;

/// How a sketch reads its delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SketchRules {
    /// The quantile of the latencies the delay is read at: `1 - max_extra_load`.
    pub(crate) quantile: f64,
    /// The shortest delay.
    pub(crate) floor: Duration,
    /// How long a window lasts.
    pub(crate) window: Duration,
    /// Latencies a window needs before a delay is read from it.
    pub(crate) min_samples: u32,
    /// The share of the requests that outlive their delay in a window beyond which hedging
    /// pauses until the window ends: far more than `1 - quantile` means every request is slow.
    pub(crate) pause_share: f64,
}

/// One endpoint's latencies, in microseconds.
pub(crate) struct Sketch {
    current: Histogram<u32>,
    previous: Histogram<u32>,
    /// When the current window began.
    began: Instant,
    /// The delay read last, and the latencies recorded since (re-read every
    /// [`REREAD_EVERY`] while the delay comes from the current window).
    cached: Option<Duration>,
    since_read: u32,
    /// Requests of the current window given a delay, and those that outlived it.
    armed: u32,
    outlived: u32,
    /// Hedging stands down until the window ends.
    paused: bool,
}

/// While the current window is the source of the delay, it is re-read after this many new
/// latencies (reading walks the histogram's buckets).
const REREAD_EVERY: u32 = 32;

impl Sketch {
    pub(crate) fn new(now: Instant) -> Self {
        let histogram =
            || Histogram::new_with_bounds(1, HIGHEST_MICROS, 2).expect("the bounds are valid");
        Self {
            current: histogram(),
            previous: histogram(),
            began: now,
            cached: None,
            since_read: 0,
            armed: 0,
            outlived: 0,
            paused: false,
        }
    }

    /// Starts the window `now` falls in, if the current one is over.
    fn rotate(&mut self, rules: &SketchRules, now: Instant) {
        let elapsed = now.saturating_duration_since(self.began);
        if elapsed < rules.window {
            return;
        }
        if elapsed >= rules.window * 2 {
            // A whole window went by without a latency: what came before is stale.
            self.previous.reset();
            self.current.reset();
        } else {
            std::mem::swap(&mut self.previous, &mut self.current);
            self.current.reset();
        }
        let windows = elapsed.as_nanos() / rules.window.as_nanos().max(1);
        let windows = u32::try_from(windows).unwrap_or(u32::MAX);
        self.began += rules.window.saturating_mul(windows);
        self.armed = 0;
        self.outlived = 0;
        self.paused = false;
        self.reread(rules);
    }

    fn reread(&mut self, rules: &SketchRules) {
        let enough = |h: &Histogram<u32>| h.len() >= u64::from(rules.min_samples);
        let source = if enough(&self.previous) {
            &self.previous
        } else if enough(&self.current) {
            &self.current
        } else {
            self.cached = None;
            return;
        };
        let micros = source.value_at_quantile(rules.quantile);
        self.cached = Some(Duration::from_micros(micros).max(rules.floor));
        self.since_read = 0;
    }

    /// When the current window began: a request moves it on, so it is at most a window before
    /// the sketch's last use.
    pub(crate) fn began(&self) -> Instant {
        self.began
    }

    /// A request to this endpoint finished after `latency`.
    pub(crate) fn record(&mut self, rules: &SketchRules, latency: Duration, now: Instant) {
        self.rotate(rules, now);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.current
            .saturating_record(micros.clamp(1, HIGHEST_MICROS));
        self.since_read += 1;
        let from_current = self.previous.len() < u64::from(rules.min_samples);
        if (from_current && self.since_read >= REREAD_EVERY) || self.cached.is_none() {
            self.reread(rules);
        }
    }

    /// The delay after which a request sent `now` is hedged: `None` while the windows hold too
    /// few latencies, or while hedging is paused. A request given a delay is counted (armed).
    pub(crate) fn arm(&mut self, rules: &SketchRules, now: Instant) -> Option<Duration> {
        self.rotate(rules, now);
        if self.paused {
            return None;
        }
        let delay = self.cached?;
        self.armed += 1;
        Some(delay)
    }

    /// A request outlived its delay. `true` when this pauses hedging (nearly every request of
    /// the window outlived its delay: the endpoint is slow, not its tail).
    pub(crate) fn outlived(&mut self, rules: &SketchRules, now: Instant) -> bool {
        self.rotate(rules, now);
        self.outlived += 1;
        let pause = !self.paused
            && self.armed >= rules.min_samples
            && f64::from(self.outlived) > f64::from(self.armed) * rules.pause_share;
        self.paused |= pause;
        pause
    }

    /// Whether hedging is paused until the window ends.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// The delay a request sent now would be given, as last read (`None`: too few latencies,
    /// or paused); unlike [`arm`](Self::arm), counts nothing and moves no window on.
    pub(crate) fn delay(&self) -> Option<Duration> {
        self.cached.filter(|_| !self.paused)
    }
}

/// One endpoint's sketch, shared by the requests in flight to it (and by the pacer's endpoint,
/// when the sketches are kept there).
pub(crate) struct SharedSketch {
    sketch: Mutex<Sketch>,
    /// In the layer's own map: how long after its current window began it may be forgotten:
    /// every request moves the window on, so three windows mean unused for two at least (an
    /// older sketch has nothing to say). A pacer forgets it with its endpoint instead.
    stale_after: Duration,
}

impl SharedSketch {
    /// A sketch begun at `now`.
    pub(crate) fn new(rules: &SketchRules, now: Instant) -> Self {
        Self {
            sketch: Mutex::new(Sketch::new(now)),
            stale_after: rules.window * 3,
        }
    }

    /// The sketch, locked. Plain data with no invariant broken half-way: a poisoned lock is
    /// usable.
    pub(crate) fn sketch(&self) -> MutexGuard<'_, Sketch> {
        self.sketch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Forget for SharedSketch {
    fn rank(&self, _held: bool, now: Instant) -> Option<u8> {
        let began = self.sketch().began();
        (now.saturating_duration_since(began) >= self.stale_after).then_some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> SketchRules {
        SketchRules {
            quantile: 0.95,
            floor: Duration::from_millis(1),
            window: Duration::from_secs(10),
            min_samples: 20,
            pause_share: 0.5,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_delay_until_a_window_holds_enough_latencies() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        for _ in 0..19 {
            sketch.record(&rules, ms(10), start);
            assert_eq!(sketch.arm(&rules, start), None);
        }
        sketch.record(&rules, ms(10), start);
        let delay = sketch.arm(&rules, start).expect("20 latencies are enough");
        assert!((ms(9)..=ms(11)).contains(&delay), "{delay:?}");
    }

    #[test]
    fn the_delay_is_the_quantile_of_the_window_before() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        // 90 fast, 10 slow: the 95th percentile is among the slow ones.
        for i in 0..100 {
            sketch.record(&rules, if i < 90 { ms(10) } else { ms(50) }, start);
        }
        let next = start + ms(10_000);
        // The new window reads the old one's quantile whatever it records.
        sketch.record(&rules, ms(1), next);
        let delay = sketch.arm(&rules, next).unwrap();
        assert!((ms(49)..=ms(51)).contains(&delay), "{delay:?}");
    }

    #[test]
    fn the_floor_bounds_the_delay_below() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        for _ in 0..50 {
            sketch.record(&rules, Duration::from_micros(100), start);
        }
        assert_eq!(sketch.arm(&rules, start), Some(ms(1)));
    }

    #[test]
    fn nearly_every_request_outliving_its_delay_pauses_hedging_until_the_window_ends() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        for _ in 0..100 {
            sketch.record(&rules, ms(10), start);
        }
        // A brownout: every request takes 200 ms, so each one outlives its ~10 ms delay.
        let mut paused_at = None;
        for i in 0..40 {
            let now = start + ms(100 + i);
            if sketch.arm(&rules, now).is_none() {
                paused_at = Some(i);
                break;
            }
            if sketch.outlived(&rules, now) {
                assert!(sketch.paused());
            }
            sketch.record(&rules, ms(200), now);
        }
        assert_eq!(
            paused_at,
            Some(20),
            "paused once 20 armed requests all outlived it"
        );
        // The next window reads the slow latencies: hedging resumes, at a delay that fits them.
        let next = start + ms(10_000);
        let delay = sketch
            .arm(&rules, next)
            .expect("resumed in the next window");
        assert!(delay >= ms(190), "{delay:?}");
    }

    #[test]
    fn a_tail_as_long_as_the_quantile_says_does_not_pause() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        for _ in 0..100 {
            sketch.record(&rules, ms(10), start);
        }
        for i in 0..1_000 {
            assert!(sketch.arm(&rules, start).is_some());
            if i % 20 == 0 {
                assert!(!sketch.outlived(&rules, start));
            }
        }
    }

    #[test]
    fn a_silent_window_forgets_what_came_before() {
        let rules = rules();
        let start = Instant::now();
        let mut sketch = Sketch::new(start);
        for _ in 0..100 {
            sketch.record(&rules, ms(10), start);
        }
        assert_eq!(sketch.arm(&rules, start + ms(25_000)), None);
    }
}
