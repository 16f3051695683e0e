//! `max_attempts`: the first attempt counts, and no more than that are sent.

use crate::mock_client::*;
use tower_http_retry::StopReason;

#[tokio::test(start_paused = true)]
async fn exactly_max_attempts_then_attempts_exhausted() {
    let mut client = Client::new(builder().max_attempts(4).build().unwrap());
    let (code, report) = run_through(&mut client, get(), &[503, 503, 503, 503]).await;
    assert_eq!(code, 503);
    assert_eq!(
        (report.attempts, report.stop),
        (4, StopReason::AttemptsExhausted)
    );
    client.assert_no_request();
    assert_eq!(client.stats().attempts, 4);
}

#[tokio::test(start_paused = true)]
async fn max_attempts_one_sends_once() {
    let mut client = Client::new(builder().max_attempts(1).build().unwrap());
    let (code, report) = run_through(&mut client, get(), &[503]).await;
    assert_eq!(code, 503);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::AttemptsExhausted)
    );
    assert!(report.delays.is_empty());
    client.assert_no_request();
}
