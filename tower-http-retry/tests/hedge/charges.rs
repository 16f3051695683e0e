//! What a hedge is charged: a token of the layer's cap, which every request fills by
//! `max_extra_load`, and one of the shared retry budget. A hedge refused by the budget gives its
//! cap token back.

use super::{answer, get, scripted};
use std::sync::Arc;
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::retry::TokenBucket;

const REQUESTS: u32 = 100;

#[tokio::test(start_paused = true)]
async fn the_cap_bounds_the_hedges_to_the_burst_plus_the_share_of_the_requests() {
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(10))
        .max_extra_load(0.05)
        .burst(2.0)
        .build()
        .unwrap();
    // Every copy is slow: every request outlives its delay and asks for a hedge.
    let (service, calls) = scripted(|_| answer(200, 100));
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    for i in 0..REQUESTS {
        let response = client.clone().oneshot(get(&format!("/{i}"))).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let stats = hedge.stats();
    assert_eq!(stats.armed, u64::from(REQUESTS));
    let bound = 2 + REQUESTS as u64 * 5 / 100;
    assert!(
        (3..=bound).contains(&stats.hedges),
        "{} hedges over {REQUESTS} requests, at most {bound}: {stats:?}",
        stats.hedges
    );
    assert_eq!(stats.hedges + stats.refused_by_cap, u64::from(REQUESTS));
    assert_eq!(u64::from(calls.sent()), u64::from(REQUESTS) + stats.hedges);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_refuses_the_hedge_and_the_cap_token_is_given_back() {
    // One retry's worth, never refilled.
    let budget = TokenBucket::builder()
        .capacity(1.0)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(10))
        .burst(2.0)
        .budget(Arc::new(budget))
        .build()
        .unwrap();
    let (service, calls) = scripted(|_| answer(200, 100));
    let client = ServiceBuilder::new().layer(hedge.clone()).service(service);
    for i in 0..5 {
        client.clone().oneshot(get(&format!("/{i}"))).await.unwrap();
    }
    let stats = hedge.stats();
    assert_eq!(stats.hedges, 1, "{stats:?}");
    assert_eq!(stats.refused_by_budget, 4, "{stats:?}");
    // Without the refund, the cap (2 tokens, 0.05 per request) would be empty by the third.
    assert_eq!(stats.refused_by_cap, 0, "{stats:?}");
    assert_eq!(calls.sent(), 6);
}
