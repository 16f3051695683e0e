//! Webhook delivery through an outage that ends: the crate's main demo.
//!
//! ```text
//! cargo run --example webhook_delivery
//! ```
//!
//! Needs nothing else: it starts its own receiver on `127.0.0.1` and delivers 300 webhooks to it,
//! one every 15 ms, each a POST with an `Idempotency-Key`, through `RetryLayer::bulk()` (its
//! backoff shortened to 50–500 ms; pacing on), a limit of 16 attempts on the wire and a 250 ms
//! timeout per attempt. The receiver is down from 1 s to 3 s (every request answered 503), and a
//! little flaky outside that window: 500s, writes that commit and then answer 500 or too late,
//! and a 400 for each malformed payload. The scenario lives in `demo/src/webhook.rs` (the
//! `demo` workspace crate), shared with the test that checks its books add up
//! (`cargo test --test webhook`).
//!
//! It prints what the receiver saw each second; what became of the webhooks the outage caught
//! (delivered how long after its end, or dead-lettered by [`StopReason`]); the fate of every
//! webhook, from its [`RetryReport`](tower_http_retry::RetryReport); and the pacer's state of
//! the receiver's endpoint. The run takes five to six seconds. The counts vary a little between
//! runs: the outage is a window of wall time, and the probes are jittered.

use demo::webhook as scenario;
use scenario::{Delivery, ARRIVAL, BACKOFF, DELIVERIES, ON_THE_WIRE, OUTAGE, PER_ATTEMPT};
use std::fmt::Display;
use std::time::{Duration, Instant};
use tower_http_retry::StopReason;

#[tokio::main]
async fn main() {
    println!(
        "Delivering {DELIVERIES} webhooks to a receiver on 127.0.0.1, one every {}, through \
         RetryLayer::bulk() with pacing (backoff {}-{}): {ON_THE_WIRE} attempts on the wire, {} \
         per attempt. The receiver is down (503) from {} to {}.",
        ms(ARRIVAL),
        ms(BACKOFF.start),
        ms(BACKOFF.end),
        ms(PER_ATTEMPT),
        secs(OUTAGE.start),
        secs(OUTAGE.end),
    );
    let started = Instant::now();
    let run = scenario::run(scenario::SEED).await;
    let elapsed = started.elapsed();
    let books = &run.books;

    println!("\nReceiver, requests per second");
    let last = books.arrivals.iter().max().map_or(0, Duration::as_secs);
    for second in 0..=last {
        let window = Duration::from_secs(second)..Duration::from_secs(second + 1);
        let seen: Vec<_> = books
            .arrivals
            .iter()
            .filter(|at| window.contains(at))
            .collect();
        let down = seen.iter().filter(|at| OUTAGE.contains(at)).count();
        let note = match down {
            0 => String::new(),
            _ if down == seen.len() => "down".to_owned(),
            _ => format!("{down} while down"),
        };
        row(format!("{second}-{} s", second + 1), seen.len(), note);
    }

    println!("\nOutage, {} to {}", secs(OUTAGE.start), secs(OUTAGE.end));
    let (caught, others): (Vec<&Delivery>, Vec<&Delivery>) =
        run.deliveries.iter().partition(|d| run.caught(d));
    row(
        "webhooks caught",
        caught.len(),
        "due while down, or sent then",
    );
    let sent = caught
        .iter()
        .filter(|d| books.down.contains_key(&scenario::key(d.id)))
        .count();
    row("  sent while down", sent, "answered 503 at least once");
    row(
        "  held back",
        caught.len() - sent,
        "due while down: the first attempt waited in the pacer's queue",
    );
    let (n, after_end) = delivered(&caught, |d| d.done.saturating_sub(OUTAGE.end));
    row("  delivered", n, format!("after the end: {after_end}"));
    dead_letters("  dead-lettered", &caught);

    println!("\nThe other webhooks");
    let (before, after): (Vec<&Delivery>, Vec<&Delivery>) =
        others.into_iter().partition(|d| d.due < OUTAGE.start);
    for (label, group) in [("due before it", before), ("due after it", after)] {
        let (_, took) = delivered(&group, |d| d.done - d.due);
        row(
            label,
            group.len(),
            format!("delivered after falling due: {took}"),
        );
        dead_letters("  dead-lettered", &group);
    }
    let stats = &run.stats;
    let per_webhook = stats.attempts as f64 / run.deliveries.len() as f64;
    let attempts = format!("{per_webhook:.2} per webhook, at most {}", run.max_attempts);
    row("attempts, all webhooks", stats.attempts, attempts);

    if let Some(pacing) = run.pacing {
        println!("\nPacer, the receiver's endpoint at the end");
        let rate = format!("releasing {:.0}/s, {} waiting", pacing.rate, pacing.waiting);
        row("mode", format!("{:?}", pacing.mode), rate);
        row("probes", pacing.probes, "requests let through while down");
        row(
            "deferred",
            pacing.deferred,
            "handed back (no deadline here)",
        );
    }

    println!("\nReceiver's books (deduplicates by Idempotency-Key)");
    row("requests received", books.requests, "");
    row("webhooks applied", books.applied.len(), "");
    row(
        "repeats recognised",
        books.repeats,
        "each one applied twice without the key",
    );

    println!("\nfinished in {:.1} s", elapsed.as_secs_f64());
}

/// Dead-lettered webhooks among `deliveries`, by why the layer stopped.
fn dead_letters(label: &str, deliveries: &[&Delivery]) {
    let dead: Vec<_> = deliveries.iter().filter(|d| !d.delivered).collect();
    let mut reasons = Vec::new();
    for reason in StopReason::ALL {
        let n = dead.iter().filter(|d| d.report.stop == reason).count();
        if n > 0 {
            reasons.push(format!("{reason} {n} ({})", dead_letter_note(reason)));
        }
    }
    row(label, dead.len(), reasons.join(", "));
}

fn dead_letter_note(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Permanent => "400: malformed payload",
        StopReason::AttemptsExhausted => "still failing after the last attempt",
        StopReason::Deferred => "the pacer's queue was longer than the deadline",
        _ => "",
    }
}

/// How many of `deliveries` were delivered, and the p50, p99 and max of `of` over them.
fn delivered(deliveries: &[&Delivery], of: impl Fn(&Delivery) -> Duration) -> (usize, String) {
    let mut times: Vec<Duration> = deliveries
        .iter()
        .filter(|d| d.delivered)
        .map(|d| of(d))
        .collect();
    times.sort();
    // Nearest rank.
    let quantile = |q: f64| {
        let rank = (q * times.len() as f64).ceil() as usize;
        times
            .get(rank.saturating_sub(1))
            .map_or(0.0, Duration::as_secs_f64)
    };
    let (p50, p99, max) = (quantile(0.5), quantile(0.99), quantile(1.0));
    (
        times.len(),
        format!("p50 {p50:.2} s, p99 {p99:.2} s, max {max:.2} s"),
    )
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn row(label: impl Display, value: impl Display, note: impl Display) {
    println!("  {:<24}{value:>8}  {note}", label.to_string());
}
