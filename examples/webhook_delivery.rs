//! Webhook delivery through a flaky receiver: the crate's main demo.
//!
//! ```text
//! cargo run --example webhook_delivery
//! ```
//!
//! Needs nothing else: it starts its own receiver on `127.0.0.1` and delivers 300 webhooks to it,
//! each a POST with an `Idempotency-Key`, through `RetryLayer`, a limit of 16 attempts on the
//! wire and a 250 ms timeout per attempt. The receiver answers 503s, 429s with `Retry-After: 1`,
//! commits writes and then answers 503 or too late, has an outage that fails every attempt of
//! 40 webhooks in a row, and rejects malformed payloads with a 400. The scenario lives in
//! `tests/webhook/scenario.rs`, shared with the test that checks its books add up
//! (`cargo test --test webhook`).
//!
//! It prints what became of every webhook (from its [`RetryReport`]): delivered, or dead-lettered
//! by [`StopReason`]; attempts per webhook; `Retry-After` hints honoured; retries the budget
//! refused; the outage; and what the receiver saw. The run takes about two seconds, most of it
//! `Retry-After` sleeps. The counts vary by a few between runs: which retries the shared budget
//! refuses depends on the order in which concurrent deliveries get there.

#[path = "../tests/webhook/scenario.rs"]
mod scenario;

use scenario::{Delivery, DELIVERIES, MAX_ATTEMPTS, ON_THE_WIRE, OUTAGE, PER_ATTEMPT, WORKERS};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::Instant;
use tower_http_retry::{RetryReport, StopReason};

#[tokio::main]
async fn main() {
    println!(
        "Delivering {DELIVERIES} webhooks to a flaky receiver on 127.0.0.1: {WORKERS} in flight, \
         {ON_THE_WIRE} attempts on the wire, {PER_ATTEMPT:?} per attempt, up to {MAX_ATTEMPTS} \
         attempts each."
    );
    let started = Instant::now();
    let run = scenario::run(scenario::SEED).await;
    let elapsed = started.elapsed();
    let stats = run.stats.clone();
    let all = &run.deliveries;
    let dead: Vec<&Delivery> = all.iter().filter(|d| !d.delivered).collect();
    let attempts: u32 = all.iter().map(|d| d.report.attempts).sum();

    println!("\nSender");
    let delivered = all.len() - dead.len();
    row("delivered", delivered, percent(delivered, all.len()));
    row("dead-lettered", dead.len(), "by why the layer stopped:");
    for reason in StopReason::ALL {
        let n = dead.iter().filter(|d| d.report.stop == reason).count();
        if n > 0 {
            row(format!("  {reason}"), n, dead_letter_note(reason));
        }
    }
    let per_webhook = f64::from(attempts) / all.len() as f64;
    row(
        "attempts",
        attempts,
        format!("{per_webhook:.2} per webhook"),
    );
    let mut by_attempts = BTreeMap::new();
    for d in all {
        *by_attempts.entry(d.report.attempts).or_insert(0) += 1;
    }
    for (n, count) in by_attempts {
        let plural = if n == 1 { "" } else { "s" };
        row(format!("  after {n} attempt{plural}"), count, "");
    }
    let honoured: usize = all
        .iter()
        .map(|d| d.report.retry_after_delays().count())
        .sum();
    let hints = format!(
        "of {} hints, {} clamped",
        stats.retry_after_seen, stats.retry_after_clamped
    );
    row("Retry-After honoured", honoured, hints);
    row("budget denials", stats.budget_denied, "retries refused");

    println!(
        "\nOutage (webhooks {}-{}: every attempt fails)",
        OUTAGE.start,
        OUTAGE.end - 1
    );
    let outage: Vec<&RetryReport> = all
        .iter()
        .filter(|d| OUTAGE.contains(&d.id))
        .map(|d| &d.report)
        .collect();
    let sent: u32 = outage.iter().map(|r| r.attempts).sum();
    let without_budget = format!("of {} without a budget", outage.len() as u32 * MAX_ATTEMPTS);
    row("attempts sent", sent, without_budget);
    for reason in StopReason::ALL {
        let n = outage.iter().filter(|r| r.stop == reason).count();
        if n > 0 {
            row(format!("  {reason}"), n, dead_letter_note(reason));
        }
    }

    println!("\nReceiver (deduplicates by Idempotency-Key)");
    let books = &run.books;
    row("requests received", books.requests, "");
    row("webhooks applied", books.applied.len(), "");
    row(
        "repeats recognised",
        books.repeats,
        "each one applied twice without the key",
    );
    let lost_answers = dead
        .iter()
        .filter(|d| books.applied.contains_key(&d.id))
        .count();
    row(
        "applied, dead-lettered",
        lost_answers,
        "the last answer was lost: redeliver with the same key",
    );

    println!("\nfinished in {:.1} s", elapsed.as_secs_f64());
}

fn dead_letter_note(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Permanent => "400: malformed payload",
        StopReason::AttemptsExhausted => "still failing after the last attempt",
        StopReason::BudgetEmpty => "the retry budget said no",
        _ => "",
    }
}

fn percent(part: usize, whole: usize) -> String {
    format!("{:.1} %", 100.0 * part as f64 / whole as f64)
}

fn row(label: impl Display, value: impl Display, note: impl Display) {
    println!("  {:<24}{value:>8}  {note}", label.to_string());
}
