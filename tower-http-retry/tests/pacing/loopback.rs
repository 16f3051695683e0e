//! Endpoint pacing against a real hyper server on `127.0.0.1:0`, through hyper-util's legacy
//! client: the server answers 503 to everything for [`OUTAGE`], then admits [`CAPACITY`]
//! requests per second (a token bucket) and answers 503 to the excess.
//!
//! Real sockets mean real time (paused time does not drive them), so the test takes a few
//! seconds, and every bound is derived from the pacing parameters with the room a loaded
//! 2-core machine needs stated next to it. Each run prints its figures (`--nocapture`).

use crate::support::{self, Hit, Reply, TestServer};
use http::uri::Authority;
use http::{HeaderValue, Method};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tower::{Layer, ServiceExt};
use tower_http_retry::pacing::{PacingMode, PacingStats};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::{Idempotency, RandomSource};
use tower_http_retry::{Pacing, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);

/// Deliveries sent at once.
const N: usize = 400;
/// How long the server answers every request with 503, from its start.
const OUTAGE: Duration = Duration::from_secs(2);
/// What the server admits after the outage, per second...
const CAPACITY: f64 = 200.0;
/// ...with room for this many at once (25 ms worth), so that arrivals bunched a little by the
/// machine are not turned away.
const BURST: f64 = 5.0;
/// Attempts per delivery: far more than a delivery needs here (its first attempt, perhaps a
/// failed probe, a few losses to the ramp); a delivery that runs out says the pacer let it
/// fail over and over.
const MAX_ATTEMPTS: u32 = 20;

// The pacing parameters the bounds derive from: the defaults, spelled out.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);
const OUTAGE_AFTER: u32 = 5;
const RAMP_INTERVAL: Duration = Duration::from_millis(100);
const LOSS_THRESHOLD: f64 = 0.05;

/// The first target for an endpoint with a capacity: 99 % delivered within N / capacity plus
/// this, after recovery. Here the ramp starts at most 3/2 probe intervals after recovery (the
/// next probe), its first two releases are up to a probe gap and a gap at the probe rate apart
/// (1.25 s), slow start then reaches the capacity in about 0.3 s, and N / capacity is 2 s:
/// about 4.3 s at worst, before the machine's own delays.
const DELIVERY_SLACK: Duration = Duration::from_secs(3);
/// The whole test, whatever happens: a pacer that never lets the queue go fails, not hangs.
const GIVE_UP: Duration = Duration::from_secs(30);

/// The most attempts the pacer can let reach the server while it is down, beyond the first
/// attempts it sent before it knew (counted apart, from the reports):
///
/// * `OUTAGE_AFTER - 1` retries decided before the pacer saw the endpoint go down: their
///   backoff sleep began while it was open, and a sleep that ends sends its attempt;
/// * probes: the pacer releases one at least `PROBE_INTERVAL / 2` after entering probing and
///   after the previous one (the jitter is ±50 %), so an outage of `OUTAGE` sees at most
///   `2 × OUTAGE / PROBE_INTERVAL` of them, plus one for the rounding. A loaded machine only
///   delays probes: each gap counts from the release that actually happened.
///
/// With the defaults: 4 + 8 + 1 = 13, against the N = 400 first attempts of the burst.
fn paced_while_down_bound() -> usize {
    let probes = (2.0 * OUTAGE.as_secs_f64() / PROBE_INTERVAL.as_secs_f64()).floor() as usize;
    (OUTAGE_AFTER - 1) as usize + probes + 1
}

/// The most 503s the server may answer for lack of capacity after it recovers. With `A` the
/// most the token bucket admits in one ramp interval (`CAPACITY × RAMP_INTERVAL + BURST` = 25)
/// and `θ` the loss threshold:
///
/// * intervals that lose at most `θ` of what they release do not cut the rate; summed over the
///   run they lose at most `θ / (1 − θ)` of the successes, that is of N: 22 (about the first
///   target of 5 % of N);
/// * the interval in which slow start crosses the capacity loses at most `(1/(1 − θ) + 1) × A`
///   = 52. The interval before it lost at most `θ`, so it released at most `A / (1 − θ)`, and
///   as the rate only grows in slow start, it ran at most that per interval; its successes (at
///   most `A`) each added one release per interval. In the crossing interval each success
///   again adds one release, so its losses (releases − successes) are at most what its
///   starting rate releases. The cut at its close leaves 70 % of what was accepted, at most
///   `0.7 × A` = 17.5 per interval, under the capacity of 20;
/// * one interval's capacity `A` = 25 for the rest: the cuts of the cubic phase, each of which
///   loses what the curve released past the capacity in one interval, and a server thread
///   that a loaded machine stalls for an interval, whose backlog the bucket cannot absorb.
///
/// 22 + 52 + 25 = 99, a quarter of N. A ramp that did not cut at all would send the queue at
/// thousands per second into a bucket of 200 per second: hundreds of 503s, and deliveries out
/// of attempts.
fn overload_bound() -> usize {
    let per_interval = CAPACITY * RAMP_INTERVAL.as_secs_f64() + BURST;
    let under_threshold = LOSS_THRESHOLD / (1.0 - LOSS_THRESHOLD) * N as f64;
    let crossing = (1.0 / (1.0 - LOSS_THRESHOLD) + 1.0) * per_interval;
    (under_threshold.ceil() + crossing.ceil() + per_interval) as usize
}

/// One request as the server saw it.
#[derive(Debug)]
struct Arrival {
    /// Since the server started.
    at: Duration,
    id: String,
    /// 1 for the first request with this id, 2 for the second, ...
    nth: u32,
    status: u16,
}

/// The endpoint: down, then a token bucket; it logs every arrival.
struct Endpoint {
    start: Instant,
    tokens: f64,
    /// When the bucket was last refilled, since the start.
    refilled: Duration,
    arrivals: Vec<Arrival>,
}

impl Endpoint {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            tokens: BURST,
            refilled: OUTAGE,
            arrivals: Vec::new(),
        }
    }

    fn answer(&mut self, hit: &Hit) -> u16 {
        let at = self.start.elapsed();
        let status = if at < OUTAGE {
            503
        } else {
            let refill = at.saturating_sub(self.refilled).as_secs_f64() * CAPACITY;
            self.tokens = (self.tokens + refill).min(BURST);
            self.refilled = at;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                200
            } else {
                503
            }
        };
        self.arrivals.push(Arrival {
            at,
            id: hit.id.clone(),
            nth: hit.nth,
            status,
        });
        status
    }
}

/// How one delivery ended, as its sender saw it.
struct Delivered {
    id: String,
    status: u16,
    report: RetryReport,
}

impl Delivered {
    /// Whether its first attempt waited in the endpoint's queue (the pacer already knew the
    /// endpoint was down), which makes it a probe if it went while the endpoint was down.
    fn first_attempt_waited(&self) -> bool {
        self.report
            .delays
            .iter()
            .any(|d| d.after_attempt == 0 && d.source == DelaySource::Paced)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_through_an_outage_and_a_capacity_limit_reaches_the_server_at_the_probe_rate_and_is_delivered(
) {
    let endpoint = Arc::new(Mutex::new(Endpoint::new()));
    let server = TestServer::start({
        let endpoint = Arc::clone(&endpoint);
        move |hit| {
            let status = lock(&endpoint).answer(hit);
            Reply::status(status)
        }
    })
    .await;
    let start = lock(&endpoint).start;
    let uri = server.uri("/hooks");
    let authority: Authority = uri.authority().expect("a loopback URI").clone();

    let pacing = Pacing::builder()
        .probe_interval(PROBE_INTERVAL)
        .outage_after(OUTAGE_AFTER)
        .ramp_interval(RAMP_INTERVAL)
        .loss_threshold(LOSS_THRESHOLD)
        .build()
        .unwrap();
    let layer = RetryLayer::builder()
        .max_attempts(MAX_ATTEMPTS)
        .random_source(RandomSource::seeded(10))
        .pacing(pacing)
        .build()
        .unwrap();
    let service = layer.layer(support::client());

    // What the pacer reports of the endpoint, every 10 ms.
    let samples: Arc<Mutex<Vec<(Duration, PacingStats)>>> = Arc::default();
    let sampler = tokio::spawn({
        let (layer, samples, authority) = (layer.clone(), Arc::clone(&samples), authority.clone());
        async move {
            let mut tick = tokio::time::interval(10 * MS);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Some(stats) = layer.pacing_stats(Some(&authority)) {
                    lock(&samples).push((start.elapsed(), stats));
                }
            }
        }
    });

    let mut tasks = JoinSet::new();
    for i in 0..N {
        let (service, uri) = (service.clone(), uri.clone());
        tasks.spawn(async move {
            let id = i.to_string();
            let mut request = support::request(Method::POST, &uri, &id, format!("delivery {i}"));
            let key = HeaderValue::from_str(&id).unwrap();
            request
                .headers_mut()
                .insert(Idempotency::KEY_HEADER.clone(), key);
            let response = service
                .oneshot(request)
                .await
                .unwrap_or_else(|e| panic!("delivery {id} ended in an error: {e}"));
            Delivered {
                status: response.status().as_u16(),
                report: RetryReport::of(&response).clone(),
                id,
            }
        });
    }
    let delivered = tokio::time::timeout(GIVE_UP, tasks.join_all())
        .await
        .expect("every delivery ends");
    let took = start.elapsed();
    sampler.abort();
    let samples = std::mem::take(&mut *lock(&samples));
    let endpoint = lock(&endpoint);
    let arrivals = &endpoint.arrivals;

    // Every delivery got through, and exactly once.
    let failed: Vec<_> = delivered
        .iter()
        .filter(|d| d.status != 200)
        .map(|d| (d.id.as_str(), d.status, d.report.stop, d.report.attempts))
        .collect();
    assert!(failed.is_empty(), "deliveries that failed: {failed:?}");
    assert!(delivered
        .iter()
        .all(|d| d.report.stop == StopReason::Success));
    let mut accepted: HashMap<&str, usize> = HashMap::new();
    for arrival in arrivals.iter().filter(|a| a.status == 200) {
        *accepted.entry(arrival.id.as_str()).or_default() += 1;
    }
    assert_eq!(accepted.len(), N, "the server accepted every delivery");
    assert!(
        accepted.values().all(|&n| n == 1),
        "the server accepted a delivery twice"
    );

    // While down: the first attempts the pacer sent before it knew, then only what it let
    // through.
    let unpaced_first: HashSet<&str> = delivered
        .iter()
        .filter(|d| !d.first_attempt_waited())
        .map(|d| d.id.as_str())
        .collect();
    let down: Vec<&Arrival> = arrivals.iter().filter(|a| a.at < OUTAGE).collect();
    let first_attempts_down = down
        .iter()
        .filter(|a| a.nth == 1 && unpaced_first.contains(a.id.as_str()))
        .count();
    let paced_down = down.len() - first_attempts_down;
    let retries_down = down.iter().filter(|a| a.nth > 1).count();
    // Not vacuous: the outage was seen (enough 503s to mark it down), the pacer went to
    // probing, probes went out while it was down, and the ramp ran after it.
    assert!(down.iter().all(|a| a.status == 503));
    assert!(
        first_attempts_down >= OUTAGE_AFTER as usize,
        "only {first_attempts_down} first attempts met the outage"
    );
    let modes: Vec<PacingMode> = samples.iter().map(|(_, s)| s.mode).collect();
    assert!(
        modes.contains(&PacingMode::Probing),
        "never seen probing: {modes:?}"
    );
    assert!(
        modes.contains(&PacingMode::Ramping),
        "never seen ramping: {modes:?}"
    );
    assert!(
        paced_down >= 1,
        "no probe reached the endpoint while it was down"
    );
    assert!(
        paced_down <= paced_while_down_bound(),
        "{paced_down} paced attempts reached the endpoint while it was down (bound {})",
        paced_while_down_bound()
    );

    // After recovery: the capacity was found (some 503s), with few rejections.
    let up: Vec<&Arrival> = arrivals.iter().filter(|a| a.at >= OUTAGE).collect();
    let overload = up.iter().filter(|a| a.status == 503).count();
    assert!(
        overload >= 1,
        "the ramp never met the capacity: the bound says nothing"
    );
    assert!(
        overload <= overload_bound(),
        "{overload} overload 503s after recovery (bound {})",
        overload_bound()
    );

    // The first delivery target: 99 % within N / capacity + 3 s of recovery.
    let mut accepted_at: Vec<Duration> = up
        .iter()
        .filter(|a| a.status == 200)
        .map(|a| a.at - OUTAGE)
        .collect();
    accepted_at.sort();
    let t99 = accepted_at[N * 99 / 100 - 1];
    let target = Duration::from_secs_f64(N as f64 / CAPACITY) + DELIVERY_SLACK;
    assert!(
        t99 <= target,
        "99 % delivered {t99:?} after recovery (target {target:?})"
    );

    let probing_at = samples
        .iter()
        .find(|(_, s)| s.mode == PacingMode::Probing)
        .map(|(at, _)| *at);
    let ramping_at = samples
        .iter()
        .find(|(_, s)| s.mode == PacingMode::Ramping)
        .map(|(at, _)| *at);
    let probes = samples.last().map_or(0, |(_, s)| s.probes);
    let at_capacity = samples
        .iter()
        .find(|(at, s)| *at >= OUTAGE && s.rate >= CAPACITY)
        .map(|(at, _)| *at - OUTAGE);
    let max_attempts = delivered.iter().map(|d| d.report.attempts).max();
    let last = accepted_at.last().copied().unwrap_or_default();
    let waited = N - unpaced_first.len();
    println!("loopback pacing, {took:?} in all, times from the server's start:");
    println!(
        "  down: {} arrivals: {first_attempts_down} unpaced first attempts, {paced_down} paced \
         (bound {}; {retries_down} retries, {waited} first attempts waited); probing from \
         {probing_at:?}",
        down.len(),
        paced_while_down_bound()
    );
    println!(
        "  up: {} arrivals, {overload} overload 503s (bound {}); ramping from {ramping_at:?}, \
         {probes} probes in all",
        up.len(),
        overload_bound()
    );
    println!(
        "  after recovery: rate at capacity {at_capacity:?}, 99 % delivered {t99:?} (target \
         {target:?}), all {last:?}; most attempts {max_attempts:?}"
    );
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
