//! First-attempt jitter: `U(0, j)` before the first attempt, to spread a bulk fan-out.

use crate::mock_client::*;
use std::collections::HashSet;
use std::time::Duration;
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{AbortSignal, StopReason};

const JITTER: Duration = Duration::from_millis(200);

#[tokio::test(start_paused = true)]
async fn first_attempt_waits_within_the_jitter() {
    let layer = builder()
        .first_attempt_jitter(JITTER)
        .random_source(RandomSource::seeded(3))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut waits = HashSet::new();
    for _ in 0..20 {
        let mut future = client.start(get());
        let (arrived, _, reply) =
            await_attempt(&mut client, &mut future, MS, JITTER + 2 * MS).await;
        reply.send_response(status(200));
        let (_, report) = finished(future.poll());
        assert_eq!((report.attempts, report.stop), (1, StopReason::Success));
        let delay = report.delays[0];
        assert_eq!(delay.source, DelaySource::FirstAttempt);
        assert!(delay.duration <= JITTER, "{delay:?}");
        assert!(arrived >= delay.duration && arrived - delay.duration < MS);
        waits.insert(delay.duration);
    }
    assert!(waits.len() > 10, "the waits are spread: {waits:?}");
}

#[tokio::test(start_paused = true)]
async fn first_attempt_jitter_is_skipped_after_shutdown() {
    let signal = AbortSignal::new();
    let layer = builder()
        .first_attempt_jitter(Duration::from_secs(10))
        .abort_signal(signal.clone())
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    signal.shutdown();
    let mut future = client.start(get());
    let (arrived, _, reply) = await_attempt(&mut client, &mut future, MS, 2 * MS).await;
    assert!(arrived <= MS, "{arrived:?}");
    reply.send_response(status(200));
    assert_eq!(finished(future.poll()).1.slept, Duration::ZERO);
}
