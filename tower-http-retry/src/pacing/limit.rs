//! Adaptive concurrency: how many requests one endpoint may have in flight, learned from the
//! latency of its answers ([`AdaptiveConcurrency`] configures it, [`Limit`] is one endpoint's
//! state). Pure: every method takes the sample or `now`, so it is unit-tested without a runtime.
//!
//! The endpoint's no-load latency is the mean of at least 8 successes in a window with the
//! limit at its floor: at the start, every `probe_every`, and at once when the limit reaches its
//! floor and still sees a queue (an endpoint that got slower for good is not held to an old
//! one). Each window of answers after it, its mean latency is set against that mean: it shows a
//! queue when it exceeds it (times `tolerance`) by more than twice the standard error of the
//! difference, so the noise of a window is not taken for a queue. A mean, not a median: by
//! Little's law a closed queue at a limit `L` over the endpoint's own concurrency `C` answers in
//! `L / C` times the no-load latency on average, and a median stays at the no-load latency until
//! half the answers wait. A queue in a window that used the limit scales it to what the endpoint
//! served, `L × tolerance × no-load / mean` (never below half), which is `tolerance × C`; a
//! timed-out attempt is a sample at its timeout, not nothing. A cut to what was served (not a
//! halving, nor one raised to the floor) leaves no queue beyond the tolerance: the window after
//! it (counting only the answers to requests sent after the cut) that still shows one, with no
//! failure among its answers, shows latency that is not this limit's queue (an endpoint that
//! slows as more of its own workers are busy reads faster at the floor than at its concurrency
//! with nothing waiting), and its mean over `tolerance` becomes the no-load latency. A window of
//! successes faster than the no-load latency beyond their noise becomes it too (an endpoint that
//! got faster, or a correction taken in a slow spell, is not held until the next measurement).
//!
//! Without a queue, a window that used the limit probes for room: the limit grows by a step
//! that starts at one and doubles while each probe finds room (a large endpoint is found in a
//! few windows). Like a window that measures the no-load latency or follows a cut, the window
//! that judges a probe counts only the answers to requests sent after it opened; it alone may
//! close before 100 ms, once its answers show a queue (looked at after 8, 16, 32 and 64 of
//! them): a probe that found no room ends once that is known. A probe that finds a queue is
//! undone, and the next waits twice as long as the last, up to 2 s: an endpoint at its
//! concurrency is probed ever less often, so few answers wait behind a probe (in the spirit of
//! BBR's bandwidth probing).

use crate::error::{at_least_one, in_range, positive_duration, InvalidConfig};
use std::time::Duration;
use tokio::time::Instant;

/// Most samples a window holds: it closes when full, whatever its time.
const WINDOW_SAMPLES: usize = 128;
/// Fewest samples a window needs to close (on time, or a probe's on a queue), and successes a
/// measurement of the no-load latency needs: fewer say little of a mean.
const MIN_SAMPLES: usize = 8;
// A probe's window is looked at when its answers are a power of two, from `MIN_SAMPLES` up.
const _: () = assert!(WINDOW_SAMPLES.is_power_of_two() && MIN_SAMPLES.is_power_of_two());

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
            tolerance: 1.0,
            probe_every: Duration::from_secs(60),
        }
    }
}

impl AdaptiveConcurrency {
    /// The defaults: a limit between 2 and 1,000, 10 once the no-load latency is first
    /// measured (a window at the floor); windows of at least 100 ms (but a probe's, which ends
    /// once it shows a queue); any queue beyond a window's noise counts (a tolerance of 1); the
    /// no-load latency measured again every 60 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// The limit of an endpoint first met, once its first window (at the floor, [`min`](Self::min),
    /// to measure the no-load latency) has closed.
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
    /// answers, and a window that judges a probe for room as soon as it shows a queue).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How far above the no-load latency a window's mean may be (beyond its noise) and still
    /// count as no queue: a tolerance `t` lets the limit settle near `t` times the endpoint's
    /// own concurrency, trading latency for throughput on an endpoint whose latency grows
    /// before its throughput stops growing.
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
    /// The no-load latency: the mean of the successes of its last measurement.
    no_load: Option<Latency>,
    window: Window,
    /// While a window judges a probe for room: the limit before it.
    probing: Option<f64>,
    /// The last window cut the limit to what the endpoint served (a queue's cut, neither a
    /// probe's undoing, a halving nor a raise to the floor): the next is judged with it in mind.
    cut: bool,
    /// What the next probe for room adds, doubled by each probe that found room.
    step: f64,
    /// How long the limit holds after a probe found no room, doubled by each such probe.
    pause: Duration,
    /// The limit grows again from then on.
    grows_at: Instant,
    /// When the no-load latency is next measured again; `None` while it is (first at the start).
    next_probe: Option<Instant>,
}

#[derive(Debug)]
struct Window {
    opened: Instant,
    answers: Moments,
    /// Its successes: a failure may be fast for reasons other than an idle endpoint (a proxy's
    /// instant 502, a refused connection).
    successes: Moments,
    /// Whether the requests in flight reached the limit in it.
    used: bool,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            opened: now,
            answers: Moments::default(),
            successes: Moments::default(),
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
            probing: None,
            cut: false,
            step: 1.0,
            pause: config.window,
            grows_at: now,
            // The first window measures the no-load latency: a limit learned against a latency
            // already queued would settle that much higher.
            next_probe: None,
        }
    }

    /// The limit now (its floor while the no-load latency is measured again).
    pub(crate) fn current(&self) -> u32 {
        match self.next_probe {
            // A limit computed as 7.999… is 8.
            Some(_) => (self.limit + 1e-9) as u32,
            None => self.config.min,
        }
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The no-load latency it believes (the mean of its last measurement), once measured.
    pub(crate) fn no_load(&self) -> Option<Duration> {
        self.no_load.map(|no_load| no_load.mean)
    }

    /// How long the request at `position` in the queue is predicted to wait for a place in
    /// flight: the places free go at once, then one limit's worth per no-load latency.
    pub(crate) fn predicted_wait(&self, position: usize) -> Duration {
        let free = self.current().saturating_sub(self.in_flight) as usize;
        let Some(ahead) = (position + 1).checked_sub(free).filter(|ahead| *ahead > 0) else {
            return Duration::ZERO;
        };
        let rounds = ahead as f64 / f64::from(self.current().max(1));
        self.no_load().unwrap_or_default().mul_f64(rounds.ceil())
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
    /// nothing of the endpoint), a `success` or not (a timeout is a sample at the timeout; only
    /// a success can tell the no-load latency). Returns whether a window closed.
    pub(crate) fn finished(
        &mut self,
        latency: Option<Duration>,
        success: bool,
        now: Instant,
    ) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(latency) = latency else {
            return false;
        };
        // A window that measures the no-load latency, judges a probe or follows a cut counts
        // the answers to requests sent since it opened: the others went under the limit before
        // (after a cut, they queued under the higher limit).
        let judging = self.next_probe.is_none() || self.probing.is_some() || self.cut;
        if judging
            && now
                .checked_sub(latency)
                .is_some_and(|sent| sent < self.window.opened)
        {
            return false;
        }
        let secs = latency.as_secs_f64();
        self.window.answers.add(secs);
        if success {
            self.window.successes.add(secs);
        }
        let samples = self.window.answers.count as usize;
        // A probe that has found a queue has no more to learn: its window closes then, so the
        // request it added keeps answers waiting for as few of them as that takes. Looked at
        // only at 8, 16, 32 and 64 answers (powers of two from `MIN_SAMPLES`, below
        // `WINDOW_SAMPLES`), not at each: each look at noise is a chance of a false queue.
        let probe_judged = || {
            self.probing.is_some() && samples.is_power_of_two() && self.queued(&self.window.answers)
        };
        let closes = samples >= WINDOW_SAMPLES
            || (samples >= MIN_SAMPLES
                && (now >= self.window.opened + self.config.window || probe_judged()));
        if closes {
            self.close_window(now);
        }
        closes
    }

    fn close_window(&mut self, now: Instant) {
        let window = std::mem::replace(&mut self.window, Window::new(now));
        let cut = std::mem::take(&mut self.cut);
        if self.close_measurement(&window, now) {
            return;
        }
        let (Some(mut no_load), Some(recent)) = (self.no_load, window.answers.latency()) else {
            return;
        };
        let all_successes = window.successes.count == window.answers.count;
        // Faster than the no-load latency beyond the noise: it is lower than believed (an
        // endpoint that got faster, or a correction, below, taken in a slow spell).
        let faster = no_load.mean.as_secs_f64() - recent.mean.as_secs_f64();
        if all_successes && faster > recent.noise(&no_load) {
            (no_load, self.no_load) = (recent, Some(recent));
        }
        let tolerance = self.config.tolerance;
        let (no_load_mean, recent_mean) = (no_load.mean.as_secs_f64(), recent.mean.as_secs_f64());
        let probed = self.probing.take();
        let min = f64::from(self.config.min);
        if self.shows_queue(no_load, recent) {
            // Still a queue after a cut to what the endpoint served, which by Little's law
            // leaves none beyond the `tolerance` allowed: the latency is not this limit's queue
            // (an endpoint that gets slower as more of its own workers are busy, or one that
            // got slower), and the no-load latency is taken from it; not from a window with a
            // failure (a timeout is a sample at its timeout).
            if cut && all_successes {
                self.no_load = Some(Latency {
                    mean: recent.mean.div_f64(tolerance),
                    error: recent.error / tolerance,
                });
                return;
            }
            // A queue of this limit's (not when the window left it unused): by Little's law the
            // endpoint serves `limit × no-load / recent` at once, `tolerance` times that with
            // the queue it allows.
            if !window.used && probed.is_none() {
                return;
            }
            let share = tolerance * no_load_mean / recent_mean;
            let served = self.limit * share.max(0.5);
            self.cut = probed.is_none() && share >= 0.5 && served >= min;
            // A probe that found no room is undone (unless the endpoint served more than the
            // limit before it), and the next waits twice as long.
            self.limit = probed.map_or(served, |before| served.max(before));
            if probed.is_some() {
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                self.grows_at = now + self.pause;
            }
            self.step = 1.0;
            // A queue at the floor is not this limit's: the no-load latency changed.
            if self.limit <= min {
                self.next_probe = Some(now);
            }
        } else if !window.used {
            self.step = 1.0;
        } else if now >= self.grows_at {
            if probed.is_some() {
                self.step = (self.step * 2.0).min(self.limit);
                self.pause = self.config.window;
            }
            self.probing = Some(self.limit);
            self.limit += self.step;
        }
        self.limit = self.limit.clamp(min, f64::from(self.config.max));
    }

    /// Ends a window that measured the no-load latency, or begins a measurement once one is
    /// due; whether it did either (the window is then no verdict on the limit).
    fn close_measurement(&mut self, window: &Window, now: Instant) -> bool {
        match self.next_probe {
            // Measured again, from enough successes of a window with little in flight (none
            // yet: measured again at once).
            None => {
                let enough = window.successes.count as usize >= MIN_SAMPLES;
                self.no_load = window
                    .successes
                    .latency()
                    .filter(|_| enough)
                    .or(self.no_load);
                self.next_probe = self.no_load.map(|_| now + self.config.probe_every);
                true
            }
            Some(at) if now >= at => {
                // A probe whose window closes once the measurement is due is undone, its
                // window's verdict not read: the limit the measurement returns to is one that
                // was judged.
                if let Some(before) = self.probing.take() {
                    self.limit = before;
                }
                (self.next_probe, self.step) = (None, 1.0);
                true
            }
            Some(_) => false,
        }
    }

    /// Whether `answers` show a queue against the no-load latency, once it is measured.
    fn queued(&self, answers: &Moments) -> bool {
        let (Some(no_load), Some(recent)) = (self.no_load, answers.latency()) else {
            return false;
        };
        self.shows_queue(no_load, recent)
    }

    /// Whether `recent` shows a queue: its mean exceeds `tolerance` times the no-load mean by
    /// more than the noise of the two.
    fn shows_queue(&self, no_load: Latency, recent: Latency) -> bool {
        let no_load_mean = no_load.mean.as_secs_f64();
        let excess = recent.mean.as_secs_f64() - no_load_mean * self.config.tolerance;
        // Equal latencies (a paused clock's) differ by rounding only.
        excess > recent.noise(&no_load) + no_load_mean * 1e-9
    }
}

/// The longest a limit holds before it probes for room again.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// A window's mean latency (a `Duration`: every request reads the no-load one) and its
/// standard error in seconds.
#[derive(Clone, Copy, Debug)]
struct Latency {
    mean: Duration,
    error: f64,
}

impl Latency {
    /// Twice the standard error of the difference of two means: less is noise.
    fn noise(&self, other: &Latency) -> f64 {
        2.0 * (self.error * self.error + other.error * other.error).sqrt()
    }
}

/// The count, sum and sum of squares of latencies, in seconds.
#[derive(Debug, Default)]
struct Moments {
    count: u32,
    sum: f64,
    squares: f64,
}

impl Moments {
    fn add(&mut self, secs: f64) {
        (self.count, self.sum, self.squares) =
            (self.count + 1, self.sum + secs, self.squares + secs * secs);
    }

    fn latency(&self) -> Option<Latency> {
        let n = f64::from(self.count);
        let mean = self.sum / n;
        let variance = ((self.squares - n * mean * mean) / (n - 1.0).max(1.0)).max(0.0);
        (self.count > 0).then(|| Latency {
            mean: Duration::from_secs_f64(mean),
            error: (variance / n).sqrt(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs `limit` against a closed queue of `workers` that each answer in `service`, from
    /// `now` (moved on by the answers), for `windows` times 128 answers: each answered at the
    /// latency such a queue gives the limit of the moment on average (`service × max(1, limit /
    /// workers)`, Little's law), spread by up to `spread` of it either way (seeded). Returns the
    /// limit after each 128.
    fn closed_queue(
        limit: &mut Limit,
        now: &mut Instant,
        workers: u32,
        service: Duration,
        spread: f64,
        windows: u32,
    ) -> Vec<u32> {
        let mut limits = Vec::new();
        let mut answers = 0;
        answer_closed_queue(
            limit,
            now,
            (workers, service, spread),
            windows as usize * WINDOW_SAMPLES,
            |limit| {
                answers += 1;
                if answers % WINDOW_SAMPLES == 0 {
                    limits.push(limit);
                }
            },
        );
        limits
    }

    /// [`closed_queue`] answer by answer, for `answers`: `each` reads the limit after each.
    fn answer_closed_queue(
        limit: &mut Limit,
        now: &mut Instant,
        (workers, service, spread): (u32, Duration, f64),
        answers: usize,
        each: impl FnMut(u32),
    ) {
        let mean =
            |current: u32| service.mul_f64((f64::from(current) / f64::from(workers)).max(1.0));
        answer_endpoint(limit, now, mean, spread, answers, each);
    }

    /// `limit` against an endpoint whose answers, with `n` in flight, take `mean(n)` on average,
    /// spread by up to `spread` of it either way (seeded), for `answers`: `each` reads the limit
    /// after each.
    fn answer_endpoint(
        limit: &mut Limit,
        now: &mut Instant,
        mean: impl Fn(u32) -> Duration,
        spread: f64,
        answers: usize,
        mut each: impl FnMut(u32),
    ) {
        use rand::{RngExt, SeedableRng};
        let mut random = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..answers {
            let current = limit.current().max(1);
            let latency = mean(current);
            while limit.admits() {
                limit.sent();
            }
            *now += latency / current;
            let noise = 1.0 + spread * random.random_range(-1.0..=1.0);
            limit.finished(Some(latency.mul_f64(noise)), true, *now);
            each(limit.current());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn settles_at_the_endpoints_concurrency_and_probes_for_room_ever_less_often() {
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        // Answer by answer: the limit after each, and where each probe of one more begins.
        let (mut probes, mut limits, mut last) = (Vec::new(), Vec::new(), 0);
        let queue = (8, 5 * MS, 0.0);
        let answers = 400 * WINDOW_SAMPLES;
        answer_closed_queue(&mut limit, &mut Instant::now(), queue, answers, |current| {
            if current > 8 && last <= 8 {
                probes.push(limits.len());
            }
            last = current;
            limits.push(current);
        });
        assert_eq!(limit.no_load(), Some(5 * MS));
        // At 8, but for probes of one more that find no room, each followed by a pause twice
        // the last, up to 2 s (25 windows of 128 answers, 80 ms each).
        let gaps: Vec<usize> = probes.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(gaps[0] < gaps[1] && gaps[1] < gaps[2], "{gaps:?}");
        assert!(
            gaps[4..].iter().all(|gap| *gap >= 20 * WINDOW_SAMPLES),
            "{gaps:?}"
        );
        let settled = limits.split_off(50 * WINDOW_SAMPLES);
        assert!(settled.iter().all(|l| (8..=9).contains(l)), "{settled:?}");
        let above = settled.iter().filter(|l| **l > 8).count();
        assert!(above <= settled.len() / 100, "{above} answers above 8");
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_finds_no_room_ends_with_the_answers_that_show_it() {
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        let mut now = Instant::now();
        closed_queue(&mut limit, &mut now, 8, 5 * MS, 0.0, 50);
        // Each probe of 9 is judged on the first 8 answers sent after it began (the answers
        // before them are skipped: 8 more at most; 2 more for where the probe begins and ends
        // between two answers), not on a window of 128.
        let (mut probes, mut above, mut last) = (0, 0, limit.current());
        let queue = (8, 5 * MS, 0.0);
        answer_closed_queue(&mut limit, &mut now, queue, 200 * WINDOW_SAMPLES, |limit| {
            probes += usize::from(limit > 8 && last <= 8);
            above += usize::from(limit > 8);
            last = limit;
        });
        assert!(probes >= 5, "{probes} probes");
        assert!(
            above <= probes * (2 * MIN_SAMPLES + 2),
            "{above} answers in {probes} probes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_whose_window_closes_once_the_measurement_is_due_is_undone() {
        let config = AdaptiveConcurrency::new().probe_every(Duration::from_secs(1));
        let (mut limit, mut now) = (Limit::new(config, Instant::now()), Instant::now());
        closed_queue(&mut limit, &mut now, 200, 5 * MS, 0.0, 2);
        // A probe under way (10 + 5) when the measurement falls due.
        (limit.limit, limit.probing, limit.next_probe) = (15.0, Some(10.0), Some(now));
        for _ in 0..MIN_SAMPLES {
            now += 20 * MS;
            limit.finished(Some(5 * MS), true, now);
        }
        assert_eq!(limit.current(), config.min, "measuring again, at the floor");
        closed_queue(&mut limit, &mut now, 200, 5 * MS, 0.0, 1);
        assert_eq!(limit.current(), 10, "back to the limit before the probe");
    }

    #[tokio::test(start_paused = true)]
    async fn a_noisy_endpoint_keeps_a_limit_near_its_concurrency() {
        // Each answer up to half its latency faster or slower: a window's mean is set against
        // the no-load mean with both standard errors, so noise is not taken for a queue.
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        let mut limits =
            closed_queue(&mut limit, &mut Instant::now(), 8, 5 * MS, 0.5, 400).split_off(50);
        limits.sort_unstable();
        let (low, median) = (limits[limits.len() / 20], limits[limits.len() / 2]);
        assert!(low >= 7 && (8..=10).contains(&median), "{low}, {median}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_latency_that_grows_below_the_endpoints_concurrency_is_not_taken_for_a_queue() {
        // 8 workers of 6 ms that slow one another by 1.25 % each beyond two (6.45 ms at 8, as
        // a server's shared CPU or timers do), then queue: the no-load latency is measured at
        // 2 in flight, below what 8 take with nothing waiting.
        let mean = |n: u32| {
            let busy = f64::from(n.min(8).saturating_sub(2));
            (6 * MS).mul_f64((1.0 + 0.0125 * busy) * (f64::from(n) / 8.0).max(1.0))
        };
        // Measured again every 60 s (the default), and every 5 s: each reads 6 ms again.
        for every in [60, 5].map(Duration::from_secs) {
            let config = AdaptiveConcurrency::new().probe_every(every);
            let mut limit = Limit::new(config, Instant::now());
            let mut limits = Vec::new();
            let answers = 400 * WINDOW_SAMPLES;
            answer_endpoint(&mut limit, &mut Instant::now(), mean, 0.1, answers, |l| {
                limits.push(l);
            });
            let mut settled = limits.split_off(50 * WINDOW_SAMPLES);
            settled.sort_unstable();
            let (low, median) = (settled[settled.len() / 20], settled[settled.len() / 2]);
            assert!(low >= 7 && median == 8, "every {every:?}: {low}, {median}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn grows_to_a_large_endpoints_concurrency() {
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        let limits = closed_queue(&mut limit, &mut Instant::now(), 200, 5 * MS, 0.0, 400);
        let settled = limit.current();
        assert!((190..=210).contains(&settled), "settled at {settled}");
        let found = limits.iter().position(|l| *l >= 200);
        assert!(found.is_some_and(|windows| windows < 20), "{limits:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn grows_to_a_large_noisy_endpoints_concurrency() {
        // Each answer up to half its latency faster or slower: a probe with room is rarely
        // taken for one that found a queue, though its window is looked at four times early.
        let mut limit = Limit::new(AdaptiveConcurrency::new(), Instant::now());
        let limits = closed_queue(&mut limit, &mut Instant::now(), 200, 5 * MS, 0.5, 100);
        let found = limits.iter().position(|l| *l >= 190);
        assert!(found.is_some_and(|windows| windows < 20), "{limits:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_that_got_slower_for_good_is_measured_again_once_at_the_floor() {
        let config = AdaptiveConcurrency::new();
        let (mut limit, mut now) = (Limit::new(config, Instant::now()), Instant::now());
        closed_queue(&mut limit, &mut now, 8, 5 * MS, 0.0, 50);
        // Three times slower, the same 8 workers: every window looks queued until the limit is
        // at its floor, where the no-load latency is measured again, not after 60 s.
        let limits = closed_queue(&mut limit, &mut now, 8, 15 * MS, 0.0, 100);
        assert_eq!(limit.no_load(), Some(15 * MS));
        assert!((8..=9).contains(&limit.current()), "{limits:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_halves_the_limit() {
        let start = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new().initial(40), start);
        let window = |limit: &mut Limit, latency: Duration, at: Duration| {
            for _ in 0..MIN_SAMPLES {
                limit.sent();
                limit.finished(Some(latency), true, start + at);
            }
        };
        // The no-load latency measured, then a window with no queue, then one with the limit
        // reached whose attempts time out at 20 ms: a sample at the timeout, a failure.
        window(&mut limit, 5 * MS, 100 * MS);
        window(&mut limit, 5 * MS, 200 * MS);
        assert_eq!(limit.current(), 40);
        while limit.admits() {
            limit.sent();
        }
        for _ in 0..MIN_SAMPLES {
            limit.finished(Some(20 * MS), false, start + 300 * MS);
        }
        assert_eq!(limit.current(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_limit_does_not_grow_and_a_cancel_is_no_sample() {
        let now = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new(), now);
        limit.sent();
        assert!(!limit.finished(None, false, now));
        for i in 0..2 * MIN_SAMPLES as u32 {
            limit.sent();
            limit.finished(Some(5 * MS), true, now + 20 * MS * i);
        }
        assert_eq!(limit.current(), 10);
        assert_eq!(limit.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_that_got_faster_is_believed_at_once() {
        let (mut limit, mut now) = (
            Limit::new(AdaptiveConcurrency::new(), Instant::now()),
            Instant::now(),
        );
        closed_queue(&mut limit, &mut now, 8, 10 * MS, 0.0, 50);
        assert_eq!(limit.no_load(), Some(10 * MS));
        // Twice as fast, the same 8 workers: believed at once, not at the next measurement 60 s
        // on (the limit would grow meanwhile, its windows showing no queue).
        let limits = closed_queue(&mut limit, &mut now, 8, 5 * MS, 0.0, 50);
        assert_eq!(limit.no_load(), Some(5 * MS));
        assert!(
            limits[2..].iter().all(|l| (8..=9).contains(l)),
            "{limits:?}"
        );
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
                // One at a time: each sent as the last is answered.
                limit.sent();
                *now += latency;
                limit.finished(Some(latency), true, *now);
            }
        };
        answer(&mut limit, 5 * MS, &mut now);
        now += Duration::from_secs(1);
        // The endpoint got slower for good: the window past the probe time starts the probe.
        answer(&mut limit, 9 * MS, &mut now);
        assert_eq!(limit.current(), 2, "at the floor while measuring");
        answer(&mut limit, 9 * MS, &mut now);
        assert_eq!(limit.no_load(), Some(9 * MS));
        assert_eq!(limit.current(), 10, "back to the limit before");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_failure_is_no_no_load_latency_and_zero_latencies_are_no_queue() {
        let start = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new().initial(40), start);
        // A proxy's instant 502 among 20-ms successes.
        limit.sent();
        limit.finished(Some(MS), false, start + 20 * MS);
        // The window it closes holds too few successes to tell a mean: measured in the next.
        for i in 1..=2 * MIN_SAMPLES as u32 + 2 {
            limit.sent();
            limit.finished(Some(20 * MS), true, start + 100 * MS + i * 10 * MS);
        }
        assert_eq!(limit.no_load(), Some(20 * MS));
        // An in-process endpoint answers in no time: nothing queues, the limit stays.
        let mut instant = Limit::new(AdaptiveConcurrency::new().initial(40), start);
        for round in 1..=3_u32 {
            for _ in 0..MIN_SAMPLES {
                instant.sent();
                instant.finished(Some(Duration::ZERO), true, start + 100 * MS * round);
            }
        }
        assert_eq!(instant.current(), 40);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_queued_before_a_cut_are_no_sample_of_the_window_after_it() {
        let start = Instant::now();
        let mut limit = Limit::new(AdaptiveConcurrency::new().initial(9), start);
        let mut now = start;
        let mut answer = |limit: &mut Limit, latency: Duration, after: Duration| {
            for _ in 0..MIN_SAMPLES {
                limit.sent();
                now += after;
                limit.finished(Some(latency), true, now);
            }
        };
        answer(&mut limit, 5 * MS, 20 * MS);
        assert_eq!(limit.no_load(), Some(5 * MS));
        // A window at 9 over an endpoint of 8 (9/8 of 5 ms): cut to what it served.
        while limit.admits() {
            limit.sent();
        }
        answer(&mut limit, 5625 * MS / 1000, 20 * MS);
        assert_eq!(limit.current(), 8);
        // Answers that queued under 9 arrive just after the cut, then answers at 8: the window
        // after the cut shows no queue, and the no-load latency stays.
        answer(&mut limit, 5625 * MS / 1000, MS / 8);
        answer(&mut limit, 5 * MS, 20 * MS);
        assert_eq!(limit.no_load(), Some(5 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn the_no_load_latency_is_corrected_from_successes_only_over_the_tolerance() {
        let config = AdaptiveConcurrency::new().initial(8);
        let mut limit = Limit::new(config, Instant::now());
        let mut now = Instant::now();
        // A window of 8 answers, 20 ms apart, the first `failures` of them timed out at 20 ms.
        let mut window = |limit: &mut Limit, latency: Duration, failures: usize| {
            while limit.admits() {
                limit.sent();
            }
            for i in 0..MIN_SAMPLES {
                limit.sent();
                now += 20 * MS;
                let failed = i < failures;
                limit.finished(Some(if failed { 20 * MS } else { latency }), !failed, now);
            }
        };
        window(&mut limit, 5 * MS, 0);
        assert_eq!(limit.no_load(), Some(5 * MS));
        // Right after a cut, a window still queued with a timeout in it: cut again, no
        // correction.
        limit.cut = true;
        window(&mut limit, 8 * MS, 1);
        assert_eq!(limit.no_load(), Some(5 * MS));
        assert!(limit.current() < 8, "cut");
        // One of successes only: corrected.
        limit.cut = true;
        window(&mut limit, 6 * MS, 0);
        assert_eq!(limit.no_load(), Some(6 * MS));
        // With a tolerance of 1.5, a window 1.5 times the no-load latency is no queue: the
        // correction is a window's mean over it.
        let mut tolerant = Limit::new(config.tolerance(1.5), Instant::now());
        window(&mut tolerant, 5 * MS, 0);
        tolerant.cut = true;
        window(&mut tolerant, 9 * MS, 0);
        assert_eq!(tolerant.no_load(), Some(6 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_sent_before_a_measurement_began_are_no_sample_of_it() {
        let start = Instant::now();
        let config = AdaptiveConcurrency::new().probe_every(Duration::from_secs(1));
        let mut limit = Limit::new(config, start);
        for i in 1..=MIN_SAMPLES as u32 {
            limit.sent();
            limit.finished(Some(5 * MS), true, start + 100 * MS + i * MS);
        }
        // Past the probe time: the window that closes then starts a measurement.
        let probe = start + Duration::from_secs(2);
        for _ in 0..MIN_SAMPLES {
            limit.sent();
            limit.finished(Some(5 * MS), true, probe);
        }
        assert_eq!(limit.current(), 2, "measuring at the floor");
        // Loaded answers sent before the measurement began, then unloaded ones.
        for _ in 0..WINDOW_SAMPLES {
            limit.sent();
            limit.finished(Some(50 * MS), true, probe + 10 * MS);
        }
        assert_eq!(
            limit.current(),
            2,
            "still measuring: the loaded answers did not count"
        );
        for i in 1..=MIN_SAMPLES as u32 {
            limit.sent();
            limit.finished(Some(6 * MS), true, probe + 200 * MS + i * MS);
        }
        assert_eq!(limit.no_load(), Some(6 * MS));
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
