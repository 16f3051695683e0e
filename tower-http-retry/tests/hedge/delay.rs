//! The delay read from the endpoint's latencies: none until a window holds `min_samples`, then
//! their `1 - max_extra_load` quantile; and the pause of a brownout (nearly every request
//! outlives its delay), which ends with the window, after which the delay is the slow latency,
//! and hedging resumes at the healthy delay once the brownout is over; and a first copy beaten by
//! its hedge still counted in the latencies, so the delay holds.

use super::{answer, get, scripted, Reply};
use http::{Request, Response};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::report::HedgeReport;

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
async fn a_brownout_pauses_hedging_until_the_window_ends_and_hedging_resumes_once_it_is_over() {
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
    // A first copy of `/stall/..` takes 5 s; every other copy 10 ms, or 210 ms in the brownout.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let service = service_fn(move |request: Request<String>| {
        let path = request.uri().path().to_owned();
        let first = seen.lock().unwrap().insert(path.clone());
        let after = match (path.starts_with("/stall"), brownout.load(Ordering::SeqCst)) {
            (true, _) if first => 5_000,
            (_, true) => 210,
            _ => 10,
        };
        async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            Reply::Ok(Response::new(path))
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

    // The brownout ends: after two windows of healthy traffic, a stalled request is hedged
    // at the healthy delay again.
    slow.store(false, Ordering::SeqCst);
    for i in 0..70 {
        send(format!("/healthy/{i}")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let before = hedge.stats();
    let started = Instant::now();
    let response = send("/stall/0".to_owned()).await.unwrap();
    let elapsed = started.elapsed();
    let after = hedge.stats();
    assert_eq!(response.body(), "/stall/0");
    assert_eq!(after.hedges, before.hedges + 1, "{after:?}");
    assert_eq!(after.won_by_hedge, before.won_by_hedge + 1, "{after:?}");
    assert_eq!(after.pauses, 1, "{after:?}");
    // The delay is the healthy 10 ms (to the sketch's 1 %), and the hedge takes 10 ms.
    assert!(elapsed <= Duration::from_millis(25), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_first_copy_beaten_by_its_hedge_still_counts_so_the_delay_does_not_drift_down() {
    // A window of some 500 requests, five times the cycle below, so that each holds its spread.
    let window = Duration::from_secs(10);
    let hedge = HedgeLayer::builder()
        .window(window)
        .min_samples(20)
        .max_extra_load(0.05)
        .burst(50.0)
        .build()
        .unwrap();
    // Every tenth request is slow, in turn 60, 70, ..., 150 ms; the rest, and every hedge, take
    // 10 ms. The 95th percentile of the first copies is 100 ms. Were a beaten first copy left
    // out of the sketch, the slowest 4 % would vanish from it, the next window's delay would
    // fall to 60 ms, and then lower.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let service = service_fn(move |request: Request<String>| {
        let path = request.uri().path().to_owned();
        let first = seen.lock().unwrap().insert(path.clone());
        let slow: u64 = path.rsplit('/').next().unwrap().parse().unwrap();
        let after = if first && slow > 0 { slow } else { 10 };
        async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            Reply::Ok(Response::new(String::new()))
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let began = Instant::now();
    let mut wrongly_hedged = Vec::new();
    let mut i = 0u64;
    while began.elapsed() < window * 6 {
        let slow = if i % 10 == 5 {
            60 + 10 * (i % 100 / 10)
        } else {
            0
        };
        let response = client
            .clone()
            .oneshot(get(&format!("/{i}/{slow}")))
            .await
            .unwrap();
        // Past the first two windows the delay is read from a full one: a request faster than
        // 95 % of them is never hedged.
        if began.elapsed() > window * 2 && (1..=90).contains(&slow) {
            if let Some(report) = HedgeReport::of(&response) {
                wrongly_hedged.push((i, slow, *report));
            }
        }
        i += 1;
    }
    let stats = hedge.stats();
    assert!(
        wrongly_hedged.is_empty(),
        "{} requests of 60 to 90 ms hedged, the first {:?}: {stats:?}",
        wrongly_hedged.len(),
        &wrongly_hedged[..wrongly_hedged.len().min(5)]
    );
    // The requests of 110 ms and more (5 %) are hedged, those of 100 ms too when the delay is
    // read a little below them; the hedges of the 120 ms and slower ones (4 %) win. The burst
    // covers the difference from the 5 % cap, so the cap never refuses.
    assert_eq!(stats.refused_by_cap, 0, "{stats:?}");
    assert!(
        stats.won_by_hedge as f64 >= 0.035 * i as f64,
        "{stats:?} of {i}"
    );
    assert!(stats.hedges as f64 <= 0.061 * i as f64, "{stats:?} of {i}");
}

#[tokio::test(start_paused = true)]
async fn under_a_pacing_retry_layer_the_latencies_are_kept_in_its_view_of_the_endpoint() {
    use tower_http_retry::pacing::Pacing;
    use tower_http_retry::RetryLayer;

    let retry = RetryLayer::builder().pacing(Pacing::new()).build().unwrap();
    // A layer with a fixed delay reads no latencies: it leaves the pacer to the next one.
    let _fixed = HedgeLayer::builder()
        .delay(Duration::from_millis(5))
        .retry_layer(&retry)
        .build()
        .unwrap();
    let hedge = HedgeLayer::builder()
        .min_samples(20)
        .retry_layer(&retry)
        .build()
        .unwrap();
    let (service, calls) = scripted(|n| match n {
        20 => answer(200, 5_000),
        _ => answer(200, 10),
    });
    let client = ServiceBuilder::new()
        .layer(retry.clone())
        .layer(hedge.clone())
        .service(service);
    let authority = "api.internal".parse().unwrap();
    for i in 0..20 {
        client.clone().oneshot(get(&format!("/{i}"))).await.unwrap();
    }
    // One entry for the endpoint: the pacer's, which reads the hedger's delay beside its own
    // state.
    let stats = retry
        .pacing_stats(Some(&authority))
        .expect("the pacer's endpoint");
    let delay = stats.hedge_delay.expect("20 latencies are enough");
    assert!(
        (Duration::from_millis(10)..=Duration::from_millis(11)).contains(&delay),
        "{delay:?}"
    );
    assert_eq!(hedge.endpoints(), 1);
    // And the hedger reads its delay from there: the stalled 21st request is hedged at it.
    let started = Instant::now();
    let response = client.clone().oneshot(get("/20")).await.unwrap();
    assert_eq!(response.body(), "copy 21", "the hedge answered");
    assert!(
        started.elapsed() <= Duration::from_millis(21),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(calls.sent(), 22);
    // A second hedging layer with rules of its own keeps its own sketches.
    let other = HedgeLayer::builder()
        .window(Duration::from_secs(5))
        .retry_layer(&retry)
        .build()
        .unwrap();
    let (service, _) = scripted(|_| answer(200, 30));
    let second = ServiceBuilder::new()
        .layer(retry.clone())
        .layer(other.clone())
        .service(service);
    let elsewhere = Request::get("http://other.internal/")
        .body(String::new())
        .unwrap();
    second.oneshot(elsewhere).await.unwrap();
    assert_eq!((hedge.endpoints(), other.endpoints()), (1, 1));
    let elsewhere = "other.internal".parse().unwrap();
    let stats = retry.pacing_stats(Some(&elsewhere));
    assert_eq!(stats.and_then(|stats| stats.hedge_delay), None);
}
