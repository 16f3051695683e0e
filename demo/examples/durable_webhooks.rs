//! Webhooks that outlive their worker: the durable path's demo, as a webhook sender runs it.
//!
//! ```text
//! cargo run --example durable_webhooks
//! ```
//!
//! Needs nothing else: the deliveries go into an SQLite file in a temporary directory (apalis's
//! engine, through tower-http-retry-redelivery), two worker processes (this program, started
//! again as `durable_webhooks worker ...`) take them, and three receivers on `127.0.0.1` answer:
//! one is down (503) for the first 30 hours of the three-day schedule, an hour lasting 0.2 s
//! here; one answers `410 Gone`; one answers `webhook-delivery: abort-message` (Svix's receiver
//! control: stop retrying this one). Every attempt is signed as Standard Webhooks receivers
//! require, with its own timestamp, and the receivers verify each one with the specification's
//! own library (`standardwebhooks`) before they answer. Three seconds in, one worker is killed
//! (`kill -9`) and restarted at once under its name. It prints what was delivered and on which
//! slot of the schedule, the signatures verified, what was applied twice (the receiver
//! deduplicates by the delivery id), what was dead-lettered and why, and one dead letter's
//! attempt history, read from the store.

use bytes::Bytes;
use http::header::HeaderName;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::{Reply, TestServer};
use tower_http_retry_redelivery::{dead_letters, Outbox, RecordRules};

const SECONDS_PER_HOUR: f64 = 0.2;
const WEBHOOKS: usize = 200;
const TO_GONE: usize = 10;
const TO_ABORT: usize = 5;

/// A receiver as a Standard Webhooks one checks a request: the signature, against its secret,
/// within five minutes of its timestamp. Counts the checks that passed and failed.
#[derive(Clone)]
struct Verifier {
    webhook: Arc<standardwebhooks::Webhook>,
    checks: Arc<Mutex<(u32, u32)>>,
}

impl Verifier {
    fn new() -> Self {
        Self {
            webhook: Arc::new(
                standardwebhooks::Webhook::new(demo::durable::SECRET).expect("the demo's secret"),
            ),
            checks: Arc::default(),
        }
    }

    /// Whether `hit` carries a valid signature; a receiver answers 401 to one that does not.
    fn verify(&self, hit: &test_support::Hit) -> bool {
        let verified = self.webhook.verify(&hit.body, &hit.headers).is_ok();
        let mut checks = self.checks.lock().unwrap();
        if verified {
            checks.0 += 1;
        } else {
            checks.1 += 1;
        }
        verified
    }
}

fn spawn_worker(database: &std::path::Path, name: &str) -> Child {
    Command::new(std::env::current_exe().expect("this program's path"))
        .args(["worker".as_ref(), database.as_os_str(), name.as_ref()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("a worker starts")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, database, name] = &args[..] {
        if mode == "worker" {
            demo::durable::run_worker(
                &demo::durable::Engine::parse(database),
                name,
                SECONDS_PER_HOUR,
            );
            return;
        }
    }
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(demo());
}

async fn demo() {
    let down_for = Duration::from_secs_f64(30.0 * SECONDS_PER_HOUR);
    let start = Instant::now();
    let seen: Arc<Mutex<Vec<(String, u16)>>> = Arc::default();
    let log = Arc::clone(&seen);
    let verifier = Verifier::new();
    let check = verifier.clone();
    let hooks = TestServer::start(move |hit| {
        let status = if !check.verify(hit) {
            401
        } else if start.elapsed() < down_for {
            503
        } else {
            200
        };
        log.lock()
            .unwrap()
            .push((demo::durable::delivery_id(&hit.headers), status));
        Reply::status(status)
    })
    .await;
    let check = verifier.clone();
    let gone =
        TestServer::start(move |hit| Reply::status(if check.verify(hit) { 410 } else { 401 }))
            .await;
    let check = verifier.clone();
    let aborting = TestServer::start(move |hit| {
        if check.verify(hit) {
            Reply::status(503).header("webhook-delivery", "abort-message")
        } else {
            Reply::status(401)
        }
    })
    .await;

    let dir = std::env::temp_dir().join(format!("durable-webhooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let database = dir.join("deliveries.db");
    let outbox = demo::durable::open(&database).await;
    let rules = RecordRules::new().id_header(HeaderName::from_static(demo::durable::ID_HEADER));
    for n in 0..WEBHOOKS + TO_GONE + TO_ABORT {
        let (server, id) = if n < WEBHOOKS {
            (&hooks, format!("evt_{n}"))
        } else if n < WEBHOOKS + TO_GONE {
            (&gone, format!("old_{n}"))
        } else {
            (&aborting, format!("stop_{n}"))
        };
        let request = http::Request::post(server.uri("/webhooks"))
            .header("content-type", "application/json")
            .body(Bytes::from(format!("{{\"event\":{n}}}")))
            .expect("a request");
        outbox
            .store(rules.record(id, request).expect("a record"))
            .await
            .expect("stored");
    }
    println!(
        "{} webhooks stored in {}; the receiver is down for {:.1} s (30 hours of the schedule), {TO_GONE} more go to an endpoint that answers 410, {TO_ABORT} to one that answers `webhook-delivery: abort-message`",
        WEBHOOKS + TO_GONE + TO_ABORT,
        database.display(),
        down_for.as_secs_f64()
    );

    let mut workers = [
        spawn_worker(&database, "worker-0"),
        spawn_worker(&database, "worker-1"),
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;
    workers[0].kill().expect("kill -9");
    let _ = workers[0].wait();
    println!(
        "{:>5.1} s  worker-0 killed (kill -9)",
        start.elapsed().as_secs_f64()
    );
    workers[0] = spawn_worker(&database, "worker-0");
    println!(
        "{:>5.1} s  worker-0 started again under its name, taking back what its killed run held",
        start.elapsed().as_secs_f64()
    );

    let mut letters = Vec::new();
    for _ in 0..600 {
        letters = dead_letters(outbox.dead())
            .await
            .expect("the dead letters read");
        let delivered = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| *s == 200)
            .map(|(id, _)| id.clone())
            .collect::<std::collections::BTreeSet<_>>();
        if delivered.len() == WEBHOOKS && letters.len() == TO_GONE + TO_ABORT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed();
    for worker in &mut workers {
        drop(worker.stdin.take());
        let _ = worker.wait();
    }

    let seen = seen.lock().unwrap().clone();
    // Per webhook: at which of its arrivals at the receiver it was delivered, and how often.
    let mut arrivals: BTreeMap<&str, u32> = BTreeMap::new();
    let mut receipts: BTreeMap<&str, u32> = BTreeMap::new();
    let mut by_arrival: BTreeMap<u32, u32> = BTreeMap::new();
    for (id, status) in &seen {
        let arrival = arrivals.entry(id).or_insert(0);
        *arrival += 1;
        if *status == 200 {
            let receipt = receipts.entry(id).or_insert(0);
            *receipt += 1;
            if *receipt == 1 {
                *by_arrival.entry(*arrival).or_insert(0) += 1;
            }
        }
    }
    let twice = receipts.values().filter(|count| **count > 1).count();
    println!(
        "\n{:>5.1} s  done: {} of {WEBHOOKS} webhooks delivered, {twice} applied twice (a step re-run after the kill; the receiver deduplicates by id)",
        elapsed.as_secs_f64(),
        receipts.len()
    );
    println!("\ndelivered at arrival   webhooks");
    for (arrival, count) in &by_arrival {
        println!("{arrival:>20}   {count:>8}");
    }
    let (verified, refused) = *verifier.checks.lock().unwrap();
    println!(
        "\nsignatures: {verified} attempts verified by the receivers (standardwebhooks), {refused} refused"
    );
    println!(
        "\n{} attempts reached the receiver while it was down, for {WEBHOOKS} webhooks: the pacer probed it, the rest waited in the store, not in a worker",
        seen.iter().filter(|(_, s)| *s == 503).count()
    );
    println!("\ndead-lettered: {}", letters.len());
    let mut reasons: BTreeMap<String, u32> = BTreeMap::new();
    for letter in &letters {
        *reasons.entry(format!("{:?}", letter.reason)).or_insert(0) += 1;
    }
    for (reason, count) in reasons {
        println!("  {reason}: {count}");
    }
    if let Some(letter) = letters.first() {
        println!(
            "\nthe history of {} (read from the store):",
            letter.delivery.id()
        );
        for slot in letter.delivery.history() {
            println!(
                "  slot {}: {} attempt(s), stopped {}, status {:?}",
                slot.slot, slot.attempts, slot.stop, slot.status
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
