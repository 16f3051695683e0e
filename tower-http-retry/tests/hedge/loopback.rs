//! On a real hyper server on `127.0.0.1:0`, through hyper-util's client: the first copy stalls,
//! the hedge answers, and the stalled copy is cancelled (its connection closed, not left to
//! stall in the pool).

use super::support::{self, get, Reply, TestServer};
use http::Method;
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::report::HedgeReport;

/// Bounds every wait, so that a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_hedge_answers_a_stalled_request_and_the_stalled_copy_is_cancelled() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(200).after(Duration::from_secs(30)),
        _ => Reply::status(200).header("x-copy", "hedge"),
    })
    .await;
    let hedge = HedgeLayer::builder()
        .delay(Duration::from_millis(50))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(hedge.clone())
        .service(support::client());
    let request = get(&server.uri("/search"), "q1");
    let response = tokio::time::timeout(PATIENCE, client.oneshot(request))
        .await
        .expect("the hedge answers long before the stall ends")
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-copy"], "hedge");
    let report = HedgeReport::of(&response).copied().unwrap();
    assert_eq!((report.copies, report.winner), (2, 1));
    assert_eq!(server.hits(&Method::GET, "q1"), 2);
    assert_eq!(hedge.stats().won_by_hedge, 1);
    drop(response);

    // The stalled copy's future was dropped: hyper closes its connection, which the server sees.
    let closed = async {
        while server.open_connections() > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(PATIENCE, closed)
        .await
        .unwrap_or_else(|_| panic!("{} connections still open", server.open_connections()));
}
