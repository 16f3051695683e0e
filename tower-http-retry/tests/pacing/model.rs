//! A randomized model test of the pacer and the retry future: seeded cases on tokio's paused
//! clock, each driving a handful of requests through a layer with random settings (attempts,
//! deadline, budget, pacing parameters, a circuit breaker below or not) against endpoints with
//! random outages (503, 503 with `Retry-After`, 429 with and without a hint, refused and reset
//! connections), random failures and used-up quotas while up, random latencies, and callers that
//! poll late, await two futures in reverse order, or drop a future mid-wait, with a shutdown now
//! and then.
//!
//! Every case asserts:
//! * **liveness**: every request the caller awaits finishes within a bound derived from its
//!   deadline, its attempts, the outages and the shutdown ([`Case::bound`]);
//! * **accounting**: every request has exactly one report, the layer's counters agree with the
//!   reports (stops per reason, attempts), the attempts agree with what the service below the
//!   layer saw, and `pacing_stats` counts exactly the requests deferred;
//! * **cleanliness**: once every request is done nobody waits in any queue; read long after,
//!   every endpoint is open or (down, with no demand) probing, never paused or ramping; and a new
//!   request to each endpoint, once it is healthy, is delivered (no probe slot or head is lost).
//!
//! `cargo test --test pacing model` runs the CI part; the larger run is ignored:
//! `cargo test --release --all-features --test pacing model -- --ignored --nocapture`.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::pacing::{PacingMode, PacingStats};
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{RandomSource, RetryStats};
use tower_http_retry::{
    AbortSignal, Backoff, CircuitBreakerLayer, Jitter, Pacing, RetryLayer, RetryReport, StopReason,
};

type Req = http::Request<String>;
type Res = http::Response<String>;
type Inner = BoxCloneService<Req, Res, BoxError>;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// The longest an attempt takes (a slow answer).
const LATENCY_MAX: Duration = Duration::from_millis(1500);
/// The longest single wait the layer can choose: the backoff cap, the `Retry-After` clamp and a
/// breaker's open duration are all at most this.
const WAIT_MAX: Duration = Duration::from_secs(2);
/// Room for the scheduling of a case's tasks on the paused clock.
const SLACK: Duration = Duration::from_millis(50);

/// What an endpoint answers during an outage.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Unavailable,
    UnavailableRetryAfter,
    TooManyRequests,
    TooManyRequestsHint,
    Refused,
    Reset,
    /// 503, half of them with `Retry-After`: the plain ones mark the endpoint down, the others
    /// pause it.
    Mixed,
    /// A rate limiter: half the requests served, the others 429 with `Retry-After: 1` (a rate
    /// signal while the endpoint takes requests, not a halt).
    Limited,
    /// 429 with `x-ratelimit-remaining: 0` and a reset: the quota the endpoint shares is used
    /// up.
    QuotaUsedUp,
}

#[derive(Clone, Debug)]
struct EndpointPlan {
    /// From, until, what.
    outages: Vec<(Duration, Duration, Fault)>,
    /// While up: the share of 503s, and of successes that used up their quota.
    fail_ratio: f64,
    quota_ratio: f64,
}

/// How the caller polls a request's future.
#[derive(Clone, Copy, Debug)]
enum Poll {
    /// Awaited at once.
    Prompt,
    /// Made, then awaited this much later.
    Late(Duration),
    /// Made together with the next request's future; that one is awaited first.
    PairFirst,
    /// Awaited at once, and dropped after this long if not finished.
    DropAfter(Duration),
}

#[derive(Clone, Debug)]
struct RequestPlan {
    at: Duration,
    endpoint: usize,
    post: bool,
    poll: Poll,
}

#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    endpoints: Vec<EndpointPlan>,
    requests: Vec<RequestPlan>,
    max_attempts: u32,
    deadline: Option<Duration>,
    budget: bool,
    outage_after: u32,
    probes_in_flight: u32,
    probe_interval: Duration,
    max_waiters: usize,
    max_endpoints: usize,
    first_attempts: bool,
    breaker: Option<Duration>,
    shutdown_at: Option<Duration>,
    /// New requests to an endpoint known to be down that would wait past their deadline are
    /// handed back unsent (`fail_unsent`), instead of sent once.
    fail_unsent: bool,
}

impl Case {
    fn draw(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        // Hints twice as often as the rest: a pause that comes while a probe is in flight is
        // where a queue can be stranded.
        let faults = [
            Fault::Unavailable,
            Fault::UnavailableRetryAfter,
            Fault::UnavailableRetryAfter,
            Fault::TooManyRequests,
            Fault::TooManyRequestsHint,
            Fault::TooManyRequestsHint,
            Fault::Refused,
            Fault::Reset,
            Fault::Limited,
            Fault::Limited,
            Fault::QuotaUsedUp,
        ];
        let endpoints = (0..rng.random_range(1..=2))
            .map(|_| {
                let mut outages = Vec::new();
                let mut from = Duration::from_millis(rng.random_range(0..1500));
                for _ in 0..rng.random_range(0..=2) {
                    let until = from + Duration::from_millis(rng.random_range(200..4000));
                    outages.push((from, until, faults[rng.random_range(0..faults.len())]));
                    from = until + Duration::from_millis(rng.random_range(0..2000));
                }
                EndpointPlan {
                    outages,
                    fail_ratio: [0.0, 0.05, 0.2][rng.random_range(0..3)],
                    quota_ratio: [0.0, 0.05][rng.random_range(0..2)],
                }
            })
            .collect::<Vec<_>>();
        let mut requests = Vec::new();
        for _ in 0..rng.random_range(1..=20) {
            let poll = match rng.random_range(0..10) {
                0..=4 => Poll::Prompt,
                5 | 6 => Poll::Late(Duration::from_millis(rng.random_range(0..2000))),
                7 | 8 => Poll::PairFirst,
                _ => Poll::DropAfter(Duration::from_millis(rng.random_range(0..3000))),
            };
            requests.push(RequestPlan {
                at: Duration::from_millis(rng.random_range(0..3000)),
                endpoint: rng.random_range(0..endpoints.len()),
                post: rng.random_bool(0.1),
                poll,
            });
        }
        // A pair's second future is made with the first, to the same endpoint.
        let mut i = 0;
        while i < requests.len() {
            if matches!(requests[i].poll, Poll::PairFirst) {
                if i + 1 < requests.len() {
                    requests[i + 1].at = requests[i].at;
                    requests[i + 1].endpoint = requests[i].endpoint;
                    requests[i + 1].poll = Poll::Prompt;
                    i += 1;
                } else {
                    requests[i].poll = Poll::Prompt;
                }
            }
            i += 1;
        }
        let mut case = Case {
            seed,
            max_attempts: rng.random_range(1..=6),
            deadline: rng
                .random_bool(0.3)
                .then(|| Duration::from_millis(rng.random_range(300..6000))),
            budget: rng.random_bool(0.5),
            outage_after: rng.random_range(1..=4),
            probes_in_flight: if rng.random_bool(0.7) { 1 } else { 2 },
            probe_interval: Duration::from_millis(rng.random_range(200..=800)),
            max_waiters: rng.random_range(1..=16),
            max_endpoints: rng.random_range(1..=2),
            first_attempts: rng.random_bool(0.5),
            breaker: rng
                .random_bool(0.25)
                .then(|| Duration::from_millis(rng.random_range(300..=2000))),
            shutdown_at: rng
                .random_bool(0.15)
                .then(|| Duration::from_millis(rng.random_range(0..6000))),
            fail_unsent: rng.random_bool(0.5),
            endpoints,
            requests,
        };
        if rng.random_bool(0.2) {
            case.shape_a_pause_during_a_probe(&mut rng);
        }
        case
    }

    /// Reshapes the case towards the sequence that once stranded a queue (defect 1):
    /// one endpoint down, some of its answers with `Retry-After`, one probe at a time, and first attempts
    /// sent on their own while it is down, so that an answer asking for a pause can come while
    /// the probe is in flight, with nobody left to wake the queue but the pacer.
    fn shape_a_pause_during_a_probe(&mut self, rng: &mut SmallRng) {
        let from = Duration::from_millis(rng.random_range(0..500));
        let until = from + Duration::from_millis(rng.random_range(1500..4000));
        self.endpoints = vec![EndpointPlan {
            outages: vec![(from, until, Fault::Mixed)],
            fail_ratio: 0.0,
            quota_ratio: 0.0,
        }];
        for request in &mut self.requests {
            request.endpoint = 0;
            if !matches!(request.poll, Poll::PairFirst) {
                request.poll = Poll::Prompt;
            }
            request.at = request.at.min(until);
        }
        self.first_attempts = false;
        self.probes_in_flight = 1;
        self.deadline = None;
        self.breaker = None;
        self.shutdown_at = None;
    }

    /// When the last outage of `endpoint` ends.
    fn outages_end(&self, endpoint: usize) -> Duration {
        let plan = &self.endpoints[endpoint];
        plan.outages
            .iter()
            .map(|(_, until, _)| *until)
            .max()
            .unwrap_or_default()
    }

    /// The latest a request to `endpoint` made at `made` and first polled at `polled` (times from
    /// the case's start) may finish:
    /// * in general, once its endpoint's outages are over, each of its attempts takes at most
    ///   the longest latency, the longest wait the layer chooses, and a wait in the queue behind
    ///   every other request at the probe rate (the slowest release there is);
    /// * with a deadline, no wait goes past it, so at most one attempt is sent after it (a first
    ///   attempt, which has no answer to return, or one in flight);
    /// * after a shutdown, no request waits: at most the attempt in flight (or a first attempt
    ///   sent as the shutdown finds it) is still to come back.
    fn bound(&self, endpoint: usize, made: Duration, polled: Duration) -> Duration {
        // Every request ahead may cost a release at the slowest rate, and a pause (a used-up
        // quota or a hint, clamped to `WAIT_MAX`) that its answer asked for.
        let queue = (self.probe_interval * 3 / 2 + WAIT_MAX) * self.requests.len() as u32;
        let per_attempt = LATENCY_MAX + WAIT_MAX + queue;
        let mut bound =
            polled.max(self.outages_end(endpoint)) + per_attempt * (self.max_attempts + 1) + SLACK;
        if let Some(deadline) = self.deadline {
            bound = bound.min(polled.max(made + deadline) + LATENCY_MAX + SLACK);
        }
        if let Some(shutdown) = self.shutdown_at {
            bound = bound.min(polled.max(shutdown) + LATENCY_MAX + SLACK);
        }
        bound
    }
}

/// The endpoints, as the service below the layer sees them.
struct World {
    start: Instant,
    rng: SmallRng,
    plans: Vec<EndpointPlan>,
    /// After the case: every endpoint answers 200 at once.
    healthy: bool,
}

impl World {
    fn answer(&mut self, request: &Req) -> (Duration, Result<Res, BoxError>) {
        let host = request.uri().host().unwrap_or_default();
        let endpoint: usize = host
            .trim_start_matches('e')
            .trim_end_matches(".test")
            .parse()
            .unwrap_or(0);
        if self.healthy {
            return (MS, Ok(status(200)));
        }
        let now = self.start.elapsed();
        // Now and then a slow answer: a probe in flight for a while is when a pause from
        // another answer can come in between.
        let latency = if self.rng.random_bool(0.4) {
            Duration::from_millis(self.rng.random_range(100..=LATENCY_MAX.as_millis() as u64))
        } else {
            Duration::from_millis(self.rng.random_range(1..=40))
        };
        let plan = &self.plans[endpoint];
        let fault = plan
            .outages
            .iter()
            .find(|(from, until, _)| *from <= now && now < *until)
            .map(|(_, _, fault)| *fault);
        let answer = match fault {
            Some(Fault::Unavailable) => Ok(status(503)),
            Some(Fault::UnavailableRetryAfter) => Ok(header(status(503), "retry-after", "1")),
            Some(Fault::TooManyRequests) => Ok(status(429)),
            Some(Fault::TooManyRequestsHint) => Ok(header(status(429), "retry-after-ms", "300")),
            Some(Fault::Refused) => {
                Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
            }
            Some(Fault::Mixed) if self.rng.random_bool(0.5) => {
                Ok(header(status(503), "retry-after", "1"))
            }
            Some(Fault::Mixed) => Ok(status(503)),
            Some(Fault::Limited) if self.rng.random_bool(0.5) => Ok(status(200)),
            Some(Fault::Limited) => Ok(header(status(429), "retry-after", "1")),
            Some(Fault::QuotaUsedUp) => Ok(header(
                header(status(429), "x-ratelimit-remaining", "0"),
                "x-ratelimit-reset",
                "1",
            )),
            Some(Fault::Reset) => {
                Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
            }
            None if self.rng.random_bool(plan.fail_ratio) => Ok(status(503)),
            None if self.rng.random_bool(plan.quota_ratio) => Ok(header(
                header(status(200), "x-ratelimit-remaining", "0"),
                "x-ratelimit-reset",
                "1",
            )),
            None => Ok(status(200)),
        };
        (latency, answer)
    }
}

fn status(code: u16) -> Res {
    http::Response::builder()
        .status(code)
        .body(String::new())
        .unwrap()
}

fn header(mut response: Res, name: &'static str, value: &'static str) -> Res {
    response
        .headers_mut()
        .insert(name, http::HeaderValue::from_static(value));
    response
}

fn request(plan: &RequestPlan, id: usize, slot: &ReportSlot) -> Req {
    let uri = format!("http://e{}.test/", plan.endpoint);
    let mut request = if plan.post {
        http::Request::post(uri)
    } else {
        http::Request::get(uri)
    }
    .body(String::new())
    .unwrap();
    if plan.post && id % 2 == 0 {
        // Half the POSTs carry a key (retried), half not (sent again only if never sent).
        let key = http::HeaderValue::from(id);
        request.headers_mut().insert("idempotency-key", key);
    }
    request.extensions_mut().insert(slot.clone());
    request
}

/// What became of one request.
#[derive(Debug)]
struct Record {
    id: usize,
    /// When it was first polled and when it finished (`None`: dropped by its caller), from
    /// the case's start.
    polled: Duration,
    finished: Option<Duration>,
    status: Option<u16>,
}

/// Runs one case; `Err` says what went wrong.
fn run(case: &Case) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run_case(case))
}

async fn run_case(case: &Case) -> Result<(), String> {
    let start = Instant::now();
    let signal = AbortSignal::new();
    let world = Arc::new(Mutex::new(World {
        start,
        rng: SmallRng::seed_from_u64(case.seed ^ 0x5eed),
        plans: case.endpoints.clone(),
        healthy: false,
    }));
    let served = {
        let world = Arc::clone(&world);
        service_fn(move |request: Req| {
            let (latency, answer) = world.lock().unwrap().answer(&request);
            async move {
                tokio::time::sleep(latency).await;
                answer
            }
        })
    };
    let below: Inner = match case.breaker {
        Some(open) => BoxCloneService::new(
            CircuitBreakerLayer::builder()
                .consecutive_failures(3)
                .without_failure_ratio()
                .open_duration(open)
                .max_open_duration(WAIT_MAX)
                .open_jitter(0.0)
                .random_source(RandomSource::seeded(case.seed))
                .abort_signal(signal.clone())
                .build()
                .unwrap()
                .layer(served),
        ),
        None => BoxCloneService::new(served),
    };
    // What the layer sends: every attempt, counted where it leaves the layer.
    let sent = Arc::new(AtomicU64::new(0));
    let counted: Inner = {
        let sent = Arc::clone(&sent);
        BoxCloneService::new(service_fn(move |request: Req| {
            sent.fetch_add(1, Ordering::Relaxed);
            below.clone().oneshot(request)
        }))
    };
    let mut builder = RetryLayer::builder()
        .max_attempts(case.max_attempts)
        .backoff(Backoff::new(Jitter::Full, 10 * MS, SEC))
        .hint_policy(HintPolicy::honored().max_delay(WAIT_MAX))
        .random_source(RandomSource::seeded(case.seed))
        .abort_signal(signal.clone())
        .pacing(
            Pacing::builder()
                .outage_after(case.outage_after)
                .probes_in_flight(case.probes_in_flight)
                .probe_interval(case.probe_interval)
                .max_waiters(case.max_waiters)
                .max_endpoints(case.max_endpoints)
                .first_attempts(case.first_attempts)
                .build()
                .unwrap(),
        );
    if let Some(deadline) = case.deadline {
        builder = builder.deadline(deadline);
    }
    if !case.budget {
        builder = builder.without_budget();
    }
    // The layer as the case drives it: its service, and what it counts.
    type Stats = Box<dyn Fn() -> RetryStats>;
    type Paced = Box<dyn Fn(&http::uri::Authority) -> Option<PacingStats>>;
    let (service, stats, pacing_stats): (Inner, Stats, Paced) = if case.fail_unsent {
        let layer = builder.fail_unsent().build().unwrap();
        let service = BoxCloneService::new(layer.layer(counted));
        let paced = layer.clone();
        (
            service,
            Box::new(move || layer.stats()),
            Box::new(move |a| paced.pacing_stats(Some(a))),
        )
    } else {
        let layer = builder.build().unwrap();
        let service = BoxCloneService::new(layer.layer(counted));
        let paced = layer.clone();
        (
            service,
            Box::new(move || layer.stats()),
            Box::new(move |a| paced.pacing_stats(Some(a))),
        )
    };

    let mut tasks = JoinSet::new();
    if let Some(at) = case.shutdown_at {
        let signal = signal.clone();
        tasks.spawn(async move {
            tokio::time::sleep(at).await;
            signal.shutdown();
            Vec::new()
        });
    }
    let slots: Vec<ReportSlot> = case.requests.iter().map(|_| ReportSlot::new()).collect();
    let mut id = 0;
    while id < case.requests.len() {
        let plan = case.requests[id].clone();
        let mut svc = service.clone();
        let first = request(&plan, id, &slots[id]);
        match plan.poll {
            Poll::PairFirst => {
                let second = request(&case.requests[id + 1], id + 1, &slots[id + 1]);
                tasks.spawn(async move {
                    tokio::time::sleep(plan.at).await;
                    let f1 = svc.ready().await.unwrap().call(first);
                    let f2 = svc.ready().await.unwrap().call(second);
                    let r2 = f2.await;
                    let second = Record {
                        id: id + 1,
                        polled: plan.at,
                        finished: Some(start.elapsed()),
                        status: r2.ok().map(|r| r.status().as_u16()),
                    };
                    let polled = start.elapsed();
                    let r1 = f1.await;
                    let first = Record {
                        id,
                        polled,
                        finished: Some(start.elapsed()),
                        status: r1.ok().map(|r| r.status().as_u16()),
                    };
                    vec![first, second]
                });
                id += 2;
                continue;
            }
            poll => {
                tasks.spawn(async move {
                    tokio::time::sleep(plan.at).await;
                    let future = svc.ready().await.unwrap().call(first);
                    if let Poll::Late(after) = poll {
                        tokio::time::sleep(after).await;
                    }
                    let polled = start.elapsed();
                    let result = match poll {
                        Poll::DropAfter(after) => tokio::time::timeout(after, future).await.ok(),
                        _ => Some(future.await),
                    };
                    vec![Record {
                        id,
                        polled,
                        finished: result.is_some().then(|| start.elapsed()),
                        status: result.and_then(|r| r.ok()).map(|r| r.status().as_u16()),
                    }]
                });
            }
        }
        id += 1;
    }

    // Liveness: every request within its bound; past the last bound, whatever is left is
    // stranded.
    let last_bound = (0..case.requests.len())
        .map(|i| {
            let plan = &case.requests[i];
            let late = match plan.poll {
                Poll::Late(after) => after,
                _ => Duration::ZERO,
            };
            // A pair's first is polled once the second is done: at most its bound.
            let polled = plan.at + late;
            case.bound(plan.endpoint, plan.at, polled) * 2
        })
        .max()
        .unwrap_or_default();
    let mut records = Vec::new();
    let give_up = start + last_bound + SEC;
    while let Ok(Some(done)) = tokio::time::timeout_at(give_up, tasks.join_next()).await {
        records.extend(done.map_err(|e| format!("a task panicked: {e}"))?);
    }
    if !tasks.is_empty() {
        let waiting: Vec<_> = (0..case.requests.len())
            .filter(|i| !records.iter().any(|r| r.id == *i))
            .collect();
        let stats: Vec<_> = (0..case.endpoints.len())
            .map(|e| pacing_stats(&format!("e{e}.test").parse().unwrap()))
            .collect();
        tasks.abort_all();
        return Err(format!(
            "stranded: requests {waiting:?} unfinished {:?} after the start; pacing {stats:?}",
            last_bound + SEC
        ));
    }
    for record in &records {
        let plan = &case.requests[record.id];
        let bound = case.bound(plan.endpoint, plan.at, record.polled);
        if let Some(finished) = record.finished {
            if finished > bound {
                return Err(format!(
                    "request {} finished at {finished:?}, past its bound {bound:?} ({:?})",
                    record.id,
                    slots[record.id].take()
                ));
            }
        }
    }

    // Accounting.
    let reports: Vec<RetryReport> = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| slot.take().ok_or(format!("request {i} has no report")))
        .collect::<Result<_, _>>()?;
    let stats = stats();
    for reason in StopReason::ALL {
        let reported = reports.iter().filter(|r| r.stop == reason).count() as u64;
        if stats.stopped(reason) != reported {
            return Err(format!(
                "{reason:?}: the layer counted {}, the reports say {reported}",
                stats.stopped(reason)
            ));
        }
    }
    let attempts: u64 = reports.iter().map(|r| u64::from(r.attempts)).sum();
    let below = sent.load(Ordering::Relaxed);
    if attempts != below || stats.attempts != below {
        return Err(format!(
            "attempts: reports {attempts}, layer {}, sent below the layer {below}",
            stats.attempts
        ));
    }
    for (record, report) in records.iter().map(|r| (r, &reports[r.id])) {
        if report.stop == StopReason::Success
            && record.finished.is_some()
            && record.status != Some(200)
        {
            return Err(format!(
                "request {} succeeded with {:?}",
                record.id, record.status
            ));
        }
        if report.attempts == 0
            && !(report.stop == StopReason::Cancelled
                || (case.fail_unsent && report.stop == StopReason::Deferred))
        {
            return Err(format!(
                "request {} has no attempt but stopped {:?} (fail_unsent: {})",
                record.id, report.stop, case.fail_unsent
            ));
        }
        if report.stop == StopReason::Deferred && report.resend_after.is_none() {
            return Err(format!(
                "request {} deferred with no time: {report:?}",
                record.id
            ));
        }
    }
    let authorities: Vec<http::uri::Authority> = (0..case.endpoints.len())
        .map(|e| format!("e{e}.test").parse().unwrap())
        .collect();
    let deferred: u64 = authorities
        .iter()
        .filter_map(&pacing_stats)
        .map(|s| s.deferred)
        .sum();
    let stopped = stats.stopped(StopReason::Deferred);
    // An endpoint forgotten (more endpoints than `max_endpoints`) takes its count with it.
    let exact = case.max_endpoints >= case.endpoints.len();
    if (exact && deferred != stopped) || deferred > stopped {
        return Err(format!("deferred: pacing {deferred}, reports {stopped}"));
    }

    // Cleanliness: nobody waits; long after, no pause or ramp is left; a new request is
    // delivered once the endpoint is healthy.
    for a in &authorities {
        if let Some(s) = pacing_stats(a) {
            if s.waiting != 0 {
                return Err(format!(
                    "{a}: {} still waiting once all are done",
                    s.waiting
                ));
            }
        }
    }
    tokio::time::sleep(10 * SEC).await;
    for a in &authorities {
        let _ = pacing_stats(a);
    }
    tokio::time::sleep(2 * SEC).await;
    for a in &authorities {
        if let Some(s) = pacing_stats(a) {
            if !matches!(s.mode, PacingMode::Open | PacingMode::Probing) {
                return Err(format!("{a} long after the last request: {s:?}"));
            }
        }
    }
    world.lock().unwrap().healthy = true;
    for (e, a) in authorities.iter().enumerate() {
        let plan = RequestPlan {
            at: Duration::ZERO,
            endpoint: e,
            post: false,
            poll: Poll::Prompt,
        };
        // A breaker opened at the end may refuse the first tries: a few, each bounded.
        let mut delivered = false;
        for _ in 0..5 {
            let slot = ReportSlot::new();
            let tail = service.clone().oneshot(request(&plan, 0, &slot));
            match tokio::time::timeout(case.bound(e, Duration::ZERO, Duration::ZERO), tail).await {
                Ok(Ok(response)) if response.status() == 200 => {
                    delivered = true;
                    break;
                }
                Ok(_) => tokio::time::sleep(WAIT_MAX).await,
                Err(_) => {
                    return Err(format!(
                        "{a}: a new request to the healthy endpoint hangs: {:?}",
                        pacing_stats(a)
                    ))
                }
            }
        }
        if !delivered {
            return Err(format!("{a}: healthy, but no new request delivered"));
        }
    }
    Ok(())
}

/// Runs the cases of `seeds`; fails with the first few that went wrong, each with its plan.
fn run_seeds(seeds: std::ops::Range<u64>) {
    let mut failures = Vec::new();
    let count = seeds.end - seeds.start;
    for seed in seeds {
        let case = Case::draw(seed);
        if let Err(why) = run(&case) {
            failures.push(format!("seed {seed}: {why}\n  {case:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// The CI part: 10,000 cases in four shards, which the test harness runs in parallel.
#[test]
fn model_seeds_0_to_2500() {
    run_seeds(0..2_500);
}

#[test]
fn model_seeds_2500_to_5000() {
    run_seeds(2_500..5_000);
}

#[test]
fn model_seeds_5000_to_7500() {
    run_seeds(5_000..7_500);
}

#[test]
fn model_seeds_7500_to_10000() {
    run_seeds(7_500..10_000);
}

#[test]
#[ignore = "the larger run: 100,000 cases, about 20 minutes in a debug build"]
fn model_seeds_10000_to_110000() {
    run_seeds(10_000..110_000);
}
