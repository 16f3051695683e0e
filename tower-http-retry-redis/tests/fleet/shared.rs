//! What the processes of a fleet share through Redis: the mode and the pause, one probe stream
//! whose leases expire, the release rate split between them, and records that expire.

use crate::{call, pacing, Redis, MS};
use redis::AsyncCommands;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};
use tower_http_retry::pacing::store::{Event, PacingStore, Release};
use tower_http_retry::pacing::{Pacing, PacingMode};

const ASK: Event = Event::Release {
    want: 1,
    jitter: 0.5,
};

#[tokio::test]
async fn stores_on_separate_connections_see_one_mode_and_one_pause() {
    let Some(redis) = Redis::start("stores_on_separate_connections_see_one_mode_and_one_pause")
    else {
        return;
    };
    let pacing = pacing();
    let one = redis.store("mode", |b| b).await;
    let other = redis.store("mode", |b| b).await;
    assert_eq!(
        call(&other, &pacing, &[ASK]).await.release(),
        Some(Release::Unpaced)
    );

    let down = call(&one, &pacing, &[Event::Down { jitter: 0.5 }]).await;
    assert_eq!(down.view.mode, PacingMode::Probing);
    let seen = call(&other, &pacing, &[ASK]).await;
    assert_eq!(seen.view.mode, PacingMode::Probing, "{seen:?}");
    assert!(matches!(seen.release(), Some(Release::At(_))), "{seen:?}");

    let until = Instant::now() + 300 * MS;
    call(&other, &pacing, &[Event::Pause { until }]).await;
    let paused = call(&one, &pacing, &[ASK]).await;
    assert_eq!(paused.view.mode, PacingMode::Paused);
    let Some(Release::At(at)) = paused.release() else {
        panic!("held by the pause: {paused:?}")
    };
    // The same instant, through two processes' offsets to Redis's clock.
    let apart = at.max(until) - at.min(until);
    assert!(apart <= 5 * MS, "{apart:?}");
    let cached = one.cached(pacing.rules(), "api.example.test", Instant::now());
    assert_eq!(cached.map(|view| view.mode), Some(PacingMode::Paused));
    assert_eq!(one.stats().errors + other.stats().errors, 0);
}

#[tokio::test]
async fn release_slots_keep_the_fleet_rate_across_processes() {
    let Some(redis) = Redis::start("release_slots_keep_the_fleet_rate_across_processes") else {
        return;
    };
    // A long regain: after the cut below, the cubic curve stays near 70 % of what was accepted
    // (the additive step still adds about 53/s each second).
    let pacing = Pacing::builder()
        .probe_interval(100 * MS)
        .regain(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(redis.store("slots", |b| b).await);
    }
    ramp_at_700_per_second(&fleet[0], &pacing).await;
    let rate = call(&fleet[1], &pacing, &[Event::Refresh]).await.view.rate;
    assert!((680.0..=760.0).contains(&rate), "{rate}/s");
    let calls_before: u64 = fleet.iter().map(|store| store.stats().calls).sum();

    let start = Instant::now();
    let end = start + 1000 * MS;
    let mut tasks = Vec::new();
    for store in fleet.clone() {
        let pacing = pacing.clone();
        tasks.push(tokio::spawn(async move {
            let mut slots = 0u64;
            loop {
                let ask = Event::Release {
                    want: 1000,
                    jitter: 0.5,
                };
                let next = match call(&store, &pacing, &[ask]).await.release() {
                    Some(Release::Slots { first, gap, count }) => {
                        // Only the slots inside the measured second count.
                        for n in 0..count {
                            slots += u64::from(first + gap * n < end);
                        }
                        first + gap * (count - 1)
                    }
                    Some(Release::At(at)) => at,
                    other => panic!("{other:?}"),
                };
                if next >= end {
                    return slots;
                }
                sleep_until(next).await;
            }
        }));
    }
    let mut per_process = Vec::new();
    for task in tasks {
        per_process.push(task.await.unwrap());
    }
    let total: u64 = per_process.iter().sum();
    let calls: u64 = fleet.iter().map(|store| store.stats().calls).sum::<u64>() - calls_before;
    let conflicts: u64 = fleet.iter().map(|store| store.stats().conflicts).sum();
    // After a loss the rate also grows by the ramp's additive step (about 53/s each second), so
    // the second's slots are measured against the mean of the fleet's rate at its start and end.
    let rate_after = call(&fleet[1], &pacing, &[Event::Refresh]).await.view.rate;
    let expected = (rate + rate_after) / 2.0;
    println!(
        "slots in 1 s at {rate:.0}/s rising to {rate_after:.0}/s: {per_process:?} = {total}; \
         {calls} calls ({conflicts} conflicts), {:.3} per slot",
        calls as f64 / total as f64
    );
    assert!(
        (expected * 0.85..=expected * 1.1).contains(&(total as f64)),
        "{total} slots at {rate:.0}/s rising to {rate_after:.0}/s"
    );
    let fair = total as f64 / 3.0;
    for slots in &per_process {
        assert!(
            (*slots as f64 - fair).abs() <= fair * 0.25,
            "{per_process:?}"
        );
    }
    assert!(
        calls as f64 / total as f64 <= 0.1,
        "{calls} calls, {total} slots"
    );
}

/// Down, a successful probe, then one interval with 10 % losses at 1,000/s accepted: the rate
/// is cut to 700/s.
async fn ramp_at_700_per_second(store: &impl PacingStore, pacing: &Pacing) {
    call(store, pacing, &[Event::Down { jitter: 0.0 }]).await;
    let lease = loop {
        match call(store, pacing, &[ASK]).await.release() {
            Some(Release::Probe(lease)) => break lease,
            Some(Release::At(at)) => sleep_until(at).await,
            other => panic!("{other:?}"),
        }
    };
    let done = Event::ProbeDone {
        lease,
        success: true,
    };
    let report = Event::Report {
        successes: 100,
        losses: 10,
        over: Duration::ZERO,
    };
    call(store, pacing, &[done, report]).await;
    tokio::time::sleep(120 * MS).await;
    let applied = call(store, pacing, &[Event::Refresh]).await;
    assert_eq!(applied.view.mode, PacingMode::Ramping, "{applied:?}");
}

#[tokio::test]
async fn a_probe_lease_of_a_dead_process_expires() {
    let Some(redis) = Redis::start("a_probe_lease_of_a_dead_process_expires") else {
        return;
    };
    let pacing = pacing();
    let lease_ttl = 300 * MS;
    let dead = redis.store("lease", |b| b.lease_ttl(lease_ttl)).await;
    let alive = redis.store("lease", |b| b.lease_ttl(lease_ttl)).await;
    call(&dead, &pacing, &[Event::Down { jitter: 0.0 }]).await;
    let lease = loop {
        match call(&dead, &pacing, &[ASK]).await.release() {
            Some(Release::Probe(lease)) => break lease,
            Some(Release::At(at)) => sleep_until(at).await,
            other => panic!("{other:?}"),
        }
    };
    drop(dead); // it dies with its probe in flight
    tokio::time::sleep(100 * MS).await;
    let Some(Release::Blocked { until }) = call(&alive, &pacing, &[ASK]).await.release() else {
        panic!("the dead process's lease blocks the one probe in flight")
    };
    let apart = until.max(lease.expires()) - until.min(lease.expires());
    assert!(apart <= 5 * MS, "{apart:?}");
    sleep_until(until + 5 * MS).await;
    let applied = call(&alive, &pacing, &[ASK]).await;
    assert!(
        matches!(applied.release(), Some(Release::Probe(_))),
        "{applied:?}"
    );
    assert_eq!(
        applied.view.probes, 2,
        "one stream: the dead one's probe and this one"
    );
}

#[tokio::test]
async fn records_expire_and_a_fleet_leaves_nothing_behind() {
    let Some(redis) = Redis::start("records_expire_and_a_fleet_leaves_nothing_behind") else {
        return;
    };
    let pacing = pacing();
    let store = redis
        .store("expiry", |b| b.record_ttl(200 * MS).lease_ttl(200 * MS))
        .await;
    let key = store.key("api.example.test");
    call(&store, &pacing, &[Event::Down { jitter: 0.5 }]).await;
    let mut raw = redis.connection().await;
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    // The first probe is due 100 ms after the report; the record is kept 200 ms past it.
    assert!((150..=300).contains(&ttl), "PTTL {ttl} ms");
    let fields: Vec<String> = raw.hkeys(&key).await.unwrap();
    assert_eq!(fields.len(), 2, "{fields:?}");
    tokio::time::sleep(Duration::from_millis(ttl as u64) + 50 * MS).await;
    let left: Vec<String> = raw.keys("expiry:*").await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    // Gone is open: the next process starts afresh.
    let fresh = redis.store("expiry", |b| b).await;
    assert_eq!(
        call(&fresh, &pacing, &[ASK]).await.release(),
        Some(Release::Unpaced)
    );
}

#[tokio::test]
async fn an_open_endpoint_costs_no_call_and_what_is_known_is_refreshed_in_the_background() {
    let Some(redis) = Redis::start(
        "an_open_endpoint_costs_no_call_and_what_is_known_is_refreshed_in_the_background",
    ) else {
        return;
    };
    let pacing = pacing();
    let one = redis.store("cached", |b| b).await;
    let other = redis.store("cached", |b| b.view_ttl(100 * MS)).await;
    let endpoint = "api.example.test";
    // Never heard of: no answer, and a read in the background.
    assert_eq!(other.cached(pacing.rules(), endpoint, Instant::now()), None);
    tokio::time::sleep(50 * MS).await;
    let calls = other.stats().calls;
    assert!((1..=2).contains(&calls), "{calls} calls");
    for _ in 0..1000 {
        let view = other.cached(pacing.rules(), endpoint, Instant::now());
        assert_eq!(view.map(|v| v.mode), Some(PacingMode::Open));
    }
    assert_eq!(
        other.stats().calls,
        calls,
        "a thousand requests to an open endpoint"
    );

    call(&one, &pacing, &[Event::Down { jitter: 0.5 }]).await;
    tokio::time::sleep(100 * MS).await;
    // Stale now: this answer is the old one, and a read goes out behind it.
    let view = other.cached(pacing.rules(), endpoint, Instant::now());
    assert_eq!(view.map(|v| v.mode), Some(PacingMode::Open));
    tokio::time::sleep(50 * MS).await;
    let view = other.cached(pacing.rules(), endpoint, Instant::now());
    assert_eq!(view.map(|v| v.mode), Some(PacingMode::Probing));
    assert_eq!(other.stats().calls, calls + 1);
}
