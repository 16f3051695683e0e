//! Reproductions of defects in tower-http-retry-redelivery, found by reading and running.
//!
//! Goes in `tower-http-retry-redelivery/tests/redelivery_defects.rs`. Run with
//! `cargo test -p tower-http-retry-redelivery --test redelivery_defects -- --test-threads=1`
//! (SQLite on a temporary file and a loopback receiver; no server needed; about 35 s). Two tests
//! write raw rows through apalis-sqlite, which the crate depends on with its default `sqlite`
//! feature (an integration test may use the package's own dependencies).
//!
//! `bug_*` tests fail on today's code, one per defect; `ok_*` tests are controls that pass.

use apalis_core::backend::{TaskSink, Vacuum};
use bytes::Bytes;
use http::header::HeaderName;
use http_body_util::Full;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use test_support::{Reply, TestServer, REQUEST_ID};
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry::{RetryReport, StopReason};
use tower_http_retry_redelivery::health::{EndpointHealth, HealthRules};
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions, SqliteOutbox};
use tower_http_retry_redelivery::step::{decide, SlotResult, Step};
use tower_http_retry_redelivery::{
    dead_letters, replay, DeadLetter, DeadReason, Outbox, RecordRules, Redelivery, Schedule,
};

type Client = tower::util::BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

fn client(schedule: &Schedule) -> Client {
    let retry = schedule.retry_layer().build().unwrap();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .map_err(BoxError::from)
        .service(test_support::client());
    tower::util::BoxCloneSyncService::new(stack.map_err(BoxError::from))
}

fn rules() -> RecordRules {
    RecordRules::new().id_header(HeaderName::from_static(REQUEST_ID))
}

type Handle = Redelivery<Client, SqliteOutbox, Full<Bytes>>;

/// Removes the test's directory when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("bughunt5-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn open(dir: &TempDir, heartbeat: Duration) -> SqliteOutbox {
    let options = SqliteOptions {
        heartbeat,
        ..SqliteOptions::default()
    };
    sqlite::open(dir.0.join("deliveries.db"), options)
        .await
        .unwrap()
}

/// A worker on a thread of its own (as `tests/engines.rs` runs them), stopped when dropped; what
/// `run_until` returned is sent on `exited`.
struct RunningWorker(
    Option<tokio::sync::oneshot::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
);

impl RunningWorker {
    /// Asks the worker to stop; whether its thread ended within `limit`.
    fn stop_within(&mut self, limit: Duration) -> bool {
        drop(self.0.take());
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.1.as_ref().is_none_or(|thread| thread.is_finished()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        drop(self.0.take());
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

fn start_worker(name: &str, redelivery: &Handle) -> (RunningWorker, mpsc::Receiver<String>) {
    let redelivery = redelivery.clone();
    let worker = apalis_core::worker::builder::WorkerBuilder::new(name)
        .backend(redelivery.outbox().queue().clone())
        .build(move |delivery: tower_http_retry_redelivery::Delivery| redelivery.handle(delivery));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (exit_tx, exit_rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(worker.run_until(async move {
            let _ = stopped.await;
            Ok::<(), std::io::Error>(())
        }));
        let _ = exit_tx.send(format!("{result:?}"));
    });
    (RunningWorker(Some(stop), Some(thread)), exit_rx)
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

fn post(server: &TestServer, body: &'static str) -> http::Request<Bytes> {
    http::Request::post(server.uri("/hook"))
        .header("content-type", "application/json")
        .body(Bytes::from(body))
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// 1. A stored record that does not deserialize into `Delivery` stops the worker.
// ---------------------------------------------------------------------------------------------

/// A record written by another version of the format (here `headers` became a map, and the
/// version says 2). The docs: "A worker refuses a record of another version
/// (`RecordError::Version`) rather than guess at it, and dead-letters it as `Unreadable`", and
/// "a record that no longer parses is dead-lettered as `Unreadable`". It never reaches
/// `Redelivery::handle`: apalis's codec fails in the backend's stream, the worker's `run`
/// returns `Err(BackendError(..))`, the batch it had taken stays locked to it, and the good
/// delivery behind the bad record is not delivered. Started again under its name, the worker
/// takes the same record back and stops again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bug_a_record_of_another_shape_stops_the_worker_instead_of_being_dead_lettered() {
    let dir = TempDir::new("poison");
    let outbox = open(&dir, Duration::from_secs(1)).await;
    let server = TestServer::start(|_| Reply::status(200)).await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery: Handle = Redelivery::new(client(&schedule), outbox.clone(), schedule);

    // The bad record first, then a good one, both due now.
    let template = rules().record("poison", post(&server, "{}")).unwrap();
    let mut json = serde_json::to_value(&template).unwrap();
    json["version"] = 2.into();
    json["headers"] = serde_json::json!({"content-type": "application/json"});
    let mut raw = apalis_sqlite::SqliteStorage::<serde_json::Value>::new(outbox.queue().pool())
        .with_config(apalis_sqlite::Config::default().queue(sqlite::DELIVERIES));
    raw.push(json).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    redelivery
        .enqueue(rules().record("good", post(&server, "{}")).unwrap())
        .await
        .unwrap();

    let (worker, exited) = start_worker("poison-1", &redelivery);
    let delivered = until(Duration::from_secs(6), || redelivery.stats().delivered == 1).await;
    let exit = exited.try_recv().ok();
    drop(worker);
    let letters = dead_letters(outbox.dead()).await.unwrap();
    let poison_letter = letters.iter().find(|l| l.delivery.id() == "poison");
    eprintln!(
        "first run: delivered {delivered}, stats {:?}, worker exited: {exit:?}, dead letters {:?}",
        redelivery.stats(),
        letters
            .iter()
            .map(|l| (l.delivery.id().to_owned(), l.reason))
            .collect::<Vec<_>>()
    );

    // The same worker name started again (a restart after the crash) once its heartbeat is old.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (worker, exited_again) = start_worker("poison-1", &redelivery);
    let delivered_after_restart =
        until(Duration::from_secs(6), || redelivery.stats().delivered == 1).await;
    let exit_again = exited_again.try_recv().ok();
    drop(worker);
    eprintln!(
        "restart: delivered {delivered_after_restart}, worker exited: {exit_again:?}, hits {}",
        server.total_hits()
    );

    assert!(
        exit.is_none(),
        "the worker stopped on a bad record: {exit:?}"
    );
    assert!(
        delivered,
        "the good delivery behind the bad record was not delivered"
    );
    assert_eq!(
        poison_letter.map(|l| l.reason),
        Some(DeadReason::Unreadable),
        "the bad record is not dead-lettered"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Endpoint health: a process that did not see the fleet's successes disables a healthy
//    endpoint.
// ---------------------------------------------------------------------------------------------

fn report(attempts: u32, stop: StopReason) -> RetryReport {
    let mut report = RetryReport::default();
    report.attempts = attempts;
    report.stop = stop;
    report
}

fn slot(
    delivery: tower_http_retry_redelivery::Delivery,
    status: u16,
    stop: StopReason,
    health: &EndpointHealth,
    at: SystemTime,
) -> Step {
    let result = SlotResult {
        started: at,
        status: Some(status),
        report: report(1, stop),
    };
    decide(delivery, result, &Schedule::standard_webhooks(), health, at)
}

fn hook(id: &str) -> tower_http_retry_redelivery::Delivery {
    let request = http::Request::post("https://hooks.example/in")
        .body(Bytes::from("{}"))
        .unwrap();
    RecordRules::new().record(id, request).unwrap()
}

/// Two worker processes share the queue, each with its own `EndpointHealth` (the docs: "The
/// state is the process's own, in memory: each process learns the same failures from the same
/// endpoint"). Process A sees one 503 blip at t0. For the next five days every delivery to the
/// endpoint happens to be taken by process B and succeeds (one an hour). At t0 + 5 days A sees a
/// second 503 blip: its failing run started at t0 and was never ended, because the successes
/// were B's. A disables the endpoint and, from then on, dead-letters every delivery to it that
/// it takes, unsent, until someone calls `enable` on A.
#[test]
fn bug_a_process_that_missed_the_fleets_successes_disables_a_healthy_endpoint() {
    let a = EndpointHealth::new(HealthRules::new());
    let b = EndpointHealth::new(HealthRules::new());
    let t0 = SystemTime::now();
    let step = slot(hook("blip_1"), 503, StopReason::AttemptsExhausted, &a, t0);
    assert!(matches!(step, Step::StoreAgain { .. }), "{step:?}");
    for hour in 1..120 {
        let at = t0 + Duration::from_secs(hour * 3600);
        let id = format!("ok_{hour}");
        assert_eq!(
            slot(hook(&id), 200, StopReason::Success, &b, at),
            Step::Delivered
        );
    }
    let later = t0 + Duration::from_secs(5 * 24 * 3600);
    let step = slot(
        hook("blip_2"),
        503,
        StopReason::AttemptsExhausted,
        &a,
        later,
    );
    let disabled = a.disabled("https://hooks.example");
    eprintln!("A after its second blip: {step:?}; A says disabled: {disabled:?}");
    assert!(
        matches!(step, Step::StoreAgain { .. }),
        "a healthy endpoint (120 successes in 5 days, 2 blips) was disabled by process A"
    );
    assert_eq!(disabled, None);
}

/// The same in one process: the endpoint's last answer was a non-retryable one (a 400 on a
/// delivery's second slot, after a 503 on its first), so nothing ended the failing run. The
/// endpoint then gets no traffic for five days (a weekly webhook), and its next delivery meets
/// one 503: the endpoint is disabled at once, on the strength of two failed slots five days
/// apart, and the process dead-letters the rest of its deliveries unsent.
#[test]
fn bug_two_failures_five_days_apart_disable_a_quiet_endpoint() {
    let health = EndpointHealth::default();
    let t0 = SystemTime::now();
    let step = slot(hook("w1"), 503, StopReason::AttemptsExhausted, &health, t0);
    let Step::StoreAgain { delivery, .. } = step else {
        panic!("{step:?}")
    };
    let at = delivery.due_at();
    let step = slot(delivery, 400, StopReason::Permanent, &health, at);
    assert!(matches!(
        step,
        Step::DeadLetter(DeadLetter {
            reason: DeadReason::Permanent,
            ..
        })
    ));
    let next_week = t0 + Duration::from_secs(5 * 24 * 3600 + 60);
    let step = slot(
        hook("w2"),
        503,
        StopReason::AttemptsExhausted,
        &health,
        next_week,
    );
    eprintln!("after one 503 five days later: {step:?}");
    assert!(
        matches!(step, Step::StoreAgain { .. }),
        "disabled after two failed slots five days apart"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Replay is "stored once" only while the engine still holds the replayed step's key.
// ---------------------------------------------------------------------------------------------

/// The docs: "A letter replayed twice is stored once. Replayed letters stay in the dead-letter
/// queue", and "Done tasks stay in the data hash, as they stay in SQLite's table, until apalis's
/// vacuum removes them." Once the vacuum ran (or, on Redis, once `idempotency_ttl` passed), the
/// replayed step's key is gone, and a second `replay` over the same span stores the letter again:
/// a delivery already delivered is sent again, days later, past most receivers' dedup window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bug_a_second_replay_after_the_vacuum_sends_a_delivered_letter_again() {
    let dir = TempDir::new("replay");
    // A 1-s heartbeat: an idle apalis-sqlite worker looks for due tasks about once a heartbeat.
    let outbox = open(&dir, Duration::from_secs(1)).await;
    let server = TestServer::start(|_| Reply::status(200)).await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery: Handle = Redelivery::new(client(&schedule), outbox.clone(), schedule);
    let letter = DeadLetter {
        delivery: rules().record("msg_replayed", post(&server, "{}")).unwrap(),
        reason: DeadReason::ScheduleExhausted,
        at: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    };
    outbox.dead_letter(letter).await.unwrap();
    let since = SystemTime::now() - Duration::from_secs(30 * 24 * 3600);

    let (worker, _exited) = start_worker("replay-1", &redelivery);
    assert_eq!(replay(&outbox, since, None).await.unwrap(), 1);
    assert!(
        until(Duration::from_secs(10), || redelivery.stats().delivered
            == 1)
        .await
    );

    // Control: a second replay right away is stored once.
    assert_eq!(replay(&outbox, since, None).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before_vacuum = server.total_hits();

    // The housekeeping the docs point to, then the same replay (say, a week later).
    let removed = outbox.queue().clone().vacuum().await.unwrap();
    assert_eq!(replay(&outbox, since, None).await.unwrap(), 1);
    until(Duration::from_secs(8), || server.total_hits() >= 2).await;
    drop(worker);
    let hits = server.total_hits();
    eprintln!(
        "receiver hits: {before_vacuum} before the vacuum ({removed} rows removed), {hits} after \
         the second replay; stats {:?}",
        redelivery.stats()
    );
    assert_eq!(before_vacuum, 1, "control: stored once");
    assert_eq!(
        hits, 1,
        "a delivered letter was sent again by a later replay"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. A receiver that never answers holds its delivery forever: the slot's deadline does not
//    bound an attempt in flight, and nothing in the documented stack does.
// ---------------------------------------------------------------------------------------------

/// `SlotSequence::deadline`: "How long one slot may take, waits in the pacer's queue included";
/// the guide: "No worker sleeps between slots (a slot waits in the pacer's queue at most its
/// deadline)". The stack is the guide's (and the demo's): `schedule.retry_layer()` over the
/// transport, no timeout layer (the retry layer's `deadline` "does not cut an attempt in
/// flight"). A receiver that reads the request and never answers (a wedged app server behind a
/// proxy that keeps the socket open) holds the worker's handler, and so the delivery's task:
/// the task stays locked to a live worker (its heartbeats go on), so the engine never hands it
/// out again, and the delivery is neither retried on its schedule nor dead-lettered, ever.
/// Here the slot's deadline is 1 s; 8 s later the delivery has had no outcome at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bug_a_receiver_that_never_answers_holds_its_delivery_past_the_slot_deadline_forever() {
    let dir = TempDir::new("hang");
    let outbox = open(&dir, Duration::from_secs(1)).await;
    let server = TestServer::start(|_| Reply::status(200).after(Duration::from_secs(3600))).await;
    let schedule = Schedule::from_delays([0, 1, 1].map(Duration::from_secs))
        .unwrap()
        .sequence(tower_http_retry_redelivery::schedule::SlotSequence {
            max_attempts: 1,
            deadline: Duration::from_secs(1),
        })
        .unwrap();
    let redelivery: Handle = Redelivery::new(client(&schedule), outbox.clone(), schedule.clone());
    redelivery
        .enqueue(rules().record("msg_hang", post(&server, "{}")).unwrap())
        .await
        .unwrap();
    let (worker, exited) = start_worker("hang-1", &redelivery);
    let handled = until(Duration::from_secs(8), || {
        let stats = redelivery.stats();
        stats.stored_again + stats.dead_lettered + stats.delivered + stats.deferred > 0
    })
    .await;
    let stats = redelivery.stats();
    let exit = exited.try_recv().ok();
    // A graceful stop waits for the hung handler too.
    let mut worker = worker;
    let stopped = worker.stop_within(Duration::from_secs(3));
    let hits = server.total_hits();
    drop(server); // closes the hung connection, so the handler (and the worker) can end
    drop(worker);
    eprintln!(
        "slot deadline {:?}, schedule end {:?} after the store; after 8 s: {stats:?}; receiver \
         hits {hits}; worker exited: {exit:?}; stopped within 3 s of its stop signal: {stopped}",
        schedule.slot_sequence().deadline,
        schedule
            .end(SystemTime::UNIX_EPOCH)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap(),
    );
    assert!(
        handled,
        "the delivery's slot is still running 8 s after its 1-s deadline (its whole schedule \
         ends 2.4 s after the store): {stats:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. One dead letter that does not deserialize makes every letter unreadable and unreplayable.
// ---------------------------------------------------------------------------------------------

/// A letter written by a newer build (a `DeadReason` this build does not know), beside one
/// ordinary letter. `dead_letters` and `replay` fail as a whole (`EngineError`), so the
/// ordinary letter can be neither read nor replayed through the crate until someone deletes the
/// other row by hand. The Redis and Postgres listings decode the same way (`serde_json::from_str`
/// / the codec, `?` on each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bug_one_unreadable_dead_letter_blocks_reading_and_replaying_every_letter() {
    let dir = TempDir::new("letters");
    let outbox = open(&dir, Duration::from_secs(5)).await;
    let request = || {
        http::Request::post("http://127.0.0.1:9/hook")
            .body(Bytes::from("{}"))
            .unwrap()
    };
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    outbox
        .dead_letter(DeadLetter {
            delivery: rules().record("ordinary", request()).unwrap(),
            reason: DeadReason::ScheduleExhausted,
            at,
        })
        .await
        .unwrap();
    let newer = DeadLetter {
        delivery: rules().record("newer", request()).unwrap(),
        reason: DeadReason::Permanent,
        at,
    };
    let mut json = serde_json::to_value(&newer).unwrap();
    json["reason"] = "expired".into();
    let mut raw = apalis_sqlite::SqliteStorage::<serde_json::Value>::new(outbox.dead().pool())
        .with_config(apalis_sqlite::Config::default().queue(sqlite::DEAD_LETTERS));
    raw.push(json).await.unwrap();

    let read = dead_letters(outbox.dead()).await;
    let replayed = replay(&outbox, SystemTime::UNIX_EPOCH, None).await;
    eprintln!(
        "dead_letters: {:?}; replay: {replayed:?}",
        read.as_ref().map(|letters| letters.len())
    );
    assert!(
        read.is_ok(),
        "one letter of another shape makes the whole queue unreadable: {:?}",
        read.err()
    );
    assert_eq!(
        replayed.ok(),
        Some(1),
        "the ordinary letter cannot be replayed"
    );
}

/// Control for `bug_a_record_of_another_shape_...`: a record of another version whose shape is
/// this version's is handled as documented (dead-lettered as `Unreadable`, the worker goes on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_a_record_of_another_version_with_the_same_shape_is_dead_lettered_unreadable() {
    let dir = TempDir::new("version");
    let outbox = open(&dir, Duration::from_secs(1)).await;
    let server = TestServer::start(|_| Reply::status(200)).await;
    let schedule = Schedule::from_delays([0, 1].map(Duration::from_secs)).unwrap();
    let redelivery: Handle = Redelivery::new(client(&schedule), outbox.clone(), schedule);
    let template = rules().record("v2", post(&server, "{}")).unwrap();
    let mut json = serde_json::to_value(&template).unwrap();
    json["version"] = 2.into();
    let mut raw = apalis_sqlite::SqliteStorage::<serde_json::Value>::new(outbox.queue().pool())
        .with_config(apalis_sqlite::Config::default().queue(sqlite::DELIVERIES));
    raw.push(json).await.unwrap();
    redelivery
        .enqueue(rules().record("good", post(&server, "{}")).unwrap())
        .await
        .unwrap();
    let (worker, exited) = start_worker("version-1", &redelivery);
    let done = until(Duration::from_secs(6), || {
        let stats = redelivery.stats();
        stats.delivered == 1 && stats.dead_lettered == 1
    })
    .await;
    drop(worker);
    let letters = dead_letters(outbox.dead()).await.unwrap();
    assert!(done, "{:?}", redelivery.stats());
    assert_eq!(letters[0].reason, DeadReason::Unreadable);
    assert!(exited
        .try_recv()
        .map_or(true, |exit| exit.starts_with("Ok")));
}

// ---------------------------------------------------------------------------------------------
// 6. The schedule's end does not bound a next slot moved later by the report's resend time.
// ---------------------------------------------------------------------------------------------

/// `decide`'s doc: "the next slot, due at the latest of its jittered time and the report's
/// resend time; dead-lettered ... when the next slot would fall after the schedule's end";
/// `Schedule::end`: "No slot of it is due later (however the pacer delayed its slots)". The
/// code checks the end against the jittered time alone (`step.rs`, the `filter` before
/// `due.max(resend_at)`), so a failed last-but-one slot whose report says "come back in 30
/// days" is stored for a slot 30 days later, 28 days past the end of a 27-hour schedule, and is
/// sent then (nothing checks the end before sending).
#[test]
fn bug_a_resend_time_past_the_schedules_end_stores_a_slot_after_the_end() {
    let schedule = Schedule::standard_webhooks();
    let health = EndpointHealth::default();
    let mut delivery = hook("late");
    let mut at = delivery.due_at();
    // Slots 0..=5 fail; the delivery is now due in slot 6.
    for _ in 0..6 {
        let result = SlotResult {
            started: at,
            status: Some(503),
            report: report(1, StopReason::AttemptsExhausted),
        };
        let Step::StoreAgain { delivery: next, .. } =
            decide(delivery, result, &schedule, &health, at)
        else {
            panic!("stored again")
        };
        at = next.due_at();
        delivery = next;
    }
    let end = schedule.end(delivery.enqueued_at());
    let mut hinted = report(1, StopReason::AttemptsExhausted);
    hinted.resend_at = Some(at + Duration::from_secs(30 * 24 * 3600));
    let result = SlotResult {
        started: at,
        status: Some(429),
        report: hinted,
    };
    let step = decide(delivery, result, &schedule, &health, at);
    let due = match &step {
        Step::StoreAgain { delivery, .. } => Some(delivery.due_at()),
        _ => None,
    };
    eprintln!(
        "slot {} stored due {:?} after the schedule's end",
        match &step {
            Step::StoreAgain { delivery, .. } => delivery.slot(),
            _ => 0,
        },
        due.and_then(|due| due.duration_since(end).ok())
    );
    assert!(
        due.is_none_or(|due| due <= end),
        "a slot stored past the schedule's end: {step:?}"
    );
}
