//! The retry budget bounds the retries that reach a real server.

use super::support::{get, Reply, TestServer};
use super::{retry, send, with_timeout, GENEROUS};
use tokio::task::JoinSet;
use tower_http_retry::retry::TokenBucket;
use tower_http_retry::StopReason;

#[tokio::test]
async fn budget_bounds_retries_against_an_always_failing_server() {
    const REQUESTS: u32 = 50;
    const TOKENS: u32 = 5;
    let server = TestServer::start(|_| Reply::status(503)).await;
    let bucket = TokenBucket::builder()
        .capacity(f64::from(TOKENS))
        .refill_per_second(0.0)
        .build()
        .unwrap();
    let layer = retry().max_attempts(3).budget(bucket).build().unwrap();
    let client = with_timeout(&layer, GENEROUS);

    let mut requests = JoinSet::new();
    for i in 0..REQUESTS {
        let mut client = client.clone();
        let request = get(&server.uri("/"), &format!("r{i}"));
        requests.spawn(async move { send(&mut client, request).await.1 });
    }
    let reports = requests.join_all().await;

    // No success ever deposits and nothing refills, so exactly the 5 tokens become retries;
    // without the budget the server would see 150 requests.
    assert_eq!(server.total_hits(), REQUESTS + TOKENS);
    let stats = layer.stats();
    assert_eq!(stats.retries, u64::from(TOKENS));
    assert!(stats.budget_denied > 0, "{stats:?}");
    let denied = reports
        .iter()
        .filter(|r| r.stop == StopReason::BudgetEmpty)
        .count();
    assert_eq!(denied as u64, stats.budget_denied);
    assert!(reports.iter().all(|r| r.stop != StopReason::Success));
}
