//! A server with a knee: a fixed number of workers with a fixed service time, so latency grows
//! with the queue beyond its capacity and nothing fails unless a client's timeout fires. Offered
//! load past the knee, a per-attempt timeout and a retry layer that retries timeouts: what an
//! endpoint that slows down without failing meets, run through each way of bounding what is in
//! flight to it, on a paused clock.
//!
//! The server keeps working on a request whose client gave up (as a real one does: the work is
//! queued), so every timed-out attempt still costs a worker its service time. The load is steady
//! past the knee, or ramps past it and back ([`ramp`]).

pub mod ramp;

use ramp::Ramp;

use http::{Request, Response};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::pacing::{AdaptiveConcurrency, Pacing};
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::RetryLayer;

/// The model and the load offered to it.
#[derive(Clone, Copy, Debug)]
pub struct Knee {
    /// The server's workers.
    pub workers: usize,
    /// Each request's service time on a worker.
    pub service: Duration,
    /// The load offered, as a multiple of the server's capacity (`workers / service`): all
    /// along, or at the top of the ramp.
    pub offered: f64,
    /// How long the load is offered.
    pub length: Duration,
    /// The load ramps up to `offered` and back down, over `length`; `None`: it is steady.
    pub ramp: Option<Ramp>,
    /// The per-attempt timeout.
    pub timeout: Duration,
    /// Attempts per request (the first and its retries).
    pub attempts: u32,
    /// From when a limit counts as settled.
    pub settled_after: Duration,
}

impl Knee {
    /// 8 workers of 5 ms (a knee at 1,600 requests a second), offered 1.5 times that for 30 s,
    /// a per-attempt timeout at 4 times the no-load latency, timed-out attempts retried twice;
    /// a limit counts as settled after 5 s.
    pub fn harness() -> Self {
        Self {
            workers: 8,
            service: Duration::from_millis(5),
            offered: 1.5,
            length: Duration::from_secs(30),
            timeout: Duration::from_millis(20),
            attempts: 3,
            settled_after: Duration::from_secs(5),
            ramp: None,
        }
    }

    /// The same model with its load ramped by `ramp`, over the ramp's length.
    pub fn ramped(self, ramp: Ramp) -> Self {
        Self {
            ramp: Some(ramp),
            length: ramp.length(),
            ..self
        }
    }

    /// The load offered `elapsed` into the run, as a multiple of the capacity.
    pub fn offered_at(&self, elapsed: Duration) -> f64 {
        self.ramp
            .map_or(self.offered, |ramp| ramp.offered_at(self.offered, elapsed))
    }

    /// Requests a second at the knee.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64()
    }

    /// The same model offered half the knee: no limit then measures the no-load latency.
    pub fn no_load(self) -> Self {
        Self {
            offered: 0.5,
            ..self
        }
    }

    /// Requests a second at the knee as the clock delivers it: the workers over the no-load
    /// latency's median in `no_load` (a run of [`Knee::no_load`]; the nominal capacity on the
    /// paused clock, less on the wall clock, whose timers round the service time up).
    pub fn measured_knee(&self, no_load: &KneeRun) -> f64 {
        self.workers as f64 / quantile(&no_load.attempt_latency, 0.5).as_secs_f64()
    }
}

/// What bounds the requests in flight to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// Nothing: the retry layer and its timeout only.
    None,
    /// tower's `ConcurrencyLimit` at this guess, behind tower's `LoadShed`.
    Fixed(usize),
    /// The retry layer's adaptive concurrency (its pacer's queue, with a wait of at most one
    /// timeout, and the request handed back unsent beyond).
    Adaptive,
    /// tower-acc's Gradient2 (its defaults), behind tower's `LoadShed`. Timed on the wall clock
    /// (`std::time::Instant`): a row of [`run_knee_live`] only.
    AccGradient2,
    /// tower-acc's Vegas (its defaults), behind `LoadShed`; wall clock only.
    AccVegas,
    /// tower-resilience's adaptive limiter with Vegas (its defaults), behind `LoadShed`; wall
    /// clock only.
    ResilienceVegas,
}

impl Limiter {
    /// The row's name in the table.
    pub fn label(self) -> String {
        match self {
            Limiter::None => "no limit".into(),
            Limiter::Fixed(limit) => format!("tower `ConcurrencyLimit({limit})` + `LoadShed`"),
            Limiter::Adaptive => "ours: `AdaptiveConcurrency::new()`".into(),
            Limiter::AccGradient2 => "tower-acc `Gradient2` + `LoadShed`".into(),
            Limiter::AccVegas => "tower-acc `Vegas` + `LoadShed`".into(),
            Limiter::ResilienceVegas => "tower-resilience adaptive `Vegas` + `LoadShed`".into(),
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct KneeRun {
    /// Attempts that reached the server.
    pub sent: u64,
    /// Attempts that timed out, and those after the limit counts as settled.
    pub timeouts: u64,
    pub timeouts_settled: u64,
    /// Attempts after a request's first, and those after the limit counts as settled.
    pub retries: u64,
    pub retries_settled: u64,
    /// The latency of every answered attempt (sent to answered).
    pub attempt_latency: Vec<Duration>,
    /// The latency of every delivered request (offered to delivered).
    pub request_latency: Vec<Duration>,
    /// Ours: the limit, read every 100 ms once settled.
    pub limits: Vec<u32>,
    /// Requests offered and delivered by when they were offered, in 100-ms buckets from the
    /// start.
    pub buckets: Vec<Bucket>,
}

/// The requests offered in 100 ms, and how many of them were delivered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    /// Requests offered.
    pub offered: u64,
    /// Of those, delivered.
    pub delivered: u64,
}

/// How long each of [`KneeRun::buckets`] lasts.
pub const BUCKET: Duration = Duration::from_millis(100);

impl KneeRun {
    /// Delivered requests a second over the run.
    pub fn delivered_per_second(&self, knee: &Knee) -> f64 {
        let delivered: u64 = self.buckets.iter().map(|bucket| bucket.delivered).sum();
        delivered as f64 / knee.length.as_secs_f64()
    }

    /// The limit once settled as `min / median / max` (ours), or `–` (no limit read).
    pub fn limits_settled(&self) -> String {
        let mut limits = self.limits.clone();
        limits.sort_unstable();
        match (limits.first(), limits.last()) {
            (Some(low), Some(high)) => format!("{low} / {} / {high}", limits[limits.len() / 2]),
            _ => "–".to_owned(),
        }
    }
}

/// The `q` quantile of `latencies` (nearest rank); zero when there is none.
pub fn quantile(latencies: &[Duration], q: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The server: `workers` that each serve one request in `service`, first come first served.
#[derive(Clone)]
struct Server {
    workers: Arc<Semaphore>,
    service: Duration,
}

impl Server {
    fn call(&self) -> oneshot::Receiver<()> {
        let (answer, answered) = oneshot::channel();
        let (workers, service) = (Arc::clone(&self.workers), self.service);
        // Queued work goes on when its client gives up, as a real server's does.
        tokio::spawn(async move {
            let _worker = workers.acquire_owned().await;
            tokio::time::sleep(service).await;
            let _ = answer.send(());
        });
        answered
    }
}

#[derive(Default)]
struct Log {
    run: KneeRun,
    seen: HashSet<u64>,
}

/// A client of the model: one attempt, each cut at its timeout.
type Attempt = tower::util::BoxCloneService<Request<String>, Response<String>, BoxError>;

/// The retry layer over tower's `LoadShed` over a peer's `limit`, over `attempt`: how each
/// limiter that sheds what it refuses is stacked.
fn shed<L>(retry: RetryLayerBuilder, limit: L, attempt: Attempt) -> Attempt
where
    L: Layer<Attempt>,
    L::Service: Service<Request<String>, Response = Response<String>> + Clone + Send + 'static,
    <L::Service as Service<Request<String>>>::Error: Into<BoxError>,
    <L::Service as Service<Request<String>>>::Future: Send + 'static,
{
    ServiceBuilder::new()
        .layer(retry.fail_unsent().build().expect("a valid layer"))
        .map_err(BoxError::from)
        .load_shed()
        .map_err(Into::<BoxError>::into)
        .layer(limit)
        .service(attempt)
        .boxed_clone()
}

/// Runs `limiter` against the model with `seed`, on a fresh paused-clock runtime (not the
/// peers', which time on the wall clock).
pub fn run_knee(knee: &Knee, limiter: Limiter, seed: u64) -> KneeRun {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
        .block_on(simulate(*knee, limiter, seed))
}

/// Runs `limiter` against the model with `seed` on the wall clock (a fresh one-thread runtime:
/// tokio's timers round to the millisecond, so the model's service time is about 5–6 ms).
pub fn run_knee_live(knee: &Knee, limiter: Limiter, seed: u64) -> KneeRun {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(simulate(*knee, limiter, seed))
}

async fn simulate(knee: Knee, limiter: Limiter, seed: u64) -> KneeRun {
    let start = Instant::now();
    let settled = start + knee.settled_after;
    let log = Arc::new(Mutex::new(Log::default()));
    let server = Server {
        workers: Arc::new(Semaphore::new(knee.workers)),
        service: knee.service,
    };
    // One attempt: counted, timed, cut at the timeout.
    let attempt: Attempt = {
        let log = Arc::clone(&log);
        tower::service_fn(move |request: Request<String>| {
            let (log, answered) = (Arc::clone(&log), server.call());
            let id = request.headers()["x-id"]
                .to_str()
                .ok()
                .and_then(|id| id.parse().ok());
            let timeout = knee.timeout;
            async move {
                let sent = Instant::now();
                {
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    log.run.sent += 1;
                    if !log.seen.insert(id.unwrap_or(0)) {
                        log.run.retries += 1;
                        log.run.retries_settled += u64::from(sent >= settled);
                    }
                }
                match tokio::time::timeout(timeout, answered).await {
                    Ok(_) => {
                        let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                        log.run.attempt_latency.push(sent.elapsed());
                        Ok::<_, BoxError>(Response::new(String::new()))
                    }
                    Err(elapsed) => {
                        let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                        log.run.timeouts += 1;
                        log.run.timeouts_settled += u64::from(Instant::now() >= settled);
                        Err(elapsed.into())
                    }
                }
            }
        })
        .boxed_clone()
    };
    let retry = RetryLayer::builder()
        .max_attempts(knee.attempts)
        .random_source(RandomSource::seeded(seed));
    let mut adaptive = None;
    let client = match limiter {
        Limiter::None => ServiceBuilder::new()
            .layer(retry.fail_unsent().build().expect("a valid layer"))
            .service(attempt)
            .boxed_clone(),
        Limiter::Fixed(limit) => shed(
            retry,
            tower::limit::ConcurrencyLimitLayer::new(limit),
            attempt,
        ),
        Limiter::AccGradient2 => shed(
            retry,
            tower_acc::ConcurrencyLimitLayer::new(tower_acc::Gradient2::default()),
            attempt,
        ),
        Limiter::AccVegas => shed(
            retry,
            tower_acc::ConcurrencyLimitLayer::new(tower_acc::Vegas::default()),
            attempt,
        ),
        Limiter::ResilienceVegas => {
            let vegas = tower_resilience_adaptive::Vegas::builder()
                .build()
                .expect("valid defaults");
            let limit = tower_resilience_adaptive::AdaptiveLimiterLayer::new(vegas);
            shed(retry, limit, attempt)
        }
        Limiter::Adaptive => {
            let pacing = Pacing::builder()
                .adaptive_concurrency(AdaptiveConcurrency::new())
                .max_queue_wait(knee.timeout)
                .build()
                .expect("valid pacing");
            let layer = retry
                .pacing(pacing)
                .fail_unsent()
                .build()
                .expect("a valid layer");
            adaptive = Some(layer.clone());
            ServiceBuilder::new()
                .layer(layer)
                .service(attempt)
                .boxed_clone()
        }
    };
    // The next request's time: one load's spacing after the last (steady: tokio's interval).
    let mut next = start;
    let mut requests = tokio::task::JoinSet::new();
    let mut id = 0_u64;
    let endpoint = "knee.test".parse().expect("an authority");
    let mut read = start + knee.settled_after;
    while start.elapsed() < knee.length {
        tokio::time::sleep_until(next).await;
        let rate = knee.capacity() * knee.offered_at(next - start);
        next += Duration::from_secs_f64(1.0 / rate);
        if let Some(layer) = adaptive.as_ref().filter(|_| Instant::now() >= read) {
            read += Duration::from_millis(100);
            let limit = layer.pacing_stats(Some(&endpoint)).and_then(|s| s.limit);
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            log.run.limits.extend(limit);
        }
        id += 1;
        let request = Request::get("http://knee.test/")
            .header("x-id", id)
            .body(String::new())
            .expect("a valid request");
        let (client, log) = (client.clone(), Arc::clone(&log));
        requests.spawn(async move {
            let offered = Instant::now();
            let delivered = client.oneshot(request).await.is_ok();
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let bucket = ((offered - start).as_millis() / BUCKET.as_millis()) as usize;
            let buckets = &mut log.run.buckets;
            if buckets.len() <= bucket {
                buckets.resize(bucket + 1, Bucket::default());
            }
            buckets[bucket].offered += 1;
            if delivered {
                buckets[bucket].delivered += 1;
                log.run.request_latency.push(offered.elapsed());
            }
        });
    }
    while requests.join_next().await.is_some() {}
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    log.run
}

/// The markdown section of `rows` run by `run` (seed 1) after a row of no limit at half the
/// knee (the no-load latency) and, after the fixed limit's, the same without retries: the
/// table, ours against its targets when it is a row, and `why` rows miss. Counts each run in
/// `runs`.
pub fn report(
    knee: &Knee,
    rows: &[Limiter],
    run: fn(&Knee, Limiter, u64) -> KneeRun,
    why: &str,
    runs: &mut usize,
) -> Result<Report, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "## A server with a knee: latency, not errors\n\n{} workers of {} ms (a knee at {:.0} \
         requests a second), offered {}× that for {} s; a per-attempt timeout of {} ms (4× the \
         no-load latency), timed-out attempts retried twice (`max_attempts({})`, the default \
         budget); the server goes on with work whose client gave up. \"Settled\" is after {} s. \
         Seed 1.\n",
        knee.workers,
        knee.service.as_millis(),
        knee.capacity(),
        knee.offered,
        knee.length.as_secs(),
        knee.timeout.as_millis(),
        knee.attempts,
        knee.settled_after.as_secs(),
    )?;
    writeln!(
        out,
        "| policy | delivered/s | share of the knee (workers ÷ no-load p50) | attempt p50 | attempt p99 | request p99 \
         | timeouts (settled) | retries (settled) | limit once settled: min / median / max |\n\
         |---|---|---|---|---|---|---|---|---|"
    )?;
    let no_load = knee.no_load();
    let no_retry = Knee {
        attempts: 1,
        ..*knee
    };
    let mut all = vec![(
        "no limit, offered 0.5× (the no-load latency)".to_owned(),
        no_load,
        Limiter::None,
    )];
    for limiter in rows {
        all.push((limiter.label(), *knee, *limiter));
        if let Limiter::Fixed(_) = limiter {
            let label = "the same, `max_attempts(1)` (no retry)".to_owned();
            all.push((label, no_retry, *limiter));
        }
    }
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let mut no_load_p99 = Duration::ZERO;
    // The knee as the clock delivers it: the workers over the no-load latency (the nominal
    // service time on the paused clock; longer on the wall clock, whose timers round it up).
    let mut measured_knee = knee.capacity();
    let mut ours = None;
    for (label, model, limiter) in all {
        let result = run(&model, limiter, 1);
        *runs += 1;
        let limits = result.limits_settled();
        writeln!(
            out,
            "| {label} | {:.0} | {:.1} % | {} | {} | {} | {} ({}) | {} ({}) | {limits} |",
            result.delivered_per_second(knee),
            100.0 * result.delivered_per_second(knee) / measured_knee,
            ms(quantile(&result.attempt_latency, 0.5)),
            ms(quantile(&result.attempt_latency, 0.99)),
            ms(quantile(&result.request_latency, 0.99)),
            result.timeouts,
            result.timeouts_settled,
            result.retries,
            result.retries_settled,
        )?;
        if model.offered < knee.offered {
            no_load_p99 = quantile(&result.attempt_latency, 0.99);
            measured_knee = knee.measured_knee(&result);
        }
        if limiter == Limiter::Adaptive {
            ours = Some(result);
        }
    }
    if let Some(ours) = ours {
        let p99 = quantile(&ours.attempt_latency, 0.99);
        let ratio = p99.as_secs_f64() / no_load_p99.as_secs_f64();
        let verdict = |met: bool| if met { "met" } else { "missed" };
        writeln!(
            out,
            "\nTargets for ours:\n\n| target | measured | verdict |\n|---|---|---|"
        )?;
        writeln!(
            out,
            "| attempt p99 ≤ 1.5× the no-load p99 | {ratio:.2}× | {} |",
            verdict(ratio <= 1.5)
        )?;
        let goodput = ours.delivered_per_second(knee) / measured_knee;
        writeln!(
            out,
            "| ≥ 95 % of the knee's throughput | {:.1} % | {} |",
            100.0 * goodput,
            verdict(goodput >= 0.95)
        )?;
        writeln!(
            out,
            "| 0 retries caused by timeouts once settled | {} | {} |",
            ours.timeouts_settled,
            verdict(ours.timeouts_settled == 0)
        )?;
    }
    writeln!(out, "\n{why}")?;
    Ok(Report {
        markdown: out,
        knee: measured_knee,
    })
}

/// The section [`report`] writes, and the knee it measured.
pub struct Report {
    /// The section, in markdown.
    pub markdown: String,
    /// Requests a second at the knee as the clock delivers it: the workers over the no-load
    /// latency's median (the nominal capacity on the paused clock; less on the wall clock,
    /// whose timers round the service time up).
    pub knee: f64,
}
