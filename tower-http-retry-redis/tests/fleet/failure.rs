//! Redis failing under a fleet: killed and started again empty, or stalled. Every call is still
//! answered (by the fallback, with a typed error), the fallback is counted once per episode, and
//! the process rejoins when Redis answers again.

use crate::{call, pacing, Redis, MS};
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::{Event, PacingStore, Release, StoreError};
use tower_http_retry::pacing::PacingMode;

const ASK: Event = Event::Release {
    want: 1,
    jitter: 0.5,
};

#[tokio::test]
async fn redis_killed_and_restarted_mid_use_falls_back_counts_it_and_rejoins() {
    let Some(mut redis) =
        Redis::start("redis_killed_and_restarted_mid_use_falls_back_counts_it_and_rejoins")
    else {
        return;
    };
    let pacing = pacing();
    let store = redis.store("restart", |b| b).await;
    let other = redis.store("restart", |b| b).await;
    call(&store, &pacing, &[Event::Down { jitter: 0.5 }]).await;
    call(&other, &pacing, &[ASK]).await;

    redis.kill();
    let lost = call(&store, &pacing, &[ASK]).await;
    assert!(
        matches!(
            lost.fallback,
            Some(StoreError::Unavailable(_) | StoreError::Timeout(_))
        ),
        "{lost:?}"
    );
    // The last known mode, at this process's share: never unlimited.
    assert_eq!(lost.view.mode, PacingMode::Probing);
    assert!(!matches!(lost.release(), Some(Release::Unpaced)));
    for _ in 0..5 {
        let applied = call(&store, &pacing, &[ASK]).await;
        assert!(applied.fallback.is_some(), "{applied:?}");
    }
    let stats = store.stats();
    assert_eq!(stats.fallbacks, 1, "one episode, counted once: {stats:?}");
    assert!(
        stats.errors >= 1 && stats.fallback_answers >= 6,
        "{stats:?}"
    );

    redis.restart();
    // The first retry is due 250 ms after the loss; the connection reconnects meanwhile.
    let deadline = Instant::now() + Duration::from_secs(5);
    let back = loop {
        tokio::time::sleep(50 * MS).await;
        let applied = call(&store, &pacing, &[ASK]).await;
        if applied.fallback.is_none() {
            break applied;
        }
        assert!(
            Instant::now() < deadline,
            "no rejoin within 5 s: {applied:?}"
        );
    };
    assert_eq!(store.stats().rejoins, 1);
    // Redis came back empty; the first process back wrote what it knew.
    assert_eq!(back.view.mode, PacingMode::Probing, "{back:?}");
    let seen = loop {
        let applied = call(&other, &pacing, &[Event::Refresh]).await;
        if applied.fallback.is_none() {
            break applied;
        }
        assert!(
            Instant::now() < deadline,
            "the other process never rejoined"
        );
        tokio::time::sleep(50 * MS).await;
    };
    assert_eq!(seen.view.mode, PacingMode::Probing, "{seen:?}");
}

#[tokio::test]
async fn a_stalled_redis_times_out_within_the_call_timeout_and_is_rejoined() {
    let Some(redis) =
        Redis::start("a_stalled_redis_times_out_within_the_call_timeout_and_is_rejoined")
    else {
        return;
    };
    let pacing = pacing();
    let timeout = 100 * MS;
    let store = redis.store("stall", |b| b.call_timeout(timeout)).await;
    call(&store, &pacing, &[Event::Down { jitter: 0.5 }]).await;

    redis.signal("STOP");
    let started = Instant::now();
    let stalled = call(&store, &pacing, &[ASK]).await;
    let took = started.elapsed();
    redis.signal("CONT");
    assert_eq!(stalled.fallback, Some(StoreError::Timeout(timeout)));
    // One call's timeout (the loop does not retry a failed call), with room for a busy machine.
    assert!(took < timeout + 200 * MS, "{took:?}");
    assert_eq!(stalled.view.mode, PacingMode::Probing);

    tokio::time::sleep(300 * MS).await;
    let back = call(&store, &pacing, &[ASK]).await;
    assert_eq!(back.fallback, None, "{back:?}");
    let stats = store.stats();
    assert_eq!((stats.fallbacks, stats.rejoins), (1, 1), "{stats:?}");
}
