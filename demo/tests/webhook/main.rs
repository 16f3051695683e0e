//! The books of the webhook demo (`cargo run --example webhook_delivery`) add up: the same
//! scenario, 300 webhooks through `RetryLayer::bulk()` to a flaky receiver on `127.0.0.1:0` that
//! is down for two seconds, run once and checked from the sender's reports, the layer's counters
//! and the receiver's books.
//!
//! Real sockets mean real time (the run takes about six seconds). The jitter is seeded, but the
//! outage is a window of wall time and which request the pacer lets through when depends on
//! scheduling, so every check holds for any interleaving.

use demo::webhook as scenario;
use scenario::{Run, BACKOFF, DELIVERIES, OUTAGE, PER_ATTEMPT, PROBE_INTERVAL, SEED};
use std::sync::OnceLock;
use std::time::Duration;
use tower_http_retry::report::DelaySource;
use tower_http_retry::StopReason;

/// The one run every test reads (each test would otherwise repeat six seconds of deliveries).
fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        tokio::runtime::Runtime::new()
            .expect("a tokio runtime")
            .block_on(scenario::run(SEED))
    })
}

#[test]
fn each_webhook_is_applied_once_however_often_it_is_sent() {
    let books = &run().books;
    // Without repeats the check below would be empty: the scenario does resend applied webhooks.
    assert!(books.repeats > 0, "{books:?}");
    let twice: Vec<_> = books.applied.iter().filter(|(_, &n)| n != 1).collect();
    assert!(twice.is_empty(), "applied more than once: {twice:?}");
}

#[test]
fn every_delivered_webhook_was_applied() {
    let run = run();
    let missing: Vec<u32> = run
        .deliveries
        .iter()
        .filter(|d| d.delivered && !run.books.applied.contains_key(&d.id))
        .map(|d| d.id)
        .collect();
    assert!(missing.is_empty(), "delivered, never applied: {missing:?}");
}

#[test]
fn every_well_formed_webhook_is_delivered() {
    let run = run();
    let lost: Vec<_> = run
        .deliveries
        .iter()
        .filter(|d| !scenario::malformed(d.id) && !d.delivered)
        .collect();
    assert!(lost.is_empty(), "dead-lettered: {lost:?}");
    // The outage did catch webhooks: they were delivered too, not only the others.
    assert!(run.deliveries.iter().any(|d| run.caught(d)));
}

#[test]
fn receiver_sees_as_many_attempts_per_webhook_as_its_report_counts() {
    let run = run();
    for d in &run.deliveries {
        let received = run.books.received.get(&scenario::key(d.id)).copied();
        assert_eq!(
            received,
            Some(d.report.attempts),
            "webhook {}: {:?}",
            d.id,
            d.report
        );
        assert!(d.report.attempts <= run.max_attempts, "{:?}", d.report);
    }
    let stats = run.stats.clone();
    assert_eq!(stats.attempts, run.books.requests);
}

#[test]
fn counters_record_one_request_per_webhook_under_its_stop_reason() {
    let run = run();
    let stats = run.stats.clone();
    assert_eq!(stats.requests, u64::from(DELIVERIES));
    for reason in StopReason::ALL {
        let reports = run
            .deliveries
            .iter()
            .filter(|d| d.report.stop == reason)
            .count();
        assert_eq!(stats.stopped(reason), reports as u64, "{reason}");
    }
    for d in &run.deliveries {
        assert_eq!(d.delivered, d.report.stop == StopReason::Success, "{d:?}");
    }
}

/// With pacing, a retry either sleeps its backoff on a budget token (the receiver is up) or waits
/// in the pacer's queue without one (it is down; a retry whose backoff ends while it is down
/// waits there too, and its token goes back); a first attempt may wait in the queue too.
#[test]
fn each_retry_is_a_budgeted_backoff_or_a_release_from_the_queue() {
    let run = run();
    let stats = run.stats.clone();
    // Per retry (a delivery's waits after one attempt): whether it went through the queue.
    let retries: Vec<bool> = run
        .deliveries
        .iter()
        .flat_map(|d| {
            let mut after: Vec<u32> = d
                .report
                .delays
                .iter()
                .filter(|w| w.after_attempt > 0)
                .map(|w| w.after_attempt)
                .collect();
            after.dedup();
            after.into_iter().map(|attempt| {
                d.report
                    .delays
                    .iter()
                    .any(|w| w.after_attempt == attempt && w.source == DelaySource::Paced)
            })
        })
        .collect();
    let queued = retries.iter().filter(|queued| **queued).count() as u64;
    let budgeted = retries.len() as u64 - queued;
    // Both paths were taken, or one of the checks below would be empty.
    assert!(budgeted > 0 && queued > 0, "{stats:?}");
    assert_eq!(stats.retries, stats.attempts - stats.requests);
    assert_eq!(stats.retries, retries.len() as u64, "{stats:?}");
    assert_eq!(
        stats.budget_granted - stats.budget_refunded,
        budgeted,
        "{stats:?}"
    );
}

/// A malformed payload gets its 400 at the first attempt the receiver parses, and is not sent
/// again; attempts answered by the outage come before it.
#[test]
fn only_malformed_payloads_stop_as_permanent_at_their_first_parsed_attempt() {
    let run = run();
    for d in &run.deliveries {
        let permanent = d.report.stop == StopReason::Permanent;
        // A retry that lost its body or its key would be answered 400 and stop here too.
        assert_eq!(permanent, scenario::malformed(d.id), "{d:?}");
        if permanent {
            let down = run.books.down.get(&scenario::key(d.id)).copied();
            assert_eq!(d.report.attempts, down.unwrap_or(0) + 1, "{d:?}");
        }
    }
}

/// Once the outage is detected and the attempts already under way are over, only the pacer's
/// probes reach the receiver, whatever the number of webhooks waiting.
///
/// The first wave: the pacer marks the endpoint down after 5 congestion outcomes in a row, which
/// the outage gives within `PER_ATTEMPT` of its start (a webhook falls due every 15 ms and is
/// answered 503 at once; any attempt on the wire at the start is over by its timeout). Retries
/// already sleeping then still fire, within the backoff's cap, and may wait up to `PER_ATTEMPT`
/// more for a place on the wire. After that, every request is a probe, and the pacer lets probes
/// through at least `PROBE_INTERVAL / 2` apart (its jitter's lower bound; ~2 per second on
/// average), so a window of `w` sees at most `w / (PROBE_INTERVAL / 2) + 1`: 5 in the last second
/// of the outage. (The same layer without pacing sent 76 there in a run, and its webhooks caught
/// by the outage stopped with `BudgetEmpty`.)
#[test]
fn receiver_sees_at_most_the_probe_rate_while_down_after_the_first_wave() {
    let run = run();
    let settled = OUTAGE.start + PER_ATTEMPT + BACKOFF.end + PER_ATTEMPT;
    let window = settled..OUTAGE.end;
    let seen: Vec<Duration> = run
        .books
        .arrivals
        .iter()
        .copied()
        .filter(|at| window.contains(at))
        .collect();
    let gap = PROBE_INTERVAL / 2;
    let bound = (window.end - window.start).as_nanos() / gap.as_nanos() + 1;
    assert!(
        seen.len() as u128 <= bound,
        "{} requests in {window:?}, bound {bound}: {seen:?}",
        seen.len()
    );
    let pacing = run
        .pacing
        .expect("the receiver's endpoint has a pacing state");
    assert!(pacing.probes > 0, "{pacing:?}");
}
