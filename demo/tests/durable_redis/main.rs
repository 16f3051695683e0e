//! The crash test on a fleet's engine (a redis-server of the test's own, nothing saved to disk:
//! the claim is about worker processes, not the server's): see `../durable/crash.rs`. A test
//! binary of its own, so that it never runs beside the SQLite one (each keeps 4 processes busy).

#![cfg(feature = "redis")]

#[path = "../durable/crash.rs"]
mod crash;

use test_support::servers::{self, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delivery_is_lost_when_workers_are_killed_on_redis() {
    let Some(binary) = servers::require(
        servers::REDIS,
        "durable_redis::no_delivery_is_lost_when_workers_are_killed_on_redis",
    ) else {
        return;
    };
    let port = servers::free_port();
    let _server = Server::redis(&binary, port);
    let url = format!("redis://127.0.0.1:{port}/");
    let outbox = demo::durable::open_redis(&url).await;
    crash::no_delivery_is_lost_when_workers_are_killed(demo::durable::Engine::Redis(url), outbox)
        .await;
}
