//! Deliveries outlive their processes: 1,000 deliveries on an engine, 4 worker processes
//! (`redelivery-worker`), 20 `kill -9` of random workers at random times, a receiver down for
//! the first "30 hours" of a three-day schedule scaled to a quarter second an hour, one that
//! answers `410 Gone` and one that never comes back, and one record of another shape. Nothing is
//! lost, no worker stops, a receipt applied twice
//! needs a kill (each kill can re-send at most the batch its worker had taken and not yet
//! acknowledged), no attempt goes before its slot but such a re-sent one, and the dead-letter
//! queue holds exactly the deliveries that got a 410 or ran out of schedule.

use bytes::Bytes;
use http::header::HeaderName;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use test_support::{Reply, TestServer};
use tower_http_retry_redelivery::{
    dead_letters, ApalisOutbox, DeadLetterQueue, DeadReason, Delivery, EngineError, Outbox,
    RecordRules,
};

const SECONDS_PER_HOUR: f64 = 0.25;
const UP: usize = 900;
const GONE: usize = 50;
const NEVER: usize = 50;
const WORKERS: usize = 4;
const KILLS: usize = 20;
/// The id of the record of another shape.
const POISON: &str = "poison_0";
/// The workers' heartbeat (`demo::durable::open` and its Redis and Postgres twins).
const HEARTBEAT: Duration = Duration::from_secs(1);

type Arrivals = Arc<Mutex<Vec<(String, SystemTime, u16)>>>;

fn receiver(
    arrivals: &Arrivals,
    answer: impl Fn() -> u16 + Send + Sync + 'static,
) -> impl Fn(&test_support::Hit) -> Reply {
    let arrivals = Arc::clone(arrivals);
    move |hit| {
        let status = answer();
        arrivals.lock().unwrap().push((
            demo::durable::delivery_id(&hit.headers),
            SystemTime::now(),
            status,
        ));
        Reply::status(status)
    }
}

/// What a worker run reported of a delivery (`demo::durable::REPORT_ENV`).
#[derive(Clone, Copy, PartialEq)]
enum Report {
    Taken,
    Done,
    Failed,
    /// A run started, its name's earlier runs' deliveries taken back (the id: its name).
    Started,
}

/// What the worker runs reported: (run, what, delivery id, Unix ms), each run's lines in its
/// order.
type Reports = Arc<Mutex<Vec<(usize, Report, String, u128, u128)>>>;

/// Starts worker run `run` under `name`, its reports read into `reports` by a thread that ends
/// with the run's output.
fn spawn_worker(
    engine: &demo::durable::Engine,
    name: &str,
    run: usize,
    reports: &Reports,
) -> (Child, std::thread::JoinHandle<()>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_redelivery-worker"))
        .arg(engine.arg())
        .arg(name)
        .arg(SECONDS_PER_HOUR.to_string())
        .env(demo::durable::REPORT_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Shown: a worker that stops says why (the test also checks that none has exited).
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the worker starts");
    let stdout = child.stdout.take().expect("piped");
    let reports = Arc::clone(reports);
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            let mut words = line.split(' ');
            let (Some(kind), Some(id), Some(Ok(at))) =
                (words.next(), words.next(), words.next().map(str::parse))
            else {
                continue;
            };
            let kind = match kind {
                "taken" => Report::Taken,
                "done" => Report::Done,
                "run" => Report::Started,
                _ => Report::Failed,
            };
            let due = words.next().and_then(|due| due.parse().ok()).unwrap_or(0);
            reports
                .lock()
                .unwrap()
                .push((run, kind, id.to_owned(), at, due));
        }
    });
    (child, reader)
}

/// What the kills cost, from the runs' reports.
struct KillCosts {
    /// The most deliveries a killed run had taken and not finished.
    most_in_flight: usize,
    /// Each delivery applied again after a kill although the killed run had delivered it and
    /// finished it (written its step) before, with how long before (ms).
    again: Vec<(String, u128)>,
    /// For each delivery in flight at a kill and taken again by another run, how long after the
    /// kill (ms): a delivery to the receiver while it is down may have been moved past its
    /// pause meanwhile, with the rest of its backlog.
    taken_again_after: Vec<u128>,
    /// For each kill, how long after it the restarted run took back its deliveries (ms).
    taken_back_after: Vec<u128>,
}

fn kill_costs(
    reports: &[(usize, Report, String, u128, u128)],
    kills: &[(usize, u128, usize)],
    receipts_200: &BTreeMap<String, Vec<u128>>,
) -> KillCosts {
    let mut most_in_flight = 0;
    let mut again = Vec::new();
    let mut taken_again_after = Vec::new();
    let mut taken_back_after = Vec::new();
    for &(run, killed_at, restart) in kills {
        let restarted = reports
            .iter()
            .find(|(r, report, ..)| *r == restart && *report == Report::Started)
            .map(|(.., at, _)| at.saturating_sub(killed_at));
        taken_back_after.extend(restarted);
        // Each delivery's last report before the kill: taken and not finished (with the due
        // time of the step taken), or finished.
        let mut in_flight: BTreeMap<&str, Option<u128>> = BTreeMap::new();
        let mut finished: BTreeMap<&str, u128> = BTreeMap::new();
        for (r, report, id, at, due) in reports {
            if *r != run || *at > killed_at {
                continue;
            }
            in_flight.insert(id, (*report == Report::Taken).then_some(*due));
            if *report == Report::Done {
                finished.insert(id, *at);
            }
        }
        most_in_flight = most_in_flight.max(in_flight.values().flatten().count());
        for (id, step) in in_flight.iter().filter_map(|(id, due)| Some((id, (*due)?))) {
            // The same step taken by another run (a step stored again is due later).
            let next_take = reports
                .iter()
                .filter(|(r, report, other, at, due)| {
                    *r != run
                        && *report == Report::Taken
                        && other == id
                        && *due == step
                        && *at > killed_at
                })
                .map(|(.., at, _)| *at)
                .min();
            taken_again_after.extend(next_take.map(|at| at - killed_at));
        }
        for (id, done_at) in finished {
            let times = receipts_200.get(id).map_or(&[][..], Vec::as_slice);
            let delivered_by_this_run = times.first().is_some_and(|first| *first <= done_at);
            let again_after_kill = times.iter().skip(1).any(|at| *at > killed_at);
            if delivered_by_this_run && again_after_kill && in_flight[id].is_none() {
                again.push((id.to_owned(), killed_at - done_at));
            }
        }
    }
    KillCosts {
        most_in_flight,
        again,
        taken_again_after,
        taken_back_after,
    }
}

/// A small seeded generator, so that the kills' times and targets repeat run to run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The test on `engine`, whose queues `outbox` opened (empty).
pub async fn no_delivery_is_lost_when_workers_are_killed<Q, D>(
    engine: demo::durable::Engine,
    outbox: ApalisOutbox<Q, D>,
) where
    ApalisOutbox<Q, D>: Outbox<Error = EngineError>,
    D: DeadLetterQueue,
{
    let down_for = Duration::from_secs_f64(30.0 * SECONDS_PER_HOUR);
    let start = Instant::now();
    let arrivals: Arrivals = Arc::default();
    let up = TestServer::start(receiver(&arrivals, move || {
        if start.elapsed() < down_for {
            503
        } else {
            200
        }
    }))
    .await;
    let gone = TestServer::start(receiver(&arrivals, || 410)).await;
    let never = TestServer::start(receiver(&arrivals, || 503)).await;

    let rules = RecordRules::new().id_header(HeaderName::from_static(demo::durable::ID_HEADER));
    let mut expected_dead = BTreeSet::new();
    let targets = [
        (&up, "up", UP),
        (&gone, "gone", GONE),
        (&never, "never", NEVER),
    ];
    for (server, name, count) in targets {
        for n in 0..count {
            let id = format!("{name}_{n}");
            let request = http::Request::post(server.uri("/hook"))
                .body(Bytes::from(format!("{{\"n\":{n}}}")))
                .unwrap();
            outbox
                .store(rules.record(id.clone(), request).unwrap())
                .await
                .unwrap();
            if name != "up" {
                expected_dead.insert(id);
            }
        }
    }

    // One poison record: a stored form of another shape (a field a newer build changed). It
    // reads back as an unreadable record; the worker that takes it dead-letters it, keeping the
    // stored form, and goes on (the liveness check below sees every worker).
    let template = rules
        .record(
            POISON,
            http::Request::post(up.uri("/hook"))
                .body(Bytes::new())
                .unwrap(),
        )
        .unwrap();
    let mut form = serde_json::to_value(&template).unwrap();
    form["headers"] = serde_json::json!({ "renamed": true });
    let poison: Delivery = serde_json::from_value(form).unwrap();
    assert!(poison.stored_form().is_some());
    outbox.store(poison).await.unwrap();
    expected_dead.insert(POISON.to_owned());

    let names: Vec<String> = (0..WORKERS).map(|n| format!("worker-{n}")).collect();
    let reports: Reports = Arc::default();
    let mut runs: Vec<usize> = (0..WORKERS).collect();
    let mut readers = Vec::new();
    let mut workers: Vec<Child> = names
        .iter()
        .enumerate()
        .map(|(run, name)| {
            let (worker, reader) = spawn_worker(&engine, name, run, &reports);
            readers.push(reader);
            worker
        })
        .collect();
    // Each kill: the run killed, when, and the run that restarts it.
    let mut kills: Vec<(usize, u128, usize)> = Vec::new();
    // A worker that exited by itself (a refused start under its name, an engine error) would
    // leave the test to the others: every worker started must still be running when it is
    // killed or stopped.
    let mut exited = Vec::new();
    let mut check_alive = |workers: &mut [Child], when: &str| {
        for (n, worker) in workers.iter_mut().enumerate() {
            if let Ok(Some(status)) = worker.try_wait() {
                exited.push(format!("{} {status} {when}", names[n]));
            }
        }
    };
    let mut rng = Lcg(0x5eed);
    for kill in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(200 + rng.below(500))).await;
        check_alive(&mut workers, &format!("before kill {kill}"));
        let victim = rng.below(WORKERS as u64) as usize;
        let killed_at = demo::durable::unix_ms(SystemTime::now());
        kills.push((runs[victim], killed_at, WORKERS + kill));
        workers[victim].kill().unwrap(); // SIGKILL
        workers[victim].wait().unwrap();
        // Restarted at once under its name, as a supervisor does.
        runs[victim] = WORKERS + kill;
        let (worker, reader) = spawn_worker(&engine, &names[victim], runs[victim], &reports);
        workers[victim] = worker;
        readers.push(reader);
    }

    let delivered = |arrivals: &[(String, SystemTime, u16)]| -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for (id, _, status) in arrivals {
            if *status == 200 {
                *counts.entry(id.clone()).or_insert(0) += 1;
            }
        }
        counts
    };
    let mut letters = Vec::new();
    for _ in 0..900 {
        letters = dead_letters(outbox.dead()).await.unwrap();
        let dead: BTreeSet<&str> = letters.iter().map(|l| l.delivery.id()).collect();
        if delivered(&arrivals.lock().unwrap()).len() == UP && dead.len() == expected_dead.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed();
    check_alive(&mut workers, "at the end");
    assert!(
        exited.is_empty(),
        "workers that exited by themselves: {exited:?}"
    );
    for mut worker in workers {
        drop(worker.stdin.take());
        let _ = worker.wait();
    }
    // Every run has ended: each reader has read its run's last line.
    for reader in readers {
        reader.join().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let arrivals = arrivals.lock().unwrap().clone();
    let receipts = delivered(&arrivals);

    // Nothing lost: every delivery was delivered or is in the dead-letter queue.
    let dead: BTreeSet<String> = letters.iter().map(|l| l.delivery.id().to_owned()).collect();
    let lost: Vec<String> = (0..UP)
        .map(|n| format!("up_{n}"))
        .filter(|id| !receipts.contains_key(id))
        .chain(
            expected_dead
                .iter()
                .filter(|id| !dead.contains(*id))
                .cloned(),
        )
        .collect();
    // The dead-letter queue holds exactly the 410s and the deliveries whose schedule ran out,
    // each once.
    assert_eq!(dead, expected_dead, "dead letters");
    assert_eq!(letters.len(), dead.len(), "a delivery dead-lettered twice");
    for letter in &letters {
        let id = letter.delivery.id();
        if id == POISON {
            assert_eq!(letter.reason, DeadReason::Unreadable);
            assert!(
                letter.delivery.stored_form().is_some(),
                "the stored form kept"
            );
        } else if id.starts_with("gone") {
            assert!(
                matches!(
                    letter.reason,
                    DeadReason::Gone | DeadReason::EndpointDisabled(_)
                ),
                "{id}: {:?}",
                letter.reason
            );
        } else {
            assert_eq!(letter.reason, DeadReason::ScheduleExhausted, "{id}");
        }
    }
    let started_at = SystemTime::now() - start.elapsed();
    let mut dead_after: Vec<f64> = letters
        .iter()
        .map(|l| {
            l.dead_at()
                .duration_since(started_at)
                .unwrap_or_default()
                .as_secs_f64()
        })
        .collect();
    dead_after.sort_by(f64::total_cmp);
    eprintln!(
        "dead-lettered after (s): first {:.1}, median {:.1}, last {:.1}",
        dead_after[0],
        dead_after[dead_after.len() / 2],
        dead_after[dead_after.len() - 1]
    );
    let twice = receipts.values().filter(|count| **count > 1).count();
    let mut receipts_200: BTreeMap<String, Vec<u128>> = BTreeMap::new();
    for (id, at, status) in &arrivals {
        if *status == 200 {
            receipts_200
                .entry(id.clone())
                .or_default()
                .push(demo::durable::unix_ms(*at));
        }
    }
    let KillCosts {
        most_in_flight,
        again,
        mut taken_again_after,
        taken_back_after,
    } = kill_costs(&reports.lock().unwrap(), &kills, &receipts_200);
    taken_again_after.sort_unstable();
    let median_take_again = taken_again_after
        .get(taken_again_after.len() / 2)
        .copied()
        .unwrap_or(0);
    let slowest_take_again = taken_again_after.last().copied().unwrap_or(0);
    let slowest_take_back = taken_back_after.iter().copied().max().unwrap_or(0);
    let stale: Vec<&(String, u128)> = again
        .iter()
        .filter(|(_, before)| *before > HEARTBEAT.as_millis())
        .collect();

    // Never early: consecutive attempts of a delivery at least 80 % of the next slot's delay
    // apart. A pair closer than that is a worker's step re-run after a kill.
    let schedule = demo::durable::schedule(SECONDS_PER_HOUR);
    let mut by_id: BTreeMap<&str, Vec<SystemTime>> = BTreeMap::new();
    for (id, at, _) in &arrivals {
        by_id.entry(id.as_str()).or_default().push(*at);
    }
    let mut early = 0;
    for times in by_id.values() {
        for (slot, pair) in times.windows(2).enumerate() {
            let delay = schedule.delay(slot as u32 + 1).unwrap_or_default();
            if pair[1].duration_since(pair[0]).unwrap_or_default() < delay.mul_f64(0.8) {
                early += 1;
            }
        }
    }
    let up_start = SystemTime::now() - start.elapsed() + down_for;
    let to_up = |id: &str| id.starts_with("up_");
    let while_down = arrivals
        .iter()
        .filter(|(id, at, _)| to_up(id) && *at < up_start)
        .count();
    let last_up = arrivals
        .iter()
        .filter(|(id, _, status)| to_up(id) && *status == 200)
        .map(|(_, at, _)| at.duration_since(up_start).unwrap_or_default())
        .max()
        .unwrap_or_default();
    eprintln!(
        "durable crash test on {engine:?}: {} deliveries, {WORKERS} workers, {KILLS} kills, {:.1} s\n\
         lost {}, applied twice {twice}, attempts closer than their slot {early}, dead letters {} ({} gone, {} ran out)\n\
         in flight at a kill at most {most_in_flight}; applied again although finished before the kill: {} (at most {} ms before), over a heartbeat before: {}\n\
         a killed run's deliveries taken back by its restart after at most {slowest_take_back} ms ({} restarts);\n\
         in flight at a kill and taken again: {} (median {median_take_again} ms after the kill, at most {slowest_take_again} ms)\n\
         to the receiver down for {:.1} s: {while_down} attempts while down for {UP} deliveries, the last delivered {:.1} s after its return",
        UP + GONE + NEVER,
        elapsed.as_secs_f64(),
        lost.len(),
        letters.len(),
        letters.iter().filter(|l| l.delivery.id().starts_with("gone")).count(),
        letters.iter().filter(|l| l.delivery.id().starts_with("never")).count(),
        again.len(),
        again.iter().map(|(_, before)| *before).max().unwrap_or(0),
        stale.len(),
        taken_back_after.len(),
        taken_again_after.len(),
        down_for.as_secs_f64(),
        last_up.as_secs_f64(),
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    // A kill costs only what its run had in flight: at most `IN_HAND` deliveries taken and not
    // finished, and never one whose step was written (its acknowledgement is durable before
    // the worker takes more, and within a poll interval when idle) a heartbeat before.
    assert!(
        most_in_flight <= tower_http_retry_redelivery::IN_HAND,
        "{most_in_flight} deliveries in flight at a kill"
    );
    assert!(stale.is_empty(), "applied again after finishing: {stale:?}");
    // What a killed run had in flight is handed out again within two heartbeats: its restart
    // under the same name takes it back at once (`start_run`). (A restart killed again before
    // it reported its start is not counted.)
    assert!(
        !taken_back_after.is_empty(),
        "no restart reported its start"
    );
    assert!(
        slowest_take_back <= 2 * HEARTBEAT.as_millis(),
        "a killed run's deliveries taken back {slowest_take_back} ms after the kill"
    );
    // A kill lands mid-attempt on every delivery of the batch its worker took and had not
    // acknowledged: at most a batch each (10 on either engine), handed out again once its
    // heartbeats are missed.
    let in_flight = KILLS * 10;
    assert!(
        twice <= in_flight,
        "{twice} deliveries applied twice with {KILLS} kills of at most {in_flight} in flight"
    );
    assert!(
        early <= in_flight,
        "{early} attempts before their slot with {KILLS} kills of at most {in_flight} in flight"
    );
    // A restarted fleet sends the down receiver no burst. Each of the 24 worker runs learns the
    // outage anew: before its pacer knows, at most the batch its worker took (10, more than
    // the pacer's `outage_after` of 5) is in flight; then each of the 4 processes at a time
    // probes at most once a half probe interval (500 ms, jittered ±50 %) while it is down.
    // Without the pacer the 900 first attempts alone would reach it.
    let runs = WORKERS + KILLS;
    let half_probe_interval = 0.25; // seconds: `Pacing::default()`'s 500 ms, at its shortest
    let probes =
        WORKERS * (down_for.as_secs_f64() / half_probe_interval).floor() as usize + WORKERS;
    let no_burst = runs * 10 + probes;
    assert!(
        while_down <= no_burst,
        "{while_down} attempts reached the down receiver, more than {no_burst} ({runs} worker \
         runs' batches and {probes} probes)"
    );
}
