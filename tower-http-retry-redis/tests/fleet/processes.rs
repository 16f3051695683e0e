//! A fleet of separate OS processes against a real Redis and a real capacity-limited loopback
//! endpoint (`endpoint.rs`): the workers are this test binary run again (`current_exe()` with
//! `--exact processes::worker`), each told by environment variables which endpoint, which
//! Redis (none: it paces alone) and which worker it is. Each worker is a `RetryLayer` with
//! `Pacing` (over a `RedisStore` on a connection of its own) around hyper-util's client, and
//! sends its share of the deliveries, spread over the first second, into an outage.
//!
//! The endpoint's log is the ground truth: every id answered 200 exactly once, the requests that
//! reached it while it was down, and each worker's deliveries in the first N/C seconds after
//! recovery. The figures are printed (`--nocapture` shows them). Real processes on real time:
//! each test takes about 15 s and is stopped at 45 s; the bounds are wide enough for a loaded
//! two-core machine and are explained where they are asserted.

use crate::endpoint::{Arrival, Endpoint, WORKER_HEADER};
use crate::{Redis, MS};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::pacing::store::{Event, PacingStore, StoreCall, StoreStats, View};
use tower_http_retry::pacing::PacingRules;
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer};
use tower_http_retry_redis::RedisStore;

/// Set in a worker's environment: its number. Absent, [`worker`] does nothing.
const WORKER: &str = "TOWER_HTTP_RETRY_FLEET_WORKER";
const ENDPOINT: &str = "TOWER_HTTP_RETRY_FLEET_ENDPOINT";
/// The Redis URL; absent, the worker paces alone.
const REDIS_URL: &str = "TOWER_HTTP_RETRY_FLEET_REDIS";
const PREFIX: &str = "TOWER_HTTP_RETRY_FLEET_PREFIX";
const DELIVERIES: &str = "TOWER_HTTP_RETRY_FLEET_DELIVERIES";
/// Set to a directory to keep each worker's output there (`<fleet>-<worker>.log`: its samples
/// every 50 ms and its final counts).
const KEEP: &str = "TOWER_HTTP_RETRY_FLEET_KEEP";

/// The measured shape: 4 processes × 500 deliveries, a 3 s outage, 200 req/s once up.
const WORKERS: usize = 4;
const PER_WORKER: usize = 500;
const OUTAGE: Duration = Duration::from_secs(3);
const CAPACITY: u32 = 200;
/// Each worker's first attempts are spread over this, from its start.
const SPREAD: Duration = Duration::from_secs(1);
/// From when (since the endpoint started) every worker has made its first attempts (they start
/// within about 100 ms of the endpoint) and only probes reach the dead endpoint.
const PROBING: Duration = Duration::from_millis(1200);
/// A fleet that has not finished by then is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(45);
const SEC: Duration = Duration::from_secs(1);

/// The tests that run fleets of processes take turns: each runs 4 to 8 worker processes on a
/// two-core machine, and run at once, a Redis call waited past its measured timeout in 1 of
/// 15 runs (a fallback with nothing wrong), which the first asserts never happens undisturbed.
static FLEETS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One worker process of a fleet (run by the tests below, not by the harness: without
/// [`WORKER`] it returns at once).
#[tokio::test]
async fn worker() {
    let Ok(worker) = std::env::var(WORKER) else {
        return;
    };
    let uri: http::Uri = std::env::var(ENDPOINT).unwrap().parse().unwrap();
    let deliveries: usize = std::env::var(DELIVERIES).unwrap().parse().unwrap();
    let store = match std::env::var(REDIS_URL) {
        Ok(url) => {
            let client = redis::Client::open(url).unwrap();
            // Reconnect quickly once Redis is back (the default waits seconds between tries).
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_millis(200)))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10));
            let connection = ConnectionManager::new_with_config(client, config)
                .await
                .unwrap();
            // The store's defaults, call timeout included: measured from the round trips, on
            // two cores shared by up to sixteen workers, Redis and the tests.
            let store = RedisStore::builder(connection)
                .prefix(std::env::var(PREFIX).unwrap())
                .build()
                .unwrap();
            Some(store)
        }
        Err(_) => None,
    };
    let pacing = match &store {
        Some(store) => {
            let store = Said {
                store: store.clone(),
                worker: worker.clone(),
                last: std::sync::Mutex::new(None),
            };
            Pacing::builder().store(store).build().unwrap()
        }
        None => Pacing::new(),
    };
    let retry = RetryLayer::builder()
        .max_attempts(30)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(100),
            Duration::from_secs(2),
        ))
        .pacing(pacing)
        .build()
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = ServiceBuilder::new()
        .layer(retry.clone())
        .timeout(Duration::from_secs(2)) // each attempt
        .service(client);

    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..deliveries {
        let (service, uri, worker) = (service.clone(), uri.clone(), worker.clone());
        tasks.spawn(async move {
            tokio::time::sleep_until(start + SPREAD * i as u32 / deliveries as u32).await;
            let request = http::Request::post(uri)
                .header("idempotency-key", format!("{worker}-{i}"))
                .header(WORKER_HEADER, worker)
                .body(Full::new(Bytes::new()))
                .unwrap();
            matches!(service.oneshot(request).await, Ok(response) if response.status() == 200)
        });
    }
    // The pacer's rate as this process sees it (with a store, the fleet's), on the wall clock
    // the processes share.
    let authority = uri.authority().unwrap().clone();
    let (sampled, id, sampled_store) = (retry.clone(), worker.clone(), store.clone());
    let sampler = tokio::spawn(async move {
        loop {
            if let Some(stats) = sampled.pacing_stats(Some(&authority)) {
                let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                let store = sampled_store.as_ref().map(|store| store.stats());
                let store = store.unwrap_or_default();
                println!(
                    "fleet-rate {id} {} {:.1} {} {} {} {} {} {}",
                    wall.as_micros(),
                    stats.rate,
                    stats.mode.as_str(),
                    store.fallbacks,
                    store.rejoins,
                    store.calls,
                    store.errors,
                    store.fallback_answers,
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let outcomes = tasks.join_all().await;
    sampler.abort();
    let delivered = outcomes.iter().filter(|ok| **ok).count();
    let stats = store.map(|store| store.stats()).unwrap_or_default();
    let probes = retry
        .pacing_stats(Some(&uri.authority().unwrap().clone()))
        .map_or(0, |stats| stats.probes);
    println!(
        "fleet-worker {worker} delivered={delivered} failed={} calls={} conflicts={} errors={} \
         fallbacks={} fallback_answers={} rejoins={} probes={probes}",
        deliveries - delivered,
        stats.calls,
        stats.conflicts,
        stats.errors,
        stats.fallbacks,
        stats.fallback_answers,
        stats.rejoins,
    );
}

/// A worker's store, which says on stdout (`fleet-store <worker> <wall µs> <error>`) each time
/// the reason its calls are answered by the fallback changes.
#[derive(Debug)]
struct Said {
    store: RedisStore,
    worker: String,
    last: std::sync::Mutex<Option<String>>,
}

impl PacingStore for Said {
    fn apply<'a>(
        &'a self,
        rules: &'a PacingRules,
        endpoint: &'a str,
        events: &'a [Event],
        now: Instant,
    ) -> StoreCall<'a> {
        StoreCall::pending(async move {
            let applied = self.store.apply(rules, endpoint, events, now).await;
            let reason = applied.fallback.as_ref().map(|error| format!("{error:?}"));
            let mut last = self.last.lock().unwrap();
            if *last != reason {
                let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                let said = reason.as_deref().unwrap_or("none");
                println!("fleet-store {} {} {said}", self.worker, wall.as_micros());
                *last = reason;
            }
            applied
        })
    }

    fn cached(&self, rules: &PacingRules, endpoint: &str, now: Instant) -> Option<View> {
        self.store.cached(rules, endpoint, now)
    }

    fn stats(&self) -> StoreStats {
        self.store.stats()
    }
}

/// What a worker said at its end, and the rates it sampled.
#[derive(Debug, Default)]
struct Report {
    counts: BTreeMap<String, u64>,
    /// Every 50 ms: the pacer's rate and the store's health.
    samples: Vec<Sample>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Since the endpoint started.
    at: Duration,
    /// The rate as this worker's pacer saw it (with a store, the fleet's), per second.
    rate: f64,
    rejoins: u64,
    /// The endpoint was open: requests went unpaced, with no call to the store.
    open: bool,
}

impl Report {
    fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// The last sample before `at`.
    fn before(&self, at: Duration) -> Option<&Sample> {
        self.samples.iter().rev().find(|sample| sample.at < at)
    }
}

/// A fleet's run: the endpoint's log and every worker's report.
struct Fleet {
    label: &'static str,
    arrivals: Vec<Arrival>,
    reports: Vec<Report>,
    wall: Duration,
}

/// Starts `WORKERS` worker processes against a fresh endpoint (with Redis at `redis`, or each
/// pacing alone), runs `during` beside them (given the endpoint's start), and waits for them.
async fn run_fleet<F: std::future::Future<Output = ()>>(
    label: &'static str,
    redis: Option<(u16, &str)>,
    during: impl FnOnce(Instant) -> F,
) -> Fleet {
    let endpoint = Endpoint::start(OUTAGE, CAPACITY).await;
    let during = during(endpoint.started);
    let exe = std::env::current_exe().expect("the test binary");
    let mut children = Vec::new();
    for id in 0..WORKERS {
        let mut command = tokio::process::Command::new(&exe);
        command
            .args([
                "processes::worker",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER, id.to_string())
            .env(ENDPOINT, format!("http://{}/", endpoint.addr))
            .env(DELIVERIES, PER_WORKER.to_string())
            .env_remove(REDIS_URL)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some((port, prefix)) = redis {
            command
                .env(REDIS_URL, format!("redis://127.0.0.1:{port}/"))
                .env(PREFIX, prefix);
        }
        children.push(command.spawn().expect("start a worker"));
    }
    // Every worker's pipes are read at once (one read after another could leave a worker
    // blocked on a full pipe); dropped at the time limit, the tasks kill their workers.
    let waited = async {
        let mut waits = JoinSet::new();
        for (id, child) in children.into_iter().enumerate() {
            waits.spawn(async move { (id, child.wait_with_output().await) });
        }
        let mut outputs = waits.join_all().await;
        outputs.sort_by_key(|(id, _)| *id);
        let outputs = outputs.into_iter().map(|(_, output)| output);
        outputs
            .map(|output| output.expect("a worker's output"))
            .collect::<Vec<_>>()
    };
    let (outputs, ()) = tokio::time::timeout(LIMIT, async { tokio::join!(waited, during) })
        .await
        .unwrap_or_else(|_| panic!("{label}: the fleet did not finish within {LIMIT:?}"));
    let wall = endpoint.started.elapsed();
    let started_wall = endpoint
        .started_wall
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let mut reports = Vec::new();
    for (id, output) in outputs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        if let Ok(dir) = std::env::var(KEEP) {
            let file = format!("{dir}/{}-{id}.log", label.replace(' ', "-"));
            std::fs::write(file, output.stdout.as_slice()).expect("keep a worker's output");
        }
        assert!(
            output.status.success(),
            "{label}: worker {id} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let mut report = Report::default();
        for line in stdout.lines() {
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("fleet-worker") => {
                    for pair in fields.skip(1) {
                        let (name, value) = pair.split_once('=').unwrap();
                        report
                            .counts
                            .insert(name.to_owned(), value.parse().unwrap());
                    }
                }
                Some("fleet-rate") => {
                    let fields: Vec<&str> = fields.skip(1).collect();
                    let wall: u128 = fields[0].parse().unwrap();
                    report.samples.push(Sample {
                        at: Duration::from_micros(wall.saturating_sub(started_wall) as u64),
                        rate: fields[1].parse().unwrap(),
                        rejoins: fields[4].parse().unwrap(),
                        open: fields[2] == "open",
                    });
                }
                _ => {}
            }
        }
        assert!(
            report.counts.contains_key("delivered"),
            "{label}: worker {id} reported nothing:\n{stdout}"
        );
        reports.push(report);
    }
    Fleet {
        label,
        arrivals: endpoint.arrivals(),
        reports,
        wall,
    }
}

/// What a fleet's run shows, from the endpoint's log.
#[derive(Debug)]
struct Figures {
    /// Ids answered 200 at least once, and more than once.
    delivered: usize,
    twice: usize,
    /// Deliveries the workers gave up on.
    failed: u64,
    /// Requests that reached the dead endpoint, and those of them from [`PROBING`] on, once
    /// every first attempt was made: the probe streams.
    while_down: usize,
    probing: usize,
    /// 503s after recovery (the capacity's refusals).
    overload: usize,
    /// Each worker's deliveries in the first N/C seconds after recovery, relative to fair.
    shares: Vec<f64>,
    /// The same in the first 2 s after recovery (the ramp).
    early_shares: Vec<f64>,
    /// The last delivery, from recovery.
    drained: Duration,
    /// When 99 % of the deliveries had been made, from recovery.
    p99: Duration,
    attempts: usize,
    calls: u64,
    fallbacks: u64,
    rejoins: u64,
}

impl Figures {
    fn of(fleet: &Fleet) -> Figures {
        let outage = OUTAGE;
        let mut applied: HashMap<&str, u32> = HashMap::new();
        let (mut while_down, mut probing, mut overload) = (0, 0, 0);
        let mut drained = Duration::ZERO;
        let mut deliveries = Vec::new();
        for arrival in &fleet.arrivals {
            if arrival.at < outage {
                while_down += 1;
                if arrival.at >= PROBING {
                    probing += 1;
                }
            } else if arrival.status == 200 {
                drained = drained.max(arrival.at - outage);
                deliveries.push(arrival.at - outage);
            } else {
                overload += 1;
            }
            if arrival.status == 200 {
                *applied.entry(arrival.id.as_str()).or_default() += 1;
            }
        }
        let total = WORKERS * PER_WORKER;
        let window = Duration::from_secs_f64(total as f64 / f64::from(CAPACITY));
        let shares = |window: Duration| {
            let mut counts = [0usize; WORKERS];
            for arrival in &fleet.arrivals {
                if arrival.status == 200
                    && arrival.at >= outage
                    && arrival.at <= outage + window
                    && arrival.worker < WORKERS
                {
                    counts[arrival.worker] += 1;
                }
            }
            let sum: usize = counts.iter().sum();
            counts
                .iter()
                .map(|&count| count as f64 * WORKERS as f64 / sum.max(1) as f64)
                .collect::<Vec<_>>()
        };
        let sum = |name: &str| fleet.reports.iter().map(|report| report.get(name)).sum();
        Figures {
            delivered: applied.len(),
            twice: applied.values().filter(|&&n| n > 1).count(),
            failed: sum("failed"),
            while_down,
            probing,
            overload,
            shares: shares(window),
            early_shares: shares(Duration::from_secs(2)),
            drained,
            p99: {
                deliveries.sort();
                let at = (deliveries.len() * 99).div_ceil(100).max(1) - 1;
                deliveries.get(at).copied().unwrap_or_default()
            },
            attempts: fleet.arrivals.len(),
            calls: sum("calls"),
            fallbacks: sum("fallbacks"),
            rejoins: sum("rejoins"),
        }
    }

    /// Requests a second that reached the dead endpoint once every first attempt was made.
    fn probe_rate(&self) -> f64 {
        self.probing as f64 / (OUTAGE - PROBING).as_secs_f64()
    }

    fn worst_share(&self) -> f64 {
        self.shares
            .iter()
            .map(|share| (share - 1.0).abs())
            .fold(0.0, f64::max)
    }

    fn print(&self, fleet: &Fleet) {
        let list = |shares: &[f64]| {
            shares
                .iter()
                .map(|share| format!("{share:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut line = format!(
            "FLEET {}: delivered {}/{} (failed {}), applied twice {}; while down (3 s): {} \
             requests, {} in its last {:.1} s ({:.1}/s); overload 503s {}; shares of the first \
             {} s after recovery [{}] (worst {:.1} % off fair: ±10 % {}), of the first 2 s [{}]; \
             99 % delivered {:.2} s and all {:.2} s after recovery; {} attempts",
            fleet.label,
            self.delivered,
            WORKERS * PER_WORKER,
            self.failed,
            self.twice,
            self.while_down,
            self.probing,
            (OUTAGE - PROBING).as_secs_f64(),
            self.probe_rate(),
            self.overload,
            WORKERS * PER_WORKER / CAPACITY as usize,
            list(&self.shares),
            self.worst_share() * 100.0,
            if self.worst_share() <= 0.10 {
                "met"
            } else {
                "missed"
            },
            list(&self.early_shares),
            self.p99.as_secs_f64(),
            self.drained.as_secs_f64(),
            self.attempts,
        );
        if self.calls > 0 {
            let _ = write!(
                line,
                "; Redis calls {} ({:.3} per attempt, {:.3} per delivery), fallbacks {}, rejoins {}",
                self.calls,
                self.calls as f64 / self.attempts as f64,
                self.calls as f64 / self.delivered.max(1) as f64,
                self.fallbacks,
                self.rejoins
            );
        }
        let _ = write!(line, "; wall {:.1} s", fleet.wall.as_secs_f64());
        eprintln!("{line}");
    }

    /// Every delivery made, none applied twice.
    fn assert_delivered(&self, label: &str) {
        let total = WORKERS * PER_WORKER;
        assert_eq!(self.failed, 0, "{label}: {self:?}");
        assert_eq!(self.delivered, total, "{label}: {self:?}");
        assert_eq!(self.twice, 0, "{label}: {self:?}");
    }
}

#[tokio::test]
async fn a_fleet_of_processes_probes_a_dead_endpoint_as_one_and_shares_the_recovery() {
    let Some(redis) =
        Redis::start("a_fleet_of_processes_probes_a_dead_endpoint_as_one_and_shares_the_recovery")
    else {
        return;
    };
    let _turn = FLEETS.lock().await;
    // The same fleet twice at once, on endpoints of their own: through Redis, and alone.
    let (shared, alone) = tokio::join!(
        run_fleet("shared store", Some((redis.port, "processes")), |_| async {
        }),
        run_fleet("no store", None, |_| async {}),
    );
    let (with, without) = (Figures::of(&shared), Figures::of(&alone));
    with.print(&shared);
    without.print(&alone);
    with.assert_delivered(shared.label);
    without.assert_delivered(alone.label);

    // One probe stream for the fleet: about 2/s (500 ms, jittered), up to two in flight; four
    // processes alone send four. Measured over fourteen runs: 1.1–2.8/s with the store,
    // 6.7–8.9/s without.
    assert!(
        with.probe_rate() <= 4.0,
        "{:.1}/s reached the dead endpoint once the fleet was probing: {with:?}",
        with.probe_rate()
    );
    assert!(
        with.probing < without.probing,
        "the store made no difference while down: {with:?} / {without:?}"
    );
    // The target is ±10 % of fair over the first N/C seconds after recovery. Over
    // twenty runs of this test on a loaded two-core machine the worst worker was 2.0–18.3 %
    // off fair with the store (within 10 % in eleven), 5.5–54.6 % without one (within 10 % in
    // one). The bound asserted is 25 %, that noise with room for a busier machine: a guard
    // against a fleet as unfair as one without a store, not the target, which the printed line
    // says was met or missed.
    assert!(
        with.worst_share() <= 0.25,
        "a worker's share is {:.1} % off fair: {with:?}",
        with.worst_share() * 100.0
    );
    assert!(
        with.drained <= Duration::from_secs(20),
        "drained {:?} after recovery",
        with.drained
    );
    // Nothing failed: Redis answered every call, late or not. A fixed 5 ms timeout (the
    // default before it was measured) fell back once or twice a run here.
    assert_eq!(
        (with.fallbacks, with.rejoins),
        (0, 0),
        "the store fell back without a fault"
    );
}

#[tokio::test]
async fn redis_killed_during_recovery_leaves_every_delivery_made_once_near_the_last_shared_rate() {
    let test =
        "redis_killed_during_recovery_leaves_every_delivery_made_once_near_the_last_shared_rate";
    let Some(mut redis) = Redis::start(test) else {
        return;
    };
    let _turn = FLEETS.lock().await;
    let port = redis.port;
    // Borrowed, not moved: the restarted server must outlive the fleet.
    let redis = &mut redis;
    // Killed 1.5 s into the recovery (the fleet is ramping, most deliveries still wait), started
    // again, empty, 2 s later.
    let (kill_at, restart_at) = (OUTAGE + 1500 * MS, OUTAGE + 3500 * MS);
    let fleet = run_fleet(
        "redis killed",
        Some((port, "killed")),
        |started| async move {
            tokio::time::sleep_until(started + kill_at).await;
            redis.kill();
            tokio::time::sleep_until(started + restart_at).await;
            redis.restart();
        },
    )
    .await;
    let figures = Figures::of(&fleet);
    figures.print(&fleet);
    figures.assert_delivered(fleet.label);

    // The last shared rate: each worker's last sample before the kill (they agree within a
    // sample's age); the fleet's rate while Redis is away: what reached the endpoint.
    let last_shared: Vec<f64> = fleet
        .reports
        .iter()
        .map(|report| report.before(kill_at).map_or(0.0, |sample| sample.rate))
        .collect();
    let shared = last_shared.iter().copied().fold(0.0, f64::max);
    // Each worker's rejoin after the kill: its first sample with more rejoins than it had then.
    let rejoined: Vec<Option<Duration>> = fleet
        .reports
        .iter()
        .map(|report| {
            let had = report.before(kill_at);
            let had = had.map_or(0, |sample| sample.rejoins);
            let back = report
                .samples
                .iter()
                .find(|s| s.at > kill_at && s.rejoins > had);
            back.map(|sample| sample.at)
        })
        .collect();
    let rate_in = |from: Duration, to: Duration| {
        let n = fleet
            .arrivals
            .iter()
            .filter(|arrival| arrival.at >= from && arrival.at < to)
            .count();
        n as f64 / (to - from).as_secs_f64()
    };
    let before = rate_in(kill_at - SEC, kill_at);
    // Away: from the kill until the last worker rejoined (Redis is back for the fleet only then;
    // each worker's first try after the restart fails once while its connection reconnects).
    let back = rejoined
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or(restart_at);
    let away = rate_in(kill_at, back.max(restart_at));
    let down = rate_in(kill_at, restart_at);
    eprintln!(
        "FLEET redis killed at {:.1} s, restarted at {:.1} s, rejoined at {:?}: last shared rate \
         {shared:.0}/s (per worker {last_shared:.0?}); attempts/s: in the second before the kill \
         {before:.0}, from the kill to the last rejoin {away:.0} ({:.2}x the last shared rate, \
         {:.2}x the second before), while Redis was down {down:.0}",
        kill_at.as_secs_f64(),
        restart_at.as_secs_f64(),
        rejoined
            .iter()
            .map(|at| at.map(|at| format!("{:.2} s", at.as_secs_f64())))
            .collect::<Vec<_>>(),
        away / shared.max(1.0),
        away / before.max(1.0),
    );
    let mut timeline = String::from("FLEET redis killed, per 500 ms (attempts/successes, rate):");
    let mut from = kill_at - SEC;
    while from < restart_at + 2 * SEC {
        let to = from + 500 * MS;
        let within = |arrival: &&Arrival| arrival.at >= from && arrival.at < to;
        let attempts = fleet.arrivals.iter().filter(within).count();
        let ok = fleet
            .arrivals
            .iter()
            .filter(within)
            .filter(|a| a.status == 200)
            .count();
        let rate = fleet.reports[0].before(to);
        let _ = write!(
            timeline,
            " {:.1}s {attempts}/{ok} {:.0};",
            from.as_secs_f64(),
            rate.map_or(0.0, |sample| sample.rate)
        );
        from = to;
    }
    eprintln!("{timeline}");
    let episodes: Vec<u64> = fleet.reports.iter().map(|r| r.get("fallbacks")).collect();
    assert!(
        episodes.iter().all(|&n| n >= 1),
        "every worker lost Redis: {episodes:?}"
    );
    // A worker rejoins with its next call to Redis; one whose endpoint is open by then makes
    // none, and has nothing to rejoin. One still paced a second after the others rejoined has.
    assert!(
        rejoined.iter().any(Option::is_some),
        "a worker rejoined: {rejoined:?}"
    );
    for (worker, report) in fleet.reports.iter().enumerate() {
        let paced_later = report
            .samples
            .iter()
            .any(|sample| sample.at > back + SEC && !sample.open);
        assert!(
            rejoined[worker].is_some() || !paced_later,
            "worker {worker} paced after the others rejoined, and did not: {rejoined:?}"
        );
    }
    // The target is at most 1.2 times the last shared rate until Redis is back; twenty
    // runs measured 0.16–1.18 times, so the target is printed, met or missed, and the assertion
    // is the property behind it with room for this machine's noise: the fallback keeps pacing
    // at the process's share (a fleet unpaced, or each process at the whole fleet's rate, would
    // be several times the shared rate).
    let verdict = if away <= 1.2 * shared {
        "met"
    } else {
        "missed"
    };
    eprintln!(
        "FLEET target: at most 1.2x the last shared rate while Redis is away: {verdict} ({:.2}x)",
        away / shared.max(1.0)
    );
    assert!(
        shared > 0.0 && away <= 1.5 * shared,
        "{away:.0}/s while Redis was away, last shared rate {shared:.0}/s"
    );
}
