//! Five defects of the fleet-wide pacing store (`RedisStore`, `InProcessStore`), its fallback
//! and its caches, each pinned by a test that failed before its fix, and what was checked and
//! found correct beside them:
//!
//! 1. a `RedisStore` kept a cache entry for every endpoint it was ever asked about, forever
//!    (4,000 healthy hosts: about 1.5 KB each), where the pacer without a store keeps nothing;
//! 2. an `InProcessStore` never dropped expired records, though a record expires as a Redis key
//!    does;
//! 3. one endpoint's key of the wrong type (`WRONGTYPE`) sent every endpoint to the fallback,
//!    and the store flapped between lost and rejoined;
//! 4. a probe grant Redis applied but whose reply came after the call timeout left a lease no
//!    process knew it held: the whole fleet was refused probes until `lease_ttl` ended it;
//! 5. a background read whose task was dropped before it ran (its runtime shut down) left its
//!    endpoint marked as being read, never read again.
//!
//! The Redis tests start their own `redis-server` on a free loopback port; every wait is
//! bounded, so a hang fails instead of hanging. The in-process tests run on tokio's paused
//! clock. Memory is measured with a counting global allocator, per thread, on current-thread
//! runtimes: this file is a test binary of its own for that.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_support::servers::{self, Server, REDIS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tower::{service_fn, Layer, ServiceExt};
use tower_http_retry::pacing::store::{Event, InProcessStore, PacingStore, Release, StoreError};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::{Pacing, RetryLayer};
use tower_http_retry_redis::RedisStore;

const MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------------------------
// A counting allocator: live bytes of the current thread.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        add(-(layout.size() as isize));
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated and not freed by this thread so far.
fn live() -> isize {
    LIVE.with(Cell::get)
}

// ---------------------------------------------------------------------------------------------
// Redis on loopback, and a proxy that can hold Redis's replies back.

struct Redis {
    port: u16,
    _server: Server,
}

impl Redis {
    fn start(test: &str) -> Option<Redis> {
        let binary = servers::require(REDIS, test)?;
        let port = servers::free_port();
        let server = Server::redis(&binary, port);
        Some(Redis {
            port,
            _server: server,
        })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

async fn connection_to(port: u16) -> ConnectionManager {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a valid URL");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10));
    tokio::time::timeout(
        Duration::from_secs(5),
        ConnectionManager::new_with_config(client, config),
    )
    .await
    .expect("connected within 5 s")
    .expect("connect to the test's redis-server")
}

async fn store_on(port: u16, prefix: &str, call_timeout: Duration) -> RedisStore {
    RedisStore::builder(connection_to(port).await)
        .prefix(prefix)
        .call_timeout(call_timeout)
        .build()
        .expect("a valid store")
}

/// A TCP proxy in front of Redis: requests go through at once; replies are held back by
/// `delay_ms` while it is not 0 (a reply that comes after the caller's timeout, of a call that
/// Redis did run).
struct SlowReplies {
    port: u16,
    delay_ms: Arc<AtomicU64>,
}

impl SlowReplies {
    async fn start(upstream: u16) -> SlowReplies {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = Arc::clone(&delay_ms);
        tokio::spawn(async move {
            // At most a few connections in a test.
            for _ in 0..16 {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let delay = Arc::clone(&delay);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match server_read.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let hold = delay.load(Ordering::SeqCst);
                        if hold > 0 {
                            tokio::time::sleep(Duration::from_millis(hold)).await;
                        }
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        SlowReplies { port, delay_ms }
    }

    fn hold_replies(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

fn fleet_pacing() -> Pacing {
    Pacing::builder()
        .probe_interval(100 * MS)
        .probes_in_flight(1)
        .build()
        .expect("valid pacing")
}

async fn apply(
    store: &impl PacingStore,
    pacing: &Pacing,
    endpoint: &str,
    events: &[Event],
) -> tower_http_retry::pacing::store::Applied {
    tokio::time::timeout(
        Duration::from_secs(5),
        store.apply(pacing.rules(), endpoint, events, Instant::now()),
    )
    .await
    .expect("a store call answers within 5 s")
}

const ASK: Event = Event::Release {
    want: 1,
    jitter: 0.5,
};

fn ok_200(request: http::Request<String>) -> http::Response<String> {
    drop(request);
    http::Response::new(String::new())
}

// =============================================================================================
// 1. A RedisStore keeps what it heard of endpoints bounded.

/// Sends one GET to each of `n` distinct authorities through a layer paced with `pacing`
/// (every answer a 200), as a webhook sender or a proxy with many upstreams does.
async fn send_to_distinct_authorities(pacing: Pacing, n: usize) {
    let layer = RetryLayer::builder()
        .max_attempts(2)
        .pacing(pacing)
        .build()
        .unwrap();
    let service = layer.layer(service_fn(|request: http::Request<String>| async move {
        Ok::<_, Infallible>(ok_200(request))
    }));
    for i in 0..n {
        let request = http::Request::get(format!("http://host-{i}.example.test/"))
            .body(String::new())
            .unwrap();
        let response =
            tokio::time::timeout(Duration::from_secs(5), service.clone().oneshot(request))
                .await
                .expect("answered within 5 s")
                .unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// A process that talks to many hosts (the webhook sender; a proxy with many upstreams), every
/// one of them healthy. `Pacing::max_endpoints` bounds what the pacer keeps (nothing at all for
/// an endpoint that only ever answered 200), and the store's cache of what it heard of each
/// endpoint is bounded by it too: open endpoints read longest ago are forgotten (an absent
/// record says the same), and a burst of new hosts is read a few at a time, not a read each at
/// once that Redis cannot answer within the call timeout. (Before: one entry of about 1.4 KB
/// per host ever seen, never removed, and a read each.)
#[tokio::test(flavor = "current_thread")]
async fn a_redis_store_keeps_no_entry_per_healthy_endpoint_ever_seen() {
    let Some(redis) = Redis::start("a_redis_store_keeps_no_entry_per_healthy_endpoint_ever_seen")
    else {
        return;
    };
    const N: usize = 4000;
    // Baseline: the same traffic without a store.
    let pacing = Pacing::builder().max_endpoints(16).build().unwrap();
    send_to_distinct_authorities(pacing.clone(), 100).await; // warm up lazily made statics
    let before = live();
    send_to_distinct_authorities(pacing.clone(), N).await;
    let without_store = live() - before;

    let store = store_on(redis.port, "growth", Duration::from_millis(250)).await;
    let pacing = Pacing::builder()
        .max_endpoints(16)
        .store(store.clone())
        .build()
        .unwrap();
    send_to_distinct_authorities(pacing.clone(), 100).await; // warm up
    let settle = |store: RedisStore| async move {
        // Let the background reads the requests started finish (bounded).
        let until = Instant::now() + Duration::from_secs(20);
        let mut last = u64::MAX;
        while Instant::now() < until {
            tokio::time::sleep(200 * MS).await;
            let calls = store.stats().calls;
            if calls == last {
                break;
            }
            last = calls;
        }
    };
    settle(store.clone()).await;
    let calls_before = store.stats().calls;
    let before = live();
    send_to_distinct_authorities(pacing.clone(), N).await;
    settle(store.clone()).await;
    let with_store = live() - before;
    let calls = store.stats().calls - calls_before;
    // Long after, the first host is still remembered (an entry that the pacer itself forgot, or
    // never had).
    tokio::time::sleep(1100 * MS).await;
    let remembered = store
        .cached(pacing.rules(), "host-0.example.test", Instant::now())
        .is_some();
    let per_endpoint = with_store / N as isize;
    eprintln!(
        "{N} healthy hosts: +{without_store} B live without a store, +{with_store} B with a \
         RedisStore ({per_endpoint} B per host), {calls} Redis calls; host 0 still cached: \
         {remembered}"
    );
    assert!(
        per_endpoint < 64,
        "the store retains {per_endpoint} bytes per endpoint ever seen ({with_store} B for {N} \
         hosts; {without_store} B without a store), and host 0 is still cached: {remembered}"
    );
}

/// Without a store the same traffic leaves (nearly) nothing behind: `max_endpoints` holds.
#[tokio::test(flavor = "current_thread")]
async fn without_a_store_distinct_endpoints_leave_nothing_behind() {
    let pacing = Pacing::builder().max_endpoints(16).build().unwrap();
    send_to_distinct_authorities(pacing.clone(), 100).await;
    let before = live();
    send_to_distinct_authorities(pacing, 4000).await;
    let grown = live() - before;
    assert!(grown < 4000 * 8, "{grown} B");
}

// =============================================================================================
// 2. An InProcessStore drops expired records.

/// A record of an `InProcessStore` expires as a Redis key does: a call that makes a record
/// drops the expired ones (at most once a record time to live), so a fleet of layers in one
/// process that meets many endpoints keeps the records of those it met lately, not of every
/// one. (Before: only the diagnostic `records()` pruned them.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_in_process_store_drops_expired_records() {
    const N: usize = 2000;
    let pacing = Pacing::new();
    let store = InProcessStore::builder()
        .record_ttl(Duration::from_secs(1))
        .lease_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let peer = store.peer();
    let _ = peer
        .apply(
            pacing.rules(),
            "warm.test",
            &[Event::Down { jitter: 0.5 }],
            Instant::now(),
        )
        .into_ready();
    let before = live();
    for i in 0..N {
        let endpoint = format!("endpoint-{i}.test");
        let now = Instant::now();
        let _ = peer
            .apply(
                pacing.rules(),
                &endpoint,
                &[Event::Down { jitter: 0.5 }],
                now,
            )
            .into_ready();
        let _ = peer
            .apply(pacing.rules(), &endpoint, &[ASK], now)
            .into_ready();
    }
    // An hour later every record expired long ago; the fleet goes on with other endpoints.
    tokio::time::advance(Duration::from_secs(3600)).await;
    let _ = peer
        .apply(
            pacing.rules(),
            "another.test",
            &[Event::Down { jitter: 0.5 }],
            Instant::now(),
        )
        .into_ready();
    let retained = live() - before;
    // The diagnostic prunes them: what it frees is what was retained.
    let left = store.records(Instant::now());
    let freed = retained - (live() - before);
    eprintln!("{N} expired records: {retained} B live an hour later; records() freed {freed} B, {left} left");
    assert!(
        freed < (N as isize) * 32,
        "{freed} B of expired records ({} B each) were kept until records() was called",
        freed / N as isize
    );
}

// =============================================================================================
// 3. One endpoint's key of the wrong type sends only that endpoint to the fallback.

/// An error Redis answers for one endpoint's key (here `WRONGTYPE`: the key is a string, not a
/// hash) sends that endpoint to the fallback, and only it: Redis is not away, so every other
/// endpoint's events (a down report here) still reach the fleet, and the store does not flap
/// between away and joined. (Before: any error was "Redis is away", for every endpoint.)
#[tokio::test(flavor = "current_thread")]
async fn one_bad_key_sends_only_its_endpoint_to_the_fallback() {
    let Some(redis) = Redis::start("one_bad_key_sends_only_its_endpoint_to_the_fallback") else {
        return;
    };
    let pacing = fleet_pacing();
    let one = store_on(redis.port, "bad", Duration::from_millis(250)).await;
    let other = store_on(redis.port, "bad", Duration::from_millis(250)).await;
    let mut raw = connection_to(redis.port).await;
    let _: () = redis::cmd("SET")
        .arg(one.key("bad.test"))
        .arg("not a hash")
        .query_async(&mut raw)
        .await
        .unwrap();
    // Both stores know good.test (and the clock) already.
    apply(&one, &pacing, "good.test", &[Event::Refresh]).await;
    apply(&other, &pacing, "good.test", &[Event::Refresh]).await;

    let bad = apply(&one, &pacing, "bad.test", &[Event::Down { jitter: 0.5 }]).await;
    assert!(
        matches!(bad.fallback, Some(StoreError::Unavailable(_))),
        "{:?}",
        bad.fallback
    );
    // Redis is fine; good.test's record is fine.
    let good = apply(&one, &pacing, "good.test", &[Event::Down { jitter: 0.5 }]).await;
    let seen = apply(&other, &pacing, "good.test", &[Event::Refresh]).await;
    eprintln!(
        "good.test after bad.test's WRONGTYPE: fallback {:?}; the other process sees {:?}; stats {:?}",
        good.fallback,
        seen.view.mode,
        one.stats()
    );
    assert_eq!(
        good.fallback, None,
        "good.test answered by the fallback although Redis and its record are fine"
    );
    assert_eq!(
        seen.view.mode,
        PacingMode::Probing,
        "the fleet never heard good.test is down"
    );
}

// =============================================================================================
// 4. A probe lease granted to a call whose answer was lost is ended by the next call.

/// A `swap.lua` that Redis ran but whose reply came after the call timeout wrote the process's
/// probe lease into the fleet's record; the process answered itself from the fallback and
/// never learned of that lease. The next call that gets through ends, as a failed probe, every
/// lease of the record held by the process that no call handed out, so the fleet's probe
/// stream goes on within a probe interval or two. (Before: with `probes_in_flight(1)` the
/// whole fleet was refused probes until the lease expired, `lease_ttl`, 10 s.)
#[tokio::test(flavor = "current_thread")]
async fn a_timed_out_but_applied_probe_grant_does_not_block_the_fleet_for_the_lease_ttl() {
    let Some(redis) = Redis::start(
        "a_timed_out_but_applied_probe_grant_does_not_block_the_fleet_for_the_lease_ttl",
    ) else {
        return;
    };
    let pacing = fleet_pacing();
    let proxy = SlowReplies::start(redis.port).await;
    let slow = store_on(proxy.port, "lease", Duration::from_millis(50)).await;
    let other = store_on(redis.port, "lease", Duration::from_millis(250)).await;
    const EP: &str = "api.example.test";

    // The fleet marks the endpoint down; the slow process reads the record (version and clock).
    let down = apply(&other, &pacing, EP, &[Event::Down { jitter: 0.0 }]).await;
    assert_eq!(down.view.mode, PacingMode::Probing);
    apply(&slow, &pacing, EP, &[Event::Refresh]).await;
    // The first probe is due 50 ms later.
    tokio::time::sleep(150 * MS).await;

    // The slow process asks for the probe; Redis grants it and writes the lease, but the reply
    // comes after the call timeout.
    proxy.hold_replies(Duration::from_millis(300));
    let asked = apply(&slow, &pacing, EP, &[ASK]).await;
    assert!(
        matches!(asked.fallback, Some(StoreError::Timeout(_))),
        "{:?}",
        asked.fallback
    );
    if let Some(Release::Probe(lease)) = asked.release() {
        // The fallback's probe, sent and answered (the endpoint is still down).
        assert!(lease.is_local());
        apply(
            &slow,
            &pacing,
            EP,
            &[Event::ProbeDone {
                lease,
                success: false,
            }],
        )
        .await;
    }
    tokio::time::sleep(400 * MS).await;
    proxy.hold_replies(Duration::ZERO);

    // For the next 2 s (20 probe intervals) the fleet asks for a probe every 100 ms.
    let started = Instant::now();
    let mut got_probe = None;
    let mut last = None;
    while started.elapsed() < Duration::from_secs(2) {
        for store in [&other, &slow] {
            let applied = apply(store, &pacing, EP, &[ASK]).await;
            if let Some(Release::Probe(lease)) = applied.release() {
                got_probe = Some((started.elapsed(), lease.is_local()));
                break;
            }
            last = Some((applied.release(), applied.fallback.clone()));
        }
        if got_probe.is_some() {
            break;
        }
        tokio::time::sleep(100 * MS).await;
    }
    eprintln!(
        "after the lost reply: probe {got_probe:?}; last answer {last:?}; slow store {:?}",
        slow.stats()
    );
    let blocked_until = match last {
        Some((Some(Release::Blocked { until }), _)) => {
            Some(until.saturating_duration_since(Instant::now()))
        }
        _ => None,
    };
    assert!(
        got_probe.is_some(),
        "no probe for the fleet in 2 s (probe interval 100 ms): blocked by the lease of the \
         lost reply for another {blocked_until:?}"
    );
}

// =============================================================================================
// What was checked and found correct beside the defects.

/// The same sequence as `a_timed_out_but_applied_probe_grant_does_not_block_the_fleet_for_the_lease_ttl`
/// with the reply on time: the probe's failure is reported and the fleet's next probe comes a
/// probe interval later.
#[tokio::test(flavor = "current_thread")]
async fn with_the_reply_on_time_the_fleet_probes_again_within_a_probe_interval() {
    let Some(redis) =
        Redis::start("with_the_reply_on_time_the_fleet_probes_again_within_a_probe_interval")
    else {
        return;
    };
    let pacing = fleet_pacing();
    let proxy = SlowReplies::start(redis.port).await;
    let slow = store_on(proxy.port, "lease-ok", Duration::from_millis(250)).await;
    let other = store_on(redis.port, "lease-ok", Duration::from_millis(250)).await;
    const EP: &str = "api.example.test";
    apply(&other, &pacing, EP, &[Event::Down { jitter: 0.0 }]).await;
    apply(&slow, &pacing, EP, &[Event::Refresh]).await;
    tokio::time::sleep(150 * MS).await;
    let asked = apply(&slow, &pacing, EP, &[ASK]).await;
    assert_eq!(asked.fallback, None);
    let Some(Release::Probe(lease)) = asked.release() else {
        panic!("{asked:?}")
    };
    assert!(!lease.is_local());
    apply(
        &slow,
        &pacing,
        EP,
        &[Event::ProbeDone {
            lease,
            success: false,
        }],
    )
    .await;
    let started = Instant::now();
    let mut probed = false;
    while started.elapsed() < Duration::from_secs(2) && !probed {
        probed = matches!(
            apply(&other, &pacing, EP, &[ASK]).await.release(),
            Some(Release::Probe(_))
        );
        tokio::time::sleep(20 * MS).await;
    }
    assert!(probed, "the fleet probes again");
}

/// The compare-and-set: six processes asking at once for the probe of a stream with two
/// probes in flight get at most two probes between them.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_asks_never_grant_more_probes_than_allowed() {
    let Some(redis) = Redis::start("concurrent_asks_never_grant_more_probes_than_allowed") else {
        return;
    };
    let pacing = Pacing::builder()
        .probe_interval(100 * MS)
        .probes_in_flight(2)
        .build()
        .unwrap();
    let mut fleet = Vec::new();
    for _ in 0..6 {
        fleet.push(store_on(redis.port, "cas", Duration::from_millis(500)).await);
    }
    const EP: &str = "cas.example.test";
    apply(&fleet[0], &pacing, EP, &[Event::Down { jitter: 0.0 }]).await;
    for store in &fleet {
        apply(store, &pacing, EP, &[Event::Refresh]).await;
    }
    tokio::time::sleep(300 * MS).await;
    let mut granted = 0;
    for _round in 0..3 {
        let mut tasks = tokio::task::JoinSet::new();
        for store in fleet.clone() {
            let pacing = pacing.clone();
            tasks.spawn(async move { apply(&store, &pacing, EP, &[ASK]).await });
        }
        let answers = tokio::time::timeout(Duration::from_secs(10), tasks.join_all())
            .await
            .expect("answered");
        for answer in answers {
            assert_eq!(answer.fallback, None);
            if matches!(answer.release(), Some(Release::Probe(_))) {
                granted += 1;
            }
        }
    }
    assert!((1..=2).contains(&granted), "{granted} probes granted");
}

/// A record that is not the crate's (a number that is not one, bytes of another format) is
/// answered by the fallback as `Malformed`: no panic, no write over it.
#[tokio::test(flavor = "current_thread")]
async fn a_garbage_record_is_malformed_not_a_panic() {
    let Some(redis) = Redis::start("a_garbage_record_is_malformed_not_a_panic") else {
        return;
    };
    let pacing = fleet_pacing();
    let store = store_on(redis.port, "garbage", Duration::from_millis(250)).await;
    let mut raw = connection_to(redis.port).await;
    for (endpoint, v, s) in [
        ("a.test", "abc", "zzz"),
        ("b.test", "7", "\u{2}\u{9}garbage"),
        ("c.test", "1.5", ""),
    ] {
        let _: () = redis::cmd("HSET")
            .arg(store.key(endpoint))
            .arg("v")
            .arg(v)
            .arg("s")
            .arg(s)
            .query_async(&mut raw)
            .await
            .unwrap();
        let applied = apply(
            &store,
            &pacing,
            endpoint,
            &[Event::Down { jitter: 0.5 }, ASK],
        )
        .await;
        assert!(applied.fallback.is_some(), "{endpoint}: {applied:?}");
        let kept: String = redis::cmd("HGET")
            .arg(store.key(endpoint))
            .arg("v")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(kept, v);
    }
}

/// A record written by a call expires (`PEXPIRE`): a fleet that stops leaves nothing behind.
#[tokio::test(flavor = "current_thread")]
async fn records_written_expire() {
    let Some(redis) = Redis::start("records_written_expire") else {
        return;
    };
    let _ = redis.url();
    let pacing = fleet_pacing();
    let store = RedisStore::builder(connection_to(redis.port).await)
        .prefix("ttl")
        .call_timeout(Duration::from_millis(250))
        .record_ttl(Duration::from_secs(2))
        .lease_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    apply(&store, &pacing, "ttl.test", &[Event::Down { jitter: 0.5 }]).await;
    let mut raw = connection_to(redis.port).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(store.key("ttl.test"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!((1..=3_000).contains(&pttl), "{pttl} ms");
}

/// A background read whose task is dropped before it ran (its runtime shut down) leaves its
/// endpoint to be read again later, not marked as being read forever.
#[test]
fn a_background_read_dropped_with_its_runtime_is_made_again_later() {
    let Some(redis) =
        Redis::start("a_background_read_dropped_with_its_runtime_is_made_again_later")
    else {
        return;
    };
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let pacing = fleet_pacing();
    let first = runtime();
    let store = first.block_on(store_on(redis.port, "refresh", Duration::from_millis(250)));
    // Asked of once: its read is spawned, and the runtime ends before the read runs.
    first.block_on(async {
        assert!(store
            .cached(pacing.rules(), "ep.test", Instant::now())
            .is_none());
    });
    let calls = store.stats().calls;
    drop(first);
    let second = runtime();
    let read_again = second.block_on(async {
        // Past the view's time to live, asked of again: read again (the connection was the
        // first runtime's, so the read may fail; it is made).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        store.cached(pacing.rules(), "ep.test", Instant::now());
        let until = Instant::now() + Duration::from_secs(5);
        while store.stats().calls == calls && Instant::now() < until {
            tokio::time::sleep(10 * MS).await;
        }
        store.stats().calls > calls
    });
    assert!(
        read_again,
        "the endpoint was never read again: {:?}",
        store.stats()
    );
}
