//! Which copy answers: the first classified success, or the first permanent answer; a fast
//! transient failure never beats a slow success. The losers' futures are dropped as the winner
//! answers.

use super::{answer, get, scripted};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::report::HedgeReport;

fn fixed(delay_ms: u64) -> HedgeLayer {
    HedgeLayer::builder()
        .delay(Duration::from_millis(delay_ms))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_stalled_first_copy_is_hedged_and_cancelled_when_the_hedge_answers() {
    let hedge = fixed(20);
    let (service, calls) = scripted(|n| {
        if n == 0 {
            answer(200, 5_000)
        } else {
            answer(200, 10)
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/a")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(30));
    assert_eq!(response.body(), "copy 1");
    let report = HedgeReport::of(&response).copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 1));
    assert_eq!(calls.sent(), 2);
    assert_eq!(calls.alive(), 0, "the stalled copy's future is dropped");
    let stats = hedge.stats();
    assert_eq!(
        (
            stats.requests,
            stats.armed,
            stats.hedges,
            stats.won_by_hedge
        ),
        (1, 1, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_fast_503_from_the_hedge_never_beats_the_slow_200() {
    let hedge = fixed(10);
    let (service, calls) = scripted(|n| {
        if n == 0 {
            answer(200, 100)
        } else {
            answer(503, 1)
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/b")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let report = HedgeReport::of(&response).copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 0));
    assert_eq!(calls.sent(), 2);
    assert_eq!(hedge.stats().won_by_hedge, 0);
}

#[tokio::test(start_paused = true)]
async fn when_every_copy_fails_transiently_the_first_failure_is_returned_after_the_last() {
    let hedge = fixed(10);
    let (service, _) = scripted(|n| {
        if n == 0 {
            answer(503, 50)
        } else {
            answer(502, 60)
        }
    });
    let client = ServiceBuilder::new().layer(hedge).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/c")).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(started.elapsed(), Duration::from_millis(70));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_failure_returned_when_every_copy_fails_is_reported_but_is_no_win() {
    let hedge = fixed(10);
    let (service, _) = scripted(|n| {
        if n == 0 {
            answer(503, 60)
        } else {
            answer(502, 5)
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/c2")).await.unwrap();
    assert_eq!(
        response.status(),
        502,
        "the first failure held is the hedge's"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(60));
    let report = HedgeReport::of(&response).copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 1));
    let stats = hedge.stats();
    assert_eq!((stats.hedges, stats.won_by_hedge), (1, 0), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_answer_ends_both_copies() {
    let hedge = fixed(10);
    let (service, calls) = scripted(|n| {
        if n == 0 {
            answer(200, 5_000)
        } else {
            answer(404, 5)
        }
    });
    let client = ServiceBuilder::new().layer(hedge).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/d")).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(started.elapsed(), Duration::from_millis(15));
    assert_eq!(calls.alive(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fast_failure_of_the_first_copy_before_the_delay_is_returned_without_a_hedge() {
    let hedge = fixed(50);
    let (service, calls) = scripted(|_| answer(503, 5));
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let response = client.oneshot(get("/e")).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(calls.sent(), 1);
    assert_eq!(HedgeReport::of(&response), None);
    assert_eq!(hedge.stats().hedges, 0);
}

#[tokio::test(start_paused = true)]
async fn up_to_max_hedges_go_out_each_after_its_own_delay() {
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(10))
        .max_hedges(3)
        .build()
        .unwrap();
    let (service, calls) = scripted(|n| {
        if n < 3 {
            answer(200, 5_000)
        } else {
            answer(200, 1)
        }
    });
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/f")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(31));
    let report = HedgeReport::of(&response).copied().unwrap();
    assert_eq!((report.copies, report.winner), (4, 3));
    assert_eq!((calls.sent(), calls.alive()), (4, 0));
    assert_eq!(hedge.stats().hedges, 3);
}

#[tokio::test(start_paused = true)]
async fn under_the_retry_layer_a_request_whose_copies_all_failed_is_retried() {
    let retry = tower_http_retry::RetryLayer::builder()
        .max_attempts(2)
        .build()
        .unwrap();
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(10))
        .retry_layer(&retry)
        .build()
        .unwrap();
    let (service, calls) = scripted(|n| {
        if n < 2 {
            answer(503, 20)
        } else {
            answer(200, 1)
        }
    });
    let client = ServiceBuilder::new()
        .layer(retry.clone())
        .layer(hedge.clone())
        .service(service);
    let response = client.oneshot(get("/g")).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = tower_http_retry::RetryReport::of(&response);
    assert_eq!(report.attempts, 2);
    assert_eq!(
        calls.sent(),
        3,
        "two copies of the first attempt, one of the retry"
    );
    // The budget's stats count what the hedge took from it beside what the retry took.
    let stats = retry.stats();
    assert_eq!((hedge.stats().hedges, stats.retries), (1, 1));
    assert_eq!(stats.budget_granted - stats.budget_refunded, 2);
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_sends_every_copy_at_once() {
    let hedge = HedgeLayer::builder()
        .delay(Duration::ZERO)
        .max_hedges(2)
        .build()
        .unwrap();
    let (service, calls) = scripted(|n| answer(200, 30 - 10 * u64::from(n)));
    let client = ServiceBuilder::new().layer(hedge).service(service);
    let started = Instant::now();
    let response = client.oneshot(get("/z")).await.unwrap();
    assert_eq!(response.body(), "copy 2", "the last copy is the fastest");
    assert_eq!(started.elapsed(), Duration::from_millis(10));
    assert_eq!(calls.sent(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_losers_are_dropped_when_the_winner_answers_not_when_its_future_is() {
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(10))
        .max_hedges(2)
        .build()
        .unwrap();
    // The first two copies stall; the third answers after 1 ms.
    let (service, calls) = scripted(|n| {
        if n < 2 {
            answer(200, 5_000)
        } else {
            answer(200, 1)
        }
    });
    let mut client = ServiceBuilder::new().layer(hedge).service(service);
    let future = client.ready().await.unwrap().call(get("/g"));
    tokio::pin!(future);
    let response = future.as_mut().await.unwrap();
    // The hedge future is still alive here: the two stalled copies went when the third
    // answered, not with it.
    assert_eq!(response.body(), "copy 2");
    assert_eq!((calls.sent(), calls.alive()), (3, 0));
}
