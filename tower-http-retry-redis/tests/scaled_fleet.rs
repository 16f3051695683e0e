//! A fleet on Redis with a scaled schedule, as a new user tests one: three workers, each with
//! its own retry layer, paced through one `RedisStore`, draining one Redis outbox, with the
//! Standard Webhooks schedule scaled to a second an hour (1/3600: the schedule's span is about
//! 28 s). The receiver is down for its first 2 s, then healthy: every delivery is delivered,
//! none dead-lettered (a scaled slot deadline of a few milliseconds once dead-lettered most of
//! them as `ScheduleExhausted` while the fleet churned deferrals, the endpoint healthy).
//!
//! Real sockets and a real server mean real time: the test bounds its wait, not a speed.

use bytes::Bytes;
use http_body_util::Full;
use redis::aio::ConnectionManager;
use std::time::{Duration, Instant};
use test_support::servers::{self, Server, REDIS};
use test_support::{Reply, TestServer};
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry_redelivery::redis::{outbox, RedisOptions, RedisOutbox};
use tower_http_retry_redelivery::{
    dead_letters, start_run, Delivery, RecordRules, Redelivery, Schedule,
};
use tower_http_retry_redis::RedisStore;

type Client = tower::util::BoxCloneSyncService<
    http::Request<Bytes>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

const WORKERS: usize = 3;
const DELIVERIES: u64 = 300;

/// One worker's retry layer, paced through the fleet's store.
fn client(schedule: &Schedule, store: &RedisStore) -> Client {
    let pacing = schedule.pacing().store(store.clone()).build().unwrap();
    let retry = schedule.retry_layer().pacing(pacing).build().unwrap();
    let transport = test_support::client();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .map_err(BoxError::from)
        .timeout(schedule.attempt_timeout_duration())
        .map_request(|request: http::Request<Bytes>| request.map(Full::new))
        .service(transport);
    tower::util::BoxCloneSyncService::new(stack.map_err(BoxError::from))
}

/// A worker on a thread of its own (apalis's worker future is not provably `Send`), until
/// `stop` says so.
fn worker(
    name: String,
    outbox: RedisOutbox,
    redelivery: Redelivery<Client, RedisOutbox>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let run = start_run(&outbox, &name).await.unwrap();
            let mut stop = stop;
            let _ = outbox
                .worker(run)
                .build(move |delivery: Delivery| redelivery.handle(delivery))
                .run_until(async move {
                    let _ = stop.wait_for(|stopped| *stopped).await;
                    Ok::<(), std::io::Error>(())
                })
                .await;
        });
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_schedule_on_a_fleet_paced_through_redis_delivers_everything() {
    let test = "scaled_fleet::a_scaled_schedule_on_a_fleet_paced_through_redis_delivers_everything";
    let Some(binary) = servers::require(REDIS, test) else {
        return;
    };
    let port = servers::free_port();
    let _server = Server::redis(&binary, port);
    let url = format!("redis://127.0.0.1:{port}/");
    let connection = ConnectionManager::new(redis::Client::open(url).unwrap())
        .await
        .unwrap();
    let store = RedisStore::builder(connection.clone())
        .prefix("scaled:pacing")
        .build()
        .unwrap();
    let options = RedisOptions {
        heartbeat: Duration::from_secs(1),
        ..RedisOptions::default()
    };
    let outbox = outbox(connection, options);
    let schedule = Schedule::standard_webhooks().scaled(1.0 / 3600.0);
    let up_at = Instant::now() + Duration::from_secs(2);
    let receiver =
        TestServer::start(move |_| Reply::status(if Instant::now() < up_at { 503 } else { 200 }))
            .await;

    let sender: Redelivery<(), RedisOutbox> = Redelivery::new((), outbox.clone(), schedule.clone());
    for n in 0..DELIVERIES {
        let request = http::Request::post(receiver.uri("/hook"))
            .body(Bytes::from("{}"))
            .unwrap();
        let record = RecordRules::new()
            .record(format!("msg_{n}"), request)
            .unwrap();
        sender.enqueue(record).await.unwrap();
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| Redelivery::new(client(&schedule, &store), outbox.clone(), schedule.clone()))
        .collect();
    let threads: Vec<_> = handles
        .iter()
        .enumerate()
        .map(|(i, handle)| {
            let name = format!("scaled-{i}");
            worker(name, outbox.clone(), handle.clone(), stopped.clone())
        })
        .collect();
    let delivered = || handles.iter().map(|h| h.stats().delivered).sum::<u64>();
    let start = Instant::now();
    while delivered() < DELIVERIES && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let letters = dead_letters(outbox.dead()).await.unwrap();
    let _ = stop.send(true);
    for thread in threads {
        let _ = thread.join();
    }
    let stats: Vec<_> = handles.iter().map(Redelivery::stats).collect();
    assert_eq!(delivered(), DELIVERIES, "{stats:?}");
    assert!(
        letters.is_empty(),
        "{} dead letters: {:?}",
        letters.len(),
        letters.first()
    );
    // The outage cost the probes and the first slots' attempts, not one attempt a delivery per
    // slot: the fleet paced the endpoint as one.
    let failed = u64::from(receiver.total_hits()) - DELIVERIES;
    assert!(
        failed < DELIVERIES,
        "{failed} attempts failed for {DELIVERIES} deliveries"
    );
}
