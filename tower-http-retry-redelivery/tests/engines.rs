//! The durable path on each engine (apalis-sqlite on a file; apalis-redis and apalis-postgres on
//! a server of the test's own), against a real HTTP receiver on loopback through hyper-util's client and the
//! retry layer: deliveries outlive an outage on their schedule, a 410 disables its endpoint and
//! dead-letters, a replay delivers, the receiver's `webhook-delivery` header is obeyed, the
//! endpoints' health is kept in the engine.

use bytes::Bytes;
use http::header::HeaderName;
use http_body_util::Full;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use test_support::{Reply, TestServer, REQUEST_ID};
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry_redelivery::health::{EndpointHealth, HealthRules, HealthStore};
use tower_http_retry_redelivery::{
    dead_letters, replay, ApalisOutbox, DeadLetterQueue, DeadReason, Delivery, EngineError, Outbox,
    RecordRules, Redelivery, RedeliveryStats, Schedule,
};

type Client = tower::util::BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

fn client(schedule: &Schedule) -> Client {
    let retry = schedule.retry_layer().build().unwrap();
    let transport = test_support::client();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .map_err(BoxError::from)
        .service(transport);
    tower::util::BoxCloneSyncService::new(stack.map_err(BoxError::from))
}

fn rules() -> RecordRules {
    RecordRules::new().id_header(HeaderName::from_static(REQUEST_ID))
}

/// A worker on a thread of its own (apalis's worker future is not provably `Send` through
/// `tokio::spawn`: a higher-ranked lifetime error), stopped when dropped.
struct RunningWorker(
    Option<tokio::sync::oneshot::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
);

impl Drop for RunningWorker {
    fn drop(&mut self) {
        drop(self.0.take());
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `worker` (an apalis worker, built by an engine's `start_worker`) on its own thread.
fn run_on_thread<F>(
    run: impl FnOnce(tokio::sync::oneshot::Receiver<()>) -> F + Send + 'static,
) -> RunningWorker
where
    F: std::future::Future<Output = ()>,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(stopped));
    });
    RunningWorker(Some(stop), Some(thread))
}

/// Waits (bounded) until `done` holds.
async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redelivery-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

type Handle<O> = Redelivery<Client, O, Full<Bytes>>;

/// Enqueues `n` POSTs to `uri`, ids `{prefix}_{i}`, each body `{"n":i}`.
async fn enqueue_posts<O: Outbox>(redelivery: &Handle<O>, uri: &http::Uri, prefix: &str, n: usize) {
    for i in 0..n {
        let request = http::Request::post(uri.clone())
            .body(Bytes::from(format!("{{\"n\":{i}}}")))
            .unwrap();
        let record = rules().record(format!("{prefix}_{i}"), request).unwrap();
        redelivery.enqueue(record).await.unwrap();
    }
}

async fn deliveries_outlive_an_outage_on_their_schedule_and_never_go_early<O: Outbox>(
    outbox: O,
    start_worker: fn(&str, &Handle<O>) -> RunningWorker,
) {
    const N: usize = 20;
    let up_at = Instant::now() + Duration::from_secs(4);
    let arrivals: Arc<Mutex<Vec<(String, SystemTime)>>> = Arc::default();
    let log = Arc::clone(&arrivals);
    let server = TestServer::start(move |hit| {
        log.lock()
            .unwrap()
            .push((hit.id.clone(), SystemTime::now()));
        if Instant::now() < up_at {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let schedule = Schedule::from_delays([0, 1, 2, 2, 2, 2].map(Duration::from_secs)).unwrap();
    let redelivery = Redelivery::new(client(&schedule), outbox.clone(), schedule.clone());
    enqueue_posts(&redelivery, &server.uri("/hook"), "msg", N).await;
    let worker = start_worker("outage-1", &redelivery);
    let delivered = until(Duration::from_secs(40), || {
        redelivery.stats().delivered == N as u64
    })
    .await;
    drop(worker);
    let stats = redelivery.stats();
    assert!(delivered, "{stats:?}");
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    let arrivals = arrivals.lock().unwrap().clone();
    for n in 0..N {
        let id = format!("msg_{n}");
        let times: Vec<SystemTime> = arrivals
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, t)| *t)
            .collect();
        assert!(!times.is_empty(), "{id} never arrived");
        // Never early: each attempt at least 80 % of its slot's delay after the previous one.
        for (slot, pair) in times.windows(2).enumerate() {
            let gap = pair[1].duration_since(pair[0]).unwrap();
            let delay = schedule.delay(slot as u32 + 1).unwrap();
            assert!(
                gap >= delay.mul_f64(0.8),
                "{id}: slot {} after {gap:?} < 0.8 x {delay:?}",
                slot + 1
            );
        }
    }
    // The pacer saw the endpoint down: due deliveries waited for its probes instead of each
    // sending its own attempt per slot.
    let while_down = arrivals
        .iter()
        .filter(|(_, t)| *t < SystemTime::now() - up_at.elapsed())
        .count();
    eprintln!(
        "{stats:?}; {} arrivals, {while_down} while down",
        arrivals.len()
    );
    assert!(
        while_down < 2 * N,
        "{while_down} attempts while down for {N} deliveries"
    );
}

async fn a_410_disables_the_endpoint_and_a_replay_after_enabling_delivers<Q, D>(
    outbox: ApalisOutbox<Q, D>,
    start_worker: fn(&str, &Handle<ApalisOutbox<Q, D>>) -> RunningWorker,
) where
    ApalisOutbox<Q, D>: Outbox<Error = EngineError>,
    D: DeadLetterQueue,
{
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let answer = Arc::clone(&gone);
    let server = TestServer::start(move |_| {
        Reply::status(if answer.load(std::sync::atomic::Ordering::SeqCst) {
            410
        } else {
            200
        })
    })
    .await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery = Redelivery::new(client(&schedule), outbox.clone(), schedule);
    for n in 0..5 {
        let request = http::Request::post(server.uri("/hook"))
            .body(Bytes::from("{}"))
            .unwrap();
        redelivery
            .enqueue(rules().record(format!("gone_{n}"), request).unwrap())
            .await
            .unwrap();
    }
    let worker = start_worker("gone-1", &redelivery);
    assert!(
        until(Duration::from_secs(20), || redelivery.stats().dead_lettered
            == 5)
        .await,
        "{:?}",
        redelivery.stats()
    );
    let letters = dead_letters(outbox.dead()).await.unwrap();
    assert_eq!(letters.len(), 5);
    let endpoint = letters[0].delivery.endpoint().to_owned();
    // One was sent and answered 410; the endpoint was then disabled, so the others (taken in
    // the same batch, some may have been sent already) went to the dead-letter queue as well.
    assert!(letters.iter().any(|l| l.reason == DeadReason::Gone));
    assert!(letters
        .iter()
        .all(|l| matches!(l.reason, DeadReason::Gone | DeadReason::EndpointDisabled(_))));
    assert_eq!(redelivery.stats().endpoints_disabled, 1);
    assert!(server.total_hits() >= 1);

    gone.store(false, std::sync::atomic::Ordering::SeqCst);
    redelivery.health().enable(&endpoint);
    let since = SystemTime::now() - Duration::from_secs(3600);
    assert_eq!(replay(&outbox, since, Some(&endpoint)).await.unwrap(), 5);
    assert_eq!(
        replay(&outbox, since, Some(&endpoint)).await.unwrap(),
        5,
        "counted, but stored once"
    );
    assert!(
        until(Duration::from_secs(20), || redelivery.stats().delivered
            == 5)
        .await,
        "{:?}",
        redelivery.stats()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        redelivery.stats().delivered,
        5,
        "a replay stored twice is delivered once"
    );
    drop(worker);
}

/// Svix's receiver control: `webhook-delivery: abort-message` dead-letters its delivery within
/// the attempt that read it, `webhook-delivery: disable` disables the endpoint as a 410 does.
async fn the_receiver_stops_a_delivery_or_disables_its_endpoint<Q, D>(
    outbox: ApalisOutbox<Q, D>,
    start_worker: fn(&str, &Handle<ApalisOutbox<Q, D>>) -> RunningWorker,
) where
    ApalisOutbox<Q, D>: Outbox<Error = EngineError>,
    D: DeadLetterQueue,
{
    use tower_http_retry_redelivery::health::DisableReason;
    let aborting =
        TestServer::start(|_| Reply::status(503).header("webhook-delivery", "abort-message")).await;
    let disabling =
        TestServer::start(|_| Reply::status(500).header("webhook-delivery", "Disable")).await;
    let schedule = Schedule::from_delays([0, 1, 1].map(Duration::from_secs)).unwrap();
    let redelivery = Redelivery::new(client(&schedule), outbox.clone(), schedule);
    for (server, name) in [(&aborting, "abort"), (&disabling, "disable")] {
        for n in 0..3 {
            let request = http::Request::post(server.uri("/hook"))
                .body(Bytes::from("{}"))
                .unwrap();
            redelivery
                .enqueue(rules().record(format!("{name}_{n}"), request).unwrap())
                .await
                .unwrap();
        }
    }
    let worker = start_worker("control-1", &redelivery);
    assert!(
        until(Duration::from_secs(20), || redelivery.stats().dead_lettered
            == 6)
        .await,
        "{:?}",
        redelivery.stats()
    );
    // Read while the worker's runtime runs: a pool connection its handlers opened (Postgres)
    // is driven by that runtime and dies with it.
    let letters = dead_letters(outbox.dead()).await.unwrap();
    drop(worker);
    for letter in &letters {
        if letter.delivery.id().starts_with("abort") {
            assert_eq!(letter.reason, DeadReason::Aborted);
            assert_eq!(letter.delivery.attempts(), 1, "stopped within its attempt");
        } else {
            assert_eq!(
                letter.reason,
                DeadReason::EndpointDisabled(DisableReason::ReceiverAsked)
            );
        }
    }
    assert_eq!(aborting.total_hits(), 3, "each aborted delivery sent once");
    assert!(disabling.total_hits() >= 1);
    let endpoint = letters
        .iter()
        .find(|l| l.delivery.id().starts_with("disable"))
        .unwrap()
        .delivery
        .endpoint()
        .to_owned();
    assert_eq!(
        redelivery.health().disabled(&endpoint),
        Some(DisableReason::ReceiverAsked)
    );
    assert_eq!(redelivery.stats().endpoints_disabled, 1);
}

/// 40 deliveries due at once to a receiver that takes 300 ms an answer: a worker from
/// `ApalisOutbox::worker` never handles more than `IN_HAND` of them at once, and delivers them
/// all.
async fn a_worker_holds_at_most_its_deliveries_in_hand<O: Outbox>(
    outbox: O,
    start_worker: fn(&str, &Handle<O>) -> RunningWorker,
) {
    const N: u64 = 40;
    let slow = TestServer::start(|_| Reply::status(200).after(Duration::from_millis(300))).await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery = Redelivery::new(client(&schedule), outbox, schedule);
    enqueue_posts(&redelivery, &slow.uri("/hook"), "hand", N as usize).await;
    let worker = start_worker("hand-1", &redelivery);
    let delivered = until(Duration::from_secs(30), || {
        redelivery.stats().delivered == N
    })
    .await;
    drop(worker);
    let stats = redelivery.stats();
    assert!(delivered, "{stats:?}");
    let most = stats.handling_peak;
    let bound = tower_http_retry_redelivery::IN_HAND as u64;
    assert!(
        most <= bound,
        "{most} deliveries in hand at once, over {bound}"
    );
    assert!(
        most > 1,
        "the worker handled deliveries side by side: {most}"
    );
}

/// More dead letters than one page of any engine's listing (500), all written within about a
/// second: every one read back, once, and one written twice kept once.
async fn a_long_dead_letter_queue_reads_back_whole<Q, D>(outbox: ApalisOutbox<Q, D>)
where
    ApalisOutbox<Q, D>: Outbox<Error = EngineError>,
    D: DeadLetterQueue,
{
    const LETTERS: usize = 1_200;
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let letter = |n: usize| {
        let request = http::Request::post("http://127.0.0.1:9/hook")
            .body(Bytes::from("{}"))
            .unwrap();
        tower_http_retry_redelivery::DeadLetter {
            delivery: rules().record(format!("dead_{n}"), request).unwrap(),
            reason: DeadReason::ScheduleExhausted,
            at,
        }
    };
    for n in 0..LETTERS {
        outbox.dead_letter(letter(n)).await.unwrap();
    }
    outbox.dead_letter(letter(7)).await.unwrap();
    let letters = dead_letters(outbox.dead()).await.unwrap();
    let ids: std::collections::BTreeSet<&str> = letters.iter().map(|l| l.delivery.id()).collect();
    assert_eq!(ids.len(), LETTERS, "every letter, each once");
    assert_eq!(letters.len(), LETTERS, "none read twice");
}

/// The endpoints' health kept in the engine: views of it (each process's, here on one
/// connection) agree through compare-and-swap, a success in one ends another's failing run, and
/// a fresh view (a restarted process) reads what the others disabled.
async fn endpoint_health_is_kept_in_the_engine<Q, D>(outbox: ApalisOutbox<Q, D>)
where
    D: DeadLetterQueue + HealthStore + Clone,
{
    assert!(
        outbox.dead().health_store().is_some(),
        "the engine keeps it"
    );
    let outbox = outbox.dead().clone();
    const E: &str = "http://127.0.0.1:9";
    let rules = HealthRules::new()
        .disable_after(Duration::from_secs(10))
        .unwrap();
    let (a, b) = (
        EndpointHealth::shared(rules, outbox.clone()),
        EndpointHealth::shared(rules, outbox.clone()),
    );
    let start = SystemTime::now();
    a.failed(E, start);
    a.flush().await;
    assert!(
        outbox.get(E).await.unwrap().is_some(),
        "a failing run stored"
    );
    b.sync(E).await;
    b.succeeded(E);
    b.flush().await;
    assert_eq!(
        outbox.get(E).await.unwrap(),
        None,
        "ended by the other view"
    );
    a.failed(E, start + Duration::from_secs(9));
    a.flush().await;
    assert_eq!(a.failed(E, start + Duration::from_secs(15)), None);
    a.flush().await;
    assert!(a.failed(E, start + Duration::from_secs(19)).is_some());
    a.flush().await;
    let restarted = EndpointHealth::shared(rules, outbox.clone());
    restarted.sync(E).await;
    assert!(restarted.disabled(E).is_some(), "kept across a restart");
    // A swap from a stale value changes nothing.
    assert!(!outbox.swap(E, None, Some("{}")).await.unwrap());
    assert!(!outbox.swap(E, Some("stale"), None).await.unwrap());
    restarted.enable(E);
    restarted.flush().await;
    assert_eq!(outbox.get(E).await.unwrap(), None);
    // Four views failing and succeeding at once: every change lands, none is lost to a race.
    let views: Vec<_> = (0..4)
        .map(|_| EndpointHealth::shared(rules, outbox.clone()))
        .collect();
    let mut racing = Vec::new();
    for (n, view) in views.iter().enumerate() {
        let view = view.clone();
        racing.push(tokio::spawn(async move {
            for k in 0..20u64 {
                view.sync("http://127.0.0.1:10").await;
                if (k + n as u64).is_multiple_of(5) {
                    view.succeeded("http://127.0.0.1:10");
                } else {
                    view.failed("http://127.0.0.1:10", start + Duration::from_millis(k));
                }
                view.flush().await;
            }
        }));
    }
    for task in racing {
        task.await.unwrap();
    }
    // A call past the connection's response timeout on a loaded machine, or a view that lost
    // its swap to the others eight times in a row, is a store error whose change waits for the
    // next flush: what must hold is that every change is written in the end.
    for view in [&a, &b, &restarted].into_iter().chain(&views) {
        for _ in 0..5 {
            if view.unwritten() == 0 {
                break;
            }
            view.flush().await;
        }
        assert_eq!(view.unwritten(), 0, "every change written");
    }
}

/// A pause that ends in a minute, and the time a move takes its endpoint's backlog to.
fn a_pause_from_now() -> (SystemTime, SystemTime) {
    let now = SystemTime::now();
    let minutes = |n: u64| now + Duration::from_secs(60 * n);
    (minutes(1), minutes(2))
}

/// A failing endpoint's due deliveries move past its pause in bulk (`Outbox::defer_due`), and no
/// other endpoint's, and come back in bulk (`Outbox::resume_deferred`), never ahead of their own
/// due time, or one at a time for a probe (`Outbox::resume_one`).
async fn a_failing_endpoints_backlog_moves_past_its_pause<O: Outbox>(outbox: O) {
    let delivery = |id: String, uri: &str| {
        let request = http::Request::post(uri).body(Bytes::from("{}")).unwrap();
        rules().record(id, request).unwrap()
    };
    for i in 0..5 {
        let down = delivery(format!("down-{i}"), "http://127.0.0.1:9/hook");
        outbox.store(down).await.unwrap();
    }
    for i in 0..3 {
        let up = delivery(format!("up-{i}"), "http://127.0.0.1:10/hook");
        outbox.store(up).await.unwrap();
    }
    // Two to the failing endpoint due on their own later: in half a minute, within the pause
    // (moved with the rest, and back at its own time), and in an hour (never moved).
    let due_in = |id: &str, after: Duration| -> Delivery {
        let mut record =
            serde_json::to_value(delivery(id.into(), "http://127.0.0.1:9/hook")).unwrap();
        let due = SystemTime::now() + after;
        let due_ms = due
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        record["due_at"] = due_ms.into();
        serde_json::from_value(record).unwrap()
    };
    outbox
        .store(due_in("soon", Duration::from_secs(30)))
        .await
        .unwrap();
    outbox
        .store(due_in("later", Duration::from_secs(3_600)))
        .await
        .unwrap();
    let (pause_ends, moved_to) = a_pause_from_now();
    let down = "http://127.0.0.1:9";
    assert_eq!(
        outbox.defer_due(down, pause_ends, moved_to).await.unwrap(),
        6
    );
    // None of them is due before the pause's end any more: the next pause moves none.
    let next_pause_ends = pause_ends + Duration::from_secs(2);
    let next_moved_to = moved_to + Duration::from_secs(2);
    assert_eq!(
        outbox
            .defer_due(down, next_pause_ends, next_moved_to)
            .await
            .unwrap(),
        0
    );
    // A pause past the time they were moved to moves them again.
    let late = moved_to + Duration::from_secs(60);
    assert_eq!(
        outbox
            .defer_due(down, late, late + Duration::from_secs(60))
            .await
            .unwrap(),
        6
    );
    // The endpoint is back: the moved ones are due again (the one due in half a minute at its
    // own time), the one due in an hour was never moved.
    let now = SystemTime::now();
    assert_eq!(outbox.resume_deferred(down, now).await.unwrap(), 6);
    assert_eq!(outbox.resume_deferred(down, now).await.unwrap(), 0);
    // It fails again and they are moved again (the one due in half a minute too, within the
    // pause); then a probe fails: one of them at a time is due at the pacer's next probe, and
    // an endpoint with nothing moved has none to give.
    assert_eq!(
        outbox.defer_due(down, pause_ends, moved_to).await.unwrap(),
        6
    );
    let up = "http://127.0.0.1:10";
    assert_eq!(outbox.resume_one(up, pause_ends).await.unwrap(), 0);
    assert_eq!(outbox.resume_one(down, pause_ends).await.unwrap(), 1);
    assert_eq!(outbox.resume_one(down, pause_ends).await.unwrap(), 1);
    // The other endpoint's deliveries were not moved by any of it.
    assert_eq!(outbox.defer_due(up, pause_ends, moved_to).await.unwrap(), 3);
}

/// Sends [`OUTAGE_DELIVERIES`] through one worker, on a schedule of `delays` (seconds), to an
/// endpoint that answers 503 for `down` and 200 after, until `done` holds of the worker's stats
/// or `limit` passes: whether it held, and the stats.
async fn through_an_outage<O: Outbox>(
    outbox: O,
    start_worker: fn(&str, &Handle<O>) -> RunningWorker,
    down: Duration,
    delays: &[u64],
    limit: Duration,
    done: fn(&RedeliveryStats) -> bool,
) -> (bool, RedeliveryStats) {
    let up_at = Instant::now() + down;
    let server = TestServer::start(move |_| {
        if Instant::now() < up_at {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    })
    .await;
    let schedule = Schedule::from_delays(delays.iter().map(|s| Duration::from_secs(*s))).unwrap();
    assert_eq!(schedule.slot_sequence().deadline, Duration::from_secs(30));
    let redelivery = Redelivery::new(client(&schedule), outbox.clone(), schedule.clone());
    enqueue_posts(&redelivery, &server.uri("/hook"), "msg", OUTAGE_DELIVERIES).await;
    let worker = start_worker("backlog-1", &redelivery);
    let held = until(limit, || done(&redelivery.stats())).await;
    drop(worker);
    (held, redelivery.stats())
}

/// The deliveries [`through_an_outage`] sends.
const OUTAGE_DELIVERIES: usize = 60;

/// A backlog moved past its endpoint's pause (a slot's deadline ahead, 30 s here) is due again
/// as soon as the endpoint takes a delivery, not 30 s later: the deliveries recover within
/// seconds of the endpoint's return.
async fn a_moved_backlog_comes_back_with_its_endpoint<O: Outbox>(
    outbox: O,
    start_worker: fn(&str, &Handle<O>) -> RunningWorker,
) {
    let (delivered, stats) = through_an_outage(
        outbox,
        start_worker,
        Duration::from_secs(3),
        &[0, 2, 2, 2, 2],
        Duration::from_secs(15),
        |stats| stats.delivered == OUTAGE_DELIVERIES as u64,
    )
    .await;
    assert!(
        delivered,
        "not all delivered 12 s after the return: {stats:?}"
    );
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert!(stats.deferred_in_bulk > 0, "{stats:?}");
    assert!(stats.resumed_in_bulk > 0, "{stats:?}");
}

/// A backlog moved while its endpoint stays down, and whose probes keep failing (each failed
/// delivery then waits two minutes for its next slot), still has a delivery due at each of the
/// pacer's probes: the endpoint's return is seen within seconds, not when the backlog falls due
/// a slot's deadline (30 s) after its move.
async fn a_moved_backlog_keeps_a_probe_due_while_its_endpoint_is_down<O: Outbox>(
    outbox: O,
    start_worker: fn(&str, &Handle<O>) -> RunningWorker,
) {
    // Those that failed a probe wait for their next slot; every other one is delivered.
    let (delivered, stats) = through_an_outage(
        outbox,
        start_worker,
        Duration::from_secs(10),
        &[0, 120],
        Duration::from_secs(20),
        |stats| stats.delivered + stats.stored_again == OUTAGE_DELIVERIES as u64,
    )
    .await;
    assert!(
        delivered,
        "not all delivered 10 s after the return: {stats:?}"
    );
    assert!(stats.deferred_in_bulk > 0, "{stats:?}");
    assert!(stats.resumed_for_probes > 0, "{stats:?}");
}

/// The tests on one engine: `$open` makes a fresh outbox (and what keeps its engine up),
/// `$outbox` is its type.
macro_rules! on_engine {
    ($engine:ident, $outbox:ty, $open:expr) => {
        mod $engine {
            use super::*;

            pub(super) fn start_worker(name: &str, redelivery: &Handle<$outbox>) -> RunningWorker {
                let redelivery = redelivery.clone();
                let worker = redelivery.outbox().worker(name).build(
                    move |delivery: tower_http_retry_redelivery::Delivery| {
                        redelivery.handle(delivery)
                    },
                );
                run_on_thread(move |stopped| async move {
                    let _ = worker
                        .run_until(async move {
                            let _ = stopped.await;
                            Ok::<(), std::io::Error>(())
                        })
                        .await;
                })
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn deliveries_outlive_an_outage_on_their_schedule_and_never_go_early() {
                let Some((outbox, _engine)) = $open("outage").await else {
                    return;
                };
                super::deliveries_outlive_an_outage_on_their_schedule_and_never_go_early(
                    outbox,
                    start_worker,
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_worker_holds_at_most_its_deliveries_in_hand() {
                let Some((outbox, _engine)) = $open("in-hand").await else {
                    return;
                };
                super::a_worker_holds_at_most_its_deliveries_in_hand(outbox, start_worker).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn endpoint_health_is_kept_in_the_engine() {
                let Some((outbox, _engine)) = $open("health").await else {
                    return;
                };
                super::endpoint_health_is_kept_in_the_engine(outbox).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_failing_endpoints_backlog_moves_past_its_pause() {
                let Some((outbox, _engine)) = $open("defer-due").await else {
                    return;
                };
                super::a_failing_endpoints_backlog_moves_past_its_pause(outbox).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_moved_backlog_comes_back_with_its_endpoint() {
                let Some((outbox, _engine)) = $open("resume").await else {
                    return;
                };
                super::a_moved_backlog_comes_back_with_its_endpoint(outbox, start_worker).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_moved_backlog_keeps_a_probe_due_while_its_endpoint_is_down() {
                let Some((outbox, _engine)) = $open("probes").await else {
                    return;
                };
                super::a_moved_backlog_keeps_a_probe_due_while_its_endpoint_is_down(
                    outbox,
                    start_worker,
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_long_dead_letter_queue_reads_back_whole() {
                let Some((outbox, _engine)) = $open("letters").await else {
                    return;
                };
                super::a_long_dead_letter_queue_reads_back_whole(outbox).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_receiver_stops_a_delivery_or_disables_its_endpoint() {
                let Some((outbox, _engine)) = $open("control").await else {
                    return;
                };
                super::the_receiver_stops_a_delivery_or_disables_its_endpoint(outbox, start_worker)
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_410_disables_the_endpoint_and_a_replay_after_enabling_delivers() {
                let Some((outbox, _engine)) = $open("gone").await else {
                    return;
                };
                super::a_410_disables_the_endpoint_and_a_replay_after_enabling_delivers(
                    outbox,
                    start_worker,
                )
                .await;
            }
        }
    };
}

/// No worker is killed in these tests, so the heartbeat only has to be long enough that a loaded
/// machine never takes a live worker for dead (with 1 s a CI run with six of these tests at once
/// handed out a live worker's step again: a second attempt 1.4 s into a 2-s slot).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Removes the test's directory when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn open_sqlite(
    name: &str,
) -> Option<(tower_http_retry_redelivery::sqlite::SqliteOutbox, TempDir)> {
    use tower_http_retry_redelivery::sqlite::{self, SqliteOptions};
    let dir = TempDir(temp_dir(name));
    let options = SqliteOptions {
        heartbeat: HEARTBEAT,
        ..SqliteOptions::default()
    };
    let outbox = sqlite::open(dir.0.join("deliveries.db"), options)
        .await
        .unwrap();
    Some((outbox, dir))
}

on_engine!(
    sqlite,
    tower_http_retry_redelivery::sqlite::SqliteOutbox,
    open_sqlite
);

/// A peer's success brings back a backlog another process moved: process A sees the endpoint
/// fail and moves its backlog a slot's deadline (5 min here) ahead, then stops; the endpoint
/// comes back; process B, started then and never seeing it fail, delivers what is due and
/// resumes the backlog through the health the engine shares: all delivered within 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_success_brings_a_moved_backlog_back() {
    const N: u64 = 60;
    let Some((outbox, _dir)) = open_sqlite("peer-resume").await else {
        return;
    };
    // Up once A has stopped, however long that takes on a busy machine.
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = TestServer::start({
        let up = Arc::clone(&up);
        move |_| {
            if up.load(std::sync::atomic::Ordering::Relaxed) {
                Reply::status(200)
            } else {
                Reply::status(503)
            }
        }
    })
    .await;
    // The backlog moved five minutes ahead, so that it cannot fall due while A stops, however
    // long that takes on a busy machine (a 30-s move fell due during a slow stop, and B had
    // nothing to bring back).
    let sequence = tower_http_retry_redelivery::schedule::SlotSequence {
        max_attempts: 1,
        deadline: Duration::from_secs(300),
    };
    let schedule = Schedule::from_delays([0, 2, 2, 2, 2].map(Duration::from_secs))
        .and_then(|schedule| schedule.sequence(sequence))
        .unwrap();
    let process = || Redelivery::new(client(&schedule), outbox.clone(), schedule.clone());
    let (a, b): (Handle<_>, Handle<_>) = (process(), process());
    enqueue_posts(&a, &server.uri("/hook"), "msg", N as usize).await;
    let worker_a = sqlite::start_worker("peer-a", &a);
    let moved = until(Duration::from_secs(10), || a.stats().deferred_in_bulk > 0).await;
    drop(worker_a);
    assert!(moved, "{:?}", a.stats());
    up.store(true, std::sync::atomic::Ordering::Relaxed);
    let worker_b = sqlite::start_worker("peer-b", &b);
    let delivered = until(Duration::from_secs(10), || {
        a.stats().delivered + b.stats().delivered == N
    })
    .await;
    drop(worker_b);
    // Which view missed what, should this fail: each one's health changes not written to the
    // engine, and its calls to the engine's store that failed.
    let health = |process: &Handle<_>| {
        let health = process.health();
        (health.unwritten(), health.store_errors())
    };
    let (health_a, health_b) = (health(&a), health(&b));
    let (a, b) = (a.stats(), b.stats());
    let views = format!("A {a:?}, health {health_a:?}; B {b:?}, health {health_b:?}");
    assert!(delivered, "{views}");
    assert!(b.resumed_in_bulk > 0, "{views}");
}

#[cfg(feature = "redis")]
async fn open_redis(
    name: &str,
) -> Option<(
    tower_http_retry_redelivery::redis::RedisOutbox,
    test_support::servers::Server,
)> {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::redis::{self, RedisOptions};
    let binary = servers::require(servers::REDIS, &format!("redis::{name}"))?;
    let port = servers::free_port();
    let server = Server::redis(&binary, port);
    let options = RedisOptions {
        heartbeat: HEARTBEAT,
        ..RedisOptions::default()
    };
    let outbox = redis::open(&format!("redis://127.0.0.1:{port}/"), options)
        .await
        .unwrap();
    Some((outbox, server))
}

#[cfg(feature = "redis")]
on_engine!(
    redis,
    tower_http_retry_redelivery::redis::RedisOutbox,
    open_redis
);

#[cfg(feature = "postgres")]
async fn open_postgres(
    name: &str,
) -> Option<(
    tower_http_retry_redelivery::postgres::PostgresOutbox,
    test_support::servers::Server,
)> {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::postgres::{self, PostgresOptions};
    let binary = servers::require(servers::POSTGRES, &format!("postgres::{name}"))?;
    let port = servers::free_port();
    let server = Server::postgres(&binary, port);
    let options = PostgresOptions {
        heartbeat: HEARTBEAT,
        ..PostgresOptions::default()
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let outbox = postgres::open(&url, options).await.unwrap();
    Some((outbox, server))
}

#[cfg(feature = "postgres")]
on_engine!(
    postgres,
    tower_http_retry_redelivery::postgres::PostgresOutbox,
    open_postgres
);

/// A pool built by hand, as an application that shares its pool builds it: `setup` (twice:
/// idempotent), then `outbox`, and the endpoints' health is kept in the engine as with `open`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_built_by_hand_is_set_up_with_the_health_table() {
    use tower_http_retry_redelivery::sqlite::{
        self, SqliteConnectOptions, SqliteOptions, SqlitePoolOptions,
    };
    let dir = TempDir(temp_dir("by-hand"));
    let connect = SqliteConnectOptions::new()
        .filename(dir.0.join("deliveries.db"))
        .create_if_missing(true)
        .pragma("journal_mode", "WAL");
    sqlite::setup(&connect).await.unwrap();
    sqlite::setup(&connect).await.unwrap();
    let pool = SqlitePoolOptions::new()
        .connect_with(connect)
        .await
        .unwrap();
    let options = SqliteOptions {
        heartbeat: HEARTBEAT,
        ..SqliteOptions::default()
    };
    endpoint_health_is_kept_in_the_engine(sqlite::outbox(&pool, options)).await;
}

/// The workers lock the tasks they take by id (apalis's lock query, its shape here): SQLite's
/// planner reads each by its id, not every row of its status (60 ms a batch with 100,000
/// waiting), with the statistics the setup writes, even in a file that holds few rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locks_taken_deliveries_by_id() {
    use tower_http_retry_redelivery::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    let Some((_outbox, dir)) = open_sqlite("plan").await else {
        return;
    };
    let connect = SqliteConnectOptions::new().filename(dir.0.join("deliveries.db"));
    let pool = SqlitePoolOptions::new()
        .connect_with(connect)
        .await
        .unwrap();
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(
        "EXPLAIN QUERY PLAN UPDATE Jobs SET status = 'Running', lock_by = ?2 \
         WHERE id IN (SELECT value FROM json_each(?1)) \
         AND (status = 'Queued' OR status = 'Pending' \
         OR (status = 'Failed' AND attempts < max_attempts))",
    )
    .bind("[\"a\"]")
    .bind("worker")
    .fetch_all(&pool)
    .await
    .unwrap();
    let plan: Vec<&str> = plan
        .iter()
        .map(|(_, _, _, detail)| detail.as_str())
        .collect();
    assert!(
        plan.iter()
            .any(|step| step.contains("SEARCH Jobs USING INDEX sqlite_autoindex_Jobs_1 (id=?)")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|step| step.contains("status")), "{plan:?}");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_pool_built_by_hand_is_set_up_with_the_health_table() {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::postgres::{self, PgPoolOptions, PostgresOptions};
    let Some(binary) = servers::require(servers::POSTGRES, "postgres::by_hand") else {
        return;
    };
    let port = servers::free_port();
    let _server = Server::postgres(&binary, port);
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let pool = PgPoolOptions::new().connect(&url).await.unwrap();
    postgres::setup(&pool).await.unwrap();
    postgres::setup(&pool).await.unwrap();
    let options = PostgresOptions {
        heartbeat: HEARTBEAT,
        ..PostgresOptions::default()
    };
    endpoint_health_is_kept_in_the_engine(postgres::outbox(&pool, options)).await;
}

/// On Redis a due delivery waits in the queue's list: a move of a failing endpoint's backlog
/// takes its deliveries out of the list, a slice at a time, and keeps every other delivery
/// there, in its order.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_move_keeps_the_other_deliveries_in_their_order() {
    use ::redis::AsyncCommands;
    use tower_http_retry_redelivery::redis::DELIVERIES;
    let Some((outbox, _server)) = open_redis("order").await else {
        return;
    };
    // More than a move's slice (1,000), so that it takes the list in several.
    const N: usize = 2_400;
    for i in 0..N {
        let (id, uri) = if i % 2 == 0 {
            (format!("up-{i}"), "http://127.0.0.1:10/hook")
        } else {
            (format!("down-{i}"), "http://127.0.0.1:9/hook")
        };
        let request = http::Request::post(uri).body(Bytes::from("{}")).unwrap();
        outbox
            .store(rules().record(id, request).unwrap())
            .await
            .unwrap();
    }
    let config = apalis_redis::Config::default().queue(DELIVERIES);
    let connection = outbox.queue().clone().get_connection().clone();
    let queued = |mut connection: ::redis::aio::ConnectionManager| {
        let config = config.clone();
        async move {
            let ids: Vec<String> = connection
                .lrange(config.active_jobs_list(), 0, -1)
                .await
                .unwrap();
            let mut names = Vec::new();
            for id in ids {
                let json: String = connection.hget(config.job_data_hash(), id).await.unwrap();
                let record: serde_json::Value = serde_json::from_str(&json).unwrap();
                names.push(record["id"].as_str().unwrap().to_owned());
            }
            names
        }
    };
    // The outbox's own task moves them to the list as they fall due (those due in one second
    // in the order of their task ids).
    let mut before = Vec::new();
    for _ in 0..50 {
        before = queued(connection.clone()).await;
        if before.len() == N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(before.len(), N, "the outbox's task queued them");
    let (pause_ends, moved_to) = a_pause_from_now();
    let moved = outbox
        .defer_due("http://127.0.0.1:9", pause_ends, moved_to)
        .await
        .unwrap();
    assert_eq!(moved, N as u64 / 2);
    before.retain(|id| id.starts_with("up-"));
    assert_eq!(before.len(), N / 2);
    assert_eq!(queued(connection).await, before);
}

/// A move reads a few MiB of records a call at most, however large the bodies: 8 deliveries of
/// a 1-MiB body each (1.4 MB each stored) go in several short slices, and all move.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_move_of_large_records_goes_in_short_slices() {
    let Some((outbox, _server)) = open_redis("large").await else {
        return;
    };
    let body = Bytes::from(vec![b'x'; 1 << 20]);
    for i in 0..10 {
        let uri = if i < 8 {
            "http://127.0.0.1:9/hook"
        } else {
            "http://127.0.0.1:10/hook"
        };
        let request = http::Request::post(uri).body(body.clone()).unwrap();
        outbox
            .store(rules().record(format!("large-{i}"), request).unwrap())
            .await
            .unwrap();
    }
    let (pause_ends, moved_to) = a_pause_from_now();
    let moved = outbox
        .defer_due("http://127.0.0.1:9", pause_ends, moved_to)
        .await
        .unwrap();
    assert_eq!(moved, 8);
}

/// apalis ends a worker's run on the first fetch that fails; `supervise` starts a new run under
/// the same name, so a worker outlives its engine's restart: a redis-server killed and started
/// again on its port (keeping nothing on disk, it comes back empty), then deliveries stored
/// after the restart are delivered by the same worker, and a stop ends it.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervised_worker_outlives_its_engines_restart() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::redis::{self, RedisOptions, RedisOutbox};
    use tower_http_retry_redelivery::{supervise, RunEnded};
    let Some(binary) = servers::require(servers::REDIS, "redis::restart") else {
        return;
    };
    let port = servers::free_port();
    let server = Server::redis(&binary, port);
    let options = RedisOptions {
        heartbeat: HEARTBEAT,
        ..RedisOptions::default()
    };
    let outbox: RedisOutbox = redis::open(&format!("redis://127.0.0.1:{port}/"), options)
        .await
        .unwrap();
    let receiver = TestServer::start(|_| Reply::status(200)).await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery: Handle<RedisOutbox> =
        Redelivery::new(client(&schedule), outbox.clone(), schedule);
    let (runs, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let worker = {
        let (redelivery, runs, failed) = (redelivery.clone(), runs.clone(), failed.clone());
        run_on_thread(move |stopped| async move {
            let stop = async move {
                let _ = stopped.await;
            };
            let outbox = redelivery.outbox().clone();
            supervise(
                &outbox,
                "restart-1",
                |run, stopping| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    let redelivery = redelivery.clone();
                    let worker = outbox
                        .worker(run)
                        .build(move |delivery| redelivery.handle(delivery));
                    worker.run_until(stopping)
                },
                |ended| {
                    if matches!(ended, RunEnded::Failed { .. }) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                },
                stop,
            )
            .await
            .unwrap();
        })
    };
    enqueue_posts(&redelivery, &receiver.uri("/hook"), "before", 10).await;
    let delivered = |n: u64| {
        let redelivery = redelivery.clone();
        move || redelivery.stats().delivered == n
    };
    assert!(until(Duration::from_secs(10), delivered(10)).await);

    drop(server);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _server = Server::redis(&binary, port);
    // The connection comes back by itself; a store meanwhile fails and is tried again.
    for i in 0..10 {
        let record = |i: usize| {
            let request = http::Request::post(receiver.uri("/hook"))
                .body(Bytes::from(format!("{{\"n\":{i}}}")))
                .unwrap();
            rules().record(format!("after_{i}"), request).unwrap()
        };
        let mut stored = false;
        for _ in 0..50 {
            if redelivery.enqueue(record(i)).await.is_ok() {
                stored = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(stored, "the restarted engine took no store in 5 s");
    }
    let all = until(Duration::from_secs(30), delivered(20)).await;
    let (runs, failed) = (runs.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(
        all,
        "runs {runs}, failed {failed}: {:?}",
        redelivery.stats()
    );
    assert!(failed >= 1 && runs > failed, "runs {runs}, failed {failed}");
    // A stop ends the supervisor (the thread is joined on drop).
    drop(worker);
}

/// apalis-redis 1.0 moves every due task to its queue in one Lua call that `unpack`s their ids,
/// and past about 8,000 that call fails and stops every worker: a backlog that fell due while no
/// worker ran must not. 9,000 deliveries stored and left to fall due, then a worker process's
/// outbox opened and a worker started: all delivered.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_backlog_past_luas_stack_is_delivered() {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::redis::{self, RedisOptions, RedisOutbox};
    const N: usize = 9_000;
    let Some(binary) = servers::require(servers::REDIS, "redis::backlog") else {
        return;
    };
    let port = servers::free_port();
    let _server = Server::redis(&binary, port);
    let url = format!("redis://127.0.0.1:{port}/");
    let options = RedisOptions {
        heartbeat: HEARTBEAT,
        batch_size: 100,
        ..RedisOptions::default()
    };
    let server = TestServer::start(|_| Reply::status(200)).await;
    {
        // A sender's process: it stores, and it is gone before the deliveries fall due.
        let sender = redis::open(&url, options).await.unwrap();
        for n in 0..N {
            let request = http::Request::post(server.uri("/hook"))
                .body(Bytes::from("{}"))
                .unwrap();
            sender
                .store(rules().record(format!("msg_{n}"), request).unwrap())
                .await
                .unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let outbox: RedisOutbox = redis::open(&url, options).await.unwrap();
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery: Handle<RedisOutbox> =
        Redelivery::new(client(&schedule), outbox.clone(), schedule);
    let worker = self::redis::start_worker("backlog-1", &redelivery);
    let delivered = until(Duration::from_secs(60), || {
        redelivery.stats().delivered == N as u64
    })
    .await;
    drop(worker);
    assert!(delivered, "{:?}", redelivery.stats());
    assert_eq!(server.total_hits(), N as u32);
}
