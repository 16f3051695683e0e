//! The delay read from the endpoint's latencies: none until a window holds `min_samples`, then
//! their `1 - max_extra_load` quantile; and the pause of a brownout (nearly every request
//! outlives its delay), which ends with the window, after which the delay is the slow latency.

use super::{answer, get, scripted, Script};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;

#[tokio::test(start_paused = true)]
async fn no_hedge_before_the_window_holds_enough_latencies_then_one_at_the_quantile() {
    let hedge = HedgeLayer::builder()
        .min_samples(20)
        .max_extra_load(0.05)
        .build()
        .unwrap();
    // Calls 19 and 20 stall: the 20th request (call 19) before the sketch has 20 latencies,
    // the 21st (call 20) after; call 21 is the 21st request's hedge.
    let (service, calls) = scripted(|n| match n {
        19 | 20 => answer(200, 5_000),
        _ => answer(200, 10),
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    for i in 0..20 {
        client.clone().oneshot(get(&format!("/{i}"))).await.unwrap();
    }
    assert_eq!(calls.sent(), 20, "the stalled 20th request is not hedged");
    assert_eq!(hedge.stats().armed, 0);

    let started = Instant::now();
    let response = client.clone().oneshot(get("/20")).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.body(), "copy 21", "the hedge answered");
    // The 95th percentile of 19 × 10 ms and one 5 s is 10 ms (to the sketch's 1 %), and the
    // hedge takes 10 ms.
    assert!(
        elapsed >= Duration::from_millis(20) && elapsed <= Duration::from_millis(21),
        "{elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_brownout_pauses_hedging_until_the_window_ends_then_the_delay_follows_it() {
    let window = Duration::from_secs(30);
    let hedge = HedgeLayer::builder()
        .window(window)
        .min_samples(20)
        .max_extra_load(0.05)
        .burst(10.0)
        .build()
        .unwrap();
    let slow = Arc::new(AtomicBool::new(false));
    let brownout = Arc::clone(&slow);
    let (service, _) = scripted(move |_| {
        let after = if brownout.load(Ordering::SeqCst) {
            210
        } else {
            10
        };
        Script {
            status: 200,
            after: Duration::from_millis(after),
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let send = |path: String| client.clone().oneshot(get(&path));
    // A steady stream for longer than a window: the delay is read from a full window (10 ms),
    // and stays so until the window ends.
    for i in 0..40 {
        send(format!("/warm/{i}")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(hedge.stats().hedges, 0, "a healthy endpoint is not hedged");

    // Every request now takes 210 ms, far past the 10 ms delay: a brownout, not a tail.
    slow.store(true, Ordering::SeqCst);
    let began = Instant::now();
    let mut sent = 0;
    while hedge.stats().pauses == 0 {
        assert!(sent < 100, "no pause after {sent} slow requests");
        send(format!("/slow/{sent}")).await.unwrap();
        sent += 1;
    }
    let hedges_at_pause = hedge.stats().hedges;
    assert!(began.elapsed() < window, "paused within one window");
    assert!(
        hedges_at_pause <= 10 + sent / 20,
        "{hedges_at_pause} hedges in {sent}"
    );

    // Paused until the window ends, and after it the delay is read from the slow window.
    for i in 0..300 {
        send(format!("/after/{i}")).await.unwrap();
    }
    let stats = hedge.stats();
    assert_eq!(stats.pauses, 1, "{stats:?}");
    assert_eq!(
        stats.hedges, hedges_at_pause,
        "no hedge after the pause: {stats:?}"
    );
    let slow_requests = (sent + 300) as f64;
    assert!(stats.hedges as f64 <= 0.05 * slow_requests, "{stats:?}");
}
