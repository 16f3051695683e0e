//! The books of the webhook demo (`cargo run --example webhook_delivery`) add up: the same
//! scenario, 300 webhooks through the retry layer to a flaky receiver on `127.0.0.1:0`, run once
//! and checked from the sender's reports, the layer's counters and the receiver's books.
//!
//! Real sockets mean real time (the run takes about two seconds, most of it `Retry-After`
//! sleeps). The jitter is seeded, but which delivery gets which random stream and which retries
//! the shared budget refuses depend on scheduling, so every check holds for any interleaving.

mod scenario;

use scenario::{Run, DELIVERIES, MAX_ATTEMPTS, RETRY_AFTER_SECS, SEED};
use std::sync::OnceLock;
use std::time::Duration;
use tower_http_retry::StopReason;

/// The one run every test reads (each test would otherwise repeat two seconds of deliveries).
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
        assert!(d.report.attempts <= MAX_ATTEMPTS, "{:?}", d.report);
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

#[test]
fn budget_tokens_granted_minus_refunded_equal_retries_sent() {
    let run = run();
    let stats = run.stats.clone();
    let retries: u64 = run
        .deliveries
        .iter()
        .map(|d| u64::from(d.report.attempts - 1))
        .sum();
    assert_eq!(stats.retries, retries);
    assert_eq!(stats.retries, stats.attempts - stats.requests);
    assert_eq!(
        stats.budget_granted - stats.budget_refunded,
        stats.retries,
        "{stats:?}"
    );
}

#[test]
fn only_malformed_payloads_stop_as_permanent_after_one_attempt() {
    let run = run();
    for d in &run.deliveries {
        let permanent = d.report.stop == StopReason::Permanent;
        // A retry that lost its body or its key would be answered 400 and stop here too.
        assert_eq!(permanent, scenario::malformed(d.id), "{d:?}");
        if permanent {
            assert_eq!(d.report.attempts, 1, "{d:?}");
        }
    }
}

#[test]
fn retry_after_hints_are_never_slept_short() {
    let hint = Duration::from_secs(RETRY_AFTER_SECS);
    let honoured: Vec<Duration> = run()
        .deliveries
        .iter()
        .flat_map(|d| d.report.retry_after_delays().map(|delay| delay.duration))
        .collect();
    assert!(
        !honoured.is_empty(),
        "the scenario sends 429s with Retry-After"
    );
    assert!(honoured.iter().all(|&slept| slept >= hint), "{honoured:?}");
}
