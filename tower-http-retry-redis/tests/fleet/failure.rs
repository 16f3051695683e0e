//! Redis failing under a fleet: killed and started again empty, or stalled. Every call is still
//! answered (by the fallback, with a typed error), the fallback is counted once per episode, and
//! the process rejoins when Redis answers again.

use crate::{call, pacing, Redis, MS};
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::{Applied, Event, PacingStore, Release, StoreError};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::Pacing;

const ASK: Event = Event::Release {
    want: 1,
    jitter: 0.5,
};

/// The first answer to `events` that Redis gave, not the fallback, tried every 50 ms for 5 s.
async fn rejoined(store: &impl PacingStore, pacing: &Pacing, events: &[Event]) -> Applied {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(50 * MS).await;
        let applied = call(store, pacing, events).await;
        if applied.fallback.is_none() {
            return applied;
        }
        assert!(
            Instant::now() < deadline,
            "no rejoin within 5 s: {applied:?}"
        );
    }
}

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
    let back = rejoined(&store, &pacing, &[ASK]).await;
    assert_eq!(store.stats().rejoins, 1);
    // Redis came back empty; the first process back wrote what it knew.
    assert_eq!(back.view.mode, PacingMode::Probing, "{back:?}");
    let seen = rejoined(&other, &pacing, &[Event::Refresh]).await;
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

#[tokio::test]
async fn a_pause_learned_in_the_fallback_before_any_call_got_through_is_kept_on_rejoin() {
    let Some(mut redis) = Redis::start(
        "a_pause_learned_in_the_fallback_before_any_call_got_through_is_kept_on_rejoin",
    ) else {
        return;
    };
    let pacing = pacing();
    let store = redis.store("unmeasured", |b| b).await;
    // Redis is lost before this process's first call: its clock was never measured, and the
    // fallback's times are on the process's own epoch.
    redis.kill();
    let until = Instant::now() + Duration::from_secs(30);
    let lost = call(&store, &pacing, &[Event::Pause { until }]).await;
    assert!(lost.fallback.is_some(), "{lost:?}");
    assert_eq!(lost.view.mode, PacingMode::Paused, "{lost:?}");

    redis.restart();
    let back = rejoined(&store, &pacing, &[Event::Refresh]).await;
    // Redis came back empty: the record is seeded from the fallback, on Redis's clock.
    assert_eq!(
        back.view.mode,
        PacingMode::Paused,
        "the pause was lost: {back:?}"
    );
    let kept = back.view.paused_until.expect("paused");
    let off = if kept > until {
        kept - until
    } else {
        until - kept
    };
    assert!(off < 50 * MS, "paused until {kept:?}, learned {until:?}");
}

#[tokio::test]
async fn redis_lost_while_an_endpoint_was_open_leaves_the_fleet_probing_it_as_one_stream() {
    let Some(mut redis) = Redis::start(
        "redis_lost_while_an_endpoint_was_open_leaves_the_fleet_probing_it_as_one_stream",
    ) else {
        return;
    };
    const FLEET: u32 = 4;
    let pacing = pacing();
    let mut stores = Vec::new();
    for _ in 0..FLEET {
        stores.push(redis.store("open-lost", |b| b).await);
    }
    // A healthy endpoint: each process reads its open record now and then (a view older than
    // `view_ttl`), and nothing more.
    for _ in 0..2 {
        for store in &stores {
            let read = call(store, &pacing, &[Event::Refresh]).await;
            assert_eq!(read.view.mode, PacingMode::Open);
        }
    }
    redis.kill();
    // Then the endpoint fails: each process meets it first in its fallback, where no record
    // names a peer waiting on it. Each takes its share of the fleet Redis last counted: a
    // probe every four intervals, the four of them one stream (alone, each would probe every
    // interval: four streams).
    for store in &stores {
        let now = Instant::now();
        let down = call(store, &pacing, &[Event::Down { jitter: 0.5 }, ASK]).await;
        assert!(down.fallback.is_some(), "{down:?}");
        assert_eq!(down.view.mode, PacingMode::Probing);
        let Some(Release::At(probe)) = down.release() else {
            panic!("a probe later: {down:?}")
        };
        // At jitter 0.5, exactly the (fallback's) probe interval.
        let interval = 100 * MS; // `pacing()`'s
        assert!(
            probe - now >= interval * FLEET - MS,
            "the next probe in {:?}: a process alone probes every {interval:?}",
            probe - now
        );
    }
}

#[cfg(feature = "metrics")]
#[test]
fn the_store_counts_its_calls_errors_fallbacks_and_rejoins_as_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let Some(mut redis) =
        Redis::start("the_store_counts_its_calls_errors_fallbacks_and_rejoins_as_metrics")
    else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let stats = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let pacing = pacing();
            let store = redis.store("metered", |b| b).await;
            call(&store, &pacing, &[Event::Down { jitter: 0.5 }]).await;
            redis.kill();
            let lost = call(&store, &pacing, &[ASK]).await;
            assert!(lost.fallback.is_some(), "{lost:?}");
            redis.restart();
            rejoined(&store, &pacing, &[ASK]).await;
            store.stats()
        })
    });
    // One snapshot: reading resets every counter.
    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str| {
        snapshot
            .iter()
            .find(|(key, ..)| {
                let key = key.key();
                key.name() == name
                    && key
                        .labels()
                        .any(|l| (l.key(), l.value()) == ("prefix", "metered"))
            })
            .map_or(0, |(.., value)| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
    };
    assert_eq!(
        counter("http_client_retry_pacer_store_fallbacks_total"),
        1,
        "{stats:?}"
    );
    assert_eq!(counter("http_client_retry_pacer_store_rejoins_total"), 1);
    assert_eq!(
        counter("http_client_retry_pacer_store_errors_total"),
        stats.errors
    );
    assert_eq!(
        counter("http_client_retry_pacer_store_calls_total"),
        stats.calls
    );
    assert!(stats.errors >= 1 && stats.calls > stats.errors, "{stats:?}");
}
